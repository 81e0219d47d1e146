/* What atoll prepare reads: the listing of FILE_OR_DIR arguments, the first pass over
 * each source (count and check) and the streaming reader of the second (see
 * text_input.h). Three layers, each pulling from the one below: file bytes (read(2)
 * into a fixed buffer), decompressed bytes (zlib's inflate, for gzip sources), text
 * (the JSON Lines parser, for JSON Lines sources). */
#define _GNU_SOURCE /* memrchr */
#include "text/text_input.h"

#include "core/clock.h"
#include "text/jsonl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IN_BYTES ((size_t)256 << 10)  /* file bytes per read(2) */
#define MID_BYTES ((size_t)256 << 10) /* decompressed bytes per inflate call */
#define OUT_BYTES ((size_t)256 << 10) /* JSON Lines text per piece */
#define MAX_DEPTH 64                  /* directory levels walked */

/* ------------------------------------------------------------- the listing --- */

static int list_add(atoll_text_list *l, const char *path, atoll_err *err) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    char **grown = realloc(l->paths, sizeof(char *) * (size_t)cap);
    if (!grown) return atoll_fail(err, "out of memory listing the input files");
    l->paths = grown;
    l->cap = cap;
  }
  if (!(l->paths[l->n] = strdup(path))) return atoll_fail(err, "out of memory listing the input files");
  l->n++;
  return 0;
}

void atoll_text_list_free(atoll_text_list *l) {
  for (int i = 0; i < l->n; i++) free(l->paths[i]);
  free(l->paths);
  *l = (atoll_text_list){0};
}

typedef struct {
  dev_t dev[3];
  ino_t ino[3];
  int n;
} skip_set;

static int skipped(const skip_set *s, const struct stat *st) {
  for (int i = 0; i < s->n; i++)
    if (s->dev[i] == st->st_dev && s->ino[i] == st->st_ino) return 1;
  return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_index(const char *name) { /* fortune's strfile index */
  size_t len = strlen(name);
  return len > 4 && strcmp(name + len - 4, ".dat") == 0;
}

/* dir's names, sorted; hidden ones left out. */
static int read_names(const char *dir, atoll_text_list *names, atoll_err *err) {
  DIR *d = opendir(dir);
  if (!d) return atoll_fail(err, "%s: cannot read directory: %s", dir, strerror(errno));
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d));)
    if (e->d_name[0] != '.') rc = list_add(names, e->d_name, err);
  closedir(d);
  if (rc == 0 && names->n > 1) qsort(names->paths, (size_t)names->n, sizeof(char *), cmp_name);
  return rc;
}

static int walk(atoll_text_list *l, const char *dir, int depth, const skip_set *skip, atoll_err *err) {
  if (depth > MAX_DEPTH) return atoll_fail(err, "%s: directories nested deeper than %d", dir, MAX_DEPTH);
  atoll_text_list names = {0};
  int rc = read_names(dir, &names, err);
  for (int i = 0; rc == 0 && i < names.n; i++) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, names.paths[i]) >= (int)sizeof path) {
      rc = atoll_fail(err, "%.200s/...: path too long", dir);
      break;
    }
    struct stat st;
    if (lstat(path, &st) != 0) continue; /* removed meanwhile */
    if (S_ISDIR(st.st_mode) && !skipped(skip, &st))
      rc = walk(l, path, depth + 1, skip, err);
    else if (S_ISREG(st.st_mode) && !is_index(names.paths[i]))
      rc = list_add(l, path, err);
  }
  atoll_text_list_free(&names);
  return rc;
}

int atoll_text_list_expand(atoll_text_list *l, const char *const *args, int nargs, const char *skip,
                           atoll_err *err) {
  skip_set sk = {.n = 0};
  for (int i = 0; skip && i < 3; i++) {
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s%s", skip, i == 0 ? "" : i == 1 ? ".atoll-new" : ".atoll-old");
    if (stat(p, &st) == 0) {
      sk.dev[sk.n] = st.st_dev;
      sk.ino[sk.n++] = st.st_ino;
    }
  }
  for (int i = 0; i < nargs; i++) {
    struct stat st;
    if (stat(args[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
      if (list_add(l, args[i], err) != 0) return -1;
      continue;
    }
    int before = l->n;
    if (walk(l, args[i], 0, &sk, err) != 0) return -1;
    if (l->n == before) return atoll_fail(err, "%s: directory holds no text files", args[i]);
  }
  return 0;
}

/* ------------------------------------------------------------- the reader --- */

struct atoll_text_reader {
  const char *path;
  int fd;
  int gzip, jsonl;
  uint64_t expect;   /* text bytes the scan found; UINT64_MAX while scanning */
  uint64_t produced; /* text bytes returned */
  uint64_t read_new; /* file bytes read since the last atoll_text_reader_take_read */
  uint64_t read_all;
  int eof;           /* read(2) returned 0 */
  uint8_t *in;       /* file bytes [in_pos, in_len) not yet used */
  size_t in_len, in_pos;
  z_stream z;
  int z_open, z_member_done;
  uint8_t *mid;      /* decompressed bytes */
  atoll_jsonl js;
  int js_done;
  const uint8_t *pend; /* bytes below the JSON Lines parser not yet fed to it */
  size_t pend_n;
  uint8_t *out;      /* JSON Lines text */
};

void atoll_text_reader_close(atoll_text_reader *r) {
  if (!r) return;
  if (r->fd >= 0) close(r->fd);
  if (r->z_open) inflateEnd(&r->z);
  free(r->in);
  free(r->mid);
  free(r->out);
  free(r);
}

uint64_t atoll_text_reader_take_read(atoll_text_reader *r) {
  uint64_t n = r->read_new;
  r->read_new = 0;
  return n;
}

/* Opens path for reading; only a regular file passes. *size: its size. */
static int open_regular(const char *path, uint64_t *size, atoll_err *err) {
  /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return atoll_fail(err, "%s: cannot read: %s", path, strerror(errno));
  struct stat st;
  int rc = fstat(fd, &st);
  if (rc != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    close(fd);
    if (rc != 0) return atoll_fail(err, "%s: cannot read: %s", path, strerror(e));
    if (S_ISDIR(st.st_mode)) return atoll_fail(err, "%s: is a directory, expected a text file", path);
    return atoll_fail(err, "%s: not a regular file%s", path, S_ISFIFO(st.st_mode) ? " (a FIFO)" : "");
  }
  *size = (uint64_t)st.st_size;
  return fd;
}

static int new_reader(atoll_text_reader **out, const char *path, int fd, int gzip, int jsonl,
                      const char *field, atoll_err *err) {
  atoll_text_reader *r = calloc(1, sizeof *r);
  if (!r) {
    close(fd);
    return atoll_fail(err, "%s: out of memory", path);
  }
  r->path = path;
  r->fd = fd;
  r->gzip = gzip;
  r->jsonl = jsonl;
  r->expect = UINT64_MAX;
  r->in = malloc(IN_BYTES);
  int ok = r->in != NULL;
  if (ok && gzip) {
    ok = (r->mid = malloc(MID_BYTES)) != NULL;
    /* 15 + 16: a gzip wrapper (not zlib's, not raw deflate) */
    if (ok && inflateInit2(&r->z, 15 + 16) != Z_OK) ok = 0;
    r->z_open = ok;
  }
  if (ok && jsonl) {
    if (atoll_jsonl_init(&r->js, path, field, err) != 0) {
      atoll_text_reader_close(r);
      return -1;
    }
    ok = (r->out = malloc(OUT_BYTES)) != NULL;
  }
  if (!ok) {
    atoll_text_reader_close(r);
    return atoll_fail(err, "%s: out of memory for the reader", path);
  }
  *out = r;
  return 0;
}

/* Refills the file buffer once it is used up; sets eof at the end. */
static int fill(atoll_text_reader *r, atoll_err *err) {
  if (r->in_pos < r->in_len || r->eof) return 0;
  ssize_t got;
  do got = read(r->fd, r->in, IN_BYTES);
  while (got < 0 && errno == EINTR);
  if (got < 0) return atoll_fail(err, "%s: cannot read: %s", r->path, strerror(errno));
  r->in_pos = 0;
  r->in_len = (size_t)got;
  r->eof = got == 0;
  r->read_new += (uint64_t)got;
  r->read_all += (uint64_t)got;
  return 0;
}

/* Decompressed bytes of a gzip source (members one after another); *n = 0 at the end. */
static int inflate_next(atoll_text_reader *r, const uint8_t **p, size_t *n, atoll_err *err) {
  for (;;) {
    if (r->z.avail_in == 0) {
      if (fill(r, err) != 0) return -1;
      r->z.next_in = r->in + r->in_pos;
      r->z.avail_in = (uInt)(r->in_len - r->in_pos);
      r->in_pos = r->in_len; /* handed to zlib */
    }
    if (r->z_member_done) {
      if (r->z.avail_in == 0 && r->eof) {
        *n = 0;
        return 0;
      }
      inflateReset(&r->z); /* another member follows (cat a.gz b.gz) */
      r->z_member_done = 0;
    }
    if (r->z.avail_in == 0 && r->eof)
      return atoll_fail(err, "%s: truncated gzip data (the file ends inside a compressed stream)", r->path);
    r->z.next_out = r->mid;
    r->z.avail_out = (uInt)MID_BYTES;
    int ret = inflate(&r->z, Z_NO_FLUSH);
    if (ret == Z_STREAM_END) {
      r->z_member_done = 1;
    } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
      return atoll_fail(err, "%s: corrupt gzip data near compressed byte %" PRIu64 ": %s", r->path,
                        r->read_all - r->z.avail_in, r->z.msg ? r->z.msg : "inflate failed");
    }
    *n = MID_BYTES - r->z.avail_out;
    *p = r->mid;
    if (*n > 0) return 0;
  }
}

/* The bytes below the text layer: the file's, or decompressed. */
static int bytes_next(atoll_text_reader *r, const uint8_t **p, size_t *n, atoll_err *err) {
  if (r->gzip) return inflate_next(r, p, n, err);
  if (fill(r, err) != 0) return -1;
  *p = r->in + r->in_pos;
  *n = r->in_len - r->in_pos;
  r->in_pos = r->in_len;
  return 0;
}

/* JSON Lines text: fills the output buffer at least half before returning. */
static int jsonl_next(atoll_text_reader *r, const uint8_t **p, size_t *n, atoll_err *err) {
  size_t len = 0;
  r->js.doc_ended = 0;
  while (!r->js_done && len < OUT_BYTES / 2 && !(r->js.stop_at_doc && r->js.doc_ended)) {
    if (r->pend_n == 0) {
      if (bytes_next(r, &r->pend, &r->pend_n, err) != 0) return -1;
      if (r->pend_n == 0) {
        if (atoll_jsonl_finish(&r->js, r->out, OUT_BYTES, &len, err) != 0) return -1;
        r->js_done = 1;
        break;
      }
    }
    size_t used;
    if (atoll_jsonl_feed(&r->js, r->pend, r->pend_n, &used, r->out, OUT_BYTES, &len, err) != 0) return -1;
    r->pend += used;
    r->pend_n -= used;
  }
  *p = r->out;
  *n = len;
  return 0;
}

static int next_piece(atoll_text_reader *r, const uint8_t **data, size_t *n, int *doc_end, atoll_err *err) {
  *n = 0;
  int rc = r->jsonl ? jsonl_next(r, data, n, err) : bytes_next(r, data, n, err);
  if (rc != 0) return -1;
  *doc_end = r->jsonl && r->js.stop_at_doc && r->js.doc_ended;
  r->produced += *n;
  if (r->expect != UINT64_MAX &&
      (r->produced > r->expect || (*n == 0 && !*doc_end && r->produced != r->expect)))
    return atoll_fail(err, "%s: changed while prepare read it (%" PRIu64 " bytes of text at the "
                      "first pass, %" PRIu64 "%s now)", r->path, r->expect, r->produced,
                      *n ? " and more" : "");
  return 0;
}

int atoll_text_reader_next(atoll_text_reader *r, const uint8_t **data, size_t *n, atoll_err *err) {
  int doc_end;
  return next_piece(r, data, n, &doc_end, err);
}

int atoll_text_reader_next_doc(atoll_text_reader *r, const uint8_t **data, size_t *n, int *doc_end,
                               atoll_err *err) {
  r->js.stop_at_doc = 1;
  return next_piece(r, data, n, doc_end, err);
}

/* ------------------------------------------------------------- the sources --- */

static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && strcmp(s + a - b, tail) == 0;
}

int atoll_text_source_streamed(const atoll_text_source *s) { return s->gzip || s->jsonl; }

/* Opens s->path and fills what its first bytes and name say. Returns the descriptor. */
static int open_source(atoll_text_source *s, const char *path, atoll_err *err) {
  memset(s, 0, sizeof *s);
  s->path = path;
  int fd = open_regular(path, &s->stored_bytes, err);
  if (fd < 0) return -1;
  uint8_t head[8] = {0};
  ssize_t got = pread(fd, head, sizeof head, 0);
  if (got < 0) {
    int e = errno;
    close(fd);
    return atoll_fail(err, "%s: cannot read: %s", path, strerror(e));
  }
  s->gzip = got >= 2 && head[0] == 0x1f && head[1] == 0x8b;
  s->jsonl = ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz");
  if (ends_with(path, ".gz") && !s->gzip) {
    close(fd);
    return atoll_fail(err, "%s: named .gz but is not gzip data (no 1f 8b magic)", path);
  }
  if (!s->gzip && got == 8 && memcmp(head, ATOLL_TOKEN_FILE_MAGIC, 8) == 0) {
    close(fd);
    return atoll_fail(err, "%s: is a token file (prepare's output), not text; pass the text it was made from", path);
  }
  return fd;
}

/* A plain file: its size is its text; its last newline is found from the end. */
static int scan_plain(atoll_text_source *s, int fd, atoll_err *err) {
  s->text_bytes = s->stored_bytes;
  uint8_t buf[1 << 16];
  uint64_t end = s->stored_bytes;
  while (end > 0) {
    size_t want = end < sizeof buf ? (size_t)end : sizeof buf;
    ssize_t got = pread(fd, buf, want, (off_t)(end - want));
    if (got != (ssize_t)want)
      return atoll_fail(err, "%s: cannot read: %s", s->path, got < 0 ? strerror(errno) : "file shrank");
    const uint8_t *nl = memrchr(buf, '\n', want);
    if (nl) {
      s->newline_end = end - want + (uint64_t)(nl - buf) + 1;
      break;
    }
    end -= want;
  }
  return 0;
}

/* A streamed source: all of it is read, counted and checked. */
static int scan_streamed(atoll_text_source *s, int fd, const char *field, atoll_text_on_read on_read,
                         void *ctx, atoll_err *err) {
  atoll_text_reader *r = NULL;
  if (new_reader(&r, s->path, fd, s->gzip, s->jsonl, field, err) != 0) return -1;
  int rc = 0;
  uint8_t head[8];
  size_t nhead = 0;
  for (;;) {
    const uint8_t *p;
    size_t n;
    if ((rc = atoll_text_reader_next(r, &p, &n, err)) != 0) break;
    if (on_read) on_read(ctx, atoll_text_reader_take_read(r));
    if (n == 0) break;
    const uint8_t *nl = memrchr(p, '\n', n);
    if (nl) s->newline_end = s->text_bytes + (uint64_t)(nl - p) + 1;
    for (size_t i = 0; nhead < sizeof head && i < n; i++) head[nhead++] = p[i];
    s->text_bytes += n;
  }
  s->documents = r->js.documents;
  atoll_text_reader_close(r);
  if (rc == 0 && !s->jsonl && nhead == 8 && memcmp(head, ATOLL_TOKEN_FILE_MAGIC, 8) == 0)
    return atoll_fail(err, "%s: holds a token file (prepare's output), not text; pass the text it was made from", s->path);
  return rc;
}

int atoll_text_scan(atoll_text_source *s, const char *path, const char *field,
                    atoll_text_on_read on_read, void *ctx, atoll_err *err) {
  int fd = open_source(s, path, err);
  if (fd < 0) return -1;
  if (atoll_text_source_streamed(s)) return scan_streamed(s, fd, field, on_read, ctx, err);
  int rc = scan_plain(s, fd, err);
  close(fd);
  return rc;
}

uint64_t atoll_text_work_bytes(const char *path) {
  atoll_text_source s;
  int fd = open_source(&s, path, NULL);
  if (fd < 0) return 0;
  close(fd);
  return s.stored_bytes * (atoll_text_source_streamed(&s) ? 2 : 1);
}

int atoll_text_reader_open(atoll_text_reader **r, const atoll_text_source *s, const char *field,
                           atoll_err *err) {
  uint64_t size;
  int fd = open_regular(s->path, &size, err);
  if (fd < 0) return -1;
  if (new_reader(r, s->path, fd, s->gzip, s->jsonl, field, err) != 0) return -1;
  (*r)->expect = s->text_bytes;
  return 0;
}

/* ----------------------------------------------------------- the progress --- */

static void show(atoll_text_progress *p, double now) {
  double mb = (double)p->done / 1e6, rate = now > p->start ? mb / (now - p->start) : 0;
  char eta[32] = "";
  if (p->total > 0 && rate > 0 && p->done <= p->total) {
    double left = (double)(p->total - p->done) / 1e6 / rate;
    snprintf(eta, sizeof eta, ", ETA %d:%02d", (int)left / 60, (int)left % 60);
  }
  fprintf(stderr, "%satoll prepare: %s: %.1f of %.1f MB read (%.0f%%), %.1f MB/s, %.1f MB of text%s%s",
          p->tty ? "\r" : "", p->what, mb, (double)p->total / 1e6,
          p->total ? 100.0 * (double)p->done / (double)p->total : 100.0, rate,
          (double)p->text / 1e6, eta, p->tty ? "\033[K" : "\n");
  fflush(stderr);
  p->shown = 1;
  p->last = now;
}

void atoll_text_progress_start(atoll_text_progress *p, int on, uint64_t total) {
  *p = (atoll_text_progress){.on = on, .tty = on && isatty(STDERR_FILENO), .total = total,
                             .what = "checking"};
  p->start = p->last = atoll_seconds();
}

void atoll_text_progress_text(atoll_text_progress *p, uint64_t bytes) { p->text += bytes; }

void atoll_text_progress_add(void *ctx, uint64_t bytes) {
  atoll_text_progress *p = ctx;
  p->done += bytes;
  if (!p->on) return;
  double now = atoll_seconds();
  if (now - p->last >= (p->tty ? 0.2 : 10.0)) show(p, now);
}

void atoll_text_progress_end(atoll_text_progress *p, int ok) {
  if (!p->on) return;
  if (p->tty && p->shown) fputs("\r\033[K", stderr); /* an error line takes its place */
  if (ok && p->shown) {
    double secs = atoll_seconds() - p->start;
    fprintf(stderr, "atoll prepare: read %.1f MB in %.1f s (%.1f MB/s), wrote %.1f MB of text\n",
            (double)p->done / 1e6, secs, secs > 0 ? (double)p->done / 1e6 / secs : 0.0,
            (double)p->text / 1e6);
  }
}

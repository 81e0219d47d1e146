/* atoll prepare: turns text files into token files with the byte-level tokenizer
 * (token = byte value, vocabulary 256).
 *
 * Each input's last val_fraction of bytes, moved forward to the start of the next
 * line when there is one, goes to the validation split and the rest to training;
 * inputs are concatenated in the order given. Every split is written as
 * DIR/<split>_000.bin, _001.bin, ... of at most FILE_TOKENS tokens each, then
 * DIR/manifest.json describes the result. All inputs are checked before anything
 * is written. */
#define _POSIX_C_SOURCE 200809L
#include "data/token_file.h"

#include "core/fs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_TOKENS ((uint64_t)64 << 20) /* 64 Mi tokens per token file at most */
#define CHUNK 4096                         /* bytes converted to tokens per writer call */

typedef struct {
  const char *path;
  const uint8_t *data; /* mapped file, NULL when empty */
  size_t size;
  size_t cut; /* [0, cut) trains, [cut, size) validates */
} source;

/* One split being written: rolls over to a new token file every FILE_TOKENS tokens. */
typedef struct {
  const char *dir;
  const char *split;
  int nfiles;  /* token files started so far */
  int open;     /* whether w holds an unfinished token file */
  atoll_token_file_writer w;
  uint64_t tokens;
} split_out;

/* ------------------------------------------------------------- sources --- */

static size_t cut_point(const uint8_t *data, size_t size, double val_fraction) {
  size_t nval = (size_t)((double)size * val_fraction);
  if (nval == 0) return size;
  size_t cut = size - nval;
  if (data[cut - 1] == '\n') return cut; /* already at a line start */
  const uint8_t *nl = memchr(data + cut, '\n', size - cut);
  return nl ? (size_t)(nl - data) + 1 : cut;
}

static int load_source(source *s, const char *path, double val_fraction, atoll_err *err) {
  memset(s, 0, sizeof *s);
  s->path = path;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return atoll_fail(err, "%s: cannot read: %s", path, strerror(errno));
  struct stat st;
  int rc = fstat(fd, &st);
  if (rc != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    close(fd);
    if (rc != 0) return atoll_fail(err, "%s: cannot read: %s", path, strerror(e));
    if (S_ISDIR(st.st_mode))
      return atoll_fail(err, "%s: is a directory, expected a text file", path);
    return atoll_fail(err, "%s: not a regular file", path);
  }
  s->size = (size_t)st.st_size;
  if (s->size > 0) {
    void *map = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int e = errno;
      close(fd);
      return atoll_fail(err, "%s: cannot read: %s", path, strerror(e));
    }
    s->data = map;
  }
  close(fd);
  s->cut = s->size ? cut_point(s->data, s->size, val_fraction) : 0;
  return 0;
}

static void free_sources(source *src, int n) {
  for (int i = 0; i < n; i++)
    if (src[i].data) munmap((void *)src[i].data, src[i].size);
  free(src);
}

/* Loads every input and checks the totals; *out holds n sources even on failure. */
static int load_sources(source **out, const char *const *files, int nfiles, double vf,
                        atoll_err *err) {
  *out = calloc((size_t)nfiles, sizeof **out);
  if (!*out) return atoll_fail(err, "prepare: out of memory");
  uint64_t total = 0, val = 0;
  for (int i = 0; i < nfiles; i++) {
    if (load_source(&(*out)[i], files[i], vf, err) != 0) return -1;
    total += (*out)[i].size;
    val += (*out)[i].size - (*out)[i].cut;
  }
  if (total == 0) return atoll_fail(err, "prepare: input is empty (%d file(s), 0 bytes)", nfiles);
  if (val == 0)
    return atoll_fail(err, "prepare: validation split would be empty (val_fraction %g of %" PRIu64
                      " bytes); raise val_fraction or add text", vf, total);
  return 0;
}

/* ---------------------------------------------------------------- output --- */

static int split_path(char *buf, size_t cap, const char *dir, const char *split, int n,
                      atoll_err *err) {
  int len = snprintf(buf, cap, "%s/%s_%03d.bin", dir, split, n);
  if (len < 0 || (size_t)len >= cap) return atoll_fail(err, "%.200s: path too long", dir);
  return 0;
}

static int split_put(split_out *o, const uint8_t *bytes, size_t n, atoll_err *err) {
  int32_t tok[CHUNK];
  while (n > 0) {
    if (!o->open) {
      char path[1024];
      if (split_path(path, sizeof path, o->dir, o->split, o->nfiles, err) != 0) return -1;
      if (atoll_token_file_writer_open(&o->w, path, ATOLL_BYTE_VOCAB, err) != 0) return -1;
      o->open = 1;
      o->nfiles++;
    }
    uint64_t room = FILE_TOKENS - o->w.ntokens;
    size_t take = n < CHUNK ? n : CHUNK;
    if (take > room) take = (size_t)room;
    for (size_t i = 0; i < take; i++) tok[i] = bytes[i];
    if (atoll_token_file_writer_put(&o->w, tok, take, err) != 0) {
      o->open = 0; /* the writer aborted itself */
      return -1;
    }
    o->tokens += take;
    bytes += take;
    n -= take;
    if (o->w.ntokens == FILE_TOKENS) {
      o->open = 0;
      if (atoll_token_file_writer_finish(&o->w, err) != 0) return -1;
    }
  }
  return 0;
}

static int split_finish(split_out *o, atoll_err *err) {
  if (!o->open) return 0;
  o->open = 0;
  return atoll_token_file_writer_finish(&o->w, err);
}

/* Token files left by an earlier, larger prepare would otherwise join this split. */
static void remove_stale(const split_out *o) {
  char path[1024];
  for (int n = o->nfiles;; n++) {
    if (split_path(path, sizeof path, o->dir, o->split, n, NULL) != 0) return;
    if (unlink(path) != 0) return;
  }
}

static int write_split(split_out *o, const source *src, int n, int val, atoll_err *err) {
  for (int i = 0; i < n; i++) {
    const source *s = &src[i];
    const uint8_t *p = val ? s->data + s->cut : s->data;
    size_t len = val ? s->size - s->cut : s->cut;
    if (len > 0 && split_put(o, p, len, err) != 0) return -1;
  }
  if (split_finish(o, err) != 0) return -1;
  remove_stale(o);
  return 0;
}

/* ------------------------------------------------------------- manifest --- */

static cJSON *manifest_json(const source *src, int n, double vf, const split_out *train,
                            const split_out *val) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "tokenizer", "bytes");
  cJSON_AddNumberToObject(root, "vocab", ATOLL_BYTE_VOCAB);
  cJSON_AddNumberToObject(root, "val_fraction", vf);
  cJSON_AddNumberToObject(root, "train_tokens", (double)train->tokens);
  cJSON_AddNumberToObject(root, "train_files", train->nfiles);
  cJSON_AddNumberToObject(root, "val_tokens", (double)val->tokens);
  cJSON_AddNumberToObject(root, "val_files", val->nfiles);
  cJSON *files = cJSON_AddArrayToObject(root, "sources");
  for (int i = 0; i < n; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", src[i].path);
    cJSON_AddNumberToObject(f, "bytes", (double)src[i].size);
    cJSON_AddNumberToObject(f, "train_bytes", (double)src[i].cut);
    cJSON_AddNumberToObject(f, "val_bytes", (double)(src[i].size - src[i].cut));
    cJSON_AddItemToArray(files, f);
  }
  return root;
}

/* Writes text to path atomically (path.tmp, fsync, rename). */
static int write_text_atomic(const char *path, const char *text, atoll_err *err) {
  char tmp[1040];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return atoll_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
  int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int e = errno;
  if (fclose(f) != 0 && ok) ok = 0, e = errno;
  if (!ok || rename(tmp, path) != 0) {
    if (ok) e = errno;
    unlink(tmp);
    return atoll_fail(err, "%s: cannot write: %s", path, strerror(e));
  }
  return 0;
}

static int write_manifest(const char *dir, const source *src, int n, double vf,
                          const split_out *train, const split_out *val, atoll_err *err) {
  char path[1024];
  if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path)
    return atoll_fail(err, "%.200s: path too long", dir);
  cJSON *root = manifest_json(src, n, vf, train, val);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return atoll_fail(err, "%s: out of memory", path);
  int rc = write_text_atomic(path, text, err);
  cJSON_free(text);
  return rc;
}

/* ----------------------------------------------------------------- entry --- */

int atoll_prepare(const char *const *files, int nfiles, const char *outdir, double val_fraction,
                  atoll_err *err) {
  if (!(val_fraction >= 0.0 && val_fraction <= 0.5)) /* also rejects NaN */
    return atoll_fail(err, "prepare: val_fraction %g outside [0, 0.5]", val_fraction);
  if (nfiles <= 0) return atoll_fail(err, "prepare: no input files");
  source *src = NULL;
  split_out train = {.dir = outdir, .split = "train"};
  split_out val = {.dir = outdir, .split = "val"};
  int rc = -1;
  if (load_sources(&src, files, nfiles, val_fraction, err) == 0 && atoll_mkdir_p(outdir, err) == 0 &&
      write_split(&train, src, nfiles, 0, err) == 0 && write_split(&val, src, nfiles, 1, err) == 0)
    rc = write_manifest(outdir, src, nfiles, val_fraction, &train, &val, err);
  if (train.open) atoll_token_file_writer_abort(&train.w);
  if (val.open) atoll_token_file_writer_abort(&val.w);
  if (src) free_sources(src, nfiles);
  return rc;
}

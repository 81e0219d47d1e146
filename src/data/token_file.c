/* Token files: one flat file of token ids, memory-mapped for training.
 *
 * File format, version 1 (all integers little-endian):
 *
 *   offset  size  field
 *   ------  ----  -----------------------------------------------------------------
 *        0     8  magic, the ASCII bytes "ATOLLTOK"
 *        8     4  u32 format version = 1
 *       12     4  u32 vocabulary size V, 1 <= V <= 2^31
 *       16     8  u64 token count N
 *       24     4  u32 token width W in bytes: 1, 2 or 4, the smallest that holds V-1
 *       28     4  u32 reserved = 0
 *       32   N*W  the tokens, each an unsigned little-endian integer of W bytes, < V
 *
 * The file is exactly 32 + N*W bytes long. A reader trusts nothing: every field,
 * the file size and every token are checked before the token file is used (see
 * atoll_token_file_parse), so a damaged or hostile file gives a one-line error, never a
 * crash. The same table is in docs/formats.md ("Token files").
 */
#define _POSIX_C_SOURCE 200809L
#include "data/token_file.h"

#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define WRITE_BUF (1u << 16) /* bytes of encoded tokens buffered by the writer */

/* ------------------------------------------------------------ byte order --- */

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* Token i of an encoded token array; byte-wise, so any alignment works. */
static uint32_t token_at(const uint8_t *p, uint32_t width, uint64_t i) {
  switch (width) {
    case 1: return p[i];
    case 2: return (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
    default: return get_u32(p + 4 * i);
  }
}

uint32_t atoll_token_file_width_for(uint32_t vocab) {
  if (vocab <= 0x100u) return 1;
  if (vocab <= 0x10000u) return 2;
  return 4;
}

/* ---------------------------------------------------------------- reading --- */

static int check_header(const char *name, const uint8_t *p, size_t size, atoll_err *err) {
  if (size == 0) return atoll_fail(err, "%s: empty file (not a token file)", name);
  if (size < ATOLL_TOKEN_FILE_HEADER)
    return atoll_fail(err, "%s: truncated header: file has %zu bytes, a token file header needs %u",
                      name, size, ATOLL_TOKEN_FILE_HEADER);
  if (memcmp(p, ATOLL_TOKEN_FILE_MAGIC, 8) != 0)
    return atoll_fail(err, "%s: bad magic: not an atoll token file", name);
  uint32_t version = get_u32(p + 8), vocab = get_u32(p + 12), width = get_u32(p + 24);
  if (version != ATOLL_TOKEN_FILE_VERSION)
    return atoll_fail(err, "%s: unsupported version %" PRIu32 " (this build reads version %u)",
                      name, version, ATOLL_TOKEN_FILE_VERSION);
  if (vocab == 0 || vocab > ATOLL_TOKEN_FILE_MAX_VOCAB)
    return atoll_fail(err, "%s: bad vocabulary size %" PRIu32 " (must be 1 to 2^31)", name, vocab);
  if (width != 1 && width != 2 && width != 4)
    return atoll_fail(err, "%s: bad token width %" PRIu32 " (must be 1, 2 or 4)", name, width);
  if (width < atoll_token_file_width_for(vocab))
    return atoll_fail(err, "%s: bad token width %" PRIu32 ": too small for vocabulary %" PRIu32,
                      name, width, vocab);
  uint32_t reserved = get_u32(p + 28);
  if (reserved != 0)
    return atoll_fail(err, "%s: reserved header field is %" PRIu32 ", must be 0", name, reserved);
  return 0;
}

/* The header's token count must account for the file size exactly. */
static int check_size(const char *name, uint64_t ntokens, uint32_t width, size_t size,
                      atoll_err *err) {
  if (ntokens > (UINT64_MAX - ATOLL_TOKEN_FILE_HEADER) / width)
    return atoll_fail(err, "%s: truncated: header says %" PRIu64 " tokens (over 2^64 bytes) "
                      "but file has %zu bytes", name, ntokens, size);
  uint64_t want = ATOLL_TOKEN_FILE_HEADER + ntokens * width;
  if (want > (uint64_t)size)
    return atoll_fail(err, "%s: truncated: header says %" PRIu64 " tokens (%" PRIu64 " bytes) "
                      "but file has %zu bytes", name, ntokens, want, size);
  if (want < (uint64_t)size)
    return atoll_fail(err, "%s: file too long: header says %" PRIu64 " tokens (%" PRIu64
                      " bytes) but file has %zu bytes", name, ntokens, want, size);
  return 0;
}

/* Largest token, one loop per width so each vectorizes. */
static uint32_t max_token(const uint8_t *p, uint32_t width, uint64_t n) {
  uint32_t m = 0;
  if (width == 1)
    for (uint64_t i = 0; i < n; i++) m = p[i] > m ? p[i] : m;
  else if (width == 2)
    for (uint64_t i = 0; i < n; i++) m = token_at(p, 2, i) > m ? token_at(p, 2, i) : m;
  else
    for (uint64_t i = 0; i < n; i++) m = token_at(p, 4, i) > m ? token_at(p, 4, i) : m;
  return m;
}

static int check_tokens(const char *name, const uint8_t *p, uint32_t width, uint64_t n,
                        uint32_t vocab, uint32_t max, atoll_err *err) {
  if (n == 0 || max < vocab) return 0;
  uint64_t i = 0; /* the first offender, for the message */
  while (token_at(p, width, i) < vocab) i++;
  return atoll_fail(err, "%s: token %" PRIu32 " at index %" PRIu64
                    " out of range for vocabulary %" PRIu32, name, token_at(p, width, i), i, vocab);
}

uint64_t atoll_token_file_hash(const uint8_t *p, uint64_t n) {
  const uint64_t k = 0x9e3779b97f4a7c15ull;
  uint64_t h = 0x6174006f6c6c0001ull ^ (n * k), i = 0;
  for (; i + 8 <= n; i += 8) {
    h = (h ^ get_u64(p + i)) * k;
    h ^= h >> 29;
  }
  for (; i < n; i++) {
    h = (h ^ p[i]) * k;
    h ^= h >> 29;
  }
  h ^= h >> 32;
  return h * k ^ (h >> 31);
}

int atoll_token_file_parse(atoll_token_file *sh, const char *name, const void *buf, size_t size,
                           atoll_err *err) {
  memset(sh, 0, sizeof *sh);
  const uint8_t *p = buf;
  if (check_header(name, p, size, err)) return -1;
  uint32_t vocab = get_u32(p + 12), width = get_u32(p + 24);
  uint64_t ntokens = get_u64(p + 16);
  if (check_size(name, ntokens, width, size, err)) return -1;
  const uint8_t *tokens = p + ATOLL_TOKEN_FILE_HEADER;
  uint32_t max = max_token(tokens, width, ntokens);
  if (check_tokens(name, tokens, width, ntokens, vocab, max, err)) return -1;
  snprintf(sh->path, sizeof sh->path, "%s", name);
  sh->max_token = max;
  sh->hash = atoll_token_file_hash(tokens, ntokens * width);
  sh->vocab = vocab;
  sh->width = width;
  sh->ntokens = ntokens;
  sh->tokens = p + ATOLL_TOKEN_FILE_HEADER;
  return 0;
}

/* --------------------------------------------------------- mapping guard --- */

/* A token file cut short while it is mapped makes a read past its new end raise
 * SIGBUS. Every mapping is registered here, and the handler, once the program has
 * installed it (atoll_token_file_guard_install; src/cli/main.c does), turns such a fault
 * into one line naming the file and exit status 1 (the job cannot go on without its
 * data); a fault elsewhere goes to the previous handler. The library itself never
 * installs it: a program that does not call the install function keeps the plain
 * SIGBUS. Mappings past GUARD_SLOTS keep the plain SIGBUS too.
 *
 * Each slot holds its own copy of the path, in static storage, so that the handler
 * reads no memory that a caller or guard_remove may free. */
#define GUARD_SLOTS 4096
#define GUARD_PATH ((size_t)sizeof(((atoll_token_file *)0)->path))

typedef struct {
  _Atomic uintptr_t begin; /* 0: free slot */
  uintptr_t end;
  char path[GUARD_PATH]; /* NUL-terminated; written only while begin is 0 */
} guard_slot;

static guard_slot guards[GUARD_SLOTS];
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static struct sigaction guard_prev;
static int guard_errno; /* 0, or why sigaction failed */

/* Writes at most max bytes of s, up to its NUL, to stderr (async-signal-safe). */
static void put_str(const char *s, size_t max) {
  size_t n = 0;
  while (n < max && s[n]) n++;
  while (n > 0) {
    ssize_t k = write(2, s, n);
    if (k <= 0) return;
    s += k;
    n -= (size_t)k;
  }
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
  (void)sig, (void)ctx;
  uintptr_t a = (uintptr_t)si->si_addr;
  for (int i = 0; i < GUARD_SLOTS; i++) {
    uintptr_t b = atomic_load(&guards[i].begin);
    if (b && a >= b && a < guards[i].end) {
      put_str("atoll: fatal: ", 64);
      put_str(guards[i].path, GUARD_PATH);
      put_str(": token file shrank while in use (read past its end); was it rewritten or "
              "truncated during training?\n", 256);
      _exit(1);
    }
  }
  sigaction(SIGBUS, &guard_prev, NULL); /* not ours: the fault repeats under it */
}

static void guard_install_once(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &guard_prev) != 0) guard_errno = errno;
}

int atoll_token_file_guard_install(atoll_err *err) {
  pthread_once(&guard_once, guard_install_once);
  if (guard_errno) return atoll_fail(err, "SIGBUS: cannot install the token file guard: %s", strerror(guard_errno));
  return 0;
}

static void guard_add(const void *map, size_t size, const char *path) {
  pthread_mutex_lock(&guard_lock);
  for (int i = 0; i < GUARD_SLOTS; i++)
    if (!atomic_load(&guards[i].begin)) {
      guards[i].end = (uintptr_t)map + size;
      snprintf(guards[i].path, sizeof guards[i].path, "%s", path); /* the caller checked its length */
      atomic_store(&guards[i].begin, (uintptr_t)map); /* published last */
      break;
    }
  pthread_mutex_unlock(&guard_lock);
}

static void guard_remove(const void *map) {
  pthread_mutex_lock(&guard_lock);
  for (int i = 0; i < GUARD_SLOTS; i++)
    if (atomic_load(&guards[i].begin) == (uintptr_t)map) {
      atomic_store(&guards[i].begin, 0);
      break;
    }
  pthread_mutex_unlock(&guard_lock);
}

/* ---------------------------------------------------------------- opening --- */

/* Opens path for reading if it is a regular file. O_NONBLOCK: opening a FIFO for
 * reading would otherwise wait for a writer forever. */
static int open_regular(const char *path, size_t *size, atoll_err *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return atoll_fail(err, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return atoll_fail(err, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return atoll_fail(err, "%s: not a regular file (%s); token files are written by atoll prepare",
                      path, S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                      : "a device or socket");
  }
  *size = (size_t)st.st_size;
  return fd;
}

int atoll_token_file_open(atoll_token_file *sh, const char *path, atoll_err *err) {
  memset(sh, 0, sizeof *sh);
  if (strlen(path) >= sizeof sh->path)
    return atoll_fail(err, "%.200s...: path too long", path);
  size_t size = 0;
  int fd = open_regular(path, &size, err);
  if (fd < 0) return -1;
  void *map = NULL;
  if (size > 0) { /* mmap rejects length 0; parse reports the empty file */
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int e = errno;
      close(fd);
      return atoll_fail(err, "%s: cannot map: %s", path, strerror(e));
    }
    guard_add(map, size, path); /* before parse: it reads every page */
  }
  close(fd);
  if (atoll_token_file_parse(sh, path, map, size, err) != 0) {
    if (map) {
      guard_remove(map);
      munmap(map, size);
    }
    return -1;
  }
  sh->map = map;
  sh->map_size = size;
  return 0;
}

void atoll_token_file_close(atoll_token_file *sh) {
  if (sh->map) {
    guard_remove(sh->map);
    munmap(sh->map, sh->map_size);
  }
  memset(sh, 0, sizeof *sh);
}

int32_t atoll_token_file_token(const atoll_token_file *sh, uint64_t i) {
  if (i >= sh->ntokens) return -1;
  return (int32_t)token_at(sh->tokens, sh->width, i);
}

void atoll_token_file_read(const atoll_token_file *sh, uint64_t start, uint64_t n, int32_t *out) {
  const uint8_t *p = sh->tokens;
  switch (sh->width) { /* one loop per width keeps the inner loop branch-free */
    case 1:
      for (uint64_t i = 0; i < n; i++) out[i] = p[start + i];
      break;
    case 2:
      for (uint64_t i = 0; i < n; i++) out[i] = (int32_t)token_at(p, 2, start + i);
      break;
    default:
      for (uint64_t i = 0; i < n; i++) out[i] = (int32_t)token_at(p, 4, start + i);
      break;
  }
}

int atoll_token_file_path(char *buf, size_t cap, const char *dir, const char *split, int n,
                          atoll_err *err) {
  int len = snprintf(buf, cap, "%s/%s_%03d.bin", dir, split, n);
  if (len < 0 || (size_t)len >= cap) return atoll_fail(err, "%.200s: path too long", dir);
  return 0;
}

/* ---------------------------------------------------------------- writing --- */

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void encode_header(uint8_t *h, uint32_t vocab, uint64_t ntokens, uint32_t width) {
  memset(h, 0, ATOLL_TOKEN_FILE_HEADER);
  memcpy(h, ATOLL_TOKEN_FILE_MAGIC, 8);
  put_u32(h + 8, ATOLL_TOKEN_FILE_VERSION);
  put_u32(h + 12, vocab);
  put_u64(h + 16, ntokens);
  put_u32(h + 24, width);
}

/* After rename, the directory entry itself must reach the disk too. Best effort:
 * some file systems refuse fsync on directories. */

void atoll_token_file_writer_abort(atoll_token_file_writer *w) {
  if (w->fd >= 0) {
    close(w->fd);
    unlink(w->tmp);
  }
  w->fd = -1;
  free(w->buf);
  w->buf = NULL;
}

static int writer_fail_errno(atoll_token_file_writer *w, const char *what, atoll_err *err) {
  int e = errno;
  atoll_fail(err, "%s: cannot %s: %s", w->tmp, what, strerror(e));
  atoll_token_file_writer_abort(w);
  return -1;
}

int atoll_token_file_writer_open(atoll_token_file_writer *w, const char *path, uint32_t vocab,
                                 atoll_err *err) {
  memset(w, 0, sizeof *w);
  w->fd = -1;
  if (vocab == 0 || vocab > ATOLL_TOKEN_FILE_MAX_VOCAB)
    return atoll_fail(err, "%s: bad vocabulary size %" PRIu32 " (must be 1 to 2^31)", path, vocab);
  if (strlen(path) >= sizeof w->path) return atoll_fail(err, "%.200s...: path too long", path);
  snprintf(w->path, sizeof w->path, "%s", path);
  snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
  w->vocab = vocab;
  w->width = atoll_token_file_width_for(vocab);
  w->buf = malloc(WRITE_BUF);
  if (!w->buf) return atoll_fail(err, "%s: out of memory", path);
  w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (w->fd < 0) {
    atoll_fail(err, "%s: cannot create: %s", w->tmp, strerror(errno));
    atoll_token_file_writer_abort(w);
    return -1;
  }
  uint8_t h[ATOLL_TOKEN_FILE_HEADER];
  encode_header(h, vocab, 0, w->width); /* count filled in by finish */
  if (write_all(w->fd, h, sizeof h) != 0) return writer_fail_errno(w, "write", err);
  return 0;
}

static int writer_flush(atoll_token_file_writer *w, atoll_err *err) {
  if (write_all(w->fd, w->buf, w->used) != 0) return writer_fail_errno(w, "write", err);
  w->used = 0;
  return 0;
}

int atoll_token_file_writer_put(atoll_token_file_writer *w, const int32_t *tokens, size_t n,
                                atoll_err *err) {
  for (size_t i = 0; i < n; i++) {
    int32_t t = tokens[i];
    if (t < 0 || (uint32_t)t >= w->vocab) {
      atoll_fail(err, "%s: token %" PRId32 " at index %" PRIu64 " out of range for vocabulary %"
                 PRIu32, w->path, t, w->ntokens + i, w->vocab);
      atoll_token_file_writer_abort(w);
      return -1;
    }
    if (w->used + w->width > WRITE_BUF && writer_flush(w, err) != 0) return -1;
    for (uint32_t b = 0; b < w->width; b++) w->buf[w->used++] = (uint8_t)((uint32_t)t >> (8 * b));
  }
  w->ntokens += n;
  return 0;
}

int atoll_token_file_writer_finish(atoll_token_file_writer *w, atoll_err *err) {
  if (w->fd < 0) return atoll_fail(err, "%s: writer already closed", w->path);
  if (writer_flush(w, err) != 0) return -1;
  uint8_t h[ATOLL_TOKEN_FILE_HEADER];
  encode_header(h, w->vocab, w->ntokens, w->width);
  if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h) return writer_fail_errno(w, "write", err);
  if (fsync(w->fd) != 0) return writer_fail_errno(w, "fsync", err);
  int rc = close(w->fd);
  w->fd = -1;
  if (rc != 0) {
    atoll_fail(err, "%s: cannot close: %s", w->tmp, strerror(errno));
    unlink(w->tmp);
    atoll_token_file_writer_abort(w);
    return -1;
  }
  if (rename(w->tmp, w->path) != 0) {
    atoll_fail(err, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(errno));
    unlink(w->tmp);
    atoll_token_file_writer_abort(w);
    return -1;
  }
  rc = atoll_sync_parent_dir(w->path, err); /* the rename is durable only then */
  atoll_token_file_writer_abort(w); /* frees the buffer; the file is already in place */
  return rc;
}

int atoll_token_file_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab,
                           atoll_err *err) {
  atoll_token_file_writer w;
  if (atoll_token_file_writer_open(&w, path, vocab, err) != 0) return -1;
  if (n > SIZE_MAX) {
    atoll_token_file_writer_abort(&w);
    return atoll_fail(err, "%s: %" PRIu64 " tokens do not fit in memory", path, n);
  }
  if (atoll_token_file_writer_put(&w, tokens, (size_t)n, err) != 0) return -1;
  return atoll_token_file_writer_finish(&w, err);
}

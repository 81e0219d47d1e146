/* TensorBoard event files; see tb_events.h. The format, as written here:
 *
 * A file is a sequence of TFRecord records, each
 *   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
 *   length bytes of data, uint32 masked CRC-32C of the data,
 * where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32).
 * Each record's data is one Event protocol buffer (tensorflow/core/util/event.proto):
 *   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                Summary summary = 5; SessionLog session_log = 7; }
 *   Summary    { repeated Value value = 1; }
 *   Value      { string tag = 1; float simple_value = 2; }
 *   SessionLog { SessionStatus status = 1; }   (START = 1)
 * encoded by hand: a field is its key varint (number << 3 | wire type), then a varint
 * (type 0), 8 little-endian bytes (type 1, double), a varint length and the bytes
 * (type 2: strings, messages) or 4 little-endian bytes (type 5, float). The first
 * record is an Event holding only file_version "brain.Event:2". */
#include "train/tb_events.h"

#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint32_t atoll_crc32c(const void *data, size_t n) {
  const uint8_t *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) { /* bit by bit: records are a few hundred bytes */
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

static uint32_t masked_crc(const void *data, size_t n) {
  uint32_t c = atoll_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* A protobuf message being encoded; ok turns 0 when it outgrows its bytes. */
typedef struct {
  uint8_t b[8192];
  size_t n;
  int ok;
} pb;

static void pb_bytes(pb *m, const void *p, size_t n) {
  if (!m->ok || n > sizeof m->b - m->n) {
    m->ok = 0;
    return;
  }
  memcpy(m->b + m->n, p, n);
  m->n += n;
}

static void pb_varint(pb *m, uint64_t v) {
  uint8_t t[10];
  int n = 0;
  do {
    t[n] = (uint8_t)(v & 0x7F);
    v >>= 7;
    if (v) t[n] |= 0x80;
    n++;
  } while (v);
  pb_bytes(m, t, (size_t)n);
}

static void pb_key(pb *m, int field, int wire) { pb_varint(m, (uint64_t)field << 3 | (uint64_t)wire); }

static void pb_le(pb *m, uint64_t v, int nbytes) {
  uint8_t t[8];
  for (int i = 0; i < nbytes; i++) t[i] = (uint8_t)(v >> (8 * i));
  pb_bytes(m, t, (size_t)nbytes);
}

static void pb_double(pb *m, int field, double x) {
  uint64_t u;
  memcpy(&u, &x, 8);
  pb_key(m, field, 1);
  pb_le(m, u, 8);
}

static void pb_float(pb *m, int field, float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  pb_key(m, field, 5);
  pb_le(m, u, 4);
}

static void pb_data(pb *m, int field, const void *p, size_t n) { /* a string or an embedded message */
  pb_key(m, field, 2);
  pb_varint(m, n);
  pb_bytes(m, p, n);
}

/* An Event's head: wall_time and step. */
static void event_head(pb *e, double wall_time, int64_t step) {
  e->n = 0;
  e->ok = 1;
  pb_double(e, 1, wall_time);
  if (step) {
    pb_key(e, 2, 0);
    pb_varint(e, (uint64_t)step);
  }
}

/* One TFRecord holding the message; 0, or -1 with errno set. */
static int write_record(atoll_tb *tb, const pb *m) {
  if (!m->ok) {
    errno = EOVERFLOW;
    return -1;
  }
  uint8_t head[12];
  uint64_t len = m->n;
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
  uint32_t hc = masked_crc(head, 8), dc = masked_crc(m->b, m->n);
  for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(hc >> (8 * i));
  uint8_t tail[4];
  for (int i = 0; i < 4; i++) tail[i] = (uint8_t)(dc >> (8 * i));
  errno = 0;
  int ok = fwrite(head, 1, sizeof head, tb->f) == sizeof head && fwrite(m->b, 1, m->n, tb->f) == m->n &&
           fwrite(tail, 1, sizeof tail, tb->f) == sizeof tail && fflush(tb->f) == 0;
  if (!ok && !errno) errno = EIO;
  return ok ? 0 : -1;
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* DIR/events.out.tfevents.SECONDS.HOST.NNNN, created exclusively: NNNN counts up past
 * the files this second already has, so that a resume's file sorts after the run's
 * earlier ones (TensorBoard reads a directory's files in name order). */
static int create_file(atoll_tb *tb, const char *dir, atoll_err *err) {
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = 0;
  for (char *p = host; *p; p++)
    if (*p == '/') *p = '_';
  long long secs = (long long)time(NULL);
  for (int seq = 0; seq < 10000; seq++) {
    int n = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%04d", dir, secs, host, seq);
    if (n < 0 || (size_t)n >= sizeof tb->path) return atoll_fail(err, "--tensorboard %s: path too long", dir);
    int fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return atoll_fail(err, "%s: cannot create: %s", tb->path, strerror(errno));
    tb->f = fdopen(fd, "w");
    if (!tb->f) {
      close(fd);
      return atoll_fail(err, "%s: cannot write: %s", tb->path, strerror(errno));
    }
    return 0;
  }
  return atoll_fail(err, "--tensorboard %s: 10000 event files this second already", dir);
}

int atoll_tb_open(atoll_tb *tb, const char *dir, int64_t first_step, atoll_err *err) {
  memset(tb, 0, sizeof *tb);
  if (atoll_mkdir_p(dir, err)) return -1;
  if (create_file(tb, dir, err)) return -1;
  static const char version[] = "brain.Event:2";
  pb e;
  double now = wall_now();
  event_head(&e, now, 0);
  pb_data(&e, 3, version, sizeof version - 1);
  int rc = write_record(tb, &e);
  /* SessionLog START: TensorBoard forgets the steps >= first_step of earlier files (a
   * resume's steps after its checkpoint; all of a new run's) */
  pb log = {.ok = 1};
  pb_key(&log, 1, 0);
  pb_varint(&log, 1);
  event_head(&e, now, first_step);
  pb_data(&e, 7, log.b, log.n);
  if (rc == 0) rc = write_record(tb, &e);
  if (rc) {
    atoll_fail(err, "%s: cannot write: %s", tb->path, strerror(errno));
    atoll_tb_close(tb);
    return -1;
  }
  return 0;
}

int atoll_tb_scalars(atoll_tb *tb, double wall_time, int64_t step, const atoll_tb_scalar *v, int n) {
  pb summary = {.ok = 1}, value, e;
  for (int i = 0; i < n; i++) {
    value.n = 0;
    value.ok = 1;
    pb_data(&value, 1, v[i].tag, strlen(v[i].tag));
    pb_float(&value, 2, v[i].value);
    if (!value.ok) summary.ok = 0;
    pb_data(&summary, 1, value.b, value.n);
  }
  event_head(&e, wall_time, step);
  if (!summary.ok) e.ok = 0;
  pb_data(&e, 5, summary.b, summary.n);
  return write_record(tb, &e);
}

int atoll_tb_sync(atoll_tb *tb) {
  errno = 0;
  if (fflush(tb->f) != 0) return -1;
  /* a pipe or a device cannot fsync: nothing to make durable */
  return fsync(fileno(tb->f)) == 0 || errno == EINVAL ? 0 : -1;
}

void atoll_tb_close(atoll_tb *tb) {
  if (tb->f) fclose(tb->f);
  tb->f = NULL;
}

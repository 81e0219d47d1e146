/* safetensors writing (the parser and reader are safetensors_read.c, which also
 * describes the byte layout). Files written here put "__metadata__" first, then the
 * tensors in layout order with consecutive offsets, so that the data section is the
 * flat buffer(s) byte for byte (or, in BF16, each float rounded to nearest even); the
 * header is padded with spaces to a multiple of 8. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "ckpt/safetensors_internal.h"
#include "core/quant.h"
#include "model/layout.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------- writing --- */

typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} strbuf;

static void sb_reserve(strbuf *b, size_t extra) {
  if (b->oom || b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return;
  }
  b->p = p;
  b->cap = cap;
}

static void sb_putn(strbuf *b, const char *s, size_t n) {
  sb_reserve(b, n);
  if (b->oom) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void sb_puts(strbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp) {
    b->oom = 1;
    return;
  }
  sb_putn(b, tmp, (size_t)n);
}

/* A JSON string literal; bytes >= 0x80 pass through (the caller checked UTF-8). */
static void sb_json_string(strbuf *b, const char *s) {
  sb_putn(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char esc[2] = {'\\', (char)*p};
      sb_putn(b, esc, 2);
    } else if (*p < 0x20) {
      sb_printf(b, "\\u%04x", *p);
    } else {
      sb_putn(b, (const char *)p, 1);
    }
  }
  sb_putn(b, "\"", 1);
}

static int check_metadata_in(const cJSON *metadata, const char *path, atoll_err *err) {
  if (!metadata) return 0;
  if (!cJSON_IsObject(metadata))
    return atoll_fail(err, "%s: metadata to write is not a JSON object", path);
  const cJSON *v;
  cJSON_ArrayForEach(v, metadata) {
    if (!cJSON_IsString(v))
      return atoll_fail(err, "%s: metadata value of %s is not a string", path, v->string);
    if (!atoll_st_utf8_valid((const uint8_t *)v->string, strlen(v->string)) ||
        !atoll_st_utf8_valid((const uint8_t *)v->valuestring, strlen(v->valuestring)))
      return atoll_fail(err, "%s: metadata entry %s is not valid UTF-8", path, v->string);
  }
  return 0;
}

static void header_metadata(strbuf *b, const cJSON *metadata) {
  if (!metadata) return;
  sb_puts(b, "\"__metadata__\":{");
  const cJSON *v;
  int first = 1;
  cJSON_ArrayForEach(v, metadata) {
    if (!first) sb_puts(b, ",");
    first = 0;
    sb_json_string(b, v->string);
    sb_puts(b, ":");
    sb_json_string(b, v->valuestring);
  }
  sb_puts(b, "}");
}

/* esize: bytes an element, 4 (F32) or 2 (BF16) */
static void header_tensor(strbuf *b, const char *name, const atoll_tensor *t, uint64_t begin, int esize) {
  sb_json_string(b, name);
  sb_puts(b, esize == 2 ? ":{\"dtype\":\"BF16\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
  for (int d = 0; d < t->ndim; d++) sb_printf(b, "%s%" PRId64, d ? "," : "", t->shape[d]);
  sb_printf(b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", begin,
            begin + (uint64_t)t->numel * (uint64_t)esize);
}

/* The header JSON padded with spaces to a multiple of 8 bytes, in *out. */
static int build_header(const char *path, const atoll_layout *lay, const atoll_st_buffer *buffers,
                        int nbuffers, const cJSON *metadata, int esize, strbuf *out, atoll_err *err) {
  strbuf b = {0};
  int first = !metadata;
  sb_puts(&b, "{");
  header_metadata(&b, metadata);
  for (int p = 0; p < nbuffers; p++) {
    uint64_t base = (uint64_t)p * lay->nparams * (uint64_t)esize;
    for (int i = 0; i < lay->ntensors; i++) {
      const atoll_tensor *t = &lay->tensors[i];
      char name[ATOLL_ST_NAME_MAX];
      if (atoll_st_full_name(name, sizeof name, buffers[p].prefix, t->name) != 0) {
        free(b.p);
        return atoll_fail(err, "%s: tensor name %s%s is too long", path, buffers[p].prefix, t->name);
      }
      if (!first) sb_puts(&b, ",");
      first = 0;
      header_tensor(&b, name, t, base + (uint64_t)t->offset * (uint64_t)esize, esize);
    }
  }
  sb_puts(&b, "}");
  while (!b.oom && b.len % 8 != 0) sb_puts(&b, " ");
  if (b.oom) {
    free(b.p);
    return atoll_fail(err, "%s: out of memory building the header", path);
  }
  *out = b;
  return 0;
}

static int check_finite_out(const char *path, const atoll_layout *lay, const atoll_st_buffer *buffer,
                            atoll_err *err) {
  for (int i = 0; i < lay->ntensors; i++) {
    const atoll_tensor *t = &lay->tensors[i];
    size_t at = atoll_st_first_nonfinite(buffer->data + t->offset, t->numel);
    if (at < t->numel)
      return atoll_fail(err, "%s: refusing to write tensor %s%s: element %zu is %s", path,
                        buffer->prefix, t->name, at,
                        isnan(buffer->data[t->offset + at]) ? "NaN" : "Inf");
  }
  return 0;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

/* n floats as bf16 (src/core/quant.c's codec: rounded to nearest even; little-endian, as
 * every host atoll runs on), a block at a time: 0, or -1 when the file takes no more */
static int write_bf16(FILE *f, const float *x, size_t n) {
  uint8_t block[8192];
  for (size_t i = 0; i < n;) {
    size_t k = n - i < sizeof block / 2 ? n - i : sizeof block / 2;
    atoll_q_encode(ATOLL_Q_BF16, x + i, k, block);
    if (write_all(f, block, 2 * k)) return -1;
    i += k;
  }
  return 0;
}

static int write_file(const char *path, const strbuf *hdr, const atoll_layout *lay,
                      const atoll_st_buffer *buffers, int nbuffers, int esize, atoll_err *err) {
  FILE *f = fopen(path, "wb");
  if (!f) return atoll_fail(err, "%s: cannot create: %s", path, strerror(errno));
  uint8_t len[8];
  write_le64(len, hdr->len);
  int bad = write_all(f, len, 8) || write_all(f, hdr->p, hdr->len);
  for (int p = 0; p < nbuffers && !bad; p++)
    bad = esize == 2 ? write_bf16(f, buffers[p].data, lay->nparams)
                     : write_all(f, buffers[p].data, lay->nparams * sizeof(float));
  bad = bad || fflush(f) != 0 || fsync(fileno(f)) != 0;
  int saved = errno;
  if (fclose(f) != 0 && !bad) bad = 1, saved = errno;
  if (bad) {
    unlink(path);
    return atoll_fail(err, "%s: write failed: %s", path, strerror(saved));
  }
  return 0;
}

/* A finite value that bf16 cannot hold (|x| rounds past its largest) would be written as Inf. */
static int check_bf16_range(const char *path, const atoll_layout *lay, const float *data, atoll_err *err) {
  uint16_t h[1024];
  for (int i = 0; i < lay->ntensors; i++) {
    const atoll_tensor *t = &lay->tensors[i];
    for (size_t at = 0; at < t->numel; at += 1024) {
      size_t k = t->numel - at < 1024 ? t->numel - at : 1024;
      atoll_q_encode(ATOLL_Q_BF16, data + t->offset + at, k, (uint8_t *)h);
      for (size_t j = 0; j < k; j++)
        if ((h[j] & 0x7fffu) == 0x7f80u)
          return atoll_fail(err, "%s: refusing to write tensor %s as bf16: element %zu (%g) is beyond bf16's range",
                            path, t->name, at + j, (double)data[t->offset + at + j]);
    }
  }
  return 0;
}

static int write_esize(const char *path, const atoll_layout *lay, const atoll_st_buffer *buffers, int nbuffers,
                       const cJSON *metadata, int esize, atoll_err *err) {
  const char *prefixes[ATOLL_ST_MAX_BUFFERS];
  const void *datas[ATOLL_ST_MAX_BUFFERS];
  for (int p = 0; p < nbuffers && p < ATOLL_ST_MAX_BUFFERS; p++)
    prefixes[p] = buffers[p].prefix, datas[p] = buffers[p].data;
  if (atoll_st_check_buffers(path, lay, prefixes, datas, nbuffers, err) != 0) return -1;
  if (check_metadata_in(metadata, path, err) != 0) return -1;
  for (int p = 0; p < nbuffers; p++)
    if (check_finite_out(path, lay, &buffers[p], err) != 0 ||
        (esize == 2 && check_bf16_range(path, lay, buffers[p].data, err) != 0))
      return -1;
  strbuf hdr;
  if (build_header(path, lay, buffers, nbuffers, metadata, esize, &hdr, err) != 0) return -1;
  int rc = write_file(path, &hdr, lay, buffers, nbuffers, esize, err);
  free(hdr.p);
  return rc;
}

int atoll_st_write_buffers(const char *path, const atoll_layout *lay, const atoll_st_buffer *buffers,
                           int nbuffers, const cJSON *metadata, atoll_err *err) {
  return write_esize(path, lay, buffers, nbuffers, metadata, 4, err);
}

int atoll_st_write(const char *path, const atoll_layout *lay, const char *prefix, const float *data,
                   const cJSON *metadata, atoll_err *err) {
  atoll_st_buffer buffer = {prefix ? prefix : "", data};
  return write_esize(path, lay, &buffer, 1, metadata, 4, err);
}

int atoll_st_write_bf16(const char *path, const atoll_layout *lay, const float *data, const cJSON *metadata,
                        atoll_err *err) {
  atoll_st_buffer buffer = {"", data};
  return write_esize(path, lay, &buffer, 1, metadata, 2, err);
}


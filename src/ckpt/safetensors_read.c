/* safetensors parsing and reading (the writer is safetensors_write.c).
 *
 * File layout (all integers little-endian):
 *
 *   offset   size   field
 *   0        8      N: u64, length of the JSON header in bytes (padding included)
 *   8        N      header: UTF-8 JSON object, padded with spaces (0x20) so that
 *                   N is a multiple of 8 (files written here; readers accept any N)
 *   8 + N    D      data section: the tensors' raw bytes, row-major, little-endian;
 *                   D = file size - 8 - N
 *
 * Header object: one entry per tensor plus an optional "__metadata__" entry:
 *
 *   "__metadata__": { "key": "string value", ... }         (strings only)
 *   "<tensor name>": { "dtype": "F32",                     (see atoll_st_dtype)
 *                      "shape": [d0, d1, ...],             (integers >= 0; [] = scalar)
 *                      "data_offsets": [begin, end] }      (bytes, relative to 8 + N)
 *
 * Rules enforced by atoll_st_parse: N <= 100,000,000 and 8 + N <= file size;
 * begin <= end <= D; end - begin = product(shape) * dtype size; sorted by offset,
 * the tensors cover [0, D) exactly (no overlap, no hole); names are unique.
 *
 * Files written here put "__metadata__" first, then the tensors in layout order with
 * consecutive offsets, so the data section is the flat buffer(s) byte for byte.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "ckpt/safetensors_internal.h"
#include "model/layout.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ATOLL_ST_MAX_JSON_INT 9007199254740992.0 /* 2^53: larger doubles are not exact */

/* ---------------------------------------------------------------- dtypes --- */

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    [ATOLL_ST_F64] = {"F64", 8},  [ATOLL_ST_F32] = {"F32", 4},  [ATOLL_ST_F16] = {"F16", 2},
    [ATOLL_ST_BF16] = {"BF16", 2}, [ATOLL_ST_I64] = {"I64", 8},  [ATOLL_ST_I32] = {"I32", 4},
    [ATOLL_ST_I16] = {"I16", 2},  [ATOLL_ST_I8] = {"I8", 1},    [ATOLL_ST_U64] = {"U64", 8},
    [ATOLL_ST_U32] = {"U32", 4},  [ATOLL_ST_U16] = {"U16", 2},  [ATOLL_ST_U8] = {"U8", 1},
    [ATOLL_ST_BOOL] = {"BOOL", 1},
};
#define ATOLL_ST_NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *atoll_st_dtype_name(atoll_st_dtype d) {
  return (int)d >= 0 && (int)d < ATOLL_ST_NDTYPES ? dtypes[d].name : NULL;
}

size_t atoll_st_dtype_size(atoll_st_dtype d) {
  return (int)d >= 0 && (int)d < ATOLL_ST_NDTYPES ? dtypes[d].size : 0;
}

static int dtype_from_name(const char *s, atoll_st_dtype *out) {
  for (int i = 0; i < ATOLL_ST_NDTYPES; i++) {
    if (strcmp(s, dtypes[i].name) == 0) {
      *out = (atoll_st_dtype)i;
      return 0;
    }
  }
  return -1;
}

/* ------------------------------------------------------------- helpers --- */

static uint64_t read_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF. */
int atoll_st_utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return 0;
    }
    if (n - i < len) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    i += len;
  }
  return 1;
}

/* A JSON number that is an exact integer in [0, 2^53]. */
static int json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item)) return -1;
  double v = item->valuedouble;
  if (!(v >= 0.0 && v <= ATOLL_ST_MAX_JSON_INT) || v != floor(v)) return -1;
  *out = (uint64_t)v;
  return 0;
}

static int float_finite(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return (bits & 0x7F800000u) != 0x7F800000u;
}

/* Index of the first NaN/Inf in v[0, n), or n. */
size_t atoll_st_first_nonfinite(const float *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!float_finite(v[i])) return i;
  return n;
}

static void format_shape(char *out, size_t outsz, int ndim, const int64_t *shape) {
  size_t len = 0;
  len += (size_t)snprintf(out, outsz, "[");
  for (int i = 0; i < ndim && len < outsz; i++)
    len += (size_t)snprintf(out + len, outsz - len, "%s%" PRId64, i ? ", " : "", shape[i]);
  if (len < outsz) snprintf(out + len, outsz - len, "]");
}

/* prefix + name into out; -1 if it does not fit. */
int atoll_st_full_name(char *out, size_t outsz, const char *prefix, const char *name) {
  int n = snprintf(out, outsz, "%s%s", prefix ? prefix : "", name);
  return n < 0 || (size_t)n >= outsz ? -1 : 0;
}

/* ------------------------------------------------------------- parsing --- */

static int parse_dtype(const cJSON *entry, const char *file, const char *tname, atoll_st_tensor *t,
                       atoll_err *err) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
  if (!d) return atoll_fail(err, "%s: tensor %s has no dtype", file, tname);
  if (!cJSON_IsString(d))
    return atoll_fail(err, "%s: tensor %s: dtype is not a string", file, tname);
  if (dtype_from_name(d->valuestring, &t->dtype) != 0)
    return atoll_fail(err, "%s: tensor %s has unknown dtype %.32s", file, tname, d->valuestring);
  return 0;
}

static int parse_shape(const cJSON *entry, const char *file, const char *tname, atoll_st_tensor *t,
                       atoll_err *err) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(entry, "shape");
  if (!s) return atoll_fail(err, "%s: tensor %s has no shape", file, tname);
  if (!cJSON_IsArray(s)) return atoll_fail(err, "%s: tensor %s: shape is not an array", file, tname);
  int ndim = cJSON_GetArraySize(s);
  if (ndim > ATOLL_ST_MAX_DIMS)
    return atoll_fail(err, "%s: tensor %s: shape has %d dimensions (at most %d supported)", file,
                      tname, ndim, ATOLL_ST_MAX_DIMS);
  t->ndim = 0;
  t->numel = 1;
  const cJSON *dim;
  cJSON_ArrayForEach(dim, s) {
    uint64_t v;
    if (json_uint(dim, &v) != 0)
      return atoll_fail(err, "%s: tensor %s: shape dimension %d is not a non-negative integer",
                        file, tname, t->ndim);
    if (__builtin_mul_overflow(t->numel, v, &t->numel))
      return atoll_fail(err, "%s: tensor %s: shape product overflows", file, tname);
    t->shape[t->ndim++] = (int64_t)v;
  }
  return 0;
}

static int parse_offsets(const cJSON *entry, const char *file, const char *tname,
                         uint64_t data_size, atoll_st_tensor *t, atoll_err *err) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
  if (!o) return atoll_fail(err, "%s: tensor %s has no data_offsets", file, tname);
  if (!cJSON_IsArray(o) || cJSON_GetArraySize(o) != 2 ||
      json_uint(cJSON_GetArrayItem(o, 0), &t->begin) != 0 ||
      json_uint(cJSON_GetArrayItem(o, 1), &t->end) != 0)
    return atoll_fail(err, "%s: tensor %s: data_offsets is not [begin, end] with integers >= 0",
                      file, tname);
  if (t->begin > t->end)
    return atoll_fail(err, "%s: tensor %s: data_offsets begin %" PRIu64 " > end %" PRIu64, file,
                      tname, t->begin, t->end);
  if (t->end > data_size)
    return atoll_fail(err,
                      "%s: tensor %s: data_offsets end %" PRIu64
                      " is beyond the data section (%" PRIu64 " bytes; file truncated?)",
                      file, tname, t->end, data_size);
  uint64_t nbytes;
  if (__builtin_mul_overflow(t->numel, (uint64_t)atoll_st_dtype_size(t->dtype), &nbytes))
    return atoll_fail(err, "%s: tensor %s: byte size overflows", file, tname);
  if (t->end - t->begin != nbytes)
    return atoll_fail(err,
                      "%s: tensor %s: data_offsets size mismatch: %" PRIu64
                      " bytes for %" PRIu64 " elements of %s (%" PRIu64 " bytes expected)",
                      file, tname, t->end - t->begin, t->numel, atoll_st_dtype_name(t->dtype),
                      nbytes);
  return 0;
}

static int parse_tensor(const cJSON *entry, const char *file, const atoll_st_file *f,
                        atoll_st_tensor *t, atoll_err *err) {
  t->name = entry->string;
  if (!cJSON_IsObject(entry))
    return atoll_fail(err, "%s: tensor %s: entry is not an object", file, t->name);
  if (parse_dtype(entry, file, t->name, t, err) != 0) return -1;
  if (parse_shape(entry, file, t->name, t, err) != 0) return -1;
  if (parse_offsets(entry, file, t->name, f->data_size, t, err) != 0) return -1;
  t->data = f->data + t->begin;
  return 0;
}

static int parse_metadata(const cJSON *m, const char *file, atoll_err *err) {
  if (!cJSON_IsObject(m)) return atoll_fail(err, "%s: __metadata__ is not an object", file);
  const cJSON *v;
  cJSON_ArrayForEach(v, m) {
    if (!cJSON_IsString(v))
      return atoll_fail(err, "%s: __metadata__ value of %s is not a string", file, v->string);
  }
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  const atoll_st_tensor *x = *(const atoll_st_tensor *const *)a;
  const atoll_st_tensor *y = *(const atoll_st_tensor *const *)b;
  return strcmp(x->name, y->name);
}

static int cmp_offsets(const void *a, const void *b) {
  const atoll_st_tensor *x = *(const atoll_st_tensor *const *)a;
  const atoll_st_tensor *y = *(const atoll_st_tensor *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Unique names, and the tensors tile [0, data_size) exactly. */
static int check_tiling(const atoll_st_file *f, const char *file, atoll_err *err) {
  int n = f->ntensors, rc = 0;
  const atoll_st_tensor **idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
  if (!idx) return atoll_fail(err, "%s: out of memory", file);
  for (int i = 0; i < n; i++) idx[i] = &f->tensors[i];
  qsort(idx, (size_t)n, sizeof *idx, cmp_name);
  for (int i = 1; i < n && rc == 0; i++)
    if (strcmp(idx[i - 1]->name, idx[i]->name) == 0)
      rc = atoll_fail(err, "%s: duplicate tensor name %s", file, idx[i]->name);
  qsort(idx, (size_t)n, sizeof *idx, cmp_offsets);
  uint64_t cursor = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (idx[i]->begin < cursor)
      rc = atoll_fail(err, "%s: tensor %s: data_offsets overlap the previous tensor %s", file,
                      idx[i]->name, idx[i - 1]->name);
    else if (idx[i]->begin > cursor)
      rc = atoll_fail(err,
                      "%s: hole in the data section: bytes [%" PRIu64 ", %" PRIu64
                      ") before tensor %s belong to no tensor",
                      file, cursor, idx[i]->begin, idx[i]->name);
    cursor = idx[i]->end;
  }
  if (rc == 0 && cursor != f->data_size)
    rc = atoll_fail(err,
                    "%s: hole in the data section: bytes [%" PRIu64 ", %" PRIu64
                    ") at the end belong to no tensor",
                    file, cursor, f->data_size);
  free(idx);
  return rc;
}

static int parse_header_json(const uint8_t *hdr, uint64_t n, const char *file, cJSON **out,
                             atoll_err *err) {
  if (memchr(hdr, 0, n)) return atoll_fail(err, "%s: header contains a NUL byte", file);
  if (!atoll_st_utf8_valid(hdr, n)) return atoll_fail(err, "%s: header is not valid UTF-8", file);
  char *text = malloc(n + 1);
  if (!text) return atoll_fail(err, "%s: out of memory for a %" PRIu64 "-byte header", file, n);
  memcpy(text, hdr, n);
  text[n] = 0;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  size_t at = end ? (size_t)(end - text) : 0;
  free(text);
  if (!root)
    return atoll_fail(err, "%s: header is not valid JSON (error near byte %zu of %" PRIu64 ")",
                      file, at, n);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return atoll_fail(err, "%s: header is not a JSON object", file);
  }
  *out = root;
  return 0;
}

static int parse_entries(atoll_st_file *f, const char *file, atoll_err *err) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, f->header) n++;
  f->tensors = calloc((size_t)(n ? n : 1), sizeof *f->tensors);
  if (!f->tensors) return atoll_fail(err, "%s: out of memory", file);
  cJSON_ArrayForEach(e, f->header) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (f->metadata) return atoll_fail(err, "%s: duplicate __metadata__", file);
      if (parse_metadata(e, file, err) != 0) return -1;
      f->metadata = e;
      continue;
    }
    if (parse_tensor(e, file, f, &f->tensors[f->ntensors], err) != 0) return -1;
    f->ntensors++;
  }
  return check_tiling(f, file, err);
}

int atoll_st_parse(const uint8_t *buf, size_t size, const char *name, atoll_st_file *out,
                   atoll_err *err) {
  memset(out, 0, sizeof *out);
  if (size < 8)
    return atoll_fail(err, "%s: file too short (%zu bytes) for the 8-byte header length", name,
                      size);
  uint64_t n = read_le64(buf);
  if (n > ATOLL_ST_MAX_HEADER)
    return atoll_fail(err, "%s: header length %" PRIu64 " is absurd (limit %" PRIu64 " bytes)",
                      name, n, ATOLL_ST_MAX_HEADER);
  if (n > size - 8)
    return atoll_fail(err,
                      "%s: header length %" PRIu64
                      " is beyond the end of the file (%zu bytes after the length; truncated?)",
                      name, n, size - 8);
  atoll_st_file f = {.header_len = n, .data = buf + 8 + n, .data_size = size - 8 - n};
  if (parse_header_json(buf + 8, n, name, &f.header, err) != 0) return -1;
  if (parse_entries(&f, name, err) != 0) {
    atoll_st_file_free(&f);
    return -1;
  }
  *out = f;
  return 0;
}

void atoll_st_file_free(atoll_st_file *f) {
  if (!f) return;
  free(f->tensors);
  cJSON_Delete(f->header);
  memset(f, 0, sizeof *f);
}

const atoll_st_tensor *atoll_st_file_find(const atoll_st_file *f, const char *name) {
  for (int i = 0; i < f->ntensors; i++)
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  return NULL;
}

/* -------------------------------------------------------------- layout --- */

int atoll_st_layout_check(const atoll_layout *lay, const char *what, atoll_err *err) {
  size_t off = 0;
  if (!lay || lay->ntensors < 0 || (lay->ntensors > 0 && !lay->tensors))
    return atoll_fail(err, "%s: invalid parameter layout", what);
  for (int i = 0; i < lay->ntensors; i++) {
    const atoll_tensor *t = &lay->tensors[i];
    size_t numel = 1;
    if (t->ndim < 0 || t->ndim > 2)
      return atoll_fail(err, "%s: layout tensor %d has ndim %d", what, i, t->ndim);
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] < 0 || __builtin_mul_overflow(numel, (size_t)t->shape[d], &numel))
        return atoll_fail(err, "%s: layout tensor %s has an invalid shape", what, t->name);
    }
    if (numel != t->numel || t->offset != off)
      return atoll_fail(err, "%s: layout tensor %s is not contiguous (offset %zu, expected %zu)",
                        what, t->name, t->offset, off);
    if (memchr(t->name, 0, sizeof t->name) == NULL || t->name[0] == 0 ||
        !atoll_st_utf8_valid((const uint8_t *)t->name, strlen(t->name)))
      return atoll_fail(err, "%s: layout tensor %d has an invalid name", what, i);
    off += numel;
  }
  if (off != lay->nparams)
    return atoll_fail(err, "%s: layout tensors cover %zu floats but nparams is %zu", what, off,
                      lay->nparams);
  return 0;
}

/* ------------------------------------------------------- buffers to move --- */

int atoll_st_check_buffers(const char *path, const atoll_layout *lay, const char *const *prefixes,
                           const void *const *datas, int nbuffers, atoll_err *err) {
  if (atoll_st_layout_check(lay, path, err) != 0) return -1;
  if (nbuffers > ATOLL_ST_MAX_BUFFERS)
    return atoll_fail(err, "%s: too many tensor buffers (%d)", path, nbuffers);
  if (nbuffers < 1) return atoll_fail(err, "%s: no tensor buffers given", path);
  for (int p = 0; p < nbuffers; p++) {
    if (!prefixes[p]) return atoll_fail(err, "%s: buffer %d has no name prefix", path, p);
    if (!datas[p] && lay->nparams > 0) return atoll_fail(err, "%s: buffer %d is NULL", path, p);
    if (!atoll_st_utf8_valid((const uint8_t *)prefixes[p], strlen(prefixes[p])))
      return atoll_fail(err, "%s: prefix %d is not valid UTF-8", path, p);
    for (int q = 0; q < p; q++)
      if (strcmp(prefixes[p], prefixes[q]) == 0)
        return atoll_fail(err, "%s: prefix \"%s\" given twice", path, prefixes[p]);
  }
  for (int i = 0; i < lay->ntensors; i++)
    for (int p = 0; p < nbuffers; p++)
      if (prefixes[p][0] == 0 && strcmp(lay->tensors[i].name, "__metadata__") == 0)
        return atoll_fail(err, "%s: a tensor cannot be named __metadata__", path);
  return 0;
}

/* ------------------------------------------------------------- reading --- */

typedef struct {
  const uint8_t *buf;
  size_t size;
  void *map;
  uint8_t small[8];
} mapped_file;

static int map_file(const char *path, mapped_file *m, atoll_err *err) {
  memset(m, 0, sizeof *m);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return atoll_fail(err, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) != 0) {
    rc = atoll_fail(err, "%s: cannot stat: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    rc = atoll_fail(err, "%s: not a regular file", path);
  } else if (st.st_size < 8) {
    /* Too short to map usefully; atoll_st_parse reports it. */
    m->size = (size_t)st.st_size;
    m->buf = m->small;
    if (m->size && read(fd, m->small, m->size) != (ssize_t)m->size)
      rc = atoll_fail(err, "%s: read failed: %s", path, strerror(errno));
  } else {
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      rc = atoll_fail(err, "%s: cannot map: %s", path, strerror(errno));
    } else {
      m->map = p;
      m->buf = p;
      m->size = (size_t)st.st_size;
    }
  }
  close(fd);
  return rc;
}

static void unmap_file(mapped_file *m) {
  if (m->map) munmap(m->map, m->size);
  memset(m, 0, sizeof *m);
}

/* The file tensor for layout tensor t under prefix, checked for dtype and shape. */
static const atoll_st_tensor *match_tensor(const atoll_st_file *f, const char *path,
                                           const char *prefix, const atoll_tensor *t,
                                           atoll_err *err) {
  char name[ATOLL_ST_NAME_MAX];
  if (atoll_st_full_name(name, sizeof name, prefix, t->name) != 0) {
    atoll_fail(err, "%s: tensor name %s%s is too long", path, prefix, t->name);
    return NULL;
  }
  const atoll_st_tensor *s = atoll_st_file_find(f, name);
  if (!s) {
    atoll_fail(err, "%s: tensor %s is missing", path, name);
    return NULL;
  }
  if (s->dtype != ATOLL_ST_F32) {
    atoll_fail(err, "%s: tensor %s has dtype %s, expected F32", path, name,
               atoll_st_dtype_name(s->dtype));
    return NULL;
  }
  int same = s->ndim == t->ndim;
  for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
  if (!same) {
    char found[128], expected[64];
    format_shape(found, sizeof found, s->ndim, s->shape);
    format_shape(expected, sizeof expected, t->ndim, t->shape);
    atoll_fail(err, "%s: tensor %s has shape %s, expected %s", path, name, found, expected);
    return NULL;
  }
  return s;
}

static int copy_buffer(const atoll_st_file *f, const char *path, const atoll_layout *lay,
                       const atoll_st_read_buffer *buffer, atoll_err *err) {
  for (int i = 0; i < lay->ntensors; i++) {
    const atoll_tensor *t = &lay->tensors[i];
    const atoll_st_tensor *s = match_tensor(f, path, buffer->prefix, t, err);
    if (!s) return -1;
    if (t->numel == 0) continue;
    float *dst = buffer->data + t->offset;
    memcpy(dst, s->data, t->numel * sizeof(float));
    size_t at = atoll_st_first_nonfinite(dst, t->numel);
    if (at < t->numel)
      return atoll_fail(err, "%s: tensor %s%s: element %zu is %s", path, buffer->prefix, t->name, at,
                        isnan(dst[at]) ? "NaN" : "Inf");
  }
  return 0;
}

static int layout_has(const atoll_layout *lay, const char *name) {
  for (int i = 0; i < lay->ntensors; i++)
    if (strcmp(lay->tensors[i].name, name) == 0) return 1;
  return 0;
}

/* Names the first file tensor that no buffer/layout tensor accounts for. */
static int report_extra(const atoll_st_file *f, const char *path, const atoll_layout *lay,
                        const atoll_st_read_buffer *buffers, int nbuffers, atoll_err *err) {
  for (int k = 0; k < f->ntensors; k++) {
    int known = 0;
    for (int p = 0; p < nbuffers && !known; p++) {
      size_t plen = strlen(buffers[p].prefix);
      if (strncmp(f->tensors[k].name, buffers[p].prefix, plen) == 0)
        known = layout_has(lay, f->tensors[k].name + plen);
    }
    if (!known)
      return atoll_fail(err, "%s: extra tensor %s (not in the model layout)", path,
                        f->tensors[k].name);
  }
  return atoll_fail(err, "%s: extra tensors in the file", path);
}

int atoll_st_read_buffers(const char *path, const atoll_layout *lay, const atoll_st_read_buffer *buffers,
                          int nbuffers, cJSON **metadata, atoll_err *err) {
  return atoll_st_read_buffers_ex(path, lay, buffers, nbuffers, metadata, NULL, NULL, err);
}

int atoll_st_read_buffers_ex(const char *path, const atoll_layout *lay,
                             const atoll_st_read_buffer *buffers, int nbuffers, cJSON **metadata,
                             atoll_st_data_fn on_data, void *ctx, atoll_err *err) {
  if (metadata) *metadata = NULL;
  const char *prefixes[ATOLL_ST_MAX_BUFFERS];
  const void *datas[ATOLL_ST_MAX_BUFFERS];
  for (int p = 0; p < nbuffers && p < ATOLL_ST_MAX_BUFFERS; p++)
    prefixes[p] = buffers[p].prefix, datas[p] = buffers[p].data;
  if (atoll_st_check_buffers(path, lay, prefixes, datas, nbuffers, err) != 0) return -1;

  mapped_file m;
  if (map_file(path, &m, err) != 0) return -1;
  atoll_st_file f;
  int rc = atoll_st_parse(m.buf, m.size, path, &f, err);
  for (int p = 0; p < nbuffers && rc == 0; p++) rc = copy_buffer(&f, path, lay, &buffers[p], err);
  /* Names are unique and every expected one was found: any surplus is extra. */
  if (rc == 0 && (size_t)f.ntensors != (size_t)nbuffers * (size_t)lay->ntensors)
    rc = report_extra(&f, path, lay, buffers, nbuffers, err);
  if (rc == 0 && metadata && f.metadata) {
    *metadata = cJSON_Duplicate(f.metadata, 1);
    if (!*metadata) rc = atoll_fail(err, "%s: out of memory copying metadata", path);
  }
  if (rc == 0 && on_data) on_data(f.data, f.data_size, ctx);
  atoll_st_file_free(&f);
  unmap_file(&m);
  return rc;
}

int atoll_st_read(const char *path, const atoll_layout *lay, const char *prefix, float *data,
                  cJSON **metadata, atoll_err *err) {
  atoll_st_read_buffer buffer = {prefix ? prefix : "", data};
  return atoll_st_read_buffers(path, lay, &buffer, 1, metadata, err);
}

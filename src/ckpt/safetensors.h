/* safetensors files (the Hugging Face format), see safetensors_read.c (parser, reader) and
 * docs/formats.md for the byte layout.
 *
 * Writing and reading work on an atoll_layout and its flat float buffer: the data
 * section of a file written here is exactly the flat buffer (or several flat
 * buffers one after the other), because the layout's views are contiguous and in
 * order. Reading accepts any valid safetensors file whose tensors match the layout
 * by name, whatever their order in the file. */
#ifndef ATOLL_SAFETENSORS_H
#define ATOLL_SAFETENSORS_H

#include "atoll/atoll.h"
#include "model/layout.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* Largest header accepted (the reference implementation uses the same limit). */
#define ATOLL_ST_MAX_HEADER ((uint64_t)100000000)
/* Largest tensor rank accepted by the parser. */
#define ATOLL_ST_MAX_DIMS 8

typedef enum {
  ATOLL_ST_F64,
  ATOLL_ST_F32,
  ATOLL_ST_F16,
  ATOLL_ST_BF16,
  ATOLL_ST_I64,
  ATOLL_ST_I32,
  ATOLL_ST_I16,
  ATOLL_ST_I8,
  ATOLL_ST_U64,
  ATOLL_ST_U32,
  ATOLL_ST_U16,
  ATOLL_ST_U8,
  ATOLL_ST_BOOL,
} atoll_st_dtype;

/* "F32" etc.; NULL for an invalid value. */
const char *atoll_st_dtype_name(atoll_st_dtype d);
/* Bytes per element. */
size_t atoll_st_dtype_size(atoll_st_dtype d);

typedef struct {
  const char *name; /* points into atoll_st_file.header */
  atoll_st_dtype dtype;
  int ndim;
  int64_t shape[ATOLL_ST_MAX_DIMS];
  uint64_t numel;
  uint64_t begin, end;  /* byte offsets relative to the data section */
  const uint8_t *data;  /* buf + 8 + header length + begin (not aligned in general) */
} atoll_st_tensor;

typedef struct {
  int ntensors;
  atoll_st_tensor *tensors;       /* in header order */
  cJSON *header;            /* the parsed header (owns the names) */
  const cJSON *metadata;    /* the "__metadata__" object inside header, or NULL */
  uint64_t header_len;      /* N, the JSON length in bytes (padding included) */
  const uint8_t *data;      /* start of the data section in buf */
  uint64_t data_size;
} atoll_st_file;

/* Parses and validates a whole file held in buf (which must outlive *out). `name`
 * is the file name used in messages. Checks the header length, JSON syntax and
 * UTF-8, every tensor entry (dtype, shape, data_offsets and their consistency),
 * that the tensors cover the data section exactly (no overlaps, no holes), and that
 * __metadata__ maps strings to strings. On failure *out is left empty. */
int atoll_st_parse(const uint8_t *buf, size_t size, const char *name, atoll_st_file *out,
                   atoll_err *err);
void atoll_st_file_free(atoll_st_file *f);
/* The tensor with this name, or NULL. */
const atoll_st_tensor *atoll_st_file_find(const atoll_st_file *f, const char *name);

/* One flat buffer to write or read, its tensors named prefix + layout name. */
typedef struct {
  const char *prefix;
  const float *data;
} atoll_st_buffer;

typedef struct {
  const char *prefix;
  float *data;
} atoll_st_read_buffer;

/* Writes every tensor of the layout as F32 named prefix + name, with the data of
 * `data` (lay->nparams floats). metadata: NULL or a cJSON object whose values are
 * all strings. The header is padded with spaces to a multiple of 8 bytes. The file
 * is flushed and fsync'ed before it is closed. Refuses NaN/Inf values (they could
 * not be read back). */
int atoll_st_write(const char *path, const atoll_layout *lay, const char *prefix, const float *data,
                   const cJSON *metadata, atoll_err *err);
/* The same for several flat buffers in one file, one after the other in the data
 * section (e.g. "exp_avg." and "exp_avg_sq."). Prefixes must differ. */
int atoll_st_write_buffers(const char *path, const atoll_layout *lay, const atoll_st_buffer *buffers,
                           int nbuffers, const cJSON *metadata, atoll_err *err);

/* atoll_st_write's file with every tensor BF16 (each value rounded to nearest even;
 * one beyond bf16's range is refused), no prefix: what `atoll export --dtype bf16`
 * writes. */
int atoll_st_write_bf16(const char *path, const atoll_layout *lay, const float *data, const cJSON *metadata,
                        atoll_err *err);

/* Reads a file into the flat buffer `data`: every layout tensor must be present
 * as prefix + name with dtype F32 and exactly the layout's shape, no other tensor
 * may be present, and no value may be NaN or Inf. metadata (if non-NULL) receives a
 * copy of __metadata__, or NULL if the file has none. On failure the contents of
 * `data` are unspecified and *metadata is NULL. */
int atoll_st_read(const char *path, const atoll_layout *lay, const char *prefix, float *data,
                  cJSON **metadata, atoll_err *err);
/* The same for a file holding several flat buffers (all of them must be present,
 * and nothing else). */
int atoll_st_read_buffers(const char *path, const atoll_layout *lay, const atoll_st_read_buffer *buffers,
                          int nbuffers, cJSON **metadata, atoll_err *err);

/* The same, and then, once the file has been read without error, on_data (if
 * non-NULL) sees the file's whole data section as it lies in the file (the
 * checkpoint code hashes it). */
typedef void (*atoll_st_data_fn)(const uint8_t *data, uint64_t size, void *ctx);
int atoll_st_read_buffers_ex(const char *path, const atoll_layout *lay,
                             const atoll_st_read_buffer *buffers, int nbuffers, cJSON **metadata,
                             atoll_st_data_fn on_data, void *ctx, atoll_err *err);

/* Checks that the layout's views are contiguous, in order and cover nparams
 * exactly (what atoll_st_write and atoll_st_read rely on). `what` names the file in
 * messages. */
int atoll_st_layout_check(const atoll_layout *lay, const char *what, atoll_err *err);

#endif

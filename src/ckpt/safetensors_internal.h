/* Internal to the safetensors reader and writer (src/ckpt/safetensors_read.c,
 * safetensors_write.c): the helpers both sides use. Not for other modules. */
#ifndef ATOLL_SAFETENSORS_INTERNAL_H
#define ATOLL_SAFETENSORS_INTERNAL_H

#include "ckpt/safetensors.h"
#include "model/layout.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the safetensors code copies float data as is: it assumes a little-endian host"
#endif

/* Longest tensor name (prefix included) written or looked up, with its NUL. */
#define ATOLL_ST_NAME_MAX 256
/* Most flat buffers in one file (atoll_st_write_buffers, atoll_st_read_buffers). */
#define ATOLL_ST_MAX_BUFFERS 16

/* Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF. 1 if valid. */
int atoll_st_utf8_valid(const uint8_t *s, size_t n);
/* Index of the first NaN/Inf in v[0, n), or n. */
size_t atoll_st_first_nonfinite(const float *v, size_t n);
/* prefix + name into out; -1 if it does not fit. */
int atoll_st_full_name(char *out, size_t outsz, const char *prefix, const char *name);
/* The request of a read or a write: a valid layout (atoll_st_layout_check), and from
 * one to ATOLL_ST_MAX_BUFFERS buffers, each with a prefix (valid UTF-8, all different)
 * and data, and no tensor named __metadata__. prefixes and datas hold the first
 * min(nbuffers, ATOLL_ST_MAX_BUFFERS) buffers' fields. */
int atoll_st_check_buffers(const char *path, const atoll_layout *lay, const char *const *prefixes,
                           const void *const *datas, int nbuffers, atoll_err *err);

#endif

/* Compressed outer gradients: block-scaled quantization of float vectors.
 *
 *   dtype  bytes for n floats                 encoding
 *   fp32   4 n                                raw little-endian floats
 *   bf16   2 n                                upper 16 bits, round to nearest even
 *   int8   n + 4 ceil(n / 32)                 per block of 32: float scale = max|x| / 127,
 *                                             then round(x / scale) as int8
 *   fp4    ceil(n / 2) + 4 ceil(n / 32)       per block of 32: float scale = max|x| / 6,
 *                                             then x / scale rounded to the nearest FP4
 *                                             (E2M1) value {0, .5, 1, 1.5, 2, 3, 4, 6} with
 *                                             a sign bit, two per byte (low nibble first)
 *
 * Scales come first (one float per block), then the values. Decoding is exact for
 * fp32; the others round as described. Summation happens in fp32 after decoding.
 * A block holding NaN or Inf decodes to NaN (int8, fp4; fp32 and bf16 keep the value);
 * a block whose largest magnitude is below about 127 FLT_MIN (int8; 6 FLT_MIN for
 * fp4) decodes to zeros. */
#ifndef ATOLL_QUANT_H
#define ATOLL_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ATOLL_Q_FP32, ATOLL_Q_BF16, ATOLL_Q_INT8, ATOLL_Q_FP4 } atoll_qtype;

#define ATOLL_QBLOCK 32

/* "fp32", "bf16", "int8", "fp4" -> type; -1 if unknown. */
int atoll_qtype_parse(const char *name);
const char *atoll_qtype_name(atoll_qtype q);
size_t atoll_q_bytes(atoll_qtype q, size_t n);
void atoll_q_encode(atoll_qtype q, const float *x, size_t n, uint8_t *out);
/* atoll_q_encode that also reports a non-finite input: returns -1 and sets *first_bad
 * (when not NULL) to the index of the first NaN or Inf, else 0. out is written either
 * way, so a caller may still send it. */
int atoll_q_encode_checked(atoll_qtype q, const float *x, size_t n, uint8_t *out,
                           size_t *first_bad);
void atoll_q_decode(atoll_qtype q, const uint8_t *in, size_t n, float *x);

#endif

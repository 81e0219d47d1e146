#include "core/quant.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[] = {"fp32", "bf16", "int8", "fp4"};

int atoll_qtype_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, NAMES[i]) == 0) return i;
  return -1;
}

const char *atoll_qtype_name(atoll_qtype q) { return NAMES[q]; }

static size_t nblocks(size_t n) { return (n + ATOLL_QBLOCK - 1) / ATOLL_QBLOCK; }

size_t atoll_q_bytes(atoll_qtype q, size_t n) {
  switch (q) {
  case ATOLL_Q_FP32: return 4 * n;
  case ATOLL_Q_BF16: return 2 * n;
  case ATOLL_Q_INT8: return n + 4 * nblocks(n);
  case ATOLL_Q_FP4: return (n + 1) / 2 + 4 * nblocks(n);
  }
  return 0;
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Block scale max |x| / top, 0 for an all-zero block, NaN for a block holding NaN or
 * Inf (it then decodes to NaN, so a bad outer gradient is never hidden). A block so
 * small that 1 / scale would overflow (max |x| below about 127 FLT_MIN) encodes as
 * zeros: converting an infinite or NaN product to int8 is undefined behaviour. */
static float block_scale(const float *x, size_t n, float top) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) return NAN;
    m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
  }
  float scale = m / top;
  return isfinite(1.0f / scale) ? scale : 0.0f;
}

static const float FP4_VALUES[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

static uint8_t fp4_code(float y) { /* y = x / scale, |y| <= 6 */
  float a = fabsf(y);
  int best = 0;
  for (int k = 1; k < 8; k++)
    if (fabsf(a - FP4_VALUES[k]) < fabsf(a - FP4_VALUES[best])) best = k;
  return (uint8_t)(best | (y < 0 && best ? 8 : 0));
}

void atoll_q_encode(atoll_qtype q, const float *x, size_t n, uint8_t *out) {
  if (q == ATOLL_Q_FP32) {
    memcpy(out, x, 4 * n);
    return;
  }
  if (q == ATOLL_Q_BF16) {
    for (size_t i = 0; i < n; i++) {
      uint16_t h = to_bf16(x[i]);
      memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  size_t nb = nblocks(n);
  uint8_t *vals = out + 4 * nb;
  if (q == ATOLL_Q_FP4) memset(vals, 0, (n + 1) / 2);
  for (size_t b = 0; b < nb; b++) {
    size_t i0 = b * ATOLL_QBLOCK, len = n - i0 < ATOLL_QBLOCK ? n - i0 : ATOLL_QBLOCK;
    float scale = block_scale(x + i0, len, q == ATOLL_Q_INT8 ? 127.0f : 6.0f);
    memcpy(out + 4 * b, &scale, 4);
    if (!(scale > 0)) continue; /* zero or NaN: every value stays code 0 */
    float inv = 1.0f / scale;
    for (size_t i = i0; i < i0 + len; i++) {
      if (q == ATOLL_Q_INT8) {
        float r = nearbyintf(x[i] * inv);
        r = r > 127 ? 127 : (r < -127 ? -127 : r);
        vals[i] = (uint8_t)(int8_t)r;
      } else {
        uint8_t c = fp4_code(x[i] * inv);
        vals[i / 2] |= (uint8_t)(i % 2 ? c << 4 : c);
      }
    }
  }
}

int atoll_q_encode_checked(atoll_qtype q, const float *x, size_t n, uint8_t *out,
                           size_t *first_bad) {
  atoll_q_encode(q, x, n, out);
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) {
      if (first_bad) *first_bad = i;
      return -1;
    }
  return 0;
}

void atoll_q_decode(atoll_qtype q, const uint8_t *in, size_t n, float *x) {
  if (q == ATOLL_Q_FP32) {
    memcpy(x, in, 4 * n);
    return;
  }
  if (q == ATOLL_Q_BF16) {
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, in + 2 * i, 2);
      x[i] = from_bf16(h);
    }
    return;
  }
  size_t nb = nblocks(n);
  const uint8_t *vals = in + 4 * nb;
  for (size_t i = 0; i < n; i++) {
    float scale;
    memcpy(&scale, in + 4 * (i / ATOLL_QBLOCK), 4);
    if (q == ATOLL_Q_INT8) {
      x[i] = (float)(int8_t)vals[i] * scale;
    } else {
      uint8_t c = (uint8_t)((vals[i / 2] >> (i % 2 ? 4 : 0)) & 15);
      float v = FP4_VALUES[c & 7];
      x[i] = (c & 8 ? -v : v) * scale;
    }
  }
}

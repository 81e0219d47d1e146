#ifndef ATOLL_OPS_EXP_APPROX_H
#define ATOLL_OPS_EXP_APPROX_H

#include <stdint.h>
#include <string.h>

/* exp(x) for float, written so that loops over it vectorize (glibc's vector expf is
 * only declared under -ffast-math, which would also break NaN checks). Range
 * reduction x = n ln2 + r with ln2 split in two (Cody-Waite), a degree-6 polynomial
 * for exp(r) on |r| <= ln2/2 (Taylor coefficients, adjusted for minimax), then 2^n
 * through the exponent bits. Max relative error about 2e-7 over [-87, 88]; inputs are
 * clamped to that range (exp(-87) ~ 1.6e-38, far below any probability that matters). */
static inline float atoll_exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x; /* ternaries vectorize; fminf/fmaxf do not */
  x = x > 88.0f ? 88.0f : x;
  /* round x/ln2 to the nearest integer n by adding and removing 1.5 * 2^23; t's low
   * mantissa bits then hold n as an integer */
  float t = x * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  /* 2^n from t's bits in unsigned arithmetic: a NaN x (p is NaN, and so the result)
   * converts no NaN to an integer and shifts no negative value (both undefined) */
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  uint32_t bits = (tb - 0x4B400000u + 127u) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#endif

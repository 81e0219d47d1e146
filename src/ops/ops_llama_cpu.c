/* CPU kernels of the Llama block: RMSNorm, rotary position embeddings (Hugging Face's
 * half-split convention) and the SwiGLU gate; grouped-query attention shares GPT-2's
 * kernel (src/ops/attention_cpu.c). Contracts: src/ops/ops.h. Same determinism rule as
 * src/ops/ops_cpu.c: reductions over rows are split across threads by channel, and every
 * output float is written by one thread, so results are bit-identical for a given
 * thread count. */
#include "ops/ops_llama_cpu.h"

#include "core/fatal.h"
#include "ops/exp_approx.h"
#include "ops/gemm_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 64 /* channels per task in reductions over rows */

/* ------------------------------------------------------------------ RMSNorm --- */

/* 1 / sqrt(mean(x^2) + eps) of one row */
static inline float rms_rstd(const float *xr, int C, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
  return 1.0f / sqrtf(ss / C + eps);
}

/* out, or (out NULL) outb: the same values rounded to bf16 for the next products (ops.h) */
static void rmsnorm_rows(float *out, uint16_t *outb, float *rstd, const float *x, const float *w, int N, int C,
                         float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    float r = rms_rstd(xr, C, eps);
    if (out) {
      float *o = out + (size_t)n * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = xr[c] * r * w[c];
    } else {
      uint16_t *o = outb + (size_t)n * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = atoll_bf16_from_f32(xr[c] * r * w[c]);
    }
    rstd[n] = r;
  }
}

void atoll_llama_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
  rmsnorm_rows(out, NULL, rstd, x, w, N, C, eps);
}

void atoll_llama_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C,
                                      float eps) {
  rmsnorm_rows(NULL, out, rstd, x, w, N, C, eps);
}

/* With y = w x r, r = (mean(x^2) + eps)^(-1/2):
 *   dx_j = r (w_j g_j - x_j r^2 mean_i(w_i g_i x_i)),  dw_j = sum over rows of g_j x_j r. */
void atoll_llama_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                                  const float *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *d = dout + (size_t)n * C, *xr = x + (size_t)n * C;
    float *dxr = dx + (size_t)n * C;
    float r = rstd[n], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; c++) dot += w[c] * d[c] * xr[c];
    float k = dot / C * r * r;
#pragma omp simd
    for (int c = 0; c < C; c++) dxr[c] += r * (w[c] * d[c] - xr[c] * k);
  }
  int nchunks = (C + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nchunks; ch++) {
    int c0 = ch * CHUNK, c1 = c0 + CHUNK < C ? c0 + CHUNK : C;
    float acc[CHUNK] = {0};
    for (int n = 0; n < N; n++) {
      const float *d = dout + (size_t)n * C, *xr = x + (size_t)n * C;
      float r = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; c++) acc[c - c0] += d[c] * xr[c] * r;
    }
    for (int c = c0; c < c1; c++) dw[c] += acc[c - c0];
  }
}

/* --------------------------------------------------------------------- RoPE --- */

/* Each head's pair (i, i + hs/2) turns by the angle pos freq[i] (theta^(-2i/hs), or
 * scaled: src/model/rope.c); backward turns the gradient by the opposite angle (the
 * rotation's transpose). The angles are formed in double and rounded once. */
void atoll_llama_rope(float *x, int B, int T, int H, int hs, const double *freq, int pos0, int inverse) {
  int half = hs / 2;
  float *cs = malloc(sizeof(float) * 2 * (size_t)T * half);
  if (!cs) atoll_fatal("rope: out of memory for %d x %d angles", T, half);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      double a = (double)(pos0 + t) * freq[i];
      cs[((size_t)t * half + i) * 2] = (float)cos(a);
      cs[((size_t)t * half + i) * 2 + 1] = (float)(inverse ? -sin(a) : sin(a));
    }
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *ct = cs + (size_t)t * half * 2;
      for (int h = 0; h < H; h++) {
        float *v = x + (((size_t)b * T + t) * H + h) * hs;
        for (int i = 0; i < half; i++) {
          float c = ct[2 * i], s = ct[2 * i + 1], x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c - x2 * s;
          v[i + half] = x2 * c + x1 * s;
        }
      }
    }
  free(cs);
}

/* ------------------------------------------------------------------- SwiGLU --- */

#define BLOCK 4096

/* silu(g) u = g sigmoid(g) u; exp through atoll_exp_approx so that the loops vectorize */
static inline float swiglu_value(float g, float u) { return g / (1.0f + atoll_exp_approx(-g)) * u; }

/* out, or (out NULL) outb: the same values rounded to bf16 for the next product (ops.h) */
static void swiglu_elements(float *out, uint16_t *outb, const float *gate, const float *up, size_t n) {
  size_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    size_t i0 = blk * BLOCK, i1 = (blk + 1) * BLOCK < n ? (blk + 1) * BLOCK : n;
    if (out) {
#pragma omp simd
      for (size_t i = i0; i < i1; i++) out[i] = swiglu_value(gate[i], up[i]);
    } else {
#pragma omp simd
      for (size_t i = i0; i < i1; i++) outb[i] = atoll_bf16_from_f32(swiglu_value(gate[i], up[i]));
    }
  }
}

void atoll_llama_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
  swiglu_elements(out, NULL, gate, up, n);
}

void atoll_llama_swiglu_forward_bf16(uint16_t *out, const float *gate, const float *up, size_t n) {
  swiglu_elements(NULL, out, gate, up, n);
}

/* silu(g) = g s, s = sigmoid(g); silu'(g) = s (1 + g (1 - s)). */
/* dgate and dup of one element (the derivatives above) */
static inline void swiglu_grads(float g, float u, float d, float *dgate, float *dup) {
  float s = 1.0f / (1.0f + atoll_exp_approx(-g));
  *dup = d * g * s;
  *dgate = d * u * s * (1.0f + g * (1.0f - s));
}

/* dgate and dup, or (dgate NULL) dgateb and dupb: the same rounded to bf16 as the gate
 * and up products' douts (ops.h). dgate may be dout itself. */
static void swiglu_backward_elements(float *dgate, float *dup, uint16_t *dgateb, uint16_t *dupb, const float *dout,
                                     const float *gate, const float *up, size_t n) {
  size_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    size_t i0 = blk * BLOCK, i1 = (blk + 1) * BLOCK < n ? (blk + 1) * BLOCK : n;
    if (dgate) {
#pragma omp simd
      for (size_t i = i0; i < i1; i++) swiglu_grads(gate[i], up[i], dout[i], &dgate[i], &dup[i]);
    } else {
#pragma omp simd
      for (size_t i = i0; i < i1; i++) {
        float dg, du;
        swiglu_grads(gate[i], up[i], dout[i], &dg, &du);
        dgateb[i] = atoll_bf16_from_f32(dg);
        dupb[i] = atoll_bf16_from_f32(du);
      }
    }
  }
}

void atoll_llama_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                 size_t n) {
  swiglu_backward_elements(dgate, dup, NULL, NULL, dout, gate, up, n);
}

void atoll_llama_swiglu_backward_bf16(uint16_t *dgate, uint16_t *dup, const float *dout, const float *gate,
                                      const float *up, size_t n) {
  swiglu_backward_elements(NULL, NULL, dgate, dup, dout, gate, up, n);
}

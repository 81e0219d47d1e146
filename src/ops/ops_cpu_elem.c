/* The CPU table's elementwise and normalisation kernels: embeddings, LayerNorm, GELU,
 * rounding to bf16 and cross-entropy, as OpenMP-threaded loops written so the compiler
 * vectorizes them. The matrix products and the table itself: src/ops/ops_cpu.c.
 *
 * Determinism: as in ops_cpu.c, every kernel gives bit-identical results for the same
 * inputs and thread count; reductions over rows (LayerNorm and embedding gradients, the
 * bias gradient of gelu_backward_bf16) are split across threads by channel, never by row. */
#include "ops/ops_cpu_elem.h"

#include "core/fatal.h"
#include "ops/exp_approx.h"
#include "ops/gemm_cpu.h" /* atoll_bf16_from_f32 */

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- embedding --- */

void atoll_embed_forward_cpu(float *out, const int32_t *tok, const float *wte, const float *wpe,
                             int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *we = wte + (size_t)tok[b * T + t] * C;
      if (!wpe) {
        memcpy(o, we, sizeof(float) * (size_t)C);
        continue;
      }
      const float *pe = wpe + (size_t)t * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

void atoll_embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                              int T, int C) {
  int nchunks = (C + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nchunks; ch++) {
    int c0 = ch * CHUNK, c1 = c0 + CHUNK < C ? c0 + CHUNK : C;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const float *d = dout + ((size_t)b * T + t) * C;
        float *we = dwte + (size_t)tok[b * T + t] * C;
        if (!dwpe) {
          for (int c = c0; c < c1; c++) we[c] += d[c];
          continue;
        }
        float *pe = dwpe + (size_t)t * C;
        for (int c = c0; c < c1; c++) {
          we[c] += d[c];
          pe[c] += d[c];
        }
      }
  }
}

/* ---------------------------------------------------------------- layernorm --- */

/* One row's mean and 1/std: what forward saves and backward reads. */
static inline void layernorm_stats(const float *xr, int C, float *mean, float *rstd) {
  const float eps = 1e-5f;
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int c = 0; c < C; c++) s += xr[c];
  float m = s / C;
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int c = 0; c < C; c++) {
    float d = xr[c] - m;
    v += d * d;
  }
  *mean = m;
  *rstd = 1.0f / sqrtf(v / C + eps);
}

/* out, or (out NULL) outb: the same values rounded to bf16 for the next product (ops.h) */
static void layernorm_rows(float *out, uint16_t *outb, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    float m, r;
    layernorm_stats(xr, C, &m, &r);
    if (out) {
      float *o = out + (size_t)n * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = (xr[c] - m) * r * w[c] + b[c];
    } else {
      uint16_t *o = outb + (size_t)n * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = atoll_bf16_from_f32((xr[c] - m) * r * w[c] + b[c]);
    }
    mean[n] = m;
    rstd[n] = r;
  }
}

void atoll_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int N, int C) {
  layernorm_rows(out, NULL, mean, rstd, x, w, b, N, C);
}

void atoll_layernorm_forward_bf16_cpu(uint16_t *out, float *mean, float *rstd, const float *x, const float *w,
                                      const float *b, int N, int C) {
  layernorm_rows(NULL, out, mean, rstd, x, w, b, N, C);
}

void atoll_layernorm_backward_cpu(float *dx, float *dw, float *db, const float *dout, const float *x,
                                  const float *w, const float *mean, const float *rstd, int N,
                                  int C) {
  /* input gradient: rows are independent */
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *d = dout + (size_t)n * C, *xr = x + (size_t)n * C;
    float *dxr = dx + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int c = 0; c < C; c++) {
      float norm = (xr[c] - m) * r;
      float dnorm = w[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float norm = (xr[c] - m) * r;
      float dnorm = w[c] * d[c];
      dxr[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
    }
  }
  /* parameter gradients: a reduction over rows, split by channel */
  int nchunks = (C + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nchunks; ch++) {
    int c0 = ch * CHUNK, c1 = c0 + CHUNK < C ? c0 + CHUNK : C;
    float accw[CHUNK] = {0}, accb[CHUNK] = {0};
    for (int n = 0; n < N; n++) {
      const float *d = dout + (size_t)n * C, *xr = x + (size_t)n * C;
      float m = mean[n], r = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; c++) {
        accw[c - c0] += (xr[c] - m) * r * d[c];
        accb[c - c0] += d[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += accw[c - c0];
      db[c] += accb[c - c0];
    }
  }
}

/* --------------------------------------------------------------------- GELU --- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* e = exp(2u) for GELU's tanh argument u, with 2u clamped to [-80, 40]: beyond it
 * tanh is +-1 in float anyway, and e, 1/(1+e) and their products stay normal floats. */
static inline float gelu_exp2u(float v) {
  float z = 2.0f * GELU_K * (v + 0.044715f * v * v * v);
  z = z < -80.0f ? -80.0f : z;
  z = z > 40.0f ? 40.0f : z;
  return atoll_exp_approx(z);
}

/* Elementwise loops run as threaded blocks with a vectorized inner loop (gcc does not
 * vectorize these bodies under a combined `parallel for simd`). */
#define BLOCK 4096

/* 0.5 (1 + tanh u) = e / (1 + e) with e = exp(2u): no cancellation for u << 0 */
static inline float gelu_value(float v) {
  float e = gelu_exp2u(v);
  return v * (e / (1.0f + e));
}

/* out, or (out NULL) outb: the same values rounded to bf16 for the next product (ops.h) */
static void gelu_elements(float *out, uint16_t *outb, const float *x, size_t n) {
  size_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    size_t i0 = blk * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
    if (out) {
#pragma omp simd
      for (size_t i = i0; i < i1; i++) out[i] = gelu_value(x[i]);
    } else {
#pragma omp simd
      for (size_t i = i0; i < i1; i++) outb[i] = atoll_bf16_from_f32(gelu_value(x[i]));
    }
  }
}

void atoll_gelu_forward_cpu(float *out, const float *x, size_t n) { gelu_elements(out, NULL, x, n); }

void atoll_gelu_forward_bf16_cpu(uint16_t *out, const float *x, size_t n) { gelu_elements(NULL, out, x, n); }

/* n floats rounded to bf16 (round to nearest even). */
void atoll_round_bf16_cpu(uint16_t *dst, const float *src, size_t n) {
  size_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (size_t blk = 0; blk < nblocks; blk++) {
    size_t i0 = blk * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
#pragma omp simd
    for (size_t i = i0; i < i1; i++) dst[i] = atoll_bf16_from_f32(src[i]);
  }
}

/* GELU's derivative at v; with e = exp(2u): 0.5 (1 + tanh u) = e / (1 + e),
 * sech^2 u = 4 e / (1 + e)^2 */
static inline float gelu_grad(float v) {
  float e = gelu_exp2u(v);
  float r = 1.0f / (1.0f + e);
  float half_one_plus_tanh = e * r;
  float sech2 = 4.0f * half_one_plus_tanh * r;
  return half_one_plus_tanh + 0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
}

void atoll_gelu_backward_cpu(float *dx, const float *x, const float *dout, size_t n) {
  size_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    size_t i0 = blk * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
#pragma omp simd
    for (size_t i = i0; i < i1; i++) dx[i] = gelu_grad(x[i]) * dout[i];
  }
}

/* gelu_backward's dx over N rows of C, written rounded to bf16 for the next product's
 * backward, its column sums added to dbias in the same pass (spans of channels as in
 * bf16_convert_colsum: the same bits as gelu_backward followed by the bf16 product). */
void atoll_gelu_backward_bf16_cpu(uint16_t *dx, float *dbias, const float *x, const float *dout, int N, int C) {
  int span = wide_chunk(C), nchunks = (C + span - 1) / span;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nchunks; ch++) {
    int j0 = ch * span, j1 = j0 + span < C ? j0 + span : C;
    float acc[WIDE_CHUNK] = {0};
    for (int n = 0; n < N; n++) {
      const float *xr = x + (size_t)n * C, *d = dout + (size_t)n * C;
      uint16_t *o = dx + (size_t)n * C;
#pragma omp simd
      for (int j = j0; j < j1; j++) {
        float g = gelu_grad(xr[j]) * d[j];
        acc[j - j0] += g;
        o[j] = atoll_bf16_from_f32(g);
      }
    }
    for (int j = j0; j < j1; j++) dbias[j] += acc[j - j0];
  }
}

/* ------------------------------------------------------------ cross-entropy --- */

void atoll_xent_forward_cpu(float *losses, float *lse, const float *logits, const int32_t *targets,
                            int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *z = logits + (size_t)n * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) sum += atoll_exp_approx(z[v] - mx);
    float l = mx + logf(sum);
    lse[n] = l;
    losses[n] = l - z[targets[n]];
  }
}

void atoll_xent_backward_cpu(float *logits, const float *lse, const int32_t *targets, float dloss,
                             int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *z = logits + (size_t)n * V;
    float l = lse[n];
#pragma omp simd
    for (int v = 0; v < V; v++) z[v] = atoll_exp_approx(z[v] - l) * dloss;
    z[targets[n]] -= dloss;
  }
}

/* xent_backward's values, rounded to bf16 into dlogits for the LM head's backward: the
 * same bits as xent_backward followed by the product's rounding of its dout, without
 * writing the fp32 gradient to the logits and reading it back (400 MB a step at GPT-2's
 * vocabulary). Each row goes through a thread's fp32 buffer, which stays in cache, so
 * that the target's subtraction is done as in xent_backward. */
void atoll_xent_backward_bf16_cpu(uint16_t *dlogits, const float *logits, const float *lse, const int32_t *targets,
                                  float dloss, int N, int V) {
  int failed = 0;
#pragma omp parallel reduction(| : failed)
  {
    float *g = malloc(sizeof(float) * (size_t)V);
    failed = !g;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      if (!g) continue;
      const float *z = logits + (size_t)n * V;
      uint16_t *d = dlogits + (size_t)n * V;
      float l = lse[n];
#pragma omp simd
      for (int v = 0; v < V; v++) g[v] = atoll_exp_approx(z[v] - l) * dloss;
      g[targets[n]] -= dloss;
#pragma omp simd
      for (int v = 0; v < V; v++) d[v] = atoll_bf16_from_f32(g[v]);
    }
    free(g);
  }
  if (failed) atoll_fatal("cross-entropy backward: out of memory for a row of %d floats", V);
}

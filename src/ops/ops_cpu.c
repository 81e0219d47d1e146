/* CPU kernels: matrix products through the CPU matrix engine (gemm_cpu.h), everything else as
 * OpenMP-threaded loops written so the compiler vectorizes them.
 *
 * Determinism: every kernel gives bit-identical results for the same inputs and
 * thread count. Reductions over rows (bias and LayerNorm gradients, embedding
 * gradients) are split across threads by channel, never by row, so no two threads
 * add into the same float. */
#include "ops/ops.h"
#include "ops/ops_llama_cpu.h"

#include "core/fatal.h"
#include "core/mem.h"
#include "ops/attention_bf16.h"
#include "ops/exp_approx.h"
#include "ops/gemm_cpu.h"
#include "ops/optim_cpu.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Page-aligned, zeroed mappings whose pages sharded data parallel can hand back
 * (src/core/mem.h). */
static void *cpu_alloc(size_t bytes) { return atoll_mem_alloc(bytes); }

static void cpu_free(void *p) { atoll_mem_free(p); }

/* Host memory: every copy is a memcpy (the source may be NULL when bytes is 0), every
 * zeroing a memset. From SPLIT_BYTES on, outside parallel regions, the threads take a
 * piece each: on one thread the other cores waited at their next barrier (the residual
 * copies and gradient zeroing were about 2% of a bf16 step, all on one thread). */
#define SPLIT_BYTES ((size_t)1 << 20)

/* 1 when a fill of bytes runs on the calling thread alone */
static int one_thread(size_t bytes) {
  return bytes < SPLIT_BYTES || omp_in_parallel() || omp_get_max_threads() == 1;
}

static void split_fill(void *dst, const void *src, size_t bytes) {
  int nt = omp_get_max_threads();
  size_t per = (bytes / (size_t)nt + 4095) & ~(size_t)4095; /* whole pages */
#pragma omp parallel for schedule(static)
  for (int t = 0; t < nt; t++) {
    size_t a = (size_t)t * per;
    if (a >= bytes) continue;
    size_t n = bytes - a < per ? bytes - a : per;
    if (src)
      memcpy((char *)dst + a, (const char *)src + a, n);
    else
      memset((char *)dst + a, 0, n);
  }
}

static void cpu_copy(void *dst, const void *src, size_t bytes) {
  if (!one_thread(bytes))
    split_fill(dst, src, bytes);
  else if (bytes)
    memcpy(dst, src, bytes);
}

static void cpu_zero(void *dst, size_t bytes) {
  if (!one_thread(bytes))
    split_fill(dst, NULL, bytes);
  else if (bytes)
    memset(dst, 0, bytes);
}

/* Channels per task when threads split a reduction over rows by channel. */
#define CHUNK 64

/* ---------------------------------------------------------------- embedding --- */

static void embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
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

static void embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
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

static void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int N, int C) {
  layernorm_rows(out, NULL, mean, rstd, x, w, b, N, C);
}

static void layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *x, const float *w,
                                   const float *b, int N, int C) {
  layernorm_rows(NULL, out, mean, rstd, x, w, b, N, C);
}

static void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
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

/* ------------------------------------------------------------------- matmul --- */

static void add_bias(float *out, const float *bias, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * OC;
#pragma omp simd
    for (int j = 0; j < OC; j++) o[j] += bias[j];
  }
}

/* The matrix products' precision: fp32 (atoll_gemm_f32) or bf16 inputs with fp32
 * accumulation (atoll_gemm_bf16, the table of atoll_ops_cpu_bf16). */
typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int, float,
                        float *, int);

static void matmul_forward_with(gemm_fn gemm, float *out, const float *x, const float *w, const float *bias,
                                int N, int C, int OC, int accumulate) {
  gemm(0, 1, N, OC, C, 1.0f, x, C, w, C, accumulate ? 1.0f : 0.0f, out, OC);
  if (bias) add_bias(out, bias, N, OC);
}

static void matmul_forward(float *out, const float *x, const float *w, const float *bias, int N,
                           int C, int OC, int accumulate) {
  matmul_forward_with(atoll_gemm_f32, out, x, w, bias, N, C, OC, accumulate);
}

/* bf16 on inputs already rounded (ops.h: kept by the caller). */
static void matmul_forward_kept(float *out, const uint16_t *x, const uint16_t *w, const float *bias, int N, int C,
                                int OC, int accumulate) {
  if (N == 0 || OC == 0) return;
  atoll_gemm_bf16_bits(0, 1, N, OC, C, 1.0f, x, C, w, C, accumulate ? 1.0f : 0.0f, out, OC, NULL);
  /* The bias could go into the product (atoll_gemm_bf16_bits takes one). For a fresh out
   * oneDNN adds it to the finished sum, the same bits as this pass, but the step was no
   * shorter (bench/README.md, "512-bit vectors, ..."); added to out (accumulate) it goes
   * in before out and rounds differently. */
  if (bias) add_bias(out, bias, N, OC);
}

/* bf16: x and w rounded once each into this thread's buffers. */
static void matmul_forward_bf16(float *out, const float *x, const float *w, const float *bias, int N,
                                int C, int OC, int accumulate) {
  if (N == 0 || OC == 0) return;
  uint16_t *xb = atoll_bf16_scratch(4, (size_t)N * C), *wb = atoll_bf16_scratch(3, (size_t)OC * C);
  atoll_bf16_convert(xb, x, N, C, C);
  atoll_bf16_convert(wb, w, OC, C, C);
  matmul_forward_kept(out, xb, wb, bias, N, C, OC, accumulate);
}

static void matmul_backward_with(gemm_fn gemm, float *dx, float *dw, float *dbias, const float *dout,
                                 const float *x, const float *w, int N, int C, int OC, int accumulate_dx) {
  /* dx[N,C] = dout[N,OC] @ w[OC,C] */
  gemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, accumulate_dx ? 1.0f : 0.0f, dx, C);
  /* dw[OC,C] += dout^T @ x */
  gemm(1, 0, OC, C, N, 1.0f, dout, OC, x, C, 1.0f, dw, C);
  if (dbias) {
    int nchunks = (OC + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunks; ch++) {
      int j0 = ch * CHUNK, j1 = j0 + CHUNK < OC ? j0 + CHUNK : OC;
      float acc[CHUNK] = {0};
      for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OC;
#pragma omp simd
        for (int j = j0; j < j1; j++) acc[j - j0] += d[j];
      }
      for (int j = j0; j < j1; j++) dbias[j] += acc[j - j0];
    }
  }
}

static void matmul_backward(float *dx, float *dw, float *dbias, const float *dout, const float *x,
                            const float *w, int N, int C, int OC, int accumulate_dx) {
  matmul_backward_with(atoll_gemm_f32, dx, dw, dbias, dout, x, w, N, C, OC, accumulate_dx);
}

/* Channels per task of a column sum that also rounds every element: a span of up to
 * WIDE_CHUNK channels read row after row (long contiguous runs the prefetcher follows;
 * 64-channel chunks read 256 bytes per row and were bound by memory latency), about
 * one span per thread. Each channel's sum still runs over the rows in order, so the
 * bits do not depend on the span. */
#define WIDE_CHUNK 1024
static int wide_chunk(int cols) {
  int nt = omp_get_max_threads(), ch = (cols + nt - 1) / nt;
  ch = (ch + 15) / 16 * 16;
  return ch > WIDE_CHUNK ? WIDE_CHUNK : ch < 16 ? 16 : ch;
}

/* dout rounded to bf16 once for both products, in the same pass that sums dbias (split
 * by channel as in matmul_backward_with, so dbias gets the same bits as at fp32). */
static void bf16_convert_colsum(uint16_t *out, float *colsum, const float *X, int rows, int cols) {
  int span = wide_chunk(cols), nchunks = (cols + span - 1) / span;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nchunks; ch++) {
    int j0 = ch * span, j1 = j0 + span < cols ? j0 + span : cols;
    float acc[WIDE_CHUNK] = {0};
    for (int n = 0; n < rows; n++) {
      const float *d = X + (size_t)n * cols;
      uint16_t *o = out + (size_t)n * cols;
#pragma omp simd
      for (int j = j0; j < j1; j++) {
        acc[j - j0] += d[j];
        o[j] = atoll_bf16_from_f32(d[j]);
      }
    }
    if (colsum)
      for (int j = j0; j < j1; j++) colsum[j] += acc[j - j0];
  }
}

/* bf16 on inputs and an output gradient already rounded (ops.h) */
static void matmul_backward_rounded(float *dx, float *dw, const uint16_t *dout, const uint16_t *x, const uint16_t *w,
                                    int N, int C, int OC, int accumulate_dx) {
  /* dx[N,C] = dout @ w;  dw[OC,C] += dout^T @ x (empty sums: the engine writes zeros or
   * leaves C as it is) */
  atoll_gemm_bf16_bits(0, 0, N, C, OC, 1.0f, dout, OC, w, C, accumulate_dx ? 1.0f : 0.0f, dx, C, NULL);
  atoll_gemm_bf16_bits(1, 0, OC, C, N, 1.0f, dout, OC, x, C, 1.0f, dw, C, NULL);
}

/* bf16 on inputs already rounded (ops.h: kept by the caller); dout is rounded here,
 * once for both products. */
static void matmul_backward_kept(float *dx, float *dw, float *dbias, const float *dout, const uint16_t *x,
                                 const uint16_t *w, int N, int C, int OC, int accumulate_dx) {
  uint16_t *db = atoll_bf16_scratch(2, (size_t)N * OC);
  if (dbias)
    bf16_convert_colsum(db, dbias, dout, N, OC);
  else
    atoll_bf16_convert(db, dout, N, OC, OC);
  matmul_backward_rounded(dx, dw, db, x, w, N, C, OC, accumulate_dx);
}

static void matmul_backward_bf16(float *dx, float *dw, float *dbias, const float *dout, const float *x,
                                 const float *w, int N, int C, int OC, int accumulate_dx) {
  uint16_t *xb = atoll_bf16_scratch(4, (size_t)N * C), *wb = atoll_bf16_scratch(3, (size_t)OC * C);
  atoll_bf16_convert(xb, x, N, C, C);
  atoll_bf16_convert(wb, w, OC, C, C);
  matmul_backward_kept(dx, dw, dbias, dout, xb, wb, N, C, OC, accumulate_dx);
}

/* ---------------------------------------------------------------- attention --- */

/* Causal attention, one (batch, head) pair per OpenMP task, in blocks of ATT_BLOCK
 * query rows. Each block's scores against the keys it may see (columns [0, r1)) are a
 * small sgemm into per-thread scratch, softmaxed in place, then multiplied by V. Only
 * each row's log-sum-exp is kept for backward, so memory is O(T) per head instead of
 * an O(T^2) attention matrix per layer; backward recomputes the probabilities block
 * by block. Blocking also skips most of the masked upper triangle: the matrix
 * products cost about (1 + 1/nblocks)/2 of the full square.
 *
 * OpenBLAS's OpenMP build runs an sgemm called inside a parallel region on the
 * calling thread alone, so the heads are what is spread over the threads. */
#define ATT_BLOCK 64

typedef struct {
  const float *q, *k, *v; /* rows of this head, row stride 3C */
  int ld;                 /* 3C */
  int T, hs;
  float scale;
} head_view;

static head_view head_at(const float *qkv, int b, int h, int T, int C, int NH) {
  head_view hv;
  int hs = C / NH;
  const float *base = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
  hv.q = base;
  hv.k = base + C;
  hv.v = base + 2 * C;
  hv.ld = 3 * C;
  hv.T = T;
  hv.hs = hs;
  hv.scale = 1.0f / sqrtf((float)hs);
  return hv;
}

/* S[rows r0..r1, cols 0..r1) = scale * Q K^T, row stride r1 */
static void block_scores(float *S, const head_view *hv, int r0, int r1) {
  atoll_gemm_f32(0, 1, r1 - r0, r1, hv->hs, hv->scale, hv->q + (size_t)r0 * hv->ld, hv->ld, hv->k, hv->ld,
                 0.0f, S, r1);
}

/* Scratch of per_thread floats for each of *threads threads, allocated before the
 * parallel region (a failed malloc inside it had nowhere to go). Short of memory for
 * every thread, fewer threads run: the same bits, since one thread computes each
 * (batch, head) pair alone. The ops interface has no error path, so running out even
 * for one thread is fatal, with a message rather than a crash. */
float *atoll_att_scratch(size_t per_thread, int *threads) {
  for (int nt = omp_get_max_threads(); nt >= 1; nt /= 2) {
    float *s = malloc(sizeof(float) * per_thread * (size_t)nt);
    if (s) {
      *threads = nt;
      return s;
    }
  }
  atoll_fatal("attention: out of memory for %zu bytes of scratch", sizeof(float) * per_thread);
}

static void attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                              int NH) {
  size_t per_thread = (size_t)ATT_BLOCK * T;
  int nt;
  float *scratch = atoll_att_scratch(per_thread, &nt);
#pragma omp parallel num_threads(nt)
  {
    float *S = scratch + (size_t)omp_get_thread_num() * per_thread;
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        head_view hv = head_at(qkv, b, h, T, C, NH);
        float *lse_h = lse + ((size_t)b * NH + h) * T;
        float *out_h = out + (size_t)b * T * C + (size_t)h * hv.hs;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
          int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
          block_scores(S, &hv, r0, r1);
          for (int i = r0; i < r1; i++) {
            float *row = S + (size_t)(i - r0) * r1;
            int n = i + 1;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < n; j++) {
              row[j] = atoll_exp_approx(row[j] - mx);
              sum += row[j];
            }
            float inv = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j < n; j++) row[j] *= inv;
            for (int j = n; j < r1; j++) row[j] = 0.0f; /* masked: future keys */
            lse_h[i] = mx + logf(sum);
          }
          /* out[rows] = P V */
          atoll_gemm_f32(0, 0, r1 - r0, hv.hs, r1, 1.0f, S, r1, hv.v, hv.ld, 0.0f, out_h + (size_t)r0 * C, C);
        }
      }
  }
  free(scratch);
}

static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int C, int NH) {
  size_t per_thread = 2 * (size_t)ATT_BLOCK * T;
  int nt;
  float *scratch = atoll_att_scratch(per_thread, &nt);
#pragma omp parallel num_threads(nt)
  {
    float *P = scratch + (size_t)omp_get_thread_num() * per_thread;
    float *dS = P + (size_t)ATT_BLOCK * T;
    float D[ATT_BLOCK];
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        head_view hv = head_at(qkv, b, h, T, C, NH);
        int hs = hv.hs, ld = hv.ld;
        const float *lse_h = lse + ((size_t)b * NH + h) * T;
        const float *dout_h = dout + (size_t)b * T * C + (size_t)h * hs;
        const float *out_h = out + (size_t)b * T * C + (size_t)h * hs;
        float *dq = dqkv + (size_t)b * T * ld + (size_t)h * hs;
        float *dk = dq + C, *dv = dq + 2 * C;
        for (int t = 0; t < T; t++) {
          memset(dk + (size_t)t * ld, 0, sizeof(float) * (size_t)hs);
          memset(dv + (size_t)t * ld, 0, sizeof(float) * (size_t)hs);
        }
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
          int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
          /* P = exp(S - lse), recomputed */
          block_scores(P, &hv, r0, r1);
          for (int i = r0; i < r1; i++) {
            float *row = P + (size_t)(i - r0) * r1;
            float l = lse_h[i];
            int n = i + 1;
#pragma omp simd
            for (int j = 0; j < n; j++) row[j] = atoll_exp_approx(row[j] - l);
            for (int j = n; j < r1; j++) row[j] = 0.0f;
            const float *o = out_h + (size_t)i * C, *g = dout_h + (size_t)i * C;
            float d = 0.0f;
#pragma omp simd reduction(+ : d)
            for (int c = 0; c < hs; c++) d += o[c] * g[c];
            D[i - r0] = d;
          }
          /* dP = dO V^T, then dS = P (dP - D) * scale, in place */
          atoll_gemm_f32(0, 1, rows, r1, hs, 1.0f, dout_h + (size_t)r0 * C, C, hv.v, ld, 0.0f, dS, r1);
          for (int i = 0; i < rows; i++) {
            float *ds = dS + (size_t)i * r1;
            const float *p = P + (size_t)i * r1;
            float d = D[i];
#pragma omp simd
            for (int j = 0; j < r1; j++) ds[j] = p[j] * (ds[j] - d) * hv.scale;
          }
          /* dQ[rows] = dS K;  dK += dS^T Q[rows];  dV += P^T dO[rows] */
          atoll_gemm_f32(0, 0, rows, hs, r1, 1.0f, dS, r1, hv.k, ld, 0.0f, dq + (size_t)r0 * ld, ld);
          atoll_gemm_f32(1, 0, r1, hs, rows, 1.0f, dS, r1, hv.q + (size_t)r0 * ld, ld, 1.0f, dk, ld);
          atoll_gemm_f32(1, 0, r1, hs, rows, 1.0f, P, r1, dout_h + (size_t)r0 * C, C, 1.0f, dv, ld);
        }
      }
  }
  free(scratch);
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

static void gelu_forward(float *out, const float *x, size_t n) { gelu_elements(out, NULL, x, n); }

static void gelu_forward_bf16(uint16_t *out, const float *x, size_t n) { gelu_elements(NULL, out, x, n); }

/* n floats rounded to bf16 (round to nearest even). */
static void round_bf16(uint16_t *dst, const float *src, size_t n) {
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

static void gelu_backward(float *dx, const float *x, const float *dout, size_t n) {
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
static void gelu_backward_bf16(uint16_t *dx, float *dbias, const float *x, const float *dout, int N, int C) {
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

static void xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
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

static void xent_backward(float *logits, const float *lse, const int32_t *targets, float dloss,
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
static void xent_backward_bf16(uint16_t *dlogits, const float *logits, const float *lse, const int32_t *targets,
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

static const atoll_ops cpu_ops = {
    .name = "cpu",
    .device = 0,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sumsq = atoll_sumsq_cpu,
    .adamw = atoll_adamw_span_cpu,
    .sgd = atoll_sgd_span_cpu,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .xent_forward = xent_forward,
    .xent_backward = xent_backward,
    .rmsnorm_forward = atoll_llama_rmsnorm_forward,
    .rmsnorm_backward = atoll_llama_rmsnorm_backward,
    .rope = atoll_llama_rope,
    .swiglu_forward = atoll_llama_swiglu_forward,
    .swiglu_backward = atoll_llama_swiglu_backward,
    .gqa_forward = atoll_llama_gqa_forward,
    .gqa_backward = atoll_llama_gqa_backward,
};

const atoll_ops *atoll_ops_cpu(void) { return &cpu_ops; }

/* The bf16 table: the fp32 table with bf16 matrix products, copied at first use so
 * that every other kernel stays the fp32 one. */
static atoll_ops cpu_bf16_ops;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static void make_bf16_ops(void) {
  cpu_bf16_ops = cpu_ops;
  cpu_bf16_ops.name = "cpu-bf16";
  cpu_bf16_ops.matmul_forward = matmul_forward_bf16;
  cpu_bf16_ops.matmul_backward = matmul_backward_bf16;
  cpu_bf16_ops.round_bf16 = round_bf16;
  cpu_bf16_ops.layernorm_forward_bf16 = layernorm_forward_bf16;
  cpu_bf16_ops.gelu_forward_bf16 = gelu_forward_bf16;
  cpu_bf16_ops.rmsnorm_forward_bf16 = atoll_llama_rmsnorm_forward_bf16;
  cpu_bf16_ops.swiglu_forward_bf16 = atoll_llama_swiglu_forward_bf16;
  cpu_bf16_ops.matmul_forward_bf16 = matmul_forward_kept;
  cpu_bf16_ops.matmul_backward_bf16 = matmul_backward_kept;
  cpu_bf16_ops.gelu_backward_bf16 = gelu_backward_bf16;
  cpu_bf16_ops.xent_backward_bf16 = xent_backward_bf16;
  cpu_bf16_ops.swiglu_backward_bf16 = atoll_llama_swiglu_backward_bf16;
  cpu_bf16_ops.matmul_backward_rounded = matmul_backward_rounded;
  /* attention's products in bf16 too, on AMX tiles; without AMX attention stays
   * fp32 (src/ops/attention_bf16.c says why) */
  if (atoll_attention_bf16_available()) {
    cpu_bf16_ops.attention_forward = atoll_attention_forward_bf16;
    cpu_bf16_ops.attention_backward = atoll_attention_backward_bf16;
    cpu_bf16_ops.gqa_forward = atoll_gqa_forward_bf16;
    cpu_bf16_ops.gqa_backward = atoll_gqa_backward_bf16;
  }
}

const atoll_ops *atoll_ops_cpu_bf16(void) {
  pthread_once(&bf16_once, make_bf16_ops);
  return &cpu_bf16_ops;
}

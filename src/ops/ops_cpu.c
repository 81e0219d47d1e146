/* CPU kernels: the op table (fp32 and bf16), host memory, matrix products through the
 * CPU matrix engine (gemm_cpu.h). The elementwise and normalisation kernels are in
 * src/ops/ops_cpu_elem.c, the Llama block's in src/ops/ops_llama_cpu.c, causal attention
 * (multi-head and grouped-query, fp32) in src/ops/attention_cpu.c.
 *
 * Determinism: every kernel gives bit-identical results for the same inputs and
 * thread count. Reductions over rows (bias and LayerNorm gradients, embedding
 * gradients) are split across threads by channel, never by row, so no two threads
 * add into the same float. */
#include "ops/ops.h"
#include "ops/ops_llama_cpu.h"

#include "core/mem.h"
#include "ops/attention_bf16.h"
#include "ops/attention_cpu.h"
#include "ops/gemm_cpu.h"
#include "ops/ops_cpu_elem.h"
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
    .embed_forward = atoll_embed_forward_cpu,
    .embed_backward = atoll_embed_backward_cpu,
    .layernorm_forward = atoll_layernorm_forward_cpu,
    .layernorm_backward = atoll_layernorm_backward_cpu,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .attention_forward = atoll_attention_forward_cpu,
    .attention_backward = atoll_attention_backward_cpu,
    .gelu_forward = atoll_gelu_forward_cpu,
    .gelu_backward = atoll_gelu_backward_cpu,
    .xent_forward = atoll_xent_forward_cpu,
    .xent_backward = atoll_xent_backward_cpu,
    .rmsnorm_forward = atoll_llama_rmsnorm_forward,
    .rmsnorm_backward = atoll_llama_rmsnorm_backward,
    .rope = atoll_llama_rope,
    .swiglu_forward = atoll_llama_swiglu_forward,
    .swiglu_backward = atoll_llama_swiglu_backward,
    .gqa_forward = atoll_gqa_forward_cpu,
    .gqa_backward = atoll_gqa_backward_cpu,
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
  cpu_bf16_ops.round_bf16 = atoll_round_bf16_cpu;
  cpu_bf16_ops.layernorm_forward_bf16 = atoll_layernorm_forward_bf16_cpu;
  cpu_bf16_ops.gelu_forward_bf16 = atoll_gelu_forward_bf16_cpu;
  cpu_bf16_ops.rmsnorm_forward_bf16 = atoll_llama_rmsnorm_forward_bf16;
  cpu_bf16_ops.swiglu_forward_bf16 = atoll_llama_swiglu_forward_bf16;
  cpu_bf16_ops.matmul_forward_bf16 = matmul_forward_kept;
  cpu_bf16_ops.matmul_backward_bf16 = matmul_backward_kept;
  cpu_bf16_ops.gelu_backward_bf16 = atoll_gelu_backward_bf16_cpu;
  cpu_bf16_ops.xent_backward_bf16 = atoll_xent_backward_bf16_cpu;
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

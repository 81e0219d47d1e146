/* The matrix engine on CPUs: every matrix product of the CPU kernels goes through
 * here, so the library that runs it is one choice made at run time from the
 * processor's features (src/ops/cpu_features.h), not a rewrite of the kernels.
 *
 * Products are row-major, like cblas_sgemm:
 *   C[M,N] = alpha * op(A) op(B) + beta * C,  op(A) [M,K], op(B) [K,N]
 * with op(X) = X^T when trans_X. fp32 products run on the fp32 engine (OpenBLAS or
 * oneDNN's sgemm, whichever measured faster on this kind of processor; bench/README.md).
 * bf16 products round A and B to bfloat16 (round to nearest even) and accumulate and
 * write C in fp32 (oneDNN's matmul: AMX tiles or AVX512_BF16 dot products). */
#ifndef ATOLL_OPS_GEMM_CPU_H
#define ATOLL_OPS_GEMM_CPU_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { ATOLL_ENGINE_OPENBLAS = 0, ATOLL_ENGINE_ONEDNN = 1 } atoll_engine;

/* fp32 product on the fp32 engine; may be called inside an OpenMP parallel region
 * (then it runs on the calling thread). */
void atoll_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);
/* bf16 x bf16 -> fp32 product (inputs rounded per call). Outside parallel regions
 * only. Needs atoll_gemm_bf16_check to have succeeded. */
void atoll_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);

/* bf16 products on inputs already in bf16 (no rounding pass per call): A and B hold
 * bf16 bits with leading dimensions lda, ldb as in atoll_gemm_bf16. bias (NULL: none)
 * is N floats added to every row of the product, before beta C is added. Thread-safe:
 * callers on different threads may run products at once (outside OpenMP parallel
 * regions; each product spreads over the threads itself). */
void atoll_gemm_bf16_bits(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float beta, float *C, int ldc, const float *bias);
/* batch products at once, the q-th on A + q sa, B + q sb, C + q sc (strides in elements). */
void atoll_gemm_bf16_batch(int batch, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                           long long sa, const uint16_t *B, int ldb, long long sb, float beta, float *C, int ldc,
                           long long sc, const float *bias);

/* rows x cols of X (row stride ld) rounded to bf16 into out (dense, row stride cols);
 * threaded when called outside a parallel region. */
void atoll_bf16_convert(uint16_t *out, const float *X, int rows, int cols, int ld);
/* A bf16 buffer of at least n elements belonging to the calling thread, one per slot
 * (0 .. ATOLL_BF16_SLOTS-1), kept between calls; slots 0 and 1 are atoll_gemm_bf16's. */
#define ATOLL_BF16_SLOTS 8
uint16_t *atoll_bf16_scratch(int slot, size_t n);

/* The fp32 engine: chosen from the processor at first use; set_engine overrides it
 * (benchmarks). Fails when the engine is not built in. */
atoll_engine atoll_gemm_engine(void);
int atoll_gemm_set_engine(atoll_engine e, atoll_err *err);
const char *atoll_gemm_engine_name(atoll_engine e);

/* 0 when bf16 products can run here; else -1 with one line saying why (no oneDNN in
 * this build, or a processor without AVX512_BF16 and AMX-BF16). */
int atoll_gemm_bf16_check(atoll_err *err);

/* OpenBLAS's kernel family (openblas_get_corename), whether it is a generic one on a
 * processor that has AVX2 or AVX-512, and the OPENBLAS_CORETYPE that fits this
 * processor (NULL when OpenBLAS's own choice is fine). */
const char *atoll_openblas_core(void);
const char *atoll_openblas_better_core(void);
const char *atoll_openblas_better_core_for(const char *core); /* the same for a named kernel family */
int atoll_openblas_generic(const char *core);                  /* 1 for a family without AVX2 */
/* 1 when oneDNN's bf16 products run on AMX tiles (its effective instruction set, under
 * ATOLL_MAX_ISA or its own ONEDNN_MAX_CPU_ISA); builds with oneDNN only. */
int atoll_gemm_bf16_on_amx(void);
/* What oneDNN's bf16 products run on, in words: "AMX-BF16 tiles", "AVX512_BF16", or
 * emulation when its own variable caps it below bf16 instructions. */
const char *atoll_gemm_bf16_units(void);

/* One line for the run's header: CPU model, features used, engine and kernel family,
 * bf16 instructions when precision_bf16, threads. */
void atoll_gemm_describe(char *buf, size_t n, int precision_bf16, int threads);

/* fp32 -> bf16 bits, round to nearest even (NaN stays NaN), and back. */
static inline uint16_t atoll_bf16_from_f32(float x) {
  union { float f; uint32_t u; } v = {x};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float atoll_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v = {(uint32_t)h << 16};
  return v.f;
}

#endif

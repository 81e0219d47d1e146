/* Internal to the CUDA op table (the .cu files of src/ops/cuda; the public header is
 * src/ops/ops_cuda.h): the error checks, the process state every family shares
 * (cuBLAS handle, matmul precision, scratch buffers, context.cu), the warp and block
 * reductions, and the op functions the table (table.cu) collects.
 *
 * Process-wide state: a cuBLAS handle created on first use (atoll_cuda_cublas) and
 * kept for the life of the process, the matmul precision, the synchronise-after-every-
 * kernel setting (atoll_ops_cuda's argument), and scratch buffers that grow on demand
 * (atoll_cuda_scratch). All are plain statics: one host thread drives the backend.
 * Everything runs on the legacy default stream.
 *
 * Determinism: no floating-point atomics anywhere. Reductions over rows (embedding,
 * LayerNorm and bias gradients) are owned per output element or done in two fixed-order
 * stages through scratch (colsum.cu); attention backward computes dK/dV (one block per
 * key tile) and dQ (one block per query tile) in two kernels that each recompute the
 * scores, instead of accumulating dQ with atomics as FlashAttention-2 does. The
 * embedding gradients add in the same order as the CPU loop, so they should match it
 * bit for bit.
 *
 * Tuning knobs are the constants at the top of each family's file (tile sizes, threads
 * per row, rows per reduction part); the kernels are written for correctness first.
 * Device helpers here are inline (no relocatable device code across files). */
#ifndef ATOLL_OPS_CUDA_COMMON_CUH
#define ATOLL_OPS_CUDA_COMMON_CUH

#include "ops/ops_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fatal.h" /* C, with its own extern "C" block */

/* ------------------------------------------------------------ error checks --- */

/* A failed CUDA or cuBLAS call: one line naming the call, file:line and the error,
 * then the one fatal path (atoll_fatal: the GPU state is unknown, no caller could
 * recover, and the seam's ops have no error return). */
extern "C" [[noreturn]] void atoll_cuda_fail(cudaError_t e, const char *what, const char *file,
                                          int line);
extern "C" [[noreturn]] void atoll_cuda_fail_cublas(cublasStatus_t s, const char *what,
                                                 const char *file, int line);
/* After a kernel launch: the launch error, and with synchronisation on (atoll_ops_cuda's
 * argument) the kernel's own, so that an asynchronous failure names its kernel. */
extern "C" void atoll_cuda_launched(const char *kernel, const char *file, int line);

#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) atoll_cuda_fail(e_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                               \
  do {                                                                                   \
    cublasStatus_t s_ = (call);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) atoll_cuda_fail_cublas(s_, #call, __FILE__, __LINE__); \
  } while (0)

#define LAUNCHED(name) atoll_cuda_launched("kernel " name, __FILE__, __LINE__)

/* ------------------------------------------------------------- process state --- */

/* cuBLAS's entry points, from libcublas loaded on first use (cublas_load.cu): the
 * executable does not link it, so that atoll starts fast and runs without it on CPUs. */
typedef struct {
  cublasStatus_t (*create)(cublasHandle_t *handle);
  cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
  cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
  cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
  const char *(*status_string)(cublasStatus_t status);
} atoll_cublas_api;
/* Loads cuBLAS once: 0, or -1 with one line in why (not found, or an entry point
 * missing). */
extern "C" int atoll_cuda_cublas_load(char *why, size_t why_len);
/* The loaded entry points; a failure to load ends the process (atoll_fatal). */
extern "C" const atoll_cublas_api *atoll_cuda_cublas_api(void);

/* Sets whether every kernel is followed by a device synchronisation (context.cu). */
extern "C" void atoll_cuda_set_sync(int sync_each_op);
/* The cuBLAS handle, created on first use, never destroyed. */
extern "C" cublasHandle_t atoll_cuda_cublas(void);

enum {
  ATOLL_CUDA_SCRATCH_COLSUM,
  ATOLL_CUDA_SCRATCH_ATT_D,
  ATOLL_CUDA_SCRATCH_SUMSQ,
  ATOLL_CUDA_SCRATCH_SLOTS
};
/* A device buffer of at least `bytes` for one use inside one op (slot: one of the
 * above). Growing frees the old buffer; cudaFree waits for the device, so no queued
 * kernel still uses it. */
extern "C" void *atoll_cuda_scratch(int slot, size_t bytes);

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned grid_for(size_t n, int threads) {
  size_t g = (n + (size_t)threads - 1) / (size_t)threads;
  if (g > 65536u * 8u) g = 65536u * 8u;
  return g ? (unsigned)g : 1u;
}

/* ------------------------------------------------------- warp/block helpers --- */

static __device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

static __device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

/* Sum (or max) over a whole block of blockDim.x threads (a multiple of 32, at most
 * 1024); every thread gets the result. `sh` holds 32 floats. Fixed order: the result
 * depends only on the inputs and the block size. */
static __device__ __forceinline__ float block_sum(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads(); /* sh may still be read from a previous call */
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nwarps ? sh[lane] : 0.0f;
  return warp_sum(v);
}

static __device__ __forceinline__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nwarps ? sh[lane] : -INFINITY;
  return warp_max(v);
}

/* -------------------------------------------------------------- the ops --- */
/* Each has the signature and contract of its atoll_ops member (src/ops/ops.h). */

extern "C" {
void *atoll_cuda_alloc(size_t bytes);
void atoll_cuda_free(void *p);
/* to_device, to_host and copy are atoll_cuda_copy_to_device, _to_host and _device
 * (ops_cuda.h); zero is cudaMemsetAsync on the default stream (context.cu). */
void atoll_cuda_zero(void *dst, size_t bytes);
/* optim.cu */
double atoll_cuda_sumsq(const float *g, size_t n);
void atoll_cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, const atoll_adamw_span *a);
void atoll_cuda_sgd(float *p, const float *g, size_t n, float decay, float step);
/* gqa.cu: forward only (decoding); the other Llama members stay NULL */
void atoll_cuda_gqa_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                            int Tk, int NH, int NKV, int hs);
/* sum_a[c] += sum_n d[n,c]; if sum_b: sum_b[c] += sum_n (x - mean) * rstd * d. */
void atoll_cuda_column_sums(float *sum_a, float *sum_b, const float *d, const float *x,
                            const float *mean, const float *rstd, int N, int C);
void atoll_cuda_embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              int B, int T, int C);
void atoll_cuda_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                               int B, int T, int C);
void atoll_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *x,
                                  const float *w, const float *b, int N, int C);
void atoll_cuda_layernorm_backward(float *dx, float *dw, float *db, const float *dout,
                                   const float *x, const float *w, const float *mean,
                                   const float *rstd, int N, int C);
void atoll_cuda_matmul_forward(float *out, const float *x, const float *w, const float *bias,
                               int N, int C, int OC, int accumulate);
void atoll_cuda_matmul_backward(float *dx, float *dw, float *dbias, const float *dout,
                                const float *x, const float *w, int N, int C, int OC,
                                int accumulate_dx);
void atoll_cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH);
void atoll_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C,
                                   int NH);
void atoll_cuda_gelu_forward(float *out, const float *x, size_t n);
void atoll_cuda_gelu_backward(float *dx, const float *x, const float *dout, size_t n);
void atoll_cuda_xent_forward(float *losses, float *lse, const float *logits,
                             const int32_t *targets, int N, int V);
void atoll_cuda_xent_backward(float *logits, const float *lse, const int32_t *targets,
                              float dloss, int N, int V);
}

#endif

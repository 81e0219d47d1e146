/* CUDA kernels for the op seam (src/ops/ops.h), with the CPU table's exact semantics
 * (src/ops/ops_cpu.c): same layouts, same accumulate/overwrite contract, fp32.
 *
 * STATUS: compiled only (CUDA 13, sm_90); NOT YET RUN ON A GPU. tests/gpu/test_cuda_ops.c
 * checks every op against the CPU table; tests/gpu/run_device.sh runs it on a device.
 *
 * Process-wide state (see src/ops/ops_cuda.h): a cuBLAS handle created on first use
 * (get_cublas) and kept for the life of the process, the matmul precision, and scratch
 * buffers that grow on demand (scratch_get). All are plain statics: one host thread
 * drives the backend. Everything runs on the legacy default stream.
 *
 * Determinism: no floating-point atomics anywhere. Reductions over rows (embedding,
 * LayerNorm and bias gradients) are owned per output element or done in two fixed-order
 * stages through scratch; attention backward computes dK/dV (one block per key tile)
 * and dQ (one block per query tile) in two kernels that each recompute the scores,
 * instead of accumulating dQ with atomics as FlashAttention-2 does. The embedding
 * gradients add in the same order as the CPU loop, so they should match it bit for bit.
 *
 * Tuning knobs are the constants at the top of each section (tile sizes, threads per
 * row, rows per reduction part); the kernels are written for correctness first. */
#include "ops/ops_cuda.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ error checks --- */

static void fatal_cuda(cudaError_t e, const char *what, const char *file, int line) {
  fprintf(stderr, "atoll cuda: %s failed at %s:%d: %s (%s)\n", what, file, line,
          cudaGetErrorString(e), cudaGetErrorName(e));
  exit(1);
}

static void fatal_cublas(cublasStatus_t s, const char *what, const char *file, int line) {
  fprintf(stderr, "atoll cuda: %s failed at %s:%d: cuBLAS status %d (%s)\n", what, file, line,
          (int)s, cublasGetStatusString(s));
  exit(1);
}

#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) fatal_cuda(e_, #call, __FILE__, __LINE__);      \
  } while (0)

#define CUBLAS_CHECK(call)                                                 \
  do {                                                                     \
    cublasStatus_t s_ = (call);                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) fatal_cublas(s_, #call, __FILE__, __LINE__); \
  } while (0)

/* ATOLL_CUDA_SYNC=1: synchronize after every kernel so that an asynchronous failure is
 * reported at the kernel that caused it. Read once. */
static int sync_each_op(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("ATOLL_CUDA_SYNC");
    v = e && *e && strcmp(e, "0") != 0;
  }
  return v;
}

static void launched(const char *kernel, const char *file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fatal_cuda(e, kernel, file, line);
  if (sync_each_op()) {
    e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fatal_cuda(e, kernel, file, line);
  }
}
#define LAUNCHED(name) launched("kernel " name, __FILE__, __LINE__)

/* ------------------------------------------------------------- process state --- */

static cublasHandle_t cublas_handle; /* created on first use, never destroyed */
static atoll_cuda_matmul_precision matmul_precision = ATOLL_CUDA_MATMUL_FP32;

static cublasHandle_t get_cublas(void) {
  if (!cublas_handle) {
    CUBLAS_CHECK(cublasCreate(&cublas_handle));
    CUBLAS_CHECK(cublasSetStream(cublas_handle, 0));
    /* no TF32 unless asked for through the compute type */
    CUBLAS_CHECK(cublasSetMathMode(cublas_handle, CUBLAS_DEFAULT_MATH));
  }
  return cublas_handle;
}

enum { SCRATCH_COLSUM, SCRATCH_ATT_D, SCRATCH_SLOTS };
static void *scratch_ptr[SCRATCH_SLOTS];
static size_t scratch_cap[SCRATCH_SLOTS];

/* A device buffer of at least `bytes` for one use inside one op. Growing frees the old
 * buffer; cudaFree waits for the device, so no queued kernel still uses it. */
static void *scratch_get(int slot, size_t bytes) {
  if (bytes > scratch_cap[slot]) {
    if (scratch_ptr[slot]) CUDA_CHECK(cudaFree(scratch_ptr[slot]));
    size_t cap = bytes < 4096 ? 4096 : bytes + bytes / 4;
    CUDA_CHECK(cudaMalloc(&scratch_ptr[slot], cap));
    scratch_cap[slot] = cap;
  }
  return scratch_ptr[slot];
}

/* Blocks for a grid-stride loop over n elements. */
static unsigned grid_for(size_t n, int threads) {
  size_t g = (n + (size_t)threads - 1) / (size_t)threads;
  if (g > 65536u * 8u) g = 65536u * 8u;
  return g ? (unsigned)g : 1u;
}

/* ------------------------------------------------------------- memory, misc --- */

static void *cuda_alloc(size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 1;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

static void cuda_free(void *p) {
  if (p) CUDA_CHECK(cudaFree(p));
}

extern "C" int atoll_cuda_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* clear: no device or no driver is an answer, not a failure */
    return 0;
  }
  return n;
}

extern "C" void atoll_cuda_device_name(int dev, char *buf, size_t len) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(buf, len, "device %d: %s", dev, cudaGetErrorString(e));
    return;
  }
  snprintf(buf, len, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
           p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
}

extern "C" void atoll_cuda_copy_to_device(void *dst_device, const void *src_host, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst_device, src_host, bytes, cudaMemcpyHostToDevice));
}

extern "C" void atoll_cuda_copy_to_host(void *dst_host, const void *src_device, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst_host, src_device, bytes, cudaMemcpyDeviceToHost));
}

extern "C" void atoll_cuda_copy_device(void *dst_device, const void *src_device, size_t bytes) {
  if (bytes)
    CUDA_CHECK(cudaMemcpyAsync(dst_device, src_device, bytes, cudaMemcpyDeviceToDevice, 0));
}

extern "C" void atoll_cuda_synchronize(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

extern "C" void atoll_cuda_set_matmul_precision(atoll_cuda_matmul_precision p) {
  matmul_precision = p;
}

extern "C" atoll_cuda_matmul_precision atoll_cuda_get_matmul_precision(void) {
  return matmul_precision;
}

/* ------------------------------------------------------- warp/block helpers --- */

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

/* Sum (or max) over a whole block of blockDim.x threads (a multiple of 32, at most
 * 1024); every thread gets the result. `sh` holds 32 floats. Fixed order: the result
 * depends only on the inputs and the block size. */
__device__ float block_sum(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads(); /* sh may still be read from a previous call */
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nwarps ? sh[lane] : 0.0f;
  return warp_sum(v);
}

__device__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nwarps ? sh[lane] : -INFINITY;
  return warp_max(v);
}

/* ------------------------------------------------ column sums (deterministic) --- */

/* Sums over the rows of [N, C] matrices, in two fixed-order stages: colsum_partial
 * gives each block COLSUM_COLS columns x a range of COLSUM_ROWS_PER_PART rows and
 * writes one partial sum per (part, column); colsum_final adds the parts in order into
 * the (accumulated) result. Mode 0 sums d[n,c] (bias gradient); mode 1 also sums
 * (x[n,c] - mean[n]) * rstd[n] * d[n,c] (LayerNorm weight gradient). */
#define COLSUM_COLS 32
#define COLSUM_ROWLANES 8
#define COLSUM_ROWS_PER_PART 256
#define COLSUM_MAX_PARTS 4096

__global__ void colsum_partial(float *part_a, float *part_b, const float *d, const float *x,
                               const float *mean, const float *rstd, int N, int C, int rows_per_part,
                               int mode) {
  __shared__ float sa[COLSUM_ROWLANES][COLSUM_COLS];
  __shared__ float sb[COLSUM_ROWLANES][COLSUM_COLS];
  int tx = threadIdx.x, ty = threadIdx.y;
  int c = blockIdx.x * COLSUM_COLS + tx;
  int part = blockIdx.y;
  int n0 = part * rows_per_part, n1 = min(N, n0 + rows_per_part);
  float a = 0.0f, b = 0.0f;
  if (c < C) {
    for (int n = n0 + ty; n < n1; n += COLSUM_ROWLANES) {
      float dv = d[(size_t)n * C + c];
      a += dv;
      if (mode == 1) b += (x[(size_t)n * C + c] - mean[n]) * rstd[n] * dv;
    }
  }
  sa[ty][tx] = a;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < C) {
    for (int r = 1; r < COLSUM_ROWLANES; r++) {
      a += sa[r][tx];
      b += sb[r][tx];
    }
    part_a[(size_t)part * C + c] = a;
    if (mode == 1) part_b[(size_t)part * C + c] = b;
  }
}

__global__ void colsum_final(float *out_a, float *out_b, const float *part_a, const float *part_b,
                             int parts, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float a = 0.0f, b = 0.0f;
  for (int p = 0; p < parts; p++) {
    a += part_a[(size_t)p * C + c];
    if (out_b) b += part_b[(size_t)p * C + c];
  }
  out_a[c] += a;
  if (out_b) out_b[c] += b;
}

/* sum_a[c] += sum_n d[n,c]; if sum_b: sum_b[c] += sum_n (x - mean) * rstd * d. */
static void column_sums(float *sum_a, float *sum_b, const float *d, const float *x,
                        const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  int rows = COLSUM_ROWS_PER_PART;
  int parts = (N + rows - 1) / rows;
  if (parts > COLSUM_MAX_PARTS) {
    parts = COLSUM_MAX_PARTS;
    rows = (N + parts - 1) / parts;
    parts = (N + rows - 1) / rows;
  }
  float *part_a = (float *)scratch_get(SCRATCH_COLSUM, sizeof(float) * (size_t)parts * C * 2);
  float *part_b = part_a + (size_t)parts * C;
  dim3 grid((C + COLSUM_COLS - 1) / COLSUM_COLS, parts), block(COLSUM_COLS, COLSUM_ROWLANES);
  colsum_partial<<<grid, block>>>(part_a, part_b, d, x, mean, rstd, N, C, rows, sum_b ? 1 : 0);
  LAUNCHED("colsum_partial");
  colsum_final<<<(C + 255) / 256, 256>>>(sum_a, sum_b, part_a, sum_b ? part_b : NULL, parts, C);
  LAUNCHED("colsum_final");
}

/* ---------------------------------------------------------------- embedding --- */

/* dwte: thread (c, slice) owns every row v of dwte with v % EMB_SLICES == slice at
 * column c, and walks the tokens in order: the same additions in the same order as
 * the CPU loop, with no two threads writing one float. Token ids go through shared
 * memory EMB_TILE at a time. */
#define EMB_THREADS 128
#define EMB_SLICES 32
#define EMB_TILE 1024

__global__ void embed_forward_kernel(float *out, const int32_t *tok, const float *wte,
                                     const float *wpe, int T, int C, size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / (size_t)C;
    int c = (int)(i - n * (size_t)C);
    int t = (int)(n % (size_t)T);
    out[i] = wte[(size_t)tok[n] * C + c] + wpe[(size_t)t * C + c];
  }
}

__global__ void embed_backward_wpe(float *dwpe, const float *dout, int B, int T, int C) {
  size_t total = (size_t)T * C;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * total + i];
    dwpe[i] = acc;
  }
}

__global__ void embed_backward_wte(float *dwte, const float *dout, const int32_t *tok, int N,
                                   int C) {
  __shared__ int32_t st[EMB_TILE];
  int c = blockIdx.x * EMB_THREADS + threadIdx.x;
  unsigned slice = blockIdx.y;
  for (int n0 = 0; n0 < N; n0 += EMB_TILE) {
    int cnt = min(EMB_TILE, N - n0);
    __syncthreads();
    for (int i = threadIdx.x; i < cnt; i += EMB_THREADS) st[i] = tok[n0 + i];
    __syncthreads();
    if (c < C) {
      for (int i = 0; i < cnt; i++) {
        unsigned v = (unsigned)st[i];
        if (v % EMB_SLICES != slice) continue;
        dwte[(size_t)v * C + c] += dout[(size_t)(n0 + i) * C + c];
      }
    }
  }
}

static void embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                          int B, int T, int C) {
  size_t total = (size_t)B * T * C;
  if (!total) return;
  embed_forward_kernel<<<grid_for(total, 256), 256>>>(out, tok, wte, wpe, T, C, total);
  LAUNCHED("embed_forward");
}

static void embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                           int T, int C) {
  if ((size_t)B * T * C == 0) return;
  embed_backward_wpe<<<grid_for((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
  LAUNCHED("embed_backward_wpe");
  dim3 grid((C + EMB_THREADS - 1) / EMB_THREADS, EMB_SLICES);
  embed_backward_wte<<<grid, EMB_THREADS>>>(dwte, dout, tok, B * T, C);
  LAUNCHED("embed_backward_wte");
}

/* ---------------------------------------------------------------- layernorm --- */

/* One warp per row; LN_WARPS rows per block. */
#define LN_WARPS 4
#define LN_EPS 1e-5f

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *x,
                                         const float *w, const float *b, int N, int C) {
  int lane = threadIdx.x & 31;
  int n = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (n >= N) return; /* whole warp */
  const float *xr = x + (size_t)n * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += xr[c];
  float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = xr[c] - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / C + LN_EPS);
  float *o = out + (size_t)n * C;
  for (int c = lane; c < C; c += 32) o[c] = (xr[c] - m) * r * w[c] + b[c];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

__global__ void layernorm_backward_dx(float *dx, const float *dout, const float *x, const float *w,
                                      const float *mean, const float *rstd, int N, int C) {
  int lane = threadIdx.x & 31;
  int n = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (n >= N) return;
  const float *d = dout + (size_t)n * C, *xr = x + (size_t)n * C;
  float *dxr = dx + (size_t)n * C;
  float m = mean[n], r = rstd[n];
  float a = 0.0f, bsum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float norm = (xr[c] - m) * r;
    float dnorm = w[c] * d[c];
    a += dnorm;
    bsum += dnorm * norm;
  }
  float dnorm_mean = warp_sum(a) / C, dnorm_norm_mean = warp_sum(bsum) / C;
  for (int c = lane; c < C; c += 32) {
    float norm = (xr[c] - m) * r;
    float dnorm = w[c] * d[c];
    dxr[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
  }
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int N, int C) {
  if (N <= 0) return;
  layernorm_forward_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS>>>(out, mean, rstd, x, w,
                                                                             b, N, C);
  LAUNCHED("layernorm_forward");
}

static void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                               const float *w, const float *mean, const float *rstd, int N,
                               int C) {
  if (N <= 0) return;
  layernorm_backward_dx<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS>>>(dx, dout, x, w, mean,
                                                                          rstd, N, C);
  LAUNCHED("layernorm_backward_dx");
  column_sums(db, dw, dout, x, mean, rstd, N, C);
}

/* ------------------------------------------------------------------- matmul --- */

/* Row-major products through column-major cuBLAS: a row-major [R, K] matrix is the
 * column-major [K, R] matrix with the same leading dimension, so
 *   out[N,OC] = x[N,C] w[OC,C]^T   is   out^T[OC,N] = op_T(w as [C,OC]) x^T[C,N]
 * and likewise for the two backward products (derivations in the comments below). */
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A,
                 int lda, const float *B, int ldb, float beta, float *Cm, int ldc) {
  const float alpha = 1.0f;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  if (matmul_precision == ATOLL_CUDA_MATMUL_TF32) ct = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (matmul_precision == ATOLL_CUDA_MATMUL_BF16) ct = CUBLAS_COMPUTE_32F_FAST_16BF;
  CUBLAS_CHECK(cublasGemmEx(get_cublas(), ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B,
                            CUDA_R_32F, ldb, &beta, Cm, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
}

__global__ void add_bias_kernel(float *out, const float *bias, int OC, size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] += bias[i % (size_t)OC];
}

static void add_bias(float *out, const float *bias, int N, int OC) {
  size_t total = (size_t)N * OC;
  add_bias_kernel<<<grid_for(total, 256), 256>>>(out, bias, OC, total);
  LAUNCHED("add_bias");
}

static void matmul_forward(float *out, const float *x, const float *w, const float *bias, int N,
                           int C, int OC, int accumulate) {
  if (N <= 0 || OC <= 0) return;
  /* column-major: out_cm[OC,N] = (w_cm[C,OC])^T x_cm[C,N] */
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, x, C, accumulate ? 1.0f : 0.0f, out, OC);
  if (bias) add_bias(out, bias, N, OC);
}

static void matmul_backward(float *dx, float *dw, float *dbias, const float *dout, const float *x,
                            const float *w, int N, int C, int OC, int accumulate_dx) {
  if (N <= 0 || OC <= 0 || C <= 0) return;
  /* dx[N,C] = dout[N,OC] w[OC,C]:  dx_cm[C,N] = w_cm[C,OC] dout_cm[OC,N] */
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dout, OC, accumulate_dx ? 1.0f : 0.0f, dx, C);
  /* dw[OC,C] += dout^T x:  dw_cm[C,OC] += x_cm[C,N] (dout_cm[OC,N])^T */
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, x, C, dout, OC, 1.0f, dw, C);
  if (dbias) column_sums(dbias, NULL, dout, NULL, NULL, NULL, N, OC);
}

/* ------------------------------------------------------------ bf16 helpers --- */

__global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}

__global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __bfloat162float(__ushort_as_bfloat16(src[i]));
}

extern "C" void atoll_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  if (!n) return;
  f32_to_bf16_kernel<<<grid_for(n, 256), 256>>>(dst, src, n);
  LAUNCHED("f32_to_bf16");
}

extern "C" void atoll_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  if (!n) return;
  bf16_to_f32_kernel<<<grid_for(n, 256), 256>>>(dst, src, n);
  LAUNCHED("bf16_to_f32");
}

extern "C" void atoll_cuda_matmul_forward_bf16(float *out, const uint16_t *x, const uint16_t *w,
                                               const float *bias, int N, int C, int OC,
                                               int accumulate) {
  if (N <= 0 || OC <= 0) return;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasGemmEx(get_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &alpha, w,
                            CUDA_R_16BF, C, x, CUDA_R_16BF, C, &beta, out, CUDA_R_32F, OC,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) add_bias(out, bias, N, OC);
}

/* ---------------------------------------------------------------- attention --- */

/* Flash-style causal attention. A block of ATT_THREADS threads takes ATT_BR query rows
 * (forward, dQ) or ATT_BC key rows (dK/dV) of one (batch, head), ATT_TPR threads per
 * row. Tiles of the other side stream through shared memory; scores never leave the
 * block. Rows of a tile in shared memory are padded to hs + 1 floats so that threads on
 * different rows hit different banks. HSMAX (a template argument: 32, 64, 128 or 256,
 * the smallest >= hs) sizes the per-thread accumulators, which stay in registers
 * because every loop over them is unrolled with a guard d < hs.
 *
 * Forward keeps a running max m and sum l per row (online softmax), rescaling the
 * output accumulator when the max grows; it saves lse = m + log(l) like the CPU.
 * Backward (FlashAttention-2's equations with the saved lse): P = exp(S - lse),
 * dV = P^T dO, dP = dO V^T, dS = P (dP - D) scale with D = rowsum(dO * O), dQ = dS K,
 * dK = dS^T Q. dK/dV and dQ are separate kernels so that nothing is accumulated
 * across blocks (deterministic, no atomics) at the price of computing S and dP twice. */
#define ATT_BR 32
#define ATT_BC 32
#define ATT_TPR 4
#define ATT_THREADS (ATT_BR * ATT_TPR)

static_assert(ATT_BR == ATT_BC, "the kernels assume square tiles (one row per thread group)");
static_assert(ATT_TPR == 4, "the lane reductions below assume 4 threads per row");

/* Loads rows [r0, r0 + ATT_BR) of one head (row stride ld floats in global memory,
 * hs floats per row) into a padded tile, zeros past row T. */
__device__ __forceinline__ void load_tile(float *tile, const float *src, int r0, int T, int hs,
                                          size_t ld) {
  int pad = hs + 1;
  for (int i = threadIdx.x; i < ATT_BR * hs; i += ATT_THREADS) {
    int r = i / hs, d = i - r * hs;
    tile[r * pad + d] = r0 + r < T ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
  }
}

__device__ __forceinline__ float dot_rows(const float *a, const float *b, int hs) {
  float s = 0.0f;
  for (int k = 0; k < hs; k++) s += a[k] * b[k];
  return s;
}

/* reductions over the ATT_TPR = 4 consecutive lanes of one row */
__device__ __forceinline__ float row_sum4(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
__device__ __forceinline__ float row_max4(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

template <int HSMAX>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH) {
  extern __shared__ float smem[];
  const int hs = C / NH, pad = hs + 1;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * ATT_BR;
  const int r = threadIdx.x / ATT_TPR, lane4 = threadIdx.x % ATT_TPR;
  const int qi = q0 + r;
  const size_t ld = (size_t)3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  float *Qs = smem, *Ks = Qs + ATT_BR * pad, *Vs = Ks + ATT_BC * pad, *Ps = Vs + ATT_BC * pad;

  load_tile(Qs, base, q0, T, hs, ld);
  float o[HSMAX / ATT_TPR];
#pragma unroll
  for (int k = 0; k < HSMAX / ATT_TPR; k++) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int kv_end = min(T, q0 + ATT_BR);

  for (int k0 = 0; k0 < kv_end; k0 += ATT_BC) {
    __syncthreads(); /* everyone is done with the previous K/V tile (and Q is loaded) */
    load_tile(Ks, base + C, k0, T, hs, ld);
    load_tile(Vs, base + 2 * C, k0, T, hs, ld);
    __syncthreads();
    float s[ATT_BC / ATT_TPR];
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < ATT_BC / ATT_TPR; j++) {
      int c = lane4 + ATT_TPR * j, kj = k0 + c;
      s[j] = (kj <= qi && kj < T) ? dot_rows(Qs + r * pad, Ks + c * pad, hs) * scale : -INFINITY;
      mt = fmaxf(mt, s[j]);
    }
    mt = row_max4(mt);
    float m_new = fmaxf(m, mt);
    /* key 0 is in the first tile and visible to every row, so m_new is finite */
    float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
    float psum = 0.0f;
#pragma unroll
    for (int j = 0; j < ATT_BC / ATT_TPR; j++) {
      float p = s[j] == -INFINITY ? 0.0f : expf(s[j] - m_new);
      Ps[r * (ATT_BC + 1) + lane4 + ATT_TPR * j] = p;
      psum += p;
    }
    l = l * corr + row_sum4(psum);
    m = m_new;
    __syncwarp(); /* a row's 4 threads are in one warp */
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        float acc = o[k] * corr;
        for (int c = 0; c < ATT_BC; c++) acc += Ps[r * (ATT_BC + 1) + c] * Vs[c * pad + d];
        o[k] = acc;
      }
    }
    __syncwarp();
  }
  if (qi < T) {
    float inv = 1.0f / l;
    float *orow = out + ((size_t)b * T + qi) * C + (size_t)h * hs;
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) orow[d] = o[k] * inv;
    }
    if (lane4 == 0) lse[((size_t)b * NH + h) * T + qi] = m + logf(l);
  }
}

/* D[b,h,t] = sum_d out[b,t,h,d] * dout[b,t,h,d]: one warp per (b, t, h). */
__global__ void attention_rowdot_kernel(float *D, const float *out, const float *dout, int B,
                                        int T, int C, int NH) {
  size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  size_t total = (size_t)B * T * NH;
  if (w >= total) return; /* whole warp */
  int h = (int)(w % NH);
  size_t n = w / NH; /* b * T + t */
  int t = (int)(n % T), b = (int)(n / T);
  int hs = C / NH;
  const float *o = out + n * C + (size_t)h * hs, *g = dout + n * C + (size_t)h * hs;
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) s += o[d] * g[d];
  s = warp_sum(s);
  if (lane == 0) D[((size_t)b * NH + h) * T + t] = s;
}

/* dQ for ATT_BR query rows: streams the key tiles up to the diagonal. */
template <int HSMAX>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(float *dqkv, const float *dout, const float *qkv,
                                 const float *lse, const float *Dv, int T, int C, int NH) {
  extern __shared__ float smem[];
  const int hs = C / NH, pad = hs + 1;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * ATT_BR;
  const int r = threadIdx.x / ATT_TPR, lane4 = threadIdx.x % ATT_TPR;
  const int qi = q0 + r;
  const size_t ld = (size_t)3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  const float *dobase = dout + (size_t)b * T * C + (size_t)h * hs;
  float *Qs = smem, *dOs = Qs + ATT_BR * pad, *Ks = dOs + ATT_BR * pad, *Vs = Ks + ATT_BC * pad;
  float *dSs = Vs + ATT_BC * pad;

  load_tile(Qs, base, q0, T, hs, ld);
  load_tile(dOs, dobase, q0, T, hs, (size_t)C);
  const size_t row = ((size_t)b * NH + h) * T;
  const float l_i = qi < T ? lse[row + qi] : 0.0f, D_i = qi < T ? Dv[row + qi] : 0.0f;
  float dq[HSMAX / ATT_TPR];
#pragma unroll
  for (int k = 0; k < HSMAX / ATT_TPR; k++) dq[k] = 0.0f;
  const int kv_end = min(T, q0 + ATT_BR);

  for (int k0 = 0; k0 < kv_end; k0 += ATT_BC) {
    __syncthreads();
    load_tile(Ks, base + C, k0, T, hs, ld);
    load_tile(Vs, base + 2 * C, k0, T, hs, ld);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < ATT_BC / ATT_TPR; j++) {
      int c = lane4 + ATT_TPR * j, kj = k0 + c;
      float ds = 0.0f;
      if (kj <= qi && kj < T && qi < T) {
        float p = expf(dot_rows(Qs + r * pad, Ks + c * pad, hs) * scale - l_i);
        float dp = dot_rows(dOs + r * pad, Vs + c * pad, hs);
        ds = p * (dp - D_i) * scale;
      }
      dSs[r * (ATT_BC + 1) + c] = ds;
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        float acc = dq[k];
        for (int c = 0; c < ATT_BC; c++) acc += dSs[r * (ATT_BC + 1) + c] * Ks[c * pad + d];
        dq[k] = acc;
      }
    }
    __syncwarp();
  }
  if (qi < T) {
    float *dqrow = dqkv + ((size_t)b * T + qi) * ld + (size_t)h * hs;
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) dqrow[d] = dq[k];
    }
  }
}

/* dK and dV for ATT_BC key rows: streams the query tiles from the diagonal to T. */
template <int HSMAX>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
                                  const float *lse, const float *Dv, int T, int C, int NH) {
  extern __shared__ float smem[];
  const int hs = C / NH, pad = hs + 1;
  const int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * ATT_BC;
  const int c = threadIdx.x / ATT_TPR, lane4 = threadIdx.x % ATT_TPR;
  const int kj = k0 + c;
  const size_t ld = (size_t)3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  const float *dobase = dout + (size_t)b * T * C + (size_t)h * hs;
  float *Ks = smem, *Vs = Ks + ATT_BC * pad, *Qs = Vs + ATT_BC * pad, *dOs = Qs + ATT_BR * pad;
  float *Ps = dOs + ATT_BR * pad, *dSs = Ps + ATT_BC * (ATT_BR + 1);
  float *Ls = dSs + ATT_BC * (ATT_BR + 1), *Ds = Ls + ATT_BR;
  const size_t row = ((size_t)b * NH + h) * T;

  load_tile(Ks, base + C, k0, T, hs, ld);
  load_tile(Vs, base + 2 * C, k0, T, hs, ld);
  float dk[HSMAX / ATT_TPR], dv[HSMAX / ATT_TPR];
#pragma unroll
  for (int k = 0; k < HSMAX / ATT_TPR; k++) dk[k] = dv[k] = 0.0f;

  /* query rows i < k0 see none of these keys */
  for (int i0 = k0; i0 < T; i0 += ATT_BR) {
    __syncthreads();
    load_tile(Qs, base, i0, T, hs, ld);
    load_tile(dOs, dobase, i0, T, hs, (size_t)C);
    for (int i = threadIdx.x; i < ATT_BR; i += ATT_THREADS) {
      Ls[i] = i0 + i < T ? lse[row + i0 + i] : 0.0f;
      Ds[i] = i0 + i < T ? Dv[row + i0 + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < ATT_BR / ATT_TPR; j++) {
      int rr = lane4 + ATT_TPR * j, qi = i0 + rr;
      float p = 0.0f, ds = 0.0f;
      if (kj <= qi && qi < T && kj < T) {
        p = expf(dot_rows(Ks + c * pad, Qs + rr * pad, hs) * scale - Ls[rr]);
        float dp = dot_rows(Vs + c * pad, dOs + rr * pad, hs);
        ds = p * (dp - Ds[rr]) * scale;
      }
      Ps[c * (ATT_BR + 1) + rr] = p;
      dSs[c * (ATT_BR + 1) + rr] = ds;
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        float av = dv[k], ak = dk[k];
        for (int rr = 0; rr < ATT_BR; rr++) {
          av += Ps[c * (ATT_BR + 1) + rr] * dOs[rr * pad + d];
          ak += dSs[c * (ATT_BR + 1) + rr] * Qs[rr * pad + d];
        }
        dv[k] = av;
        dk[k] = ak;
      }
    }
    __syncwarp();
  }
  if (kj < T) {
    float *dkrow = dqkv + ((size_t)b * T + kj) * ld + C + (size_t)h * hs;
    float *dvrow = dkrow + C;
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        dkrow[d] = dk[k];
        dvrow[d] = dv[k];
      }
    }
  }
}

static size_t att_fwd_smem(int hs) {
  return sizeof(float) * ((size_t)(ATT_BR + 2 * ATT_BC) * (hs + 1) + (size_t)ATT_BR * (ATT_BC + 1));
}
static size_t att_dq_smem(int hs) {
  return sizeof(float) * ((size_t)(2 * ATT_BR + 2 * ATT_BC) * (hs + 1) + (size_t)ATT_BR * (ATT_BC + 1));
}
static size_t att_dkv_smem(int hs) {
  return sizeof(float) * ((size_t)(2 * ATT_BR + 2 * ATT_BC) * (hs + 1) +
                          2 * (size_t)ATT_BC * (ATT_BR + 1) + 2 * ATT_BR);
}

static void att_check_shape(int C, int NH) {
  if (NH <= 0 || C % NH != 0 || C / NH > 256) {
    fprintf(stderr, "atoll cuda: attention supports head sizes up to 256 (C %% NH == 0); got C=%d NH=%d\n",
            C, NH);
    exit(1);
  }
}

/* Launches kernel<HSMAX> with `smem` bytes of dynamic shared memory, raising the
 * kernel's limit above the 48 KiB default when needed (Hopper allows 227 KiB). */
template <typename K>
static void att_prepare(K kernel, size_t smem) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

template <int HSMAX>
static void att_forward_launch(float *out, float *lse, const float *qkv, int B, int T, int C,
                               int NH) {
  size_t smem = att_fwd_smem(C / NH);
  att_prepare(attention_forward_kernel<HSMAX>, smem);
  dim3 grid((T + ATT_BR - 1) / ATT_BR, NH, B);
  attention_forward_kernel<HSMAX><<<grid, ATT_THREADS, smem>>>(out, lse, qkv, T, C, NH);
  LAUNCHED("attention_forward");
}

template <int HSMAX>
static void att_backward_launch(float *dqkv, const float *dout, const float *qkv,
                                const float *lse, const float *D, int B, int T, int C, int NH) {
  dim3 grid((T + ATT_BR - 1) / ATT_BR, NH, B);
  size_t smem = att_dq_smem(C / NH);
  att_prepare(attention_backward_dq_kernel<HSMAX>, smem);
  attention_backward_dq_kernel<HSMAX><<<grid, ATT_THREADS, smem>>>(dqkv, dout, qkv, lse, D, T, C, NH);
  LAUNCHED("attention_backward_dq");
  smem = att_dkv_smem(C / NH);
  att_prepare(attention_backward_dkv_kernel<HSMAX>, smem);
  attention_backward_dkv_kernel<HSMAX><<<grid, ATT_THREADS, smem>>>(dqkv, dout, qkv, lse, D, T, C, NH);
  LAUNCHED("attention_backward_dkv");
}

static void attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                              int NH) {
  if (B <= 0 || T <= 0) return;
  att_check_shape(C, NH);
  int hs = C / NH;
  if (hs <= 32) att_forward_launch<32>(out, lse, qkv, B, T, C, NH);
  else if (hs <= 64) att_forward_launch<64>(out, lse, qkv, B, T, C, NH);
  else if (hs <= 128) att_forward_launch<128>(out, lse, qkv, B, T, C, NH);
  else att_forward_launch<256>(out, lse, qkv, B, T, C, NH);
}

static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0) return;
  att_check_shape(C, NH);
  size_t rows = (size_t)B * T * NH;
  float *D = (float *)scratch_get(SCRATCH_ATT_D, sizeof(float) * rows);
  attention_rowdot_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256>>>(D, out, dout, B, T, C, NH);
  LAUNCHED("attention_rowdot");
  int hs = C / NH;
  if (hs <= 32) att_backward_launch<32>(dqkv, dout, qkv, lse, D, B, T, C, NH);
  else if (hs <= 64) att_backward_launch<64>(dqkv, dout, qkv, lse, D, B, T, C, NH);
  else if (hs <= 128) att_backward_launch<128>(dqkv, dout, qkv, lse, D, B, T, C, NH);
  else att_backward_launch<256>(dqkv, dout, qkv, lse, D, B, T, C, NH);
}

/* --------------------------------------------------------------------- GELU --- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* exp(2u) with 2u clamped to [-80, 40], exactly as the CPU kernel (which uses its own
 * polynomial exp; expf here: both within a few ulp of exp). */
__device__ __forceinline__ float gelu_exp2u(float v) {
  float z = 2.0f * GELU_K * (v + 0.044715f * v * v * v);
  z = z < -80.0f ? -80.0f : z;
  z = z > 40.0f ? 40.0f : z;
  return expf(z);
}

__global__ void gelu_forward_kernel(float *out, const float *x, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    float e = gelu_exp2u(v);
    out[i] = v * (e / (1.0f + e));
  }
}

__global__ void gelu_backward_kernel(float *dx, const float *x, const float *dout, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    float e = gelu_exp2u(v);
    float r = 1.0f / (1.0f + e);
    float half_one_plus_tanh = e * r;
    float sech2 = 4.0f * half_one_plus_tanh * r;
    float local =
        half_one_plus_tanh + 0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = local * dout[i]; /* dx may alias dout (the model passes the same buffer) */
  }
}

static void gelu_forward(float *out, const float *x, size_t n) {
  if (!n) return;
  gelu_forward_kernel<<<grid_for(n, 256), 256>>>(out, x, n);
  LAUNCHED("gelu_forward");
}

static void gelu_backward(float *dx, const float *x, const float *dout, size_t n) {
  if (!n) return;
  gelu_backward_kernel<<<grid_for(n, 256), 256>>>(dx, x, dout, n);
  LAUNCHED("gelu_backward");
}

/* ------------------------------------------------------------ cross-entropy --- */

#define XENT_THREADS 512

/* One block per row: max, then sum of exp(z - max), in a fixed order. */
__global__ void xent_forward_kernel(float *losses, float *lse, const float *logits,
                                    const int32_t *targets, int V) {
  __shared__ float sh[32];
  int n = blockIdx.x;
  const float *z = logits + (size_t)n * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_max(mx, sh);
  float s = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(z[v] - mx);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    float l = mx + logf(s);
    lse[n] = l;
    losses[n] = l - z[targets[n]];
  }
}

__global__ void xent_backward_kernel(float *logits, const float *lse, const int32_t *targets,
                                     float dloss, int V, size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / (size_t)V;
    int v = (int)(i - n * (size_t)V);
    float g = expf(logits[i] - lse[n]) * dloss;
    if (v == targets[n]) g -= dloss;
    logits[i] = g;
  }
}

static void xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
                         int N, int V) {
  if (N <= 0) return;
  xent_forward_kernel<<<N, XENT_THREADS>>>(losses, lse, logits, targets, V);
  LAUNCHED("xent_forward");
}

static void xent_backward(float *logits, const float *lse, const int32_t *targets, float dloss,
                          int N, int V) {
  size_t total = (size_t)N * V;
  if (!total) return;
  xent_backward_kernel<<<grid_for(total, 256), 256>>>(logits, lse, targets, dloss, V, total);
  LAUNCHED("xent_backward");
}

/* -------------------------------------------------------------------- table --- */

static atoll_ops make_table(void) {
  atoll_ops o;
  memset(&o, 0, sizeof o);
  o.name = "cuda";
  o.alloc = cuda_alloc;
  o.free = cuda_free;
  o.embed_forward = embed_forward;
  o.embed_backward = embed_backward;
  o.layernorm_forward = layernorm_forward;
  o.layernorm_backward = layernorm_backward;
  o.matmul_forward = matmul_forward;
  o.matmul_backward = matmul_backward;
  o.attention_forward = attention_forward;
  o.attention_backward = attention_backward;
  o.gelu_forward = gelu_forward;
  o.gelu_backward = gelu_backward;
  o.xent_forward = xent_forward;
  o.xent_backward = xent_backward;
  return o;
}

static const atoll_ops cuda_table = make_table();

extern "C" const atoll_ops *atoll_ops_cuda(void) { return &cuda_table; }

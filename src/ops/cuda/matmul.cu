/* Matrix products through cuBLAS (fp32 buffers; the compute precision is
 * atoll_cuda_set_matmul_precision's), the bias add, and the bf16 helpers. */
#include "ops/cuda/common.cuh"

#include <cuda_bf16.h>

/* ------------------------------------------------------------------- matmul --- */

/* Row-major products through column-major cuBLAS: a row-major [R, K] matrix is the
 * column-major [K, R] matrix with the same leading dimension, so
 *   out[N,OC] = x[N,C] w[OC,C]^T   is   out^T[OC,N] = op_T(w as [C,OC]) x^T[C,N]
 * and likewise for the two backward products (derivations in the comments below). */
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A,
                 int lda, const float *B, int ldb, float beta, float *Cm, int ldc) {
  const float alpha = 1.0f;
  atoll_cuda_matmul_precision precision = atoll_cuda_get_matmul_precision();
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  if (precision == ATOLL_CUDA_MATMUL_TF32) ct = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (precision == ATOLL_CUDA_MATMUL_BF16) ct = CUBLAS_COMPUTE_32F_FAST_16BF;
  CUBLAS_CHECK(atoll_cuda_cublas_api()->gemm_ex(atoll_cuda_cublas(), ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda,
                                                B, CUDA_R_32F, ldb, &beta, Cm, CUDA_R_32F, ldc, ct,
                                                CUBLAS_GEMM_DEFAULT));
}

static __global__ void add_bias_kernel(float *out, const float *bias, int OC, size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] += bias[i % (size_t)OC];
}

static void add_bias(float *out, const float *bias, int N, int OC) {
  size_t total = (size_t)N * OC;
  add_bias_kernel<<<grid_for(total, 256), 256>>>(out, bias, OC, total);
  LAUNCHED("add_bias");
}

extern "C" void atoll_cuda_matmul_forward(float *out, const float *x, const float *w,
                                          const float *bias, int N, int C, int OC, int accumulate) {
  if (N <= 0 || OC <= 0) return;
  /* column-major: out_cm[OC,N] = (w_cm[C,OC])^T x_cm[C,N] */
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, x, C, accumulate ? 1.0f : 0.0f, out, OC);
  if (bias) add_bias(out, bias, N, OC);
}

extern "C" void atoll_cuda_matmul_backward(float *dx, float *dw, float *dbias, const float *dout,
                                           const float *x, const float *w, int N, int C, int OC,
                                           int accumulate_dx) {
  if (N <= 0 || OC <= 0 || C <= 0) return;
  /* dx[N,C] = dout[N,OC] w[OC,C]:  dx_cm[C,N] = w_cm[C,OC] dout_cm[OC,N] */
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dout, OC, accumulate_dx ? 1.0f : 0.0f, dx, C);
  /* dw[OC,C] += dout^T x:  dw_cm[C,OC] += x_cm[C,N] (dout_cm[OC,N])^T */
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, x, C, dout, OC, 1.0f, dw, C);
  if (dbias) atoll_cuda_column_sums(dbias, NULL, dout, NULL, NULL, NULL, N, OC);
}

/* ------------------------------------------------------------ bf16 helpers --- */

static __global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}

static __global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, size_t n) {
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
  CUBLAS_CHECK(atoll_cuda_cublas_api()->gemm_ex(atoll_cuda_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &alpha, w,
                                                CUDA_R_16BF, C, x, CUDA_R_16BF, C, &beta, out, CUDA_R_32F, OC,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) add_bias(out, bias, N, OC);
}

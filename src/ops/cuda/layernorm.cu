/* LayerNorm forward and backward (the weight and bias gradients through colsum.cu). */
#include "ops/cuda/common.cuh"

/* ---------------------------------------------------------------- layernorm --- */

/* One warp per row; LN_WARPS rows per block. */
#define LN_WARPS 4
#define LN_EPS 1e-5f

static __global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *x,
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

static __global__ void layernorm_backward_dx(float *dx, const float *dout, const float *x, const float *w,
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

extern "C" void atoll_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *x,
                                             const float *w, const float *b, int N, int C) {
  if (N <= 0) return;
  layernorm_forward_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS>>>(out, mean, rstd, x, w,
                                                                             b, N, C);
  LAUNCHED("layernorm_forward");
}

extern "C" void atoll_cuda_layernorm_backward(float *dx, float *dw, float *db, const float *dout,
                                              const float *x, const float *w, const float *mean,
                                              const float *rstd, int N, int C) {
  if (N <= 0) return;
  layernorm_backward_dx<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS>>>(dx, dout, x, w, mean,
                                                                          rstd, N, C);
  LAUNCHED("layernorm_backward_dx");
  atoll_cuda_column_sums(db, dw, dout, x, mean, rstd, N, C);
}

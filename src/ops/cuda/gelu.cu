/* GELU (tanh approximation), forward and backward, element by element. */
#include "ops/cuda/common.cuh"

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

static __global__ void gelu_forward_kernel(float *out, const float *x, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    float e = gelu_exp2u(v);
    out[i] = v * (e / (1.0f + e));
  }
}

static __global__ void gelu_backward_kernel(float *dx, const float *x, const float *dout, size_t n) {
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

extern "C" void atoll_cuda_gelu_forward(float *out, const float *x, size_t n) {
  if (!n) return;
  gelu_forward_kernel<<<grid_for(n, 256), 256>>>(out, x, n);
  LAUNCHED("gelu_forward");
}

extern "C" void atoll_cuda_gelu_backward(float *dx, const float *x, const float *dout, size_t n) {
  if (!n) return;
  gelu_backward_kernel<<<grid_for(n, 256), 256>>>(dx, x, dout, n);
  LAUNCHED("gelu_backward");
}

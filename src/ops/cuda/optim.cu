/* The optimizer's kernels of the table (src/ops/ops.h: sumsq, adamw, sgd).
 * NOT YET RUN ON A GPU; tests/gpu/test_cuda_ops.c checks them against the CPU table.
 *
 * adamw and sgd compute the CPU's formulas (atoll_adamw_span_cpu and
 * atoll_sgd_span_cpu in src/ops/optim_cpu.c) operation by operation, in the same order,
 * each operation rounded on its own: written with the _rn intrinsics (__fmul_rn,
 * __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn), which nvcc never contracts into a
 * fused multiply-add, whatever -fmad says. The result is then the correctly rounded
 * IEEE value of each step, as on a CPU build that does not contract either (see
 * docs/gpu.md: gcc contracts the CPU loop into FMAs under -march=native on FMA
 * hardware, so there the two differ in the last bits).
 *
 * sumsq is deterministic: SUMSQ_PARTS fixed contiguous parts of the range (their
 * bounds depend only on n), each summed in double by one block (threads stride the
 * part, then a fixed tree in shared memory), then the parts added in index order by one
 * thread; no atomics, so the same input gives the same bits on every run. */
#include "ops/cuda/common.cuh"

#define SUMSQ_PARTS 512
#define SUMSQ_THREADS 256
#define OPTIM_THREADS 256

static __global__ void __launch_bounds__(SUMSQ_THREADS)
    sumsq_parts_kernel(double *parts, const float *g, size_t n, size_t step) {
  __shared__ double sh[SUMSQ_THREADS];
  size_t lo = (size_t)blockIdx.x * step, hi = lo + step;
  if (lo > n) lo = n;
  if (hi > n) hi = n;
  double s = 0.0;
  for (size_t i = lo + threadIdx.x; i < hi; i += SUMSQ_THREADS) {
    double x = (double)g[i];
    s = __dadd_rn(s, __dmul_rn(x, x));
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int half = SUMSQ_THREADS / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) parts[blockIdx.x] = sh[0];
}

static __global__ void sumsq_total_kernel(double *total, const double *parts) {
  double s = 0.0;
  for (int k = 0; k < SUMSQ_PARTS; k++) s = __dadd_rn(s, parts[k]);
  *total = s;
}

extern "C" double atoll_cuda_sumsq(const float *g, size_t n) {
  if (n == 0) return 0.0;
  double *parts = (double *)atoll_cuda_scratch(ATOLL_CUDA_SCRATCH_SUMSQ, (SUMSQ_PARTS + 1) * sizeof(double));
  size_t step = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
  sumsq_parts_kernel<<<SUMSQ_PARTS, SUMSQ_THREADS>>>(parts, g, n, step);
  LAUNCHED("sumsq_parts");
  sumsq_total_kernel<<<1, 1>>>(parts + SUMSQ_PARTS, parts);
  LAUNCHED("sumsq_total");
  double total = 0.0;
  atoll_cuda_copy_to_host(&total, parts + SUMSQ_PARTS, sizeof total); /* waits for both */
  return total;
}

/* One thread per element (grid-stride). The span's fields arrive by value. */
static __global__ void __launch_bounds__(OPTIM_THREADS)
    adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, atoll_adamw_span a) {
  const float one_b1 = __fsub_rn(1.0f, a.beta1), one_b2 = __fsub_rn(1.0f, a.beta2);
  const float step = __fdiv_rn(a.lr, a.bc1);
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    /* gi = g * grad_scale; m = b1 m + (1 - b1) gi; v = b2 v + (1 - b2) gi gi */
    float gi = __fmul_rn(g[i], a.grad_scale);
    float mi = __fadd_rn(__fmul_rn(a.beta1, m[i]), __fmul_rn(one_b1, gi));
    float vi = __fadd_rn(__fmul_rn(a.beta2, v[i]), __fmul_rn(__fmul_rn(one_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    /* denom = sqrt(v) / bc2_sqrt + eps; p = p decay_factor - ((lr / bc1) m) / denom */
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
    p[i] = __fsub_rn(__fmul_rn(p[i], a.decay_factor), __fdiv_rn(__fmul_rn(step, mi), denom));
  }
}

extern "C" void atoll_cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, const atoll_adamw_span *a) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n, OPTIM_THREADS), OPTIM_THREADS>>>(p, g, m, v, n, *a);
  LAUNCHED("adamw");
}

/* p = p decay - step g */
static __global__ void __launch_bounds__(OPTIM_THREADS)
    sgd_kernel(float *p, const float *g, size_t n, float decay, float step) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(step, g[i]));
}

extern "C" void atoll_cuda_sgd(float *p, const float *g, size_t n, float decay, float step) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n, OPTIM_THREADS), OPTIM_THREADS>>>(p, g, n, decay, step);
  LAUNCHED("sgd");
}

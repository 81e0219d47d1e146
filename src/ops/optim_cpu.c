/* The CPU backend's optimizer kernels (the sumsq, adamw and sgd entries of src/ops/ops.h):
 * the arithmetic of AdamW and SGD over one span, and the sum of squares behind the global
 * gradient norm. src/optim/ applies them tensor by tensor; their CUDA twins are in
 * src/ops/cuda/optim.cu. */
#include "ops/optim_cpu.h"

#include <math.h>

/* The range is cut into SUMSQ_PARTS parts that depend only on its length; each part
 * is summed by one thread and the parts are added in index order, so the result is the
 * same bits at any thread count (an OpenMP reduction combines threads' partial sums
 * in whatever order they finish, and its partition depends on the thread count). */
#define SUMSQ_PARTS 256

double atoll_sumsq(const float *g, size_t begin, size_t end) {
  if (end <= begin) return 0.0;
  size_t n = end - begin, step = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
  double part[SUMSQ_PARTS];
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int k = 0; k < SUMSQ_PARTS; k++) {
    size_t lo = begin + (size_t)k * step, hi = lo + step;
    if (lo > end) lo = end;
    if (hi > end) hi = end;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; i++) s += (double)g[i] * (double)g[i];
    part[k] = s;
  }
  double total = 0.0;
  for (int k = 0; k < SUMSQ_PARTS; k++) total += part[k];
  return total;
}

double atoll_sumsq_cpu(const float *g, size_t n) { return atoll_sumsq(g, 0, n); }

void atoll_adamw_span_cpu(float *p, const float *g, float *m, float *v, size_t n, const atoll_adamw_span *a) {
  float lr = a->lr, decay_factor = a->decay_factor, b1 = a->beta1, b2 = a->beta2, bc1 = a->bc1;
  float bc2_sqrt = a->bc2_sqrt, eps = a->eps, grad_scale = a->grad_scale;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay_factor - (lr / bc1) * mi / denom;
  }
}

void atoll_sgd_span_cpu(float *p, const float *g, size_t n, float decay, float step) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) p[i] = p[i] * decay - step * g[i];
}

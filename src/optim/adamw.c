/* AdamW (Loshchilov & Hutter: decoupled weight decay), the learning-rate schedule and
 * the pieces of global gradient-norm clipping. Updates work on a range of the flat
 * buffer so a sharded optimizer can update only its own shard. */
#include "atoll/atoll.h"
#include "ops/ops.h"
#include "optim/optim.h"

#include <math.h>

float atoll_lr_at(const atoll_adamw_config *c, int step) {
  if (c->warmup > 0 && step < c->warmup) return c->lr * (float)(step + 1) / (float)c->warmup;
  int decay_steps = c->total_steps - c->warmup;
  if (decay_steps <= 0) return c->lr;
  double progress = (double)(step - c->warmup) / (double)decay_steps;
  if (progress > 1.0) progress = 1.0;
  double min_lr = c->lr * c->min_lr_ratio;
  return (float)(min_lr + 0.5 * (c->lr - min_lr) * (1.0 + cos(M_PI * progress)));
}

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

void atoll_adamw_update(const atoll_ops *o, const atoll_layout *lay, const atoll_adamw_config *c, float *params,
                        const float *grads, float *m, float *v, size_t begin, size_t end, int t,
                        float lr, float grad_scale) {
  atoll_adamw_span a = {.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps, .grad_scale = grad_scale};
  a.bc1 = 1.0f - powf(c->beta1, (float)t);
  a.bc2_sqrt = sqrtf(1.0f - powf(c->beta2, (float)t));
  for (int k = 0; k < lay->ntensors; k++) {
    const atoll_tensor *ts = &lay->tensors[k];
    size_t lo = ts->offset > begin ? ts->offset : begin;
    size_t hi = ts->offset + ts->numel < end ? ts->offset + ts->numel : end;
    if (lo >= hi) continue;
    a.decay_factor = ts->decay ? 1.0f - lr * c->weight_decay : 1.0f;
    o->adamw(params + lo, grads + lo, m + (lo - begin), v + (lo - begin), hi - lo, &a);
  }
}

/* AdamW (Loshchilov & Hutter: decoupled weight decay), the learning-rate schedule and
 * the pieces of global gradient-norm clipping. Updates work on a range of the flat
 * buffer so a sharded optimizer can update only its own shard. */
#include "atoll/atoll.h"

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

double atoll_sumsq(const float *g, size_t begin, size_t end) {
  /* per-thread partial sums in double, combined in a fixed order by OpenMP's static
   * reduction: deterministic for a given thread count */
  double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
  for (size_t i = begin; i < end; i++) s += (double)g[i] * (double)g[i];
  return s;
}

static void update_span(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float decay_factor, float b1, float b2, float bc1, float bc2_sqrt,
                        float eps, float grad_scale) {
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

void atoll_adamw_update(const atoll_layout *lay, const atoll_adamw_config *c, float *params,
                        const float *grads, float *m, float *v, size_t begin, size_t end, int t,
                        float lr, float grad_scale) {
  float bc1 = 1.0f - powf(c->beta1, (float)t);
  float bc2_sqrt = sqrtf(1.0f - powf(c->beta2, (float)t));
  for (int k = 0; k < lay->ntensors; k++) {
    const atoll_tensor *ts = &lay->tensors[k];
    size_t lo = ts->offset > begin ? ts->offset : begin;
    size_t hi = ts->offset + ts->numel < end ? ts->offset + ts->numel : end;
    if (lo >= hi) continue;
    float decay_factor = ts->decay ? 1.0f - lr * c->weight_decay : 1.0f;
    update_span(params + lo, grads + lo, m + (lo - begin), v + (lo - begin), hi - lo, lr, decay_factor, c->beta1,
                c->beta2, bc1, bc2_sqrt, c->eps, grad_scale);
  }
}

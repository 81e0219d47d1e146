/* AdamW (Loshchilov & Hutter: decoupled weight decay) and the learning-rate schedule.
 * Updates work on a range of the flat buffer so a sharded optimizer can update only its
 * own shard; the arithmetic is the backend's kernel (src/ops/optim_cpu.c on the CPU). */
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

/* Plain SGD with decoupled weight decay: the inner optimizer of DiLoCo's equivalence
 * check (with H = 1, outer SGD at learning rate 1 and inner SGD, DiLoCo is exactly
 * data-parallel SGD). */
#include "atoll/atoll.h"
#include "ops/ops.h"
#include "optim/optim.h"

void atoll_sgd_update(const atoll_ops *o, const atoll_layout *lay, float weight_decay, float *params, const float *grads,
                      size_t begin, size_t end, float lr, float grad_scale) {
  for (int k = 0; k < lay->ntensors; k++) {
    const atoll_tensor *ts = &lay->tensors[k];
    size_t lo = ts->offset > begin ? ts->offset : begin;
    size_t hi = ts->offset + ts->numel < end ? ts->offset + ts->numel : end;
    if (lo >= hi) continue;
    float decay = ts->decay ? 1.0f - lr * weight_decay : 1.0f;
    float step = lr * grad_scale;
    o->sgd(params + lo, grads + lo, hi - lo, decay, step);
  }
}

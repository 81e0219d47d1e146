/* Learning-rate schedule, gradient norm and the inner optimizers (src/optim/). Their
 * settings (atoll_adamw_config) are part of the public configuration in atoll/atoll.h. */
#ifndef ATOLL_OPTIM_OPTIM_H
#define ATOLL_OPTIM_OPTIM_H

#include "model/layout.h"
#include "ops/ops.h"
#include "ops/optim_cpu.h" /* atoll_sumsq */


/* Learning rate for 0-based step `step`: warm-up then cosine decay. */
float atoll_lr_at(const atoll_adamw_config *c, int step);
/* One AdamW update of params[begin, end) with moments m, v (m[0] and v[0] belong to
 * params[begin], so a shard's moments can be stored alone);
 * t is the 1-based step count for bias correction; grad_scale multiplies the
 * gradients first (clipping). The arithmetic runs in o's adamw kernel, on o's buffers. */
void atoll_adamw_update(const atoll_ops *o, const atoll_layout *lay, const atoll_adamw_config *c, float *params,
                        const float *grads, float *m, float *v, size_t begin, size_t end,
                        int t, float lr, float grad_scale);

/* Plain SGD on params[begin, end): p = p (1 - lr wd) - lr grad_scale g, the decay only
 * on tensors with decay = 1 (o's sgd kernel). */
void atoll_sgd_update(const atoll_ops *o, const atoll_layout *lay, float weight_decay, float *params, const float *grads,
                      size_t begin, size_t end, float lr, float grad_scale);

#endif

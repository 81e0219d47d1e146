/* Data parallel and ZeRO; see dp.h for what each zero_stage does.
 *
 * A model on a device (--device, its buffers not host memory) with more than one rank:
 * the collectives run on a host copy (`staging`). A bucket's gradients are copied to
 * the host when it is launched and back when its request completes, so the buckets, and
 * with them every sum's order, are those of a CPU run; ZeRO-1's all-gather of the
 * weights goes the same way. Stages 2 and 3 hand pages back, which device memory
 * cannot: a device run refuses them (src/train/device.c). NCCL on the device buffers
 * themselves (atoll_dp_set_device_coll: NCCL, --dp-comm nccl) replaces the host copy at
 * stage 0. */
#include "parallel/dp.h"

#include "comm/device_coll.h"
#include "core/mem.h"
#include "model/model.h"
#include "optim/optim.h"

#include <stdlib.h>
#include <string.h>

#define MAX_INFLIGHT 512

typedef struct {
  atoll_req *req;
  size_t begin, end;
} inflight;

/* Stage-3 state of one unit (atoll_layout_unit: -1 .. layers) */
enum { UNIT_RELEASED, UNIT_GATHERING, UNIT_PRESENT };

struct atoll_dp {
  atoll_strategy base;
  atoll_model *model;
  atoll_comm *comm, *island;
  const atoll_layout *lay;
  int zero_stage, rank, size;
  size_t nparams, bucket_floats;
  atoll_wire grad_wire; /* what the gradient rings send */
  float *params, *grads;
  const atoll_ops *ops; /* the model's: its memory ops reach params and grads */
  float *staging;       /* [nparams] host copy for the collectives of a device model, else NULL */
  atoll_device_coll *dcoll; /* collectives on the device buffers themselves (NCCL), else NULL */
  int last_micro;
  /* gradient buckets: [pending_begin, pending_end) is final but not yet sent */
  size_t pending_begin, pending_end;
  inflight grad_reqs[MAX_INFLIGHT];
  int ngrad_reqs;
  /* ZeRO-3: units indexed layer + 1 */
  int nunits;
  int *unit_state;
  atoll_req **unit_req;
  size_t *counts; /* scratch [size] */
  double *island_sums; /* scratch [island size]: the gradient norm's partial sums */
  /* atoll_dp_defer: a range another strategy changes in finish_grads first */
  int has_deferred;
  size_t deferred_begin, deferred_end;
  int holding; /* the unit holding it waits in the pending bucket */
};

size_t atoll_dp_shard_start(size_t total, int n, int r) {
  size_t x = (size_t)r * ((total + (size_t)n - 1) / (size_t)n);
  return x < total ? x : total;
}

static size_t shard_lo(const atoll_dp *dp, int r) { return atoll_dp_shard_start(dp->nparams, dp->size, r); }

void atoll_dp_shard(const atoll_dp *dp, size_t *begin, size_t *end) {
  if (dp->zero_stage == 0) {
    *begin = 0;
    *end = dp->nparams;
    return;
  }
  *begin = shard_lo(dp, dp->rank);
  *end = shard_lo(dp, dp->rank + 1);
}

void atoll_shard_pieces(size_t total, int n, size_t begin, size_t end, size_t *counts) {
  for (int r = 0; r < n; r++) {
    size_t lo = atoll_dp_shard_start(total, n, r), hi = atoll_dp_shard_start(total, n, r + 1);
    lo = lo > begin ? lo : begin;
    hi = hi < end ? hi : end;
    counts[r] = hi > lo ? hi - lo : 0;
  }
}

void atoll_dp_pieces(const atoll_dp *dp, size_t begin, size_t end, size_t *counts) {
  atoll_shard_pieces(dp->nparams, dp->size, begin, end, counts);
}

/* Zeroes buf[begin, end) except this rank's shard, handing whole pages back. */
static void release_others(atoll_dp *dp, float *buf, size_t begin, size_t end) {
  size_t s0 = shard_lo(dp, dp->rank), s1 = shard_lo(dp, dp->rank + 1);
  if (begin < s0) atoll_mem_release(buf, begin, end < s0 ? end : s0);
  if (end > s1) atoll_mem_release(buf, begin > s1 ? begin : s1, end);
}

/* ------------------------------------------------------------ gradients --- */

static void grad_req_done(atoll_dp *dp, const inflight *f) {
  if (dp->staging)
    dp->ops->to_device(dp->grads + f->begin, dp->staging + f->begin, sizeof(float) * (f->end - f->begin));
  if (dp->zero_stage >= 2) release_others(dp, dp->grads, f->begin, f->end);
}

static void launch_bucket(atoll_dp *dp) {
  if (dp->pending_end <= dp->pending_begin) return;
  size_t b = dp->pending_begin, e = dp->pending_end;
  dp->pending_begin = dp->pending_end = b;
  if (dp->dcoll) { /* queued on the device's stream; finish_grads waits */
    dp->dcoll->allreduce(dp->dcoll, dp->grads + b, e - b);
    return;
  }
  if (dp->ngrad_reqs == MAX_INFLIGHT) { /* never expected: drain the oldest */
    atoll_req_wait(dp->grad_reqs[0].req);
    grad_req_done(dp, &dp->grad_reqs[0]);
    memmove(dp->grad_reqs, dp->grad_reqs + 1, sizeof(inflight) * (MAX_INFLIGHT - 1));
    dp->ngrad_reqs--;
  }
  atoll_dp_pieces(dp, b, e, dp->counts);
  inflight *f = &dp->grad_reqs[dp->ngrad_reqs++];
  f->begin = b;
  f->end = e;
  float *buf = dp->grads;
  if (dp->staging) {
    dp->ops->to_host(dp->staging + b, dp->grads + b, sizeof(float) * (e - b));
    buf = dp->staging;
  }
  f->req = dp->zero_stage == 0 ? atoll_iallreduce_wire(dp->comm, buf + b, e - b, dp->counts, dp->grad_wire)
                          : atoll_ireduce_scatter_wire(dp->comm, buf + b, e - b, dp->counts, dp->grad_wire);
}

static void poll_grads(atoll_dp *dp) {
  int kept = 0;
  for (int i = 0; i < dp->ngrad_reqs; i++) {
    if (atoll_req_test(dp->grad_reqs[i].req)) {
      atoll_req_wait(dp->grad_reqs[i].req); /* frees it */
      grad_req_done(dp, &dp->grad_reqs[i]);
    } else {
      dp->grad_reqs[kept++] = dp->grad_reqs[i];
    }
  }
  dp->ngrad_reqs = kept;
}

static void on_grads_ready(void *ctx, size_t begin, size_t end) {
  atoll_dp *dp = ctx;
  /* a deferred range (atoll_dp_defer) is changed in finish_grads first: its unit, and
   * every unit after it, waits until then */
  if (dp->last_micro && dp->has_deferred && begin <= dp->deferred_begin && dp->deferred_end <= end) dp->holding = 1;
  /* one rank has nothing to sum, except through device collectives: there a world of
   * one runs the collectives' whole path (the device test at world size 1) */
  if (!dp->last_micro || (dp->size == 1 && !dp->dcoll)) return;
  /* units arrive from the end of the buffer to its start, each adjacent to the last */
  if (dp->pending_end == dp->pending_begin) {
    dp->pending_begin = begin;
    dp->pending_end = end;
  } else {
    dp->pending_begin = begin;
  }
  /* stages 2-3 send every unit at once so its gradient pages can go back early */
  if (dp->holding) return;
  if (dp->zero_stage >= 2 || dp->pending_end - dp->pending_begin >= dp->bucket_floats) launch_bucket(dp);
}

/* ------------------------------------------------------ ZeRO-3 weights --- */

static void unit_range(atoll_dp *dp, int layer, size_t *b, size_t *e) {
  atoll_layout_unit(dp->lay, layer, b, e);
}

static void unit_start_gather(atoll_dp *dp, int layer) {
  int u = layer + 1;
  if (layer < -1 || layer > dp->lay->shape.layers || dp->unit_state[u] != UNIT_RELEASED) return;
  size_t b, e;
  unit_range(dp, layer, &b, &e);
  if (e == b) return; /* a unit this part does not hold */
  atoll_dp_pieces(dp, b, e, dp->counts);
  dp->unit_req[u] = atoll_iallgather(dp->comm, dp->params + b, e - b, dp->counts);
  dp->unit_state[u] = UNIT_GATHERING;
}

static void unit_wait(atoll_dp *dp, int layer) {
  int u = layer + 1;
  if (dp->unit_state[u] == UNIT_RELEASED) unit_start_gather(dp, layer);
  if (dp->unit_state[u] == UNIT_GATHERING) {
    atoll_req_wait(dp->unit_req[u]);
    dp->unit_req[u] = NULL;
    dp->unit_state[u] = UNIT_PRESENT;
  }
}

static void unit_release(atoll_dp *dp, int layer) {
  int u = layer + 1;
  if (dp->unit_state[u] == UNIT_GATHERING) {
    atoll_req_wait(dp->unit_req[u]);
    dp->unit_req[u] = NULL;
  }
  size_t b, e;
  unit_range(dp, layer, &b, &e);
  release_others(dp, dp->params, b, e);
  dp->unit_state[u] = UNIT_RELEASED;
}

static void poll_units(atoll_dp *dp) {
  for (int u = 0; u < dp->nunits; u++)
    if (dp->unit_state[u] == UNIT_GATHERING && atoll_req_test(dp->unit_req[u])) {
      atoll_req_wait(dp->unit_req[u]);
      dp->unit_req[u] = NULL;
      dp->unit_state[u] = UNIT_PRESENT;
    }
}

/* ---------------------------------------------------------------- hooks --- */

static void on_poll(void *ctx) {
  atoll_dp *dp = ctx;
  poll_grads(dp);
  if (dp->zero_stage == 3) poll_units(dp);
}

static void on_event(void *ctx, atoll_event ev, int layer) {
  atoll_dp *dp = ctx;
  if (ev == ATOLL_EV_BACKWARD_DONE && dp->holding) return;
  if (dp->zero_stage != 3 || dp->size == 1) {
    if (ev == ATOLL_EV_BACKWARD_DONE) launch_bucket(dp);
    return;
  }
  /* a pass covers one group of blocks (an interleaved pipeline's chunk): FORWARD_BEGIN
   * names its first block, BACKWARD_BEGIN the block after its last; prefetches of
   * blocks the part does not hold are empty units, skipped */
  int layers = dp->lay->shape.layers;
  switch (ev) {
  case ATOLL_EV_FORWARD_BEGIN: /* embeddings and final LayerNorm stay for the whole step */
    unit_start_gather(dp, -1);
    unit_start_gather(dp, layers);
    unit_start_gather(dp, layer);
    unit_wait(dp, -1);
    break;
  case ATOLL_EV_BLOCK_FORWARD:
    unit_wait(dp, layer);
    if (layer + 1 < layers) unit_start_gather(dp, layer + 1); /* prefetch */
    break;
  case ATOLL_EV_BLOCK_FORWARD_DONE: unit_release(dp, layer); break;
  case ATOLL_EV_HEAD_FORWARD: unit_wait(dp, layers); break;
  case ATOLL_EV_BACKWARD_BEGIN: unit_start_gather(dp, layer - 1); break;
  case ATOLL_EV_BLOCK_BACKWARD:
    unit_wait(dp, layer);
    if (layer > 0) unit_start_gather(dp, layer - 1);
    break;
  case ATOLL_EV_BLOCK_BACKWARD_DONE: unit_release(dp, layer); break;
  case ATOLL_EV_BACKWARD_DONE: launch_bucket(dp); break;
  }
}

/* ------------------------------------------------------------ the norm --- */

double atoll_dp_grad_sumsq(atoll_dp *dp) {
  size_t lo = shard_lo(dp, dp->rank), hi = shard_lo(dp, dp->rank + 1);
  const atoll_ops *o = dp->ops;
  double mine = 0.0;
  for (int i = 0; i < dp->lay->ntensors; i++) {
    const atoll_tensor *ten = &dp->lay->tensors[i];
    size_t b, e;
    if (atoll_tensor_clip(ten, lo, hi, &b, &e) && atoll_layout_owns(dp->lay, ten)) mine += o->sumsq(dp->grads + b, e - b);
  }
  int n = atoll_comm_size(dp->island);
  atoll_allgather_bytes(dp->island, &mine, dp->island_sums, sizeof mine);
  double s = 0.0;
  for (int r = 0; r < n; r++) s += dp->island_sums[r];
  return s;
}

/* ------------------------------------------------------ strategy entries --- */

static void dp_begin_step(atoll_strategy *s, int step) {
  (void)step;
  atoll_dp *dp = (atoll_dp *)s;
  if (dp->zero_stage >= 2)
    atoll_mem_release(dp->grads, 0, dp->nparams);
  else
    atoll_model_zero_grads(dp->model);
  dp->pending_begin = dp->pending_end = 0;
}

static void dp_before_backward(atoll_strategy *s, int last_micro) { ((atoll_dp *)s)->last_micro = last_micro; }

/* Waits for all gradient communication of the step. */
static void dp_finish_grads(atoll_strategy *s) {
  atoll_dp *dp = (atoll_dp *)s;
  dp->holding = 0;
  launch_bucket(dp);
  for (int i = 0; i < dp->ngrad_reqs; i++) {
    atoll_req_wait(dp->grad_reqs[i].req);
    grad_req_done(dp, &dp->grad_reqs[i]);
  }
  dp->ngrad_reqs = 0;
  if (dp->dcoll) dp->dcoll->wait(dp->dcoll);
}

/* After this rank updated its shard: all-gather the weights (ZeRO-1/2) or release
 * the units still held (ZeRO-3). */
static void dp_after_update(atoll_strategy *s) {
  atoll_dp *dp = (atoll_dp *)s;
  if (dp->size == 1) return;
  if (dp->zero_stage == 1 || dp->zero_stage == 2) {
    atoll_dp_pieces(dp, 0, dp->nparams, dp->counts);
    if (dp->staging) { /* this rank's shard out, every shard back */
      size_t lo = shard_lo(dp, dp->rank), hi = shard_lo(dp, dp->rank + 1);
      dp->ops->to_host(dp->staging + lo, dp->params + lo, sizeof(float) * (hi - lo));
      atoll_allgather(dp->comm, dp->staging, dp->nparams, dp->counts);
      dp->ops->to_device(dp->params, dp->staging, sizeof(float) * dp->nparams);
      return;
    }
    atoll_allgather(dp->comm, dp->params, dp->nparams, dp->counts);
  } else if (dp->zero_stage == 3) {
    atoll_dp_release_weights(dp);
  }
}

/* Units still gathered hold the values from before the change. */
static void dp_weights_changed(atoll_strategy *s) { atoll_dp_release_weights((atoll_dp *)s); }

static void dp_destroy(atoll_strategy *s) {
  atoll_dp *dp = (atoll_dp *)s;
  if (!dp) return;
  atoll_model_set_hooks(dp->model, NULL);
  free(dp->unit_state);
  free(dp->unit_req);
  free(dp->counts);
  free(dp->island_sums);
  free(dp->staging);
  free(dp);
}

static const atoll_strategy_ops DP_OPS = {
    .name = "data parallel",
    .begin_step = dp_begin_step,
    .before_backward = dp_before_backward,
    .finish_grads = dp_finish_grads,
    .after_update = dp_after_update,
    .weights_changed = dp_weights_changed,
    .destroy = dp_destroy,
};

/* --------------------------------------------------------------- public --- */

int atoll_dp_create(atoll_dp **out, atoll_model *m, atoll_comm *c, atoll_comm *island, int zero_stage,
                    size_t bucket_floats, atoll_err *err) {
  *out = NULL;
  if (zero_stage < 0 || zero_stage > 3)
    return atoll_fail(err, "--zero: the ZeRO stage must be 0, 1, 2 or 3, got %d", zero_stage);
  atoll_dp *dp = calloc(1, sizeof *dp);
  if (!dp) return atoll_fail(err, "out of memory");
  dp->base.ops = &DP_OPS;
  dp->model = m;
  dp->comm = c;
  dp->island = island;
  dp->lay = atoll_model_layout(m);
  dp->zero_stage = zero_stage;
  dp->rank = atoll_comm_rank(c);
  dp->size = atoll_comm_size(c);
  dp->nparams = dp->lay->nparams;
  dp->bucket_floats = bucket_floats ? bucket_floats : 1;
  dp->params = atoll_model_params(m);
  dp->grads = atoll_model_grads(m);
  dp->ops = atoll_model_ops(m);
  dp->last_micro = 1;
  dp->nunits = dp->lay->shape.layers + 2;
  dp->unit_state = calloc((size_t)dp->nunits, sizeof(int));
  dp->unit_req = calloc((size_t)dp->nunits, sizeof(atoll_req *));
  dp->counts = calloc((size_t)dp->size, sizeof(size_t));
  dp->island_sums = calloc((size_t)atoll_comm_size(island), sizeof(double));
  if (dp->ops->device && dp->size > 1) dp->staging = malloc(sizeof(float) * (dp->nparams ? dp->nparams : 1));
  if (!dp->unit_state || !dp->unit_req || !dp->counts || !dp->island_sums || (dp->ops->device && dp->size > 1 && !dp->staging)) {
    dp_destroy(&dp->base);
    return atoll_fail(err, "out of memory");
  }
  /* the caller fills the whole weight buffer (initialisation or checkpoint), then
   * calls atoll_dp_release_weights: ZeRO-3 keeps only its shard from then on */
  for (int u = 0; u < dp->nunits; u++) dp->unit_state[u] = UNIT_PRESENT;
  atoll_model_hooks h = {.ctx = dp, .event = on_event, .grads_ready = on_grads_ready, .poll = on_poll};
  atoll_model_set_hooks(m, &h);
  /* ZeRO-3 hands the weights' pages back between forward and backward: a bf16 copy kept
   * in between would hold half their bytes */
  if (dp->zero_stage == 3) atoll_model_keep_weights(m, 0);
  *out = dp;
  return 0;
}

atoll_strategy *atoll_dp_strategy(atoll_dp *dp) { return dp ? &dp->base : NULL; }

void atoll_dp_set_grad_wire(atoll_dp *dp, atoll_wire wire) { dp->grad_wire = wire; }

void atoll_dp_defer(atoll_dp *dp, size_t begin, size_t end) {
  dp->has_deferred = 1;
  dp->deferred_begin = begin;
  dp->deferred_end = end;
}

void atoll_dp_gather_weights(atoll_dp *dp) {
  if (dp->zero_stage != 3 || dp->size == 1) return;
  for (int layer = -1; layer <= dp->lay->shape.layers; layer++) unit_wait(dp, layer);
}

void atoll_dp_release_weights(atoll_dp *dp) {
  if (dp->zero_stage != 3 || dp->size == 1) return;
  for (int layer = -1; layer <= dp->lay->shape.layers; layer++) unit_release(dp, layer);
}

void atoll_dp_set_device_coll(atoll_dp *dp, atoll_device_coll *coll) {
  dp->dcoll = coll;
  free(dp->staging); /* the host copy is not needed: stage 0 sums the device buffers */
  dp->staging = NULL;
}

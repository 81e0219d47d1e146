/* Tensor parallel; see tp.h. */
#include "model/model.h"
#include "parallel/tp.h"

#include <stdlib.h>

struct atoll_tp {
  atoll_strategy base;
  atoll_model *model;
  atoll_comm *group;
  int sequence_parallel;
  size_t shard_begin, shard_end;
};

static void group_allreduce(void *ctx, float *buf, size_t n) { atoll_allreduce(ctx, buf, n); }
static void group_allgather(void *ctx, const float *mine, float *all, size_t n) {
  atoll_allgather_bytes(ctx, mine, all, n * sizeof(float));
}
static void group_reduce_scatter(void *ctx, float *buf, size_t n) { atoll_reduce_scatter(ctx, buf, n, NULL); }
static void group_allgather_pieces(void *ctx, float *buf, size_t n) { atoll_allgather(ctx, buf, n, NULL); }

static void tp_finish_grads(atoll_strategy *s) {
  atoll_tp *tp = (atoll_tp *)s;
  if (!tp->sequence_parallel) return;
  const atoll_layout *lay = atoll_model_layout(tp->model);
  float *g = atoll_model_grads(tp->model);
  for (int i = 0; i < lay->ntensors; i++) {
    const atoll_tensor *ten = &lay->tensors[i];
    size_t b, e;
    if (atoll_model_grad_is_partial(tp->model, ten) && atoll_tensor_clip(ten, tp->shard_begin, tp->shard_end, &b, &e))
      atoll_allreduce(tp->group, g + b, e - b);
  }
}

static void tp_destroy(atoll_strategy *s) {
  atoll_tp *tp = (atoll_tp *)s;
  atoll_model_set_tp(tp->model, NULL);
  free(tp);
}

static const atoll_strategy_ops TP_OPS = {
    .name = "tensor parallel", .finish_grads = tp_finish_grads, .destroy = tp_destroy};

int atoll_tp_create(atoll_tp **out, atoll_model *m, atoll_comm *group, int sequence_parallel, size_t shard_begin,
                    size_t shard_end, atoll_err *err) {
  *out = NULL;
  atoll_tp *tp = calloc(1, sizeof *tp);
  if (!tp) return atoll_fail(err, "out of memory");
  tp->base.ops = &TP_OPS;
  tp->model = m;
  tp->group = group;
  tp->sequence_parallel = sequence_parallel;
  tp->shard_begin = shard_begin;
  tp->shard_end = shard_end;
  atoll_model_tp seam = {.ctx = group, .allreduce = group_allreduce, .allgather = group_allgather,
                         .reduce_scatter = group_reduce_scatter, .allgather_chunks = group_allgather_pieces};
  atoll_model_set_tp(m, &seam);
  *out = tp;
  return 0;
}

atoll_strategy *atoll_tp_strategy(atoll_tp *tp) { return tp ? &tp->base : NULL; }

/* Tensor parallel: the tp ranks of a pp_stage each hold 1/tp of its heads, MLP width and
 * vocabulary (src/model/layout.c). The model calls the group's collectives through its
 * seam (atoll_model_set_tp), installed here. With sequence parallelism each rank also
 * holds only its tokens' share of the LayerNorms' gradients: finish_grads sums them
 * over the group, inside this rank's ZeRO shard (the shard boundaries are the same on
 * every rank of the group: the same part sizes), after data parallel has averaged
 * them. */
#ifndef ATOLL_TP_H
#define ATOLL_TP_H

#include "comm/comm.h"
#include "model/model.h"
#include "parallel/strategy.h"

typedef struct atoll_tp atoll_tp;

/* group: the tensor axis; [shard_begin, shard_end): the range this rank updates. */
int atoll_tp_create(atoll_tp **out, atoll_model *m, atoll_comm *group, int sequence_parallel, size_t shard_begin,
                    size_t shard_end, atoll_err *err);
/* The object as a strategy (strategy.h); the list destroys it. */
atoll_strategy *atoll_tp_strategy(atoll_tp *tp);

#endif

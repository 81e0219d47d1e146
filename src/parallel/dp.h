/* Data parallel: DDP and ZeRO-1/2/3 (FSDP) over the flat parameter buffer.
 *
 * Every rank keeps full-size parameter and gradient buffers at the model's offsets
 * (the model code is the same at every stage); what a stage shards is which of
 * their pages are resident and which rank updates what:
 *
 *   stage  gradients after backward        optimizer        weights between steps
 *   0 DDP  all-reduce (whole buffer)       whole buffer     whole, on every rank
 *   1      reduce-scatter, buffer kept     own shard        all-gathered after update
 *   2      reduce-scatter, others released own shard        all-gathered after update
 *   3      reduce-scatter, others released own shard        own shard only; each unit
 *                                                            (block, embeddings, final
 *                                                            LayerNorm) all-gathered
 *                                                            before use, released after
 *
 * Shards: rank r owns [r S, (r+1) S) of the P parameters, S = ceil(P / N). Every
 * collective splits its range along those shard boundaries, so each element is
 * summed in the same ring order at every stage: DDP and ZeRO-1/2/3 give bit-identical
 * weights. Gradients are averaged by the loss scale (1 / (accum x N)), not by a
 * division after the sum. Communication starts in buckets of at least bucket_floats,
 * in reverse layer order, as soon as backward finishes them, and advances while
 * backward runs (the model's poll hook). Only the last micro-batch of a step
 * communicates; earlier ones accumulate locally. */
#ifndef ATOLL_DP_H
#define ATOLL_DP_H

#include "atoll/atoll.h"
#include "comm/comm.h"

typedef struct atoll_dp atoll_dp;

/* Installs the strategy's hooks on the model. stage 0..3. The weight buffer counts
 * as whole until the caller has filled it and called atoll_dp_release_weights. */
int atoll_dp_create(atoll_dp **out, atoll_model *m, atoll_comm *c, int stage, size_t bucket_floats,
                    atoll_err *err);
void atoll_dp_destroy(atoll_dp *dp);

/* Where shard r of n over a buffer of P floats starts: r ceil(P / n), capped at P
 * (r = n gives P). The one rule for ZeRO shards, DiLoCo's outer-state slices and the
 * checkpoint's per-rank chunks, which must agree. */
size_t atoll_dp_shard_start(size_t P, int n, int r);
/* The range of the flat buffer this rank updates: everything at stage 0. */
void atoll_dp_shard(const atoll_dp *dp, size_t *begin, size_t *end);
/* Chunk sizes of params[begin, end) along the shard boundaries (counts[N]). */
void atoll_dp_chunks(const atoll_dp *dp, size_t begin, size_t end, size_t *counts);

/* Zeroes the gradients (stages 2-3 hand their pages back). */
void atoll_dp_begin_step(atoll_dp *dp);
/* Whether the next backward is the step's last micro-batch (the one that communicates). */
void atoll_dp_set_last_micro(atoll_dp *dp, int last);
/* Pipeline parallel: sum grads[begin, end) (the tied wte) over `tie` (the first and
 * last stage) before the data-parallel averaging; the unit that holds it is averaged
 * in atoll_dp_finish_grads, after the sum (the other stage may still be waiting for
 * this one's pipeline messages when its backward ends). */
void atoll_dp_set_tie(atoll_dp *dp, atoll_comm *tie, size_t begin, size_t end);
/* Waits for all gradient communication of the step. */
void atoll_dp_finish_grads(atoll_dp *dp);
/* Sum of squares of the averaged gradient, identical on every rank. */
double atoll_dp_grad_sumsq(atoll_dp *dp);
/* After this rank updated its shard: all-gather the weights (stages 1-2) or release
 * the units still held (stage 3). */
void atoll_dp_after_update(atoll_dp *dp);

/* Makes the whole weight buffer valid on every rank (stage 3 gathers it; the pages
 * stay resident until atoll_dp_release_weights). For hashes and checkpoints. */
void atoll_dp_gather_weights(atoll_dp *dp);
void atoll_dp_release_weights(atoll_dp *dp);

#endif

/* Data parallel: DDP and ZeRO-1/2/3 (FSDP) over the flat parameter buffer.
 *
 * Every rank keeps full-size parameter and gradient buffers at the model's offsets
 * (the model code is the same at every ZeRO stage); what a stage shards is which of
 * their pages are resident and which rank updates what:
 *
 *   zero_stage  gradients after backward       optimizer        weights between steps
 *   0 DDP       all-reduce (whole buffer)      whole buffer     whole, on every rank
 *   1           reduce-scatter, buffer kept    own shard        all-gathered after update
 *   2           reduce-scatter, others released own shard        all-gathered after update
 *   3           reduce-scatter, others released own shard        own shard only; each unit
 *                                                                 (block, embeddings, final
 *                                                                 LayerNorm) all-gathered
 *                                                                 before use, released after
 *
 * Shards: rank r of N owns [r S, (r+1) S) of the P parameters, S = ceil(P / N). Every
 * collective splits its range into pieces at those shard boundaries, so each element is
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
#include "model/model.h"
#include "parallel/strategy.h"

typedef struct atoll_dp atoll_dp;

/* Installs the object's hooks on the model. zero_stage 0..3; dp: the data axis;
 * island: the island's communicator, for the gradient norm's partial sums. The weight
 * buffer counts as whole until the caller has filled it and called
 * atoll_dp_release_weights. */
int atoll_dp_create(atoll_dp **out, atoll_model *m, atoll_comm *dp, atoll_comm *island, int zero_stage,
                    size_t bucket_floats, atoll_err *err);
/* What the gradient reduction (all-reduce at stage 0, reduce-scatter at 1-3) puts on
 * the wire (comm.h: atoll_wire); ATOLL_WIRE_FP32 until set. With bf16 every stage
 * leaves the same bf16-valued gradient sums, so DDP and ZeRO-1/2/3 stay
 * bit-identical to each other. */
void atoll_dp_set_grad_wire(atoll_dp *dp, atoll_wire wire);
/* A model on a device: sum the gradient buckets with these collectives on the device
 * buffers (ZeRO stage 0 only; the caller owns coll). Without, a device model's
 * collectives go through a host copy. */
struct atoll_device_coll;
void atoll_dp_set_device_coll(atoll_dp *dp, struct atoll_device_coll *coll);
/* The object as a strategy (strategy.h); the list destroys it. */
atoll_strategy *atoll_dp_strategy(atoll_dp *dp);

/* Where shard r of n over a buffer of `total` floats starts: r ceil(total / n), capped
 * at total (r = n gives total). The one rule for ZeRO shards, DiLoCo's outer-state
 * slices and the checkpoint's shard pieces, which must agree. */
size_t atoll_dp_shard_start(size_t total, int n, int r);
/* The range of the flat buffer this rank updates: everything at ZeRO stage 0. */
void atoll_dp_shard(const atoll_dp *dp, size_t *begin, size_t *end);
/* Sizes of the pieces of [begin, end) that fall in each of the n shards of a buffer of
 * `total` floats (counts[n]); atoll_dp_pieces: of this data axis's shards. */
void atoll_shard_pieces(size_t total, int n, size_t begin, size_t end, size_t *counts);
void atoll_dp_pieces(const atoll_dp *dp, size_t begin, size_t end, size_t *counts);

/* Holds back the data-parallel averaging of the unit that holds grads[begin, end) until
 * finish_grads, so that a strategy earlier in the list can change that range first:
 * the pipeline sums the tied wte over the first and last pp_stage there (the other
 * pp_stage may still be waiting for this one's pipeline messages when its backward
 * ends, so the sum cannot run inside backward). */
void atoll_dp_defer(atoll_dp *dp, size_t begin, size_t end);

/* Sum of squares of the final gradient over the whole model, identical on every rank
 * of the island, for every layout: each rank adds the tensors its part owns
 * (atoll_layout_owns) inside its ZeRO shard boundaries (at stage 0 too), and the
 * partial sums are added in island-rank order. The exchange is a control message on
 * the island's communicator, counted in no axis's bytes. */
double atoll_dp_grad_sumsq(atoll_dp *dp);

/* Makes the whole weight buffer valid on every rank (stage 3 gathers it; the pages
 * stay resident until atoll_dp_release_weights). For hashes and checkpoints. */
void atoll_dp_gather_weights(atoll_dp *dp);
void atoll_dp_release_weights(atoll_dp *dp);

#endif

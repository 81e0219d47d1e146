/* The model (--arch gpt2 or llama): parameters, gradients, activations, forward and backward passes, and the
 * hook seams through which parallel strategies act (src/model/gpt_create.c makes it,
 * src/model/gpt.c runs the passes). Internal. */
#ifndef ATOLL_MODEL_MODEL_H
#define ATOLL_MODEL_MODEL_H

#include "model/layout.h"


struct atoll_ops; /* the kernel backend seam, see src/ops/ops.h */

typedef struct atoll_model atoll_model;

/* Allocates parameters, gradients and activations for micro-batches of up to
 * max_batch x max_seq tokens (max_seq <= shape.context). Weights start at zero;
 * call atoll_model_init_weights or load them. */
int atoll_model_create(atoll_model **out, const atoll_shape *s, int max_batch, int max_seq,
                       atoll_err *err);
/* One part of the model (atoll_layout_init_part) with activations for `slots`
 * micro-batches between forward and backward (pipeline schedules). */
int atoll_model_create_part(atoll_model **out, const atoll_shape *s, const atoll_part *part,
                            int max_batch, int max_seq, int slots, atoll_err *err);
/* The same with every buffer in the memory of `ops` (NULL: the CPU table), e.g. a GPU's
 * (--device). A device model holds the whole model (no tensor or pipeline parts yet);
 * params, grads, logits and the slots' buffers are then device addresses. */
int atoll_model_create_on(atoll_model **out, const atoll_shape *s, const atoll_part *part, int max_batch,
                          int max_seq, int slots, const struct atoll_ops *ops, atoll_err *err);
void atoll_model_destroy(atoll_model *m);
/* Replaces the kernel table, e.g. the CPU one by atoll_ops_cpu_bf16 for --precision
 * bf16; the new table must use the same memory (the same alloc), or the process ends. */
void atoll_model_set_ops(atoll_model *m, const struct atoll_ops *ops);
/* With the bf16 CPU table: 1 (the default) keeps each weight matrix's bf16 copy from
 * forward to backward (2 bytes a parameter), 0 rounds it again in backward and hands
 * the copy's memory back, for good (ZeRO-3, whose weights are not resident between the
 * two). The same bits either way. */
void atoll_model_keep_weights(atoll_model *m, int on);
/* The kernel table; its memory ops reach the model's buffers. */
const struct atoll_ops *atoll_model_ops(const atoll_model *m);
/* The bytes a part allocates, counted by the allocation code itself, so that a run
 * can be refused before it allocates (src/train/train_memory.c). */
typedef struct {
  size_t weights; /* the flat parameter buffer */
  size_t grads;   /* the flat gradient buffer */
  size_t acts;    /* activations of every slot and the backward scratch */
  size_t weights_bf16; /* the bf16 table's kept copy of the weights (0 without it) */
} atoll_model_mem;
/* What atoll_model_create_on with the same arguments would allocate (ops NULL: the fp32
 * CPU table); fails on the same bad sizes, without allocating any of it. With the bf16
 * table acts holds its inputs' bf16 activations and weights_bf16 its weights' copy. */
int atoll_model_bytes(const atoll_shape *s, const atoll_part *part, int max_batch, int max_seq, int slots,
                      const struct atoll_ops *ops, atoll_model_mem *out, atoll_err *err);
/* GPT-2 initialisation (both archs): N(0, 0.02) for matrices and embeddings, residual
 * projections (attn.proj / mlp.proj, llama's attn.o / mlp.down) scaled by 1/sqrt(2L), norm
 * gains 1, biases 0. A part
 * takes its piece of the whole model's initial weights (the same at every layout).
 * Fails only when out of memory. */
int atoll_model_init_weights(atoll_model *m, uint64_t seed);

const atoll_layout *atoll_model_layout(const atoll_model *m);
/* In the model's memory (device memory on a device: atoll_model_ops(m)->to_host). */
float *atoll_model_params(atoll_model *m); /* flat, layout.nparams floats */
float *atoll_model_grads(atoll_model *m);  /* flat, same layout */
const float *atoll_model_logits(const atoll_model *m); /* [B, T, vocab] of the last forward */

/* Hooks let a parallel strategy act at points of the forward and backward passes
 * without the model knowing about it (FSDP gathers a block's weights before it runs;
 * DDP starts averaging a block's gradients as soon as they are final). */
typedef enum {
  ATOLL_EV_FORWARD_BEGIN,       /* before the embedding; layer: the pass's first block */
  ATOLL_EV_BLOCK_FORWARD,       /* before block `layer` runs forward */
  ATOLL_EV_BLOCK_FORWARD_DONE,  /* after it */
  ATOLL_EV_HEAD_FORWARD,        /* before the final LayerNorm and LM head */
  ATOLL_EV_BACKWARD_BEGIN,      /* before the loss gradient; layer: after the pass's last block */
  ATOLL_EV_BLOCK_BACKWARD,      /* before block `layer` runs backward */
  ATOLL_EV_BLOCK_BACKWARD_DONE, /* after it */
  ATOLL_EV_BACKWARD_DONE        /* after the embedding gradient */
} atoll_event;

typedef struct {
  void *ctx;
  void (*event)(void *ctx, atoll_event ev, int layer);
  /* gradients of params[begin, end) are final for this backward: lnf first, then
   * blocks from last to first, then the embeddings (atoll_layout_unit order reversed) */
  void (*grads_ready)(void *ctx, size_t begin, size_t end);
  /* called between operations of the backward pass: a chance to advance communication */
  void (*poll)(void *ctx);
} atoll_model_hooks;

/* NULL removes the hooks. The struct is copied. */
void atoll_model_set_hooks(atoll_model *m, const atoll_model_hooks *hooks);

/* The collectives of the tensor-parallel group (needed when tp_size > 1); every member
 * must end with bit-identical results. */
typedef struct {
  void *ctx;
  void (*allreduce)(void *ctx, float *buf, size_t n);                  /* sum, in place */
  void (*allgather)(void *ctx, const float *mine, float *all, size_t n); /* n per rank, rank order */
  /* sequence parallel, in place on buf[0, n) cut in tp equal chunks (chunk r = rank r's):
   * sum chunk r of every rank into rank r's chunk r / give every rank every chunk */
  void (*reduce_scatter)(void *ctx, float *buf, size_t n);
  void (*allgather_chunks)(void *ctx, float *buf, size_t n);
} atoll_model_tp;
void atoll_model_set_tp(atoll_model *m, const atoll_model_tp *tp);
/* Sequence parallel: 1 if each tensor-parallel rank holds only its tokens' share of
 * t's gradient (the LayerNorms), which the caller sums over the group after backward. */
int atoll_model_grad_is_partial(const atoll_model *m, const atoll_tensor *t);
/* Rows (tokens) of this rank's share of a micro-batch of n tokens: n, or n / tp under
 * sequence parallelism (the size of a stage's input and output activations). */
int atoll_model_local_rows(const atoll_model *m, int n);

/* Forward pass over B sequences of T tokens (inputs [B*T]). With targets it returns
 * the mean cross-entropy loss, else 0. */
float atoll_model_forward(atoll_model *m, const int32_t *inputs, const int32_t *targets, int B,
                          int T);
void atoll_model_zero_grads(atoll_model *m);
/* Backward of the last forward (which must have had targets). Adds
 * loss_scale * d(mean loss)/d(params) into the gradient buffer, so that micro-batches
 * accumulate (loss_scale = 1/accum). */
void atoll_model_backward(atoll_model *m, float loss_scale);

/* Pipeline stages: the same passes on micro-batch slot `slot`, over the part's chunk
 * `chunk` (0 unless interleaved). inputs are needed where the pass starts the model
 * (first stage, chunk 0; kept for its backward), targets where it ends it (last stage,
 * last chunk: the only pass that returns the loss); another pass first receives its
 * input activations [rows, dim] (atoll_model_local_rows) into atoll_model_slot_input.
 * After the forward, a pass that does not end the model hands on
 * atoll_model_slot_output; its backward takes the gradient of that output (dout; NULL
 * where it ends the model) and leaves the gradient of its input in
 * atoll_model_input_grad (valid until the next backward). */
float atoll_model_forward_slot(atoll_model *m, int slot, int chunk, const int32_t *inputs,
                               const int32_t *targets, int B, int T);
void atoll_model_backward_slot(atoll_model *m, int slot, int chunk, float loss_scale, const float *dout);
float *atoll_model_slot_input(atoll_model *m, int slot, int chunk);
const float *atoll_model_slot_output(const atoll_model *m, int slot, int chunk);
const float *atoll_model_input_grad(const atoll_model *m);

/* Model FLOPs per trained token (forward + backward) at sequence length T:
 * 6 * (parameters that take part in matrix products) + 6 * layers * dim * T
 * (causal attention: QK^T and PV, forward and backward, at its real cost). */
double atoll_flops_per_token(const atoll_shape *s, int T);

#endif

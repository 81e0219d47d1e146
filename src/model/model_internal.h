/* The model's internals, shared only by the model's own files: src/model/gpt_create.c
 * (creation, allocation, counting, initial weights, accessors) and src/model/gpt.c (the
 * forward and backward passes).
 *
 * Memory: every buffer below except host_losses and the structs comes from the ops
 * table's alloc and may be device memory (ops->device): host code reaches it only
 * through the table's copies. The tensor-parallel pieces of gpt.c (tp > 1) still run
 * host loops over activations, so a device model refuses tensor and pipeline parallelism. Nothing outside src/model/ includes it: the rest of
 * atoll sees the opaque atoll_model of model.h. */
#ifndef ATOLL_MODEL_MODEL_INTERNAL_H
#define ATOLL_MODEL_MODEL_INTERNAL_H

#include "model/model.h"
#include "ops/ops.h"

typedef struct {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
  float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} block_params;

typedef struct {
  float *res_in; /* [N,C] block input (aliases the previous block's res_out) */
  float *ln1, *ln1_mean, *ln1_rstd;
  float *qkv;  /* [N,3C/tp] */
  float *atty; /* [N,C/tp] */
  float *lse;  /* [B,NH/tp,T] */
  float *res_mid; /* [N,C] after attention */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu; /* [N,4C/tp] */
  float *res_out;        /* [N,C] block output */
  /* llama: q, k, v after the rotary embedding [N, heads/tp hs], [N, kv_heads/tp hs] x 2
   * (atty [N, heads/tp hs]);
   * the gate uses fch, up its own buffer, silu(gate) up fch_gelu [N, hidden/tp];
   * the norms keep only rstd (ln1_rstd, ln2_rstd) */
  float *q, *k, *v, *up;
  /* m->kept: the products' inputs as bf16 bits, written once by their producers and
   * read by forward and backward; ln1, ln2 and fch_gelu are then not allocated */
  uint16_t *ln1_bf16, *atty_bf16, *ln2_bf16, *fch_gelu_bf16;
} block_acts;

/* The activations of one micro-batch between its forward and its backward. */
typedef struct {
  float *encoded; /* [N,C] embedding output, or the stage's input */
  float *chunk_in[ATOLL_MAX_CHUNKS]; /* input of chunk c (chunk 0: encoded) */
  block_acts *acts; /* one per block of the part */
  float *lnf, *lnf_mean, *lnf_rstd;
  uint16_t *lnf_bf16; /* m->kept: instead of lnf */
  float *logits, *xent_lse, *losses; /* logits [N, V/tp] */
  int32_t *inputs, *targets;
  int B, T, have_targets;
} slot_acts;

struct atoll_model {
  atoll_shape s;
  atoll_layout lay;
  const atoll_ops *ops;
  int max_B, max_T, nslots, nblocks, tp, tp_rank;
  int Cl, NHl, Vl; /* local widths: C/tp, heads/tp, vocab/tp */
  int sp;          /* sequence parallel */
  int llama;       /* arch llama: the passes of src/model/llama.c */
  int KVl, hs, Hl; /* llama: local key/value heads, head size, local SwiGLU width */
  int QWl;         /* llama: local query (and attention output) width, heads/tp x hs */
  float eps;        /* llama: RMSNorm epsilon */
  double *rope_freq; /* llama: the rotary frequencies, hs/2 (atoll_shape_rope_freqs) */
  float *params, *grads;
  /* kept: the products' inputs are kept in bf16 by the passes (ops.h; with the bf16 CPU
   * table and tp = 1). Weights too, unless keep_weights is off (ZeRO-3 hands the
   * weights' pages back between forward and backward; a kept copy would hold half their
   * bytes): params_bf16 holds every weight matrix as forward rounded it, and backward
   * reads it (the weights do not change in between); otherwise each product rounds its
   * weight into weight_scratch (the largest tensor's size). */
  int kept, keep_weights;
  uint16_t *params_bf16, *weight_scratch;
  uint16_t *d4C_bf16; /* kept: fc's output gradient as GELU's backward rounds it (llama: dgate, dup) */
  uint16_t *dlogits_bf16; /* kept, last stage: the LM head's output gradient, rounded [N, V] */
  slot_acts *slots;
  /* backward scratch */
  float *dres, *dC, *d3C, *d4C;
  float *dfull; /* sequence parallel: a gathered output gradient [N,C] */
  float *xent_mine, *xent_all; /* tensor-parallel cross-entropy: [2N], [tp, 2N] */
  float *host_losses;          /* [N] host memory: the per-token losses copied out to sum */
  atoll_model_hooks hooks; /* all NULL unless a strategy set them */
  atoll_model_tp tpc;      /* collectives of the tensor-parallel group */
  /* all allocations, freed together */
  void **allocs;
  int nallocs, allocs_cap, alloc_failed;
  /* atoll_model_bytes: alloc_f only adds up the bytes, so the estimate is the
   * allocation code itself and cannot drift from it */
  int count_only;
  size_t counted;
};

/* Shared by the passes of gpt.c and llama.c (src/model/gpt.c documents the tensor- and
 * sequence-parallel seams). */
void atoll_model_emit(atoll_model *m, atoll_event ev, int layer);
void atoll_model_poll(atoll_model *m);
void atoll_model_gather_rows(atoll_model *m, float *full, int N);
/* The products and norms of a block, from fp32 inputs or, when m->kept, their bf16
 * copies (xb, outb; gpt.c): x @ w^T (+ bias) into out; out = resid + x @ w^T + bias
 * for a block half's row-parallel product; the block's norm (LayerNorm, or RMSNorm for
 * llama, which has no mean or b) of this rank's rows, gathered. */
void atoll_model_product_forward(atoll_model *m, float *out, const float *x, const uint16_t *xb, const float *w,
                                 const float *bias, int N, int C, int OC, int accumulate);
void atoll_model_product_backward(atoll_model *m, float *dx, float *dw, float *dbias, const float *dout,
                                  const float *x, const uint16_t *xb, const float *w, int N, int C, int OC,
                                  int accumulate_dx);
/* kept only: the backward of a product whose output gradient its producer already
 * rounded (doutb) and whose bias gradient it summed */
void atoll_model_product_backward_rounded(atoll_model *m, float *dx, float *dw, const uint16_t *doutb,
                                          const uint16_t *xb, const float *w, int N, int C, int OC, int accumulate_dx);
void atoll_model_block_out(atoll_model *m, float *out, const float *resid, const float *x, const uint16_t *xb,
                           const float *w, const float *bias, int N, int K);
void atoll_model_norm_forward(atoll_model *m, float *out, uint16_t *outb, float *mean, float *rstd, const float *x,
                              const float *w, const float *b, int N);
void atoll_model_row_parallel_out(atoll_model *m, float *out, const float *resid, const float *x,
                                  const float *w, const float *bias, int N, int K);
const float *atoll_model_full_dout(atoll_model *m, const float *dres, int N);
const float *atoll_model_sum_input_grad(atoll_model *m, int N);
/* One Llama block's passes (src/model/llama.c) on activations a of block l. */
void atoll_llama_block_forward(atoll_model *m, block_acts *a, int l, int B, int T);
void atoll_llama_block_backward(atoll_model *m, block_acts *a, int l, int B, int T);

#endif

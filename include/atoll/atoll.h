/* atoll: a training system for GPT-style language models in C.
 *
 * Public API of libatoll. Every function that can fail returns 0 on success and
 * -1 on failure, with a one-line message (naming the file or flag and the problem)
 * in an atoll_err. Only the command-line tool decides to exit.
 */
#ifndef ATOLL_ATOLL_H
#define ATOLL_ATOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors --- */

typedef struct {
  char msg[512];
} atoll_err;

/* Formats a message into err (if non-NULL) and returns -1. */
int atoll_fail(atoll_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------- timing --- */

/* Monotonic seconds (for intervals only). */
double atoll_seconds(void);
/* Median of v[0, n); sorts v in place. 0 for n = 0. */
double atoll_median(double *v, size_t n);

/* ------------------------------------------------------------ model shape --- */

typedef struct {
  int layers;  /* transformer blocks */
  int heads;   /* attention heads; must divide dim */
  int dim;     /* model width C */
  int context; /* maximum sequence length (position embeddings) */
  int vocab;   /* vocabulary size (256 for the built-in byte tokenizer) */
} atoll_shape;

/* Checks that a shape is possible; the message names the offending key. */
int atoll_shape_check(const atoll_shape *s, atoll_err *err);

/* ---------------------------------------------------- parameter layout ---- */

/* One named view into the flat parameter buffer. Gradients and AdamW moments use
 * the same offsets in their own flat buffers. */
typedef struct {
  char name[64];     /* e.g. "h.3.attn.qkv.weight" (documented in src/model/layout.c) */
  int ndim;
  int64_t shape[2];  /* row-major; weight matrices are [out, in] like torch.nn.Linear */
  size_t offset;     /* in floats from the start of the flat buffer */
  size_t numel;
  int decay;         /* 1 if AdamW weight decay applies (matrices and embeddings) */
  int layer;         /* block index, -1 for embeddings and the final LayerNorm */
  /* tensor parallel: how this tensor is cut from the whole model's tensor of the same
   * name (shape here is the local piece; full_shape the whole) */
  int split;         /* ATOLL_SPLIT_NONE (replicated), _ROWS (dim 0) or _COLS (dim 1) */
  int groups;        /* the split dimension is `groups` equal blocks, each cut in tp pieces */
  int64_t full_shape[2];
} atoll_tensor;

enum { ATOLL_SPLIT_NONE, ATOLL_SPLIT_ROWS, ATOLL_SPLIT_COLS };

/* The part of the model one rank holds under model parallelism. */
#define ATOLL_MAX_CHUNKS 64
typedef struct {
  int tp_size, tp_rank;  /* tensor parallel: 1/tp_size of the heads, MLP width, vocabulary */
  int stage, stages;     /* pipeline stage s of P */
  int chunks;            /* V: the blocks are cut in V x P contiguous chunks ("virtual
                            stages"); stage s holds chunks s, s + P, ..., s + (V-1) P */
  int sequence_parallel; /* tp > 1: activations outside the cut matrices are cut by
                            tokens (the model's business; the layout is the same) */
} atoll_part;

/* The whole model as a part (tp 1, one stage, one chunk). */
atoll_part atoll_part_whole(void);
/* Blocks [begin, end) of virtual stage k of n for a model of `layers` blocks: an even
 * split, k layers / n rounded down. */
void atoll_part_chunk_range(int layers, int k, int n, int *begin, int *end);

typedef struct {
  atoll_shape shape;          /* the whole model's shape */
  atoll_part part;
  int first_stage, last_stage; /* holds the embedding lookup / the final LayerNorm and LM head */
  int chunk_begin[ATOLL_MAX_CHUNKS], chunk_end[ATOLL_MAX_CHUNKS]; /* blocks of chunk c */
  int *block_of;               /* [layers]: index of block l among the part's blocks, or -1 */
  int nblocks;
  int ntensors;
  atoll_tensor *tensors;
  size_t nparams; /* total floats (of this part) */
  /* tensor indices: -1 where this part does not hold the tensor */
  int t_wte, t_wpe, t_block0, t_lnf; /* t_block0: the first block's ln_1.weight; 12 per block,
                                        block l at t_block0 + 12 block_of[l] */
} atoll_layout;

/* The whole model (tp 1, every block). */
int atoll_layout_init(atoll_layout *lay, const atoll_shape *s, atoll_err *err);
/* One part: the embeddings (wte, wpe) on the first stage, wte again on the last (the
 * tied LM head), the blocks of its chunks in order, ln_f on the last stage, each
 * matrix cut for tensor parallelism (src/model/layout.c). Fails, naming the flag
 * (--tp, --pp, --virtual-stages), when tp_size does not divide heads or vocabulary or
 * a chunk would be empty. */
int atoll_layout_init_part(atoll_layout *lay, const atoll_shape *s, const atoll_part *part,
                           atoll_err *err);
void atoll_layout_free(atoll_layout *lay);
const atoll_tensor *atoll_layout_find(const atoll_layout *lay, const char *name);
/* The flat range [begin, end) of one unit: block `layer` (0 .. layers-1), the
 * embeddings wte + wpe (layer = -1) or the final LayerNorm (layer = layers). Units
 * tile the buffer in the order -1, 0, 1, ..., layers; a unit this part does not hold
 * is an empty range. */
void atoll_layout_unit(const atoll_layout *lay, int layer, size_t *begin, size_t *end);
/* Walks the contiguous runs that map a part's buffer into the whole model's buffer:
 * fn(ctx, t, part_offset, whole_offset, n) for every piece of every tensor t of the
 * part, in the part's order. */
typedef void (*atoll_run_fn)(void *ctx, const atoll_tensor *t, size_t part_off, size_t whole_off,
                             size_t n);
void atoll_layout_runs(const atoll_layout *part, const atoll_layout *whole, atoll_run_fn fn,
                       void *ctx);
/* The piece [*b, *e) of tensor t inside the flat range [lo, hi); 1 if not empty. */
int atoll_tensor_clip(const atoll_tensor *t, size_t lo, size_t hi, size_t *b, size_t *e);
/* 1 if this part's copy of t is the one that counts (norms, checkpoints): cut tensors
 * always; replicated ones on tensor-parallel rank 0; the tied wte on the first stage. */
int atoll_layout_owns(const atoll_layout *lay, const atoll_tensor *t);

/* ------------------------------------------------------------------ RNG --- */

/* Deterministic 64-bit generator (splitmix64 seeding, xoshiro256** core). */
typedef struct {
  uint64_t s[4];
} atoll_rng;

void atoll_rng_seed(atoll_rng *r, uint64_t seed);
uint64_t atoll_rng_next(atoll_rng *r);
float atoll_rng_uniform(atoll_rng *r); /* [0, 1) */
float atoll_rng_normal(atoll_rng *r);  /* standard normal */
/* A stateless hash of several integers, used to derive independent streams. */
uint64_t atoll_hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d);
/* A 64-bit hash of n floats' bits: ranks and islands compare weights with it. */
uint64_t atoll_hash_floats(const float *p, size_t n);

/* --------------------------------------------------------------- model ---- */

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
void atoll_model_destroy(atoll_model *m);
/* GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2L). A part
 * takes its piece of the whole model's initial weights (the same at every layout).
 * Fails only when out of memory. */
int atoll_model_init_weights(atoll_model *m, uint64_t seed);

const atoll_layout *atoll_model_layout(const atoll_model *m);
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

/* ------------------------------------------------------------ optimizer --- */

typedef struct {
  float lr;           /* peak learning rate */
  float min_lr_ratio; /* cosine decays to lr * min_lr_ratio */
  int warmup;         /* linear warm-up steps */
  int total_steps;
  float beta1, beta2, eps;
  float weight_decay; /* decoupled, only on tensors with decay = 1 */
  float grad_clip;    /* global L2 norm; <= 0 disables */
} atoll_adamw_config;

/* Learning rate for 0-based step `step`: warm-up then cosine decay. */
float atoll_lr_at(const atoll_adamw_config *c, int step);
/* Sum of squares of g[begin, end) in double (for the global gradient norm); the same
 * bits at any OpenMP thread count. */
double atoll_sumsq(const float *g, size_t begin, size_t end);
/* One AdamW update of params[begin, end) with moments m, v (m[0] and v[0] belong to
 * params[begin], so a shard's moments can be stored alone);
 * t is the 1-based step count for bias correction; grad_scale multiplies the
 * gradients first (clipping). */
void atoll_adamw_update(const atoll_layout *lay, const atoll_adamw_config *c, float *params,
                        const float *grads, float *m, float *v, size_t begin, size_t end,
                        int t, float lr, float grad_scale);

/* Plain SGD on params[begin, end): p = p (1 - lr wd) - lr grad_scale g, the decay only
 * on tensors with decay = 1. */
void atoll_sgd_update(const atoll_layout *lay, float weight_decay, float *params, const float *grads,
                      size_t begin, size_t end, float lr, float grad_scale);

/* ------------------------------------------------------------------ data --- */

/* Token file, see src/data/token_file.c for the byte layout. */
typedef struct {
  char path[1024];
  uint32_t vocab;
  uint32_t width;   /* bytes per token: 1, 2 or 4 */
  uint64_t ntokens;
  void *map;        /* whole file, memory-mapped */
  size_t map_size;
  const uint8_t *tokens;
  uint32_t max_token; /* largest token (0 when empty) */
  uint64_t hash;      /* atoll_token_file_hash of the tokens, as in manifest.json */
} atoll_token_file;

int atoll_token_file_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab,
                           atoll_err *err);
int atoll_token_file_open(atoll_token_file *sh, const char *path, atoll_err *err);
void atoll_token_file_close(atoll_token_file *sh);
int32_t atoll_token_file_token(const atoll_token_file *sh, uint64_t i);

/* A run of tokens [begin, end) inside one token file that windows may be drawn from. */
typedef struct {
  int file;
  uint64_t begin, end;
} atoll_segment;

/* All token files of one split ("train" or "val") in a prepared data directory. */
typedef struct {
  int nfiles;
  atoll_token_file *files;
  uint32_t vocab;
  uint32_t max_token;      /* largest token of any file */
  uint64_t ntokens;
  int nsegments;           /* where windows come from: every token file whole, unless restricted */
  atoll_segment *segments;
} atoll_dataset;

int atoll_dataset_open(atoll_dataset *ds, const char *dir, const char *split, int seq,
                       atoll_err *err);
void atoll_dataset_close(atoll_dataset *ds);
/* Fails, naming the first token file, if the split's vocabulary (header) is larger
 * than the model's or any token is >= model_vocab: evaluation would index past the
 * embedding table. Opening checks each file alone; this checks the split against the
 * model (train and val alike). */
int atoll_dataset_check_vocab(const atoll_dataset *ds, int model_vocab, atoll_err *err);
/* Restricts windows to token ranges [begins[i], ends[i]) of the split (token files laid end
 * to end), e.g. some of the source files (non-i.i.d. data per DiLoCo island). Fails if
 * no window of seq+1 tokens fits. */
int atoll_dataset_restrict(atoll_dataset *ds, const uint64_t *begins, const uint64_t *ends, int n,
                           int seq, const char *what, atoll_err *err);
/* Writes seq+1 tokens of one training window into out. The window depends only on
 * (seed, step, index): index is the row within the step's global batch, so that a
 * resumed run sees the same batches and ranks can take disjoint slices. */
void atoll_dataset_window(const atoll_dataset *ds, uint64_t seed, uint64_t step, uint64_t index,
                          int seq, int32_t *out);
/* Window number i of a fixed, evenly spaced evaluation set. */
void atoll_dataset_eval_window(const atoll_dataset *ds, uint64_t i, uint64_t count, int seq,
                               int32_t *out);

/* Byte-level tokenizer: token = byte value, vocabulary 256. */
#define ATOLL_BYTE_VOCAB 256
/* atoll prepare: tokenizes text files into DIR/train_NNN.bin and DIR/val_NNN.bin. */
int atoll_prepare(const char *const *files, int nfiles, const char *outdir, double val_fraction,
                  atoll_err *err);

#ifdef __cplusplus
}
#endif
#endif

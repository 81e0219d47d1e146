/* The flat parameter buffer's named views and the model-parallel parts (src/model/layout.c,
 * which documents every tensor name and cut). Internal: library users see none of it. */
#ifndef ATOLL_MODEL_LAYOUT_H
#define ATOLL_MODEL_LAYOUT_H

#include "atoll/atoll.h"


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
  int t_wte, t_wpe, t_block0, t_lnf; /* t_block0: the first block's first tensor; per_block
                                        per block, block l at t_block0 + per_block block_of[l] */
  int t_head;    /* the LM head's matrix on the last stage: t_wte when tied, else lm_head.weight */
  int per_block; /* tensors per block: 12 (gpt2) or 9 (llama) */
} atoll_layout;

/* The block design's derived sizes (zero fields of atoll_shape take their defaults). */
int atoll_shape_llama(const atoll_shape *s);   /* 1 for arch "llama" */
int atoll_shape_tied(const atoll_shape *s);    /* 1 if the LM head is wte */
int atoll_shape_kv_heads(const atoll_shape *s);
/* The size of one attention head: llama's head_dim when set, else dim / heads. */
int atoll_shape_head_dim(const atoll_shape *s);
int atoll_shape_hidden(const atoll_shape *s);  /* MLP width: 4 dim (gpt2) or the SwiGLU rule */
float atoll_shape_norm_eps(const atoll_shape *s);
float atoll_shape_rope_theta(const atoll_shape *s);
/* The rotary frequencies' scaling (src/model/rope.c): 1 for "llama3"; its keys' check
 * (one line naming the key); 1 if a and b turn by the same angles (theta and scaling);
 * freq[i] for each of the hs/2 pairs of a head. */
int atoll_shape_rope_llama3(const atoll_shape *s);
int atoll_shape_rope_check(const atoll_shape *s, atoll_err *err);
int atoll_shape_rope_same(const atoll_shape *a, const atoll_shape *b);
void atoll_shape_rope_freqs(const atoll_shape *s, double *freq);

/* The whole model (tp 1, every block). */
int atoll_layout_init(atoll_layout *lay, const atoll_shape *s, atoll_err *err);
/* One part: the embeddings (wte, gpt2's wpe) on the first stage, wte again on the last
 * when the LM head is tied (else lm_head.weight there), the blocks of its chunks in order, ln_f on the last stage, each
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

#endif

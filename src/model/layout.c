/* The parameter layout: every tensor of the model as a named view into one flat
 * float buffer, in this order (no gaps, so a byte range of the buffer is a range of
 * tensors and safetensors' data section is the buffer itself):
 *
 *   name                       shape        decay
 *   wte.weight                 [V, C]       yes   token embedding, tied LM head
 *   wpe.weight                 [ctx, C]     yes   position embedding
 *   for each block l = 0 .. L-1:
 *   h.l.ln_1.weight            [C]          no
 *   h.l.ln_1.bias              [C]          no
 *   h.l.attn.qkv.weight        [3C, C]      yes   rows: q (C), k (C), v (C); heads contiguous
 *   h.l.attn.qkv.bias          [3C]         no
 *   h.l.attn.proj.weight       [C, C]       yes
 *   h.l.attn.proj.bias         [C]          no
 *   h.l.ln_2.weight            [C]          no
 *   h.l.ln_2.bias              [C]          no
 *   h.l.mlp.fc.weight          [4C, C]      yes
 *   h.l.mlp.fc.bias            [4C]         no
 *   h.l.mlp.proj.weight        [C, 4C]      yes
 *   h.l.mlp.proj.bias          [C]          no
 *   ln_f.weight                [C]          no
 *   ln_f.bias                  [C]          no
 *
 * Weight matrices are [out, in] as in torch.nn.Linear (GPT-2's Hugging Face Conv1D
 * weights are the transpose). Blocks are contiguous, so one block's parameters are one
 * byte range: the unit that later work all-gathers (FSDP) or buckets for all-reduce.
 *
 * A part (model parallelism) is laid out the same way with fewer and smaller tensors:
 *   pipeline stage s of P  wte (first and last stage: embedding, tied LM head), wpe
 *   (V chunks each)         (first stage), the blocks of chunks s, s+P, ..., s+(V-1)P
 *                           of the V P even chunks of the layers, in order, ln_f (last)
 *   tensor rank r of tp     split  cut
 *     attn.qkv.weight/bias  rows   3 groups (q, k, v) of C rows; rank r takes rows
 *                                  [r C/tp, (r+1) C/tp) of each: its heads
 *     mlp.fc.weight/bias    rows   rows [r 4C/tp, (r+1) 4C/tp)
 *     attn.proj.weight      cols   columns [r C/tp, (r+1) C/tp) of every row
 *     mlp.proj.weight       cols   columns [r 4C/tp, (r+1) 4C/tp)
 *     wte.weight            rows   vocabulary rows [r V/tp, (r+1) V/tp)
 *     the rest              none   replicated (LayerNorms, wpe, projection biases)
 * Checkpoints always hold the whole model; atoll_layout_runs maps a part into it.
 *
 * --arch llama (hs = head_dim, dim / heads unless --head-dim, Q = heads hs, KV = kv_heads,
 * H = the SwiGLU width, no biases but those of q, k and v with --qkv-bias 1):
 *   name                       shape        decay  tensor-parallel cut
 *   wte.weight                 [V, C]       yes    rows (vocabulary); first stage (and the
 *                                                  last when tied: --tie 1)
 *   for each block l:
 *   h.l.attn_norm.weight       [C]          no     replicated (RMSNorm gain)
 *   h.l.attn.q.weight          [Q, C]       yes    rows: query heads [r heads/tp, ...)
 *   h.l.attn.k.weight          [KV hs, C]   yes    rows: key/value heads [r KV/tp, ...)
 *   h.l.attn.v.weight          [KV hs, C]   yes    rows: the same key/value heads
 *   h.l.attn.q.bias            [Q]          no     rows, as q.weight; --qkv-bias 1 only (Qwen2)
 *   h.l.attn.k.bias            [KV hs]      no     rows, as k.weight; --qkv-bias 1 only
 *   h.l.attn.v.bias            [KV hs]      no     rows, as v.weight; --qkv-bias 1 only
 *   h.l.attn.o.weight          [C, Q]       yes    cols
 *   h.l.mlp_norm.weight        [C]          no     replicated
 *   h.l.mlp.gate.weight        [H, C]       yes    rows
 *   h.l.mlp.up.weight          [H, C]       yes    rows
 *   h.l.mlp.down.weight        [C, H]       yes    cols
 *   norm.weight                [C]          no     replicated; last stage
 *   lm_head.weight             [V, C]       yes    rows; last stage, untied only
 * Query head h reads key/value head h / (heads / KV); a rank's heads/tp query heads read
 * exactly its KV/tp key/value heads, so tp must divide KV. Rotary embeddings have no
 * parameters. */
#include "atoll/atoll.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int atoll_shape_check(const atoll_shape *s, atoll_err *err) {
  if (s->layers < 1 || s->layers > 4096)
    return atoll_fail(err, "layers: must be in [1, 4096], got %d", s->layers);
  if (s->dim < 1 || s->dim > 65536) return atoll_fail(err, "dim: must be in [1, 65536], got %d", s->dim);
  if (s->heads < 1) return atoll_fail(err, "heads: must be at least 1, got %d", s->heads);
  int llama = atoll_shape_llama(s);
  if (s->head_dim < 0 || s->head_dim > 1024)
    return atoll_fail(err, "head-dim: must be in [0, 1024], got %d", s->head_dim);
  if (s->head_dim && !llama && s->head_dim * s->heads != s->dim)
    return atoll_fail(err, "head-dim: is a llama option (GPT-2's heads are dim / heads wide)");
  if (s->dim % s->heads != 0 && !(llama && s->head_dim))
    return atoll_fail(err, "heads: %d heads do not divide the width dim=%d (--arch llama: or set --head-dim)", s->heads,
                      s->dim);
  if (s->context < 1 || s->context > 1 << 20)
    return atoll_fail(err, "context: must be in [1, 1048576], got %d", s->context);
  if (s->vocab < 2 || s->vocab > 1 << 24)
    return atoll_fail(err, "vocab: must be in [2, 16777216], got %d", s->vocab);
  if (s->arch[0] && strcmp(s->arch, "gpt2") != 0 && strcmp(s->arch, "llama") != 0)
    return atoll_fail(err, "arch: unknown block design '%.8s' (known: gpt2, llama)", s->arch);
  if (!llama) {
    if (s->kv_heads != 0 && s->kv_heads != s->heads)
      return atoll_fail(err, "kv-heads: grouped-query attention needs --arch llama (GPT-2 has one key/value head per head)");
    if (s->qkv_bias)
      return atoll_fail(err, "qkv-bias: is a llama option (GPT-2's qkv product always has a bias)");
    return 0;
  }
  int kv = atoll_shape_kv_heads(s);
  if (kv < 1 || s->heads % kv)
    return atoll_fail(err, "kv-heads: %d key/value heads do not divide the %d attention heads", kv, s->heads);
  int hd = atoll_shape_head_dim(s);
  if (hd % 2)
    return atoll_fail(err, s->head_dim ? "head-dim: rotary embeddings need an even head size, got %d"
                                       : "heads: rotary embeddings need an even head size, dim / heads = %d", hd);
  if ((long)s->heads * hd > 65536)
    return atoll_fail(err, "head-dim: heads x head-dim = %ld, more than 65536", (long)s->heads * hd);
  if (s->multiple_of < 0 || s->multiple_of > 65536)
    return atoll_fail(err, "multiple-of: must be in [1, 65536], got %d", s->multiple_of);
  if (!(s->norm_eps >= 0.0f && s->norm_eps <= 1.0f))
    return atoll_fail(err, "norm-eps: must be in [1e-12, 1]");
  if (!(s->rope_theta >= 0.0f && s->rope_theta <= 1e9f))
    return atoll_fail(err, "rope-theta: must be in [1, 1e9]");
  return atoll_shape_rope_check(s, err);
}

int atoll_shape_llama(const atoll_shape *s) { return strcmp(s->arch, "llama") == 0; }
int atoll_shape_tied(const atoll_shape *s) { return !atoll_shape_llama(s) || s->tie == 1; }
int atoll_shape_kv_heads(const atoll_shape *s) {
  return atoll_shape_llama(s) && s->kv_heads > 0 ? s->kv_heads : s->heads;
}
int atoll_shape_head_dim(const atoll_shape *s) {
  return atoll_shape_llama(s) && s->head_dim > 0 ? s->head_dim : s->dim / s->heads;
}
/* Llama's rule (Meta's reference code): floor(2/3 of 4 dim), rounded up to a multiple. */
int atoll_shape_hidden(const atoll_shape *s) {
  if (!atoll_shape_llama(s)) return 4 * s->dim;
  long m = s->multiple_of > 0 ? s->multiple_of : 256, h = 8L * s->dim / 3;
  return (int)(m * ((h + m - 1) / m));
}
float atoll_shape_norm_eps(const atoll_shape *s) { return s->norm_eps > 0.0f ? s->norm_eps : 1e-5f; }
float atoll_shape_rope_theta(const atoll_shape *s) { return s->rope_theta > 0.0f ? s->rope_theta : 10000.0f; }

/* Adds one tensor whose whole shape is [d0, d1] (d1 = 0: a vector), cut for tensor
 * parallelism along `split` in `groups` blocks (see atoll_tensor). */
static void add(atoll_layout *lay, size_t *off, int layer, const char *name, int64_t d0,
                int64_t d1, int decay, int split, int groups) {
  atoll_tensor *t = &lay->tensors[lay->ntensors++];
  if (layer >= 0)
    snprintf(t->name, sizeof t->name, "h.%d.%s", layer, name);
  else
    snprintf(t->name, sizeof t->name, "%s", name);
  int tp = lay->part.tp_size;
  t->ndim = d1 ? 2 : 1;
  t->full_shape[0] = d0;
  t->full_shape[1] = d1;
  t->shape[0] = split == ATOLL_SPLIT_ROWS ? d0 / tp : d0;
  t->shape[1] = split == ATOLL_SPLIT_COLS ? d1 / tp : d1;
  t->split = tp > 1 ? split : ATOLL_SPLIT_NONE;
  t->groups = groups;
  t->numel = (size_t)t->shape[0] * (size_t)(d1 ? t->shape[1] : 1);
  t->offset = *off;
  t->decay = decay;
  t->layer = layer;
  *off += t->numel;
}

atoll_part atoll_part_whole(void) { return (atoll_part){1, 0, 0, 1, 1, 0}; }

void atoll_part_chunk_range(int layers, int k, int n, int *begin, int *end) {
  *begin = (int)((long)k * layers / n);
  *end = (int)((long)(k + 1) * layers / n);
}

int atoll_layout_init(atoll_layout *lay, const atoll_shape *s, atoll_err *err) {
  atoll_part whole = atoll_part_whole();
  return atoll_layout_init_part(lay, s, &whole, err);
}

/* Tensor parallel cuts (Megatron-LM): qkv and fc are column-parallel (their output
 * rows cut; qkv as three blocks q, k, v so that each rank holds whole heads), the
 * projections row-parallel (their input columns cut), wte cut by vocabulary rows;
 * LayerNorms, position embeddings and the projections' biases are replicated. */
int atoll_layout_init_part(atoll_layout *lay, const atoll_shape *s, const atoll_part *part,
                           atoll_err *err) {
  memset(lay, 0, sizeof *lay);
  if (atoll_shape_check(s, err)) return -1;
  int tp = part->tp_size;
  if (tp < 1) return atoll_fail(err, "--tp: must be at least 1, got %d", tp);
  if (s->heads % tp)
    return atoll_fail(err, "--tp %d: does not divide the %d attention heads (heads=%d)", tp, s->heads, s->heads);
  if (s->vocab % tp)
    return atoll_fail(err, "--tp %d: does not divide the vocabulary (vocab=%d; pad it to a multiple of %d)", tp,
                      s->vocab, tp);
  int llama = atoll_shape_llama(s), kv = atoll_shape_kv_heads(s), hidden = atoll_shape_hidden(s);
  if (llama && kv % tp)
    return atoll_fail(err, "--tp %d: does not divide the %d key/value heads (kv-heads=%d); each rank needs whole key/value heads",
                      tp, kv, kv);
  if (hidden % tp)
    return atoll_fail(err, "--tp %d: does not divide the MLP width %d (choose --multiple-of as a multiple of %d)", tp,
                      hidden, tp);
  if (part->tp_rank < 0 || part->tp_rank >= tp)
    return atoll_fail(err, "tensor-parallel rank %d is outside [0, %d)", part->tp_rank, tp);
  int P = part->stages, V = part->chunks;
  if (P < 1 || part->stage < 0 || part->stage >= P)
    return atoll_fail(err, "--pp: stage %d of %d does not exist", part->stage, P);
  if (V < 1 || V > ATOLL_MAX_CHUNKS)
    return atoll_fail(err, "--virtual-stages: must be in [1, %d], got %d", ATOLL_MAX_CHUNKS, V);
  if ((long)P * V > s->layers)
    return atoll_fail(err, "--pp %d x --virtual-stages %d: more pipeline chunks than the model's %d layers", P, V,
                      s->layers);
  lay->shape = *s;
  lay->part = *part;
  lay->first_stage = part->stage == 0;
  lay->last_stage = part->stage == P - 1;
  int64_t C = s->dim;
  lay->block_of = malloc(sizeof(int) * (size_t)s->layers);
  if (!lay->block_of) return atoll_fail(err, "out of memory for the parameter layout");
  for (int l = 0; l < s->layers; l++) lay->block_of[l] = -1;
  for (int c = 0; c < V; c++) {
    atoll_part_chunk_range(s->layers, c * P + part->stage, P * V, &lay->chunk_begin[c], &lay->chunk_end[c]);
    for (int l = lay->chunk_begin[c]; l < lay->chunk_end[c]; l++) lay->block_of[l] = lay->nblocks++;
  }
  int nblocks = lay->nblocks;
  lay->per_block = llama ? (s->qkv_bias ? 12 : 9) : 12;
  lay->tensors = calloc((size_t)(4 + lay->per_block * nblocks), sizeof(atoll_tensor));
  if (!lay->tensors) {
    atoll_layout_free(lay);
    return atoll_fail(err, "out of memory for the parameter layout");
  }
  size_t off = 0;
  lay->t_wte = lay->t_wpe = lay->t_lnf = lay->t_head = -1;
  enum { N = ATOLL_SPLIT_NONE, R = ATOLL_SPLIT_ROWS, K = ATOLL_SPLIT_COLS };
  int tied = atoll_shape_tied(s);
  if (lay->first_stage || (lay->last_stage && tied)) {
    lay->t_wte = lay->ntensors;
    add(lay, &off, -1, "wte.weight", s->vocab, C, 1, R, 1);
  }
  if (lay->first_stage && !llama) {
    lay->t_wpe = lay->ntensors;
    add(lay, &off, -1, "wpe.weight", s->context, C, 1, N, 1);
  }
  lay->t_block0 = lay->ntensors;
  int64_t HD = atoll_shape_head_dim(s), QW = s->heads * HD, KVW = kv * HD, H = hidden;
  for (int l = 0; l < s->layers; l++) {
    if (lay->block_of[l] < 0) continue;
    if (llama) {
      add(lay, &off, l, "attn_norm.weight", C, 0, 0, N, 1);
      add(lay, &off, l, "attn.q.weight", QW, C, 1, R, 1);
      add(lay, &off, l, "attn.k.weight", KVW, C, 1, R, 1);
      add(lay, &off, l, "attn.v.weight", KVW, C, 1, R, 1);
      if (s->qkv_bias) {
        add(lay, &off, l, "attn.q.bias", QW, 0, 0, R, 1);
        add(lay, &off, l, "attn.k.bias", KVW, 0, 0, R, 1);
        add(lay, &off, l, "attn.v.bias", KVW, 0, 0, R, 1);
      }
      add(lay, &off, l, "attn.o.weight", C, QW, 1, K, 1);
      add(lay, &off, l, "mlp_norm.weight", C, 0, 0, N, 1);
      add(lay, &off, l, "mlp.gate.weight", H, C, 1, R, 1);
      add(lay, &off, l, "mlp.up.weight", H, C, 1, R, 1);
      add(lay, &off, l, "mlp.down.weight", C, H, 1, K, 1);
      continue;
    }
    add(lay, &off, l, "ln_1.weight", C, 0, 0, N, 1);
    add(lay, &off, l, "ln_1.bias", C, 0, 0, N, 1);
    add(lay, &off, l, "attn.qkv.weight", 3 * C, C, 1, R, 3);
    add(lay, &off, l, "attn.qkv.bias", 3 * C, 0, 0, R, 3);
    add(lay, &off, l, "attn.proj.weight", C, C, 1, K, 1);
    add(lay, &off, l, "attn.proj.bias", C, 0, 0, N, 1);
    add(lay, &off, l, "ln_2.weight", C, 0, 0, N, 1);
    add(lay, &off, l, "ln_2.bias", C, 0, 0, N, 1);
    add(lay, &off, l, "mlp.fc.weight", 4 * C, C, 1, R, 1);
    add(lay, &off, l, "mlp.fc.bias", 4 * C, 0, 0, R, 1);
    add(lay, &off, l, "mlp.proj.weight", C, 4 * C, 1, K, 1);
    add(lay, &off, l, "mlp.proj.bias", C, 0, 0, N, 1);
  }
  if (lay->last_stage) {
    lay->t_lnf = lay->ntensors;
    if (llama) {
      add(lay, &off, -1, "norm.weight", C, 0, 0, N, 1);
    } else {
      add(lay, &off, -1, "ln_f.weight", C, 0, 0, N, 1);
      add(lay, &off, -1, "ln_f.bias", C, 0, 0, N, 1);
    }
    if (tied) {
      lay->t_head = lay->t_wte;
    } else {
      lay->t_head = lay->ntensors;
      add(lay, &off, -1, "lm_head.weight", s->vocab, C, 1, R, 1);
    }
  }
  lay->nparams = off;
  return 0;
}

void atoll_layout_free(atoll_layout *lay) {
  free(lay->tensors);
  free(lay->block_of);
  memset(lay, 0, sizeof *lay);
}

const atoll_tensor *atoll_layout_find(const atoll_layout *lay, const char *name) {
  for (int i = 0; i < lay->ntensors; i++)
    if (strcmp(lay->tensors[i].name, name) == 0) return &lay->tensors[i];
  return NULL;
}

void atoll_layout_unit(const atoll_layout *lay, int layer, size_t *begin, size_t *end) {
  const atoll_tensor *t = lay->tensors;
  size_t blocks_begin = lay->t_block0 < lay->ntensors ? t[lay->t_block0].offset : lay->nparams;
  size_t blocks_end = lay->t_lnf >= 0 ? t[lay->t_lnf].offset : lay->nparams;
  int L = lay->shape.layers;
  if (layer < 0) {
    *begin = 0;
    *end = blocks_begin;
  } else if (layer >= L) {
    *begin = blocks_end;
    *end = lay->nparams;
  } else if (lay->block_of[layer] >= 0) {
    const atoll_tensor *first = &t[lay->t_block0 + lay->per_block * lay->block_of[layer]];
    const atoll_tensor *last = &first[lay->per_block - 1];
    *begin = first->offset;
    *end = last->offset + last->numel;
  } else {
    /* not held: empty, where the next held block starts */
    *begin = *end = blocks_end;
    for (int l = layer + 1; l < L; l++)
      if (lay->block_of[l] >= 0) {
        *begin = *end = t[lay->t_block0 + lay->per_block * lay->block_of[l]].offset;
        break;
      }
  }
}

void atoll_layout_runs(const atoll_layout *part, const atoll_layout *whole, atoll_run_fn fn,
                       void *ctx) {
  int tp = part->part.tp_size, r = part->part.tp_rank;
  for (int i = 0; i < part->ntensors; i++) {
    const atoll_tensor *t = &part->tensors[i];
    const atoll_tensor *w = atoll_layout_find(whole, t->name);
    if (!w) continue; /* cannot happen for layouts of the same shape */
    if (t->split == ATOLL_SPLIT_NONE) {
      fn(ctx, t, t->offset, w->offset, t->numel);
    } else if (t->split == ATOLL_SPLIT_ROWS) {
      /* group k of the whole rows holds rows [k G, (k+1) G); rank r takes its G/tp */
      size_t row = t->ndim == 2 ? (size_t)t->shape[1] : 1;
      size_t G = (size_t)t->full_shape[0] / t->groups, g = G / tp;
      for (int k = 0; k < t->groups; k++)
        fn(ctx, t, t->offset + k * g * row, w->offset + (k * G + r * g) * row, g * row);
    } else {
      size_t cols = (size_t)t->full_shape[1], c = cols / tp;
      for (int64_t i0 = 0; i0 < t->shape[0]; i0++)
        fn(ctx, t, t->offset + i0 * c, w->offset + i0 * cols + r * c, c);
    }
  }
}

int atoll_tensor_clip(const atoll_tensor *t, size_t lo, size_t hi, size_t *b, size_t *e) {
  *b = t->offset > lo ? t->offset : lo;
  *e = t->offset + t->numel < hi ? t->offset + t->numel : hi;
  return *e > *b;
}

int atoll_layout_owns(const atoll_layout *lay, const atoll_tensor *t) {
  if (t->split == ATOLL_SPLIT_NONE && lay->part.tp_rank != 0) return 0;
  if (lay->t_wte >= 0 && t == &lay->tensors[lay->t_wte]) return lay->first_stage;
  return 1;
}

double atoll_flops_per_token(const atoll_shape *s, int T) {
  /* Parameters in matrix products: blocks' matrices and the LM head; embeddings,
   * biases and norms are lookups or elementwise. */
  double C = s->dim, L = s->layers;
  double matmul_params = L * 12.0 * C * C + (double)s->vocab * C;
  if (atoll_shape_llama(s)) {
    double hd = atoll_shape_head_dim(s), qw = s->heads * hd, kvw = atoll_shape_kv_heads(s) * hd;
    matmul_params = L * (2.0 * qw * C + 2.0 * kvw * C + 3.0 * C * atoll_shape_hidden(s)) + (double)s->vocab * C;
    return 6.0 * matmul_params + 6.0 * L * qw * T; /* attention's products are heads x head_dim wide */
  }
  return 6.0 * matmul_params + 6.0 * L * C * T;
}

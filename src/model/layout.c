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
 * byte range: the unit that later work all-gathers (FSDP) or buckets for all-reduce. */
#include "atoll/atoll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int atoll_shape_check(const atoll_shape *s, atoll_err *err) {
  if (s->layers < 1 || s->layers > 4096)
    return atoll_fail(err, "layers: must be in [1, 4096], got %d", s->layers);
  if (s->dim < 1 || s->dim > 65536) return atoll_fail(err, "dim: must be in [1, 65536], got %d", s->dim);
  if (s->heads < 1) return atoll_fail(err, "heads: must be at least 1, got %d", s->heads);
  if (s->dim % s->heads != 0)
    return atoll_fail(err, "heads: %d heads do not divide the width dim=%d", s->heads, s->dim);
  if (s->context < 1 || s->context > 1 << 20)
    return atoll_fail(err, "context: must be in [1, 1048576], got %d", s->context);
  if (s->vocab < 2 || s->vocab > 1 << 24)
    return atoll_fail(err, "vocab: must be in [2, 16777216], got %d", s->vocab);
  return 0;
}

static void add(atoll_layout *lay, size_t *off, int layer, const char *name, int64_t d0,
                int64_t d1, int decay) {
  atoll_tensor *t = &lay->tensors[lay->ntensors++];
  if (layer >= 0)
    snprintf(t->name, sizeof t->name, "h.%d.%s", layer, name);
  else
    snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = d1 ? 2 : 1;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
  t->offset = *off;
  t->decay = decay;
  t->layer = layer;
  *off += t->numel;
}

int atoll_layout_init(atoll_layout *lay, const atoll_shape *s, atoll_err *err) {
  memset(lay, 0, sizeof *lay);
  if (atoll_shape_check(s, err)) return -1;
  lay->shape = *s;
  int64_t C = s->dim;
  lay->tensors = calloc((size_t)(4 + 12 * s->layers), sizeof(atoll_tensor));
  if (!lay->tensors) return atoll_fail(err, "out of memory for the parameter layout");
  size_t off = 0;
  add(lay, &off, -1, "wte.weight", s->vocab, C, 1);
  add(lay, &off, -1, "wpe.weight", s->context, C, 1);
  for (int l = 0; l < s->layers; l++) {
    add(lay, &off, l, "ln_1.weight", C, 0, 0);
    add(lay, &off, l, "ln_1.bias", C, 0, 0);
    add(lay, &off, l, "attn.qkv.weight", 3 * C, C, 1);
    add(lay, &off, l, "attn.qkv.bias", 3 * C, 0, 0);
    add(lay, &off, l, "attn.proj.weight", C, C, 1);
    add(lay, &off, l, "attn.proj.bias", C, 0, 0);
    add(lay, &off, l, "ln_2.weight", C, 0, 0);
    add(lay, &off, l, "ln_2.bias", C, 0, 0);
    add(lay, &off, l, "mlp.fc.weight", 4 * C, C, 1);
    add(lay, &off, l, "mlp.fc.bias", 4 * C, 0, 0);
    add(lay, &off, l, "mlp.proj.weight", C, 4 * C, 1);
    add(lay, &off, l, "mlp.proj.bias", C, 0, 0);
  }
  add(lay, &off, -1, "ln_f.weight", C, 0, 0);
  add(lay, &off, -1, "ln_f.bias", C, 0, 0);
  lay->nparams = off;
  return 0;
}

void atoll_layout_free(atoll_layout *lay) {
  free(lay->tensors);
  memset(lay, 0, sizeof *lay);
}

const atoll_tensor *atoll_layout_find(const atoll_layout *lay, const char *name) {
  for (int i = 0; i < lay->ntensors; i++)
    if (strcmp(lay->tensors[i].name, name) == 0) return &lay->tensors[i];
  return NULL;
}

void atoll_layout_unit(const atoll_layout *lay, int layer, size_t *begin, size_t *end) {
  int L = lay->shape.layers;
  /* tensors: wte, wpe, 12 per block, ln_f.weight, ln_f.bias */
  int first = layer < 0 ? 0 : (layer >= L ? 2 + 12 * L : 2 + 12 * layer);
  int last = layer < 0 ? 1 : (layer >= L ? 3 + 12 * L : 13 + 12 * layer);
  *begin = lay->tensors[first].offset;
  *end = lay->tensors[last].offset + lay->tensors[last].numel;
}

double atoll_flops_per_token(const atoll_shape *s, int T) {
  /* Parameters in matrix products: blocks' matrices and the tied LM head (wte);
   * position embeddings, biases and LayerNorms are lookups or elementwise. */
  double C = s->dim, L = s->layers;
  double matmul_params = L * 12.0 * C * C + (double)s->vocab * C;
  return 6.0 * matmul_params + 6.0 * L * C * T;
}

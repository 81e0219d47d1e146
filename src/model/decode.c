/* The forward pass of src/model/gpt.c and src/model/llama.c for generation: rows of new
 * tokens only, with every layer's keys and values of earlier positions kept in a cache
 * ([context, kv width] per layer), so a token costs one row of every matrix product and
 * one attention row instead of a pass over the whole window. Same kernels as training
 * (src/ops/ops.h); attention is the grouped-query kernel for both archs (GPT-2: as many
 * key/value heads as heads), whose queries sit at the end of the cached keys. */
#include "model/decode.h"

#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

struct atoll_decoder {
  atoll_model *m;
  int pos, cap, KW; /* positions cached, capacity (context), key/value row width */
  float *kc, *vc;   /* [layers, cap, KW] */
  float *x, *h, *mean, *rstd, *q, *qkv, *att, *lse, *a, *b, *c, *logits; /* the model's memory */
  int32_t *tok;        /* [context] the step's tokens, the model's memory */
  float *host_logits;  /* [vocab] what a step returns */
};

int atoll_decoder_create(atoll_decoder **out, atoll_model *m, atoll_err *err) {
  *out = NULL;
  const atoll_part *p = &m->lay.part;
  if (p->tp_size != 1 || p->stages != 1 || p->chunks != 1)
    return atoll_fail(err, "key/value cache: needs the whole model on one rank");
  atoll_decoder *d = calloc(1, sizeof *d);
  if (!d) return atoll_fail(err, "out of memory for the key/value cache");
  size_t C = m->s.dim, T = m->s.context, L = m->s.layers, H = atoll_shape_hidden(&m->s);
  d->m = m;
  d->cap = (int)T;
  d->KW = atoll_shape_kv_heads(&m->s) * atoll_shape_head_dim(&m->s);
  size_t kv = L * T * d->KW, QW = (size_t)m->s.heads * atoll_shape_head_dim(&m->s); /* llama's q width */
  if (QW < C) QW = C;
  float **bufs[] = {&d->kc, &d->vc, &d->x,   &d->h, &d->mean, &d->rstd, &d->q, &d->qkv,
                    &d->att, &d->lse, &d->a, &d->b, &d->c,    &d->logits, (float **)&d->tok};
  size_t sizes[] = {kv, kv, T * C, T * C, T, T, T * QW, T * 3 * C, T * QW, T * m->s.heads, T * H, T * H, T * H,
                    (size_t)m->s.vocab, T};
  d->host_logits = malloc(sizeof(float) * (size_t)m->s.vocab);
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    if (!(*bufs[i] = m->ops->alloc(sizeof(float) * sizes[i])) || !d->host_logits) {
      atoll_decoder_destroy(d);
      return atoll_fail(err, "out of memory for the key/value cache (%zu floats)", sizes[i]);
    }
  *out = d;
  return 0;
}

void atoll_decoder_destroy(atoll_decoder *d) {
  if (!d) return;
  void *bufs[] = {d->kc, d->vc, d->x, d->h, d->mean, d->rstd, d->q, d->qkv, d->att, d->lse, d->a, d->b, d->c,
                  d->logits, d->tok};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (bufs[i]) d->m->ops->free(bufs[i]);
  free(d->host_logits);
  free(d);
}

int atoll_decoder_pos(const atoll_decoder *d) { return d->pos; }
void atoll_decoder_reset(atoll_decoder *d) { d->pos = 0; }

static float *param(atoll_model *m, const char *name, int layer) {
  char full[64];
  if (layer >= 0)
    snprintf(full, sizeof full, "h.%d.%s", layer, name);
  else
    snprintf(full, sizeof full, "%s", name);
  return m->params + atoll_layout_find(&m->lay, full)->offset;
}

/* The tensor, or NULL where the layout has none (llama's q, k, v biases without --qkv-bias). */
static float *param_or_null(atoll_model *m, const char *name, int layer) {
  char full[64];
  snprintf(full, sizeof full, "h.%d.%s", layer, name);
  const atoll_tensor *t = atoll_layout_find(&m->lay, full);
  return t ? m->params + t->offset : NULL;
}

/* One GPT-2 block on rows x [n, C] at positions pos..pos+n-1; kc, vc: this layer's cache. */
static void gpt2_block(atoll_decoder *d, int l, int n, float *kc, float *vc) {
  atoll_model *m = d->m;
  const atoll_ops *o = m->ops;
  int C = m->s.dim, NH = m->s.heads, hs = C / NH, pos = d->pos;
  o->layernorm_forward(d->h, d->mean, d->rstd, d->x, param(m, "ln_1.weight", l), param(m, "ln_1.bias", l), n, C);
  o->matmul_forward(d->qkv, d->h, param(m, "attn.qkv.weight", l), param(m, "attn.qkv.bias", l), n, C, 3 * C, 0);
  for (int i = 0; i < n; i++) {
    const float *r = d->qkv + (size_t)i * 3 * C;
    o->copy(d->q + (size_t)i * C, r, sizeof(float) * C);
    o->copy(kc + (size_t)(pos + i) * C, r + C, sizeof(float) * C);
    o->copy(vc + (size_t)(pos + i) * C, r + 2 * C, sizeof(float) * C);
  }
  o->gqa_forward(d->att, d->lse, d->q, kc, vc, 1, n, pos + n, NH, NH, hs);
  o->matmul_forward(d->x, d->att, param(m, "attn.proj.weight", l), param(m, "attn.proj.bias", l), n, C, C, 1);
  o->layernorm_forward(d->h, d->mean, d->rstd, d->x, param(m, "ln_2.weight", l), param(m, "ln_2.bias", l), n, C);
  o->matmul_forward(d->a, d->h, param(m, "mlp.fc.weight", l), param(m, "mlp.fc.bias", l), n, C, 4 * C, 0);
  o->gelu_forward(d->b, d->a, (size_t)n * 4 * C);
  o->matmul_forward(d->x, d->b, param(m, "mlp.proj.weight", l), param(m, "mlp.proj.bias", l), n, 4 * C, C, 1);
}

static void llama_block(atoll_decoder *d, int l, int n, float *kc, float *vc) {
  atoll_model *m = d->m;
  const atoll_ops *o = m->ops;
  int C = m->s.dim, NH = m->s.heads, hs = m->hs, QW = NH * hs, KV = d->KW / hs, H = atoll_shape_hidden(&m->s);
  int pos = d->pos;
  float *knew = kc + (size_t)pos * d->KW, *vnew = vc + (size_t)pos * d->KW;
  o->rmsnorm_forward(d->h, d->rstd, d->x, param(m, "attn_norm.weight", l), n, C, m->eps);
  o->matmul_forward(d->q, d->h, param(m, "attn.q.weight", l), param_or_null(m, "attn.q.bias", l), n, C, QW, 0);
  o->matmul_forward(knew, d->h, param(m, "attn.k.weight", l), param_or_null(m, "attn.k.bias", l), n, C, d->KW, 0);
  o->matmul_forward(vnew, d->h, param(m, "attn.v.weight", l), param_or_null(m, "attn.v.bias", l), n, C, d->KW, 0);
  o->rope(d->q, 1, n, NH, hs, m->rope_freq, pos, 0);
  o->rope(knew, 1, n, KV, hs, m->rope_freq, pos, 0);
  o->gqa_forward(d->att, d->lse, d->q, kc, vc, 1, n, pos + n, NH, KV, hs);
  o->matmul_forward(d->x, d->att, param(m, "attn.o.weight", l), NULL, n, QW, C, 1);
  o->rmsnorm_forward(d->h, d->rstd, d->x, param(m, "mlp_norm.weight", l), n, C, m->eps);
  o->matmul_forward(d->a, d->h, param(m, "mlp.gate.weight", l), NULL, n, C, H, 0);
  o->matmul_forward(d->b, d->h, param(m, "mlp.up.weight", l), NULL, n, C, H, 0);
  o->swiglu_forward(d->c, d->a, d->b, (size_t)n * H);
  o->matmul_forward(d->x, d->c, param(m, "mlp.down.weight", l), NULL, n, H, C, 1);
}

const float *atoll_decoder_step(atoll_decoder *d, const int32_t *tokens, int n) {
  atoll_model *m = d->m;
  const atoll_ops *o = m->ops;
  const atoll_layout *lay = &m->lay;
  int C = m->s.dim;
  if (n < 1 || d->pos + n > d->cap) return NULL;
  const float *wte = m->params + lay->tensors[lay->t_wte].offset;
  const float *wpe = lay->t_wpe >= 0 ? m->params + lay->tensors[lay->t_wpe].offset : NULL;
  /* positions pos.. : the embedding kernel's row t reads wpe row pos + t */
  o->to_device(d->tok, tokens, sizeof(int32_t) * (size_t)n);
  o->embed_forward(d->x, d->tok, wte, wpe ? wpe + (size_t)d->pos * C : NULL, 1, n, C);
  size_t per_layer = (size_t)d->cap * d->KW;
  for (int l = 0; l < m->s.layers; l++) {
    float *kc = d->kc + l * per_layer, *vc = d->vc + l * per_layer;
    if (m->llama)
      llama_block(d, l, n, kc, vc);
    else
      gpt2_block(d, l, n, kc, vc);
  }
  const float *last = d->x + (size_t)(n - 1) * C;
  if (m->llama)
    o->rmsnorm_forward(d->h, d->rstd, last, m->params + lay->tensors[lay->t_lnf].offset, 1, C, m->eps);
  else
    o->layernorm_forward(d->h, d->mean, d->rstd, last, m->params + lay->tensors[lay->t_lnf].offset,
                         m->params + lay->tensors[lay->t_lnf + 1].offset, 1, C);
  o->matmul_forward(d->logits, d->h, m->params + lay->tensors[lay->t_head].offset, NULL, 1, C, m->s.vocab, 0);
  d->pos += n;
  o->to_host(d->host_logits, d->logits, sizeof(float) * (size_t)m->s.vocab);
  return d->host_logits;
}

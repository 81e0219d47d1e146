/* GPT-2 model: forward and backward over the flat parameter buffer, every operation
 * through the kernel seam (src/ops/ops.h).
 *
 * Block l (pre-LayerNorm):
 *   x1 = x  + proj(attn(ln_1(x)))
 *   x2 = x1 + mlp_proj(gelu(fc(ln_2(x1))))
 * then logits = ln_f(x_L) @ wte^T (LM head tied to the token embedding).
 *
 * Activations kept for backward, per block: the block input (residual), ln_1 output
 * and statistics, qkv, attention output and its log-sum-exp, the residual after
 * attention, ln_2 output and statistics, the fc output and its GELU. The residual adds
 * are fused into the projections (sgemm with beta = 1 on a copy of the residual). */
#include "atoll/atoll.h"
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
  float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} block_params;

typedef struct {
  float *res_in; /* [N,C] block input (aliases the previous block's res_mid2) */
  float *ln1, *ln1_mean, *ln1_rstd;
  float *qkv;  /* [N,3C] */
  float *atty; /* [N,C] */
  float *lse;  /* [B,NH,T] */
  float *res_mid; /* [N,C] after attention */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu; /* [N,4C] */
  float *res_out;        /* [N,C] block output */
} block_acts;

struct atoll_model {
  atoll_shape s;
  atoll_layout lay;
  const atoll_ops *ops;
  int max_B, max_T;
  float *params, *grads;
  /* activations */
  float *encoded; /* [N,C] */
  block_acts *acts;
  float *lnf, *lnf_mean, *lnf_rstd;
  float *logits, *xent_lse, *losses;
  int32_t *inputs, *targets;
  /* backward scratch */
  float *dres, *dC, *d3C, *d4C;
  /* state of the last forward */
  int B, T, have_targets;
  atoll_model_hooks hooks; /* all NULL unless a strategy set them */
  /* all allocations, freed together */
  void **allocs;
  int nallocs;
};

static float *alloc_f(atoll_model *m, size_t n) {
  void *p = m->ops->alloc(n * sizeof(float));
  if (p) m->allocs[m->nallocs++] = p;
  return p;
}

static block_params block_view(atoll_model *m, float *base, int l) {
  /* the 12 tensors of block l follow wte and wpe in layout order */
  const atoll_tensor *t = &m->lay.tensors[2 + 12 * l];
  block_params p;
  float **slots[12] = {&p.ln1w, &p.ln1b, &p.qkvw,   &p.qkvb, &p.attprojw, &p.attprojb,
                       &p.ln2w, &p.ln2b, &p.fcw,    &p.fcb,  &p.fcprojw,  &p.fcprojb};
  for (int i = 0; i < 12; i++) *slots[i] = base + t[i].offset;
  return p;
}

static float *tensor_at(atoll_model *m, float *base, int idx) { return base + m->lay.tensors[idx].offset; }
#define WTE 0
#define WPE 1
#define LNF_W(m) (2 + 12 * (m)->s.layers)
#define LNF_B(m) (3 + 12 * (m)->s.layers)

int atoll_model_create(atoll_model **out, const atoll_shape *s, int max_batch, int max_seq,
                       atoll_err *err) {
  *out = NULL;
  if (max_batch < 1) return atoll_fail(err, "batch: must be at least 1, got %d", max_batch);
  if (max_seq < 1 || max_seq > s->context)
    return atoll_fail(err, "seq: sequence length %d must be in [1, context=%d]", max_seq, s->context);
  atoll_model *m = calloc(1, sizeof *m);
  if (!m) return atoll_fail(err, "out of memory");
  if (atoll_layout_init(&m->lay, s, err)) {
    free(m);
    return -1;
  }
  m->s = *s;
  m->ops = atoll_ops_cpu();
  m->max_B = max_batch;
  m->max_T = max_seq;
  int L = s->layers;
  m->allocs = calloc((size_t)(32 + 16 * L), sizeof(void *));
  m->acts = calloc((size_t)L, sizeof(block_acts));
  if (!m->allocs || !m->acts) goto oom;

  size_t N = (size_t)max_batch * max_seq, C = s->dim, V = s->vocab;
  m->params = alloc_f(m, m->lay.nparams);
  m->grads = alloc_f(m, m->lay.nparams);
  m->encoded = alloc_f(m, N * C);
  float *prev = m->encoded;
  for (int l = 0; l < L; l++) {
    block_acts *a = &m->acts[l];
    a->res_in = prev;
    a->ln1 = alloc_f(m, N * C);
    a->ln1_mean = alloc_f(m, N);
    a->ln1_rstd = alloc_f(m, N);
    a->qkv = alloc_f(m, N * 3 * C);
    a->atty = alloc_f(m, N * C);
    a->lse = alloc_f(m, (size_t)max_batch * s->heads * max_seq);
    a->res_mid = alloc_f(m, N * C);
    a->ln2 = alloc_f(m, N * C);
    a->ln2_mean = alloc_f(m, N);
    a->ln2_rstd = alloc_f(m, N);
    a->fch = alloc_f(m, N * 4 * C);
    a->fch_gelu = alloc_f(m, N * 4 * C);
    a->res_out = alloc_f(m, N * C);
    prev = a->res_out;
  }
  m->lnf = alloc_f(m, N * C);
  m->lnf_mean = alloc_f(m, N);
  m->lnf_rstd = alloc_f(m, N);
  m->logits = alloc_f(m, N * V);
  m->xent_lse = alloc_f(m, N);
  m->losses = alloc_f(m, N);
  m->dres = alloc_f(m, N * C);
  m->dC = alloc_f(m, N * C);
  m->d3C = alloc_f(m, N * 3 * C);
  m->d4C = alloc_f(m, N * 4 * C);
  m->inputs = (int32_t *)alloc_f(m, N);
  m->targets = (int32_t *)alloc_f(m, N);
  for (int i = 0; i < m->nallocs; i++)
    if (!m->allocs[i]) goto oom;
  if (!m->targets) goto oom;
  *out = m;
  return 0;
oom:;
  size_t nparams = m->lay.nparams;
  atoll_model_destroy(m);
  return atoll_fail(err, "out of memory allocating a model of %zu parameters for batch %d x %d",
                    nparams, max_batch, max_seq);
}

void atoll_model_destroy(atoll_model *m) {
  if (!m) return;
  for (int i = 0; i < m->nallocs; i++) m->ops->free(m->allocs[i]);
  free(m->allocs);
  free(m->acts);
  atoll_layout_free(&m->lay);
  free(m);
}

void atoll_model_init_weights(atoll_model *m, uint64_t seed) {
  atoll_rng rng;
  atoll_rng_seed(&rng, seed);
  float resid_std = 0.02f / sqrtf(2.0f * m->s.layers);
  for (int i = 0; i < m->lay.ntensors; i++) {
    const atoll_tensor *t = &m->lay.tensors[i];
    float *p = m->params + t->offset;
    const char *n = t->name;
    size_t len = strlen(n);
    if (t->ndim == 1) {
      /* LayerNorm gains 1, biases 0 */
      float v = (len > 7 && strcmp(n + len - 7, ".weight") == 0) ? 1.0f : 0.0f;
      for (size_t k = 0; k < t->numel; k++) p[k] = v;
    } else {
      int is_resid = strstr(n, "attn.proj.weight") || strstr(n, "mlp.proj.weight");
      float std = is_resid ? resid_std : 0.02f;
      for (size_t k = 0; k < t->numel; k++) p[k] = std * atoll_rng_normal(&rng);
    }
  }
}

const atoll_layout *atoll_model_layout(const atoll_model *m) { return &m->lay; }
float *atoll_model_params(atoll_model *m) { return m->params; }
float *atoll_model_grads(atoll_model *m) { return m->grads; }
const float *atoll_model_logits(const atoll_model *m) { return m->logits; }

void atoll_model_set_hooks(atoll_model *m, const atoll_model_hooks *hooks) {
  if (hooks)
    m->hooks = *hooks;
  else
    memset(&m->hooks, 0, sizeof m->hooks);
}

static void emit(atoll_model *m, atoll_event ev, int layer) {
  if (m->hooks.event) m->hooks.event(m->hooks.ctx, ev, layer);
}

static void poll(atoll_model *m) {
  if (m->hooks.poll) m->hooks.poll(m->hooks.ctx);
}

static void grads_ready(atoll_model *m, int unit) {
  if (!m->hooks.grads_ready) return;
  size_t b, e;
  atoll_layout_unit(&m->lay, unit, &b, &e);
  m->hooks.grads_ready(m->hooks.ctx, b, e);
}

void atoll_model_zero_grads(atoll_model *m) { memset(m->grads, 0, m->lay.nparams * sizeof(float)); }

float atoll_model_forward(atoll_model *m, const int32_t *inputs, const int32_t *targets, int B,
                          int T) {
  const atoll_ops *o = m->ops;
  int C = m->s.dim, NH = m->s.heads, V = m->s.vocab, L = m->s.layers;
  int N = B * T;
  m->B = B;
  m->T = T;
  m->have_targets = targets != NULL;
  memcpy(m->inputs, inputs, sizeof(int32_t) * (size_t)N);
  if (targets) memcpy(m->targets, targets, sizeof(int32_t) * (size_t)N);

  emit(m, ATOLL_EV_FORWARD_BEGIN, -1);
  o->embed_forward(m->encoded, m->inputs, tensor_at(m, m->params, WTE), tensor_at(m, m->params, WPE),
                   B, T, C);
  for (int l = 0; l < L; l++) {
    emit(m, ATOLL_EV_BLOCK_FORWARD, l);
    block_params p = block_view(m, m->params, l);
    block_acts *a = &m->acts[l];
    o->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->res_in, p.ln1w, p.ln1b, N, C);
    o->matmul_forward(a->qkv, a->ln1, p.qkvw, p.qkvb, N, C, 3 * C, 0);
    o->attention_forward(a->atty, a->lse, a->qkv, B, T, C, NH);
    memcpy(a->res_mid, a->res_in, sizeof(float) * (size_t)N * C);
    o->matmul_forward(a->res_mid, a->atty, p.attprojw, p.attprojb, N, C, C, 1);
    o->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res_mid, p.ln2w, p.ln2b, N, C);
    o->matmul_forward(a->fch, a->ln2, p.fcw, p.fcb, N, C, 4 * C, 0);
    o->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    memcpy(a->res_out, a->res_mid, sizeof(float) * (size_t)N * C);
    o->matmul_forward(a->res_out, a->fch_gelu, p.fcprojw, p.fcprojb, N, 4 * C, C, 1);
    emit(m, ATOLL_EV_BLOCK_FORWARD_DONE, l);
  }
  emit(m, ATOLL_EV_HEAD_FORWARD, L);
  float *x = L > 0 ? m->acts[L - 1].res_out : m->encoded;
  o->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, x, tensor_at(m, m->params, LNF_W(m)),
                       tensor_at(m, m->params, LNF_B(m)), N, C);
  o->matmul_forward(m->logits, m->lnf, tensor_at(m, m->params, WTE), NULL, N, C, V, 0);
  if (!targets) return 0.0f;
  o->xent_forward(m->losses, m->xent_lse, m->logits, m->targets, N, V);
  double sum = 0.0;
  for (int n = 0; n < N; n++) sum += m->losses[n];
  return (float)(sum / N);
}

void atoll_model_backward(atoll_model *m, float loss_scale) {
  if (!m->have_targets) return;
  const atoll_ops *o = m->ops;
  int C = m->s.dim, NH = m->s.heads, V = m->s.vocab, L = m->s.layers;
  int B = m->B, T = m->T, N = B * T;
  float *P = m->params, *G = m->grads;

  /* loss -> logits (in place) -> ln_f -> residual stream */
  emit(m, ATOLL_EV_BACKWARD_BEGIN, L);
  o->xent_backward(m->logits, m->xent_lse, m->targets, loss_scale / (float)N, N, V);
  o->matmul_backward(m->dC, tensor_at(m, G, WTE), NULL, m->logits, m->lnf, tensor_at(m, P, WTE), N,
                     C, V, 0);
  poll(m);
  float *x = m->acts[L - 1].res_out;
  memset(m->dres, 0, sizeof(float) * (size_t)N * C);
  o->layernorm_backward(m->dres, tensor_at(m, G, LNF_W(m)), tensor_at(m, G, LNF_B(m)), m->dC, x,
                        tensor_at(m, P, LNF_W(m)), m->lnf_mean, m->lnf_rstd, N, C);
  grads_ready(m, L);

  for (int l = L - 1; l >= 0; l--) {
    emit(m, ATOLL_EV_BLOCK_BACKWARD, l);
    block_params p = block_view(m, P, l), g = block_view(m, G, l);
    block_acts *a = &m->acts[l];
    /* MLP half: res_out = res_mid + fcproj(gelu(fc(ln2(res_mid)))) */
    o->matmul_backward(m->d4C, g.fcprojw, g.fcprojb, m->dres, a->fch_gelu, p.fcprojw, N, 4 * C, C, 0);
    poll(m);
    o->gelu_backward(m->d4C, a->fch, m->d4C, (size_t)N * 4 * C);
    o->matmul_backward(m->dC, g.fcw, g.fcb, m->d4C, a->ln2, p.fcw, N, C, 4 * C, 0);
    poll(m);
    o->layernorm_backward(m->dres, g.ln2w, g.ln2b, m->dC, a->res_mid, p.ln2w, a->ln2_mean,
                          a->ln2_rstd, N, C);
    /* attention half: res_mid = res_in + attproj(attn(qkv(ln1(res_in)))) */
    o->matmul_backward(m->dC, g.attprojw, g.attprojb, m->dres, a->atty, p.attprojw, N, C, C, 0);
    poll(m);
    o->attention_backward(m->d3C, m->dC, a->qkv, a->atty, a->lse, B, T, C, NH);
    poll(m);
    o->matmul_backward(m->dC, g.qkvw, g.qkvb, m->d3C, a->ln1, p.qkvw, N, C, 3 * C, 0);
    poll(m);
    o->layernorm_backward(m->dres, g.ln1w, g.ln1b, m->dC, a->res_in, p.ln1w, a->ln1_mean,
                          a->ln1_rstd, N, C);
    emit(m, ATOLL_EV_BLOCK_BACKWARD_DONE, l);
    grads_ready(m, l);
  }
  o->embed_backward(tensor_at(m, G, WTE), tensor_at(m, G, WPE), m->dres, m->inputs, B, T, C);
  grads_ready(m, -1);
  emit(m, ATOLL_EV_BACKWARD_DONE, -1);
  m->have_targets = 0; /* logits were overwritten by their gradient */
}

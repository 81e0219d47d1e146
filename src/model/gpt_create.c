/* The GPT model's creation: checking the sizes, allocating every buffer (or only counting
 * its bytes, atoll_model_bytes), GPT-2 initial weights, and the accessors and seams.
 * The passes that use these buffers are in src/model/gpt.c; struct atoll_model is in
 * src/model/model_internal.h. */
#include "atoll/atoll.h"
#include "core/fatal.h"
#include "core/rng.h"
#include "model/model_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every allocation is recorded, failed ones (NULL) too, so that creation can see them. */
static float *alloc_f(atoll_model *m, size_t n) {
  size_t bytes = (n ? n : 1) * sizeof(float);
  if (m->count_only) {
    m->counted += bytes;
    return (float *)m; /* never dereferenced: a counting model runs no pass */
  }
  if (m->nallocs == m->allocs_cap) { /* grown as needed: the buffers' count varies by arch and precision */
    void **grown = realloc(m->allocs, sizeof(void *) * 2 * (size_t)m->allocs_cap);
    if (!grown) {
      m->alloc_failed = 1;
      return NULL;
    }
    m->allocs = grown;
    m->allocs_cap *= 2;
  }
  void *p = m->ops->alloc(bytes);
  m->allocs[m->nallocs++] = p;
  return p;
}

/* n bf16 values, in a float allocation (its alignment) */
static uint16_t *alloc_bf16(atoll_model *m, size_t n) { return (uint16_t *)alloc_f(m, (n + 1) / 2); }

void atoll_model_set_ops(atoll_model *m, const atoll_ops *ops) {
  /* the buffers stay where they are: the new kernels must read the same memory */
  if (ops->alloc != m->ops->alloc)
    atoll_fatal("atoll_model_set_ops: the %s kernels cannot use the %s table's buffers", ops->name, m->ops->name);
  /* a kept model has no fp32 copies of the products' inputs (model_internal.h) */
  if (m->kept && !ops->matmul_forward_bf16)
    atoll_fatal("atoll_model_set_ops: the model keeps bf16 inputs, which the %s kernels cannot read", ops->name);
  m->ops = ops;
}

const atoll_ops *atoll_model_ops(const atoll_model *m) { return m->ops; }

void atoll_model_keep_weights(atoll_model *m, int on) {
  if (!on && m->params_bf16) { /* hand the mapping back: ZeRO-3 keeps no full-size buffer of weights */
    for (int i = 0; i < m->nallocs; i++)
      if (m->allocs[i] == (void *)m->params_bf16) {
        m->ops->free(m->allocs[i]);
        m->allocs[i] = NULL;
      }
    m->params_bf16 = NULL;
  }
  m->keep_weights = on && m->params_bf16;
}

int atoll_model_create(atoll_model **out, const atoll_shape *s, int max_batch, int max_seq,
                       atoll_err *err) {
  atoll_part whole = atoll_part_whole();
  return atoll_model_create_part(out, s, &whole, max_batch, max_seq, 1, err);
}

static int alloc_slot(atoll_model *m, slot_acts *sl) {
  size_t N = (size_t)m->max_B * m->max_T, C = m->s.dim, Cl = m->Cl;
  size_t Nl = m->sp ? (N + m->tp - 1) / m->tp : N; /* this rank's rows of the residual stream */
  sl->acts = calloc((size_t)m->nblocks, sizeof(block_acts));
  if (!sl->acts) return -1;
  sl->encoded = alloc_f(m, Nl * C);
  for (int c = 0; c < m->lay.part.chunks; c++) {
    sl->chunk_in[c] = c == 0 ? sl->encoded : alloc_f(m, Nl * C);
    for (int l = m->lay.chunk_begin[c]; l < m->lay.chunk_end[c]; l++)
      sl->acts[m->lay.block_of[l]].res_in = l == m->lay.chunk_begin[c] ? sl->chunk_in[c] : NULL;
  }
  float *prev = sl->encoded;
  for (int i = 0; i < m->nblocks; i++) {
    block_acts *a = &sl->acts[i];
    a->res_in = a->res_in ? a->res_in : prev;
    if (m->llama) {
      size_t KW = (size_t)m->KVl * m->hs, Hl = (size_t)m->Hl, QWl = (size_t)m->QWl;
      if (m->kept) { /* tp = 1 */
        a->ln1_bf16 = alloc_bf16(m, N * C);
        a->atty_bf16 = alloc_bf16(m, N * QWl);
        a->ln2_bf16 = alloc_bf16(m, N * C);
        a->fch_gelu_bf16 = alloc_bf16(m, N * Hl);
      } else {
        a->ln1 = alloc_f(m, N * C);
        a->ln2 = alloc_f(m, N * C);
        a->fch_gelu = alloc_f(m, N * Hl);
      }
      a->ln1_rstd = alloc_f(m, Nl);
      a->q = alloc_f(m, N * QWl);
      a->k = alloc_f(m, N * KW);
      a->v = alloc_f(m, N * KW);
      a->atty = alloc_f(m, N * QWl);
      a->lse = alloc_f(m, (size_t)m->max_B * m->NHl * m->max_T);
      a->res_mid = alloc_f(m, Nl * C);
      a->ln2_rstd = alloc_f(m, Nl);
      a->fch = alloc_f(m, N * Hl);
      a->up = alloc_f(m, N * Hl);
      a->res_out = alloc_f(m, Nl * C);
      prev = a->res_out;
      continue;
    }
    if (m->kept) { /* tp = 1: N = Nl, Cl = C */
      a->ln1_bf16 = alloc_bf16(m, N * C);
      a->atty_bf16 = alloc_bf16(m, N * C);
      a->ln2_bf16 = alloc_bf16(m, N * C);
      a->fch_gelu_bf16 = alloc_bf16(m, N * 4 * C);
    } else {
      a->ln1 = alloc_f(m, N * C);
      a->ln2 = alloc_f(m, N * C);
      a->fch_gelu = alloc_f(m, N * 4 * Cl);
    }
    a->ln1_mean = alloc_f(m, Nl);
    a->ln1_rstd = alloc_f(m, Nl);
    a->qkv = alloc_f(m, N * 3 * Cl);
    a->atty = alloc_f(m, N * Cl);
    a->lse = alloc_f(m, (size_t)m->max_B * m->NHl * m->max_T);
    a->res_mid = alloc_f(m, Nl * C);
    a->ln2_mean = alloc_f(m, Nl);
    a->ln2_rstd = alloc_f(m, Nl);
    a->fch = alloc_f(m, N * 4 * Cl);
    a->res_out = alloc_f(m, Nl * C);
    prev = a->res_out;
  }
  if (m->lay.last_stage) {
    if (m->kept)
      sl->lnf_bf16 = alloc_bf16(m, N * C);
    else
      sl->lnf = alloc_f(m, N * C);
    sl->lnf_mean = alloc_f(m, Nl);
    sl->lnf_rstd = alloc_f(m, Nl);
    sl->logits = alloc_f(m, N * m->Vl);
    sl->xent_lse = alloc_f(m, N);
    sl->losses = alloc_f(m, N);
  }
  sl->inputs = (int32_t *)alloc_f(m, N);
  sl->targets = (int32_t *)alloc_f(m, N);
  return 0;
}

/* Checks the sizes and fills m's fields: what creating and counting share. */
static int model_begin(atoll_model *m, const atoll_shape *s, const atoll_part *part, int max_batch, int max_seq,
                       int slots, const atoll_ops *ops, atoll_err *err) {
  if (max_batch < 1) return atoll_fail(err, "batch: must be at least 1, got %d", max_batch);
  if (max_seq < 1 || max_seq > s->context)
    return atoll_fail(err, "seq: sequence length %d must be in [1, context=%d]", max_seq, s->context);
  if (slots < 1) return atoll_fail(err, "micro-batches in flight: must be at least 1, got %d", slots);
  if ((int64_t)max_batch * max_seq > INT_MAX) /* the ops count a micro-batch's rows in int */
    return atoll_fail(err, "batch x seq: %d x %d = %" PRId64 " tokens per micro-batch, more than "
                      "2^31 - 1", max_batch, max_seq, (int64_t)max_batch * max_seq);
  if (atoll_layout_init_part(&m->lay, s, part, err)) return -1;
  m->s = *s;
  m->ops = ops ? ops : atoll_ops_cpu();
  if (m->ops->device && (part->tp_size > 1 || part->stages > 1))
    return atoll_fail(err, "device %s: tensor and pipeline parallelism run on the CPU only so far", m->ops->name);
  m->max_B = max_batch;
  m->max_T = max_seq;
  m->nslots = slots;
  m->nblocks = m->lay.nblocks;
  m->tp = part->tp_size;
  m->tp_rank = part->tp_rank;
  m->Cl = s->dim / m->tp;
  m->NHl = s->heads / m->tp;
  m->Vl = s->vocab / m->tp;
  m->sp = m->tp > 1 && part->sequence_parallel;
  m->llama = atoll_shape_llama(s);
  m->hs = atoll_shape_head_dim(s);
  m->QWl = m->NHl * m->hs;
  m->KVl = atoll_shape_kv_heads(s) / m->tp;
  m->Hl = atoll_shape_hidden(s) / m->tp;
  m->eps = atoll_shape_norm_eps(s);
  if (m->llama) {
    m->rope_freq = malloc(sizeof(double) * (size_t)(m->hs / 2 + 1));
    if (!m->rope_freq) return atoll_fail(err, "out of memory for the rotary frequencies");
    atoll_shape_rope_freqs(s, m->rope_freq);
  }
  m->kept = m->ops->matmul_forward_bf16 && m->tp == 1;
  m->keep_weights = 1;
  m->slots = calloc((size_t)slots, sizeof(slot_acts));
  return 0;
}

/* Every buffer of the model, in one place (creating and atoll_model_bytes). */
static int alloc_buffers(atoll_model *m) {
  size_t N = (size_t)m->max_B * m->max_T, C = m->s.dim;
  m->params = alloc_f(m, m->lay.nparams);
  m->grads = alloc_f(m, m->lay.nparams);
  if (m->kept) { /* pages untouched until used: weight_scratch costs nothing while weights are kept */
    size_t largest = 0;
    for (int i = 0; i < m->lay.ntensors; i++)
      if (m->lay.tensors[i].numel > largest) largest = m->lay.tensors[i].numel;
    m->params_bf16 = alloc_bf16(m, m->lay.nparams);
    m->weight_scratch = alloc_bf16(m, largest);
    m->d4C_bf16 = alloc_bf16(m, (size_t)m->max_B * m->max_T * (m->llama ? 2 * (size_t)m->Hl : 4 * (size_t)m->s.dim));
    if (m->lay.last_stage) m->dlogits_bf16 = alloc_bf16(m, N * (size_t)m->Vl);
  }
  for (int i = 0; i < m->nslots; i++)
    if (alloc_slot(m, &m->slots[i])) return -1;
  m->dres = alloc_f(m, N * C);
  /* llama: dC also holds the attention output's gradient [N, QWl]; d3C dq, dk and dv */
  size_t qw = m->llama ? (size_t)m->QWl : 0, qkv = m->llama ? qw + 2 * (size_t)m->KVl * m->hs : 3 * (size_t)m->Cl;
  m->dC = alloc_f(m, N * (qw > C ? qw : C));
  m->d3C = alloc_f(m, N * qkv);
  m->d4C = alloc_f(m, m->llama ? N * 2 * m->Hl : N * 4 * m->Cl); /* llama: dgate, dup */
  if (m->sp) m->dfull = alloc_f(m, N * C);
  m->xent_mine = alloc_f(m, 2 * N);
  m->xent_all = alloc_f(m, 2 * N * m->tp);
  if (!m->count_only) {
    m->host_losses = malloc(N * sizeof(float));
    if (!m->host_losses) return -1;
  }
  if (m->alloc_failed) return -1;
  for (int i = 0; i < m->nallocs; i++)
    if (!m->allocs[i]) return -1;
  return 0;
}

int atoll_model_create_part(atoll_model **out, const atoll_shape *s, const atoll_part *part,
                            int max_batch, int max_seq, int slots, atoll_err *err) {
  return atoll_model_create_on(out, s, part, max_batch, max_seq, slots, NULL, err);
}

int atoll_model_create_on(atoll_model **out, const atoll_shape *s, const atoll_part *part, int max_batch,
                          int max_seq, int slots, const atoll_ops *ops, atoll_err *err) {
  *out = NULL;
  atoll_model *m = calloc(1, sizeof *m);
  if (!m) return atoll_fail(err, "out of memory");
  if (model_begin(m, s, part, max_batch, max_seq, slots, ops, err)) {
    atoll_model_destroy(m);
    return -1;
  }
  m->allocs_cap = 32 + slots * (16 + part->chunks + 16 * m->nblocks);
  m->allocs = calloc((size_t)m->allocs_cap, sizeof(void *));
  if (!m->allocs || !m->slots || alloc_buffers(m)) {
    size_t nparams = m->lay.nparams;
    atoll_model_destroy(m);
    return atoll_fail(err, "out of memory allocating a model of %zu parameters for batch %d x %d",
                      nparams, max_batch, max_seq);
  }
  *out = m;
  return 0;
}

int atoll_model_bytes(const atoll_shape *s, const atoll_part *part, int max_batch, int max_seq, int slots,
                      const atoll_ops *ops, atoll_model_mem *out, atoll_err *err) {
  memset(out, 0, sizeof *out);
  atoll_model *m = calloc(1, sizeof *m);
  if (!m) return atoll_fail(err, "out of memory");
  m->count_only = 1;
  int rc = model_begin(m, s, part, max_batch, max_seq, slots, ops, err);
  if (rc == 0 && (!m->slots || alloc_buffers(m))) rc = atoll_fail(err, "out of memory estimating the model's size");
  if (rc == 0) {
    out->weights = m->lay.nparams * sizeof(float);
    out->grads = out->weights;
    /* params_bf16 as alloc_bf16 counts it: (n + 1) / 2 floats */
    out->weights_bf16 = m->kept ? (m->lay.nparams + 1) / 2 * sizeof(float) : 0;
    out->acts = m->counted - out->weights - out->grads - out->weights_bf16;
  }
  atoll_model_destroy(m);
  return rc;
}

void atoll_model_destroy(atoll_model *m) {
  if (!m) return;
  for (int i = 0; i < m->nallocs; i++) m->ops->free(m->allocs[i]);
  free(m->allocs);
  free(m->host_losses);
  if (m->slots)
    for (int i = 0; i < m->nslots; i++) free(m->slots[i].acts);
  free(m->slots);
  free(m->rope_freq);
  atoll_layout_free(&m->lay);
  free(m);
}

/* Initial values of one whole tensor: what every part cuts its piece from. */
typedef struct {
  atoll_model *m;
  const atoll_layout *whole;
  float *buf; /* whole-model buffer */
} init_ctx;

static void copy_run(void *ctx, const atoll_tensor *t, size_t part_off, size_t whole_off, size_t n) {
  (void)t;
  init_ctx *c = ctx;
  c->m->ops->to_device(c->m->params + part_off, c->buf + whole_off, n * sizeof(float));
}

/* GPT-2 initialisation of the whole model's buffer (one RNG stream in layout order). */
static void init_whole(const atoll_layout *lay, float *p0, uint64_t seed) {
  atoll_rng rng;
  atoll_rng_seed(&rng, seed);
  float resid_std = 0.02f / sqrtf(2.0f * lay->shape.layers);
  for (int i = 0; i < lay->ntensors; i++) {
    const atoll_tensor *t = &lay->tensors[i];
    float *p = p0 + t->offset;
    const char *n = t->name;
    size_t len = strlen(n);
    if (t->ndim == 1) {
      /* LayerNorm gains 1, biases 0 */
      float v = (len > 7 && strcmp(n + len - 7, ".weight") == 0) ? 1.0f : 0.0f;
      for (size_t k = 0; k < t->numel; k++) p[k] = v;
    } else {
      int is_resid = strstr(n, "attn.proj.weight") || strstr(n, "mlp.proj.weight") || strstr(n, "attn.o.weight") ||
                     strstr(n, "mlp.down.weight");
      float std = is_resid ? resid_std : 0.02f;
      for (size_t k = 0; k < t->numel; k++) p[k] = std * atoll_rng_normal(&rng);
    }
  }
}

int atoll_model_init_weights(atoll_model *m, uint64_t seed) {
  const atoll_part *p = &m->lay.part;
  if (p->tp_size == 1 && p->stages == 1 && p->chunks == 1 && !m->ops->device) {
    init_whole(&m->lay, m->params, seed);
    return 0;
  }
  /* a part takes its piece of the whole model's initialisation, so that every layout
   * starts from the same weights (a device model: all of it, copied in) */
  atoll_layout whole;
  atoll_err err;
  if (atoll_layout_init(&whole, &m->s, &err)) return -1;
  float *buf = malloc(whole.nparams * sizeof(float));
  if (!buf) {
    atoll_layout_free(&whole);
    return -1;
  }
  init_whole(&whole, buf, seed);
  init_ctx c = {m, &whole, buf};
  atoll_layout_runs(&m->lay, &whole, copy_run, &c);
  free(buf);
  atoll_layout_free(&whole);
  return 0;
}

const atoll_layout *atoll_model_layout(const atoll_model *m) { return &m->lay; }
float *atoll_model_params(atoll_model *m) { return m->params; }
float *atoll_model_grads(atoll_model *m) { return m->grads; }
const float *atoll_model_logits(const atoll_model *m) { return m->slots[0].logits; }
float *atoll_model_slot_input(atoll_model *m, int slot, int chunk) { return m->slots[slot].chunk_in[chunk]; }
const float *atoll_model_slot_output(const atoll_model *m, int slot, int chunk) {
  return m->slots[slot].acts[m->lay.block_of[m->lay.chunk_end[chunk] - 1]].res_out;
}
const float *atoll_model_input_grad(const atoll_model *m) { return m->dres; }

void atoll_model_set_hooks(atoll_model *m, const atoll_model_hooks *hooks) {
  if (hooks)
    m->hooks = *hooks;
  else
    memset(&m->hooks, 0, sizeof m->hooks);
}

void atoll_model_set_tp(atoll_model *m, const atoll_model_tp *tp) {
  if (tp)
    m->tpc = *tp;
  else
    memset(&m->tpc, 0, sizeof m->tpc);
}

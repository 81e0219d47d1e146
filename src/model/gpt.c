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
 * are fused into the projections (sgemm with beta = 1 on a copy of the residual). With
 * the bf16 CPU table and tp = 1 (m->kept) the products' inputs are kept in bf16 only:
 * ln_1, ln_2 and GELU outputs written rounded, the attention output in both (its
 * backward reads the fp32 one).
 *
 * Model parallelism (the model's part, atoll_layout_init_part):
 *   pipeline  a part holds the blocks of its chunks (one contiguous run of blocks per
 *             chunk; several chunks for the interleaved schedule); each chunk runs as
 *             its own pass: one that does not start the model takes its input
 *             activations [B*T, C] in the slot's chunk input buffer, one that does not
 *             end it hands its output and, in backward, takes the gradient of that
 *             output and leaves the gradient of its input. Up to `slots` micro-batches
 *             can be between their forward and backward.
 *   tensor    (Megatron-LM) each rank holds tp-th of the heads and MLP width: qkv and
 *             fc are column-parallel, the projections row-parallel, so a block half
 *             needs one all-reduce of its output in forward (rank 0 adds the residual
 *             and bias, the others only their partial product) and one of its input
 *             gradient in backward. The embedding and LM head are cut by vocabulary:
 *             the lookup is all-reduced, and the cross-entropy combines the ranks'
 *             log-sum-exps (one all-gather of 2 floats per token) so that full logits
 *             never exist on one rank. Replicated tensors (LayerNorms, wpe, the
 *             projections' biases) get identical gradients on every rank.
 *   sequence  (Korthikanti et al. 2022) with tensor parallelism, the residual stream
 *             and LayerNorms are cut by tokens: rank r holds rows [r n, (r+1) n) of
 *             the micro-batch's B*T rows, n = B*T/tp. A LayerNorm's output is
 *             all-gathered before the column-parallel product; a row-parallel
 *             product's partial output is reduce-scattered (rank r's chunk carries its
 *             residual and bias); in backward the output gradient is all-gathered
 *             and the input gradient reduce-scattered. The same bytes as the two
 *             all-reduces, a tp-th of the residual activations, and pipeline
 *             messages a tp-th the size; LayerNorm gradients are then per-rank
 *             partial sums (atoll_model_grad_is_partial), summed by the caller. The
 *             gathered LayerNorm outputs are kept for backward (not re-gathered).
 *
 * Creating the model (checking sizes, allocating or counting its buffers, initial weights,
 * accessors) is in src/model/gpt_create.c; struct atoll_model is in
 * src/model/model_internal.h. */
#include "atoll/atoll.h"
#include "model/model_internal.h"

#include <math.h>
#include <string.h>

static block_params block_view(atoll_model *m, float *base, int l) {
  /* the 12 tensors of block l, in layout order */
  const atoll_tensor *t = &m->lay.tensors[m->lay.t_block0 + m->lay.per_block * m->lay.block_of[l]];
  block_params p;
  float **slots[12] = {&p.ln1w, &p.ln1b, &p.qkvw,   &p.qkvb, &p.attprojw, &p.attprojb,
                       &p.ln2w, &p.ln2b, &p.fcw,    &p.fcb,  &p.fcprojw,  &p.fcprojb};
  for (int i = 0; i < 12; i++) *slots[i] = base + t[i].offset;
  return p;
}

static float *tensor_at(atoll_model *m, float *base, int idx) { return base + m->lay.tensors[idx].offset; }


void atoll_model_emit(atoll_model *m, atoll_event ev, int layer) {
  if (m->hooks.event) m->hooks.event(m->hooks.ctx, ev, layer);
}

void atoll_model_poll(atoll_model *m) {
  if (m->hooks.poll) m->hooks.poll(m->hooks.ctx);
}

static void grads_ready(atoll_model *m, int unit) {
  if (!m->hooks.grads_ready) return;
  size_t b, e;
  atoll_layout_unit(&m->lay, unit, &b, &e);
  if (e > b) m->hooks.grads_ready(m->hooks.ctx, b, e);
}

/* Sum over the tensor-parallel group (identical result on every member). */
static void tp_allreduce(atoll_model *m, float *buf, size_t n) {
  if (m->tp > 1) m->tpc.allreduce(m->tpc.ctx, buf, n);
}

void atoll_model_zero_grads(atoll_model *m) { m->ops->zero(m->grads, m->lay.nparams * sizeof(float)); }

/* ------------------------------------------- vocabulary-parallel pieces --- */
/* These and the sequence-parallel pieces below loop over buffers on the host: tensor
 * parallelism runs on CPU memory only (atoll_model_create_on refuses it on a device). */

/* out = wte[tok] (if this rank holds the token's row, else 0) + wpe[t] (rank 0),
 * to be summed over the group (all-reduced here, or reduce-scattered by the caller):
 * the same single addition as without tensor parallelism. */
static void embed_forward_tp(atoll_model *m, float *out, const int32_t *tok, const float *wte,
                             const float *wpe, int B, int T, int allreduce) {
  int C = m->s.dim, v0 = m->tp_rank * m->Vl;
  for (size_t n = 0, rows = (size_t)B * (size_t)T; n < rows; n++) {
    float *o = out + (size_t)n * C;
    int v = tok[n] - v0, t = (int)(n % (size_t)T);
    int mine = v >= 0 && v < m->Vl;
    for (int c = 0; c < C; c++) {
      float x = mine ? wte[(size_t)v * C + c] : 0.0f;
      o[c] = m->tp_rank == 0 && wpe ? x + wpe[(size_t)t * C + c] : x; /* llama: no wpe */
    }
  }
  if (allreduce) tp_allreduce(m, out, (size_t)B * T * C);
}

static void embed_backward_tp(atoll_model *m, float *dwte, float *dwpe, const float *dout,
                              const int32_t *tok, int B, int T) {
  int C = m->s.dim, v0 = m->tp_rank * m->Vl;
  for (size_t n = 0, rows = (size_t)B * (size_t)T; n < rows; n++) {
    const float *d = dout + (size_t)n * C;
    int v = tok[n] - v0, t = (int)(n % (size_t)T);
    if (v >= 0 && v < m->Vl)
      for (int c = 0; c < C; c++) dwte[(size_t)v * C + c] += d[c];
    if (dwpe)
      for (int c = 0; c < C; c++) dwpe[(size_t)t * C + c] += d[c];
  }
}

/* Cross-entropy over logits cut by vocabulary: every rank sends (its log-sum-exp,
 * its logit of the target or 0) per token; lse = log sum_r exp(lse_r). */
static void xent_forward_tp(atoll_model *m, slot_acts *sl, int N) {
  int Vl = m->Vl, v0 = m->tp_rank * Vl, R = m->tp;
  float *mine = m->xent_mine;
  for (int n = 0; n < N; n++) {
    const float *z = sl->logits + (size_t)n * Vl;
    float mx = -INFINITY;
    for (int v = 0; v < Vl; v++) mx = z[v] > mx ? z[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < Vl; v++) sum += exp((double)z[v] - mx);
    int t = sl->targets[n] - v0;
    mine[n] = (float)(mx + log(sum));
    mine[N + n] = t >= 0 && t < Vl ? z[t] : 0.0f;
  }
  m->tpc.allgather(m->tpc.ctx, mine, m->xent_all, 2 * (size_t)N);
  for (int n = 0; n < N; n++) {
    float mx = -INFINITY, target = 0.0f;
    for (int r = 0; r < R; r++) {
      const float *a = m->xent_all + (size_t)r * 2 * N;
      mx = a[n] > mx ? a[n] : mx;
      target += a[N + n]; /* one rank holds it; the others add 0 */
    }
    double sum = 0.0;
    for (int r = 0; r < R; r++) sum += exp((double)m->xent_all[(size_t)r * 2 * N + n] - mx);
    sl->xent_lse[n] = (float)(mx + log(sum));
    sl->losses[n] = sl->xent_lse[n] - target;
  }
}

static void xent_backward_tp(atoll_model *m, slot_acts *sl, float dloss, int N) {
  int Vl = m->Vl, v0 = m->tp_rank * Vl;
  for (int n = 0; n < N; n++) {
    float *z = sl->logits + (size_t)n * Vl, l = sl->xent_lse[n];
    for (int v = 0; v < Vl; v++) z[v] = expf(z[v] - l) * dloss;
    int t = sl->targets[n] - v0;
    if (t >= 0 && t < Vl) z[t] -= dloss;
  }
}

/* ------------------------------------------------ sequence-parallel rows --- */

/* Rows of a micro-batch. atoll_model_create_part refused max_batch x max_seq above
 * INT_MAX, so for B <= max_batch and T <= max_seq the product fits the ops' int rows. */
static int micro_rows(int B, int T) { return (int)((int64_t)B * T); }

int atoll_model_local_rows(const atoll_model *m, int n) { return m->sp ? n / m->tp : n; }

int atoll_model_grad_is_partial(const atoll_model *m, const atoll_tensor *t) {
  return m->sp && (strstr(t->name, "ln_") != NULL || strstr(t->name, "norm") != NULL);
}

/* The first of this rank's rows in a micro-batch of N rows. */
static size_t own_row(const atoll_model *m, int N) { return m->sp ? (size_t)m->tp_rank * (N / m->tp) : 0; }

/* full [N,C] holds this rank's rows at their place; afterwards every rank's. */
void atoll_model_gather_rows(atoll_model *m, float *full, int N) {
  if (m->sp) m->tpc.allgather_chunks(m->tpc.ctx, full, (size_t)N * m->s.dim);
}

/* out (this rank's rows) = resid + bias + sum over the group of x @ w^T, for a
 * row-parallel product (x [N, K] this rank's columns). Without sequence parallelism
 * "this rank's rows" are all N (rank 0 adds residual and bias; tp = 1: the fused
 * kernel alone). */
void atoll_model_row_parallel_out(atoll_model *m, float *out, const float *resid, const float *x,
                             const float *w, const float *bias, int N, int K) {
  const atoll_ops *o = m->ops;
  int C = m->s.dim;
  size_t NC = (size_t)N * C;
  if (!m->sp) {
    int tp0 = m->tp_rank == 0;
    if (tp0)
      o->copy(out, resid, sizeof(float) * NC);
    else
      o->zero(out, sizeof(float) * NC);
    o->matmul_forward(out, x, w, tp0 ? bias : NULL, N, K, C, 1);
    tp_allreduce(m, out, NC);
    return;
  }
  size_t n = (size_t)(N / m->tp), r0 = own_row(m, N);
  float *full = m->dC; /* backward scratch, free during forward */
  memset(full, 0, sizeof(float) * NC);
  memcpy(full + r0 * C, resid, sizeof(float) * n * C);
  o->matmul_forward(full, x, w, NULL, N, K, C, 1);
  if (bias)
    for (size_t i = r0; i < r0 + n; i++)
      for (int c = 0; c < C; c++) full[i * C + c] += bias[c];
  m->tpc.reduce_scatter(m->tpc.ctx, full, NC);
  memcpy(out, full + r0 * C, sizeof(float) * n * C);
}

/* The output gradient of a row-parallel product, all rows: dres itself, or gathered. */
const float *atoll_model_full_dout(atoll_model *m, const float *dres, int N) {
  if (!m->sp) return dres;
  size_t n = (size_t)(N / m->tp);
  memcpy(m->dfull + own_row(m, N) * m->s.dim, dres, sizeof(float) * n * m->s.dim);
  atoll_model_gather_rows(m, m->dfull, N);
  return m->dfull;
}

/* The input gradient of a column-parallel product, partial on every rank in dC [N,C]:
 * summed over the group; returns this rank's rows of it. */
const float *atoll_model_sum_input_grad(atoll_model *m, int N) {
  size_t NC = (size_t)N * m->s.dim;
  if (!m->sp) {
    tp_allreduce(m, m->dC, NC);
    return m->dC;
  }
  m->tpc.reduce_scatter(m->tpc.ctx, m->dC, NC);
  return m->dC + own_row(m, N) * m->s.dim;
}

/* ---------------------------------------------- bf16 inputs kept (m->kept) --- */

/* With the bf16 CPU table (tp = 1, model_internal.h) each product's input is rounded
 * to bf16 once: the norms, GELU and SwiGLU write it so, the attention output is
 * rounded after it, each weight matrix when forward uses it, and backward reads the
 * same copies instead of rounding again. The bits equal those of the fp32-input
 * products; test_bf16_kept checks it. */

/* w's bf16 copy: rounded now (forward) or as forward rounded it (backward), in
 * params_bf16; without kept weights rounded now into weight_scratch either way. */
static const uint16_t *weight_bf16(atoll_model *m, const float *w, size_t n, int forward) {
  if (!m->keep_weights) {
    m->ops->round_bf16(m->weight_scratch, w, n);
    return m->weight_scratch;
  }
  uint16_t *wb = m->params_bf16 + (w - m->params);
  if (forward) m->ops->round_bf16(wb, w, n);
  return wb;
}

void atoll_model_product_forward(atoll_model *m, float *out, const float *x, const uint16_t *xb, const float *w,
                                 const float *bias, int N, int C, int OC, int accumulate) {
  if (m->kept)
    m->ops->matmul_forward_bf16(out, xb, weight_bf16(m, w, (size_t)OC * C, 1), bias, N, C, OC, accumulate);
  else
    m->ops->matmul_forward(out, x, w, bias, N, C, OC, accumulate);
}

void atoll_model_product_backward(atoll_model *m, float *dx, float *dw, float *dbias, const float *dout,
                                  const float *x, const uint16_t *xb, const float *w, int N, int C, int OC,
                                  int accumulate_dx) {
  if (m->kept)
    m->ops->matmul_backward_bf16(dx, dw, dbias, dout, xb, weight_bf16(m, w, (size_t)OC * C, 0), N, C, OC,
                                 accumulate_dx);
  else
    m->ops->matmul_backward(dx, dw, dbias, dout, x, w, N, C, OC, accumulate_dx);
}

void atoll_model_product_backward_rounded(atoll_model *m, float *dx, float *dw, const uint16_t *doutb,
                                          const uint16_t *xb, const float *w, int N, int C, int OC, int accumulate_dx) {
  m->ops->matmul_backward_rounded(dx, dw, doutb, xb, weight_bf16(m, w, (size_t)OC * C, 0), N, C, OC, accumulate_dx);
}

void atoll_model_block_out(atoll_model *m, float *out, const float *resid, const float *x, const uint16_t *xb,
                           const float *w, const float *bias, int N, int K) {
  if (!m->kept) {
    atoll_model_row_parallel_out(m, out, resid, x, w, bias, N, K);
    return;
  }
  m->ops->copy(out, resid, sizeof(float) * (size_t)N * m->s.dim);
  atoll_model_product_forward(m, out, NULL, xb, w, bias, N, K, m->s.dim, 1);
}

void atoll_model_norm_forward(atoll_model *m, float *out, uint16_t *outb, float *mean, float *rstd, const float *x,
                              const float *w, const float *b, int N) {
  const atoll_ops *o = m->ops;
  int C = m->s.dim, Nl = atoll_model_local_rows(m, N);
  if (m->kept) {
    if (m->llama)
      o->rmsnorm_forward_bf16(outb, rstd, x, w, N, C, m->eps);
    else
      o->layernorm_forward_bf16(outb, mean, rstd, x, w, b, N, C);
    return;
  }
  float *mine = out + own_row(m, N) * C;
  if (m->llama)
    o->rmsnorm_forward(mine, rstd, x, w, Nl, C, m->eps);
  else
    o->layernorm_forward(mine, mean, rstd, x, w, b, Nl, C);
  atoll_model_gather_rows(m, out, N);
}

/* ---------------------------------------------------------------- passes --- */

float atoll_model_forward(atoll_model *m, const int32_t *inputs, const int32_t *targets, int B,
                          int T) {
  return atoll_model_forward_slot(m, 0, 0, inputs, targets, B, T);
}

float atoll_model_forward_slot(atoll_model *m, int slot, int chunk, const int32_t *inputs,
                               const int32_t *targets, int B, int T) {
  const atoll_ops *o = m->ops;
  const atoll_layout *lay = &m->lay;
  int C = m->s.dim, Cl = m->Cl, NHl = m->NHl, Vl = m->Vl;
  int N = micro_rows(B, T), Nl = atoll_model_local_rows(m, N);
  size_t r0 = own_row(m, N) * C; /* this rank's rows in a full [N,C] buffer */
  slot_acts *sl = &m->slots[slot];
  int starts = lay->first_stage && chunk == 0, ends = lay->last_stage && chunk == lay->part.chunks - 1;
  sl->B = B;
  sl->T = T;
  if (ends) sl->have_targets = targets != NULL;
  if (inputs && starts) o->to_device(sl->inputs, inputs, sizeof(int32_t) * (size_t)N);
  if (ends && targets) o->to_device(sl->targets, targets, sizeof(int32_t) * (size_t)N);

  atoll_model_emit(m, ATOLL_EV_FORWARD_BEGIN, lay->chunk_begin[chunk]);
  if (starts) {
    float *wte = tensor_at(m, m->params, lay->t_wte), *wpe = lay->t_wpe >= 0 ? tensor_at(m, m->params, lay->t_wpe) : NULL;
    if (m->sp) {
      embed_forward_tp(m, m->dC, sl->inputs, wte, wpe, B, T, 0);
      m->tpc.reduce_scatter(m->tpc.ctx, m->dC, (size_t)N * C);
      memcpy(sl->encoded, m->dC + r0, sizeof(float) * (size_t)Nl * C);
    } else if (m->tp > 1) {
      embed_forward_tp(m, sl->encoded, sl->inputs, wte, wpe, B, T, 1);
    } else { /* wpe NULL for llama */
      o->embed_forward(sl->encoded, sl->inputs, wte, wpe, B, T, C);
    }
  }
  for (int l = lay->chunk_begin[chunk]; l < lay->chunk_end[chunk]; l++) {
    int i = lay->block_of[l];
    atoll_model_emit(m, ATOLL_EV_BLOCK_FORWARD, l);
    if (m->llama) {
      atoll_llama_block_forward(m, &sl->acts[i], l, B, T);
      atoll_model_emit(m, ATOLL_EV_BLOCK_FORWARD_DONE, l);
      continue;
    }
    block_params p = block_view(m, m->params, l);
    block_acts *a = &sl->acts[i];
    atoll_model_norm_forward(m, a->ln1, a->ln1_bf16, a->ln1_mean, a->ln1_rstd, a->res_in, p.ln1w, p.ln1b, N);
    atoll_model_product_forward(m, a->qkv, a->ln1, a->ln1_bf16, p.qkvw, p.qkvb, N, C, 3 * Cl, 0);
    o->attention_forward(a->atty, a->lse, a->qkv, B, T, Cl, NHl);
    if (m->kept) o->round_bf16(a->atty_bf16, a->atty, (size_t)N * Cl);
    atoll_model_block_out(m, a->res_mid, a->res_in, a->atty, a->atty_bf16, p.attprojw, p.attprojb, N, Cl);
    atoll_model_norm_forward(m, a->ln2, a->ln2_bf16, a->ln2_mean, a->ln2_rstd, a->res_mid, p.ln2w, p.ln2b, N);
    atoll_model_product_forward(m, a->fch, a->ln2, a->ln2_bf16, p.fcw, p.fcb, N, C, 4 * Cl, 0);
    if (m->kept)
      o->gelu_forward_bf16(a->fch_gelu_bf16, a->fch, (size_t)N * 4 * Cl);
    else
      o->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * Cl);
    atoll_model_block_out(m, a->res_out, a->res_mid, a->fch_gelu, a->fch_gelu_bf16, p.fcprojw, p.fcprojb, N, 4 * Cl);
    atoll_model_emit(m, ATOLL_EV_BLOCK_FORWARD_DONE, l);
  }
  if (!ends) return 0.0f;
  atoll_model_emit(m, ATOLL_EV_HEAD_FORWARD, m->s.layers);
  float *x = sl->acts[m->nblocks - 1].res_out;
  float *lnfw = tensor_at(m, m->params, lay->t_lnf), *lnfb = m->llama ? NULL : tensor_at(m, m->params, lay->t_lnf + 1);
  atoll_model_norm_forward(m, sl->lnf, sl->lnf_bf16, sl->lnf_mean, sl->lnf_rstd, x, lnfw, lnfb, N);
  atoll_model_product_forward(m, sl->logits, sl->lnf, sl->lnf_bf16, tensor_at(m, m->params, lay->t_head), NULL, N, C,
                              Vl, 0);
  if (!sl->have_targets) return 0.0f;
  if (m->tp > 1)
    xent_forward_tp(m, sl, N);
  else
    o->xent_forward(sl->losses, sl->xent_lse, sl->logits, sl->targets, N, Vl);
  o->to_host(m->host_losses, sl->losses, sizeof(float) * (size_t)N);
  double sum = 0.0;
  for (int n = 0; n < N; n++) sum += m->host_losses[n];
  return (float)(sum / N);
}

void atoll_model_backward(atoll_model *m, float loss_scale) {
  atoll_model_backward_slot(m, 0, 0, loss_scale, NULL);
}

void atoll_model_backward_slot(atoll_model *m, int slot, int chunk, float loss_scale, const float *dout) {
  const atoll_ops *o = m->ops;
  const atoll_layout *lay = &m->lay;
  slot_acts *sl = &m->slots[slot];
  int starts = lay->first_stage && chunk == 0, ends = lay->last_stage && chunk == lay->part.chunks - 1;
  if (ends ? !sl->have_targets : !dout) return;
  int C = m->s.dim, Cl = m->Cl, NHl = m->NHl, Vl = m->Vl, L = m->s.layers;
  int B = sl->B, T = sl->T, N = micro_rows(B, T), Nl = atoll_model_local_rows(m, N);
  float *P = m->params, *G = m->grads;

  atoll_model_emit(m, ATOLL_EV_BACKWARD_BEGIN, lay->chunk_end[chunk]);
  if (ends) {
    /* loss -> dlogits (in place in the logits, or rounded when kept) -> ln_f -> residual stream */
    if (m->kept) { /* the gradient goes straight into the head product's rounded dout */
      o->xent_backward_bf16(m->dlogits_bf16, sl->logits, sl->xent_lse, sl->targets, loss_scale / (float)N, N, Vl);
      atoll_model_product_backward_rounded(m, m->dC, tensor_at(m, G, lay->t_head), m->dlogits_bf16, sl->lnf_bf16,
                                           tensor_at(m, P, lay->t_head), N, C, Vl, 0);
    } else {
      if (m->tp > 1)
        xent_backward_tp(m, sl, loss_scale / (float)N, N);
      else
        o->xent_backward(sl->logits, sl->xent_lse, sl->targets, loss_scale / (float)N, N, Vl);
      atoll_model_product_backward(m, m->dC, tensor_at(m, G, lay->t_head), NULL, sl->logits, sl->lnf, sl->lnf_bf16,
                                   tensor_at(m, P, lay->t_head), N, C, Vl, 0);
    }
    const float *dlnf = atoll_model_sum_input_grad(m, N);
    atoll_model_poll(m);
    float *x = sl->acts[m->nblocks - 1].res_out; /* the last chunk ends the part */
    o->zero(m->dres, sizeof(float) * (size_t)Nl * C);
    if (m->llama)
      o->rmsnorm_backward(m->dres, tensor_at(m, G, lay->t_lnf), dlnf, x, tensor_at(m, P, lay->t_lnf), sl->lnf_rstd,
                          Nl, C);
    else
      o->layernorm_backward(m->dres, tensor_at(m, G, lay->t_lnf), tensor_at(m, G, lay->t_lnf + 1), dlnf, x,
                            tensor_at(m, P, lay->t_lnf), sl->lnf_mean, sl->lnf_rstd, Nl, C);
    grads_ready(m, L);
  } else {
    o->copy(m->dres, dout, sizeof(float) * (size_t)Nl * C);
  }

  for (int l = lay->chunk_end[chunk] - 1; l >= lay->chunk_begin[chunk]; l--) {
    int i = lay->block_of[l];
    atoll_model_emit(m, ATOLL_EV_BLOCK_BACKWARD, l);
    if (m->llama) {
      atoll_llama_block_backward(m, &sl->acts[i], l, B, T);
      atoll_model_emit(m, ATOLL_EV_BLOCK_BACKWARD_DONE, l);
      grads_ready(m, l);
      continue;
    }
    block_params p = block_view(m, P, l), g = block_view(m, G, l);
    block_acts *a = &sl->acts[i];
    /* MLP half: res_out = res_mid + fcproj(gelu(fc(ln2(res_mid)))) */
    atoll_model_product_backward(m, m->d4C, g.fcprojw, g.fcprojb, atoll_model_full_dout(m, m->dres, N), a->fch_gelu,
                                 a->fch_gelu_bf16, p.fcprojw, N, 4 * Cl, C, 0);
    atoll_model_poll(m);
    if (m->kept) { /* GELU's backward writes fc's rounded dout and sums its bias gradient */
      o->gelu_backward_bf16(m->d4C_bf16, g.fcb, a->fch, m->d4C, N, 4 * C);
      atoll_model_product_backward_rounded(m, m->dC, g.fcw, m->d4C_bf16, a->ln2_bf16, p.fcw, N, C, 4 * C, 0);
    } else {
      o->gelu_backward(m->d4C, a->fch, m->d4C, (size_t)N * 4 * Cl);
      atoll_model_product_backward(m, m->dC, g.fcw, g.fcb, m->d4C, a->ln2, NULL, p.fcw, N, C, 4 * Cl, 0);
    }
    const float *dln2 = atoll_model_sum_input_grad(m, N);
    atoll_model_poll(m);
    o->layernorm_backward(m->dres, g.ln2w, g.ln2b, dln2, a->res_mid, p.ln2w, a->ln2_mean, a->ln2_rstd, Nl, C);
    /* attention half: res_mid = res_in + attproj(attn(qkv(ln1(res_in)))) */
    atoll_model_product_backward(m, m->dC, g.attprojw, g.attprojb, atoll_model_full_dout(m, m->dres, N), a->atty,
                                 a->atty_bf16, p.attprojw, N, Cl, C, 0);
    atoll_model_poll(m);
    o->attention_backward(m->d3C, m->dC, a->qkv, a->atty, a->lse, B, T, Cl, NHl);
    atoll_model_poll(m);
    atoll_model_product_backward(m, m->dC, g.qkvw, g.qkvb, m->d3C, a->ln1, a->ln1_bf16, p.qkvw, N, C, 3 * Cl, 0);
    const float *dln1 = atoll_model_sum_input_grad(m, N);
    atoll_model_poll(m);
    o->layernorm_backward(m->dres, g.ln1w, g.ln1b, dln1, a->res_in, p.ln1w, a->ln1_mean, a->ln1_rstd, Nl, C);
    atoll_model_emit(m, ATOLL_EV_BLOCK_BACKWARD_DONE, l);
    grads_ready(m, l);
  }
  if (starts) {
    float *dwte = tensor_at(m, G, lay->t_wte), *dwpe = lay->t_wpe >= 0 ? tensor_at(m, G, lay->t_wpe) : NULL;
    if (m->tp > 1)
      embed_backward_tp(m, dwte, dwpe, atoll_model_full_dout(m, m->dres, N), sl->inputs, B, T);
    else
      o->embed_backward(dwte, dwpe, m->dres, sl->inputs, B, T, C);
  }
  if (chunk == 0) grads_ready(m, -1); /* the part's last backward of a micro-batch */
  atoll_model_emit(m, ATOLL_EV_BACKWARD_DONE, -1);
  if (ends) sl->have_targets = 0; /* logits were overwritten by their gradient */
}

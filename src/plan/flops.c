/* Compute of one layout: each matrix product of a block as a roofline,
 * max(FLOPs / (peak x eta_mm), bytes / HBM); fused causal attention at
 * eta_attn x hd / (hd + hd_half), with block / seq of masked waste; elementwise kernels
 * as bytes / elem_bw; a fixed overhead per block. Then the step's FLOPs and rates. */
#include "plan/eval.h"

atoll_plan_widths atoll_plan_local_widths(const atoll_plan_model *m, int tp) {
  atoll_plan_widths w;
  w.h = m->dim;
  w.hd = (double)m->dim / m->heads;
  w.hq = (double)m->dim / tp;
  int kv_heads = m->kv_heads >= tp ? m->kv_heads / tp : 1; /* fewer KV heads than ranks: replicated */
  w.kv = kv_heads * w.hd;
  w.f = (double)m->ffn / tp;
  w.heads = (double)m->heads / tp;
  return w;
}

/* One matrix product [rows x inner] @ [inner x cols]: its shape's time (gemm.c). */
static double gemm_s(const atoll_plan_accel *x, double rows, double cols, double inner, double elem) {
  return atoll_plan_gemm_seconds(x, rows, cols, inner, 1, elem);
}

/* Attention with the scores materialized (Megatron-LM before fused attention): per
 * sequence and local head, QK^T [sq x s] and PV forward, four products backward
 * (dP, dV, dQ, dK), all as batched products of the shape model over every key
 * (masking does not save work); softmax and dropout stream the scores: forward
 * softmax reads and writes (2 elements), dropout reads, writes and writes a 1-byte
 * mask; backward dropout reads grad and mask, writes; softmax reads P and dP,
 * writes dS: 10 elements of `elem` bytes per score (20 bytes in BF16). */
static double attn_unfused_s(const atoll_plan_accel *x, double nseq, double heads, double sq, double s, double hd,
                             double elem) {
  double b = nseq * heads;
  double t = 2 * atoll_plan_gemm_seconds(x, sq, s, hd, b, elem)   /* QK^T, dP = dO V^T */
             + 2 * atoll_plan_gemm_seconds(x, sq, hd, s, b, elem) /* PV, dQ = dS K */
             + 2 * atoll_plan_gemm_seconds(x, s, hd, sq, b, elem); /* dV = P^T dO, dK = dS^T Q */
  t += 10.0 * elem * sq * s * b / x->elem_bw;
  return t;
}

/* Elements streamed by elementwise kernels per token per block, forward and backward:
 * norms (read x, write y; backward reads x, dy, writes dx: 6 per norm x 2), residual
 * adds (3 x 2 forward and backward), GPT-2 biases (5 vectors, add and reduce) and GELU
 * (2 forward, 3 backward), Llama's rotary embedding on Q and K (4) and SwiGLU (3
 * forward, 5 backward). */
static double elem_per_token(const atoll_plan_model *m, const atoll_plan_widths *w, int tp, int seq_par) {
  double hs = seq_par ? w->h / tp : w->h; /* sequence-parallel shard of the residual stream, or all of it */
  if (m->arch == ATOLL_ARCH_LLAMA) return 12 * hs + 12 * hs + 4 * (w->hq + w->kv) + 8 * w->f;
  return 12 * hs + 12 * hs + 15 * hs + 3 * w->f + 5 * w->f;
}

/* The block's matrix products [out x in], each run forward, backward-data and
 * backward-weights; QKV and gate/up (fc) are column-parallel, the two projections
 * row-parallel. Fills the block's matmul seconds and FLOPs, and the backward windows
 * that hide traffic: the column-parallel products' (TP), the MLP's and the query
 * projection's (CP). */
static void block_matmuls(const atoll_plan_eval *e, const atoll_plan_widths *w, double *t_mm, double *flops_mm,
                          atoll_plan_block *b) {
  const atoll_plan_model *m = e->ctx->model;
  double elem = atoll_plan_elem_bytes(e->ctx->train->precision), tok = e->tokens_mb;
  double shapes[4][2] = {
      {w->hq + 2 * w->kv, w->h},                            /* fused QKV */
      {w->h, w->hq},                                        /* attention output projection */
      {(m->arch == ATOLL_ARCH_LLAMA ? 2 : 1) * w->f, w->h}, /* gate and up (SwiGLU) or fc */
      {w->h, w->f},                                         /* down or fc2 */
  };
  *t_mm = 0, *flops_mm = 0, b->col_bwd = 0, b->mlp_bwd = 0;
  for (int i = 0; i < 4; i++) {
    double g = gemm_s(&e->ctx->cluster->acc, tok, shapes[i][0], shapes[i][1], elem);
    *t_mm += 3 * g;
    if (i == 0 || i == 2) b->col_bwd += 2 * g;
    if (i >= 2) b->mlp_bwd += 2 * g;
    if (i == 0) b->q_bwd = 2 * g * w->hq / (w->hq + 2 * w->kv);
    *flops_mm += 6 * tok * shapes[i][0] * shapes[i][1];
  }
}

void atoll_plan_block_compute(atoll_plan_eval *e) {
  const atoll_plan_model *m = e->ctx->model;
  const atoll_plan_accel *x = &e->ctx->cluster->acc;
  const atoll_plan_layout *lay = e->lay;
  atoll_plan_block *b = &e->block;
  int tp = lay->tp, seq = e->ctx->train->seq;
  double elem = atoll_plan_elem_bytes(e->ctx->train->precision), tok = e->tokens_mb;
  atoll_plan_widths w = atoll_plan_local_widths(m, tp);
  double rf = lay->recompute == ATOLL_RECOMPUTE_FULL ? 4.0 / 3.0 : 1.0; /* one more forward */
  double t_mm, fl_mm;
  block_matmuls(e, &w, &t_mm, &fl_mm, b);
  /* fused causal attention: 6 hq seq FLOPs per token forward+backward */
  double fl_attn = 6.0 * w.hq * seq * tok;
  double clock = !x->is_cpu && x->clock_eff > 0 ? x->clock_eff : 1.0;
  double eff = clock * x->eta_attn * w.hd / (w.hd + x->attn_hd_half) / (1.0 + x->attn_block / seq);
  double t_attn = fl_attn / (x->peak_flops * eff);
  if (e->ctx->assume->attn_fused < 0.5)
    t_attn = attn_unfused_s(x, lay->mb, w.heads, tok / lay->mb, seq, w.hd, elem);
  double t_elem = elem_per_token(m, &w, tp, e->ctx->assume->seq_par > 0.5) * tok * elem / x->elem_bw;
  /* selective recomputation repeats the forward's norms and activation functions:
   * about a third of the elementwise traffic */
  double t_sel = lay->recompute == ATOLL_RECOMPUTE_SELECTIVE ? t_elem / 3 : 0;
  b->layer = rf * (t_mm + t_attn + t_elem + x->layer_overhead) + t_sel;
  b->mm = rf * t_mm, b->attn = rf * t_attn, b->elem = rf * t_elem + t_sel;
  b->layer_hw_flops = rf * (fl_mm + fl_attn);
  /* LM head (vocabulary-parallel) and the fp32 softmax cross-entropy; the final norm */
  double vocab_local = (double)m->vocab / tp, g_head = gemm_s(x, tok, vocab_local, w.h, elem);
  b->head = 3 * g_head + (3.0 * tok * vocab_local * 4.0 + 6.0 * tok * w.h / tp * elem) / x->elem_bw;
  b->head_bwd = 2 * g_head;
  b->head_flops = 6.0 * tok * vocab_local * w.h;
  b->embed = 3.0 * tok * w.h / tp * elem / x->elem_bw;
}

void atoll_plan_rates(const atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_model *m = e->ctx->model;
  const atoll_plan_accel *x = &e->ctx->cluster->acc;
  int seq = e->ctx->train->seq;
  double fpt = atoll_plan_flops_per_token(m, seq);
  double recompute_fpt = 0;
  if (e->lay->recompute == ATOLL_RECOMPUTE_FULL)
    recompute_fpt = m->layers * (2.0 * atoll_plan_layer_matmul_params(m) + 2.0 * m->dim * (double)seq);
  r->model_flops_step = fpt * r->batch_tokens / e->gpus;
  r->hw_flops_step = (fpt + recompute_fpt) * r->batch_tokens / e->gpus;
  r->tflops_per_gpu = r->model_flops_step / r->step_s / 1e12;
  r->mfu = r->model_flops_step / (r->step_s * x->peak_flops);
  r->hfu = r->hw_flops_step / (r->step_s * x->peak_flops);
  r->tokens_per_s = r->batch_tokens / r->step_s;
  r->days = e->ctx->train->token_budget / r->tokens_per_s / 86400.0;
}

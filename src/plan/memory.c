/* Memory per GPU of one layout: weights, gradients and AdamW state by precision and
 * ZeRO stage (16 bytes per parameter in BF16 mixed precision at ZeRO-0); activations
 * per block (Korthikanti et al. 2022, with fused attention) times the micro-batches in
 * flight on the first pp_stage; fp32 logits on the last. The larger of the two binds. */
#include "plan/eval.h"

#include <stdio.h>

#define GIB (1024.0 * 1024 * 1024)

double atoll_plan_act_bytes_per_token(const atoll_plan_model *m, int tp, int recompute, atoll_plan_precision p) {
  atoll_plan_widths w = atoll_plan_local_widths(m, tp);
  double elem = atoll_plan_elem_bytes(p), hs = w.h / tp; /* sequence-parallel shard of the residual stream */
  double lse = 4.0 * w.heads;                            /* fp32 log-sum-exp per head (fused attention) */
  if (recompute == ATOLL_RECOMPUTE_FULL) return elem * hs;
  double attn, mlp;
  if (recompute == ATOLL_RECOMPUTE_NONE) {
    attn = hs + hs + w.hq + 2 * w.kv + w.hq;               /* norm input, norm output, Q, K, V, attention output */
    mlp = m->arch == ATOLL_ARCH_LLAMA ? hs + hs + 3 * w.f  /* norm in/out, gate, up, gate*up */
                                      : hs + hs + 2 * w.f; /* norm in/out, pre- and post-GELU */
  } else {                                                 /* selective: norms and activations recomputed */
    attn = hs + w.hq + 2 * w.kv + w.hq;
    mlp = m->arch == ATOLL_ARCH_LLAMA ? hs + 2 * w.f : hs + w.f;
  }
  return elem * (attn + mlp) + lse;
}

/* Layer-micro-batches of activations held by pipeline rank `rank` of pp holding
 * `layers` blocks in `chunks` chunks (Narayanan et al. 2021; Korthikanti et al. 2022):
 * 1F1B keeps pp - rank micro-batches of its blocks; the interleaved schedule keeps
 * 2(pp-rank-1) + (chunks-1) pp + 1 chunks of layers/chunks blocks. */
static double inflight_layers(int layers, int pp, int chunks, int micro_batches, int rank) {
  if (pp == 1) return layers;
  if (chunks == 1) return (double)layers * (micro_batches < pp - rank ? micro_batches : pp - rank);
  double held = 2.0 * (pp - rank - 1) + (double)(chunks - 1) * pp + 1;
  if (held > (double)micro_batches * chunks) held = (double)micro_batches * chunks;
  return (double)layers / chunks * held;
}

/* Parameters on the first and the last pp_stage, before ZeRO sharding. */
void atoll_plan_stage_params(atoll_plan_eval *e) {
  const atoll_plan_model *m = e->ctx->model;
  int pp = e->lay->pp, tp = e->lay->tp;
  double layer = atoll_plan_layer_params(m), embed = atoll_plan_embed_params(m);
  double head = m->tied ? (pp > 1 ? (double)m->vocab * m->dim : 0) : atoll_plan_head_params(m);
  double final_norm = m->arch == ATOLL_ARCH_LLAMA ? m->dim : 2.0 * m->dim;
  if (pp == 1) {
    e->params_first = e->params_last = (m->layers * layer + embed + head + final_norm) / tp;
  } else {
    e->params_first = (e->first_layers * layer + embed) / tp;
    e->params_last = (e->last_layers * layer + head + final_norm) / tp;
  }
  e->params_max = e->params_first > e->params_last ? e->params_first : e->params_last;
}

/* Activation bytes of the first [0] and the last [1] pp_stage. */
static void stage_activations(const atoll_plan_eval *e, int micro_batches, double act[2]) {
  const atoll_plan_model *m = e->ctx->model;
  const atoll_plan_layout *lay = e->lay;
  atoll_plan_precision prec = e->ctx->train->precision;
  int tp = lay->tp, pp = lay->pp;
  double tok = e->tokens_mb;
  double act_layer = atoll_plan_act_bytes_per_token(m, tp, lay->recompute, prec) * tok;
  double full_layer = atoll_plan_act_bytes_per_token(m, tp, ATOLL_RECOMPUTE_NONE, prec) * tok;
  double extra = lay->recompute == ATOLL_RECOMPUTE_FULL ? full_layer : 0; /* the block being recomputed */
  double logits = tok * ((double)m->vocab / tp) * 4.0;                    /* fp32 logits, gradient in place */
  act[0] = inflight_layers(e->first_layers, pp, lay->chunks, micro_batches, 0) * act_layer + extra;
  act[1] = inflight_layers(e->last_layers, pp, lay->chunks, micro_batches, pp - 1) * act_layer + extra + logits;
  if (pp == 1) act[0] = act[1] = act[0] + logits;
}

void atoll_plan_memory(const atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_layout *lay = e->lay;
  const atoll_plan_accel *x = &e->ctx->cluster->acc;
  atoll_plan_precision prec = e->ctx->train->precision;
  double elem = atoll_plan_elem_bytes(prec), optim = atoll_plan_optim_bytes(prec);
  int ranks = e->shard_ranks, zero = lay->zero_stage;
  double act[2];
  stage_activations(e, r->micro_batches, act);
  double layer = atoll_plan_layer_params(e->ctx->model);
  double zero3_buf = zero == 3 && ranks > 1 ? (2 * elem + elem) * layer / lay->tp : 0; /* two weights, a gradient */
  double wshard = zero >= 3 ? ranks : 1, gshard = zero >= 2 ? ranks : 1, oshard = zero >= 1 ? ranks : 1;
  double outer_state = e->islands > 1 && !lay->island_sync ? 8.0 / ranks : 0; /* fp32 global weights + outer momentum */
  double params[2] = {e->params_first, e->params_last}, mem[2];
  for (int i = 0; i < 2; i++)
    mem[i] = params[i] * (elem / wshard + elem / gshard + optim / oshard + outer_state) + act[i] + zero3_buf +
             x->reserved;
  int bind = lay->pp > 1 && mem[1] > mem[0] ? 1 : 0;
  r->mem_pp_stage = bind;
  r->params_per_gpu = params[bind];
  r->mem_weights = params[bind] * elem / wshard;
  r->mem_grads = params[bind] * elem / gshard;
  r->mem_optim = params[bind] * optim / oshard;
  r->mem_outer = params[bind] * outer_state;
  r->mem_act = act[bind];
  r->mem_buffers = zero3_buf;
  r->mem_reserved = x->reserved;
  r->mem_total = mem[bind];
  r->fits = r->mem_total <= x->mem_bytes;
  if (!r->fits)
    snprintf(r->why, sizeof r->why, "needs %.1f GiB per device, %s has %.1f GiB", r->mem_total / GIB, x->name,
             x->mem_bytes / GIB);
}

/* --explain and --versus of the planner: why the best layout wins, in plain words, and
 * what each alternative (or a given layout) loses against it. The header, the tables,
 * the assumptions block and --json: src/plan/report.c. */
#include "atoll/plan.h"
#include "plan/report.h" /* atoll_plan_fmt_gb, atoll_plan_layout_name */

#include <stdio.h>

/* The component (of one step, scaled to the winner's batch) where `r` loses most. */
static const char *main_loss(const atoll_plan_result *w, const atoll_plan_result *r, double *delta) {
  double k = w->batch_tokens / r->batch_tokens;
  struct {
    const char *what;
    double a, b;
  } parts[] = {
      {"more compute per GPU (smaller, less efficient matrix products or recomputation)", w->t_compute,
       r->t_compute * k},
      {"a larger pipeline bubble", w->t_bubble, r->t_bubble * k},
      {"tensor-parallel traffic", w->x_tp, r->x_tp * k},
      {"context-parallel traffic", w->x_cp, r->x_cp * k},
      {"pipeline sends", w->x_pp, r->x_pp * k},
      {"data-parallel traffic not hidden behind backward", w->x_dp, r->x_dp * k},
      {"the optimizer step", w->t_optim, r->t_optim * k},
      {"the sync across islands", w->t_outer_step, r->t_outer_step * k},
  };
  int best = 0;
  for (int i = 1; i < (int)(sizeof parts / sizeof parts[0]); i++)
    if (parts[i].b - parts[i].a > parts[best].b - parts[best].a) best = i;
  *delta = parts[best].b - parts[best].a;
  return parts[best].what;
}

/* The best layout of a mesh (any of dp/tp/pp/cp may be 0: searched). */
static int best_of(const atoll_plan_ctx *ctx, int dp, int tp, int pp, int cp, int zero, atoll_plan_result *out,
                   atoll_plan_result *lightest) {
  atoll_plan_fixed fx;
  atoll_plan_fixed_none(&fx);
  fx.dp = dp, fx.tp = tp, fx.pp = pp, fx.cp = cp, fx.zero_stage = zero;
  atoll_plan_ranking rk;
  atoll_err e;
  if (atoll_plan_search(ctx, &fx, &rk, &e)) return -1;
  int rc = 0;
  if (rk.nbest)
    *out = rk.best[0], rc = 1;
  else
    *lightest = rk.smallest;
  atoll_plan_ranking_free(&rk);
  return rc;
}

static void explain_alt(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w, const char *label, int dp,
                        int tp, int pp, int cp, int zero) {
  atoll_plan_result r, light;
  char name[96], a[32], b[32];
  int rc = best_of(ctx, dp, tp, pp, cp, zero, &r, &light);
  if (rc < 0) return;
  if (rc == 0) {
    snprintf(name, sizeof name, "dp %d x tp %d x pp %d x cp %d", light.lay.dp, light.lay.tp, light.lay.pp,
             light.lay.cp);
    fprintf(f, "  - %s (%s): does not fit; its lightest setting needs %s per device, more than the %s's %s.\n", label,
            name, atoll_plan_fmt_bytes(light.mem_total, a, sizeof a), ctx->cluster->acc.name,
            atoll_plan_fmt_bytes(ctx->cluster->acc.mem_bytes, b, sizeof b));
    return;
  }
  if (r.lay.dp == w->lay.dp && r.lay.tp == w->lay.tp && r.lay.pp == w->lay.pp && r.lay.cp == w->lay.cp &&
      r.lay.zero_stage == w->lay.zero_stage)
    return;
  atoll_plan_layout_name(&r, name, sizeof name);
  double ratio = (r.step_s / r.batch_tokens) / (w->step_s / w->batch_tokens), delta;
  const char *why = main_loss(w, &r, &delta);
  if (ratio < 1.0005) {
    fprintf(f, "  - %s (%s, ZeRO-%d): about as fast (%.3fx).\n", label, name, r.lay.zero_stage, ratio);
    return;
  }
  fprintf(f, "  - %s (%s, ZeRO-%d): %.2fx the time per token, mostly %s (+%s per step).\n", label, name, r.lay.zero_stage,
          ratio, why, atoll_plan_fmt_seconds(delta, a, sizeof a));
}

/* The memory floor of training state, and what each GPU holds. */
static void explain_memory(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_accel *x = &ctx->cluster->acc;
  const atoll_plan_train *t = ctx->train;
  char a[32], b[32];
  double params = atoll_plan_params(m);
  double per_param = 16; /* bytes per parameter in either precision (see the text) */
  fprintf(f, "\nwhy this layout:\n");
  double state = params * per_param;
  fprintf(f,
          "  * Memory. Weights, gradients and AdamW state take %.0f bytes per parameter\n"
          "    (%s):\n    %s for %s parameters, the memory of %.1f %ss before any activation.\n    ",
          per_param,
          t->precision == ATOLL_PREC_FP32 ? "fp32 weights 4 + gradients 4 + moments 8"
                                          : "bf16 weights 2 + gradients 2 + fp32 master weights and moments 12",
          atoll_plan_fmt_bytes(state, a, sizeof a), atoll_plan_fmt_count(params, b, sizeof b), state / x->mem_bytes,
          x->name);
  char q[6][32];
  fprintf(f,
          "Here each GPU holds %s parameters (1/%d of the model: tp %d x pp %d)%s\n"
          "    and uses %s of %s: weights %s, gradients %s, optimizer %s, activations %s.\n",
          atoll_plan_fmt_count(w->params_per_gpu, q[0], 32), w->lay.tp * w->lay.pp, w->lay.tp, w->lay.pp,
          w->lay.zero_stage ? ", ZeRO-sharded further" : "", atoll_plan_fmt_bytes(w->mem_total, q[1], 32),
          atoll_plan_fmt_bytes(x->mem_bytes, q[2], 32), atoll_plan_fmt_bytes(w->mem_weights, q[3], 32),
          atoll_plan_fmt_bytes(w->mem_grads, q[4], 32), atoll_plan_fmt_bytes(w->mem_optim, q[5], 32),
          atoll_plan_fmt_bytes(w->mem_act, a, sizeof a));
}

/* Tensor parallel: its traffic, and what leaving the node would cost. */
static void explain_tp(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w) {
  const atoll_plan_cluster *c = ctx->cluster;
  char a[32], b[32], d[32], e[32];
  int per_node = c->gpus_per_node;
  if (w->lay.tp > 1) {
    double slow = c->inter_bw * ctx->assume->link_eff;
    fprintf(
        f,
        "  * Tensor parallel %d splits every matrix product %d ways; with sequence parallel it costs 10 all-gathers "
        "or\n"
        "    reduce-scatters of the activations per block and micro-batch (4 of them hidden behind backward matmuls):\n"
        "    %s per GPU per step over %s links (%.0f GB/s effective), %s, of which %s exposed.\n",
        w->lay.tp, w->lay.tp, atoll_plan_fmt_gb(w->bytes_tp, a, sizeof a), atoll_plan_link_name(w->link_tp),
        w->bw_tp / 1e9,
        atoll_plan_fmt_seconds(w->t_tp, b, sizeof b), atoll_plan_fmt_seconds(w->x_tp, e, sizeof e));
    if (w->link_tp == ATOLL_LINK_INTRA)
      fprintf(f, "    It stays inside a node of %d: across nodes (%.0f GB/s per GPU) the same traffic would take %s.\n",
              per_node, slow / 1e9, atoll_plan_fmt_seconds(w->bytes_tp / slow, d, sizeof d));
  } else {
    fprintf(f, "  * No tensor parallel: every GPU runs whole matrix products, which is the most efficient when the "
               "model fits.\n");
  }
}

/* Pipeline (its bubble) and context parallel. */
static void explain_pp_cp(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_train *t = ctx->train;
  char a[32], b[32];
  if (w->lay.pp > 1) {
    char bub[96];
    if (w->micro_batches >= w->lay.pp || w->lay.chunks == 1)
      snprintf(bub, sizeof bub, "(p-1)/(v m) = %d/(%d x %d)", w->lay.pp - 1, w->lay.chunks, w->micro_batches);
    else
      snprintf(bub, sizeof bub, "with fewer micro-batches (%d) than stages, (p + (p-1)/v - m)/m", w->micro_batches);
    fprintf(f,
            "  * Pipeline parallel %d: stages of %d blocks (last stage %d plus the LM head); only activations\n"
            "    cross stage boundaries (%s per GPU per step, %s links). The price is the bubble\n"
            "    %s = %.1f%%: %s idle per step.\n",
            w->lay.pp, w->pp_stage_layers_first, w->pp_stage_layers_last, atoll_plan_fmt_gb(w->bytes_pp, a, sizeof a),
            atoll_plan_link_name(w->link_pp), bub, 100 * w->bubble, atoll_plan_fmt_seconds(w->t_bubble, b, sizeof b));
  } else {
    fprintf(f, "  * No pipeline: no bubble; the %d blocks fit on every GPU (sharded %d ways by tensor parallel).\n",
            m->layers, w->lay.tp);
  }
  if (w->lay.cp > 1)
    fprintf(f,
            "  * Context parallel %d splits each %d-token sequence: %s of K/V all-gathers per GPU per step over %s "
            "links.\n",
            w->lay.cp, t->seq, atoll_plan_fmt_gb(w->bytes_cp, a, sizeof a), atoll_plan_link_name(w->link_cp));
}

/* Data parallel and its ZeRO stage. */
static void explain_dp(FILE *f, const atoll_plan_result *w) {
  char a[32], b[32], d[32];
  if (w->lay.dp > 1) {
    const char *zdesc[] = {
        "replicates everything and all-reduces gradients once per step",
        "shards the AdamW state; gradients are reduce-scattered and weights all-gathered once per step",
        "shards AdamW state and gradients; gradients are reduce-scattered after every micro-batch",
        "shards weights too (FSDP); weights are all-gathered for every micro-batch, forward and backward"};
    fprintf(f,
            "  * Data parallel %d: each replica takes %d sequence%s per step.\n    ZeRO-%d %s:\n"
            "    %s per GPU per step over %s links in %s, of which %s is exposed\n"
            "    (the rest hides behind the backward pass).\n",
            w->lay.dp, w->seqs_per_rank, w->seqs_per_rank == 1 ? "" : "s", w->lay.zero_stage, zdesc[w->lay.zero_stage],
            atoll_plan_fmt_gb(w->bytes_dp, a, sizeof a), atoll_plan_link_name(w->link_dp),
            atoll_plan_fmt_seconds(w->t_dp, b, sizeof b), atoll_plan_fmt_seconds(w->x_dp, d, sizeof d));
  } else {
    fprintf(f, "  * Data parallel 1: the whole cluster works on one model replica.\n");
  }
}

/* Recomputation against keeping every activation. */
static void explain_recompute(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w) {
  char a[32], b[32];
  {
    atoll_plan_layout L = w->lay;
    L.recompute = ATOLL_RECOMPUTE_NONE;
    atoll_plan_result n;
    atoll_plan_evaluate(ctx, &L, &n);
    if (w->lay.recompute != ATOLL_RECOMPUTE_NONE && n.valid)
      fprintf(f,
              "  * Recomputation %s keeps activations at %s;\n    keeping every activation would need %s per GPU%s.\n",
              atoll_plan_recompute_name(w->lay.recompute), atoll_plan_fmt_bytes(w->mem_act, a, sizeof a),
              atoll_plan_fmt_bytes(n.mem_total, b, sizeof b),
              n.fits ? " (it fits, but is no faster here)" : ", which does not fit");
    else
      fprintf(f, "  * No recomputation: every activation is kept (%s per GPU), so backward needs no extra forward.\n",
              atoll_plan_fmt_bytes(w->mem_act, a, sizeof a));
  }
}

/* Islands: DiLoCo against data parallel across them. */
static void explain_islands(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_cluster *c = ctx->cluster;
  char a[32];
  double params = atoll_plan_params(m);
  if (c->islands > 1) {
    atoll_plan_layout other = w->lay;
    other.island_sync = !w->lay.island_sync;
    atoll_plan_result o;
    atoll_plan_evaluate(ctx, &other, &o);
    char q[4][32];
    if (!w->lay.island_sync)
      fprintf(f,
              "  * Islands: %d islands train alone for %d steps (DiLoCo), then all-reduce the outer gradient\n"
              "    (%s per island over the WAN at %.3g Gbit/s) in %s: %s per step amortized, utilization %.1f%%.\n"
              "    Keeping %.0f%% needs %.3g Gbit/s per island. Syncing gradients every step instead (data parallel\n"
              "    across islands) would move %s per island per step and take %s per step.\n",
              c->islands, c->diloco_h,
              atoll_plan_fmt_gb(atoll_plan_ring_allreduce_bytes(c->islands, params * ctx->assume->diloco_bytes), q[0],
                                32),
              c->wan_bw * 8 / 1e9, atoll_plan_fmt_seconds(w->t_outer, q[1], 32),
              atoll_plan_fmt_seconds(w->t_outer_step, q[2], 32), 100 * w->wan_util, 100 * ctx->assume->diloco_util,
              w->wan_bw_needed * 8 / 1e9, atoll_plan_fmt_gb(o.bytes_wan, q[3], 32),
              atoll_plan_fmt_seconds(o.step_s, a, sizeof a));
    else
      fprintf(f,
              "  * Islands: data parallel spans the %d islands: every step each island sends %s over the WAN\n"
              "    (%s, %s of it exposed). DiLoCo syncing every %d steps would take %s per step.\n",
              c->islands, atoll_plan_fmt_gb(w->bytes_wan, q[0], 32), atoll_plan_fmt_seconds(w->t_outer, q[1], 32),
              atoll_plan_fmt_seconds(w->t_outer_step, q[2], 32), c->diloco_h,
              atoll_plan_fmt_seconds(o.step_s, a, sizeof a));
  }
}

/* Other meshes, each with its best settings, and why they lose. */
static void explain_alternatives(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_ranking *rk) {
  const atoll_plan_result *w = &rk->best[0];
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_cluster *c = ctx->cluster;
  int per_node = c->gpus_per_node;
  fprintf(f, "  * Alternatives, each with its best settings:\n");
  int island_gpus = c->gpus / (c->islands > 0 ? c->islands : 1);
  if (rk->nbest > 1) {
    double delta;
    const atoll_plan_result *r = &rk->best[1];
    char name[96];
    atoll_plan_layout_name(r, name, sizeof name);
    fprintf(f, "  - runner-up (%s, ZeRO-%d): %.3fx the time per token, mostly %s.\n", name, r->lay.zero_stage,
            (r->step_s / r->batch_tokens) / (w->step_s / w->batch_tokens), main_loss(w, r, &delta));
  }
  if (w->lay.tp * 2 <= m->heads && (long)w->lay.tp * 2 * w->lay.cp <= island_gpus && w->lay.tp * 2 > per_node && w->lay.tp <= per_node)
    explain_alt(f, ctx, w, "tensor parallel across nodes", 0, w->lay.tp * 2, 0, 0, -1);
  if (w->lay.tp > 1) explain_alt(f, ctx, w, "half the tensor parallel", 0, w->lay.tp / 2, 0, 0, -1);
  if (w->lay.pp > 1) explain_alt(f, ctx, w, "no pipeline", 0, w->lay.tp, 1, 0, -1);
  if (w->lay.pp > 1)
    explain_alt(f, ctx, w, "half the pipeline", 0, w->lay.tp, w->lay.pp / 2 ? w->lay.pp / 2 : 1, w->lay.cp, -1);
  if ((long)w->lay.pp * 2 <= m->layers && w->lay.dp % 2 == 0)
    explain_alt(f, ctx, w, "twice the pipeline", 0, w->lay.tp, w->lay.pp * 2, w->lay.cp, -1);
  if (w->lay.zero_stage != 3 && w->lay.dp > 1)
    explain_alt(f, ctx, w, "fully sharded (ZeRO-3)", w->lay.dp, w->lay.tp, w->lay.pp, w->lay.cp, 3);
}

/* The planner's first against a given layout (--versus): how much slower the given
 * one is per token and which parts of its step make the difference, largest first,
 * each with the settings behind it. */
void atoll_plan_print_versus(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w,
                             const atoll_plan_result *r) {
  (void)ctx;
  char wn[96], rn[96];
  atoll_plan_layout_name(w, wn, sizeof wn);
  atoll_plan_layout_name(r, rn, sizeof rn);
  double ratio = (r->step_s / r->batch_tokens) / (w->step_s / w->batch_tokens);
  const char *rw = atoll_plan_recompute_name(w->lay.recompute), *rr = atoll_plan_recompute_name(r->lay.recompute);
  fprintf(f, "  * Against the given layout %s (ZeRO-%d, micro-batch %d, interleave %d, recompute %s):\n", rn,
          r->lay.zero_stage, r->lay.mb, r->lay.chunks, rr);
  if (ratio <= 1.002) {
    fprintf(f, "  - it is as fast as the first (%s): %.3fx its time per token.\n", wn, ratio);
    return;
  }
  fprintf(f,
          "  - it takes %.3fx the time per token of the first (%s, ZeRO-%d, recompute %s). Per token, it spends "
          "more on:\n",
          ratio, wn, w->lay.zero_stage, rw);
  double k = w->batch_tokens / r->batch_tokens, step = w->step_s;
  char why[8][200];
  snprintf(why[0], sizeof why[0],
           "compute (recompute %s vs %s; matrix products on 1/%d of the width vs 1/%d, micro-batch %d vs %d)", rr, rw,
           r->lay.tp, w->lay.tp, r->lay.mb, w->lay.mb);
  snprintf(why[1], sizeof why[1], "the pipeline bubble (%.1f%% vs %.1f%%: pp %d with %d micro-batches, interleave %d)",
           100 * r->bubble, 100 * w->bubble, r->lay.pp, r->micro_batches, r->lay.chunks);
  snprintf(why[2], sizeof why[2], "exposed tensor-parallel traffic (tp %d over %s vs tp %d)", r->lay.tp,
           atoll_plan_link_name(r->link_tp), w->lay.tp);
  snprintf(why[3], sizeof why[3], "exposed context-parallel traffic (cp %d vs %d)", r->lay.cp, w->lay.cp);
  snprintf(why[4], sizeof why[4], "pipeline sends (pp %d vs %d)", r->lay.pp, w->lay.pp);
  snprintf(why[5], sizeof why[5], "exposed data-parallel traffic (ZeRO-%d over dp %d vs ZeRO-%d over dp %d)",
           r->lay.zero_stage, r->lay.dp, w->lay.zero_stage, w->lay.dp);
  snprintf(why[6], sizeof why[6], "the optimizer step");
  snprintf(why[7], sizeof why[7], "the sync across islands");
  double d[8] = {r->t_compute * k - w->t_compute, r->t_bubble * k - w->t_bubble, r->x_tp * k - w->x_tp,
                 r->x_cp * k - w->x_cp,           r->x_pp * k - w->x_pp,         r->x_dp * k - w->x_dp,
                 r->t_optim * k - w->t_optim,     r->t_outer_step * k - w->t_outer_step};
  int used[8] = {0};
  for (int n = 0; n < 3; n++) {
    int best = -1;
    for (int i = 0; i < 8; i++)
      if (!used[i] && d[i] > 0.002 * step && (best < 0 || d[i] > d[best])) best = i;
    if (best < 0) break;
    used[best] = 1;
    fprintf(f, "    %s: +%.1f%% of the first's step\n", why[best], 100 * d[best] / step);
  }
}

void atoll_plan_print_explain(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_ranking *rk) {
  if (!rk->nbest) return;
  const atoll_plan_result *w = &rk->best[0];
  const atoll_plan_accel *x = &ctx->cluster->acc;
  const atoll_plan_train *t = ctx->train;
  char a[32], b[32], d[32];
  explain_memory(f, ctx, w);
  explain_tp(f, ctx, w);
  explain_pp_cp(f, ctx, w);
  explain_dp(f, w);
  explain_recompute(f, ctx, w);
  if (ctx->cluster->islands > 1) explain_islands(f, ctx, w);
  explain_alternatives(f, ctx, rk);
  fprintf(f,
          "  * Time: %.0f TFLOP/s per GPU is %.1f%% of the %.0f TFLOP/s peak (MFU counts model FLOPs only); at %s "
          "tokens/s\n"
          "    the %s-token budget takes %s days on %d GPUs.\n",
          w->tflops_per_gpu, 100 * w->mfu, x->peak_flops / 1e12, atoll_plan_fmt_count(w->tokens_per_s, a, sizeof a),
          atoll_plan_fmt_count(t->token_budget, b, sizeof b), atoll_plan_fmt_days(w->days, d, sizeof d), w->gpus);
}

/* Output of the planner: the header (model, cluster, training), the table of the best
 * layouts (time, memory breakdown, traffic per link), the assumptions block,
 * --explain in plain words, and --json. Memory is in GiB (2^30 bytes), traffic and
 * bandwidth in decimal GB and GB/s, as their hardware is specified. */
#include "atoll/plan.h"
#include "plan/eval.h" /* atoll_plan_grad_elem_bytes */

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

const char *atoll_plan_fmt_bytes(double b, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (fabs(b) >= 1024 && i < 5) b /= 1024, i++;
  snprintf(buf, n, i == 0 ? "%.0f %s" : "%.1f %s", b, u[i]);
  return buf;
}

/* decimal bytes for traffic */
static const char *fmt_gb(double b, char *buf, size_t n) {
  const char *u[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int i = 0;
  while (fabs(b) >= 1000 && i < 5) b /= 1000, i++;
  snprintf(buf, n, i == 0 ? "%.0f %s" : (b < 10 ? "%.2f %s" : b < 100 ? "%.1f %s" : "%.0f %s"), b, u[i]);
  return buf;
}

const char *atoll_plan_fmt_count(double x, char *buf, size_t n) {
  const char *u[] = {"", "K", "M", "B", "T", "P"};
  int i = 0;
  while (fabs(x) >= 1000 && i < 5) x /= 1000, i++;
  snprintf(buf, n, i == 0 ? "%.0f%s" : (x < 10 ? "%.2f%s" : x < 100 ? "%.1f%s" : "%.0f%s"), x, u[i]);
  return buf;
}

const char *atoll_plan_fmt_days(double d, char *buf, size_t n) {
  snprintf(buf, n, d >= 100 ? "%.0f" : d >= 10 ? "%.1f" : d >= 0.01 ? "%.2f" : "%.2g", d);
  return buf;
}

const char *atoll_plan_fmt_seconds(double s, char *buf, size_t n) {
  if (s < 1e-3)
    snprintf(buf, n, "%.0f us", s * 1e6);
  else if (s < 1)
    snprintf(buf, n, "%.0f ms", s * 1e3);
  else if (s < 100)
    snprintf(buf, n, "%.2f s", s);
  else if (s < 3600)
    snprintf(buf, n, "%.1f min", s / 60);
  else
    snprintf(buf, n, "%.1f h", s / 3600);
  return buf;
}

static const char *arch_name(const atoll_plan_model *m) { return m->arch == ATOLL_ARCH_LLAMA ? "llama" : "gpt2"; }

void atoll_plan_print_header(FILE *f, const atoll_plan_ctx *ctx) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_cluster *c = ctx->cluster;
  const atoll_plan_train *t = ctx->train;
  char a[32], b[32], d[32];
  fprintf(f, "model    %s: %s parameters (%s; %d layers, width %d, %d heads", m->name,
          atoll_plan_fmt_count(atoll_plan_params(m), a, sizeof a), arch_name(m), m->layers, m->dim, m->heads);
  if (m->kv_heads != m->heads) fprintf(f, " / %d KV", m->kv_heads);
  fprintf(f, ", FFN %d, vocabulary %d%s)\n", m->ffn, m->vocab, m->tied ? ", tied head" : "");
  double fpt = atoll_plan_flops_per_token(m, t->seq);
  const char *fu = fpt >= 1e12 ? "TFLOP" : fpt >= 1e9 ? "GFLOP" : "MFLOP";
  double fs = fpt >= 1e12 ? 1e12 : fpt >= 1e9 ? 1e9 : 1e6;
  fprintf(f, "         %.3g %s per token at seq %d (6 x weights in matrix products + causal attention)\n", fpt / fs, fu,
          t->seq);
  if (c->acc.is_cpu)
    fprintf(f, "cluster  %d x %s (%s): %.1f GFLOP/s fp32 sgemm, %.1f GiB", c->gpus, c->acc.name, c->acc.desc,
            c->acc.peak_flops / 1e9, c->acc.mem_bytes / GIB);
  else
    fprintf(f, "cluster  %d x %s (%s): %.0f TFLOP/s bf16, %.0f GiB", c->gpus, c->acc.name, c->acc.desc,
            c->acc.peak_flops / 1e12, c->acc.mem_bytes / GIB);
  fprintf(f, "\n         %d per node, %.0f GB/s within a node, %.0f GB/s per device between nodes", c->gpus_per_node,
          c->intra_bw / 1e9, c->inter_bw / 1e9);
  if (c->islands > 1)
    fprintf(f, "; %d islands joined by %.3g Gbit/s WAN, DiLoCo outer sync every %d steps", c->islands,
            c->wan_bw * 8 / 1e9, c->diloco_h);
  fprintf(f, "\ntraining batch %s tokens per step (%.0f x %d), budget %s tokens, %s",
          atoll_plan_fmt_count(t->batch_tokens, b, sizeof b), t->batch_tokens / t->seq, t->seq,
          atoll_plan_fmt_count(t->token_budget, d, sizeof d),
          t->precision == ATOLL_PREC_FP32 ? "fp32 AdamW (16 B/param)"
                                          : "bf16 mixed precision AdamW (16 B/param at ZeRO-0)");
  /* gradients on the data-parallel wire, where --grad-dtype (or the cpu default) differs */
  double g = atoll_plan_grad_elem_bytes(t);
  if (g != atoll_plan_elem_bytes(t->precision)) fprintf(f, ", %s gradients on the wire", g == 2 ? "bf16" : "fp32");
  fprintf(f, "\n");
}

static void layout_name(const atoll_plan_result *r, char *buf, size_t n) {
  snprintf(buf, n, "dp %d x tp %d x pp %d x cp %d", r->lay.dp, r->lay.tp, r->lay.pp, r->lay.cp);
}

void atoll_plan_print_table(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *rows, int n) {
  char a[32], b[32], c[32], d[32], e[32], g[32];
  int islands = ctx->cluster->islands;
  int cpu = ctx->cluster->acc.is_cpu; /* GFLOP/s rather than TFLOP/s */
  fprintf(f, "\n  #     dp  tp  pp  cp  zero   mb   v  recompute    step     tokens/s  %s   MFU   bubble     days\n",
          cpu ? "GFLOP/s" : "TFLOP/s");
  for (int i = 0; i < n; i++) {
    const atoll_plan_result *r = &rows[i];
    fprintf(f, "%3d %6d %3d %3d %3d %5d %4d %3d  %-9s %9s %10s %8.1f %5.1f%% %7.1f%% %8s%s\n", i + 1, r->lay.dp,
            r->lay.tp, r->lay.pp, r->lay.cp, r->lay.zero_stage, r->lay.mb, r->lay.chunks,
            atoll_plan_recompute_name(r->lay.recompute), atoll_plan_fmt_seconds(r->step_s, a, sizeof a),
            atoll_plan_fmt_count(r->tokens_per_s, b, sizeof b), r->tflops_per_gpu * (cpu ? 1000 : 1), 100 * r->mfu,
            100 * r->bubble, atoll_plan_fmt_days(r->days, c, sizeof c), r->fits ? "" : "  DOES NOT FIT");
  }
  fprintf(f, "\n  #   memory/GPU   weights     grads  optimizer  activations     other   (of %.0f GiB)\n",
          ctx->cluster->acc.mem_bytes / GIB);
  for (int i = 0; i < n; i++) {
    const atoll_plan_result *r = &rows[i];
    fprintf(f, "%3d %12s %9s %9s %10s %12s %9s\n", i + 1, atoll_plan_fmt_bytes(r->mem_total, a, sizeof a),
            atoll_plan_fmt_bytes(r->mem_weights, b, sizeof b), atoll_plan_fmt_bytes(r->mem_grads, c, sizeof c),
            atoll_plan_fmt_bytes(r->mem_optim, d, sizeof d), atoll_plan_fmt_bytes(r->mem_act, e, sizeof e),
            atoll_plan_fmt_bytes(r->mem_buffers + r->mem_outer + r->mem_reserved, g, sizeof g));
  }
  fprintf(f, "\n  #   bytes sent per GPU per step (link)                                          exposed comm%s\n",
          islands > 1 ? "   WAN/island/step" : "");
  for (int i = 0; i < n; i++) {
    const atoll_plan_result *r = &rows[i];
    char tp[48], cp[48], pp[48], dp[48];
    snprintf(tp, sizeof tp, "TP %s%s%s", r->lay.tp > 1 ? fmt_gb(r->bytes_tp, a, sizeof a) : "-",
             r->lay.tp > 1 ? " " : "", r->lay.tp > 1 ? (r->link_tp == ATOLL_LINK_INTRA ? "(intra)" : "(inter)") : "");
    snprintf(cp, sizeof cp, "CP %s%s%s", r->lay.cp > 1 ? fmt_gb(r->bytes_cp, b, sizeof b) : "-",
             r->lay.cp > 1 ? " " : "", r->lay.cp > 1 ? (r->link_cp == ATOLL_LINK_INTRA ? "(intra)" : "(inter)") : "");
    snprintf(pp, sizeof pp, "PP %s%s%s", r->lay.pp > 1 ? fmt_gb(r->bytes_pp, c, sizeof c) : "-",
             r->lay.pp > 1 ? " " : "", r->lay.pp > 1 ? (r->link_pp == ATOLL_LINK_INTRA ? "(intra)" : "(inter)") : "");
    snprintf(dp, sizeof dp, "DP %s%s%s", r->lay.dp > 1 ? fmt_gb(r->bytes_dp, d, sizeof d) : "-",
             r->lay.dp > 1 ? " " : "",
             r->lay.dp > 1 ? (r->link_dp == ATOLL_LINK_INTRA   ? "(intra)"
                              : r->link_dp == ATOLL_LINK_MIXED ? "(mixed)"
                                                               : "(inter)")
                           : "");
    fprintf(f, "%3d   %-19s %-19s %-19s %-20s %9s", i + 1, tp, cp, pp, dp,
            atoll_plan_fmt_seconds(r->x_tp + r->x_cp + r->x_pp + r->x_dp, e, sizeof e));
    if (islands > 1) fprintf(f, "   %s", fmt_gb(r->bytes_wan, g, sizeof g));
    fputc('\n', f);
  }
}

void atoll_plan_print_detail(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *r) {
  char name[96], b[8][32];
  layout_name(r, name, sizeof name);
  double st = r->step_s;
  fprintf(f, "\nbest: %s, ZeRO-%d, micro-batch %d x %d micro-batches, interleave %d, recompute %s\n", name, r->lay.zero_stage,
          r->lay.mb, r->micro_batches, r->lay.chunks, atoll_plan_recompute_name(r->lay.recompute));
  fprintf(f, "  step %s = compute %s (%.0f%%) + bubble %s (%.0f%%) + exposed TP %s, CP %s, PP %s, DP %s + optimizer %s",
          atoll_plan_fmt_seconds(st, b[0], 32), atoll_plan_fmt_seconds(r->t_compute, b[1], 32), 100 * r->t_compute / st,
          atoll_plan_fmt_seconds(r->t_bubble, b[2], 32), 100 * r->t_bubble / st,
          atoll_plan_fmt_seconds(r->x_tp, b[3], 32), atoll_plan_fmt_seconds(r->x_cp, b[4], 32),
          atoll_plan_fmt_seconds(r->x_pp, b[5], 32), atoll_plan_fmt_seconds(r->x_dp, b[6], 32),
          atoll_plan_fmt_seconds(r->t_optim, b[7], 32));
  if (ctx->cluster->islands > 1) fprintf(f, " + island sync %s", atoll_plan_fmt_seconds(r->t_outer_step, b[0], 32));
  int cpu = ctx->cluster->acc.is_cpu;
  fprintf(f,
          "\n  %.*f %s per device of model FLOPs (MFU %.1f%%; with recomputation %.1f%% of peak), %s tokens/s, %s days "
          "for %s tokens\n",
          cpu ? 1 : 0, r->tflops_per_gpu * (cpu ? 1000 : 1), cpu ? "GFLOP/s" : "TFLOP/s", 100 * r->mfu, 100 * r->hfu,
          atoll_plan_fmt_count(r->tokens_per_s, b[1], 32), atoll_plan_fmt_days(r->days, b[3], 32),
          atoll_plan_fmt_count(ctx->train->token_budget, b[2], 32));
  if (ctx->cluster->islands > 1 && !r->lay.island_sync)
    fprintf(
        f,
        "  islands: DiLoCo, outer sync %s every %d steps (utilization %.1f%%); %.0f%% needs %.3g Gbit/s per island\n",
        atoll_plan_fmt_seconds(r->t_outer, b[3], 32), ctx->cluster->diloco_h, 100 * r->wan_util,
        100 * ctx->assume->diloco_util, r->wan_bw_needed * 8 / 1e9);
  else if (ctx->cluster->islands > 1)
    fprintf(f,
            "  islands: data parallel across them, gradients over the WAN every step in %s, %s exposed (utilization "
            "%.1f%%); %.0f%% needs %.3g Gbit/s per island\n",
            atoll_plan_fmt_seconds(r->t_outer, b[3], 32), atoll_plan_fmt_seconds(r->t_outer_step, b[4], 32),
            100 * r->wan_util, 100 * ctx->assume->diloco_util, r->wan_bw_needed * 8 / 1e9);
}

void atoll_plan_print_assumptions(FILE *f, const atoll_plan_ctx *ctx) {
  atoll_plan_named a[32];
  int n = atoll_plan_assumptions(ctx->cluster, ctx->assume, a, 32);
  fprintf(f, "\nassumptions (docs/plan.md; change with --set NAME=VALUE):\n");
  for (int i = 0; i < n; i++) fprintf(f, "  %-15s %-9.4g %-9s %s\n", a[i].name, a[i].value, a[i].unit, a[i].what);
}

/* ----------------------------------------------------------------- explain --- */

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
  layout_name(&r, name, sizeof name);
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
        w->lay.tp, w->lay.tp, fmt_gb(w->bytes_tp, a, sizeof a), atoll_plan_link_name(w->link_tp), w->bw_tp / 1e9,
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
            w->lay.pp, w->pp_stage_layers_first, w->pp_stage_layers_last, fmt_gb(w->bytes_pp, a, sizeof a),
            atoll_plan_link_name(w->link_pp), bub, 100 * w->bubble, atoll_plan_fmt_seconds(w->t_bubble, b, sizeof b));
  } else {
    fprintf(f, "  * No pipeline: no bubble; the %d blocks fit on every GPU (sharded %d ways by tensor parallel).\n",
            m->layers, w->lay.tp);
  }
  if (w->lay.cp > 1)
    fprintf(f,
            "  * Context parallel %d splits each %d-token sequence: %s of K/V all-gathers per GPU per step over %s "
            "links.\n",
            w->lay.cp, t->seq, fmt_gb(w->bytes_cp, a, sizeof a), atoll_plan_link_name(w->link_cp));
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
            fmt_gb(w->bytes_dp, a, sizeof a), atoll_plan_link_name(w->link_dp),
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
              fmt_gb(atoll_plan_ring_allreduce_bytes(c->islands, params * ctx->assume->diloco_bytes), q[0], 32),
              c->wan_bw * 8 / 1e9, atoll_plan_fmt_seconds(w->t_outer, q[1], 32),
              atoll_plan_fmt_seconds(w->t_outer_step, q[2], 32), 100 * w->wan_util, 100 * ctx->assume->diloco_util,
              w->wan_bw_needed * 8 / 1e9, fmt_gb(o.bytes_wan, q[3], 32), atoll_plan_fmt_seconds(o.step_s, a, sizeof a));
    else
      fprintf(f,
              "  * Islands: data parallel spans the %d islands: every step each island sends %s over the WAN\n"
              "    (%s, %s of it exposed). DiLoCo syncing every %d steps would take %s per step.\n",
              c->islands, fmt_gb(w->bytes_wan, q[0], 32), atoll_plan_fmt_seconds(w->t_outer, q[1], 32),
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
    layout_name(r, name, sizeof name);
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
  layout_name(w, wn, sizeof wn);
  layout_name(r, rn, sizeof rn);
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

/* -------------------------------------------------------------------- JSON --- */

cJSON *atoll_plan_result_json(const atoll_plan_ctx *ctx, const atoll_plan_result *r) {
  (void)ctx;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "dp", r->lay.dp);
  cJSON_AddNumberToObject(o, "tp", r->lay.tp);
  cJSON_AddNumberToObject(o, "pp", r->lay.pp);
  cJSON_AddNumberToObject(o, "cp", r->lay.cp);
  cJSON_AddNumberToObject(o, "zero_stage", r->lay.zero_stage);
  cJSON_AddNumberToObject(o, "microbatch", r->lay.mb);
  cJSON_AddNumberToObject(o, "micro_batches", r->micro_batches);
  cJSON_AddNumberToObject(o, "interleave", r->lay.chunks);
  cJSON_AddStringToObject(o, "recompute", atoll_plan_recompute_name(r->lay.recompute));
  cJSON_AddNumberToObject(o, "gpus", r->gpus);
  cJSON_AddBoolToObject(o, "fits", r->fits);
  if (r->why[0]) cJSON_AddStringToObject(o, "note", r->why);
  cJSON_AddNumberToObject(o, "memory_per_gpu_bytes", r->mem_total);
  cJSON *mem = cJSON_AddObjectToObject(o, "memory");
  cJSON_AddNumberToObject(mem, "weights", r->mem_weights);
  cJSON_AddNumberToObject(mem, "grads", r->mem_grads);
  cJSON_AddNumberToObject(mem, "optimizer", r->mem_optim);
  cJSON_AddNumberToObject(mem, "activations", r->mem_act);
  cJSON_AddNumberToObject(mem, "zero3_buffers", r->mem_buffers);
  cJSON_AddNumberToObject(mem, "diloco_outer_state", r->mem_outer);
  cJSON_AddNumberToObject(mem, "reserved", r->mem_reserved);
  cJSON_AddStringToObject(mem, "stage", r->mem_pp_stage ? "last" : "first");
  cJSON_AddNumberToObject(o, "params_per_gpu", r->params_per_gpu);
  cJSON_AddNumberToObject(o, "stage_layers_first", r->pp_stage_layers_first);
  cJSON_AddNumberToObject(o, "stage_layers_last", r->pp_stage_layers_last);
  cJSON_AddNumberToObject(o, "step_seconds", r->step_s);
  cJSON_AddNumberToObject(o, "tflops_per_gpu", r->tflops_per_gpu);
  cJSON_AddNumberToObject(o, "mfu", r->mfu);
  cJSON_AddNumberToObject(o, "hfu", r->hfu);
  cJSON_AddNumberToObject(o, "bubble", r->bubble);
  cJSON_AddNumberToObject(o, "tokens_per_second", r->tokens_per_s);
  cJSON_AddNumberToObject(o, "batch_tokens", r->batch_tokens);
  cJSON_AddNumberToObject(o, "sequences_per_dp_rank", r->seqs_per_rank);
  cJSON_AddNumberToObject(o, "days", r->days);
  cJSON *tm = cJSON_AddObjectToObject(o, "time_seconds");
  cJSON_AddNumberToObject(tm, "compute", r->t_compute);
  cJSON_AddNumberToObject(tm, "bubble", r->t_bubble);
  cJSON_AddNumberToObject(tm, "tp_exposed", r->x_tp);
  cJSON_AddNumberToObject(tm, "cp_exposed", r->x_cp);
  cJSON_AddNumberToObject(tm, "pp_exposed", r->x_pp);
  cJSON_AddNumberToObject(tm, "dp_exposed", r->x_dp);
  cJSON_AddNumberToObject(tm, "optimizer", r->t_optim);
  cJSON_AddNumberToObject(tm, "outer_sync_per_step", r->t_outer_step);
  cJSON *blk = cJSON_AddObjectToObject(tm, "one_block_one_microbatch");
  cJSON_AddNumberToObject(blk, "total", r->t_layer_compute);
  cJSON_AddNumberToObject(blk, "matmul", r->t_layer_mm);
  cJSON_AddNumberToObject(blk, "attention", r->t_layer_attn);
  cJSON_AddNumberToObject(blk, "elementwise", r->t_layer_elem);
  cJSON_AddNumberToObject(tm, "lm_head_one_microbatch", r->t_head_mb);
  cJSON *cm = cJSON_AddObjectToObject(o, "bytes_per_gpu_per_step");
  const char *ax[] = {"tp", "cp", "pp", "dp"};
  double by[] = {r->bytes_tp, r->bytes_cp, r->bytes_pp, r->bytes_dp}, ts[] = {r->t_tp, r->t_cp, r->t_pp, r->t_dp},
         xs[] = {r->x_tp, r->x_cp, r->x_pp, r->x_dp}, bw[] = {r->bw_tp, r->bw_cp, r->bw_pp, r->bw_dp};
  int lk[] = {r->link_tp, r->link_cp, r->link_pp, r->link_dp};
  for (int i = 0; i < 4; i++) {
    cJSON *e = cJSON_AddObjectToObject(cm, ax[i]);
    cJSON_AddNumberToObject(e, "bytes", by[i]);
    cJSON_AddStringToObject(e, "link", atoll_plan_link_name(lk[i]));
    cJSON_AddNumberToObject(e, "effective_bytes_per_second", bw[i]);
    cJSON_AddNumberToObject(e, "seconds", ts[i]);
    cJSON_AddNumberToObject(e, "exposed_seconds", xs[i]);
  }
  if (ctx->cluster->islands > 1) {
    cJSON_AddStringToObject(o, "island_sync", r->lay.island_sync ? "every-step" : "diloco");
    cJSON *d = cJSON_AddObjectToObject(o, "islands");
    cJSON_AddNumberToObject(d, "wan_bytes_per_island_per_step", r->bytes_wan);
    cJSON_AddNumberToObject(d, "sync_seconds", r->t_outer);
    cJSON_AddNumberToObject(d, "sync_seconds_per_step", r->t_outer_step);
    cJSON_AddNumberToObject(d, "utilization", r->wan_util);
    cJSON_AddNumberToObject(d, "wan_bits_per_second_needed", r->wan_bw_needed * 8);
  }
  return o;
}

cJSON *atoll_plan_context_json(const atoll_plan_ctx *ctx) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_cluster *c = ctx->cluster;
  const atoll_plan_train *t = ctx->train;
  cJSON *o = cJSON_CreateObject();
  cJSON *jm = cJSON_AddObjectToObject(o, "model");
  cJSON_AddStringToObject(jm, "name", m->name);
  cJSON_AddStringToObject(jm, "arch", arch_name(m));
  cJSON_AddNumberToObject(jm, "layers", m->layers);
  cJSON_AddNumberToObject(jm, "dim", m->dim);
  cJSON_AddNumberToObject(jm, "heads", m->heads);
  cJSON_AddNumberToObject(jm, "kv_heads", m->kv_heads);
  cJSON_AddNumberToObject(jm, "ffn", m->ffn);
  cJSON_AddNumberToObject(jm, "vocab", m->vocab);
  cJSON_AddBoolToObject(jm, "tied", m->tied);
  cJSON_AddNumberToObject(jm, "params", atoll_plan_params(m));
  cJSON_AddNumberToObject(jm, "flops_per_token", atoll_plan_flops_per_token(m, t->seq));
  cJSON *jc = cJSON_AddObjectToObject(o, "cluster");
  cJSON_AddStringToObject(jc, "accel", c->acc.name);
  cJSON_AddNumberToObject(jc, "gpus", c->gpus);
  cJSON_AddNumberToObject(jc, "gpus_per_node", c->gpus_per_node);
  cJSON_AddNumberToObject(jc, "peak_flops", c->acc.peak_flops);
  cJSON_AddNumberToObject(jc, "memory_bytes", c->acc.mem_bytes);
  cJSON_AddNumberToObject(jc, "hbm_bytes_per_second", c->acc.hbm_bw);
  cJSON_AddNumberToObject(jc, "intra_bytes_per_second", c->intra_bw);
  cJSON_AddNumberToObject(jc, "inter_bytes_per_second", c->inter_bw);
  cJSON_AddNumberToObject(jc, "intra_latency_seconds", c->intra_lat);
  cJSON_AddNumberToObject(jc, "inter_latency_seconds", c->inter_lat);
  cJSON_AddNumberToObject(jc, "islands", c->islands);
  if (c->islands > 1) {
    cJSON_AddNumberToObject(jc, "wan_bytes_per_second", c->wan_bw);
    cJSON_AddNumberToObject(jc, "wan_latency_seconds", c->wan_lat);
    cJSON_AddNumberToObject(jc, "diloco_h", c->diloco_h);
  }
  cJSON *jt = cJSON_AddObjectToObject(o, "training");
  cJSON_AddNumberToObject(jt, "seq", t->seq);
  cJSON_AddNumberToObject(jt, "batch_tokens", t->batch_tokens);
  cJSON_AddNumberToObject(jt, "token_budget", t->token_budget);
  cJSON_AddStringToObject(jt, "precision", t->precision == ATOLL_PREC_FP32 ? "fp32" : "bf16");
  cJSON_AddStringToObject(jt, "grad_dtype", atoll_plan_grad_elem_bytes(t) == 2 ? "bf16" : "fp32");
  cJSON *ja = cJSON_AddObjectToObject(o, "assumptions");
  atoll_plan_named a[32];
  int n = atoll_plan_assumptions(c, ctx->assume, a, 32);
  for (int i = 0; i < n; i++) {
    cJSON *e = cJSON_AddObjectToObject(ja, a[i].name);
    cJSON_AddNumberToObject(e, "value", a[i].value);
    cJSON_AddStringToObject(e, "unit", a[i].unit);
    cJSON_AddStringToObject(e, "meaning", a[i].what);
  }
  return o;
}

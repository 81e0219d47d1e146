/* Output of the planner: the header (model, cluster, training), the table of the best
 * layouts (time, memory breakdown, traffic per link), the assumptions block and --json;
 * --explain and --versus in plain words are in src/plan/explain.c. Memory is in GiB
 * (2^30 bytes), traffic and bandwidth in decimal GB and GB/s, as their hardware is
 * specified. */
#include "atoll/plan.h"
#include "plan/eval.h" /* atoll_plan_grad_elem_bytes */
#include "plan/report.h"

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

/* decimal bytes for traffic (report.h) */
const char *atoll_plan_fmt_gb(double b, char *buf, size_t n) {
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

/* the layout's mesh in words (report.h) */
void atoll_plan_layout_name(const atoll_plan_result *r, char *buf, size_t n) {
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
    snprintf(tp, sizeof tp, "TP %s%s%s", r->lay.tp > 1 ? atoll_plan_fmt_gb(r->bytes_tp, a, sizeof a) : "-",
             r->lay.tp > 1 ? " " : "", r->lay.tp > 1 ? (r->link_tp == ATOLL_LINK_INTRA ? "(intra)" : "(inter)") : "");
    snprintf(cp, sizeof cp, "CP %s%s%s", r->lay.cp > 1 ? atoll_plan_fmt_gb(r->bytes_cp, b, sizeof b) : "-",
             r->lay.cp > 1 ? " " : "", r->lay.cp > 1 ? (r->link_cp == ATOLL_LINK_INTRA ? "(intra)" : "(inter)") : "");
    snprintf(pp, sizeof pp, "PP %s%s%s", r->lay.pp > 1 ? atoll_plan_fmt_gb(r->bytes_pp, c, sizeof c) : "-",
             r->lay.pp > 1 ? " " : "", r->lay.pp > 1 ? (r->link_pp == ATOLL_LINK_INTRA ? "(intra)" : "(inter)") : "");
    snprintf(dp, sizeof dp, "DP %s%s%s", r->lay.dp > 1 ? atoll_plan_fmt_gb(r->bytes_dp, d, sizeof d) : "-",
             r->lay.dp > 1 ? " " : "",
             r->lay.dp > 1 ? (r->link_dp == ATOLL_LINK_INTRA   ? "(intra)"
                              : r->link_dp == ATOLL_LINK_MIXED ? "(mixed)"
                                                               : "(inter)")
                           : "");
    fprintf(f, "%3d   %-19s %-19s %-19s %-20s %9s", i + 1, tp, cp, pp, dp,
            atoll_plan_fmt_seconds(r->x_tp + r->x_cp + r->x_pp + r->x_dp, e, sizeof e));
    if (islands > 1) fprintf(f, "   %s", atoll_plan_fmt_gb(r->bytes_wan, g, sizeof g));
    fputc('\n', f);
  }
}

void atoll_plan_print_detail(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *r) {
  char name[96], b[8][32];
  atoll_plan_layout_name(r, name, sizeof name);
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
  atoll_plan_print_goodput(f, ctx, r);
}

void atoll_plan_print_assumptions(FILE *f, const atoll_plan_ctx *ctx) {
  atoll_plan_named a[32];
  int n = atoll_plan_assumptions(ctx->cluster, ctx->assume, a, 32);
  fprintf(f, "\nassumptions (docs/plan.md; change with --set NAME=VALUE):\n");
  for (int i = 0; i < n; i++) fprintf(f, "  %-15s %-9.4g %-9s %s\n", a[i].name, a[i].value, a[i].unit, a[i].what);
}

/* -------------------------------------------------------------------- JSON --- */

cJSON *atoll_plan_result_json(const atoll_plan_ctx *ctx, const atoll_plan_result *r) {
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
  cJSON *gp = atoll_plan_goodput_json(ctx, r);
  if (gp) cJSON_AddItemToObject(o, "failures", gp);
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
  if (ctx->failure) {
    const atoll_plan_failure *fl = ctx->failure;
    cJSON *jf = cJSON_AddObjectToObject(o, "failures");
    cJSON_AddNumberToObject(jf, "accel_per_1000_days", fl->accel_per_kday);
    cJSON_AddNumberToObject(jf, "node_per_1000_days", fl->node_per_kday);
    cJSON_AddNumberToObject(jf, "planned_per_1000_node_days", fl->planned_per_kday);
    cJSON_AddNumberToObject(jf, "checkpoint_bytes_per_second", fl->ckpt_bw);
    cJSON_AddNumberToObject(jf, "restart_fixed_seconds", fl->restart_s);
    if (fl->ckpt_every_s > 0) cJSON_AddNumberToObject(jf, "checkpoint_every_seconds", fl->ckpt_every_s);
  }
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

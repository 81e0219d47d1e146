/* Failures, checkpoints and goodput of a synchronous job (docs/plan.md, "Failures and
 * goodput"). Unexpected interruptions arrive at a rate that grows with the
 * accelerators and the nodes (a Poisson process: each stops the whole job); the job
 * writes a checkpoint of C seconds every tau seconds of work and, after an interruption,
 * restarts in R seconds from the last one, losing the work since. Daly's model of that
 * (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
 * dumps", FGCS 22(3)) gives the expected share of wall time that trains and the tau that
 * maximizes it; planned stops (maintenance) lose no work but cost a checkpoint and a
 * restart each. */
#include "atoll/plan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define DAY 86400.0

/* Llama 3 405B's 54-day snapshot on 16,384 H100s in 2,048 nodes (arXiv 2407.21783,
 * section 3.3.4): 466 interruptions, 47 planned and 419 unexpected; GPU issues were
 * 58.7% of the unexpected. Per accelerator: 0.587 x 419 = 246 over 16,384 x 54
 * accelerator-days = 0.278 per 1000; per node, the other 173 over 2,048 x 54 node-days
 * = 1.56 per 1000; planned, 47 over 2,048 x 54 = 0.425 per 1000 node-days. Storage:
 * Tectonic's 2 TB/s sustained (section 3.3.1). The restart's fixed cost is fitted on
 * that run's ">90% effective training time" (docs/plan.md). */
void atoll_plan_failure_defaults(atoll_plan_failure *f) {
  memset(f, 0, sizeof *f);
  f->accel_per_kday = 0.278;
  f->node_per_kday = 1.56;
  f->planned_per_kday = 0.425;
  f->ckpt_bw = 2e12;
  f->restart_s = 600;
  f->ckpt_every_s = 0;
}

double atoll_plan_daly_interval(double c, double m) {
  if (c >= 2 * m) return m;
  double x = c / (2 * m);
  return sqrt(2 * c * m) * (1 + sqrt(x) / 3 + x / 9) - c;
}

double atoll_plan_daly_goodput(double tau, double c, double r, double m) {
  if (!(m > 0) || isinf(m)) return tau / (tau + c); /* no failures: only the checkpoints cost */
  return tau / (m * exp(r / m) * expm1((tau + c) / m));
}

double atoll_plan_checkpoint_bytes(const atoll_plan_model *m, atoll_plan_precision p) {
  return atoll_plan_params(m) * (p == ATOLL_PREC_FP32 ? 4.0 + 8.0 : 2.0 + 12.0);
}

void atoll_plan_goodput_eval(const atoll_plan_failure *f, double gpus, double nodes, double state_bytes,
                             double step_s, atoll_plan_goodput *g) {
  memset(g, 0, sizeof *g);
  g->failures_per_day = (gpus * f->accel_per_kday + nodes * f->node_per_kday) / 1000;
  g->planned_per_day = nodes * f->planned_per_kday / 1000;
  g->mtbf_s = g->failures_per_day > 0 ? DAY / g->failures_per_day : INFINITY;
  g->state_bytes = state_bytes;
  g->write_s = state_bytes / f->ckpt_bw;
  g->restart_s = f->restart_s + g->write_s; /* read back at the same bandwidth */
  g->young_s = sqrt(2 * g->write_s * g->mtbf_s);
  double tau = f->ckpt_every_s > 0 ? f->ckpt_every_s : atoll_plan_daly_interval(g->write_s, g->mtbf_s);
  /* checkpoints fall between steps: a whole number of them, at least one */
  if (step_s > 0 && isfinite(tau)) tau = fmax(1, floor(tau / step_s + 0.5)) * step_s;
  if (!(tau > 0)) tau = 1; /* no step time and nothing to write: as often as we like */
  g->interval_s = tau;
  double daly = isinf(tau) ? 1 : atoll_plan_daly_goodput(tau, g->write_s, g->restart_s, g->mtbf_s);
  double planned = g->planned_per_day / DAY * (g->write_s + g->restart_s);
  g->goodput = daly * fmax(0, 1 - planned);
}

int atoll_plan_goodput_of(const atoll_plan_ctx *ctx, const atoll_plan_result *r, atoll_plan_goodput *g) {
  memset(g, 0, sizeof *g);
  if (!ctx->failure) return 0;
  const atoll_plan_cluster *c = ctx->cluster;
  double gpus = r->gpus > 0 ? r->gpus : c->gpus, nodes = ceil(gpus / (c->gpus_per_node > 0 ? c->gpus_per_node : 1));
  atoll_plan_goodput_eval(ctx->failure, gpus, nodes, atoll_plan_checkpoint_bytes(ctx->model, ctx->train->precision),
                          r->step_s, g);
  return 1;
}

/* A duration for people: "42 s", "7.5 min", "3.1 h", "5.5 days". */
static const char *fmt_span(double s, char *buf, size_t n) {
  if (isinf(s)) snprintf(buf, n, "never");
  else if (s < 1) snprintf(buf, n, "%.3g ms", s * 1000);
  else if (s < 120) snprintf(buf, n, "%.3g s", s);
  else if (s < 7200) snprintf(buf, n, "%.3g min", s / 60);
  else if (s < 2 * DAY) snprintf(buf, n, "%.3g h", s / 3600);
  else snprintf(buf, n, "%.3g days", s / DAY);
  return buf;
}

void atoll_plan_print_goodput(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *r) {
  atoll_plan_goodput g;
  if (!atoll_plan_goodput_of(ctx, r, &g)) return;
  char b[6][32];
  fprintf(f, "  failures: %.3g interruptions a day (mean %s apart) + %.3g planned stops; checkpoint %s: write %s, "
             "restart %s\n",
          g.failures_per_day, fmt_span(g.mtbf_s, b[0], 32), g.planned_per_day, atoll_plan_fmt_bytes(g.state_bytes, b[1], 32),
          fmt_span(g.write_s, b[2], 32), fmt_span(g.restart_s, b[3], 32));
  double steps = r->step_s > 0 ? g.interval_s / r->step_s : 0;
  fprintf(f, "  goodput %.1f%%: checkpoint every %s (%.0f steps; %s, Young: %s), %s days for the budget with failures\n",
          100 * g.goodput, fmt_span(g.interval_s, b[4], 32), steps,
          ctx->failure->ckpt_every_s > 0 ? "--ckpt-every" : "Daly's optimum", fmt_span(g.young_s, b[5], 32),
          atoll_plan_fmt_days(g.goodput > 0 ? r->days / g.goodput : INFINITY, b[0], 32));
}

cJSON *atoll_plan_goodput_json(const atoll_plan_ctx *ctx, const atoll_plan_result *r) {
  atoll_plan_goodput g;
  if (!atoll_plan_goodput_of(ctx, r, &g)) return NULL;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "goodput", g.goodput);
  cJSON_AddNumberToObject(o, "interruptions_per_day", g.failures_per_day);
  cJSON_AddNumberToObject(o, "planned_stops_per_day", g.planned_per_day);
  if (isfinite(g.mtbf_s)) cJSON_AddNumberToObject(o, "mtbf_seconds", g.mtbf_s);
  cJSON_AddNumberToObject(o, "checkpoint_bytes", g.state_bytes);
  cJSON_AddNumberToObject(o, "checkpoint_write_seconds", g.write_s);
  cJSON_AddNumberToObject(o, "restart_seconds", g.restart_s);
  if (isfinite(g.interval_s)) cJSON_AddNumberToObject(o, "checkpoint_interval_seconds", g.interval_s);
  if (isfinite(g.young_s)) cJSON_AddNumberToObject(o, "young_interval_seconds", g.young_s);
  cJSON_AddStringToObject(o, "interval_rule", ctx->failure->ckpt_every_s > 0 ? "fixed" : "daly");
  if (g.goodput > 0) cJSON_AddNumberToObject(o, "days_with_failures", r->days / g.goodput);
  return o;
}

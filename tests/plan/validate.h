/* Plans one validation run (tests/plan/runs.h): the published mesh with the planner's
 * choice of what the paper does not fix, and the free search on the same cluster and
 * batch. Shared by tests/test_plan_validate.c and bench/plan/fit.c. */
#ifndef ATOLL_TESTS_PLAN_VALIDATE_H
#define ATOLL_TESTS_PLAN_VALIDATE_H

#include "runs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Published tokens per second per GPU, from the paper's own convention. */
static double plan_run_published_tps(const plan_run *w) {
  double l = w->layers, h = w->dim, s = w->seq, V = w->vocab;
  switch (w->conv) {
  case PUB_TFLOPS_MEGATRON: return w->published * 1e12 / (96.0 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)));
  case PUB_STEP_S: return (double)w->seqs * w->seq / w->published / w->gpus;
  case PUB_TOKENS: return w->published;
  default: {
    atoll_plan_model m;
    memset(&m, 0, sizeof m);
    m.arch = w->arch, m.layers = w->layers, m.dim = w->dim, m.heads = w->heads, m.kv_heads = w->kv_heads;
    m.ffn = w->ffn, m.vocab = w->vocab, m.tied = w->tied;
    return w->published * 1e12 / atoll_plan_flops_per_token(&m, w->seq);
  }
  }
}

typedef struct {
  double published_tps, predicted_tps, err;
  atoll_plan_result at_published; /* the published mesh, best settings */
  atoll_plan_result searched;     /* the search's first */
  int ok;                         /* both plans exist */
} plan_run_outcome;

/* How a row is planned: the catalog's model, or (for the ablation in docs/plan.md) the
 * seed's: one eta_mm per accelerator (0.60 H100, 0.65 A100), no shape model; with or
 * without the row's software flags. */
typedef struct {
  int seed_model; /* 1: the seed's one-constant model */
  int no_stack;   /* 1: every row on today's software (STACK_2023) */
} plan_run_mode;

static int plan_run_eval_mode(const plan_run *w, double clock_eff, double k_over, int search, plan_run_mode mode,
                              plan_run_outcome *o, atoll_err *err);

/* clock_eff, k_over < 0: the catalog's values. */
static int plan_run_eval(const plan_run *w, double clock_eff, double k_over, int search, plan_run_outcome *o,
                         atoll_err *err) {
  plan_run_mode mode = {0, 0};
  return plan_run_eval_mode(w, clock_eff, k_over, search, mode, o, err);
}

static int plan_run_eval_mode(const plan_run *w, double clock_eff, double k_over, int search, plan_run_mode mode,
                              plan_run_outcome *o, atoll_err *err) {
  memset(o, 0, sizeof *o);
  atoll_plan_model m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "%s", w->name);
  m.arch = w->arch, m.layers = w->layers, m.dim = w->dim, m.heads = w->heads, m.kv_heads = w->kv_heads;
  m.ffn = w->ffn, m.vocab = w->vocab, m.tied = w->tied, m.context = w->seq, m.seq = w->seq;
  atoll_plan_accel a;
  if (atoll_plan_accel_find(w->accel, &a, err)) return -1;
  if (clock_eff >= 0) a.clock_eff = clock_eff;
  if (k_over >= 0) a.mm_k_over = k_over;
  if (mode.seed_model) a.sms = 0, a.clock_eff = 1, a.eta_mm = strstr(w->accel, "a100") ? 0.65 : 0.60;
  if (w->hbm_tbs > 0) a.hbm_bw = w->hbm_tbs * 1e12, a.elem_bw = 0.8 * a.hbm_bw; /* elem_bw: 0.8 x HBM (catalog.c) */
  if (w->mem_gib > 0) a.mem_bytes = w->mem_gib * 1024.0 * 1024 * 1024;
  atoll_plan_cluster c;
  atoll_plan_cluster_default(&c, &a, w->gpus);
  atoll_plan_train t = {w->seq, (double)w->seqs * w->seq, 1e12, ATOLL_PREC_BF16, 0};
  atoll_plan_assume as;
  atoll_plan_assume_defaults(&as);
  if (w->stack == STACK_2021 && !mode.no_stack)
    as.attn_fused = 0, as.seq_par = 0, as.tp_regather = 0, as.tp_overlap = 0;
  atoll_plan_ctx ctx = {&m, &c, &t, &as, NULL};
  atoll_plan_fixed f;
  atoll_plan_fixed_none(&f);
  f.tp = w->tp, f.pp = w->pp, f.cp = w->cp, f.dp = w->dp;
  f.recompute = w->recompute, f.zero_stage = w->zero, f.chunks = w->chunks;
  atoll_plan_ranking rk;
  if (atoll_plan_search(&ctx, &f, &rk, err)) return -1;
  if (rk.nbest < 1) {
    atoll_plan_ranking_free(&rk);
    return atoll_fail(err, "%s: the published layout does not fit (needs %.1f GiB)", w->name,
                      rk.smallest.mem_total / (1024.0 * 1024 * 1024));
  }
  o->at_published = rk.best[0];
  atoll_plan_ranking_free(&rk);
  o->published_tps = plan_run_published_tps(w);
  o->predicted_tps = o->at_published.tokens_per_s / o->at_published.gpus;
  o->err = o->predicted_tps / o->published_tps - 1;
  if (search) {
    atoll_plan_fixed none;
    atoll_plan_fixed_none(&none);
    if (atoll_plan_search(&ctx, &none, &rk, err)) return -1;
    if (rk.nbest < 1) {
      atoll_plan_ranking_free(&rk);
      return atoll_fail(err, "%s: the search found nothing that fits", w->name);
    }
    o->searched = rk.best[0];
    atoll_plan_ranking_free(&rk);
  }
  o->ok = 1;
  return 0;
}

/* The largest |error| (and the rms) over the fit rows at these constants. */
static double plan_fit_worst(double clock, double k, double *rms) {
  double worst = 0, sum = 0;
  int n = 0;
  for (int i = 0; i < PLAN_NRUNS; i++) {
    if (!PLAN_RUNS[i].fit) continue;
    plan_run_outcome o;
    atoll_err err;
    if (plan_run_eval(&PLAN_RUNS[i], clock, k, 0, &o, &err)) return 1e30;
    if (fabs(o.err) > worst) worst = fabs(o.err);
    sum += o.err * o.err, n++;
  }
  *rms = n ? sqrt(sum / n) : 0;
  return worst;
}

/* The fit: the grid point (clock_eff 0.60..1.00 by 0.01, mm_k_over 0..256 by 16) with
 * the smallest largest |error| on the fit rows (the first such point on ties). */
static double plan_fit(double *clock, double *k) {
  double best = 1e30, rms;
  for (int ki = 0; ki <= 16; ki++)
    for (int ci = 60; ci <= 100; ci++) {
      double w = plan_fit_worst(ci / 100.0, 16.0 * ki, &rms);
      if (w < best - 1e-12) best = w, *clock = ci / 100.0, *k = 16.0 * ki;
    }
  return best;
}

#endif

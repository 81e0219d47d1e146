/* Layout search: enumerate DP x TP x PP x CP meshes that use the cluster (or the sizes
 * the caller fixed), and for each mesh the ZeRO stage, micro-batch, interleaving and
 * recomputation; keep the fastest fitting setting per mesh; rank meshes by time per
 * token. Also the two questions of the issue: the fewest devices that hold a model,
 * and days to train by device count. */
#include "atoll/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TP 64 /* tensor parallel beyond 64 ranks is never competitive */
#define MAX_CP 64
#define MAX_CHUNKS 16  /* chunks per pp_stage (interleaved pipeline) */
#define MAX_MB 64 /* sequences per micro-batch */

void atoll_plan_fixed_none(atoll_plan_fixed *f) {
  f->dp = f->tp = f->pp = f->cp = 0;
  f->zero_stage = -1;
  f->mb = 0;
  f->chunks = 0;
  f->recompute = -1;
  f->island_sync = -1;
}

void atoll_plan_ranking_free(atoll_plan_ranking *r) {
  free(r->best);
  memset(r, 0, sizeof *r);
}

static double per_token(const atoll_plan_result *r) { return r->step_s / r->batch_tokens; }

static double traffic(const atoll_plan_result *r) { return r->bytes_tp + r->bytes_cp + r->bytes_pp + r->bytes_dp; }

/* Settings of one mesh within this fraction of each other's time are a tie: the model
 * cannot tell them apart, and the one that moves fewer bytes (then uses less memory)
 * is the better choice (e.g. ZeRO-1 over ZeRO-3 when both hide their traffic). */
#define TIE 0.002

/* a better than b: faster per token, then fewer bytes sent, then less memory */
static int better_setting(const atoll_plan_result *a, const atoll_plan_result *b) {
  double ta = per_token(a), tb = per_token(b);
  if (ta < tb * (1 - TIE)) return 1;
  if (tb < ta * (1 - TIE)) return 0;
  double xa = traffic(a), xb = traffic(b);
  if (xa < xb * (1 - 1e-6)) return 1;
  if (xb < xa * (1 - 1e-6)) return 0;
  if (a->mem_total != b->mem_total) return a->mem_total < b->mem_total;
  return ta < tb;
}

/* ranking of meshes: faster per token, then less memory */
static int better(const atoll_plan_result *a, const atoll_plan_result *b) {
  double ta = per_token(a), tb = per_token(b);
  if (ta < tb * (1 - 1e-9)) return 1;
  if (tb < ta * (1 - 1e-9)) return 0;
  return a->mem_total < b->mem_total;
}

static int cmp_result(const void *pa, const void *pb) {
  const atoll_plan_result *a = pa, *b = pb;
  if (better(a, b)) return -1;
  if (better(b, a)) return 1;
  return 0;
}

typedef struct {
  const atoll_plan_ctx *ctx;
  const atoll_plan_fixed *fix;
  atoll_plan_ranking *out;
  int cap;
  char first_why[200];
  int have_why;
} searcher;

/* Every setting of one mesh: keep the best that fits, track the lightest overall.
 * Fails only when out of memory. */
static int search_mesh(searcher *S, int dp, int tp, int pp, int cp, atoll_err *err) {
  const atoll_plan_ctx *ctx = S->ctx;
  const atoll_plan_fixed *f = S->fix;
  atoll_plan_ranking *o = S->out;
  atoll_plan_result best;
  int have = 0;
  int islands = ctx->cluster->islands > 0 ? ctx->cluster->islands : 1;
  double seqs = ctx->train->batch_tokens / ctx->train->seq;
  int seqs_per_rank = (int)fmax(1, floor(seqs / ((double)islands * dp) + 0.5));
  for (int zero_stage = 0; zero_stage <= 3; zero_stage++) {
    if (f->zero_stage >= 0 ? zero_stage != f->zero_stage : ((long)dp * cp == 1 && zero_stage > 0)) continue;
    for (int mb = 1; mb <= seqs_per_rank && mb <= (f->mb ? f->mb : MAX_MB); mb++) {
      if (f->mb ? mb != f->mb : seqs_per_rank % mb) continue;
      for (int chunks = 1; chunks <= (pp > 1 ? MAX_CHUNKS : 1); chunks++) {
        /* at most layers + 2 chunks: the embedding and the head may be chunks of their own */
        if (f->chunks ? chunks != f->chunks : (chunks > 1 && (chunks * pp > ctx->model->layers + 2))) continue;
        /* recomputation x (with islands) DiLoCo or synchronous across islands */
        int syncs = islands > 1 ? 2 : 1;
        for (int setting = 0; setting < 3 * syncs; setting++) {
          int recompute = setting / syncs, sync = setting % syncs;
          if (f->recompute >= 0 && recompute != f->recompute) continue;
          if (syncs > 1 && f->island_sync >= 0 && sync != f->island_sync) continue;
          atoll_plan_layout lay = {dp, tp, pp, cp, zero_stage, mb, chunks, recompute, sync};
          atoll_plan_result r;
          atoll_plan_evaluate(ctx, &lay, &r);
          o->evaluated++;
          if (!r.valid) {
            if (!S->have_why) {
              memcpy(S->first_why, r.why, sizeof S->first_why);
              S->have_why = 1;
            }
            continue;
          }
          o->nvalid++;
          if (o->nvalid == 1 || r.mem_total < o->smallest.mem_total) o->smallest = r;
          if (!r.fits) continue;
          o->nfit++;
          if (!have || better_setting(&r, &best)) best = r, have = 1;
        }
      }
    }
  }
  if (!have) return 0;
  if (o->nbest == S->cap) {
    int cap = S->cap ? 2 * S->cap : 64;
    atoll_plan_result *grown = realloc(o->best, sizeof(atoll_plan_result) * (size_t)cap);
    if (!grown) return atoll_fail(err, "out of memory ranking %d layouts", o->nbest + 1);
    o->best = grown;
    S->cap = cap;
  }
  o->best[o->nbest++] = best;
  return 0;
}

static void divisors_upto(int n, int cap, int *out, int *k) {
  *k = 0;
  for (int d = 1; d <= n && d <= cap; d++)
    if (n % d == 0) out[(*k)++] = d;
}

/* Refuses fixed sizes (--dp --tp --pp --cp) that no layout of the cluster can have. */
static int check_fixed(const atoll_plan_ctx *ctx, const atoll_plan_fixed *fix, int islands, int island_gpus,
                       atoll_err *err) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_cluster *c = ctx->cluster;
  if (fix->pp > m->layers)
    return atoll_fail(err, "--pp %d: more pipeline stages than the model's %d layers", fix->pp, m->layers);
  if (fix->tp && m->heads % fix->tp)
    return atoll_fail(err, "--tp %d does not divide the model's %d attention heads", fix->tp, m->heads);
  if (fix->cp > 1 && ctx->train->seq % (2 * fix->cp))
    return atoll_fail(err, "--cp %d: the sequence length %d must split into 2 x cp = %d equal chunks", fix->cp,
                      ctx->train->seq, 2 * fix->cp);
  double fixed_prod =
      (double)(fix->dp ? fix->dp : 1) * (fix->tp ? fix->tp : 1) * (fix->pp ? fix->pp : 1) * (fix->cp ? fix->cp : 1);
  if (fixed_prod > island_gpus) {
    char what[160] = "";
    const char *names[4] = {"dp", "tp", "pp", "cp"};
    int vals[4] = {fix->dp, fix->tp, fix->pp, fix->cp};
    for (int i = 0; i < 4; i++)
      if (vals[i])
        snprintf(what + strlen(what), sizeof what - strlen(what), "%s--%s %d", what[0] ? " " : "", names[i], vals[i]);
    return atoll_fail(err, "%s needs %.0f devices%s, the cluster has %d (--gpus)", what, fixed_prod * islands,
                      islands > 1 ? " over all islands" : "", c->gpus);
  }
  int all_fixed = fix->dp && fix->tp && fix->pp && fix->cp;
  if (!all_fixed && island_gpus % (long)fixed_prod)
    return atoll_fail(err,
                      "the fixed sizes (product %.0f) do not divide the %d devices%s; fix all of --dp --tp --pp --cp "
                      "to use part of the cluster",
                      fixed_prod, island_gpus, islands > 1 ? " of an island" : "");
  return 0;
}

int atoll_plan_search(const atoll_plan_ctx *ctx, const atoll_plan_fixed *fix, atoll_plan_ranking *out, atoll_err *err) {
  memset(out, 0, sizeof *out);
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_cluster *c = ctx->cluster;
  int islands = c->islands > 0 ? c->islands : 1;
  if (c->gpus < 1) return atoll_fail(err, "--gpus: need at least 1 device, got %d", c->gpus);
  if (c->gpus % islands)
    return atoll_fail(err, "--islands %d: the cluster's %d devices do not split into equal islands", islands, c->gpus);
  int island_gpus = c->gpus / islands; /* devices per island */
  if (check_fixed(ctx, fix, islands, island_gpus, err)) return -1;
  int all_fixed = fix->dp && fix->tp && fix->pp && fix->cp;
  searcher S = {ctx, fix, out, 0, "", 0};
  int tps[64], ntp, cps[8], ncp = 0, pps[256], npp;
  if (fix->tp)
    tps[0] = fix->tp, ntp = 1;
  else
    divisors_upto(m->heads, MAX_TP, tps, &ntp);
  if (fix->cp)
    cps[ncp++] = fix->cp;
  else
    for (int cpv = 1; cpv <= MAX_CP; cpv *= 2)
      if (cpv == 1 || ctx->train->seq % (2 * cpv) == 0) cps[ncp++] = cpv;
  for (int i = 0; i < ntp; i++) {
    for (int j = 0; j < ncp; j++) {
      long tc = (long)tps[i] * cps[j];
      if (all_fixed) {
        if (search_mesh(&S, fix->dp, fix->tp, fix->pp, fix->cp, err)) goto fail;
        continue;
      }
      if (island_gpus % tc) continue;
      int rest = (int)(island_gpus / tc);
      if (fix->pp)
        pps[0] = fix->pp, npp = 1;
      else
        divisors_upto(rest, m->layers < 256 ? m->layers : 256, pps, &npp);
      for (int k = 0; k < npp; k++) {
        if (rest % pps[k]) continue;
        int dp = rest / pps[k];
        if (fix->dp && dp != fix->dp) continue;
        if (search_mesh(&S, dp, tps[i], pps[k], cps[j], err)) goto fail;
      }
    }
  }
  if (out->nvalid == 0) {
    free(out->best);
    out->best = NULL;
    if (S.have_why) return atoll_fail(err, "no possible layout: %s", S.first_why);
    return atoll_fail(err, "no layout of %d devices fits the model's shape (tp must divide the heads, pp <= layers)",
                      island_gpus);
  }
  if (out->nbest > 1) qsort(out->best, (size_t)out->nbest, sizeof(atoll_plan_result), cmp_result);
  return 0;
fail:
  atoll_plan_ranking_free(out);
  return -1;
}

int atoll_plan_fewest(const atoll_plan_ctx *ctx, atoll_plan_result *out, atoll_err *err) {
  const atoll_plan_model *m = ctx->model;
  atoll_plan_cluster c = *ctx->cluster;
  c.islands = 1;
  atoll_plan_train t = *ctx->train;
  t.batch_tokens = t.seq; /* one sequence per step */
  atoll_plan_ctx one = {m, &c, &t, ctx->assume, ctx->failure};
  int per_node = c.gpus_per_node > 0 ? c.gpus_per_node : 1;
  int have = 0;
  atoll_plan_result lightest;
  int have_light = 0;
  memset(out, 0, sizeof *out);
  for (int gpus = 1; gpus <= per_node * m->layers && !have; gpus++) {
    for (int tp = 1; tp <= per_node && tp <= gpus; tp++) {
      if (gpus % tp || m->heads % tp) continue;
      int pp = gpus / tp;
      if (pp > m->layers) continue;
      for (int recompute = 0; recompute <= 2; recompute++) {
        atoll_plan_layout lay = {1, tp, pp, 1, 0, 1, 1, recompute, 0};
        atoll_plan_result r;
        c.gpus = gpus;
        atoll_plan_evaluate(&one, &lay, &r);
        if (!r.valid) continue;
        if (!have_light || r.mem_total < lightest.mem_total) lightest = r, have_light = 1;
        if (r.fits && (!have || r.step_s < out->step_s)) *out = r, have = 1;
      }
    }
  }
  if (!have) {
    if (!have_light) return atoll_fail(err, "no layout of the model is possible (check --heads and --layers)");
    return atoll_fail(err,
                      "%s does not fit on any number of %s even at tp %d x pp %d: the lightest layout needs %.1f GiB "
                      "per device, it has %.1f GiB",
                      m->name, c.acc.name, lightest.lay.tp, lightest.lay.pp,
                      lightest.mem_total / (1024.0 * 1024 * 1024), c.acc.mem_bytes / (1024.0 * 1024 * 1024));
  }
  return 0;
}

int atoll_plan_sweep(const atoll_plan_ctx *ctx, const int *gpus, int n, atoll_plan_result *out, atoll_err *err) {
  for (int i = 0; i < n; i++) {
    atoll_plan_cluster c = *ctx->cluster;
    c.gpus = gpus[i];
    atoll_plan_ctx one = {ctx->model, &c, ctx->train, ctx->assume, ctx->failure};
    atoll_plan_fixed f;
    atoll_plan_fixed_none(&f);
    atoll_plan_ranking rk;
    atoll_err e;
    memset(&out[i], 0, sizeof out[i]);
    if (atoll_plan_search(&one, &f, &rk, &e)) {
      snprintf(out[i].why, sizeof out[i].why, "%.190s", e.msg);
      continue;
    }
    if (rk.nbest > 0) {
      out[i] = rk.best[0];
    } else {
      out[i] = rk.smallest;
      out[i].valid = 0;
      snprintf(out[i].why, sizeof out[i].why, "nothing fits: the lightest layout needs %.1f GiB per device",
               rk.smallest.mem_total / (1024.0 * 1024 * 1024));
    }
    atoll_plan_ranking_free(&rk);
  }
  (void)err;
  return 0;
}

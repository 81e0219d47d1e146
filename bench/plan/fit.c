/* Fits the planner's two free constants, clock_eff (the sustained clock of a GPU in a
 * training step) and mm_k_over (the fixed cost of a matrix-product tile), on the
 * validation rows marked `fit` in tests/plan/runs.h, and prints every row's error with
 * the fitted values: the fit rows and the held-out rows separately. Minimizes the
 * largest |error| on the fit rows over a grid. Build: cmake target atoll_plan_fit
 * (CMakeLists.txt); usage: atoll_plan_fit [clock_eff k_over] (given: no fit), or
 * atoll_plan_fit ablation (the seed's one-constant model on the same rows). */
#include "../../tests/plan/validate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The same rows under the seed's model, with and without each row's software. */
static void ablation(void) {
  const char *names[3] = {"the seed's (eta_mm only, today's software)", "the seed's + each row's software",
                          "this model (catalog)"};
  plan_run_mode modes[3] = {{1, 1}, {1, 0}, {0, 0}};
  for (int k = 0; k < 3; k++) {
    double worst[2] = {0, 0}, sum[2] = {0, 0};
    int n[2] = {0, 0}, in[2] = {0, 0};
    for (int i = 0; i < PLAN_NRUNS; i++) {
      plan_run_outcome o;
      atoll_err err;
      if (plan_run_eval_mode(&PLAN_RUNS[i], -1, -1, 0, modes[k], &o, &err)) continue;
      int h = !PLAN_RUNS[i].fit;
      double e = fabs(o.err);
      n[h]++, sum[h] += e * e, in[h] += e <= (h ? 0.15 : 0.10);
      if (e > worst[h]) worst[h] = e;
    }
    printf("%-44s fit: %d of %d within 10%%, worst %.1f%%, rms %.1f%% | held out: %d of %d within 15%%, worst %.1f%%, "
           "rms %.1f%%\n",
           names[k], in[0], n[0], 100 * worst[0], 100 * sqrt(sum[0] / n[0]), in[1], n[1], 100 * worst[1],
           100 * sqrt(sum[1] / n[1]));
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "ablation") == 0) {
    ablation();
    return 0;
  }
  double best_clock = -1, best_k = -1, best = INFINITY, rms = 0;
  if (argc == 3)
    best_clock = atof(argv[1]), best_k = atof(argv[2]);
  else
    plan_fit(&best_clock, &best_k);
  best = plan_fit_worst(best_clock, best_k, &rms);
  printf("clock_eff %.2f  mm_k_over %.0f  fit rows: worst |error| %.1f%%, rms %.1f%%\n", best_clock, best_k, 100 * best,
         100 * rms);
  for (int pass = 1; pass >= 0; pass--) {
    double sum = 0, worst = 0;
    int n = 0;
    printf("%s rows:\n", pass ? "fit" : "held-out");
    for (int i = 0; i < PLAN_NRUNS; i++) {
      const plan_run *w = &PLAN_RUNS[i];
      if (w->fit != pass) continue;
      plan_run_outcome o;
      atoll_err err;
      if (plan_run_eval(w, best_clock, best_k, 1, &o, &err)) {
        printf("  %-24s error: %s\n", w->name, err.msg);
        continue;
      }
      const atoll_plan_result *p = &o.at_published, *s = &o.searched;
      printf("  %-24s published %7.1f tok/s/GPU, predicted %7.1f (%+5.1f%%) MFU %4.1f%% z%d mb%d v%d %-9s | "
             "search: dp %d tp %d pp %d cp %d z%d %s %+.1f%%\n",
             w->name, o.published_tps, o.predicted_tps, 100 * o.err, 100 * p->mfu, p->lay.zero_stage, p->lay.mb,
             p->lay.chunks, atoll_plan_recompute_name(p->lay.recompute), s->lay.dp, s->lay.tp, s->lay.pp, s->lay.cp,
             s->lay.zero_stage, atoll_plan_recompute_name(s->lay.recompute),
             100 * (s->tokens_per_s / p->tokens_per_s - 1));
      sum += o.err * o.err, n++;
      if (fabs(o.err) > worst) worst = fabs(o.err);
    }
    if (n) printf("  -> %d rows, worst |error| %.1f%%, rms %.1f%%\n", n, 100 * worst, 100 * sqrt(sum / n));
  }
  return 0;
}

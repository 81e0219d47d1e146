/* The simulator (src/sim/, docs/simulate.md) against what can be worked out by hand:
 * a synchronous run's time line, the grace window of the coordinator's own rule, a
 * scripted failure with and without the grace, data parallel's expected goodput under
 * Poisson failures (Daly's formula, as atoll plan computes it), determinism for a seed, one-line refusals of
 * bad settings, and the calibration against this machine's measured islands benchmark
 * (fit on two rows, two held out). */
#include "atoll/plan.h"
#include "check.h"
#include "core/rng.h"
#include "sim/sim.h"

#include <math.h>
#include <string.h>

/* A small, failure-free island run: K islands, H steps of 1 s, each exchange 2 s. */
static atoll_sim_config small(int K, int H) {
  atoll_sim_config c;
  atoll_sim_defaults(&c);
  c.islands = K;
  c.accelerators = K;
  c.sync_every = H;
  c.step_seconds = 1;
  c.outer_bytes = c.grad_bytes = 0; /* no bytes: exchanges and fetches cost their fixed parts */
  c.rtt = 0;
  c.exchange_overhead = 2;
  c.random_failures = 0;
  return c;
}

static void sync_timeline(void) {
  atoll_sim_config c = small(4, 10);
  c.seconds = 1201; /* 100 cycles of 10 s stepping + 2 s exchanging, then 1 s */
  atoll_sim_result r;
  atoll_err err = {{0}};
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.commits == 100);
  CHECK(r.contributions == 400);
  CHECK_NEAR(r.utilisation_min, 1001.0 / 1201, 1e-12);
  CHECK_NEAR(r.utilisation_mean, 1001.0 / 1201, 1e-12);
  CHECK_NEAR(r.goodput, 1000.0 / 1201, 1e-12); /* the last second's phase is not merged yet */
  CHECK_NEAR(r.idle_max, 200.0 / 1201, 1e-12);
  CHECK_NEAR(r.members_mean, 4, 0);
  CHECK_NEAR(atoll_sim_exchange_seconds(&c, 4), 2, 0);
  c.outer_bytes = 1e9, c.link_bits = 8e9, c.rtt = 0.05, c.round_trips = 4, c.link_efficiency = 0.5;
  CHECK_NEAR(atoll_sim_exchange_seconds(&c, 4), 0.2 + 2 + 1.5 * 2, 1e-12);
}

/* Islands 0 and 1 step 1 s, island 2 5 s, grace 3 s. The first exchange opens at 13 s
 * without island 2, which is late from then on: the next ones open as soon as the fast
 * two are ready (25, 37, 49 s; each 2 s). Island 2 ends its phase at 50 s inside the
 * fourth exchange, fetches at its commit (51 s; no cost here) and counts again; at 61 s
 * the fast ones wait for it the whole grace, and it is late again. A straggler this slow
 * is late every time, so none of its work is ever merged. Without the grace all wait
 * for it; with a grace as long as its lag it is in every exchange. */
static void grace_window(void) {
  atoll_sim_config c = small(3, 10);
  c.speeds[0] = 1, c.speeds[1] = 1, c.speeds[2] = 5, c.nspeeds = 3;
  c.policy.grace = 3;
  c.seconds = 52;
  atoll_sim_result r;
  atoll_err err = {{0}};
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.commits == 4 && r.contributions == 8);
  CHECK_NEAR(r.utilisation_min, 41.0 / 52, 1e-12); /* idle 10-15, 25-27, 37-39, 49-51 s */
  CHECK_NEAR(r.idle_max, 11.0 / 52, 1e-12);
  CHECK_NEAR(r.utilisation_mean, (41.0 + 41 + 51) / (3 * 52), 1e-12);
  CHECK_NEAR(r.goodput, 4 * 2 * 10.0 / (3 * 52), 1e-12);
  c.seconds = 100 * 86400.0;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.late_contributions == 0 && r.contributions == 2 * r.commits);
  /* equal islands, a phase in five twice as long: the straggler is late once, joins at
   * the commit (in step again: fetches cost nothing here), and its kept outer gradient
   * is merged into its next exchange, 1 or 2 revisions stale */
  c.speeds[2] = 1;
  c.straggler_share = 0.2, c.straggler_factor = 2;
  c.seconds = 86400;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.late_contributions > 100);
  CHECK(r.staleness_mean >= 1 && r.staleness_mean <= 2);
  CHECK(r.goodput < r.utilisation_mean);
  c.speeds[2] = 5;
  c.straggler_share = 0;
  c.policy.grace = 0;
  c.seconds = 521; /* 10 cycles of 50 + 2 s, then 1 s */
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.commits == 10 && r.contributions == 30);
  CHECK_NEAR(r.utilisation_min, 101.0 / 521, 1e-12);
  /* a grace as long as the straggler's lag: it is in every exchange again */
  c.policy.grace = 40;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.commits == 10 && r.contributions == 30);
}

/* Island 1 fails at 6 s and is down past the end. Without a grace the others wait until
 * the coordinator drops it (island_timeout 5 s after the failure: 1 s past their ready
 * time); with a grace of 0.5 s they wait 0.5 s. Then 8 exchanges of 2 s. */
static void scripted_failure(void) {
  atoll_sim_config c = small(3, 10);
  c.island_timeout = 5;
  c.restart_seconds = 1000;
  c.fails[0].island = 1, c.fails[0].at = 6, c.nfails = 1;
  c.seconds = 100;
  atoll_sim_result r;
  atoll_err err = {{0}};
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.failures == 1 && r.commits == 8);
  CHECK_NEAR(r.idle_max, 17.0 / 100, 1e-12);
  CHECK_NEAR(r.down_mean, 94.0 / 300, 1e-12);
  CHECK_NEAR(r.utilisation_min, 6.0 / 100, 1e-12);
  c.policy.grace = 0.5;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.commits == 8);
  CHECK_NEAR(r.idle_max, 16.5 / 100, 1e-12);
  /* the failed island restarts at 26 s, fetches (no cost here) when no exchange is in
   * flight, and is in step with the others again at the next commit it sees */
  c.policy.grace = 0;
  c.restart_seconds = 20;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.failures == 1);
  CHECK(r.contributions > 2 * r.commits); /* it contributed again */
}

/* A scripted failure voids the island's pending random one (it was drawn for the life
 * the failure ended): one island, failures every 24 h; the random failure first drawn
 * (t0) must not strike after a scripted one at 1 s, only the one drawn at the restart
 * (t1). The draws are the simulator's own, in its order. */
static void scripted_voids_random(void) {
  atoll_sim_config c = small(1, 10);
  c.random_failures = 1, c.mtbf_hours = 24, c.restart_seconds = 0, c.seed = 2;
  c.fails[0].island = 0, c.fails[0].at = 1, c.nfails = 1;
  atoll_rng rng;
  atoll_rng_seed(&rng, c.seed);
  double t0 = -log1p(-(double)atoll_rng_uniform(&rng)) * 86400;
  double t1 = 1 - log1p(-(double)atoll_rng_uniform(&rng)) * 86400;
  CHECK(t0 > 1);
  c.seconds = t0 + 1;
  atoll_sim_result r;
  atoll_err err = {{0}};
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.failures == 1 + (t1 < c.seconds));
}

/* A phase in seconds (--phase-seconds 20; not yet in the real islands): islands of
 * speeds 1, 1 and 2 take 20, 20 and 10 steps and are ready together at each deadline, 20
 * s after the last commit; a restarted island takes the steps that fit before the next
 * deadline and is in the next exchange. */
static void phase_in_seconds(void) {
  atoll_sim_config c = small(3, 10);
  c.speeds[0] = 1, c.speeds[1] = 1, c.speeds[2] = 2, c.nspeeds = 3;
  c.phase_seconds = 20;
  c.seconds = 221; /* 10 cycles of 20 + 2 s, then 1 s */
  atoll_sim_result r;
  atoll_err err = {{0}};
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.commits == 10 && r.contributions == 30 && r.steps == 200);
  CHECK_NEAR(r.utilisation_min, 201.0 / 221, 1e-12);
  CHECK_NEAR(r.goodput, 200.0 / 221, 1e-12); /* every island's 20 s of each phase is merged */
  /* island 1 fails at 5 s, is dropped at 10 s (timeout 5) and restarts at 30 s; the
   * exchanges of 20-22 and 42-44 s go without it; behind, it fetches at the commit of
   * 44 s (no cost here), steps until that phase's deadline, 64 s, and is in the
   * exchange of 64-66 s */
  c.speeds[2] = 1;
  c.island_timeout = 5, c.restart_seconds = 25;
  c.fails[0].island = 1, c.fails[0].at = 5, c.nfails = 1;
  c.seconds = 67;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK(r.commits == 3 && r.contributions == 7 && r.late_contributions == 0);
  CHECK_NEAR(r.goodput, 7 * 20.0 / (3 * 67), 1e-12);
}

/* Data parallel on one site under Poisson failures of mean M, checkpoints every I s
 * costing C, restarts of R that a failure starts again: the expected time per I of work
 * is M e^{R/M} (e^{(I + C)/M} - 1) (Daly's model), so the simulator's goodput must equal
 * atoll plan's atoll_plan_daly_goodput, the same formula in the planner. */
static void dp_against_planner(void) {
  atoll_sim_config c;
  atoll_sim_defaults(&c);
  c.mode = ATOLL_SIM_DP;
  c.islands = 1;
  c.accelerators = 1000;
  c.mtbf_hours = 1000; /* the job fails every hour */
  c.ckpt_interval = 1800, c.ckpt_write_seconds = 60, c.restart_seconds = 300;
  c.seconds = 2e8;
  atoll_sim_result r;
  atoll_err err = {{0}};
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  double expect = atoll_plan_daly_goodput(1800, 60, 300, 3600);
  printf("data parallel: goodput %.4f simulated, %.4f by atoll plan's formula\n", r.goodput, expect);
  CHECK_NEAR(r.goodput, expect, 0.01);
  c.restart_seconds = 3000; /* restarts of most of an hour: many fail again */
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK_NEAR(r.goodput, atoll_plan_daly_goodput(1800, 60, 3000, 3600), 0.01);
  c.restart_seconds = 300;
  CHECK(r.failures > 40000);
  c.random_failures = 0;
  c.seconds = 1860 * 10;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK_NEAR(r.goodput, 1800.0 / 1860, 1e-12);
  c.ckpt_interval = 0;
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK_NEAR(atoll_sim_young_interval(&c), sqrt(2 * 60 * 3600.0), 1e-12); /* Young: sqrt(2 C M) */
  CHECK_NEAR(r.ckpt_interval, 658, 0); /* 657.3 s in whole steps of 2 s */
  c.ckpt_write_seconds = 0; /* Young's interval 0: still one step */
  CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
  CHECK_NEAR(r.ckpt_interval, 2, 0);
  CHECK(r.goodput > 0 && r.goodput <= 1);
}

static void determinism(void) {
  atoll_sim_config c;
  atoll_sim_defaults(&c);
  c.seconds = 5 * 86400;
  c.policy.grace = 30;
  c.speeds[1] = 2, c.nspeeds = 2;
  c.straggler_share = 0.1, c.straggler_factor = 3;
  atoll_sim_result a, b;
  atoll_err err = {{0}};
  CHECK_OK(atoll_sim_run(&c, &a, &err), &err);
  CHECK_OK(atoll_sim_run(&c, &b, &err), &err);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(a.failures > 0 && a.commits > 0);
  c.seed = 2;
  CHECK_OK(atoll_sim_run(&c, &b, &err), &err);
  CHECK(memcmp(&a, &b, sizeof a) != 0);
  /* long runs keep the coordinator's counts (a restarted island that fetched while an
   * exchange opened was once counted twice, and the run stalled at day 24) */
  atoll_sim_defaults(&c);
  CHECK_OK(atoll_sim_run(&c, &a, &err), &err);
  c.policy.grace = 30;
  CHECK_OK(atoll_sim_run(&c, &a, &err), &err);
  c.islands = 1000, c.accelerators = 1e6, c.policy.min_islands = 500;
  CHECK_OK(atoll_sim_run(&c, &a, &err), &err);
}

/* Failure-heavy runs over a grid of policies (the simulator's internal counts are
 * checked at every event: a run that breaks them fails) */
static void failure_grid(void) {
  double graces[] = {0, 5, 30}, restarts[] = {6, 600, 1800};
  int mins[] = {1, 3, 8}, runs = 0;
  for (int seed = 1; seed <= 3; seed++)
    for (int g = 0; g < 3; g++)
      for (int m = 0; m < 3; m++)
        for (int k = 0; k < 3; k++) {
          atoll_sim_config c = small(8, 10);
          c.accelerators = 800, c.mtbf_hours = 50, c.random_failures = 1, c.seed = (uint64_t)seed;
          c.policy.grace = graces[g], c.policy.min_islands = mins[m], c.restart_seconds = restarts[k];
          c.island_timeout = 60, c.outer_bytes = c.grad_bytes = 1e8, c.link_bits = 1e9;
          c.speeds[1] = 2, c.nspeeds = 2, c.straggler_share = 0.1, c.straggler_factor = 3;
          c.seconds = 3 * 86400.0;
          atoll_sim_result r;
          atoll_err err = {{0}};
          CHECK_OK(atoll_sim_run(&c, &r, &err), &err);
          CHECK(r.failures > 0 && r.goodput <= r.utilisation_mean + 1e-12);
          runs++;
        }
  CHECK(runs == 81);
}

static void refusals(void) {
  atoll_sim_config c;
  atoll_err err = {{0}};
  atoll_sim_defaults(&c);
  c.policy.min_islands = 17;
  CHECK(atoll_sim_check(&c, &err) != 0 && strstr(err.msg, "--min-islands") && !strchr(err.msg, '\n'));
  atoll_sim_defaults(&c);
  c.accelerators = 3;
  CHECK(atoll_sim_check(&c, &err) != 0 && strstr(err.msg, "--accelerators"));
  atoll_sim_defaults(&c);
  c.fails[0].island = 16, c.nfails = 1;
  CHECK(atoll_sim_check(&c, &err) != 0 && strstr(err.msg, "--fail 16@"));
  atoll_sim_defaults(&c);
  c.link_efficiency = 0;
  CHECK(atoll_sim_check(&c, &err) != 0 && strstr(err.msg, "--link-efficiency"));
  atoll_sim_defaults(&c);
  c.islands = 1000000, c.accelerators = 1e9; /* about 3.6e10 events */
  CHECK(atoll_sim_check(&c, &err) != 0 && strstr(err.msg, "events"));
  atoll_sim_defaults(&c);
  c.speeds[1] = c.speeds[2] = 1, c.nspeeds = 3, c.islands = 2, c.policy.min_islands = 1;
  CHECK(atoll_sim_check(&c, &err) != 0 && strstr(err.msg, "--speeds"));
  atoll_sim_defaults(&c);
  CHECK(atoll_sim_check(&c, &err) == 0);
}

/* bench/islands/results.md (2026-12-01): 4 islands, H = 6, 6.45 M parameters, tbf links
 * in network namespaces on this 2-core machine, loaded. Per row: iperf3's rate, the
 * bytes each island sent per outer step, the measured compute and exposed exchange per
 * inner step. Measured utilisation = compute / (compute + exposed). */
static const struct {
  const char *row;
  double iperf_bits, wire_bytes, compute, exposed;
  int fit;
} bench_rows[] = {
    {"1gbit fp32", 900e6, 38.7e6, 0.247, 0.212, 0},
    {"1gbit int8", 953e6, 10.9e6, 0.242, 0.144, 1},
    {"100mbit fp32", 96e6, 38.7e6, 0.281, 0.823, 1},
    {"100mbit int8", 95e6, 10.9e6, 0.260, 0.297, 0},
};

static double simulated_utilisation(int row, double efficiency, double overhead) {
  atoll_sim_config c = small(4, 6);
  c.step_seconds = bench_rows[row].compute;
  c.outer_bytes = bench_rows[row].wire_bytes / 1.5; /* each of 4 sends 2 (K - 1) / K of it */
  c.link_bits = bench_rows[row].iperf_bits;
  c.link_efficiency = efficiency;
  c.exchange_overhead = overhead;
  c.seconds = 3600;
  atoll_sim_result r;
  atoll_err err = {{0}};
  if (atoll_sim_run(&c, &r, &err)) return -1;
  return r.utilisation_mean;
}

static void calibration(void) {
  /* the two fit rows give two equations, bytes x 8 / (rate e) + o = exposed x H */
  int a = 1, b = 2;
  double ta = bench_rows[a].wire_bytes * 8 / bench_rows[a].iperf_bits, tb = bench_rows[b].wire_bytes * 8 / bench_rows[b].iperf_bits;
  double xa = 6 * bench_rows[a].exposed, xb = 6 * bench_rows[b].exposed;
  double e = (tb - ta) / (xb - xa), o = xa - ta / e;
  printf("calibration: link efficiency %.3f, exchange overhead %.3f s (docs/simulate.md)\n", e, o);
  CHECK_NEAR(e, 0.769, 0.005);
  CHECK_NEAR(o, 0.745, 0.005);
  for (int i = 0; i < 4; i++) {
    double measured = bench_rows[i].compute / (bench_rows[i].compute + bench_rows[i].exposed);
    double sim = simulated_utilisation(i, e, o);
    printf("  %-13s %-8s measured %.1f%%, simulated %.1f%%\n", bench_rows[i].row, bench_rows[i].fit ? "fit" : "held out",
           100 * measured, 100 * sim);
    CHECK(fabs(sim - measured) <= (bench_rows[i].fit ? 0.005 : 0.05)); /* the issue's 5 points */
  }
}

int main(void) {
  sync_timeline();
  grace_window();
  scripted_failure();
  scripted_voids_random();
  phase_in_seconds();
  dp_against_planner();
  determinism();
  failure_grid();
  refusals();
  calibration();
  CHECK_DONE();
}

/* The simulator's settings, the exchange's and checkpoint's formulas, and synchronous
 * data parallel (sim.h). DiLoCo islands are in sim_islands.c. */
#include "sim/sim.h"

#include "core/rng.h"

#include <math.h>
#include <string.h>

void atoll_sim_defaults(atoll_sim_config *c) {
  memset(c, 0, sizeof *c);
  c->mode = ATOLL_SIM_DILOCO;
  c->accelerators = 16384;
  c->islands = 16;
  c->step_seconds = 2.0;
  c->speeds[0] = 1;
  c->nspeeds = 1;
  c->sync_every = 100;
  c->straggler_factor = 1;
  c->outer_bytes = 9e9;  /* 8 B parameters, int8: a byte each and a 4-byte scale per 32 */
  c->grad_bytes = 32e9;  /* their fp32 gradient */
  c->link_bits = 10e9;
  c->rtt = 0.1;
  c->round_trips = 4; /* READY/QUORUM, the data's first byte, DONE/GO, COMMIT (docs/simulate.md) */
  c->exchange_overhead = 0;
  c->link_efficiency = 1;
  c->policy.min_islands = 1;
  c->policy.grace = 0;
  c->island_timeout = 60;
  /* Llama 3 405B (arXiv 2407.21783, section 3.3.4): 419 unexpected interruptions in 54
   * days on 16,384 H100s: 16384 x 54 x 24 / 419 = 50,676 accelerator-hours each */
  c->mtbf_hours = 16384.0 * 54 * 24 / 419;
  c->restart_seconds = 600;
  c->ckpt_interval = 0;
  c->ckpt_write_seconds = 60;
  c->seconds = 30 * 86400.0;
  c->seed = 1;
  c->random_failures = 1;
}

static double events_estimate(const atoll_sim_config *c);

int atoll_sim_check(const atoll_sim_config *c, atoll_err *err) {
  if (!(c->islands >= 1 && c->islands <= 1000000)) return atoll_fail(err, "--islands must be 1 to 1000000");
  if (!(c->accelerators >= c->islands && c->accelerators <= 1e9))
    return atoll_fail(err, "--accelerators must be at least --islands (%d) and at most 1e9", c->islands);
  if (!(c->step_seconds > 0 && c->step_seconds <= 1e6)) return atoll_fail(err, "--step-seconds must be above 0");
  if (c->nspeeds < 1) return atoll_fail(err, "--speeds needs at least one value");
  for (int i = 0; i < c->nspeeds; i++)
    if (!(c->speeds[i] >= 1e-3 && c->speeds[i] <= 1e6))
      return atoll_fail(err, "--speeds: %g is not a step-time factor between 0.001 and 1e6", c->speeds[i]);
  if (c->sync_every < 1) return atoll_fail(err, "--sync-every must be at least 1");
  if (!(c->phase_seconds >= 0 && c->phase_seconds <= 1e9)) return atoll_fail(err, "--phase-seconds must be 0 or more");
  if (!(c->straggler_share >= 0 && c->straggler_share <= 1))
    return atoll_fail(err, "--straggler-share must be 0 to 1");
  if (!(c->straggler_factor >= 1 && c->straggler_factor <= 1e6))
    return atoll_fail(err, "--straggler-factor must be at least 1");
  if (!(c->outer_bytes >= 0 && c->grad_bytes >= 0 && c->outer_bytes <= 1e15 && c->grad_bytes <= 1e15))
    return atoll_fail(err, "--params gives a negative or absurd size");
  if (!(c->link_bits > 0 && c->link_bits <= 1e15)) return atoll_fail(err, "--link-gbit must be above 0");
  if (!(c->rtt >= 0 && c->rtt <= 60)) return atoll_fail(err, "--rtt-ms must be 0 to 60000");
  if (c->round_trips < 0 || c->round_trips > 1000) return atoll_fail(err, "--round-trips must be 0 to 1000");
  if (!(c->exchange_overhead >= 0 && c->exchange_overhead <= 1e6))
    return atoll_fail(err, "--exchange-overhead must be 0 or more seconds");
  if (!(c->link_efficiency > 0 && c->link_efficiency <= 1))
    return atoll_fail(err, "--link-efficiency must be above 0 and at most 1");
  if (c->policy.min_islands < 1 || c->policy.min_islands > c->islands)
    return atoll_fail(err, "--min-islands must be 1 to --islands (%d)", c->islands);
  if (!(c->policy.grace >= 0 && c->policy.grace <= 1e6)) return atoll_fail(err, "--quorum-grace must be 0 or more seconds");
  if (!(c->island_timeout > 0 && c->island_timeout <= 1e6)) return atoll_fail(err, "--island-timeout must be above 0");
  if (!(c->mtbf_hours > 0 && c->mtbf_hours <= 1e12)) return atoll_fail(err, "--mtbf-hours must be above 0");
  if (!(c->restart_seconds >= 0 && c->restart_seconds <= 1e9))
    return atoll_fail(err, "--restart-minutes must be 0 or more");
  if (!(c->ckpt_interval >= 0 && c->ckpt_interval <= 1e9)) return atoll_fail(err, "--ckpt-minutes must be 0 or more");
  if (!(c->ckpt_write_seconds >= 0 && c->ckpt_write_seconds <= 1e9))
    return atoll_fail(err, "--ckpt-write-seconds must be 0 or more");
  if (!(c->seconds > 0 && c->seconds <= 3650 * 86400.0)) return atoll_fail(err, "--days must be above 0 and at most 3650");
  if (c->nspeeds > c->islands)
    return atoll_fail(err, "--speeds: %d values for %d islands (one per island at most; they repeat over the islands)",
                      c->nspeeds, c->islands);
  double events = events_estimate(c);
  if (!(events <= ATOLL_SIM_MAX_EVENTS))
    return atoll_fail(err, "this run would take about %.2g events (at most %.0g): fewer --days or --islands, longer phases "
                      "(--sync-every, --step-seconds) or rarer failures (--mtbf-hours)", events, ATOLL_SIM_MAX_EVENTS);
  for (int i = 0; i < c->nfails; i++)
    if (c->fails[i].island < 0 || c->fails[i].island >= c->islands || !(c->fails[i].at >= 0))
      return atoll_fail(err, "--fail %d@%g: the island must be 0 to %d and the time 0 or more", c->fails[i].island,
                        c->fails[i].at, c->islands - 1);
  return 0;
}

/* The events a run would take, roughly (a few per phase and island, a few per failure):
 * atoll_sim_check refuses a run above ATOLL_SIM_MAX_EVENTS rather than run for hours. */
static double events_estimate(const atoll_sim_config *c) {
  double fastest = INFINITY;
  for (int i = 0; i < c->nspeeds; i++) fastest = fmin(fastest, c->speeds[i]);
  double failures = c->random_failures ? c->accelerators * c->seconds / (c->mtbf_hours * 3600) : 0;
  if (c->mode == ATOLL_SIM_DP) return failures;
  double phase = c->phase_seconds > 0 ? c->phase_seconds : c->sync_every * c->step_seconds * fastest;
  phase += atoll_sim_exchange_seconds(c, c->islands);
  return 3.0 * c->islands * (c->seconds / phase) + 4 * failures;
}

double atoll_sim_exchange_seconds(const atoll_sim_config *c, int k) {
  double share = k > 1 ? 2.0 * (k - 1) / k : 0;
  return c->round_trips * c->rtt + c->exchange_overhead + share * c->outer_bytes * 8 / (c->link_bits * c->link_efficiency);
}

double atoll_sim_young_interval(const atoll_sim_config *c) {
  double job_mtbf = c->mtbf_hours * 3600 / c->accelerators;
  return sqrt(2 * c->ckpt_write_seconds * job_mtbf);
}

static double exponential(atoll_rng *rng, double rate) {
  double u = atoll_rng_uniform(rng);
  return -log1p(-u) / rate; /* u in [0, 1): 1 - u in (0, 1] */
}

/* Synchronous data parallel over K sites: every step, every accelerator computes (the
 * slowest site sets the pace) and the sites all-reduce the gradient over their links (a
 * ring: 2 (K - 1) / K of it sent, K - 1 round trips; nothing overlapped). A failure
 * anywhere stops the job: the work since the last checkpoint is lost and the job runs
 * again after restart_seconds; a failure during the restart starts it again (Daly's
 * model, as atoll plan's: src/plan/failure.c). A straggling site (straggler_share,
 * straggler_factor) slows its step and so everyone's (the expected slow-down is
 * applied). Checkpoints every ckpt_interval seconds of training, each stopping it
 * ckpt_write_seconds. */
int atoll_sim_run_dp(const atoll_sim_config *c, atoll_sim_result *r, atoll_err *err) {
  (void)err;
  int K = c->islands;
  double slowest = 0, speed_sum = 0;
  for (int i = 0; i < K && i < c->nspeeds; i++) slowest = fmax(slowest, c->speeds[i]);
  for (int i = 0; i < K; i++) speed_sum += c->speeds[i % c->nspeeds];
  double comm = K > 1 ? 2.0 * (K - 1) / K * c->grad_bytes * 8 / (c->link_bits * c->link_efficiency) +
                            (K - 1) * c->rtt
                      : 0;
  /* a step waits for its slowest site: slow with the chance that any site straggles */
  double slow = 1 + (1 - pow(1 - c->straggler_share, K)) * (c->straggler_factor - 1);
  double step = c->step_seconds * slowest * slow + comm;
  /* checkpoints fall between steps: the interval is whole steps, at least one */
  double I = c->ckpt_interval > 0 ? c->ckpt_interval : atoll_sim_young_interval(c);
  I = fmax(1, round(I / step)) * step;
  double C = c->ckpt_write_seconds, seg = I + C;
  double rate = c->accelerators / (c->mtbf_hours * 3600);
  atoll_rng rng;
  atoll_rng_seed(&rng, c->seed);
  int next_fail = 0; /* scripted failures, in time order: the caller's list is sorted here */
  double fails[ATOLL_SIM_MAX_FAILS];
  int nf = c->nfails;
  for (int i = 0; i < nf; i++) fails[i] = c->fails[i].at;
  for (int i = 1; i < nf; i++)
    for (int j = i; j > 0 && fails[j] < fails[j - 1]; j--) {
      double t = fails[j]; fails[j] = fails[j - 1]; fails[j - 1] = t;
    }
  double t = 0, saved = 0, stepping = 0, down = 0, R = c->restart_seconds;
  long long failures = 0;
  int restarting = 0;
  while (t < c->seconds) {
    double gap = c->random_failures ? exponential(&rng, rate) : INFINITY;
    while (next_fail < nf && fails[next_fail] < t) next_fail++;
    if (next_fail < nf && fails[next_fail] - t < gap) gap = fails[next_fail++] - t;
    r->events++;
    if (restarting) { /* a failure during the restart starts it again */
      if (gap < R && t + gap < c->seconds) {
        failures++;
        down += gap, t += gap;
        continue;
      }
      down += fmin(R, c->seconds - t);
      t += R, gap -= R, restarting = 0; /* the rest of the gap, from the restart's end */
      if (t >= c->seconds) break;
    }
    int ends = t + gap >= c->seconds; /* the run ends first: what ran until then counts */
    double run = ends ? c->seconds - t : gap, full = floor(run / seg), part = run - full * seg;
    stepping += full * I + fmin(part, I);
    /* the segment in progress is lost, or at the end of the run kept to its last whole step */
    saved += full * I + (ends ? floor(fmin(part, I) / step) * step : 0);
    if (ends) break;
    failures++;
    t += gap, restarting = 1;
  }
  /* the share of a step that a speed-1 site computes, and the part of it that is work
   * (a straggler's extra time is not) */
  double compute = c->step_seconds * slow / step, work = c->step_seconds / step;
  double mn = INFINITY;
  for (int i = 0; i < K && i < c->nspeeds; i++) mn = fmin(mn, c->speeds[i]);
  r->seconds = c->seconds;
  r->failures = failures;
  r->ckpt_interval = I;
  r->steps = (long long)round(saved / step);
  /* every site's accelerators step for step_seconds x its speed in each step */
  r->goodput = saved * work * speed_sum / K / c->seconds;
  r->utilisation_mean = stepping * compute * speed_sum / K / c->seconds;
  r->utilisation_min = stepping * compute * mn / c->seconds;
  r->down_mean = down / c->seconds;
  r->idle_mean = 1 - r->utilisation_mean - r->down_mean;
  r->idle_max = 1 - r->utilisation_min - r->down_mean;
  r->members_mean = K;
  r->bytes = K > 1 ? (stepping / step) * K * 2.0 * (K - 1) / K * c->grad_bytes : 0;
  return 0;
}

int atoll_sim_run(const atoll_sim_config *c, atoll_sim_result *r, atoll_err *err) {
  memset(r, 0, sizeof *r);
  if (atoll_sim_check(c, err)) return -1;
  return c->mode == ATOLL_SIM_DP ? atoll_sim_run_dp(c, r, err) : atoll_sim_run_islands(c, r, err);
}

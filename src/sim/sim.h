/* A discrete-event simulator of training runs too large for this machine (docs/simulate.md):
 * synchronous data parallel across sites, and DiLoCo islands with the coordinator's own
 * merge policy (src/net/merge_policy.c: the quorum and the grace window), under
 * accelerator failures, repairs, islands of different speeds and slow links. It counts
 * time, not numbers: what share of the accelerators' time went into steps whose work
 * reached the model (goodput), how long islands waited, how many bytes crossed the links.
 * Deterministic for a seed. */
#ifndef ATOLL_SIM_SIM_H
#define ATOLL_SIM_SIM_H

#include "atoll/atoll.h"
#include "net/merge_policy.h"

#include <stdint.h>

typedef enum { ATOLL_SIM_DP, ATOLL_SIM_DILOCO } atoll_sim_mode;

#define ATOLL_SIM_MAX_SPEEDS 64
#define ATOLL_SIM_MAX_FAILS 64
#define ATOLL_SIM_MAX_EVENTS 2e9 /* about 3 minutes on one core */

typedef struct {
  atoll_sim_mode mode;
  double accelerators;  /* N, spread evenly over the islands (DP: over its sites) */
  int islands;          /* K: DiLoCo islands, or the sites a DP job spans (1: one site) */
  double step_seconds;  /* one inner step (DP: one step) of an island of speed 1 */
  double speeds[ATOLL_SIM_MAX_SPEEDS]; /* island i's step takes step_seconds x speeds[i % nspeeds] */
  int nspeeds;
  int sync_every;       /* H: inner steps per outer step */
  double phase_seconds; /* DiLoCo: >0: a phase ends this long after the last commit, each island
                           taking the steps of its speed that fit (not yet in the real islands) */
  double straggler_share;  /* the chance that an island's phase (DP: a site's step) is slow */
  double straggler_factor; /* and how many times longer it then takes */
  double outer_bytes;   /* one island's outer gradient as sent (DiLoCo) */
  double grad_bytes;    /* the gradient a DP step all-reduces between sites */
  double link_bits;     /* bits per second of each island's (site's) link */
  double rtt;           /* seconds of round trip between islands */
  int round_trips;      /* fixed round trips of one exchange's protocol */
  double exchange_overhead; /* fixed seconds of one exchange besides bytes and round trips */
  double link_efficiency;   /* share of link_bits an exchange's bytes reach (calibrated) */
  atoll_merge_policy policy; /* --min-islands, --quorum-grace: the coordinator's rule */
  double island_timeout;    /* seconds before the coordinator drops a silent island */
  double mtbf_hours;        /* mean time between failures of one accelerator */
  double restart_seconds;   /* from a failure until the island (DP: the job) runs again */
  double ckpt_interval;     /* DP: seconds of training between checkpoints (0: Young's optimum) */
  double ckpt_write_seconds; /* DP: seconds one checkpoint stops training */
  double seconds;           /* simulated wall-clock time */
  uint64_t seed;
  struct { int island; double at; } fails[ATOLL_SIM_MAX_FAILS]; /* scripted failures */
  int nfails;
  int random_failures;      /* 0: only the scripted ones */
} atoll_sim_config;

typedef struct {
  double seconds;        /* simulated */
  double goodput;        /* accelerator-seconds of steps whose work reached the model / (N x seconds) */
  double utilisation_mean, utilisation_min; /* per island: share of the time in steps */
  double idle_mean, idle_max; /* per island: alive but not stepping (waits, exchanges, fetches) */
  double down_mean;      /* per island: failed, until it runs again */
  double bytes;          /* sent over the islands' links, all islands */
  long long commits;     /* outer steps committed (DiLoCo) */
  long long steps;       /* steps whose work reached the model: DP's kept steps; DiLoCo: the
                            longest member phase of each commit, summed */
  long long failures;
  long long contributions, late_contributions; /* merged outer gradients; of those, folded late */
  double members_mean;   /* islands per commit */
  double staleness_mean; /* revisions missed, over the late contributions merged */
  double ckpt_interval;  /* DP: the interval used */
  long long events;      /* processed by the simulator */
} atoll_sim_result;

/* The defaults of `atoll simulate` (docs/simulate.md). */
void atoll_sim_defaults(atoll_sim_config *c);
/* Checks the configuration; one line in err naming the setting. */
int atoll_sim_check(const atoll_sim_config *c, atoll_err *err);
int atoll_sim_run(const atoll_sim_config *c, atoll_sim_result *r, atoll_err *err);

/* Seconds of one exchange among k islands: round trips, the fixed overhead, and each
 * island sending 2 (k - 1) / k of an outer gradient (a reduce-scatter then an
 * all-gather, as src/net/link_data.c's two phases). */
double atoll_sim_exchange_seconds(const atoll_sim_config *c, int k);
/* Young's checkpoint interval, sqrt(2 C M), for a job of N accelerators. */
double atoll_sim_young_interval(const atoll_sim_config *c);

/* The two models (sim_dp.c, sim_islands.c); atoll_sim_run picks by mode. */
int atoll_sim_run_dp(const atoll_sim_config *c, atoll_sim_result *r, atoll_err *err);
int atoll_sim_run_islands(const atoll_sim_config *c, atoll_sim_result *r, atoll_err *err);

#endif

/* atoll simulate: the command line of the simulator (src/sim/sim.h, docs/simulate.md). */
#include "cli/simulate_cli.h"
#include "cli/cli_number.h"

#include "core/quant.h"
#include "sim/sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
  printf("usage: atoll simulate [--mode dp|diloco|both] [--accelerators N] [--islands K] [--step-seconds S]\n"
         "                      [--sync-every H | --phase-seconds S] [--params P] [--outer-dtype fp32|bf16|int8|fp4] [--speeds A,B,...]\n"
         "                      [--link-gbit G] [--rtt-ms MS] [--round-trips R] [--exchange-overhead S] [--link-efficiency E]\n"
         "                      [--min-islands M] [--quorum-grace S] [--island-timeout S]\n"
         "                      [--mtbf-hours H] [--restart-minutes M] [--ckpt-minutes M] [--ckpt-write-seconds S]\n"
         "                      [--straggler-share P] [--straggler-factor F] [--fail K@SECONDS]... [--no-random-failures]\n"
         "                      [--days D] [--seed S] [--json]\n"
         "Simulates a run, event by event, as synchronous data parallel across K sites and as K DiLoCo islands\n"
         "under the coordinator's quorum and grace rule, with failures, restarts, slow islands and slow links;\n"
         "prints goodput (the share of the accelerators' time in steps whose work reached the model), the\n"
         "islands' time computing, idle and down, the steps that reached the model and bytes. Defaults and formulas: docs/simulate.md.\n");
}


static int whole(const char *flag, const char *v, double lo, double hi, int *out) {
  double x;
  if (atoll_cli_number(flag, v, lo, hi, &x)) return -1;
  if (x != floor(x)) {
    fprintf(stderr, "atoll: error: %s: expected a whole number, got '%s'\n", flag, v);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int speeds(const char *v, atoll_sim_config *c) {
  char buf[1024];
  if (strlen(v) >= sizeof buf) {
    fprintf(stderr, "atoll: error: --speeds: the list is too long\n");
    return -1;
  }
  strcpy(buf, v);
  c->nspeeds = 0;
  for (char *t = buf, *comma; t; t = comma ? comma + 1 : NULL) { /* every field, empty ones too */
    comma = strchr(t, ',');
    if (comma) *comma = 0;
    if (c->nspeeds == ATOLL_SIM_MAX_SPEEDS) {
      fprintf(stderr, "atoll: error: --speeds: at most %d values\n", ATOLL_SIM_MAX_SPEEDS);
      return -1;
    }
    if (!*t) {
      fprintf(stderr, "atoll: error: --speeds: expected step-time factors such as 1,1,2,4, got '%s'\n", v);
      return -1;
    }
    if (atoll_cli_number("--speeds", t, 1e-3, 1e6, &c->speeds[c->nspeeds++])) return -1;
  }
  return 0;
}

static int failure(const char *v, atoll_sim_config *c) {
  const char *at = strchr(v, '@');
  char island[32];
  if (!at || at == v || (size_t)(at - v) >= sizeof island) {
    fprintf(stderr, "atoll: error: --fail: expected ISLAND@SECONDS (such as 2@3600), got '%s'\n", v);
    return -1;
  }
  if (c->nfails == ATOLL_SIM_MAX_FAILS) {
    fprintf(stderr, "atoll: error: --fail: at most %d scripted failures\n", ATOLL_SIM_MAX_FAILS);
    return -1;
  }
  memcpy(island, v, (size_t)(at - v));
  island[at - v] = 0;
  if (whole("--fail", island, 0, 999999, &c->fails[c->nfails].island)) return -1;
  if (atoll_cli_number("--fail", at + 1, 0, 1e12, &c->fails[c->nfails].at)) return -1;
  c->nfails++;
  return 0;
}

static void print_row(const char *name, const atoll_sim_result *r) {
  printf("%-30s %7.1f%% %9.1f%% %9.1f%% %8.1f%% %8.1f%% %9lld %8lld %10.3g\n", name, 100 * r->goodput,
         100 * r->utilisation_mean, 100 * r->utilisation_min, 100 * r->idle_max, 100 * r->down_mean, r->steps,
         r->failures, r->bytes);
}

static void json_row(const char *name, const atoll_sim_result *r, int last) {
  printf("    {\"mode\": \"%s\", \"goodput\": %.6f, \"utilisation_mean\": %.6f, \"utilisation_min\": %.6f, "
         "\"idle_mean\": %.6f, \"idle_max\": %.6f, \"down_mean\": %.6f, \"commits\": %lld, \"steps\": %lld, \"failures\": %lld, "
         "\"contributions\": %lld, \"late_contributions\": %lld, \"members_mean\": %.4f, \"staleness_mean\": %.4f, "
         "\"bytes\": %.6g, \"ckpt_interval_seconds\": %.6g, \"events\": %lld}%s\n",
         name, r->goodput, r->utilisation_mean, r->utilisation_min, r->idle_mean, r->idle_max, r->down_mean, r->commits,
         r->steps, r->failures, r->contributions, r->late_contributions, r->members_mean, r->staleness_mean, r->bytes,
         r->ckpt_interval, r->events, last ? "" : ",");
}

int atoll_simulate_main(int argc, char **argv) {
  atoll_sim_config c;
  atoll_sim_defaults(&c);
  double params = 8e9, v;
  const char *mode = "both", *dtype = "int8";
  int json = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      help();
      return 0;
    }
    if (strcmp(a, "--json") == 0) {
      json = 1;
      continue;
    }
    if (strcmp(a, "--no-random-failures") == 0) {
      c.random_failures = 0;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "atoll: error: %s: missing value or unknown flag for simulate (atoll simulate --help)\n", a);
      return 2;
    }
    const char *val = argv[++i];
    int bad = 0;
    if (strcmp(a, "--mode") == 0) mode = val;
    else if (strcmp(a, "--outer-dtype") == 0) dtype = val;
    else if (strcmp(a, "--accelerators") == 0) bad = atoll_cli_number(a, val, 1, 1e9, &c.accelerators);
    else if (strcmp(a, "--islands") == 0) bad = whole(a, val, 1, 1000000, &c.islands);
    else if (strcmp(a, "--step-seconds") == 0) bad = atoll_cli_number(a, val, 1e-6, 1e6, &c.step_seconds);
    else if (strcmp(a, "--sync-every") == 0) bad = whole(a, val, 1, 1e9, &c.sync_every);
    else if (strcmp(a, "--phase-seconds") == 0) bad = atoll_cli_number(a, val, 0, 1e9, &c.phase_seconds);
    else if (strcmp(a, "--params") == 0) bad = atoll_cli_number(a, val, 1, 1e14, &params);
    else if (strcmp(a, "--speeds") == 0) bad = speeds(val, &c);
    else if (strcmp(a, "--link-gbit") == 0) bad = atoll_cli_number(a, val, 1e-6, 1e6, &v), c.link_bits = v * 1e9;
    else if (strcmp(a, "--rtt-ms") == 0) bad = atoll_cli_number(a, val, 0, 60000, &v), c.rtt = v / 1000;
    else if (strcmp(a, "--round-trips") == 0) bad = whole(a, val, 0, 1000, &c.round_trips);
    else if (strcmp(a, "--exchange-overhead") == 0) bad = atoll_cli_number(a, val, 0, 1e6, &c.exchange_overhead);
    else if (strcmp(a, "--link-efficiency") == 0) bad = atoll_cli_number(a, val, 1e-3, 1, &c.link_efficiency);
    else if (strcmp(a, "--min-islands") == 0) bad = whole(a, val, 1, 1000000, &c.policy.min_islands);
    else if (strcmp(a, "--quorum-grace") == 0) bad = atoll_cli_number(a, val, 0, 1e6, &c.policy.grace);
    else if (strcmp(a, "--island-timeout") == 0) bad = atoll_cli_number(a, val, 1e-3, 1e6, &c.island_timeout);
    else if (strcmp(a, "--mtbf-hours") == 0) bad = atoll_cli_number(a, val, 1e-3, 1e12, &c.mtbf_hours);
    else if (strcmp(a, "--restart-minutes") == 0) bad = atoll_cli_number(a, val, 0, 1e7, &v), c.restart_seconds = v * 60;
    else if (strcmp(a, "--ckpt-minutes") == 0) bad = atoll_cli_number(a, val, 0, 1e7, &v), c.ckpt_interval = v * 60;
    else if (strcmp(a, "--ckpt-write-seconds") == 0) bad = atoll_cli_number(a, val, 0, 1e9, &c.ckpt_write_seconds);
    else if (strcmp(a, "--straggler-share") == 0) bad = atoll_cli_number(a, val, 0, 1, &c.straggler_share);
    else if (strcmp(a, "--straggler-factor") == 0) bad = atoll_cli_number(a, val, 1, 1e6, &c.straggler_factor);
    else if (strcmp(a, "--fail") == 0) bad = failure(val, &c);
    else if (strcmp(a, "--days") == 0) bad = atoll_cli_number(a, val, 1e-6, 3650, &v), c.seconds = v * 86400;
    else if (strcmp(a, "--seed") == 0) {
      bad = atoll_cli_number(a, val, 0, 9007199254740992.0, &v) || (v != floor(v) && fprintf(stderr, "atoll: error: --seed: expected a whole number, got '%s'\n", val));
      c.seed = (uint64_t)v;
    }
    else {
      fprintf(stderr, "atoll: error: %s: unknown flag for simulate (atoll simulate --help)\n", a);
      return 2;
    }
    if (bad) return 2;
  }
  if (strcmp(mode, "dp") == 0 && (c.policy.grace > 0 || c.phase_seconds > 0 || c.policy.min_islands > 1))
    fprintf(stderr, "atoll simulate: note: --quorum-grace, --min-islands and --phase-seconds apply to DiLoCo only, not --mode dp\n");
  int q = atoll_qtype_parse(dtype);
  if (q < 0) {
    fprintf(stderr, "atoll: error: --outer-dtype: expected fp32, bf16, int8 or fp4, got '%s'\n", dtype);
    return 2;
  }
  int dp = strcmp(mode, "dp") == 0 || strcmp(mode, "both") == 0;
  int diloco = strcmp(mode, "diloco") == 0 || strcmp(mode, "both") == 0;
  if (!dp && !diloco) {
    fprintf(stderr, "atoll: error: --mode: expected dp, diloco or both, got '%s'\n", mode);
    return 2;
  }
  c.outer_bytes = (double)atoll_q_bytes((atoll_qtype)q, 1 << 20) / (1 << 20) * params;
  c.grad_bytes = 4 * params;
  atoll_err err = {{0}};
  atoll_sim_result r[2];
  for (int m = 0; m < 2; m++) { /* both runs' settings are checked before either runs */
    c.mode = m == 0 ? ATOLL_SIM_DP : ATOLL_SIM_DILOCO;
    if ((m == 0 ? dp : diloco) && atoll_sim_check(&c, &err)) {
      fprintf(stderr, "atoll: error: %s\n", err.msg);
      return 2;
    }
  }
  c.mode = ATOLL_SIM_DP;
  if (dp && atoll_sim_run(&c, &r[0], &err)) goto fail;
  c.mode = ATOLL_SIM_DILOCO;
  if (diloco && atoll_sim_run(&c, &r[1], &err)) goto fail;
  if (json) {
    printf("{\n  \"accelerators\": %.0f, \"islands\": %d, \"days\": %g, \"seed\": %llu,\n  \"runs\": [\n", c.accelerators,
           c.islands, c.seconds / 86400, (unsigned long long)c.seed);
    if (dp) json_row("dp", &r[0], !diloco);
    if (diloco) json_row("diloco", &r[1], 1);
    printf("  ]\n}\n");
    return 0;
  }
  printf("atoll simulate: %.0f accelerators, %d %s, %g days; an accelerator fails every %.0f hours; %s outer gradient\n",
         c.accelerators, c.islands, c.islands == 1 ? "island" : "islands", c.seconds / 86400, c.mtbf_hours, dtype);
  printf("%-30s %8s %10s %10s %9s %9s %9s %8s %10s\n", "", "goodput", "computing", "(lowest)", "idle max", "down",
         "steps", "failures", "bytes");
  if (dp) {
    char name[64];
    snprintf(name, sizeof name, "data parallel (ckpt %.3g min)", r[0].ckpt_interval / 60);
    print_row(name, &r[0]);
  }
  if (diloco) {
    char name[64];
    int at = c.phase_seconds > 0 ? snprintf(name, sizeof name, "DiLoCo phase %g s", c.phase_seconds)
                                 : snprintf(name, sizeof name, "DiLoCo H %d", c.sync_every);
    if (c.policy.grace > 0) snprintf(name + at, sizeof name - (size_t)at, ", grace %g s", c.policy.grace);
    print_row(name, &r[1]);
  }
  return 0;
fail:
  fprintf(stderr, "atoll: error: %s\n", err.msg);
  return 1;
}

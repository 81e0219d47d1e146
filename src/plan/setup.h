/* atoll plan's options turned into a plan: the model, the cluster, the training
 * settings, the assumptions and the sizes the user fixed. */
#ifndef ATOLL_PLAN_SETUP_H
#define ATOLL_PLAN_SETUP_H

#include "atoll/plan.h"
#include "plan/options.h"

typedef struct {
  atoll_plan_model model;
  atoll_plan_cluster cluster;
  atoll_plan_train train;
  atoll_plan_assume assume;
  atoll_plan_fixed fixed;
  atoll_plan_failure failure;
  char cpu_note[160]; /* where the cpu accelerator's figures came from */
} atoll_plan_setup;

/* The cpu accelerator's figures from --threads, --cpu-gflops, --measure or
 * --bench-results. The command line passes atoll_plan_setup_cpu (src/cli/plan_cpu.c),
 * which measures this machine and sets thread counts, what only the CLI may do. */
typedef int (*atoll_plan_cpu_fn)(const atoll_plan_opts *o, atoll_plan_accel *a, char *note, size_t note_size,
                                 atoll_err *err);

/* Reads every option of a plan; the message names the offending flag. cpu fills in the
 * cpu accelerator when --accel cpu. */
int atoll_plan_setup_build(const atoll_plan_opts *o, atoll_plan_cpu_fn cpu, atoll_plan_setup *p, atoll_err *err);
/* --set NAME=VALUE: changes one assumption of the cluster's accelerator or of a. */
int atoll_plan_setup_assumption(atoll_plan_cluster *c, atoll_plan_assume *a, const char *name_value, atoll_err *err);

/* A flag's value as a number; messages name --key. */
int atoll_plan_parse_double(const char *key, const char *s, double *out, atoll_err *err);
int atoll_plan_parse_int(const char *key, const char *s, long min, long max, int *out, atoll_err *err);

#endif

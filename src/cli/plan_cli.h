/* atoll plan: the command-line entry of the planner (src/plan, its library atoll_plan). */
#ifndef ATOLL_PLAN_CLI_H
#define ATOLL_PLAN_CLI_H

/* argv holds the arguments after "plan"; returns the process exit status. */
int atoll_plan_main(int argc, char **argv);

#include "plan/setup.h"
/* The cpu accelerator's figures for atoll_plan_setup_build (src/cli/plan_cpu.c). */
int atoll_plan_setup_cpu(const atoll_plan_opts *o, atoll_plan_accel *a, char *note, size_t note_size, atoll_err *err);

#endif

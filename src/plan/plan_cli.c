/* Placeholder until the planner lands: says so instead of pretending. */
#include "plan/plan_cli.h"

#include <stdio.h>

int atoll_plan_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "atoll: error: plan: not built yet\n");
  return 1;
}

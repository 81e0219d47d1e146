/* atoll plan: the command-line entry of the planner (src/plan, its library atoll_plan). */
#ifndef ATOLL_PLAN_CLI_H
#define ATOLL_PLAN_CLI_H

/* argv holds the arguments after "plan"; returns the process exit status. */
int atoll_plan_main(int argc, char **argv);

#endif

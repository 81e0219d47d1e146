/* atoll simulate: the command-line entry of the simulator (src/sim/sim.h). */
#ifndef ATOLL_SIMULATE_CLI_H
#define ATOLL_SIMULATE_CLI_H

/* argv holds the arguments after "simulate"; returns the process exit status. */
int atoll_simulate_main(int argc, char **argv);

#endif

/* atoll coordinator and atoll keys: the command-line entries of the islands' network
 * tools (src/net; docs/islands.md). argv holds the arguments after the command. */
#ifndef ATOLL_NET_CLI_H
#define ATOLL_NET_CLI_H

int atoll_coordinator_main(int argc, char **argv);
int atoll_keys_main(int argc, char **argv);

#endif

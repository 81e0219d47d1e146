/* atoll train (src/cli/train_cli.c). */
#ifndef ATOLL_TRAIN_CLI_H
#define ATOLL_TRAIN_CLI_H

/* argv after "train"; returns the exit status. */
int atoll_train_main(int argc, char **argv);

#endif

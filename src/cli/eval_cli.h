/* atoll eval: the validation loss of a checkpoint or a Hugging Face directory on
 * prepared data (src/cli/eval_cli.c). */
#ifndef ATOLL_CLI_EVAL_CLI_H
#define ATOLL_CLI_EVAL_CLI_H

int atoll_eval_main(int argc, char **argv);

#endif

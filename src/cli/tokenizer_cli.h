/* atoll tokenizer (src/cli/tokenizer_cli.c). */
#ifndef ATOLL_CLI_TOKENIZER_H
#define ATOLL_CLI_TOKENIZER_H

/* argv[0] is the subcommand (train, bytes, info, encode, decode); returns the exit status. */
int atoll_cli_tokenizer(int argc, char **argv);

#endif

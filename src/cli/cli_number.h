/* A flag's numeric value, checked: the one parser of atoll coordinator's and atoll
 * simulate's numbers (src/cli/cli_number.c). */
#ifndef ATOLL_CLI_NUMBER_H
#define ATOLL_CLI_NUMBER_H

/* v as a number in [lo, hi] into *out: 0, or -1 after one error line naming flag. */
int atoll_cli_number(const char *flag, const char *v, double lo, double hi, double *out);

#endif

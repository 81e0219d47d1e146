/* A flag's numeric value, checked (cli_number.h). */
#include "cli/cli_number.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int atoll_cli_number(const char *flag, const char *v, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= lo && x <= hi)) {
    fprintf(stderr, "atoll: error: %s: expected a number in [%g, %g], got '%s'\n", flag, lo, hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

#include "core/fatal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static atoll_fatal_handler handler;

void atoll_set_fatal_handler(atoll_fatal_handler fn) { handler = fn; }

void atoll_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("atoll: error: ", stderr); /* the CLI's form: one kind of error line */
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  if (handler) handler(1);
  exit(1);
}

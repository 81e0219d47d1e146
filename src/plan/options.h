/* atoll plan's options: the flag table, the command line and --config FILE. Every
 * option is a string until src/plan/setup.c turns it into a plan. */
#ifndef ATOLL_PLAN_OPTIONS_H
#define ATOLL_PLAN_OPTIONS_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdio.h>

#define ATOLL_PLAN_MAX_OPTS 64 /* room for the flag table (checked where it is defined) */
#define ATOLL_PLAN_MAX_SETS 32 /* --set NAME=VALUE, command line and config together */

typedef struct {
  const char *val[ATOLL_PLAN_MAX_OPTS]; /* NULL for a flag without a value */
  int given[ATOLL_PLAN_MAX_OPTS];
  const char *sets[ATOLL_PLAN_MAX_SETS];
  int nsets;
  /* strings made from a config file's values: a key appears once (duplicates are
   * refused) and "set" holds at most ATOLL_PLAN_MAX_SETS, so this bounds them */
  char *owned[ATOLL_PLAN_MAX_OPTS + ATOLL_PLAN_MAX_SETS];
  int nowned;
} atoll_plan_opts;

/* Fills o from argv (the arguments after "plan"): --config FILE first, then the flags,
 * which override it. Free with atoll_plan_opts_free, also after a failure. */
int atoll_plan_opts_parse(atoll_plan_opts *o, int argc, char **argv, atoll_err *err);
/* Applies a config file's text (len bytes, not NUL-terminated): one JSON object whose
 * keys are the flags' (dashes or underscores), each at most once, nothing after it.
 * path names the file in messages. */
int atoll_plan_opts_read_config(atoll_plan_opts *o, const char *text, size_t len, const char *path,
                                atoll_err *err);
void atoll_plan_opts_free(atoll_plan_opts *o);

/* The value of an option ("" for a flag without one), NULL when not given. */
const char *atoll_plan_opt(const atoll_plan_opts *o, const char *key);
/* Gives an option a value unless the user did; value must outlive o. */
void atoll_plan_opt_default(atoll_plan_opts *o, const char *key, const char *value);

/* `atoll plan --help`. */
void atoll_plan_opts_help(FILE *f);

#endif

/* A run's settings handed out by the coordinator (atoll coordinator --run FILE;
 * docs/islands.md, "Few flags"): a JSON object of atoll train keys that every island of
 * the run takes, so that an island needs only the coordinator's address and its key.
 * Keys that name this island's own files or identity are refused in it. */
#ifndef ATOLL_RUN_SETTINGS_H
#define ATOLL_RUN_SETTINGS_H

#include "atoll/atoll.h"

/* Reads and checks FILE: a JSON object of known keys with valid values, none of the
 * island's own (data, out, join, keys, listen addresses, island-id, init-from...), at
 * most 32 KiB of printable ASCII once compacted. *json: the compact text (free it). */
int atoll_run_settings_read(const char *file, char **json, atoll_err *err);

/* An island's settings: the run's (json) over the defaults, then its own (given: its
 * flags and --config applied by the caller to a copy of what run_settings gave, in
 * `mine`). A key of the run that `mine` holds with another value is refused in one
 * line naming the flag and the run's value. */
int atoll_run_settings_apply(atoll_config *c, const char *json, atoll_err *err);
int atoll_run_settings_agree(const atoll_config *run, const atoll_config *mine, const char *json, atoll_err *err);

/* The settings of an open run (coordinator --open 1, FILE named in errors): no
 * "islands" (no fixed number), fragments 1 and island-data iid (the data goes out in
 * units, one per inner phase). *phase and *steps: the run's inner phase (sync-every) and
 * --steps, its value or the default (every island's: a unit is one phase of windows).
 * 0, or -1 with one line. */
int atoll_run_settings_open(const char *file, const char *json, int *phase, int *steps, atoll_err *err);

#endif

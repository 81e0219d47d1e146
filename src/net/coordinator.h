/* The islands' coordinator (docs/islands.md): a small long-running process that never
 * holds weights. It keeps the membership (islands that sent a HELLO or HEARTBEAT
 * within --island-timeout), forms the quorum of each exchange (every live member,
 * once all of them are ready and at least --min-islands are; with --quorum-grace, the
 * ready ones once the grace ends, merge_policy.h), collects the members'
 * hashes of the global weights after it and commits a revision when they all agree.
 * Its state (revision, hash, last step, members) is written atomically to a state
 * file after each commit and membership change (a registration within a second), and
 * read back at start, so that a
 * restarted coordinator continues the revision count; islands re-register by their
 * heartbeats. */
#ifndef ATOLL_NET_COORDINATOR_H
#define ATOLL_NET_COORDINATOR_H

#include "atoll/atoll.h"

#include <signal.h>

typedef struct {
  const char *listen;     /* tcp://ADDR:PORT */
  const char *keys;       /* DIR: key.secret, allowed/\*.pub */
  const char *state;      /* state file (NULL: none; docs/islands.md, "State file") */
  int min_islands;
  double island_timeout;  /* seconds of silence before an island is dropped */
  double run_seconds;     /* > 0: stop after this long (tests) */
  const char *run_json;   /* the run's settings for islands that ask (ASK), JSON text; NULL: none */
  double quorum_grace;    /* > 0: once --min-islands are ready, wait at most this long for the rest
                             (merge_policy.h); 0: wait for every live island */
  const char *status_listen; /* HOST:PORT of the read-only status page (status_http.h); NULL: none */
  double status_linger;      /* seconds the page stays up after the run ended */
  int open;                  /* 1: an open run (docs/islands.md, "Open membership"): any allowed key gets a
                                slot at its first ASK (allowed/ read again every 2 s), and the data goes
                                out in units (units.h) */
  int phase, steps;          /* an open run's inner phase (sync-every) and --steps: its UNITS are checked
                                against them */
} atoll_coordinator_config;

/* Runs until *stop is set (or run_seconds pass). Returns 0, or -1 with err. */
int atoll_coordinator_run(const atoll_coordinator_config *cfg, const volatile sig_atomic_t *stop, atoll_err *err);

#endif

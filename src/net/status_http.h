/* The coordinator's status over HTTP (docs/islands.md, "Status page"), on its own
 * optional address (--status-listen HOST:PORT, 127.0.0.1 by default), read-only:
 *   /             a self-contained HTML page: a table of the islands and an inline SVG
 *                 plot of loss and members over revisions (no scripts, no fonts);
 *   /status.json  the same numbers as JSON (fields below);
 *   /metrics      Prometheus text exposition format (metric names below).
 * GET and HEAD only (405 otherwise), unknown paths 404, URLs over 512 bytes 414;
 * libmicrohttpd's own thread serves at most 64 connections, each closed after 10 s.
 *
 * The coordinator's loop never waits for a page: it fills an atoll_status_snapshot
 * from its own state and publishes a copy (under a mutex held only for the copy);
 * every request is answered from the last copy.
 *
 * /status.json:
 *   revision, step        the last committed revision and its step
 *   merges                commits made (the revision: each commit is one outer merge)
 *   members               live members (one per rank of each island)
 *   min_islands           --min-islands
 *   uptime_seconds        of this coordinator process
 *   tokens                the islands' tokens trained, summed (each island's below)
 *   loss                  the mean of the last losses of the islands that did not leave
 *                         (null: none known)
 *   counts                joins and leaves of the run: registered, left, restarted,
 *                         state_joins (islands that fetched the committed state),
 *                         finished (said goodbye); kept in the state file
 *   islands[]             island, state (live, joining, finished, left), ranks (live),
 *                         step (inner steps done), revision (the one it holds),
 *                         revisions_behind, seconds_since_heard, steps_per_second
 *                         (since this coordinator first heard it), tokens_per_step,
 *                         tokens (step x tokens_per_step), loss (its last, as of its
 *                         last heartbeat; null: none yet), sent_bytes (its ranks'
 *                         bytes sent, as of their last heartbeats), contributions
 *                         (commits it took part in), last_contribution {revision,
 *                         step, seconds_ago} (null: none)
 *   history[]             per commit, oldest first (the last ATOLL_STATUS_HISTORY):
 *                         revision, step, members (islands that committed), loss
 *                         (their mean last loss, null: none known)
 * Islands' numbers are what their heartbeats (every 0.5 s) and BYE
 * said: a finished island's step is the one it said goodbye at. */
#ifndef ATOLL_NET_STATUS_HTTP_H
#define ATOLL_NET_STATUS_HTTP_H

#include "atoll/atoll.h"

#include <stdint.h>

#define ATOLL_STATUS_ISLANDS 256
#define ATOLL_STATUS_HISTORY 512

typedef enum { ATOLL_ISLAND_LIVE, ATOLL_ISLAND_JOINING, ATOLL_ISLAND_FINISHED, ATOLL_ISLAND_LEFT } atoll_island_state;

typedef struct {
  uint32_t island;
  atoll_island_state state;
  int ranks;                 /* live members of it */
  uint32_t step;
  uint64_t revision;
  double last_heard;         /* atoll_net_now() seconds */
  uint32_t first_step;       /* the step and time it was first heard at (speed) */
  double first_heard;
  uint64_t tokens_per_step;
  float loss;                /* NaN: none */
  uint64_t sent_bytes;
  uint64_t contributions;
  uint64_t last_revision;    /* of its last contribution (contributions > 0) */
  uint32_t last_step;
  double last_at;
} atoll_status_island;

typedef struct {
  uint64_t revision;
  uint32_t step;
  int members;
  float loss; /* NaN: none */
} atoll_status_point;

typedef struct {
  double now, started;       /* atoll_net_now() seconds */
  uint64_t revision;
  uint32_t step;
  int members, min_islands;
  uint64_t registered, left, restarted, state_joins, finished;
  int n_islands;             /* in island order */
  atoll_status_island islands[ATOLL_STATUS_ISLANDS];
  int n_history;             /* oldest first */
  atoll_status_point history[ATOLL_STATUS_HISTORY];
} atoll_status_snapshot;

typedef struct atoll_status atoll_status;

/* Checks --status-listen's value: HOST:PORT with an IPv4 HOST (or localhost), or PORT
 * alone (127.0.0.1); port 0 takes a free one. 0, or -1 with one line in err. */
int atoll_status_check_listen(const char *value, atoll_err *err);
/* Binds and starts serving (an empty snapshot until the first publish). Says where in
 * one line on stderr, and in another when the address is not a loopback one. */
int atoll_status_start(atoll_status **out, const char *listen, atoll_err *err);
/* Copies snap for the pages to serve. */
void atoll_status_publish(atoll_status *s, const atoll_status_snapshot *snap);
void atoll_status_stop(atoll_status *s);

/* status_render.c: the pages, from a snapshot, as malloc'd NUL-terminated text (NULL:
 * out of memory). */
char *atoll_status_json(const atoll_status_snapshot *s);
char *atoll_status_metrics(const atoll_status_snapshot *s);
char *atoll_status_html(const atoll_status_snapshot *s);

#endif

/* The coordinator's merge policy (docs/islands.md, "Quorum and grace"): when an
 * exchange opens, as a plain function of what the coordinator sees, with no sockets
 * and no clock of its own (the caller passes the time), so that a simulator can drive
 * the same rule. Today: wait for every live island, or, with a grace window, open with
 * the ready ones once at least min_islands are ready and the first of them has waited
 * `grace` seconds; the late ones join at the first commit after they ask. */
#ifndef ATOLL_NET_MERGE_POLICY_H
#define ATOLL_NET_MERGE_POLICY_H

typedef struct {
  int min_islands; /* --min-islands */
  double grace;    /* --quorum-grace: seconds (0: wait for every live island) */
} atoll_merge_policy;

typedef enum {
  ATOLL_POLICY_WAIT,    /* not yet: ask again at *wake_at (0: when something changes) */
  ATOLL_POLICY_OPEN,    /* open the exchange with the ready islands */
  ATOLL_POLICY_TOO_FEW, /* every live island is ready, but fewer than min_islands */
} atoll_policy_verdict;

/* `live` whole islands that are up to date, `ready` of them ready for the same
 * exchange, the first since `first_ready` (seconds, the caller's clock), at `now`. */
atoll_policy_verdict atoll_policy_quorum(const atoll_merge_policy *p, int live, int ready, double first_ready, double now,
                                         double *wake_at);

#endif

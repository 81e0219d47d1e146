/* The coordinator's merge policy (merge_policy.h). */
#include "net/merge_policy.h"

atoll_policy_verdict atoll_policy_quorum(const atoll_merge_policy *p, int live, int ready, double first_ready, double now,
                                         double *wake_at) {
  *wake_at = 0;
  if (ready >= live) return live >= p->min_islands ? ATOLL_POLICY_OPEN : ATOLL_POLICY_TOO_FEW;
  if (p->grace <= 0 || ready < p->min_islands || ready == 0) return ATOLL_POLICY_WAIT;
  if (now >= first_ready + p->grace) return ATOLL_POLICY_OPEN;
  *wake_at = first_ready + p->grace;
  return ATOLL_POLICY_WAIT;
}

/* The coordinator's merge policy (src/net/merge_policy.c): every live island ready
 * opens the exchange (or is too few); without a grace window a missing island is
 * waited for; with one, the ready islands open once they are at least --min-islands
 * and the first has waited the grace, and the wake-up time is the grace's end. */
#include "check.h"
#include "net/merge_policy.h"

int main(void) {
  double wake;
  atoll_merge_policy wait_all = {.min_islands = 2, .grace = 0};
  CHECK(atoll_policy_quorum(&wait_all, 3, 3, 10, 10, &wake) == ATOLL_POLICY_OPEN && wake == 0);
  CHECK(atoll_policy_quorum(&wait_all, 1, 1, 10, 10, &wake) == ATOLL_POLICY_TOO_FEW);
  CHECK(atoll_policy_quorum(&wait_all, 3, 2, 10, 1e9, &wake) == ATOLL_POLICY_WAIT && wake == 0); /* for ever */

  atoll_merge_policy grace = {.min_islands = 2, .grace = 1.5};
  CHECK(atoll_policy_quorum(&grace, 3, 3, 10, 10, &wake) == ATOLL_POLICY_OPEN);
  CHECK(atoll_policy_quorum(&grace, 3, 2, 10, 11, &wake) == ATOLL_POLICY_WAIT && wake == 11.5);
  CHECK(atoll_policy_quorum(&grace, 3, 2, 10, 11.5, &wake) == ATOLL_POLICY_OPEN);
  /* fewer ready than --min-islands: the grace does not open it */
  CHECK(atoll_policy_quorum(&grace, 3, 1, 10, 100, &wake) == ATOLL_POLICY_WAIT && wake == 0);
  atoll_merge_policy one = {.min_islands = 1, .grace = 0.5};
  CHECK(atoll_policy_quorum(&one, 4, 1, 0, 0.5, &wake) == ATOLL_POLICY_OPEN);
  CHECK(atoll_policy_quorum(&one, 4, 0, 0, 9, &wake) == ATOLL_POLICY_WAIT);
  CHECK_DONE();
}

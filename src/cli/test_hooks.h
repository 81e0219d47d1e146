/* Fills the test hooks (src/core/hooks.h) from the ATOLL_* environment variables: the
 * one place that reads them. */
#ifndef ATOLL_CLI_TEST_HOOKS_H
#define ATOLL_CLI_TEST_HOOKS_H

#include "atoll/atoll.h"
#include "core/hooks.h"

/* Fails with a message naming the variable when one is set but malformed. */
int atoll_test_hooks_from_env(atoll_test_hooks *h, atoll_err *err);

#endif

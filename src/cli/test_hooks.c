#include "cli/test_hooks.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* A whole decimal number in [lo, hi], or an error naming the variable. */
static int env_long(const char *name, long lo, long hi, long *out, atoll_err *err) {
  const char *s = getenv(name);
  if (!s) return 0;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return atoll_fail(err, "%s: expected a whole number from %ld to %ld, got '%s'", name, lo, hi, s);
  *out = v;
  return 0;
}

/* The whole-number hooks: variable, range, and the int field it sets (comm_segment,
 * a size_t, is the one exception, set apart). Unset ones keep atoll_test_hooks_none's. */
#define INT_HOOK(var, lo, hi, field) {var, lo, hi, offsetof(atoll_test_hooks, field)}
static const struct {
  const char *var;
  long lo, hi;
  size_t offset;
} INT_HOOKS[] = {
    INT_HOOK("ATOLL_FAULT_NAN_STEP", 0, 1L << 30, nan_step),
    INT_HOOK("ATOLL_FAULT_NAN_ISLAND", -1, 1L << 30, nan_island),
    INT_HOOK("ATOLL_FAULT_OUTER_NAN_ISLAND", -1, 1L << 30, outer_nan_island),
    INT_HOOK("ATOLL_FAULT_STALL_RANK", -1, 1L << 30, stall_rank),
    INT_HOOK("ATOLL_FAULT_DESYNC_ISLAND", -1, 1L << 30, desync_island),
    INT_HOOK("ATOLL_COMM_WINDOW", 0, 1024, comm_window),
    INT_HOOK("ATOLL_CUDA_SYNC", 0, 1, cuda_sync),
    INT_HOOK("ATOLL_FAULT_FETCH_FAIL_RANK", -1, 1L << 30, fetch_fail_rank),
    INT_HOOK("ATOLL_FAULT_FEED_MOMENTUM", 0, 1, feed_bad_momentum),
    INT_HOOK("ATOLL_FAULT_COMMIT_SIGSTOP", 0, 1L << 30, commit_sigstop),
    INT_HOOK("ATOLL_FAULT_BYE_SIGSTOP", 0, 1, bye_sigstop),
    INT_HOOK("ATOLL_TEST_OVERLAP_PROOF", 0, 1, overlap_proof),
    INT_HOOK("ATOLL_TEST_EXCHANGE_DELAY_MS", 0, 600000, exchange_delay_ms),
    INT_HOOK("ATOLL_FAULT_LATE_WEIGHT", 0, 100000, late_weight_pct),
    INT_HOOK("ATOLL_TEST_STEP_MS", 0, 600000, step_ms),
    INT_HOOK("ATOLL_TEST_PAUSE_STEP", 0, 1L << 30, pause_step),
    INT_HOOK("ATOLL_TEST_PAUSE_MS", 0, 600000, pause_ms),
};

int atoll_test_hooks_from_env(atoll_test_hooks *h, atoll_err *err) {
  *h = atoll_test_hooks_none();
  for (size_t i = 0; i < sizeof INT_HOOKS / sizeof INT_HOOKS[0]; i++) {
    int *field = (int *)((char *)h + INT_HOOKS[i].offset);
    long v = *field;
    if (env_long(INT_HOOKS[i].var, INT_HOOKS[i].lo, INT_HOOKS[i].hi, &v, err)) return -1;
    *field = (int)v;
  }
  long segment = 0;
  if (env_long("ATOLL_COMM_SEGMENT", 0, 1L << 28, &segment, err)) return -1;
  h->comm_segment = (size_t)segment;
  const char *ms = getenv("ATOLL_TEST_STAGE_MS");
  if (ms) {
    char tail;
    if (sscanf(ms, "%lf,%lf%c", &h->stage_forward_ms, &h->stage_backward_ms, &tail) != 2 ||
        h->stage_forward_ms < 0 || h->stage_backward_ms < 0)
      return atoll_fail(err, "ATOLL_TEST_STAGE_MS: expected two numbers F,B (milliseconds), got '%s'", ms);
  }
  const char *units = getenv("ATOLL_TEST_STAGE_UNITS");
  if (units) {
    char *mid, *end;
    errno = 0;
    long f = strtol(units, &mid, 10), b = *mid == ',' ? strtol(mid + 1, &end, 10) : 0;
    if (errno || mid == units || *mid != ',' || end == mid + 1 || *end || f < 1 || b < 1 || f > 1000000 || b > 1000000)
      return atoll_fail(err, "ATOLL_TEST_STAGE_UNITS: expected two whole numbers F,B from 1 to 1000000, got '%s'",
                        units);
    h->stage_forward_units = (int)f;
    h->stage_backward_units = (int)b;
  }
  return 0;
}

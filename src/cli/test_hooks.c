#include "cli/test_hooks.h"

#include <errno.h>
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

int atoll_test_hooks_from_env(atoll_test_hooks *h, atoll_err *err) {
  *h = atoll_test_hooks_none();
  long v;
  v = 0;
  if (env_long("ATOLL_FAULT_NAN_STEP", 0, 1L << 30, &v, err)) return -1;
  h->nan_step = (int)v;
  v = -1;
  if (env_long("ATOLL_FAULT_STALL_RANK", -1, 1L << 30, &v, err)) return -1;
  h->stall_rank = (int)v;
  v = -1;
  if (env_long("ATOLL_FAULT_DESYNC_ISLAND", -1, 1L << 30, &v, err)) return -1;
  h->desync_island = (int)v;
  v = -1;
  if (env_long("ATOLL_FAULT_NAN_ISLAND", -1, 1L << 30, &v, err)) return -1;
  h->nan_island = (int)v;
  v = -1;
  if (env_long("ATOLL_FAULT_OUTER_NAN_ISLAND", -1, 1L << 30, &v, err)) return -1;
  h->outer_nan_island = (int)v;
  v = 0;
  if (env_long("ATOLL_COMM_SEGMENT", 0, 1L << 28, &v, err)) return -1;
  h->comm_segment = (size_t)v;
  v = 0;
  if (env_long("ATOLL_COMM_WINDOW", 0, 1024, &v, err)) return -1;
  h->comm_window = (int)v;
  v = 0;
  if (env_long("ATOLL_CUDA_SYNC", 0, 1, &v, err)) return -1;
  h->cuda_sync = (int)v;
  const char *ms = getenv("ATOLL_TEST_STAGE_MS");
  if (ms) {
    char tail;
    if (sscanf(ms, "%lf,%lf%c", &h->stage_forward_ms, &h->stage_backward_ms, &tail) != 2 ||
        h->stage_forward_ms < 0 || h->stage_backward_ms < 0)
      return atoll_fail(err, "ATOLL_TEST_STAGE_MS: expected two numbers F,B (milliseconds), got '%s'", ms);
  }
  return 0;
}

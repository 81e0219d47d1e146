/* Test hooks: fault injection and tuning knobs that tests and benchmarks set through
 * ATOLL_* environment variables. The CLI fills one atoll_test_hooks once
 * (atoll_test_hooks_from_env, src/cli/test_hooks.c) and passes it down; no library
 * code reads the environment. Zero-initialised means "no hooks" except where a field
 * says otherwise: use atoll_test_hooks_none(). */
#ifndef ATOLL_HOOKS_H
#define ATOLL_HOOKS_H

#include "atoll/atoll.h"

#include <stddef.h>

typedef struct atoll_test_hooks {
  int nan_step;             /* ATOLL_FAULT_NAN_STEP=N: step N's loss becomes NaN (0: never) */
  int nan_island;           /* ATOLL_FAULT_NAN_ISLAND=K: instead, island K's gradient norm at step N (-1: none) */
  int outer_nan_island;     /* ATOLL_FAULT_OUTER_NAN_ISLAND=K: island K's weights hold a NaN at its first outer sync (-1: none) */
  int stall_rank;           /* ATOLL_FAULT_STALL_RANK=R: rank R stops taking part at step 2 (-1: none) */
  int desync_island;        /* ATOLL_FAULT_DESYNC_ISLAND=K: island K's global weights drift at step 2, in its last slice (-1: none) */
  double stage_forward_ms;  /* ATOLL_TEST_STAGE_MS=F,B: sleep F ms in every pipeline forward */
  double stage_backward_ms; /* ... and B ms in every backward */
  int stage_forward_units;  /* ATOLL_TEST_STAGE_UNITS=F,B: the pipeline's logical clock adds F per forward */
  int stage_backward_units; /* ... and B per backward (0,0: no logical clock) */
  size_t comm_segment;      /* ATOLL_COMM_SEGMENT: ring segment in floats (0: default) */
  int comm_window;          /* ATOLL_COMM_WINDOW: ring segments in flight (0: default) */
  int cuda_sync;            /* ATOLL_CUDA_SYNC=1: synchronise after every CUDA kernel */
  int fetch_fail_rank;      /* ATOLL_FAULT_FETCH_FAIL_RANK=R: with --join, rank R's first fetch of the committed state fails (-1: none) */
  int commit_sigstop;       /* ATOLL_FAULT_COMMIT_SIGSTOP=S: with --join, the island stops itself (SIGSTOP) before its COMMIT of step S (0: none) */
  int feed_bad_momentum;    /* ATOLL_FAULT_FEED_MOMENTUM=1: with --join, the outer momentum this island sends to joiners has a bit flipped */
  int bye_sigstop;          /* ATOLL_FAULT_BYE_SIGSTOP=1: with --join, the finished island stops itself (SIGSTOP) before its goodbye */
  int step_ms;              /* ATOLL_TEST_STEP_MS=N: every inner step takes N ms longer (a slower island; 0: none) */
  int pause_step, pause_ms; /* ATOLL_TEST_PAUSE_STEP=S, ATOLL_TEST_PAUSE_MS=M: step S takes M ms longer (0: none) */
  int late_weight_pct;      /* ATOLL_FAULT_LATE_WEIGHT=P: with --join, a kept late contribution is folded with P% of
                             * its weight (0: as it should; test_islands_grace's check of the fold must then fail) */
  int exchange_delay_ms;    /* ATOLL_TEST_EXCHANGE_DELAY_MS=N: with --overlap, each exchange on its thread begins N ms
                             * late (a slow link; 0: none) */
  int overlap_proof;        /* ATOLL_TEST_OVERLAP_PROOF=1: with --overlap T, an exchange begins only once the training
                             * thread has taken the T steps after its sync or waits for it (evaluation, checkpoints);
                             * an exchange not in the background fails after 60 s */
} atoll_test_hooks;

static inline atoll_test_hooks atoll_test_hooks_none(void) {
  atoll_test_hooks h = {0};
  h.stall_rank = -1;
  h.desync_island = -1;
  h.nan_island = -1;
  h.outer_nan_island = -1;
  h.fetch_fail_rank = -1;
  return h;
}

#endif

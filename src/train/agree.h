/* Agreement of the ranks before they act (src/train/agree.c); atoll_train_run itself is
 * public (atoll/atoll.h), atoll_train_run_hooked internal (train/run.h). Used by the loop
 * and by the CLI. */
#ifndef ATOLL_TRAIN_AGREE_H
#define ATOLL_TRAIN_AGREE_H

#include "comm/comm.h"
#include "core/hooks.h"
#include "train/config.h"

/* Agreement over the world (src/train/agree.c), after a phase that can fail on some
 * ranks only, so that none is left waiting in the next collective. Each is itself a
 * collective. */
/* The lowest rank with `failed` nonzero, or -1; *count: how many failed. */
int atoll_train_first_failure(atoll_comm *world, int failed, int *count);
/* 0 if every rank's rc is 0. Otherwise ATOLL_TRAIN_ERROR on the rank that reports
 * (rank 0 with its message when all failed, else the lowest failing rank, its message
 * prefixed by "rank R: ") and ATOLL_TRAIN_QUIET on the others. */
int atoll_train_agree(atoll_comm *world, int rc, atoll_err *err);
/* Checks that every rank runs with rank 0's settings (all but --threads), the same
 * data (its manifest) and the same checkpoint (resume_dir, or NULL). On a difference
 * the lowest differing rank returns ATOLL_TRAIN_ERROR with one line naming the first
 * key and both ranks; the others ATOLL_TRAIN_QUIET. */
int atoll_train_check_same(atoll_comm *world, const atoll_config *cfg, const char *resume_dir, atoll_err *err);

#endif

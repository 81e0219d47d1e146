/* atoll train: the training loop (train.c), on one rank or many. */
#ifndef ATOLL_TRAIN_H
#define ATOLL_TRAIN_H

#include "comm/comm.h"
#include "core/hooks.h"
#include "train/config.h"

#include <signal.h>

/* Runs training as configured over the ranks of world (a world of one without a
 * launcher), laid out on the mesh the configuration asks for. hooks: the test hooks
 * (atoll_test_hooks_none() for none). resume_dir: a checkpoint directory to continue
 * from, or NULL. stop: optional flag set by a signal handler; when it becomes nonzero
 * the loop saves a checkpoint after the current step and returns 1.
 * Writes OUT/metrics.jsonl, OUT/summary.json and OUT/checkpoints/step_NNNNNNNN.
 * Returns 0 when done, 1 when stopped, ATOLL_TRAIN_ERROR on error (message in err),
 * ATOLL_TRAIN_QUIET on an error that another rank reports. */
#define ATOLL_TRAIN_ERROR (-1)
#define ATOLL_TRAIN_QUIET (-2)
int atoll_train_run(const atoll_config *cfg, const atoll_test_hooks *hooks, atoll_comm *world, const char *resume_dir,
                    const volatile sig_atomic_t *stop, atoll_err *err);

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

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

#endif

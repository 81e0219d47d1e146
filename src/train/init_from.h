/* A new run's starting point other than fresh weights (src/train/init_from.c):
 * --init-from CKPT (an atoll checkpoint's weights, with --init-optim 1 also its AdamW
 * moments) or --init-from-hf DIR (a Hugging Face directory's weights). */
#ifndef ATOLL_TRAIN_INIT_FROM_H
#define ATOLL_TRAIN_INIT_FROM_H

#include "train/run.h"

/* Called by a new run (not a resume) after the fresh initialisation: replaces this
 * rank's part of the weights (and its shard of the moments) with the source's. Does
 * nothing when neither flag is set. *start is the step the run begins at: 0, or with
 * --init-step 1 the checkpoint's step (the schedule and the data windows go on from
 * there); DiLoCo's outer momentum starts at zero either way. Fails, with one line
 * naming the flag, when the source's model shape is not the run's. Not collective. */
int atoll_run_init_from(atoll_run *r, atoll_train_state *st, int *start, atoll_err *err);

#endif

/* The memory a run needs per rank, checked against the machine's before anything of
 * the model is allocated (train_setup.c). */
#ifndef ATOLL_TRAIN_MEMORY_H
#define ATOLL_TRAIN_MEMORY_H

#include "model/layout.h"
#include "train/config.h"

/* Estimates this rank's bytes (weights, gradients and AdamW moments by ZeRO stage over
 * dp data-parallel ranks; activations of `slots` micro-batches of batch x seq) and
 * fails with the estimate when it is more than the memory available (MemAvailable,
 * or the address-space limit when lower). Skips the comparison where neither can be
 * read. */
int atoll_run_check_memory(const atoll_config *c, const atoll_part *part, int dp, int slots, int seq,
                           atoll_err *err);

#endif

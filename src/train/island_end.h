/* An island as a separate job (--join), at its end (src/train/island_end.c). */
#ifndef ATOLL_TRAIN_ISLAND_END_H
#define ATOLL_TRAIN_ISLAND_END_H

#include "train/run.h"

#include <signal.h>

/* A stop signal: 1 while the island trains on to its next outer sync (*leave_at, set
 * on the first call), 0 when it stops now (that step, or a second signal). */
int atoll_island_leaves_later(atoll_run *r, int *leave_at, int step, const volatile sig_atomic_t *stop);
/* The ATOLL_OUTER_* end of its wait for a quorum, agreed over the island's ranks; 0: none. */
int atoll_island_ended(atoll_run *r);
/* Its one line for that end (rank 0) and what the loop returns: 2 (status 0), 3 (status 1),
 * 1 (a signal, 130). */
int atoll_island_end_line(atoll_run *r, int ended, int step);

#endif

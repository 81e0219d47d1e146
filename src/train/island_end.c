/* How an island that is a separate job (--join) stops (island_end.h): leaving
 * gracefully after a stop signal, and ending without its exchange. The loop (train.c)
 * calls these from its save-or-stop step. */
#include "train/island_end.h"

#include "comm/comm.h"
#include "parallel/diloco.h"

#include <stdio.h>

/* An island (--join) told to stop leaves gracefully: it trains on to its next outer
 * sync (or stops now if step was one), contributes there, and leaves (a checkpoint,
 * then goodbye); a second signal stops it at once. Returns 1 while it trains on. */
int atoll_island_leaves_later(atoll_run *r, int *leave_at, int step, const volatile sig_atomic_t *stop) {
  int again = *stop >= 2;
  if (r->world_size > 1) again = atoll_allreduce_sum_double(r->world, again) > 0;
  if (again) return 0;
  if (*leave_at == 0) {
    *leave_at = atoll_diloco_next_sync(r->diloco, step, r->cfg->run.steps);
    if (r->rank == 0 && *leave_at > step)
      fprintf(stderr, "island %d: stop signal: training on to its outer sync after step %d, then it contributes and leaves (signal again to stop at once)\n",
              r->cfg->islands.id, *leave_at);
  }
  return step < *leave_at;
}

/* An island (--join) whose wait for a quorum ended without one (diloco.h,
 * ATOLL_OUTER_*): the kind, agreed over the island's ranks (each is told alike). */
int atoll_island_ended(atoll_run *r) {
  int ended = r->net && r->diloco ? atoll_diloco_ended(r->diloco, NULL) : 0;
  if (r->net && r->world_size > 1) {
    double any = atoll_allreduce_sum_double(r->world, ended > 0);
    if (any > 0 && !ended) ended = ATOLL_OUTER_NO_DONOR;
  }
  return ended;
}

/* The line of an island that ends without its exchange (checkpoint saved at step):
 * returns what save_or_stop does: 2 (status 0), 3 (status 1) or 1 (signal, 130). */
int atoll_island_end_line(atoll_run *r, int ended, int step) {
  const char *why = "";
  atoll_diloco_ended(r->diloco, &why);
  /* the run ended: an island that had done all its steps lost only its last
   * contribution (status 0); one that had not, its remaining steps too (status 1) */
  int done = step >= r->cfg->run.steps;
  if (r->rank != 0) return ended == ATOLL_OUTER_RUN_ENDED && done ? 2 : ended == ATOLL_OUTER_SIGNALLED ? 1 : 3;
  int id = r->cfg->islands.id;
  if (ended == ATOLL_OUTER_RUN_ENDED && !done) {
    fprintf(stderr, "island %d: the run ended before this island's steps did: stopped at step %d of %d, checkpoint saved (%s)\n", id,
            step, r->cfg->run.steps, why);
    return 3;
  }
  if (ended == ATOLL_OUTER_RUN_ENDED) {
    fprintf(stderr, "island %d: the run ended while this island waited for its exchange after step %d: its last contribution was not merged (nothing else is lost); checkpoint saved (%s)\n",
            id, step, why);
    return 2;
  }
  if (ended == ATOLL_OUTER_SIGNALLED) {
    fprintf(stderr, "island %d: stopped by a signal while waiting for its exchange after step %d; checkpoint saved; continue with: atoll train --resume %s\n",
            id, step, r->cfg->run.out);
    return 1;
  }
  fprintf(stderr, "island %d: stopped at step %d, checkpoint saved: no commit is coming (%s)\n", id, step, why);
  return 3;
}

/* A run owns its directory (--out): train_out.c takes OUT/.lock for the whole run,
 * cleans what killed saves and prunes left in OUT/checkpoints, and refuses to resume
 * into a directory whose checkpoints would be mixed with the resumed run's (newer
 * ones of the same run, or another run's) unless --move-newer DIR moves them aside.
 * Internal to src/train/. */
#ifndef ATOLL_TRAIN_OUT_H
#define ATOLL_TRAIN_OUT_H

#include "atoll/atoll.h"

typedef struct {
  int lock_fd;     /* rank 0: OUT/.lock; -1 elsewhere or when not held */
  char made[4096]; /* rank 0: OUT when this run made the directory, else "" */
  int made_levels; /* how many levels of it this run made (OUT and missing parents) */
} atoll_run_out;

/* Collective, before anything is written to OUT: rank 0 locks OUT, cleans
 * OUT/checkpoints and checks (or, with --move-newer, moves aside) what a resume from
 * resume_dir (NULL: a fresh run) would mix with; the other ranks only learn the
 * outcome. Returns 0, or ATOLL_TRAIN_ERROR on rank 0 (message in err) and
 * ATOLL_TRAIN_QUIET on the others. o->lock_fd is valid (-1 or held) on return. */
int atoll_run_out_open(atoll_run_out *o, const atoll_config *c, atoll_comm *world, const char *resume_dir,
                       atoll_err *err);
/* 0 when a run of c may begin at step start (from checkpoint ckpt): not past --steps,
 * and not at or past a --stop-after it would then overrun; else -1 with one line. */
int atoll_run_check_start(const atoll_config *c, const char *ckpt, int start, atoll_err *err);
/* Releases the lock (the end of the run). An OUT this run made that holds nothing but
 * the lock (the run failed before writing anything) is removed again. */
void atoll_run_out_close(atoll_run_out *o);

#endif

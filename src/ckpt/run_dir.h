/* A run owns its directory (--out): one process at a time holds an exclusive lock
 * on OUT/.lock, so that two runs never interleave metrics.jsonl or mix their
 * checkpoints. The kernel releases the lock when its holder dies, however it dies,
 * so a killed run never leaves a stale lock behind. */
#ifndef ATOLL_RUN_DIR_H
#define ATOLL_RUN_DIR_H

#include "atoll/atoll.h"

/* Creates dir if missing (with its parents), takes an exclusive flock on dir/.lock
 * without waiting and writes this process's pid into it. On success *fd holds the
 * lock until atoll_run_dir_unlock or the process's end. If another process holds
 * it, fails with "--out DIR: another atoll run (pid N) is using it; ...". */
int atoll_run_dir_lock(const char *dir, int *fd, atoll_err *err);
/* Releases the lock (fd < 0: nothing to do). */
void atoll_run_dir_unlock(int fd);

#endif

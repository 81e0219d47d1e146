/* Small file-system helpers shared by the modules that write run directories,
 * checkpoints and data: one mkdir -p, one whole-file reader, one atomic whole-file
 * writer, one rm -r, one checked flush of a stream. */
#ifndef ATOLL_FS_H
#define ATOLL_FS_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdio.h>

/* fsync a file or (flags O_DIRECTORY) a directory; a file system that cannot fsync
 * directories is tolerated. */
int atoll_fsync_path(const char *path, int flags, atoll_err *err);
/* mkdir -p; every directory it creates is made durable (its parent is fsynced).
 * Fails if path exists and is not a directory. */
int atoll_mkdir_p(const char *path, atoll_err *err);
/* Reads a whole regular file of at most max_bytes into a new buffer (caller frees), NUL
 * terminated one past *len; a FIFO, device or socket is refused. */
int atoll_read_file(const char *path, size_t max_bytes, char **out, size_t *len, atoll_err *err);

/* Flushes f: 0, or -1 with "NAME: cannot write: REASON" when what was written to it
 * did not all arrive (a full disk, a closed stdout or pipe). */
int atoll_flush_file(FILE *f, const char *name, atoll_err *err);

/* Writes len bytes of text as the whole of path, atomically: into a temporary
 * sibling ".NAME.tmp-PID" in the same directory, fsynced, renamed over path, and the
 * directory fsynced. Every write is checked; on failure path is as it was and the
 * temporary file is removed. */
int atoll_write_file_atomic(const char *path, const char *text, size_t len, atoll_err *err);
/* Removes the temporary siblings of path that atoll_write_file_atomic left when its
 * process was killed (".NAME.tmp-PID"). Only for a caller that knows no other process
 * is writing path (e.g. under a run directory's lock). Best effort. */
void atoll_remove_atomic_leftovers(const char *path);
/* The directory that holds path: its last component cut off (trailing slashes
 * ignored), "." for a bare name, "/" at the root. */
void atoll_parent_dir(const char *path, char *out, size_t outsz);
/* fsyncs the directory holding path, so that a rename into it is durable: 0, or -1
 * with the reason when the directory cannot be opened or synced (a file system that
 * cannot fsync directories at all is tolerated, as in atoll_fsync_path). */
int atoll_sync_parent_dir(const char *path, atoll_err *err);
/* rm -r: removes path and everything below it; symbolic links are removed, not
 * followed. A missing path is not an error. Returns 0, or -1 with errno set. */
int atoll_rm_tree(const char *path);

#endif

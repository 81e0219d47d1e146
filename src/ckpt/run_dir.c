/* The run directory's lock, see run_dir.h. flock rather than a pid file alone: a
 * pid file outlives a killed run and its pid can be reused, while a flock is
 * released by the kernel with its holder. The pid in the file is only for the
 * message that names the holder. */
#include "ckpt/run_dir.h"

#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The pid the holder wrote into the lock file, or 0 if unreadable (it may not have
 * written it yet). */
static long holder_pid(int fd) {
  char buf[32] = {0};
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  char *end;
  long pid = strtol(buf, &end, 10);
  return pid > 0 && (*end == '\n' || *end == 0) ? pid : 0;
}

/* Replaces the file's contents by "PID\n". */
static int write_pid(int fd, const char *path, atoll_err *err) {
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)len, 0) != len)
    return atoll_fail(err, "%s: cannot write the lock's pid: %s", path, strerror(errno));
  return 0;
}

int atoll_run_dir_lock(const char *dir, int *fd, atoll_err *err) {
  char path[4096];
  *fd = -1;
  int n = snprintf(path, sizeof path, "%s/.lock", dir);
  if (n < 0 || n >= (int)sizeof path) return atoll_fail(err, "--out %.200s...: path too long", dir);
  atoll_err e2;
  if (atoll_mkdir_p(dir, &e2) != 0) return atoll_fail(err, "--out %s", e2.msg);
  int lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0) return atoll_fail(err, "--out %s: cannot open %s: %s", dir, path, strerror(errno));
  if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    long pid = e == EWOULDBLOCK ? holder_pid(lfd) : 0;
    close(lfd);
    if (e != EWOULDBLOCK)
      return atoll_fail(err, "--out %s: cannot lock %s: %s", dir, path, strerror(e));
    if (pid > 0)
      return atoll_fail(err, "--out %s: another atoll run (pid %ld) is using it; wait for it to "
                        "end or choose another --out", dir, pid);
    return atoll_fail(err, "--out %s: another atoll run is using it; wait for it to end or choose "
                      "another --out", dir);
  }
  if (write_pid(lfd, path, err) != 0) {
    close(lfd);
    return -1;
  }
  *fd = lfd;
  return 0;
}

void atoll_run_dir_unlock(int fd) {
  if (fd >= 0) close(fd);
}

#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int atoll_fsync_path(const char *path, int flags, atoll_err *err) {
  int fd = open(path, flags | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return atoll_fail(err, "%s: cannot open for fsync: %s", path, strerror(errno));
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  /* Some file systems cannot fsync a directory; there is nothing better to do. */
  if (rc != 0 && !(flags & O_DIRECTORY && (e == EINVAL || e == EROFS)))
    return atoll_fail(err, "%s: fsync failed: %s", path, strerror(e));
  return 0;
}

int atoll_mkdir_p(const char *path, atoll_err *err) {
  char buf[4096];
  size_t len = strlen(path);
  if (len >= sizeof buf) return atoll_fail(err, "%.200s...: path too long", path);
  memcpy(buf, path, len + 1);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != 0) continue;
    char c = *p;
    *p = 0;
    if (mkdir(buf, 0755) == 0) {
      /* Make the new entry durable: fsync the directory that holds it. */
      char *slash = strrchr(buf, '/');
      if (slash && slash != buf) *slash = 0;
      int rc = atoll_fsync_path(slash ? (slash == buf ? "/" : buf) : ".", O_DIRECTORY, err);
      if (slash && slash != buf) *slash = '/';
      if (rc != 0) return -1;
    } else if (errno != EEXIST) {
      return atoll_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
    }
    *p = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return atoll_fail(err, "%s: not a directory", path);
  return 0;
}

int atoll_read_file(const char *path, size_t max_bytes, char **out, size_t *len, atoll_err *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return atoll_fail(err, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - 1 - n, f);
    if (n < cap - 1) break;
    if (cap > max_bytes) {
      free(buf), fclose(f);
      return atoll_fail(err, "%s: larger than %zu bytes", path, max_bytes);
    }
    char *p = realloc(buf, cap * 2);
    if (!p) free(buf);
    buf = p, cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf) return atoll_fail(err, "%s: out of memory", path);
  if (bad) {
    free(buf);
    return atoll_fail(err, "%s: read failed", path);
  }
  buf[n] = 0;
  *out = buf, *len = n;
  return 0;
}

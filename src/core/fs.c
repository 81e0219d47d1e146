#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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
  /* O_NONBLOCK: a FIFO (a --config or config.json made one) would block the open for
   * ever; it and devices (/dev/zero) are refused. Directories fail in fread (EISDIR). */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return atoll_fail(err, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    close(fd);
    return atoll_fail(err, "%s: not a regular file (a FIFO, device or socket)", path);
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return atoll_fail(err, "%s: cannot open: %s", path, strerror(e));
  }
  /* The buffer never grows past max_bytes + 1 bytes and the NUL: reading one byte more
   * than max_bytes is what tells a file of exactly max_bytes from a larger one. */
  if (max_bytes > SIZE_MAX - 2) max_bytes = SIZE_MAX - 2;
  size_t top = max_bytes + 2, cap = top < 4096 ? top : 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - 1 - n, f);
    if (n > max_bytes) {
      free(buf), fclose(f);
      return atoll_fail(err, "%s: larger than %zu bytes", path, max_bytes);
    }
    if (n < cap - 1) break;
    size_t grown = cap > top / 2 ? top : cap * 2;
    char *p = realloc(buf, grown);
    if (!p) free(buf);
    buf = p, cap = grown;
  }
  int bad = ferror(f), why = errno; /* e.g. EISDIR: fopen opens a directory, fread fails */
  fclose(f);
  if (!buf) return atoll_fail(err, "%s: out of memory", path);
  if (bad) {
    free(buf);
    return atoll_fail(err, "%s: cannot read: %s", path, strerror(why));
  }
  buf[n] = 0;
  *out = buf, *len = n;
  return 0;
}

/* Writes all of buf to fd, retrying short writes and EINTR. */
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    buf += n, len -= (size_t)n;
  }
  return 0;
}

void atoll_parent_dir(const char *path, char *out, size_t outsz) {
  snprintf(out, outsz, "%s", path);
  size_t n = strlen(out);
  while (n > 1 && out[n - 1] == '/') out[--n] = 0;
  char *slash = strrchr(out, '/');
  if (!slash) snprintf(out, outsz, ".");
  else if (slash == out) out[1] = 0;
  else *slash = 0;
}

int atoll_sync_parent_dir(const char *path, atoll_err *err) {
  char dir[4096];
  if (strlen(path) >= sizeof dir) return atoll_fail(err, "%.200s...: path too long", path);
  atoll_parent_dir(path, dir, sizeof dir);
  return atoll_fsync_path(dir, O_DIRECTORY, err);
}

void atoll_remove_atomic_leftovers(const char *path) {
  char dir[4096], prefix[512];
  atoll_parent_dir(path, dir, sizeof dir);
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
  int n = snprintf(prefix, sizeof prefix, ".%s.tmp-", name); /* atoll_write_file_atomic's names */
  DIR *d = opendir(dir);
  if (!d || n < 0 || (size_t)n >= sizeof prefix) {
    if (d) closedir(d);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, prefix, (size_t)n) == 0) {
      char leftover[4096 + 256];
      snprintf(leftover, sizeof leftover, "%s/%s", dir, e->d_name);
      unlink(leftover); /* best effort: a file left over is ignored by every reader */
    }
  closedir(d);
}

int atoll_write_file_atomic(const char *path, const char *text, size_t len, atoll_err *err) {
  char dir[4096], tmp[4096 + 64];
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  size_t dlen = slash ? (size_t)(slash - path) : 0;
  if (!*name) return atoll_fail(err, "%s: not a file name", path);
  if (dlen >= sizeof dir) return atoll_fail(err, "%.200s...: path too long", path);
  if (!slash)
    strcpy(dir, ".");
  else if (dlen == 0)
    strcpy(dir, "/");
  else
    memcpy(dir, path, dlen), dir[dlen] = 0;
  /* Same directory as path, so that the rename cannot cross file systems. */
  int n = snprintf(tmp, sizeof tmp, "%.*s%s.%s.tmp-%ld", (int)dlen, path, slash ? "/" : "", name,
                   (long)getpid());
  if (n < 0 || (size_t)n >= sizeof tmp) return atoll_fail(err, "%.200s...: path too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return atoll_fail(err, "%s: cannot create: %s", path, strerror(errno));
  int bad = write_all(fd, text, len) != 0 || fsync(fd) != 0;
  int e = errno;
  if (close(fd) != 0 && !bad) bad = 1, e = errno;
  if (!bad && rename(tmp, path) != 0) {
    e = errno;
    unlink(tmp);
    return atoll_fail(err, "%s: cannot rename %s into place: %s", path, tmp, strerror(e));
  }
  if (bad) {
    unlink(tmp);
    return atoll_fail(err, "%s: write failed: %s", path, strerror(e ? e : EIO));
  }
  return atoll_fsync_path(dir, O_DIRECTORY, err);
}

int atoll_rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode)) return unlink(path);
  DIR *d = opendir(path);
  if (!d) return -1;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char child[4096];
    int n = snprintf(child, sizeof child, "%s/%s", path, e->d_name);
    if (n < 0 || (size_t)n >= sizeof child || atoll_rm_tree(child) != 0) rc = -1;
  }
  closedir(d);
  return rc == 0 ? rmdir(path) : -1;
}

int atoll_flush_file(FILE *f, const char *name, atoll_err *err) {
  /* errno is not cleared: when fflush has nothing left to write, the reason is the one
   * an earlier write left (ENOSPC for a full disk), usually still in errno */
  if (fflush(f) == 0 && !ferror(f)) return 0;
  return atoll_fail(err, "%s: cannot write: %s", name, strerror(errno ? errno : EIO));
}

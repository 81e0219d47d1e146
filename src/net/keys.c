/* CURVE key files (keys.h). */
#include "net/keys.h"

#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

void atoll_key_z85(const uint8_t key[ATOLL_KEY_BYTES], char out[ATOLL_KEY_Z85 + 1]) {
  if (!zmq_z85_encode(out, key, ATOLL_KEY_BYTES)) out[0] = 0;
}

int atoll_key_path(char *out, size_t n, const char *dir, const char *name, atoll_err *err) {
  int k = snprintf(out, n, "%s/%s", dir, name);
  if (k < 0 || (size_t)k >= n)
    return atoll_fail(err, "%.200s.../%s: path too long (%zu bytes; at most %zu)", dir, name, strlen(dir) + 1 + strlen(name), n - 1);
  return 0;
}

static int write_new(const char *path, const char *text, atoll_err *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    return atoll_fail(err, "%s: %s", path, errno == EEXIST ? "exists; refusing to overwrite a key" : strerror(errno));
  size_t n = strlen(text);
  /* 0600 exactly, whatever the umask (which can only have taken bits away) */
  int rc = fchmod(fd, 0600) == 0 && write(fd, text, n) == (ssize_t)n && fsync(fd) == 0 ? 0 : -1;
  if (close(fd) || rc) return atoll_fail(err, "%s: write failed: %s", path, strerror(errno));
  return 0;
}

/* A directory others may write to (sticky or not) would let them put files beside the
 * keys: a key of their own in allowed/, or a link where ours are to go. */
int atoll_keys_private_dir(const char *dir, atoll_err *err) {
  struct stat st;
  if (stat(dir, &st)) return errno == ENOENT ? 0 : atoll_fail(err, "%s: %s", dir, strerror(errno));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return atoll_fail(err, "%s: writable by %s (mode %04o): refusing to keep keys there, where others could add or "
                      "replace files; use a directory only you can write (chmod go-w)",
                      dir, st.st_mode & S_IWOTH ? "everyone" : "its group", (unsigned)(st.st_mode & 07777));
  return 0;
}

int atoll_keys_generate(const char *dir, atoll_err *err) {
  char pub[ATOLL_KEY_Z85 + 1], sec[ATOLL_KEY_Z85 + 1], path[4200], text[64];
  if (!zmq_has("curve")) return atoll_fail(err, "this libzmq was built without CURVE security");
  if (zmq_curve_keypair(pub, sec)) return atoll_fail(err, "zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
  /* (each path checked before anything is made: none is cut short) */
  if (atoll_key_path(path, sizeof path, dir, "key.secret", err)) return -1;
  /* a new directory in a parent others may write to without the sticky bit could be
   * renamed away and replaced by theirs (in /tmp, sticky, it cannot) */
  struct stat st;
  if (stat(dir, &st) != 0) {
    char parent[4200];
    atoll_parent_dir(dir, parent, sizeof parent);
    if (stat(parent, &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      return atoll_fail(err, "%s: its parent %s is writable by others and not sticky (mode %04o): they could replace "
                        "the key directory; make it in a directory only you can write", dir, parent,
                        (unsigned)(st.st_mode & 07777));
  }
  if (atoll_mkdir_p(dir, err) || atoll_keys_private_dir(dir, err)) return -1;
  if (atoll_key_path(path, sizeof path, dir, "allowed", err) || atoll_mkdir_p(path, err) || atoll_keys_private_dir(path, err))
    return -1;
  atoll_key_path(path, sizeof path, dir, "key.secret", err);
  snprintf(text, sizeof text, "%s\n", sec);
  if (write_new(path, text, err)) return -1;
  atoll_key_path(path, sizeof path, dir, "key.pub", err);
  snprintf(text, sizeof text, "%s\n", pub);
  if (write_new(path, text, err)) return -1;
  return atoll_sync_parent_dir(path, err);
}

/* A key file: 40 Z85 characters, then optionally a newline, nothing else. */
static int read_z85(const char *path, uint8_t key[ATOLL_KEY_BYTES], int secret, atoll_err *err) {
  struct stat st;
  if (stat(path, &st)) return atoll_fail(err, "%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return atoll_fail(err, "%s: not a regular file", path);
  if (secret && (st.st_mode & 077))
    return atoll_fail(err, "%s: a secret key readable by group or others (mode %04o); chmod 600 it", path,
                      (unsigned)(st.st_mode & 07777));
  char *text = NULL;
  size_t len = 0;
  if (atoll_read_file(path, 4096, &text, &len, err)) return -1;
  if (len > 0 && text[len - 1] == '\n') text[--len] = 0;
  int ok = len == ATOLL_KEY_Z85 && zmq_z85_decode(key, text) != NULL;
  free(text);
  if (!ok) return atoll_fail(err, "%s: not a CURVE key (expected 40 Z85 characters, as atoll keys writes)", path);
  return 0;
}

int atoll_key_read_secret(const char *path, uint8_t secret[ATOLL_KEY_BYTES], uint8_t pub[ATOLL_KEY_BYTES],
                          atoll_err *err) {
  if (read_z85(path, secret, 1, err)) return -1;
  char sz[ATOLL_KEY_Z85 + 1], pz[ATOLL_KEY_Z85 + 1];
  atoll_key_z85(secret, sz);
  if (zmq_curve_public(pz, sz) || !zmq_z85_decode(pub, pz))
    return atoll_fail(err, "%s: cannot derive the public key", path);
  return 0;
}

int atoll_key_read_public(const char *path, uint8_t pub[ATOLL_KEY_BYTES], atoll_err *err) {
  return read_z85(path, pub, 0, err);
}

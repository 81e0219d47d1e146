/* A run's checkpoint root (OUT/checkpoints): finding the latest checkpoint, pruning
 * old ones, cleaning what interrupted saves and prunes left, and moving checkpoints
 * newer than a resumed step aside.
 *
 * Removal is two steps: a rename of step_N to the hidden sibling .doomed-step_N-PID
 * (atomic: step_N is either complete or gone, loaders see only step_* names), then
 * the deletion of the sibling. A kill in between leaves only a hidden sibling, which
 * the next prune (its process being gone) or atoll_ckpt_clean deletes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_internal.h"

#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define CK_PATH ATOLL_CKPT_PATH

/* ---------------------------------------------------------- listing --- */

/* "step_" followed by 8 to 18 digits -> the number, else -1. */
static long long step_of(const char *name) {
  if (strncmp(name, "step_", 5) != 0) return -1;
  const char *d = name + 5;
  size_t n = strlen(d);
  if (n < 8 || n > 18) return -1;
  long long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (d[i] < '0' || d[i] > '9') return -1;
    v = v * 10 + (d[i] - '0');
  }
  return v;
}

typedef struct {
  long long step;
  char name[256];
} ck_entry;

/* Complete step_* checkpoints under root, in directory order, into *out (*n of them;
 * the caller frees *out). Returns 0, or -1 with a message; *missing tells a root that
 * does not exist apart (errno ENOENT), which pruning does not count as an error. */
static int list_steps(const char *root, ck_entry **out, int *n, int *missing, atoll_err *err) {
  *out = NULL;
  *n = 0;
  *missing = 0;
  DIR *d = opendir(root);
  if (!d) {
    *missing = errno == ENOENT;
    return atoll_fail(err, "%s: cannot open: %s", root, strerror(errno));
  }
  ck_entry *v = NULL;
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[CK_PATH];
    long long step = step_of(e->d_name);
    if (step < 0 || strlen(e->d_name) >= sizeof v->name) continue;
    if (atoll_ckpt_join(path, sizeof path, root, e->d_name, NULL) != 0 ||
        !atoll_ckpt_is_dir(path) || !atoll_ckpt_has_state(path))
      continue;
    if (*n == cap) {
      /* A short list would make pruning keep the wrong checkpoints: fail instead. */
      cap = cap ? cap * 2 : 16;
      ck_entry *p = realloc(v, (size_t)cap * sizeof *v);
      if (!p) {
        closedir(d);
        free(v);
        *n = 0;
        return atoll_fail(err, "%s: out of memory listing checkpoints", root);
      }
      v = p;
    }
    v[*n].step = step;
    strcpy(v[*n].name, e->d_name);
    (*n)++;
  }
  closedir(d);
  *out = v;
  return 0;
}

static int newest_first(const void *a, const void *b) {
  long long x = ((const ck_entry *)a)->step, y = ((const ck_entry *)b)->step;
  return x > y ? -1 : x < y;
}

int atoll_ckpt_find_latest(const char *root, char *out, size_t outsz, atoll_err *err) {
  if (atoll_ckpt_has_state(root)) {
    if (strlen(root) >= outsz) return atoll_fail(err, "%s: path too long", root);
    strcpy(out, root);
    return 0;
  }
  int n, missing;
  ck_entry *v;
  if (list_steps(root, &v, &n, &missing, err) != 0) return -1;
  int best = -1;
  for (int i = 0; i < n; i++)
    if (best < 0 || v[i].step > v[best].step) best = i;
  int rc = 0;
  if (best < 0)
    rc = atoll_fail(err, "%s: no checkpoint found (no state.json, no step_NNNNNNNN/state.json)",
                    root);
  else
    rc = atoll_ckpt_join(out, outsz, root, v[best].name, err);
  free(v);
  return rc;
}

int atoll_ckpt_resolve(const char *path, char *out, size_t outsz, atoll_err *err) {
  if (atoll_ckpt_find_latest(path, out, outsz, err) == 0) return 0;
  atoll_err first = *err;
  char root[CK_PATH];
  struct stat st;
  int n = snprintf(root, sizeof root, "%s/checkpoints", path);
  if (n > 0 && (size_t)n < sizeof root && stat(root, &st) == 0 && S_ISDIR(st.st_mode) &&
      atoll_ckpt_find_latest(root, out, outsz, err) == 0)
    return 0;
  *err = first;
  return -1;
}

/* ------------------------------------------------- hidden siblings --- */

/* Kinds of hidden sibling ".KIND-NAME-PID": an unfinished save, the previous copy
 * during a replacement, a checkpoint being removed. */
static const char *const KINDS[] = {"tmp", "old", "doomed"};
#define NKINDS 3

/* If name is ".KIND-NAME-PID" of kinds[k]: 1, with NAME into base and the pid. */
static int parse_sibling(const char *name, int k, char *base, size_t basesz, long *pid) {
  size_t klen = strlen(KINDS[k]);
  if (name[0] != '.' || strncmp(name + 1, KINDS[k], klen) != 0 || name[1 + klen] != '-') return 0;
  const char *start = name + 2 + klen, *dash = strrchr(start, '-');
  if (!dash || dash == start || !dash[1] || (size_t)(dash - start) >= basesz) return 0;
  *pid = 0;
  for (const char *p = dash + 1; *p; p++) {
    if (*p < '0' || *p > '9' || *pid > 100000000) return 0;
    *pid = *pid * 10 + (*p - '0');
  }
  memcpy(base, start, (size_t)(dash - start));
  base[dash - start] = 0;
  return *pid > 0;
}

/* Whether the process that made a sibling is gone (or is us: we are not in the
 * middle of a save while pruning). */
static int process_gone(long pid) {
  if (pid == (long)getpid()) return 1;
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Renames root/name out of the loaders' sight, then deletes it. */
static int doom(const char *root, const char *name, atoll_err *err) {
  char path[CK_PATH], gone[CK_PATH];
  if (atoll_ckpt_join(path, sizeof path, root, name, err) != 0) return -1;
  int n = snprintf(gone, sizeof gone, "%s/.doomed-%s-%ld", root, name, (long)getpid());
  if (n < 0 || n >= (int)sizeof gone) return atoll_fail(err, "%s: path too long", path);
  if (atoll_rm_tree(gone) != 0 || rename(path, gone) != 0)
    return atoll_fail(err, "%s: cannot move out of the way to %s: %s", path, gone, strerror(errno));
  if (atoll_rm_tree(gone) != 0)
    return atoll_fail(err, "%s: cannot remove: %s", gone, strerror(errno));
  return 0;
}

/* A left-over sibling at path: with recover, a complete .old- copy whose checkpoint
 * root/base is missing (a save killed between the fallback's two renames) is put back
 * under that name: it was published before. Anything else is deleted, .tmp- copies
 * too even when complete: their save never returned, and publishing them here would
 * make a checkpoint newer than the one a resume already chose (atoll train --resume
 * OUT picks the newest before the run directory is cleaned). */
static int settle(const char *root, const char *path, const char *base, int k, int recover,
                  atoll_err *err) {
  char target[CK_PATH], model[CK_PATH];
  struct stat st;
  if (recover && strcmp(KINDS[k], "old") == 0 && atoll_ckpt_join(target, sizeof target, root, base, NULL) == 0 &&
      lstat(target, &st) != 0 && errno == ENOENT && atoll_ckpt_has_state(path) &&
      atoll_ckpt_join(model, sizeof model, path, "model.safetensors", NULL) == 0 &&
      access(model, F_OK) == 0) {
    if (rename(path, target) != 0)
      return atoll_fail(err, "%s: cannot move back to %s: %s", path, target, strerror(errno));
    return atoll_fsync_path(root, O_DIRECTORY, err);
  }
  if (atoll_rm_tree(path) != 0) return atoll_fail(err, "%s: cannot remove: %s", path, strerror(errno));
  return 0;
}

/* Settles hidden siblings under root: those whose process is gone, or (all) every
 * one. */
static int sweep_siblings(const char *root, int all, atoll_err *err) {
  int rc = 0;
  for (int k = 0; k < NKINDS; k++) {
    DIR *d = opendir(root);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char path[CK_PATH], base[256];
      long pid;
      if (!parse_sibling(e->d_name, k, base, sizeof base, &pid) || !(all || process_gone(pid)))
        continue;
      if (atoll_ckpt_join(path, sizeof path, root, e->d_name, NULL) != 0 || !atoll_ckpt_is_dir(path))
        continue;
      atoll_err e2;
      if (settle(root, path, base, k, all, &e2) != 0 && rc == 0) rc = atoll_fail(err, "%s", e2.msg);
    }
    closedir(d);
  }
  return rc;
}

/* ------------------------------------------------- prune and clean --- */

int atoll_ckpt_prune_ex(const char *root, int keep, int protect_step, atoll_err *err) {
  if (keep < 1) return atoll_fail(err, "%s: keep must be >= 1 (got %d)", root, keep);
  int n, missing;
  ck_entry *v;
  if (list_steps(root, &v, &n, &missing, err) != 0) return missing ? 0 : -1;
  if (n > 1) qsort(v, (size_t)n, sizeof *v, newest_first);
  int rc = 0;
  for (int i = keep; i < n; i++) {
    atoll_err e2;
    if (protect_step >= 0 && v[i].step == protect_step) continue;
    if (doom(root, v[i].name, &e2) != 0 && rc == 0) rc = atoll_fail(err, "%s", e2.msg);
  }
  free(v);
  int rc2 = sweep_siblings(root, 0, rc ? NULL : err);
  return rc ? rc : rc2;
}

int atoll_ckpt_prune(const char *root, int keep, atoll_err *err) {
  return atoll_ckpt_prune_ex(root, keep, -1, err);
}

/* A file name a checkpoint directory holds (checkpoint.c, train_ckpt.c, diloco.c) */
static int checkpoint_file(const char *name) {
  static const char *const ours[] = {"model.safetensors", "optimizer.safetensors", "tokenizer.json",
                                     "outer.safetensors", "late.safetensors"};
  for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
    if (!strcmp(name, ours[i])) return 1;
  int k, end = 0; /* island_K.safetensors */
  return sscanf(name, "island_%d.safetensors%n", &k, &end) == 1 && end > 0 && name[end] == '\0';
}

/* 1 when dir holds nothing but files a checkpoint directory has (or nothing) */
static int only_checkpoint_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int only = 1;
  struct dirent *e;
  while (only && (e = readdir(d)) != NULL)
    only = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || checkpoint_file(e->d_name);
  closedir(d);
  return only;
}

int atoll_ckpt_clean(const char *root, atoll_err *err) {
  int rc = sweep_siblings(root, 1, err);
  DIR *d = opendir(root);
  if (!d) return errno == ENOENT ? rc : atoll_fail(err, "%s: cannot open: %s", root, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[CK_PATH];
    atoll_err e2;
    if (step_of(e->d_name) < 0 || atoll_ckpt_join(path, sizeof path, root, e->d_name, NULL) != 0)
      continue;
    /* A step_* directory without state.json is no checkpoint: what an older atoll's
     * interrupted deletion left, if it holds only a checkpoint's files. Anything else
     * is the user's (an export, notes): kept, and the run refused now, since a save at
     * that step would refuse to replace it after the training since the last one. */
    if (!atoll_ckpt_is_dir(path) || atoll_ckpt_has_state(path)) continue;
    if (!only_checkpoint_files(path)) {
      if (rc == 0)
        rc = atoll_fail(err, "%s: not a checkpoint (no state.json) and holds other files; move it out of %s, which "
                             "holds the run's checkpoints", path, root);
      continue;
    }
    if (doom(root, e->d_name, &e2) != 0 && rc == 0) rc = atoll_fail(err, "%s", e2.msg);
  }
  closedir(d);
  /* doom's own leftovers, if any rename succeeded but a deletion failed, stay for
   * the next clean: they are hidden and loaders ignore them. */
  return rc;
}

/* ------------------------------------------- newer checkpoints aside --- */

int atoll_ckpt_newer(const char *root, int step, int *count, int *newest, atoll_err *err) {
  int n, missing;
  ck_entry *v;
  *count = 0;
  *newest = -1;
  if (list_steps(root, &v, &n, &missing, err) != 0) return missing ? 0 : -1;
  for (int i = 0; i < n; i++) {
    if (v[i].step <= step) continue;
    (*count)++;
    if (v[i].step > *newest) *newest = v[i].step > 2147483647LL ? 2147483647 : (int)v[i].step;
  }
  free(v);
  return 0;
}

/* dest must not exist, or be an empty directory. */
static int dest_free(const char *dest, atoll_err *err) {
  struct stat st;
  if (lstat(dest, &st) != 0) return errno == ENOENT ? 0 : atoll_fail(err, "%s: cannot stat: %s", dest, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return atoll_fail(err, "%s: exists and is not a directory", dest);
  int empty;
  if (atoll_ckpt_dir_empty(dest, &empty, err) != 0) return -1;
  if (!empty) return atoll_fail(err, "%s: exists and is not empty; choose another directory", dest);
  return 0;
}

int atoll_ckpt_move_aside(const char *root, int step, const char *dest_dir, atoll_err *err) {
  int n, missing;
  ck_entry *v;
  if (list_steps(root, &v, &n, &missing, err) != 0) return missing ? 0 : -1;
  int rc = dest_free(dest_dir, err), existed = access(dest_dir, F_OK) == 0;
  if (rc == 0) rc = atoll_mkdir_p(dest_dir, err);
  /* dest_dir inside a checkpoint that moves: refused before anything moves (the move of
   * that checkpoint into its own subdirectory failed halfway, after the older ones) */
  char *dest_real = rc == 0 ? realpath(dest_dir, NULL) : NULL;
  for (int i = 0; dest_real && rc == 0 && i < n; i++) {
    char from[CK_PATH];
    if (v[i].step <= step || atoll_ckpt_join(from, sizeof from, root, v[i].name, NULL) != 0) continue;
    char *from_real = realpath(from, NULL);
    size_t l = from_real ? strlen(from_real) : 0;
    if (from_real && strncmp(dest_real, from_real, l) == 0 && (dest_real[l] == '/' || dest_real[l] == '\0')) {
      rc = atoll_fail(err, "%s: lies inside the checkpoint %s, which is among those to move; choose a directory outside it",
                      dest_dir, from);
      if (!existed) rmdir(dest_dir); /* made just now, empty (its parents mkdir -p made stay) */
    }
    free(from_real);
  }
  free(dest_real);
  for (int i = 0; rc == 0 && i < n; i++) {
    char from[CK_PATH], to[CK_PATH];
    if (v[i].step <= step) continue;
    if (atoll_ckpt_join(from, sizeof from, root, v[i].name, err) != 0 ||
        atoll_ckpt_join(to, sizeof to, dest_dir, v[i].name, err) != 0)
      rc = -1;
    /* One rename per checkpoint: each is in root or in dest_dir, whole. */
    else if (rename(from, to) != 0)
      rc = atoll_fail(err, "%s: cannot move to %s: %s", from, to, strerror(errno));
  }
  free(v);
  if (rc == 0) rc = atoll_fsync_path(dest_dir, O_DIRECTORY, err);
  if (rc == 0) rc = atoll_fsync_path(root, O_DIRECTORY, err);
  return rc;
}

void atoll_ckpt_dirname(const char *root, int step, char *out, size_t outsz) {
  snprintf(out, outsz, "%s/step_%08d", root, step);
}

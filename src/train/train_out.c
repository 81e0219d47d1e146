/* The run directory at a run's start; see train_out.h and docs/formats.md ("The run
 * directory"). Only world rank 0 writes OUT (metrics, checkpoints), so only it locks:
 * on one machine the other ranks' lock attempts would fail against rank 0's. */
#include "train/train_out.h"

#include "ckpt/checkpoint.h"
#include "ckpt/run_dir.h"
#include "comm/comm.h"
#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_PATH 1200
#define MAX_METRICS (1u << 30) /* metrics.jsonl copied aside: ~150 bytes a step */

/* Whether a and b name the same existing directory (through any spelling or link). */
static int same_dir(const char *a, const char *b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* An existing --out that is not empty must look like a run directory (one of the
 * names a run writes), so that a slip such as --out / or --out ~/project does not
 * scatter a run's files among someone else's. A run directory may hold other files
 * too. Fills *stranger with one of the names found when it fails. */
static int foreign_dir(const char *dir, char *stranger, size_t sz) {
  static const char *const run_names[] = {".lock", "metrics.jsonl", "summary.json", "checkpoints"};
  DIR *d = opendir(dir);
  if (!d) return 0; /* missing (made later) or not a directory (the lock names it) */
  int foreign = 0, run = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    int known = 0;
    for (size_t i = 0; i < sizeof run_names / sizeof run_names[0]; i++)
      if (strcmp(e->d_name, run_names[i]) == 0) known = 1;
    if (known) run = 1;
    else if (!foreign) {
      foreign = 1;
      snprintf(stranger, sz, "%s", e->d_name);
    }
  }
  closedir(d);
  return foreign && !run;
}

/* A checkpoint's step and weights hash (its state.json). */
static int read_step(const char *dir, int *step, char *hash, size_t hashsz, atoll_err *err) {
  cJSON *state = NULL;
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(state, "step");
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(state, "weights_hash");
  int ok = cJSON_IsNumber(s);
  if (ok) *step = s->valueint;
  snprintf(hash, hashsz, "%s", cJSON_IsString(h) ? h->valuestring : "");
  cJSON_Delete(state);
  return ok ? 0 : atoll_fail(err, "%s/state.json: step missing", dir);
}

/* Whether the checkpoint at resume_dir (step, hash) is the run's of root: it lies in
 * root, or root holds the same step with the same weights hash (a copy taken out of
 * the run, e.g. to be repaired). */
static int same_run(const char *root, const char *resume_dir, int step, const char *hash) {
  char parent[OUT_PATH], twin[OUT_PATH], twin_hash[32];
  atoll_parent_dir(resume_dir, parent, sizeof parent);
  if (same_dir(parent, root)) return 1;
  atoll_ckpt_dirname(root, step, twin, sizeof twin);
  int twin_step;
  atoll_err ignored;
  return hash[0] && read_step(twin, &twin_step, twin_hash, sizeof twin_hash, &ignored) == 0 && twin_step == step &&
         strcmp(twin_hash, hash) == 0;
}

/* OUT/name into dest/name: moved, or (copy) copied whole. A missing file is skipped. */
static int set_aside_file(const char *out, const char *name, const char *dest, int copy, atoll_err *err) {
  char from[OUT_PATH], to[OUT_PATH];
  snprintf(from, sizeof from, "%s/%s", out, name);
  snprintf(to, sizeof to, "%s/%s", dest, name);
  struct stat st;
  if (lstat(from, &st) != 0) return errno == ENOENT ? 0 : atoll_fail(err, "%s: cannot stat: %s", from, strerror(errno));
  if (!copy) {
    if (rename(from, to) != 0) return atoll_fail(err, "%s: cannot move to %s: %s", from, to, strerror(errno));
    return atoll_fsync_path(dest, O_DIRECTORY, err);
  }
  char *text = NULL;
  size_t len = 0;
  if (atoll_read_file(from, MAX_METRICS, &text, &len, err)) return -1;
  int rc = atoll_write_file_atomic(to, text, len, err);
  free(text);
  return rc;
}

/* --move-newer DIR: the checkpoints after `step` (-1: all) move into DIR, and with
 * them the run's record: metrics.jsonl is copied when the resumed run keeps its lines
 * up to `step` (the same run), moved when it is another run's; summary.json, which
 * describes the run's old end, moves. */
static int move_aside(const atoll_config *c, const char *root, int step, int count, atoll_err *err) {
  const char *dest = c->run.move_newer;
  if (atoll_ckpt_move_aside(root, step, dest, err)) return -1;
  if (set_aside_file(c->run.out, "metrics.jsonl", dest, step >= 0, err) ||
      set_aside_file(c->run.out, "summary.json", dest, 0, err))
    return -1;
  fprintf(stderr, "atoll train: moved %d checkpoint%s%s from %s into %s (summary.json moved, metrics.jsonl %s)\n",
          count, count == 1 ? "" : "s", step >= 0 ? " newer than the resumed one" : "", root, dest,
          step >= 0 ? "copied" : "moved");
  return 0;
}

int atoll_run_check_start(const atoll_config *c, const char *ckpt, int start, atoll_err *err) {
  if (start > c->run.steps) return atoll_fail(err, "--steps %d: the checkpoint %s is already at step %d", c->run.steps, ckpt, start);
  /* a stop already reached would run one step and stop */
  if (c->run.stop_after > 0 && start >= c->run.stop_after && start < c->run.steps)
    return atoll_fail(err, "--stop-after %d: the run already begins at step %d; pass a later step or leave --stop-after out",
                      c->run.stop_after, start);
  return 0;
}

/* A resume must not mix its checkpoints with others in OUT/checkpoints: newer ones of
 * the same run (saving and pruning would interleave two histories) or another run's.
 * A resume refused for its step is refused here, before --move-newer moves anything. */
static int check_resume(const atoll_config *c, const char *root, const char *resume_dir, atoll_err *err) {
  int step = 0, count, newest;
  char hash[32];
  if (read_step(resume_dir, &step, hash, sizeof hash, err)) return -1;
  if (atoll_run_check_start(c, resume_dir, step, err)) return -1;
  int same = same_run(root, resume_dir, step, hash);
  int after = same ? step : -1;
  if (atoll_ckpt_newer(root, after, &count, &newest, err)) return -1;
  if (count == 0) return 0;
  if (c->run.move_newer[0]) return move_aside(c, root, after, count, err);
  if (same)
    return atoll_fail(err, "--resume %s: %s holds %d newer checkpoint%s (up to step %d) that this run would overwrite or prune; pass --move-newer DIR to move them and the run's metrics into DIR, or --resume %s to continue from the newest",
                      resume_dir, root, count, count == 1 ? "" : "s", newest, c->run.out);
  return atoll_fail(err, "--out %s: holds %d checkpoint%s of another run (up to step %d), not of --resume %s; choose another --out, or pass --move-newer DIR to move them and their metrics into DIR",
                    c->run.out, count, count == 1 ? "" : "s", newest, resume_dir);
}

/* p without trailing slashes and "." components: "a/b/./" is "a/b" */
static void trim(char *p) {
  size_t n = strlen(p);
  for (;;) {
    while (n > 1 && p[n - 1] == '/') n--;
    if (n >= 2 && p[n - 1] == '.' && p[n - 2] == '/') {
      n--;
      continue;
    }
    break;
  }
  p[n] = '\0';
}

/* p (n bytes) replaced by its trimmed parent ("." for a bare name, which exists) */
static void go_up(char *p, size_t n) {
  char up[4096];
  atoll_parent_dir(p, up, sizeof up);
  trim(up);
  snprintf(p, n, "%s", up);
}

/* How many trailing components of dir do not exist yet (0: dir exists). */
static int missing_levels(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  trim(p);
  int n = 0;
  for (; access(p, F_OK) != 0; n++) {
    if (strcmp(p, ".") == 0 || strcmp(p, "/") == 0) break; /* a removed working directory */
    go_up(p, sizeof p);
  }
  return n;
}

static int open_on_rank0(atoll_run_out *o, const atoll_config *c, const char *resume_dir, atoll_err *err) {
  char root[OUT_PATH];
  snprintf(root, sizeof root, "%s/checkpoints", c->run.out);
  if (c->run.move_newer[0] && !resume_dir)
    return atoll_fail(err, "--move-newer %s: only used with --resume (it moves checkpoints the resumed run would mix with)",
                      c->run.move_newer);
  /* a run's files among token files: prepare would then refuse the directory, and a
   * re-prepare that replaced it would take the run with it */
  char manifest[OUT_PATH];
  snprintf(manifest, sizeof manifest, "%s/manifest.json", c->run.out);
  if (same_dir(c->run.out, c->data.dir) || access(manifest, F_OK) == 0)
    return atoll_fail(err, "--out %s: is a data directory (holds manifest.json or is --data); choose another --out for the run",
                      c->run.out);
  char stranger[256];
  if (foreign_dir(c->run.out, stranger, sizeof stranger))
    return atoll_fail(err, "--out %s: not empty and not a run directory (it holds '%s' but no metrics.jsonl, summary.json or checkpoints/); choose a new or empty directory",
                      c->run.out, stranger);
  int missing = missing_levels(c->run.out); /* the lock makes them */
  if (atoll_run_dir_lock(c->run.out, &o->lock_fd, err)) return -1;
  if (missing > 0) {
    snprintf(o->made, sizeof o->made, "%s", c->run.out);
    trim(o->made);
    o->made_levels = missing;
  }
  /* under the lock no other process saves here: whatever a killed save or prune
   * left is an orphan */
  if (atoll_ckpt_clean(root, err)) return -1;
  for (int i = 0; i < 2; i++) { /* a killed run's half-written metrics.jsonl or summary.json */
    char path[OUT_PATH + 32];
    snprintf(path, sizeof path, "%s/%s", c->run.out, i ? "summary.json" : "metrics.jsonl");
    atoll_remove_atomic_leftovers(path);
  }
  return resume_dir ? check_resume(c, root, resume_dir, err) : 0;
}

int atoll_run_out_open(atoll_run_out *o, const atoll_config *c, atoll_comm *world, const char *resume_dir,
                       atoll_err *err) {
  o->lock_fd = -1;
  o->made[0] = '\0';
  o->made_levels = 0;
  int rank = atoll_comm_rank(world);
  int failed = rank == 0 && open_on_rank0(o, c, resume_dir, err) != 0;
  atoll_broadcast(world, &failed, sizeof failed, 0); /* every rank exits on rank 0's one message */
  if (!failed) return 0;
  atoll_run_out_close(o);
  return rank == 0 ? ATOLL_TRAIN_ERROR : ATOLL_TRAIN_QUIET;
}

/* 1 when dir holds nothing but .lock */
static int only_lock(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int others = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, ".lock")) others = 1;
  closedir(d);
  return !others;
}

void atoll_run_out_close(atoll_run_out *o) {
  if (o->lock_fd >= 0 && o->made[0] && only_lock(o->made)) {
    char path[sizeof o->made + 8];
    snprintf(path, sizeof path, "%s/.lock", o->made);
    /* A run starting now finds no lock and makes its own: then rmdir fails on its file
     * and the directory stays theirs. rmdir never removes a directory with anything in
     * it, so the parents this run made go only while they are empty. */
    unlink(path);
    snprintf(path, sizeof path, "%s", o->made);
    for (int i = 0; i < o->made_levels && rmdir(path) == 0; i++) go_up(path, sizeof path);
  }
  o->made[0] = '\0';
  o->made_levels = 0;
  atoll_run_dir_unlock(o->lock_fd);
  o->lock_fd = -1;
}

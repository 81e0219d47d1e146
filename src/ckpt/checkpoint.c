/* Checkpoint directories: atomic save, validated load, discovery and pruning.
 *
 * Save protocol for DIR = PARENT/NAME (pid P):
 *   1. mkdir -p PARENT; write model.safetensors, optimizer.safetensors and
 *      state.json into PARENT/.tmp-NAME-P, fsync each file and the directory.
 *   2. If DIR does not exist: rename .tmp-NAME-P -> DIR.
 *      If it does: swap the two atomically (renameat2 RENAME_EXCHANGE), so that DIR
 *      is never missing; where the file system cannot do that, rename DIR ->
 *      PARENT/.old-NAME-P, then .tmp-NAME-P -> DIR (DIR is briefly absent).
 *   3. fsync PARENT, then remove whatever holds the old checkpoint.
 * A kill at any point leaves DIR complete (old or new) except in the fallback's
 * window, where both complete copies survive as hidden siblings.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ckpt/checkpoint.h"

#include "core/fs.h"

#include "ckpt/safetensors.h"
#include "model/layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define CK_PATH 4096
#define CK_MAX_STATE (64u << 20) /* state.json larger than this is not ours */

static const char *const MODEL_FILE = "model.safetensors";
static const char *const OPTIM_FILE = "optimizer.safetensors";
static const char *const STATE_FILE = "state.json";

static int g_exchange = 1;

void atoll_ckpt_set_exchange(int enabled) { g_exchange = enabled; }

/* --------------------------------------------------------------- paths --- */

static int join(char *out, size_t outsz, const char *a, const char *b, atoll_err *err) {
  int n = snprintf(out, outsz, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= outsz) return atoll_fail(err, "%s/%s: path too long", a, b);
  return 0;
}

/* DIR -> PARENT and NAME, ignoring trailing slashes. */
static int split_path(const char *dir, char *parent, char *name, atoll_err *err) {
  char buf[CK_PATH];
  size_t len = strlen(dir);
  if (len == 0 || len >= sizeof buf) return atoll_fail(err, "%s: invalid checkpoint path", dir);
  memcpy(buf, dir, len + 1);
  while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
  char *slash = strrchr(buf, '/');
  const char *base = slash ? slash + 1 : buf;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return atoll_fail(err, "%s: a checkpoint path must end in a directory name", dir);
  strcpy(name, base);
  if (!slash)
    strcpy(parent, ".");
  else if (slash == buf)
    strcpy(parent, "/");
  else
    *slash = 0, strcpy(parent, buf);
  return 0;
}

static int sibling(char *out, const char *parent, const char *kind, const char *name, long pid,
                   atoll_err *err) {
  int n = snprintf(out, CK_PATH, "%s/.%s-%s-%ld", parent, kind, name, pid);
  if (n < 0 || n >= CK_PATH) return atoll_fail(err, "%s/%s: path too long", parent, name);
  return 0;
}

static int is_dir(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_state(const char *dir) {
  char p[CK_PATH];
  struct stat st;
  if (join(p, sizeof p, dir, STATE_FILE, NULL) != 0) return 0;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* ----------------------------------------------------- file system ops --- */

/* Removes path and everything below it; symbolic links are removed, not followed. */
static int rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode)) return unlink(path);
  DIR *d = opendir(path);
  if (!d) return -1;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char child[CK_PATH];
    if (join(child, sizeof child, path, e->d_name, NULL) != 0 || rm_tree(child) != 0) rc = -1;
  }
  closedir(d);
  return rc == 0 ? rmdir(path) : -1;
}

/* --------------------------------------------------------------- state --- */

static int json_int(const cJSON *item, int *out) {
  if (!cJSON_IsNumber(item)) return -1;
  double v = item->valuedouble;
  if (!(v >= (double)INT_MIN && v <= (double)INT_MAX) || v != floor(v)) return -1;
  *out = (int)v;
  return 0;
}

static int check_step(const cJSON *state, const char *what, int *step, atoll_err *err) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(state, "step");
  if (!s) return atoll_fail(err, "%s: missing \"step\"", what);
  if (json_int(s, step) != 0 || *step < 0)
    return atoll_fail(err, "%s: \"step\" must be an integer >= 0", what);
  return 0;
}

/* state with "format" and "version" first (replacing any given). */
static cJSON *stamp_state(const cJSON *state) {
  cJSON *out = cJSON_CreateObject();
  if (!out || !cJSON_AddStringToObject(out, "format", ATOLL_CKPT_FORMAT) ||
      !cJSON_AddNumberToObject(out, "version", ATOLL_CKPT_VERSION))
    goto fail;
  const cJSON *item;
  cJSON_ArrayForEach(item, state) {
    if (strcmp(item->string, "format") == 0 || strcmp(item->string, "version") == 0) continue;
    cJSON *copy = cJSON_Duplicate(item, 1);
    if (!copy) goto fail;
    if (!cJSON_AddItemToObject(out, item->string, copy)) {
      cJSON_Delete(copy);
      goto fail;
    }
  }
  return out;
fail:
  cJSON_Delete(out);
  return NULL;
}

static int write_text(const char *path, const char *text, atoll_err *err) {
  FILE *f = fopen(path, "w");
  if (!f) return atoll_fail(err, "%s: cannot create: %s", path, strerror(errno));
  int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0;
  int e = errno;
  if (fclose(f) != 0 && !bad) bad = 1, e = errno;
  if (bad) return atoll_fail(err, "%s: write failed: %s", path, strerror(e));
  return 0;
}

static int write_state(const char *dir, const cJSON *state, atoll_err *err) {
  char path[CK_PATH];
  if (join(path, sizeof path, dir, STATE_FILE, err) != 0) return -1;
  cJSON *stamped = stamp_state(state);
  char *text = stamped ? cJSON_Print(stamped) : NULL;
  cJSON_Delete(stamped);
  if (!text) return atoll_fail(err, "%s: out of memory", path);
  int rc = write_text(path, text, err);
  cJSON_free(text);
  return rc;
}

/* {"format": "atoll", "config": "...", "step": "N"} for model.safetensors. */
static cJSON *model_metadata(const atoll_layout *lay, const cJSON *state, int step) {
  cJSON *m = cJSON_CreateObject();
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(state, "config");
  char *text = NULL;
  if (cJSON_IsString(config)) {
    text = strdup(config->valuestring);
  } else if (config) {
    char *p = cJSON_PrintUnformatted(config);
    text = p ? strdup(p) : NULL;
    cJSON_free(p);
  } else {
    char buf[256];
    const atoll_shape *s = &lay->shape;
    snprintf(buf, sizeof buf,
             "{\"layers\":%d,\"heads\":%d,\"dim\":%d,\"context\":%d,\"vocab\":%d}", s->layers,
             s->heads, s->dim, s->context, s->vocab);
    text = strdup(buf);
  }
  char stepbuf[32];
  snprintf(stepbuf, sizeof stepbuf, "%d", step);
  int ok = m && text && cJSON_AddStringToObject(m, "format", "atoll") &&
           cJSON_AddStringToObject(m, "config", text) &&
           cJSON_AddStringToObject(m, "step", stepbuf);
  free(text);
  if (!ok) {
    cJSON_Delete(m);
    return NULL;
  }
  return m;
}

/* ---------------------------------------------------------------- save --- */

static int write_contents(const char *tmp, const atoll_layout *lay, const float *params,
                          const float *exp_avg, const float *exp_avg_sq,
                          const atoll_ckpt_extra *extras, int nextras, const cJSON *state,
                          int step, atoll_err *err) {
  char path[CK_PATH];
  cJSON *meta = model_metadata(lay, state, step);
  if (!meta) return atoll_fail(err, "%s: out of memory", tmp);
  int rc = join(path, sizeof path, tmp, MODEL_FILE, err);
  if (rc == 0) rc = atoll_st_write(path, lay, "", params, meta, err);
  cJSON_Delete(meta);
  if (rc == 0 && exp_avg) {
    atoll_st_part parts[2] = {{"exp_avg.", exp_avg}, {"exp_avg_sq.", exp_avg_sq}};
    rc = join(path, sizeof path, tmp, OPTIM_FILE, err);
    if (rc == 0) rc = atoll_st_write_parts(path, lay, parts, 2, NULL, err);
  }
  for (int i = 0; rc == 0 && i < nextras; i++) {
    if (strchr(extras[i].file, '/')) return atoll_fail(err, "%s: bad extra file name %s", tmp, extras[i].file);
    rc = join(path, sizeof path, tmp, extras[i].file, err);
    if (rc == 0) rc = atoll_st_write_parts(path, lay, extras[i].parts, extras[i].nparts, NULL, err);
  }
  if (rc == 0) rc = write_state(tmp, state, err);
  if (rc == 0) rc = atoll_fsync_path(tmp, O_DIRECTORY, err);
  return rc;
}

/* An existing dir may be replaced only if it is a checkpoint or empty. */
static int replaceable(const char *dir, atoll_err *err) {
  struct stat st;
  if (lstat(dir, &st) != 0) return atoll_fail(err, "%s: cannot stat: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return atoll_fail(err, "%s: exists and is not a directory; not replacing it", dir);
  if (has_state(dir)) return 0;
  DIR *d = opendir(dir);
  if (!d) return atoll_fail(err, "%s: cannot open: %s", dir, strerror(errno));
  int empty = 1;
  struct dirent *e;
  while (empty && (e = readdir(d)) != NULL)
    empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  closedir(d);
  if (!empty)
    return atoll_fail(err, "%s: exists and is not a checkpoint (no state.json); not replacing it",
                      dir);
  return 0;
}

/* Moves the finished tmp directory to dir; on failure dir is as it was. */
static int install(const char *tmp, const char *dir, const char *parent, const char *name,
                   atoll_err *err) {
  struct stat st;
  if (lstat(dir, &st) != 0) {
    if (errno != ENOENT) return atoll_fail(err, "%s: cannot stat: %s", dir, strerror(errno));
    if (rename(tmp, dir) != 0)
      return atoll_fail(err, "%s: cannot rename %s into place: %s", dir, tmp, strerror(errno));
    return atoll_fsync_path(parent, O_DIRECTORY, err);
  }
  if (replaceable(dir, err) != 0) return -1;
#ifdef RENAME_EXCHANGE
  if (g_exchange) {
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
      int rc = atoll_fsync_path(parent, O_DIRECTORY, err);
      rm_tree(tmp); /* now holds the old checkpoint */
      return rc;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EPERM)
      return atoll_fail(err, "%s: cannot exchange with %s: %s", dir, tmp, strerror(errno));
  }
#endif
  char old[CK_PATH];
  if (sibling(old, parent, "old", name, (long)getpid(), err) != 0) return -1;
  rm_tree(old);
  if (rename(dir, old) != 0)
    return atoll_fail(err, "%s: cannot move aside to %s: %s", dir, old, strerror(errno));
  if (rename(tmp, dir) != 0) {
    int e = errno;
    if (rename(old, dir) != 0)
      return atoll_fail(err, "%s: cannot rename %s into place: %s; the previous checkpoint "
                        "could not be moved back and is at %s", dir, tmp, strerror(e), old);
    return atoll_fail(err, "%s: cannot rename %s into place: %s", dir, tmp, strerror(e));
  }
  int rc = atoll_fsync_path(parent, O_DIRECTORY, err);
  rm_tree(old);
  return rc;
}

static int check_save_args(const char *dir, const float *params, const float *exp_avg,
                           const float *exp_avg_sq, const cJSON *state, int *step,
                           atoll_err *err) {
  if (!params) return atoll_fail(err, "%s: no parameters to save", dir);
  if ((exp_avg == NULL) != (exp_avg_sq == NULL))
    return atoll_fail(err, "%s: give both AdamW moments or neither", dir);
  if (!cJSON_IsObject(state)) return atoll_fail(err, "%s: training state is not a JSON object", dir);
  return check_step(state, dir, step, err);
}

int atoll_ckpt_save(const char *dir, const atoll_layout *lay, const float *params,
                    const float *exp_avg, const float *exp_avg_sq, const cJSON *state,
                    atoll_err *err) {
  return atoll_ckpt_save_ex(dir, lay, params, exp_avg, exp_avg_sq, NULL, 0, state, err);
}

int atoll_ckpt_save_ex(const char *dir, const atoll_layout *lay, const float *params,
                       const float *exp_avg, const float *exp_avg_sq, const atoll_ckpt_extra *extras,
                       int nextras, const cJSON *state, atoll_err *err) {
  char parent[CK_PATH], name[CK_PATH], tmp[CK_PATH];
  int step;
  if (check_save_args(dir, params, exp_avg, exp_avg_sq, state, &step, err) != 0) return -1;
  if (split_path(dir, parent, name, err) != 0) return -1;
  if (sibling(tmp, parent, "tmp", name, (long)getpid(), err) != 0) return -1;
  if (atoll_mkdir_p(parent, err) != 0) return -1;
  if (rm_tree(tmp) != 0)
    return atoll_fail(err, "%s: cannot remove stale %s: %s", dir, tmp, strerror(errno));
  if (mkdir(tmp, 0755) != 0)
    return atoll_fail(err, "%s: cannot create directory: %s", tmp, strerror(errno));
  int rc = write_contents(tmp, lay, params, exp_avg, exp_avg_sq, extras, nextras, state, step, err);
  if (rc == 0) rc = install(tmp, dir, parent, name, err);
  if (rc != 0) rm_tree(tmp);
  return rc;
}

/* ---------------------------------------------------------------- load --- */

static int validate_state(const cJSON *s, const char *path, atoll_err *err) {
  if (!cJSON_IsObject(s)) return atoll_fail(err, "%s: not a JSON object", path);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, ATOLL_CKPT_FORMAT) != 0)
    return atoll_fail(err, "%s: format is not \"%s\" (not an atoll checkpoint)", path,
                      ATOLL_CKPT_FORMAT);
  int version, step;
  if (json_int(cJSON_GetObjectItemCaseSensitive(s, "version"), &version) != 0)
    return atoll_fail(err, "%s: missing or invalid \"version\"", path);
  if (version != ATOLL_CKPT_VERSION)
    return atoll_fail(err, "%s: unsupported version %d (this build reads version %d)", path,
                      version, ATOLL_CKPT_VERSION);
  return check_step(s, path, &step, err);
}

int atoll_ckpt_read_state(const char *dir, cJSON **state, atoll_err *err) {
  char path[CK_PATH];
  struct stat st;
  *state = NULL;
  if (stat(dir, &st) != 0) return atoll_fail(err, "%s: no such checkpoint directory", dir);
  if (!S_ISDIR(st.st_mode)) return atoll_fail(err, "%s: not a directory", dir);
  if (join(path, sizeof path, dir, STATE_FILE, err) != 0) return -1;
  if (stat(path, &st) != 0 && errno == ENOENT)
    return atoll_fail(err, "%s: not a checkpoint (no state.json)", dir);
  char *text = NULL;
  size_t len = 0;
  if (atoll_read_file(path, CK_MAX_STATE, &text, &len, err) != 0) return -1;
  const char *end = NULL;
  cJSON *s = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  size_t at = end ? (size_t)(end - text) : 0;
  free(text);
  if (!s) return atoll_fail(err, "%s: invalid JSON (error near byte %zu)", path, at);
  if (validate_state(s, path, err) != 0) {
    cJSON_Delete(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int check_model_metadata(const cJSON *meta, const char *path, atoll_err *err) {
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(meta, "format");
  if (fmt && (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "atoll") != 0))
    return atoll_fail(err, "%s: metadata format is not \"atoll\"", path);
  return 0;
}

int atoll_ckpt_load(const char *dir, const atoll_layout *lay, float *params, float *exp_avg,
                    float *exp_avg_sq, atoll_err *err) {
  char path[CK_PATH];
  cJSON *state = NULL, *meta = NULL;
  if ((exp_avg == NULL) != (exp_avg_sq == NULL))
    return atoll_fail(err, "%s: load both AdamW moments or neither", dir);
  if (atoll_ckpt_read_state(dir, &state, err) != 0) return -1;
  cJSON_Delete(state);
  if (join(path, sizeof path, dir, MODEL_FILE, err) != 0) return -1;
  int rc = atoll_st_read(path, lay, "", params, &meta, err);
  if (rc == 0) rc = check_model_metadata(meta, path, err);
  cJSON_Delete(meta);
  if (rc != 0 || !exp_avg) return rc;
  if (join(path, sizeof path, dir, OPTIM_FILE, err) != 0) return -1;
  if (access(path, F_OK) != 0)
    return atoll_fail(err, "%s: checkpoint has no optimizer state (no %s)", dir, OPTIM_FILE);
  atoll_st_read_part parts[2] = {{"exp_avg.", exp_avg}, {"exp_avg_sq.", exp_avg_sq}};
  return atoll_st_read_parts(path, lay, parts, 2, NULL, err);
}

int atoll_ckpt_load_extra(const char *dir, const atoll_layout *lay, const char *file,
                          const atoll_st_read_part *parts, int nparts, atoll_err *err) {
  char path[CK_PATH];
  if (join(path, sizeof path, dir, file, err) != 0) return -1;
  if (access(path, F_OK) != 0) return atoll_fail(err, "%s: checkpoint has no %s", dir, file);
  return atoll_st_read_parts(path, lay, parts, nparts, NULL, err);
}

/* ------------------------------------------------------ find and prune --- */

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
    if (join(path, sizeof path, root, e->d_name, NULL) != 0 || !is_dir(path) || !has_state(path))
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
  if (has_state(root)) {
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
    rc = join(out, outsz, root, v[best].name, err);
  free(v);
  return rc;
}

/* ".tmp-NAME-PID" or ".old-NAME-PID" whose process is gone (or is us: we are not
 * in the middle of a save while pruning). */
static int stale_sibling(const char *name) {
  if (strncmp(name, ".tmp-", 5) != 0 && strncmp(name, ".old-", 5) != 0) return 0;
  const char *dash = strrchr(name + 5, '-');
  if (!dash || !dash[1]) return 0;
  long pid = 0;
  for (const char *p = dash + 1; *p; p++) {
    if (*p < '0' || *p > '9' || pid > 100000000) return 0;
    pid = pid * 10 + (*p - '0');
  }
  if (pid <= 0) return 0;
  if (pid == (long)getpid()) return 1;
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static int prune_stale(const char *root, atoll_err *err) {
  DIR *d = opendir(root);
  if (!d) return 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[CK_PATH];
    if (!stale_sibling(e->d_name)) continue;
    if (join(path, sizeof path, root, e->d_name, NULL) != 0 || !is_dir(path)) continue;
    if (rm_tree(path) != 0 && rc == 0)
      rc = atoll_fail(err, "%s: cannot remove: %s", path, strerror(errno));
  }
  closedir(d);
  return rc;
}

int atoll_ckpt_prune(const char *root, int keep, atoll_err *err) {
  if (keep < 1) return atoll_fail(err, "%s: keep must be >= 1 (got %d)", root, keep);
  int n, missing;
  ck_entry *v;
  if (list_steps(root, &v, &n, &missing, err) != 0) return missing ? 0 : -1;
  if (n > 1) qsort(v, (size_t)n, sizeof *v, newest_first);
  int rc = 0;
  for (int i = keep; i < n; i++) {
    char path[CK_PATH];
    if (join(path, sizeof path, root, v[i].name, err) != 0) {
      rc = -1;
      continue;
    }
    if (rm_tree(path) != 0 && rc == 0)
      rc = atoll_fail(err, "%s: cannot remove: %s", path, strerror(errno));
  }
  free(v);
  int rc2 = prune_stale(root, err);
  return rc ? rc : rc2;
}

void atoll_ckpt_dirname(const char *root, int step, char *out, size_t outsz) {
  snprintf(out, outsz, "%s/step_%08d", root, step);
}

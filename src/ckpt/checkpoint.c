/* Checkpoint directories: atomic save and validated load (finding and pruning are in
 * ckpt_dirs.c, the per-file hashes in ckpt_hash.c).
 *
 * Save protocol for DIR = PARENT/NAME (pid P):
 *   1. mkdir -p PARENT; write model.safetensors, optimizer.safetensors and
 *      state.json (last, atomically, with the files' hashes) into
 *      PARENT/.tmp-NAME-P, fsync each file and the directory.
 *   2. If DIR does not exist: rename .tmp-NAME-P -> DIR.
 *      If it does: swap the two atomically (renameat2 RENAME_EXCHANGE), so that DIR
 *      is never missing; where the file system cannot do that, rename DIR ->
 *      PARENT/.old-NAME-P, then .tmp-NAME-P -> DIR (DIR is briefly absent).
 *   3. fsync PARENT, then remove whatever holds the old checkpoint.
 * A kill at any point leaves DIR complete (old or new) except in the fallback's
 * window, where both complete copies survive as hidden siblings (atoll_ckpt_clean
 * puts one back).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_internal.h"

#include "core/fs.h"
#include "core/json_text.h"

#include "ckpt/safetensors.h"
#include "ckpt/safetensors_internal.h"
#include "model/layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define CK_PATH ATOLL_CKPT_PATH
#define CK_MAX_STATE (64u << 20) /* state.json larger than this is not ours */

static const char *const MODEL_FILE = "model.safetensors";
static const char *const OPTIM_FILE = "optimizer.safetensors";
static const char *const STATE_FILE = "state.json";

static int g_exchange = 1;

void atoll_ckpt_set_exchange(int enabled) { g_exchange = enabled; }

/* --------------------------------------------------------------- paths --- */

int atoll_ckpt_join(char *out, size_t outsz, const char *a, const char *b, atoll_err *err) {
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

int atoll_ckpt_is_dir(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int atoll_ckpt_has_state(const char *dir) {
  char p[CK_PATH];
  struct stat st;
  if (atoll_ckpt_join(p, sizeof p, dir, STATE_FILE, NULL) != 0) return 0;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int atoll_ckpt_dir_empty(const char *dir, int *empty, atoll_err *err) {
  DIR *d = opendir(dir);
  if (!d) return atoll_fail(err, "%s: cannot open: %s", dir, strerror(errno));
  struct dirent *e;
  *empty = 1;
  while (*empty && (e = readdir(d)) != NULL)
    *empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  closedir(d);
  return 0;
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

/* state with "format" and "version" first (replacing any given) and the per-file
 * hashes of this save (replacing any the caller's state carried over). */
static cJSON *stamp_state(const cJSON *state, const cJSON *hashes) {
  cJSON *out = cJSON_CreateObject();
  if (!out || !cJSON_AddStringToObject(out, "format", ATOLL_CKPT_FORMAT) ||
      !cJSON_AddNumberToObject(out, "version", ATOLL_CKPT_VERSION))
    goto fail;
  const cJSON *item;
  cJSON_ArrayForEach(item, state) {
    if (strcmp(item->string, "format") == 0 || strcmp(item->string, "version") == 0 ||
        strcmp(item->string, "file_hashes") == 0)
      continue;
    cJSON *copy = cJSON_Duplicate(item, 1);
    if (!copy) goto fail;
    if (!cJSON_AddItemToObject(out, item->string, copy)) {
      cJSON_Delete(copy);
      goto fail;
    }
  }
  cJSON *copy = cJSON_Duplicate(hashes, 1);
  if (!copy || !cJSON_AddItemToObject(out, "file_hashes", copy)) {
    cJSON_Delete(copy);
    goto fail;
  }
  return out;
fail:
  cJSON_Delete(out);
  return NULL;
}

static int write_state(const char *dir, const cJSON *state, const cJSON *hashes, atoll_err *err) {
  char path[CK_PATH];
  if (atoll_ckpt_join(path, sizeof path, dir, STATE_FILE, err) != 0) return -1;
  cJSON *stamped = stamp_state(state, hashes);
  char *text = stamped ? cJSON_Print(stamped) : NULL;
  cJSON_Delete(stamped);
  size_t len = text ? strlen(text) : 0;
  char *line = text ? malloc(len + 2) : NULL;
  if (line) memcpy(line, text, len), memcpy(line + len, "\n", 2);
  cJSON_free(text);
  if (!line) return atoll_fail(err, "%s: out of memory", path);
  /* Atomic, so that a state.json present is a complete one (cleaning relies on it). */
  int rc = atoll_write_file_atomic(path, line, len + 1, err);
  free(line);
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

/* Writes tmp/file from nbuffers flat buffers and records the hash of what it wrote. */
static int write_tensors(const char *tmp, const char *file, const atoll_layout *lay,
                         const atoll_st_buffer *buffers, int nbuffers, const cJSON *meta, cJSON *hashes,
                         atoll_err *err) {
  char path[CK_PATH];
  const float *bufs[ATOLL_ST_MAX_BUFFERS];
  if (strchr(file, '/')) return atoll_fail(err, "%s: bad file name %s", tmp, file);
  if (nbuffers < 1 || nbuffers > ATOLL_ST_MAX_BUFFERS)
    return atoll_fail(err, "%s/%s: %d flat buffers (1 to %d allowed)", tmp, file, nbuffers,
                      ATOLL_ST_MAX_BUFFERS);
  if (atoll_ckpt_join(path, sizeof path, tmp, file, err) != 0 ||
      atoll_st_write_buffers(path, lay, buffers, nbuffers, meta, err) != 0)
    return -1;
  for (int i = 0; i < nbuffers; i++) bufs[i] = buffers[i].data;
  return atoll_ckpt_record_hash(hashes, file, atoll_ckpt_buffers_hash(bufs, nbuffers, lay->nparams), err);
}

static int write_contents(const char *tmp, const atoll_layout *lay, const float *params,
                          const float *exp_avg, const float *exp_avg_sq,
                          const atoll_ckpt_extra *extras, int nextras, const cJSON *state,
                          int step, atoll_err *err) {
  cJSON *meta = model_metadata(lay, state, step), *hashes = cJSON_CreateObject();
  int rc = meta && hashes ? 0 : atoll_fail(err, "%s: out of memory", tmp);
  atoll_st_buffer weights = {"", params};
  if (rc == 0) rc = write_tensors(tmp, MODEL_FILE, lay, &weights, 1, meta, hashes, err);
  if (rc == 0 && exp_avg) {
    atoll_st_buffer buffers[2] = {{"exp_avg.", exp_avg}, {"exp_avg_sq.", exp_avg_sq}};
    rc = write_tensors(tmp, OPTIM_FILE, lay, buffers, 2, NULL, hashes, err);
  }
  for (int i = 0; rc == 0 && i < nextras; i++) {
    char path[CK_PATH];
    if (!extras[i].text)
      rc = write_tensors(tmp, extras[i].file, lay, extras[i].buffers, extras[i].nbuffers, NULL, hashes, err);
    else if (strchr(extras[i].file, '/'))
      rc = atoll_fail(err, "%s: bad file name %s", tmp, extras[i].file);
    else if ((rc = atoll_ckpt_join(path, sizeof path, tmp, extras[i].file, err)) == 0)
      rc = atoll_write_file_atomic(path, extras[i].text, strlen(extras[i].text), err);
  }
  if (rc == 0) rc = write_state(tmp, state, hashes, err);
  if (rc == 0) rc = atoll_fsync_path(tmp, O_DIRECTORY, err);
  cJSON_Delete(meta);
  cJSON_Delete(hashes);
  return rc;
}

/* An existing dir may be replaced only if it is a checkpoint or empty. */
static int replaceable(const char *dir, atoll_err *err) {
  struct stat st;
  if (lstat(dir, &st) != 0) return atoll_fail(err, "%s: cannot stat: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return atoll_fail(err, "%s: exists and is not a directory; not replacing it", dir);
  if (atoll_ckpt_has_state(dir)) return 0;
  int empty;
  if (atoll_ckpt_dir_empty(dir, &empty, err) != 0) return -1;
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
      atoll_rm_tree(tmp); /* now holds the old checkpoint */
      return rc;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EPERM)
      return atoll_fail(err, "%s: cannot exchange with %s: %s", dir, tmp, strerror(errno));
  }
#endif
  char old[CK_PATH];
  if (sibling(old, parent, "old", name, (long)getpid(), err) != 0) return -1;
  atoll_rm_tree(old);
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
  atoll_rm_tree(old);
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
  if (atoll_rm_tree(tmp) != 0)
    return atoll_fail(err, "%s: cannot remove stale %s: %s", dir, tmp, strerror(errno));
  if (mkdir(tmp, 0755) != 0)
    return atoll_fail(err, "%s: cannot create directory: %s", tmp, strerror(errno));
  int rc = write_contents(tmp, lay, params, exp_avg, exp_avg_sq, extras, nextras, state, step, err);
  if (rc == 0) rc = install(tmp, dir, parent, name, err);
  if (rc != 0) atoll_rm_tree(tmp);
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
  if (version != ATOLL_CKPT_VERSION && version != ATOLL_CKPT_VERSION_UNHASHED)
    return atoll_fail(err, "%s: unsupported version %d (this build reads versions %d and %d)", path,
                      version, ATOLL_CKPT_VERSION_UNHASHED, ATOLL_CKPT_VERSION);
  return check_step(s, path, &step, err);
}

int atoll_ckpt_read_state(const char *dir, cJSON **state, atoll_err *err) {
  char path[CK_PATH];
  struct stat st;
  *state = NULL;
  if (stat(dir, &st) != 0) return atoll_fail(err, "%s: no such checkpoint directory", dir);
  if (!S_ISDIR(st.st_mode)) return atoll_fail(err, "%s: not a directory", dir);
  if (atoll_ckpt_join(path, sizeof path, dir, STATE_FILE, err) != 0) return -1;
  if (stat(path, &st) != 0 && errno == ENOENT)
    return atoll_fail(err, "%s: not a checkpoint (no state.json)", dir);
  cJSON *s = atoll_json_read_whole(path, CK_MAX_STATE, err);
  if (!s) return -1;
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

/* AdamW's second moments ("exp_avg_sq." buffers) are averages of squares: a negative
 * one (a damaged file) would resume and turn the update NaN steps later, blamed on
 * training. Refused here, naming the file and tensor. (NaN and Inf the reader refuses.) */
static int check_second_moments(const char *dir, const char *file, const atoll_layout *lay,
                                const atoll_st_read_buffer *buffers, int nbuffers, atoll_err *err) {
  for (int b = 0; b < nbuffers; b++) {
    if (strcmp(buffers[b].prefix, "exp_avg_sq.") != 0) continue;
    for (int i = 0; i < lay->ntensors; i++) {
      const atoll_tensor *t = &lay->tensors[i];
      const float *v = buffers[b].data + t->offset;
      for (size_t k = 0; k < t->numel; k++)
        if (v[k] < 0)
          return atoll_fail(err, "%s/%s: tensor exp_avg_sq.%s: element %zu is negative (%g); a second moment "
                            "cannot be (the file is damaged)", dir, file, t->name, k, (double)v[k]);
    }
  }
  return 0;
}

int atoll_ckpt_load(const char *dir, const atoll_layout *lay, float *params, float *exp_avg,
                    float *exp_avg_sq, atoll_err *err) {
  char path[CK_PATH];
  cJSON *state = NULL, *meta = NULL;
  if ((exp_avg == NULL) != (exp_avg_sq == NULL))
    return atoll_fail(err, "%s: load both AdamW moments or neither", dir);
  if (atoll_ckpt_read_state(dir, &state, err) != 0) return -1;
  atoll_st_read_buffer weights = {"", params};
  int rc = atoll_ckpt_read_verified(dir, MODEL_FILE, state, lay, &weights, 1, &meta, err);
  if (rc == 0 && atoll_ckpt_join(path, sizeof path, dir, MODEL_FILE, err) != 0) rc = -1;
  if (rc == 0) rc = check_model_metadata(meta, path, err);
  if (rc == 0) rc = atoll_ckpt_check_weights_hash(state, lay, params, path, err);
  cJSON_Delete(meta);
  if (rc == 0 && exp_avg) {
    atoll_st_read_buffer buffers[2] = {{"exp_avg.", exp_avg}, {"exp_avg_sq.", exp_avg_sq}};
    if (atoll_ckpt_join(path, sizeof path, dir, OPTIM_FILE, err) != 0)
      rc = -1;
    else if (access(path, F_OK) != 0)
      rc = atoll_fail(err, "%s: checkpoint has no optimizer state (no %s)", dir, OPTIM_FILE);
    else
      rc = atoll_ckpt_read_verified(dir, OPTIM_FILE, state, lay, buffers, 2, NULL, err);
    if (rc == 0) rc = check_second_moments(dir, OPTIM_FILE, lay, buffers, 2, err);
  }
  cJSON_Delete(state);
  return rc;
}

int atoll_ckpt_load_extra(const char *dir, const atoll_layout *lay, const char *file,
                          const atoll_st_read_buffer *buffers, int nbuffers, atoll_err *err) {
  char path[CK_PATH];
  cJSON *state = NULL;
  if (atoll_ckpt_join(path, sizeof path, dir, file, err) != 0) return -1;
  if (access(path, F_OK) != 0) return atoll_fail(err, "%s: checkpoint has no %s", dir, file);
  if (atoll_ckpt_read_state(dir, &state, err) != 0) return -1;
  int rc = atoll_ckpt_read_verified(dir, file, state, lay, buffers, nbuffers, NULL, err);
  if (rc == 0) rc = check_second_moments(dir, file, lay, buffers, nbuffers, err);
  cJSON_Delete(state);
  return rc;
}

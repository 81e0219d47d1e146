/* atoll train --init-from-hf: a Hugging Face model directory (config.json and one
 * model.safetensors, or model.safetensors.index.json and its shards) into the whole
 * model's flat buffer (src/ckpt/hf.h). */
#include "ckpt/hf.h"

#include "ckpt/safetensors.h"
#include "core/fs.h"
#include "core/json_text.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Element i of a tensor as a float (F32, F16 or BF16; little-endian, unaligned). */
static float element(const atoll_st_tensor *t, uint64_t i) {
  const uint8_t *p = t->data;
  if (t->dtype == ATOLL_ST_F32) {
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
  if (t->dtype == ATOLL_ST_BF16) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  int e = (h >> 10) & 31, m = h & 1023; /* F16 */
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}

/* Names (at most a few, then a count) into out, for a message. */
static void name_list(char *out, size_t outsz, const char *name, int *count) {
  size_t len = strlen(out);
  if (*count < 3 && len < outsz) snprintf(out + len, outsz - len, "%s%s", *count ? ", " : "", name);
  (*count)++;
}

static void finish_list(char *out, size_t outsz, int count) {
  size_t len = strlen(out);
  if (count > 3 && len < outsz) snprintf(out + len, outsz - len, " and %d more", count - 3);
}

/* The checkpoint's tensors: one model.safetensors, or the shards an index names. */
typedef struct {
  int n;
  atoll_st_file *files;
  void **maps;
  size_t *sizes;
  char **used;       /* per file, per tensor: taken into the layout (or a tied copy) */
  char what[1300];   /* the checkpoint in messages: DIR/model.safetensors or DIR/...index.json */
} hf_files;

/* Tensor `name` in any file, or NULL. */
static const atoll_st_tensor *find(const hf_files *h, const char *name, int *file) {
  for (int i = 0; i < h->n; i++) {
    const atoll_st_tensor *s = atoll_st_file_find(&h->files[i], name);
    if (s) {
      if (file) *file = i;
      return s;
    }
  }
  return NULL;
}

/* Copies file tensors into params; marks the ones used. */
static int take_tensors(const hf_files *h, const atoll_layout *whole, const atoll_hf_arch *a, float *params,
                        atoll_err *err) {
  const char *path = h->what;
  char missing[400] = "";
  int nmissing = 0;
  for (int i = 0; i < whole->ntensors; i++) {
    const atoll_tensor *t = &whole->tensors[i];
    char name[96];
    int transpose = 0, file = 0;
    if (atoll_hf_name_of(a, t, name, sizeof name, &transpose))
      return atoll_fail(err, "%s: tensor %s has no %s name", path, t->name, a->model_type);
    const atoll_st_tensor *s = find(h, name, &file);
    if (!s) {
      name_list(missing, sizeof missing, name, &nmissing);
      continue;
    }
    h->used[file][s - h->files[file].tensors] = 1;
    if (s->dtype != ATOLL_ST_F32 && s->dtype != ATOLL_ST_F16 && s->dtype != ATOLL_ST_BF16)
      return atoll_fail(err, "%s: tensor %s is %s; atoll reads F32, F16 and BF16", path, name,
                        atoll_st_dtype_name(s->dtype));
    int64_t d0 = t->shape[0], d1 = t->ndim == 2 ? t->shape[1] : 0;
    int64_t want0 = transpose ? d1 : d0, want1 = transpose ? d0 : d1;
    if (s->ndim != t->ndim || s->shape[0] != want0 || (t->ndim == 2 && s->shape[1] != want1))
      return atoll_fail(err, "%s: tensor %s has %d dimensions [%lld, %lld], expected [%lld%s%lld]", path, name, s->ndim,
                        (long long)s->shape[0], (long long)(s->ndim > 1 ? s->shape[1] : 0), (long long)want0,
                        t->ndim == 2 ? ", " : "", (long long)(t->ndim == 2 ? want1 : 0));
    float *dst = params + t->offset;
    for (uint64_t k = 0; k < t->numel; k++) {
      float v = element(s, k);
      if (!isfinite(v)) return atoll_fail(err, "%s: tensor %s holds a value that is not finite", path, name);
      if (transpose) /* file [d1, d0] -> atoll [d0, d1] */
        dst[(k % (uint64_t)d0) * (uint64_t)d1 + k / (uint64_t)d0] = v;
      else
        dst[k] = v;
    }
  }
  if (nmissing) {
    finish_list(missing, sizeof missing, nmissing);
    return atoll_fail(err, "%s: %d tensor%s missing%s: %s", path, nmissing, nmissing == 1 ? "" : "s",
                      h->n > 1 ? " from every shard" : "", missing);
  }
  return 0;
}

/* A tied LM head may come as a copy of the embedding; any other tensor is refused. */
static int check_rest(const hf_files *h, const atoll_hf_arch *a, atoll_err *err) {
  const char *path = h->what;
  char extra[400] = "";
  int nextra = 0;
  for (int f = 0; f < h->n; f++)
    for (int i = 0; i < h->files[f].ntensors; i++) {
      const atoll_st_tensor *s = &h->files[f].tensors[i];
      if (h->used[f][i]) continue;
      if (a->tied_head && strcmp(s->name, a->tied_head) == 0) {
        const atoll_st_tensor *to = find(h, a->tied_to, NULL);
        int same = to && to->numel == s->numel && to->ndim == s->ndim;
        for (uint64_t k = 0; same && k < s->numel; k++) same = element(s, k) == element(to, k);
        if (!same)
          return atoll_fail(err, "%s: %s differs from %s; this run's LM head is tied to the embedding", path, s->name,
                            a->tied_to);
        continue;
      }
      name_list(extra, sizeof extra, s->name, &nextra);
    }
  if (!nextra) return 0;
  finish_list(extra, sizeof extra, nextra);
  return atoll_fail(err, "%s: %d tensor%s that a %s model of this shape does not have: %s", path, nextra,
                    nextra == 1 ? "" : "s", a->model_type, extra);
}

static int read_config(const char *dir, const atoll_layout *whole, const atoll_hf_arch **arch, atoll_err *err) {
  char path[1200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  cJSON *cfg = atoll_json_read_whole(path, 1u << 20, err);
  if (!cfg) return -1;
  if (!cJSON_IsObject(cfg) || atoll_json_unique_keys(cfg, path, err)) {
    if (!cJSON_IsObject(cfg)) atoll_fail(err, "%s: not a JSON object", path);
    cJSON_Delete(cfg);
    return -1;
  }
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  *arch = atoll_hf_arch_find(cJSON_IsString(type) ? type->valuestring : NULL);
  int rc = 0;
  char known[128];
  atoll_hf_known(known, sizeof known);
  if (!*arch)
    rc = atoll_fail(err, "%s: model_type %s%s%s is not one atoll reads (known: %s)", path,
                    cJSON_IsString(type) ? "'" : "", cJSON_IsString(type) ? type->valuestring : "missing",
                    cJSON_IsString(type) ? "'" : "", known);
  else if (*arch != atoll_hf_arch_of(&whole->shape))
    rc = atoll_fail(err, "%s: model_type '%s' is not this run's architecture (%s, a %s model; pass %s)", path,
                    (*arch)->model_type, atoll_hf_arch_of(&whole->shape)->flags,
                    atoll_hf_arch_of(&whole->shape)->model_type, (*arch)->flags);
  else
    rc = (*arch)->config_check(cfg, &whole->shape, path, err);
  cJSON_Delete(cfg);
  return rc;
}

/* Maps and parses one safetensors file into h's slot i. `missing` is the message
 * for a file that is not there (NULL: strerror's). */
static int open_file(hf_files *h, int i, const char *path, const char *missing, atoll_err *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT && missing ? atoll_fail(err, "%s", missing) : atoll_fail(err, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
    close(fd);
    return atoll_fail(err, "%s: not a safetensors file (too short or not a regular file)", path);
  }
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return atoll_fail(err, "%s: cannot map: %s", path, strerror(errno));
  if (atoll_st_parse(map, (size_t)st.st_size, path, &h->files[i], err)) {
    munmap(map, (size_t)st.st_size);
    return -1;
  }
  h->maps[i] = map, h->sizes[i] = (size_t)st.st_size;
  h->used[i] = calloc((size_t)h->files[i].ntensors + 1, 1);
  if (!h->used[i]) return atoll_fail(err, "out of memory reading %s", path);
  return 0;
}

static void close_files(hf_files *h) {
  for (int i = 0; i < h->n; i++) {
    if (h->maps && h->maps[i]) {
      atoll_st_file_free(&h->files[i]);
      munmap(h->maps[i], h->sizes[i]);
    }
    if (h->used) free(h->used[i]);
  }
  free(h->files);
  free(h->maps);
  free(h->sizes);
  free(h->used);
}

static int alloc_files(hf_files *h, int n, atoll_err *err) {
  h->n = n;
  h->files = calloc((size_t)n, sizeof *h->files);
  h->maps = calloc((size_t)n, sizeof *h->maps);
  h->sizes = calloc((size_t)n, sizeof *h->sizes);
  h->used = calloc((size_t)n, sizeof *h->used);
  if (h->files && h->maps && h->sizes && h->used) return 0;
  return atoll_fail(err, "out of memory reading %s", h->what);
}

/* Every tensor of every shard is where the index puts it, and every tensor the index
 * names is in its shard. */
static int check_shards(const hf_files *h, const atoll_hf_index *x, atoll_err *err) {
  for (int f = 0; f < h->n; f++)
    for (int i = 0; i < h->files[f].ntensors; i++) {
      const char *name = h->files[f].tensors[i].name;
      int at = atoll_hf_index_find(x, name);
      if (at < 0)
        return atoll_fail(err, "%s: shard %s holds tensor %s, which the index does not list", h->what, x->shards[f], name);
      if (at != f)
        return atoll_fail(err, "%s: shard %s holds tensor %s, which the index puts in %s", h->what, x->shards[f], name,
                          x->shards[at]);
    }
  for (int i = 0; i < x->nnames; i++)
    if (!atoll_st_file_find(&h->files[x->shard_of[i]], x->names[i]))
      return atoll_fail(err, "%s: tensor %s is missing from shard %s, where the index puts it", h->what, x->names[i],
                        x->shards[x->shard_of[i]]);
  return 0;
}

/* DIR/model.safetensors.index.json and its shards into h. */
static int open_sharded(const char *dir, hf_files *h, atoll_err *err) {
  size_t len = 0;
  char *text = NULL;
  if (atoll_read_file(h->what, 64u << 20, &text, &len, err)) return -1;
  atoll_hf_index x;
  int rc = atoll_hf_index_parse(text, len, h->what, &x, err);
  free(text);
  if (rc) return -1;
  rc = alloc_files(h, x.nshards, err);
  for (int i = 0; rc == 0 && i < x.nshards; i++) {
    char path[1600], missing[3200];
    snprintf(path, sizeof path, "%s/%s", dir, x.shards[i]);
    snprintf(missing, sizeof missing, "%s: names shard %s, which is not there", h->what, x.shards[i]);
    rc = open_file(h, i, path, missing, err);
  }
  if (rc == 0) rc = check_shards(h, &x, err);
  atoll_hf_index_free(&x);
  return rc;
}

int atoll_hf_import(const char *dir, const atoll_layout *whole, float *params, atoll_err *err) {
  const atoll_hf_arch *a = NULL;
  if (read_config(dir, whole, &a, err)) return -1;
  hf_files h = {0};
  char one[1200];
  snprintf(one, sizeof one, "%s/model.safetensors", dir);
  snprintf(h.what, sizeof h.what, "%s.index.json", one);
  int sharded = access(one, F_OK) != 0 && errno == ENOENT && access(h.what, F_OK) == 0;
  int rc;
  if (sharded) {
    rc = open_sharded(dir, &h, err);
  } else {
    snprintf(h.what, sizeof h.what, "%s", one);
    rc = alloc_files(&h, 1, err) || open_file(&h, 0, one, NULL, err) ? -1 : 0;
  }
  if (rc == 0) rc = take_tensors(&h, whole, a, params, err) || check_rest(&h, a, err) ? -1 : 0;
  close_files(&h);
  return rc;
}

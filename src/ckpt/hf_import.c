/* atoll train --init-from-hf: a Hugging Face model directory (config.json and one
 * model.safetensors) into the whole model's flat buffer (src/ckpt/hf.h). */
#include "ckpt/hf.h"

#include "ckpt/safetensors.h"
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

/* Copies file tensors into params; marks the ones used. */
static int take_tensors(const atoll_st_file *f, const atoll_layout *whole, const atoll_hf_arch *a, const char *path,
                        float *params, char *used, atoll_err *err) {
  char missing[400] = "";
  int nmissing = 0;
  for (int i = 0; i < whole->ntensors; i++) {
    const atoll_tensor *t = &whole->tensors[i];
    char name[96];
    int transpose = 0;
    if (atoll_hf_name_of(a, t, name, sizeof name, &transpose))
      return atoll_fail(err, "%s: tensor %s has no %s name", path, t->name, a->model_type);
    const atoll_st_tensor *s = atoll_st_file_find(f, name);
    if (!s) {
      name_list(missing, sizeof missing, name, &nmissing);
      continue;
    }
    used[s - f->tensors] = 1;
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
    return atoll_fail(err, "%s: %d tensor%s missing: %s", path, nmissing, nmissing == 1 ? "" : "s", missing);
  }
  return 0;
}

/* A tied LM head may come as a copy of the embedding; any other tensor is refused. */
static int check_rest(const atoll_st_file *f, const atoll_hf_arch *a, const char *path, const char *used,
                      atoll_err *err) {
  char extra[400] = "";
  int nextra = 0;
  for (int i = 0; i < f->ntensors; i++) {
    const atoll_st_tensor *s = &f->tensors[i];
    if (used[i]) continue;
    if (a->tied_head && strcmp(s->name, a->tied_head) == 0) {
      const atoll_st_tensor *to = atoll_st_file_find(f, a->tied_to);
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

int atoll_hf_import(const char *dir, const atoll_layout *whole, float *params, atoll_err *err) {
  const atoll_hf_arch *a = NULL;
  if (read_config(dir, whole, &a, err)) return -1;
  char path[1200];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    char index[1300];
    snprintf(index, sizeof index, "%s.index.json", path);
    if (errno == ENOENT && access(index, F_OK) == 0)
      return atoll_fail(err, "%s: missing; sharded checkpoints (%s) are not read yet", path, index);
    return atoll_fail(err, "%s: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
    close(fd);
    return atoll_fail(err, "%s: not a safetensors file (too short or not a regular file)", path);
  }
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return atoll_fail(err, "%s: cannot map: %s", path, strerror(errno));
  atoll_st_file f;
  int rc = atoll_st_parse(map, (size_t)st.st_size, path, &f, err);
  if (rc == 0) {
    char *used = calloc((size_t)f.ntensors + 1, 1);
    rc = !used ? atoll_fail(err, "out of memory reading %s", path)
               : take_tensors(&f, whole, a, path, params, used, err) || check_rest(&f, a, path, used, err);
    rc = rc ? -1 : 0;
    free(used);
    atoll_st_file_free(&f);
  }
  munmap(map, (size_t)st.st_size);
  return rc;
}

/* What the checkpoint tests share (tests/test_ckpt.c, test_safetensors.c, test_run_dir.c): a
 * scratch directory, hand-built layouts, random buffers, states, file helpers. Each
 * test defines g_tmp's contents (mkdtemp) before using path_in. */
#ifndef ATOLL_CKPT_FIXTURE_H
#define ATOLL_CKPT_FIXTURE_H

#include "check.h"
#include "ckpt/checkpoint.h"
#include "core/fs.h"
#include "model/layout.h"

#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char g_tmp[256];

static inline int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static inline void rm_rf(const char *path) { nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static inline void path_in(char *out, size_t outsz, const char *name) {
  snprintf(out, outsz, "%s/%s", g_tmp, name);
}

static inline int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static inline int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* Message check with a printed reason on failure. */
#define CHECK_MSG(err, needle)                                                              \
  do {                                                                                      \
    if (!contains((err).msg, (needle))) {                                                   \
      fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, (err).msg, \
              (needle));                                                                    \
      check_failures++;                                                                     \
    }                                                                                       \
  } while (0)

typedef struct {
  atoll_layout lay;
  atoll_tensor t[8];
} test_layout;

static inline void add_tensor(test_layout *tl, const char *name, int ndim, int64_t d0, int64_t d1) {
  atoll_tensor *t = &tl->t[tl->lay.ntensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->numel = (size_t)(ndim == 1 ? d0 : d0 * d1);
  t->offset = tl->lay.nparams;
  t->decay = ndim == 2;
  t->layer = -1;
  tl->lay.nparams += t->numel;
  tl->lay.tensors = tl->t;
}

/* Five tensors of odd sizes, 117 floats. */
static inline void layout4(test_layout *tl) {
  memset(tl, 0, sizeof *tl);
  tl->lay.shape = (atoll_shape){.layers = 1, .heads = 1, .dim = 5, .context = 3, .vocab = 7};
  add_tensor(tl, "wte", 2, 7, 5);
  add_tensor(tl, "h.0.ln_1.bias", 1, 13, 0);
  add_tensor(tl, "h.0.attn.qkv.weight", 2, 3, 11);
  add_tensor(tl, "ln_f.weight", 1, 1, 0);
  add_tensor(tl, "h.0.mlp.fc.weight", 2, 5, 7);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static inline float rnd(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static inline void fill_random(float *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = rnd() * 1e3f;
}

/* A file the test wrote, whole; one that cannot be read ends the test (status 1)
 * rather than hand its callers a NULL to parse. */
static inline uint8_t *read_all(const char *path, size_t *size) {
  char *buf = NULL;
  if (atoll_read_file(path, (size_t)1 << 30, &buf, size, NULL) != 0) {
    fprintf(stderr, "%s: cannot read the file the test wrote\n", path);
    exit(1);
  }
  return (uint8_t *)buf;
}

/* [u64 N][header][data] with the header given as text (N = strlen, no padding). */
static inline uint8_t *make_st(const char *header, const void *data, size_t dsize, size_t *size) {
  size_t n = strlen(header);
  *size = 8 + n + dsize;
  uint8_t *buf = malloc(*size);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, header, n);
  if (dsize) memcpy(buf + 8 + n, data, dsize);
  return buf;
}

static inline void write_bytes(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
}

typedef struct {
  float *p, *m, *v;
  size_t n;
} bufs;

static inline bufs bufs_new(size_t n) {
  bufs b = {malloc(n * 4), malloc(n * 4), malloc(n * 4), n};
  return b;
}
static inline void bufs_random(bufs *b) {
  fill_random(b->p, b->n);
  fill_random(b->m, b->n);
  for (size_t i = 0; i < b->n; i++) b->v[i] = fabsf(rnd());
}
static inline void bufs_free(bufs *b) { free(b->p), free(b->m), free(b->v); }
static inline int bufs_equal(const bufs *a, const bufs *b) {
  return memcmp(a->p, b->p, a->n * 4) == 0 && memcmp(a->m, b->m, a->n * 4) == 0 &&
         memcmp(a->v, b->v, a->n * 4) == 0;
}

static inline cJSON *make_state(int step) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "step", step);
  cJSON *cfg = cJSON_AddObjectToObject(s, "config");
  cJSON_AddNumberToObject(cfg, "layers", 1);
  cJSON_AddStringToObject(cfg, "data", "data/\"tiny\"");
  cJSON_AddStringToObject(s, "rng", "0123456789abcdef");
  return s;
}

/* Whether dir holds a hidden entry (a leftover .tmp-* or .old-* directory). */
static inline int has_hidden(const char *dir) {
  DIR *d = opendir(dir);
  int found = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      found = 1;
  if (d) closedir(d);
  return found;
}

static inline void write_state_file(const char *dir, const char *text) {
  char path[1100];
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/state.json", dir);
  write_bytes(path, text, strlen(text));
}

static inline void save_step(const char *root, int step, const test_layout *tl, const bufs *b) {
  char dir[512];
  atoll_err err = {{0}};
  atoll_ckpt_dirname(root, step, dir, sizeof dir);
  cJSON *s = make_state(step);
  CHECK_OK(atoll_ckpt_save(dir, &tl->lay, b->p, b->m, b->v, s, &err), &err);
  cJSON_Delete(s);
}

#endif

/* atoll export --to hf: a directory that transformers' from_pretrained loads
 * (src/ckpt/hf.h, docs/formats.md "Export to Hugging Face"). */
#include "ckpt/hf.h"

#include "ckpt/safetensors.h"
#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The character ByteLevel uses for byte b (GPT-2's bytes_to_unicode): printable bytes
 * stand for themselves, the others (0-32, 127-160, 173) take code points 256, 257, ...
 * in byte order. Written as UTF-8 into out (3 bytes and a NUL at most). */
static void byte_symbol(int b, char *out) {
  int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; x++) n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
    cp = 256 + n;
  }
  if (cp < 0x80) {
    out[0] = (char)cp, out[1] = 0;
  } else {
    out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
  }
}

static cJSON *byte_level(int prefix_space) {
  cJSON *o = cJSON_CreateObject();
  if (o && cJSON_AddStringToObject(o, "type", "ByteLevel") &&
      cJSON_AddBoolToObject(o, "add_prefix_space", prefix_space) &&
      cJSON_AddTrueToObject(o, "trim_offsets") && cJSON_AddTrueToObject(o, "use_regex"))
    return o;
  cJSON_Delete(o);
  return NULL;
}

char *atoll_hf_byte_tokenizer_json(void) {
  cJSON *t = cJSON_CreateObject(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
  int ok = t && model && vocab;
  for (int b = 0; ok && b < 256; b++) {
    char sym[4];
    byte_symbol(b, sym);
    ok = cJSON_AddNumberToObject(vocab, sym, b) != NULL;
  }
  ok = ok && cJSON_AddStringToObject(model, "type", "BPE") && cJSON_AddNullToObject(model, "dropout") &&
       cJSON_AddNullToObject(model, "unk_token") && cJSON_AddNullToObject(model, "continuing_subword_prefix") &&
       cJSON_AddNullToObject(model, "end_of_word_suffix") && cJSON_AddFalseToObject(model, "fuse_unk") &&
       cJSON_AddFalseToObject(model, "byte_fallback") && cJSON_AddFalseToObject(model, "ignore_merges") &&
       cJSON_AddItemToObject(model, "vocab", vocab);
  if (ok) vocab = NULL; /* owned by model now */
  ok = ok && cJSON_AddArrayToObject(model, "merges");
  ok = ok && cJSON_AddStringToObject(t, "version", "1.0") && cJSON_AddNullToObject(t, "truncation") &&
       cJSON_AddNullToObject(t, "padding") && cJSON_AddArrayToObject(t, "added_tokens") &&
       cJSON_AddNullToObject(t, "normalizer");
  cJSON *pre = ok ? byte_level(0) : NULL, *dec = pre ? byte_level(1) : NULL;
  ok = ok && pre && cJSON_AddItemToObject(t, "pre_tokenizer", pre) && (pre = NULL, 1);
  ok = ok && cJSON_AddNullToObject(t, "post_processor");
  ok = ok && dec && cJSON_AddItemToObject(t, "decoder", dec) && (dec = NULL, 1);
  ok = ok && cJSON_AddItemToObject(t, "model", model) && (model = NULL, 1);
  char *text = ok ? cJSON_Print(t) : NULL;
  cJSON_Delete(pre);
  cJSON_Delete(dec);
  cJSON_Delete(vocab);
  cJSON_Delete(model);
  cJSON_Delete(t);
  return text;
}

/* The weights under Hugging Face's names: a copy of the layout with the names and
 * (transposed) shapes of the architecture's table, and the data to match. */
static int hf_view(const atoll_layout *whole, const float *params, const atoll_hf_arch *a, atoll_layout *view,
                   float **data, atoll_err *err) {
  *view = *whole;
  view->tensors = calloc((size_t)whole->ntensors, sizeof(atoll_tensor));
  *data = malloc(whole->nparams * sizeof(float));
  if (!view->tensors || !*data) return atoll_fail(err, "out of memory exporting %zu parameters", whole->nparams);
  for (int i = 0; i < whole->ntensors; i++) {
    const atoll_tensor *t = &whole->tensors[i];
    atoll_tensor *v = &view->tensors[i];
    *v = *t;
    int transpose = 0;
    if (atoll_hf_name_of(a, t, v->name, sizeof v->name, &transpose))
      return atoll_fail(err, "export: tensor %s has no %s name", t->name, a->model_type);
    const float *src = params + t->offset;
    float *dst = *data + t->offset;
    if (transpose && t->ndim == 2) {
      int64_t rows = t->shape[0], cols = t->shape[1];
      v->shape[0] = cols, v->shape[1] = rows;
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
    } else {
      memcpy(dst, src, t->numel * sizeof(float));
    }
  }
  return 0;
}

/* An empty directory, or nothing: what export may replace. */
static int check_out(const char *out_dir, atoll_err *err) {
  struct stat st;
  if (stat(out_dir, &st) != 0) return errno == ENOENT ? 0 : atoll_fail(err, "--out %s: %s", out_dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return atoll_fail(err, "--out %s: exists and is not a directory", out_dir);
  DIR *d = opendir(out_dir);
  if (!d) return atoll_fail(err, "--out %s: %s", out_dir, strerror(errno));
  struct dirent *e;
  int empty = 1;
  while (empty && (e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = 0;
  closedir(d);
  return empty ? 0 : atoll_fail(err, "--out %s: exists and is not empty; choose a new directory", out_dir);
}

static int write_text(const char *dir, const char *name, const char *text, atoll_err *err) {
  char path[2300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return atoll_write_file_atomic(path, text, strlen(text), err);
}

/* The view's tensors [i0, i1) as a layout of their own, offsets from the first: one shard. */
static int shard_layout(const atoll_layout *view, int i0, int i1, atoll_layout *sub, atoll_err *err) {
  *sub = *view;
  sub->ntensors = i1 - i0;
  sub->tensors = malloc((size_t)sub->ntensors * sizeof(atoll_tensor));
  if (!sub->tensors) return atoll_fail(err, "out of memory writing shards");
  size_t base = view->tensors[i0].offset;
  sub->nparams = 0;
  for (int i = i0; i < i1; i++) {
    sub->tensors[i - i0] = view->tensors[i];
    sub->tensors[i - i0].offset -= base;
    sub->nparams += view->tensors[i].numel;
  }
  return 0;
}

static int write_st(const char *path, const atoll_layout *lay, const float *data, const cJSON *meta, int bf16,
                    atoll_err *err) {
  return bf16 ? atoll_st_write_bf16(path, lay, data, meta, err) : atoll_st_write(path, lay, "", data, meta, err);
}

/* The shard of each tensor: a new one starts where the next tensor would take the
 * current one past max_bytes (a tensor larger than that alone in its shard, as
 * save_pretrained's max_shard_size does). Returns the number of shards. */
static int plan_shards(const atoll_layout *view, size_t esize, uint64_t max_bytes, int *first_of) {
  int n = 0;
  uint64_t used = 0;
  for (int i = 0; i < view->ntensors; i++) {
    uint64_t b = view->tensors[i].numel * esize;
    if (i == 0 || (max_bytes && used > 0 && used + b > max_bytes)) first_of[n++] = i, used = 0;
    used += b;
  }
  first_of[n] = view->ntensors;
  return n;
}

/* model.safetensors, or (more than opt->max_shard_bytes) the shards
 * model-0000K-of-0000N.safetensors and model.safetensors.index.json naming each tensor's. */
static int write_weights(const char *dir, const atoll_layout *view, const float *data, const cJSON *meta,
                         const atoll_hf_export_opts *opt, atoll_err *err) {
  char path[2300];
  size_t esize = opt->bf16 ? 2 : 4;
  int *first_of = malloc(((size_t)view->ntensors + 1) * sizeof(int));
  if (!first_of) return atoll_fail(err, "out of memory writing %s", dir);
  int n = plan_shards(view, esize, opt->max_shard_bytes, first_of);
  if (n == 1) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    free(first_of);
    return write_st(path, view, data, meta, opt->bf16, err);
  }
  cJSON *index = cJSON_CreateObject(), *im = cJSON_AddObjectToObject(index, "metadata");
  cJSON *wmap = cJSON_AddObjectToObject(index, "weight_map");
  int rc = im && wmap && cJSON_AddNumberToObject(im, "total_size", (double)(view->nparams * esize))
               ? 0 : atoll_fail(err, "out of memory writing %s", dir);
  for (int k = 0; k < n && rc == 0; k++) {
    char name[64];
    snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, n);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    atoll_layout sub;
    rc = shard_layout(view, first_of[k], first_of[k + 1], &sub, err);
    if (rc == 0) rc = write_st(path, &sub, data + view->tensors[first_of[k]].offset, meta, opt->bf16, err);
    free(sub.tensors);
    for (int i = first_of[k]; i < first_of[k + 1] && rc == 0; i++)
      if (!cJSON_AddStringToObject(wmap, view->tensors[i].name, name)) rc = atoll_fail(err, "out of memory");
  }
  char *text = rc == 0 ? cJSON_Print(index) : NULL;
  if (rc == 0 && !text) rc = atoll_fail(err, "out of memory writing %s", dir);
  if (rc == 0) rc = write_text(dir, "model.safetensors.index.json", text, err);
  free(text);
  cJSON_Delete(index);
  free(first_of);
  return rc;
}

/* config.json, the weights and tokenizer.json into dir. */
static int write_files(const char *dir, const atoll_layout *whole, const float *params, const char *tokenizer_json,
                       const atoll_hf_export_opts *opt, atoll_err *err) {
  const atoll_hf_arch *a = atoll_hf_arch_of(&whole->shape);
  cJSON *cfg = a->config_json(&whole->shape), *meta = cJSON_CreateObject();
  if (cfg && opt->bf16) cJSON_ReplaceItemInObject(cfg, "torch_dtype", cJSON_CreateString("bfloat16"));
  char *cfg_text = cfg ? cJSON_Print(cfg) : NULL, *tok = tokenizer_json ? strdup(tokenizer_json)
                                                                         : atoll_hf_byte_tokenizer_json();
  atoll_layout view = {0};
  float *data = NULL;
  int rc = -1;
  if (!cfg_text || !tok || !meta || !cJSON_AddStringToObject(meta, "format", "pt"))
    atoll_fail(err, "out of memory writing %s", dir);
  else if (write_text(dir, "config.json", cfg_text, err) == 0 && write_text(dir, "tokenizer.json", tok, err) == 0 &&
           hf_view(whole, params, a, &view, &data, err) == 0)
    rc = write_weights(dir, &view, data, meta, opt, err);
  free(view.tensors);
  free(data);
  free(cfg_text);
  free(tok);
  cJSON_Delete(cfg);
  cJSON_Delete(meta);
  return rc;
}

/* Removes parent/.tmp-BASE-PID directories whose exporting process is gone (an export
 * killed mid-way); a live exporter's directory is left alone. */
static void clean_dead_exports(const char *parent, const char *base) {
  DIR *d = opendir(parent);
  if (!d) return;
  char prefix[1100];
  snprintf(prefix, sizeof prefix, ".tmp-%s-", base);
  size_t np = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, np) != 0) continue;
    const char *p = e->d_name + np;
    long pid = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && pid < 100000000; p++, digits++) pid = pid * 10 + (*p - '0');
    if (*p || !digits || pid <= 0) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to know */
    char path[2300];
    snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
    atoll_rm_tree(path);
  }
  closedir(d);
}

int atoll_hf_export(const char *out_arg, const atoll_layout *whole, const float *params, const char *tokenizer_json,
                    const atoll_hf_export_opts *opt, atoll_err *err) {
  char out_dir[1024], parent[1100], tmp[2200];
  size_t n = strlen(out_arg);
  while (n > 1 && out_arg[n - 1] == '/') n--; /* "hf/" is "hf" */
  if (n == 0 || n >= sizeof out_dir) return atoll_fail(err, "--out '%s': not a usable directory name", out_arg);
  memcpy(out_dir, out_arg, n);
  out_dir[n] = 0;
  if (check_out(out_dir, err)) return -1;
  atoll_parent_dir(out_dir, parent, sizeof parent);
  const char *base = strrchr(out_dir, '/');
  base = base ? base + 1 : out_dir;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return atoll_fail(err, "--out %s: name the new directory itself", out_arg);
  snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld", parent, base, (long)getpid());
  clean_dead_exports(parent, base);
  atoll_rm_tree(tmp); /* a leftover of this pid's earlier life */
  if (atoll_mkdir_p(tmp, err)) return -1;
  int rc = write_files(tmp, whole, params, tokenizer_json, opt, err);
  if (rc == 0 && atoll_fsync_path(tmp, O_DIRECTORY, err)) rc = -1;
  if (rc == 0 && rename(tmp, out_dir) != 0)
    rc = atoll_fail(err, "--out %s: cannot rename %s into place: %s", out_dir, tmp, strerror(errno));
  if (rc) {
    atoll_rm_tree(tmp);
    return -1;
  }
  return atoll_sync_parent_dir(out_dir, err);
}

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

/* One tensor of the export: its Hugging Face view, the layout tensor it comes from, its
 * place in transformers' state_dict and its shard. */
typedef struct {
  atoll_tensor v;
  int src, shard, transpose;
  int64_t order;
} export_item;

static int by_order(const void *x, const void *y) {
  const export_item *a = x, *b = y;
  return a->order < b->order ? -1 : a->order > b->order;
}

/* safetensors' own order within a file (all tensors of one dtype): by name, bytewise */
static int by_shard_name(const void *x, const void *y) {
  const export_item *a = x, *b = y;
  return a->shard != b->shard ? (a->shard < b->shard ? -1 : 1) : strcmp(a->v.name, b->v.name);
}

/* The open shard's tensors among it[from, to) (shard -1) get the next number. */
static void close_shard(export_item *it, int from, int to, int *nshards) {
  for (int j = from; j < to; j++)
    if (it[j].shard < 0) it[j].shard = *nshards;
  (*nshards)++;
}

/* The shards as save_pretrained cuts them (huggingface_hub's rule): tensors in the
 * state_dict's order fill a shard until the next would take it past max_bytes, and the
 * shard is numbered when it is closed; a tensor larger than that is a shard of its own,
 * numbered when it comes (so before the shard open then). Returns the count. */
static int assign_shards(export_item *it, int n, size_t esize, uint64_t max_bytes) {
  int nshards = 0, open = -1; /* open: the first tensor of the open shard, or -1 */
  uint64_t used = 0;
  for (int k = 0; k < n; k++) {
    uint64_t b = it[k].v.numel * esize;
    if (max_bytes && b > max_bytes) {
      it[k].shard = nshards++;
      continue;
    }
    if (open >= 0 && max_bytes && used + b > max_bytes) close_shard(it, open, k, &nshards), open = -1;
    if (open < 0) open = k, used = 0;
    it[k].shard = -1;
    used += b;
  }
  if (open >= 0) close_shard(it, open, n, &nshards);
  return nshards;
}

/* The weights under Hugging Face's names and (transposed) shapes, in the order the files
 * hold them: shard by shard, each by name. view->tensors[i] is in shard shard[i]. */
static int hf_view(const atoll_layout *whole, const float *params, const atoll_hf_arch *a,
                   const atoll_hf_export_opts *opt, atoll_layout *view, float **data, int **shard, int *nshards,
                   atoll_err *err) {
  int n = whole->ntensors;
  export_item *it = calloc((size_t)n, sizeof *it);
  *view = *whole;
  view->tensors = calloc((size_t)n, sizeof(atoll_tensor));
  *data = malloc(whole->nparams * sizeof(float));
  *shard = malloc((size_t)n * sizeof(int));
  if (!it || !view->tensors || !*data || !*shard) {
    free(it);
    return atoll_fail(err, "out of memory exporting %zu parameters", whole->nparams);
  }
  for (int i = 0; i < n; i++) {
    const atoll_tensor *t = &whole->tensors[i];
    it[i].v = *t, it[i].src = i, it[i].order = atoll_hf_order(a, t);
    if (atoll_hf_name_of(a, t, it[i].v.name, sizeof it[i].v.name, &it[i].transpose)) {
      free(it);
      return atoll_fail(err, "export: tensor %s has no %s name", t->name, a->model_type);
    }
    it[i].transpose = it[i].transpose && t->ndim == 2;
    if (it[i].transpose) it[i].v.shape[0] = t->shape[1], it[i].v.shape[1] = t->shape[0];
  }
  qsort(it, (size_t)n, sizeof *it, by_order);
  *nshards = assign_shards(it, n, opt->bf16 ? 2 : 4, opt->max_shard_bytes);
  qsort(it, (size_t)n, sizeof *it, by_shard_name);
  size_t off = 0;
  for (int k = 0; k < n; k++) {
    const atoll_tensor *t = &whole->tensors[it[k].src];
    atoll_tensor *v = &view->tensors[k];
    *v = it[k].v;
    v->offset = off;
    (*shard)[k] = it[k].shard;
    off += t->numel;
    const float *src = params + t->offset;
    float *dst = *data + v->offset;
    if (it[k].transpose) {
      int64_t rows = t->shape[0], cols = t->shape[1];
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
    } else {
      memcpy(dst, src, t->numel * sizeof(float));
    }
  }
  free(it);
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

/* model.safetensors.index.json as save_pretrained writes it (Python's json.dumps with
 * indent 2 and sorted keys, then a newline); the view's names are sorted within each
 * shard only, so the weight_map's order is made here. */
static char *index_json(const atoll_layout *view, const int *shard, int nshards, size_t esize) {
  int n = view->ntensors;
  export_item *it = malloc((size_t)n * sizeof *it);
  size_t cap = 256 + (size_t)n * (sizeof view->tensors[0].name + 64), len = 0;
  char *out = malloc(cap);
  if (!it || !out) {
    free(it), free(out);
    return NULL;
  }
  for (int k = 0; k < n; k++) /* the shard number kept in src, shard 0 for all: sorted by name */
    it[k].v = view->tensors[k], it[k].shard = 0, it[k].src = shard[k];
  qsort(it, (size_t)n, sizeof *it, by_shard_name);
  len += (size_t)snprintf(out + len, cap - len,
                          "{\n  \"metadata\": {\n    \"total_parameters\": %zu,\n    \"total_size\": %zu\n  },\n"
                          "  \"weight_map\": {\n", view->nparams, view->nparams * esize);
  for (int k = 0; k < n; k++)
    len += (size_t)snprintf(out + len, cap - len, "    \"%s\": \"model-%05d-of-%05d.safetensors\"%s\n", it[k].v.name,
                            it[k].src + 1, nshards, k + 1 < n ? "," : "");
  snprintf(out + len, cap - len, "  }\n}\n");
  free(it);
  return out;
}

/* model.safetensors, or (more than opt->max_shard_bytes) the shards
 * model-0000K-of-0000N.safetensors and model.safetensors.index.json naming each tensor's. */
static int write_weights(const char *dir, const atoll_layout *view, const float *data, const int *shard, int n,
                         const cJSON *meta, const atoll_hf_export_opts *opt, atoll_err *err) {
  char path[2300];
  if (n == 1) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return write_st(path, view, data, meta, opt->bf16, err);
  }
  int rc = 0;
  for (int k = 0, i0 = 0; k < n && rc == 0; k++) {
    int i1 = i0;
    while (i1 < view->ntensors && shard[i1] == k) i1++;
    snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, k + 1, n);
    atoll_layout sub;
    rc = shard_layout(view, i0, i1, &sub, err);
    if (rc == 0) rc = write_st(path, &sub, data + view->tensors[i0].offset, meta, opt->bf16, err);
    free(sub.tensors);
    i0 = i1;
  }
  char *text = rc == 0 ? index_json(view, shard, n, opt->bf16 ? 2 : 4) : NULL;
  if (rc == 0 && !text) rc = atoll_fail(err, "out of memory writing %s", dir);
  if (rc == 0) rc = write_text(dir, "model.safetensors.index.json", text, err);
  free(text);
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
  int *shard = NULL, nshards = 0, rc = -1;
  if (!cfg_text || !tok || !meta || !cJSON_AddStringToObject(meta, "format", "pt"))
    atoll_fail(err, "out of memory writing %s", dir);
  else if (write_text(dir, "config.json", cfg_text, err) == 0 && write_text(dir, "tokenizer.json", tok, err) == 0 &&
           hf_view(whole, params, a, opt, &view, &data, &shard, &nshards, err) == 0)
    rc = write_weights(dir, &view, data, shard, nshards, meta, opt, err);
  free(view.tensors);
  free(data);
  free(shard);
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

/* A split ("train" or "val") of a prepared data directory: the token files
 * DIR/<split>_000.bin, _001.bin, ... (consecutive numbers, stopping at the first
 * missing one), all memory-mapped, with deterministic window sampling.
 *
 * Windows are seq+1 consecutive tokens of one token range (inputs plus shifted targets);
 * the ranges are the whole token files unless atoll_dataset_restrict narrowed them. A
 * range of n >= seq+1 tokens has n - seq valid window starts; laying the valid
 * starts of all ranges end to end gives one index space [0, total), and both the
 * training draw and the evaluation set are positions in that space. */
#define _POSIX_C_SOURCE 200809L
#include "data/token_file.h"

#include "core/json_text.h"
#include "core/rng.h"
#include "data/dataset.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WINDOW_SALT 0x77696e646f77ull /* "window" */

static uint64_t valid_starts(const atoll_token_range *sg, int seq) {
  uint64_t need = (uint64_t)seq + 1, n = sg->end - sg->begin;
  return n >= need ? n - (uint64_t)seq : 0;
}

static uint64_t total_valid_starts(const atoll_dataset *ds, int seq) {
  uint64_t total = 0;
  for (int k = 0; k < ds->nranges; k++) total += valid_starts(&ds->ranges[k], seq);
  return total;
}

/* Copies the window at position pos of the joined valid-start space. */
static void copy_window(const atoll_dataset *ds, uint64_t pos, int seq, int32_t *out) {
  for (int k = 0; k < ds->nranges; k++) {
    const atoll_token_range *sg = &ds->ranges[k];
    uint64_t v = valid_starts(sg, seq);
    if (pos < v) {
      atoll_token_file_read(&ds->files[sg->file], sg->begin + pos, (uint64_t)seq + 1, out);
      return;
    }
    pos -= v;
  }
}

/* Whole token files. */
static int default_ranges(atoll_dataset *ds, atoll_err *err) {
  ds->ranges = calloc((size_t)ds->nfiles, sizeof *ds->ranges);
  if (!ds->ranges) return atoll_fail(err, "out of memory");
  for (int k = 0; k < ds->nfiles; k++) ds->ranges[k] = (atoll_token_range){k, 0, ds->files[k].ntokens};
  ds->nranges = ds->nfiles;
  return 0;
}

int atoll_dataset_restrict(atoll_dataset *ds, const uint64_t *begins, const uint64_t *ends, int n,
                           int seq, const char *what, atoll_err *err) {
  atoll_token_range *segs = calloc((size_t)n * (size_t)ds->nfiles + 1, sizeof *segs);
  if (!segs) return atoll_fail(err, "out of memory");
  int m = 0;
  for (int i = 0; i < n; i++) {
    uint64_t base = 0; /* clip each range to every token file it overlaps */
    for (int k = 0; k < ds->nfiles; k++) {
      uint64_t lo = begins[i] > base ? begins[i] : base;
      uint64_t hi = ends[i] < base + ds->files[k].ntokens ? ends[i] : base + ds->files[k].ntokens;
      if (hi > lo) segs[m++] = (atoll_token_range){k, lo - base, hi - base};
      base += ds->files[k].ntokens;
    }
  }
  atoll_dataset probe = *ds;
  probe.ranges = segs;
  probe.nranges = m;
  if (total_valid_starts(&probe, seq) == 0) {
    free(segs);
    return atoll_fail(err, "%s: no window of %d tokens fits in the selected data", what, seq + 1);
  }
  free(ds->ranges);
  ds->ranges = segs;
  ds->nranges = m;
  return 0;
}

/* Callers must pass seq no larger than the one given to atoll_dataset_open, which
 * guarantees at least one window; otherwise out is zero-filled rather than read
 * out of bounds. */
static int window_ok(int seq, uint64_t total, int32_t *out) {
  if (seq >= 1 && total > 0) return 1;
  if (seq >= 0) memset(out, 0, ((size_t)seq + 1) * sizeof *out);
  return 0;
}

void atoll_dataset_window(const atoll_dataset *ds, uint64_t seed, uint64_t step, uint64_t index,
                          int seq, int32_t *out) {
  uint64_t total = total_valid_starts(ds, seq);
  if (!window_ok(seq, total, out)) return;
  /* One uniform position over all valid starts: the token file is thereby chosen with
   * probability proportional to its valid starts, and the start uniformly within it.
   * Modulo bias is below total / 2^64. */
  uint64_t h = atoll_hash64(seed, step, index, WINDOW_SALT);
  copy_window(ds, h % total, seq, out);
}

void atoll_dataset_eval_window(const atoll_dataset *ds, uint64_t i, uint64_t count, int seq,
                               int32_t *out) {
  uint64_t total = total_valid_starts(ds, seq);
  if (!window_ok(seq, total, out)) return;
  if (count == 0) count = 1;
  i %= count;
  /* floor(i * total / count) without overflowing i * total. */
  uint64_t q = total / count, r = total % count;
  uint64_t pos = i * q;
  if (count <= UINT32_MAX) pos += i * r / count; /* i, r < count < 2^32 */
  else pos += (uint64_t)((double)i * (double)r / (double)count);
  copy_window(ds, pos, seq, out);
}

/* -------------------------------------------------------------- opening --- */

static int check_dir(const char *dir, atoll_err *err) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT) return atoll_fail(err, "--data %s: no such directory", dir);
    return atoll_fail(err, "--data %s: %s", dir, strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return atoll_fail(err, "--data %s: not a directory", dir);
  return 0;
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Opens the next token file into ds->files[ds->nfiles], growing the array. */
static int add_file(atoll_dataset *ds, const char *path, atoll_err *err) {
  atoll_token_file *grown = realloc(ds->files, ((size_t)ds->nfiles + 1) * sizeof *grown);
  if (!grown) return atoll_fail(err, "%s: out of memory", path);
  ds->files = grown;
  atoll_token_file *sh = &ds->files[ds->nfiles];
  if (atoll_token_file_open(sh, path, err) != 0) return -1;
  ds->nfiles++;
  if (ds->nfiles > 1 && sh->vocab != ds->vocab)
    return atoll_fail(err, "%s: vocabulary %" PRIu32 " differs from %s (vocabulary %" PRIu32 ")",
                      path, sh->vocab, ds->files[0].path, ds->vocab);
  ds->vocab = sh->vocab;
  ds->ntokens += sh->ntokens;
  if (sh->max_token > ds->max_token) ds->max_token = sh->max_token;
  return 0;
}

static int open_files(atoll_dataset *ds, const char *dir, const char *split, atoll_err *err) {
  char path[1024];
  for (int n = 0;; n++) {
    if (atoll_token_file_path(path, sizeof path, dir, split, n, err) != 0) return -1;
    if (!file_exists(path)) break;
    if (add_file(ds, path, err) != 0) return -1;
  }
  if (ds->nfiles == 0)
    return atoll_fail(err, "%s: no %s_000.bin; run `atoll prepare` first", dir, split);
  return 0;
}

static int check_enough(const atoll_dataset *ds, const char *dir, const char *split, int seq,
                        atoll_err *err) {
  if (total_valid_starts(ds, seq) > 0) return 0;
  uint64_t longest = 0;
  for (int k = 0; k < ds->nfiles; k++)
    if (ds->files[k].ntokens > longest) longest = ds->files[k].ntokens;
  return atoll_fail(err, "%s: split %s too short: %" PRIu64 " tokens in %d token file(s), longest %"
                    PRIu64 ", but one window needs seq+1 = %" PRIu64 " tokens in one token file",
                    dir, split, ds->ntokens, ds->nfiles, longest, (uint64_t)seq + 1);
}

/* ------------------------------------------------------------- manifest --- */

/* A number in the manifest that must equal want; absent keys fail too. */
static int manifest_count(const cJSON *root, const char *path, const char *key, uint64_t want,
                          const char *what, atoll_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!cJSON_IsNumber(v))
    return atoll_fail(err, "%s: \"%s\" missing or not a number", path, key);
  if (v->valuedouble != (double)want)
    return atoll_fail(err, "%s: \"%s\" is %.0f but the directory holds %" PRIu64 " %s; "
                      "token files from different runs of atoll prepare?", path, key,
                      v->valuedouble, want, what);
  return 0;
}

/* Version 2 records each token file's hash; version 1 (before hashes) only counts. */
static int manifest_hashes(const cJSON *root, const atoll_dataset *ds, const char *path,
                           const char *split, atoll_err *err) {
  char key[64];
  snprintf(key, sizeof key, "%s_hashes", split);
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != ds->nfiles)
    return atoll_fail(err, "%s: \"%s\" must list one hash per token file (%d)", path, key,
                      ds->nfiles);
  for (int k = 0; k < ds->nfiles; k++) {
    const char *want = cJSON_GetStringValue(cJSON_GetArrayItem(arr, k));
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, ds->files[k].hash);
    if (!want || strcmp(want, got) != 0)
      return atoll_fail(err, "%s: tokens do not match the hash in %s (%s, file has %s): changed "
                        "or replaced after atoll prepare", ds->files[k].path, path,
                        want ? want : "none", got);
  }
  return 0;
}

/* "<split>_bytes", written since bits per byte: the split's bytes of text. Absent
 * (older manifests): unknown, no error. */
static int manifest_text_bytes(const cJSON *root, atoll_dataset *ds, const char *path, const char *split,
                               atoll_err *err) {
  char key[64];
  snprintf(key, sizeof key, "%s_bytes", split);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v) return 0;
  double b = cJSON_IsNumber(v) ? v->valuedouble : -1;
  if (!(b >= 0 && b <= 9007199254740992.0 && b == floor(b)))
    return atoll_fail(err, "%s: \"%s\" must be a whole number of bytes >= 0", path, key);
  /* every token is at least one byte of text (vocabulary entries and added tokens are never empty) */
  if (b < (double)ds->ntokens)
    return atoll_fail(err, "%s: \"%s\" is %.17g but the split holds %" PRIu64 " tokens (each at least one byte)", path,
                      key, b, ds->ntokens);
  ds->text_bytes = (uint64_t)b;
  return 0;
}

static int manifest_matches(const cJSON *root, atoll_dataset *ds, const char *path,
                            const char *split, atoll_err *err) {
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
  int version = cJSON_IsNumber(ver) ? ver->valueint : 0;
  if (version != 1 && version != 2)
    return atoll_fail(err, "%s: unsupported manifest version (this build reads 1 and 2)", path);
  /* ids of an unknown tokenizer would be trained on without meaning: "bytes", or
   * "bpe" with the hash of the tokenizer.json kept beside (data/data_tokenizer.c) */
  const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
  int bpe = cJSON_IsString(tok) && strcmp(tok->valuestring, "bpe") == 0 &&
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "tokenizer_hash"));
  if (tok && !bpe && !(cJSON_IsString(tok) && strcmp(tok->valuestring, "bytes") == 0))
    return atoll_fail(err, "%s: tokenizer %s is not one this build reads (\"bytes\", or \"bpe\" with a tokenizer_hash)", path,
                      cJSON_IsString(tok) ? tok->valuestring : "(not a string)");
  char files[64], tokens[64];
  snprintf(files, sizeof files, version == 1 ? "%s_shards" : "%s_files", split);
  snprintf(tokens, sizeof tokens, "%s_tokens", split);
  if (manifest_count(root, path, "vocab", ds->vocab, "as the token files' vocabulary", err) ||
      manifest_count(root, path, files, (uint64_t)ds->nfiles, "token files", err) ||
      manifest_count(root, path, tokens, ds->ntokens, "tokens", err))
    return -1;
  if (manifest_text_bytes(root, ds, path, split, err) != 0) return -1;
  return version == 1 ? 0 : manifest_hashes(root, ds, path, split, err);
}

/* DIR/manifest.json, when present, must describe exactly the token files found. A
 * directory without one (made by hand or by tests) is read on the files' own checks. */
static int check_manifest(atoll_dataset *ds, const char *dir, const char *split,
                          atoll_err *err) {
  char path[1024];
  if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path)
    return atoll_fail(err, "%.200s: path too long", dir);
  struct stat st;
  if (stat(path, &st) != 0 && errno == ENOENT) return 0;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) /* a FIFO would hang the read */
    return atoll_fail(err, "%s: not a regular file", path);
  cJSON *root = atoll_json_read_whole(path, (size_t)1 << 26, err);
  if (!root) return -1;
  int rc = cJSON_IsObject(root) ? manifest_matches(root, ds, path, split, err)
                                : atoll_fail(err, "%s: not a JSON object", path);
  cJSON_Delete(root);
  return rc;
}

int atoll_dataset_check_vocab(const atoll_dataset *ds, int model_vocab, atoll_err *err) {
  const char *name = ds->nfiles > 0 ? ds->files[0].path : "dataset";
  if (model_vocab < 1 || ds->vocab > (uint32_t)model_vocab)
    return atoll_fail(err, "%s: token vocabulary %" PRIu32 " is larger than the model's vocab %d",
                      name, ds->vocab, model_vocab);
  if (ds->nfiles > 0 && ds->ntokens > 0 && ds->max_token >= (uint32_t)model_vocab)
    return atoll_fail(err, "%s: largest token %" PRIu32 " is outside the model's vocab %d", name,
                      ds->max_token, model_vocab);
  return 0;
}

/* -------------------------------------------------------------- entry --- */

int atoll_dataset_open(atoll_dataset *ds, const char *dir, const char *split, int seq,
                       atoll_err *err) {
  memset(ds, 0, sizeof *ds);
  if (seq < 1) return atoll_fail(err, "%s: sequence length %d must be at least 1", dir, seq);
  if (check_dir(dir, err) != 0) return -1;
  if (open_files(ds, dir, split, err) != 0 || check_manifest(ds, dir, split, err) != 0 ||
      default_ranges(ds, err) != 0 || check_enough(ds, dir, split, seq, err) != 0) {
    atoll_dataset_close(ds);
    return -1;
  }
  return 0;
}

void atoll_dataset_close(atoll_dataset *ds) {
  for (int k = 0; k < ds->nfiles; k++) atoll_token_file_close(&ds->files[k]);
  free(ds->files);
  free(ds->ranges);
  memset(ds, 0, sizeof *ds);
}

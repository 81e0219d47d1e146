/* model.safetensors.index.json, the map of a sharded Hugging Face checkpoint
 * (src/ckpt/hf.h): {"metadata": {...}, "weight_map": {"TENSOR": "SHARD FILE", ...}}.
 * Only weight_map is read; metadata (total_size and the like) is not checked. A shard
 * is a plain file name beside the index ending in .safetensors: no directory part, so an
 * index cannot make the reader open a file elsewhere. */
#include "ckpt/hf.h"

#include "core/json_text.h"

#include <stdlib.h>
#include <string.h>

/* Most shards and tensors an index may name (Llama 3.1 405B: 191 shards, ~1100 tensors). */
#define MAX_SHARDS 100000
#define MAX_NAME 255

static int plain_shard_name(const char *s) {
  size_t n = strlen(s);
  if (n < 13 || n > MAX_NAME || strcmp(s + n - 12, ".safetensors") != 0 || s[0] == '.') return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '/' || s[i] == '\\' || (unsigned char)s[i] < 0x20) return 0;
  return 1;
}

void atoll_hf_index_free(atoll_hf_index *x) {
  free(x->shards);
  free(x->names);
  free(x->shard_of);
  cJSON_Delete(x->json);
  memset(x, 0, sizeof *x);
}

int atoll_hf_index_find(const atoll_hf_index *x, const char *name) {
  for (int i = 0; i < x->nnames; i++)
    if (strcmp(x->names[i], name) == 0) return x->shard_of[i];
  return -1;
}

/* The shard's number, adding it if new. */
static int shard_number(atoll_hf_index *x, const char *file) {
  for (int i = 0; i < x->nshards; i++)
    if (strcmp(x->shards[i], file) == 0) return i;
  x->shards[x->nshards] = file;
  return x->nshards++;
}

int atoll_hf_index_parse(const char *text, size_t len, const char *path, atoll_hf_index *x, atoll_err *err) {
  memset(x, 0, sizeof *x);
  x->json = atoll_json_parse_whole(text, len, path, err);
  if (!x->json) return -1;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(x->json, "weight_map");
  int n = cJSON_IsObject(map) ? cJSON_GetArraySize(map) : 0;
  int rc = 0;
  if (!cJSON_IsObject(x->json))
    rc = atoll_fail(err, "%s: not a JSON object", path);
  else if (atoll_json_unique_keys(x->json, path, err))
    rc = -1;
  else if (!cJSON_IsObject(map))
    rc = atoll_fail(err, "%s: weight_map is %s; it must be an object mapping tensor names to shard files", path,
                    map ? "not an object" : "missing");
  else if (n < 1 || n > MAX_SHARDS)
    rc = atoll_fail(err, "%s: weight_map names %d tensors; it must name 1 to %d", path, n, MAX_SHARDS);
  if (rc == 0) {
    x->shards = calloc((size_t)n, sizeof *x->shards);
    x->names = calloc((size_t)n, sizeof *x->names);
    x->shard_of = calloc((size_t)n, sizeof *x->shard_of);
    if (!x->shards || !x->names || !x->shard_of) rc = atoll_fail(err, "%s: out of memory", path);
  }
  for (const cJSON *e = rc ? NULL : map->child; e && rc == 0; e = e->next) {
    if (!e->string[0] || strlen(e->string) > MAX_NAME)
      rc = atoll_fail(err, "%s: weight_map has a tensor name that is empty or longer than %d bytes", path, MAX_NAME);
    else if (!cJSON_IsString(e) || !plain_shard_name(e->valuestring))
      rc = atoll_fail(err, "%s: weight_map's %.80s: the shard must be a file name beside the index ending in "
                      ".safetensors (no directory)", path, e->string);
    else {
      x->names[x->nnames] = e->string;
      x->shard_of[x->nnames++] = shard_number(x, e->valuestring);
    }
  }
  if (rc) atoll_hf_index_free(x);
  return rc;
}

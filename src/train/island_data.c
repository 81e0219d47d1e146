/* --island-data (src/train/run.h): which source files of the prepared corpus each
 * DiLoCo island trains on. With K islands, island k takes
 *   files   source files k, k+K, k+2K, ... (round-robin: on a corpus sorted by path,
 *           every island gets a mix of all its topics);
 *   blocks  the k-th of K contiguous runs of files in the manifest's order (files
 *           [k n / K, (k+1) n / K), by count, not tokens: the islands' token counts may
 *           differ a lot, and each island prints its own): on a sorted corpus,
 *           different topics per island.
 * A source's tokens are its "train_tokens" in DIR/manifest.json (docs/formats.md);
 * manifests written before that key hold only "train_bytes", which equal the tokens
 * for the byte tokenizer only. With --join, k is --island-id and K --islands. */
#include "train/run.h"

#include "core/json_text.h"
#include "data/dataset.h"
#include "train/config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int takes(int mode, int i, int n, int islands, int me) {
  if (mode == 1) return i % islands == me;
  return (long long)i * islands / n == me; /* blocks: floor(i K / n) is i's block */
}

/* Source i's tokens in the train split (at most the split's `total`); -1 (err set) when
 * the manifest cannot say. */
static long long source_tokens(const cJSON *src, int i, int bytes_tokenizer, uint64_t total, const char *path,
                               atoll_err *err) {
  const char *key = "train_tokens";
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(src, key);
  if (!t && bytes_tokenizer) t = cJSON_GetObjectItemCaseSensitive(src, key = "train_bytes"); /* one token per byte */
  if (!t) {
    atoll_fail(err, "%s: sources[%d] has no train_tokens%s", path, i,
               bytes_tokenizer ? "" : " (a manifest of an older atoll with a tokenizer: prepare the data again)");
    return -1;
  }
  double v = cJSON_IsNumber(t) ? t->valuedouble : -1;
  if (v < 0 || v > (double)total || v != (double)(long long)v) {
    atoll_fail(err, "%s: sources[%d].%s is not a whole number of tokens between 0 and the split's %llu", path, i, key,
               (unsigned long long)total);
    return -1;
  }
  return (long long)v;
}

int atoll_run_island_data(const atoll_run *r, atoll_dataset *ds, atoll_err *err) {
  const atoll_config *c = r->cfg;
  int mode = atoll_island_data_mode(c->islands.data);
  char path[1100];
  snprintf(path, sizeof path, "%s/manifest.json", c->data.dir);
  cJSON *man = atoll_json_read_whole(path, 64u << 20, err);
  if (!man) {
    atoll_err why = *err;
    return atoll_fail(err, "--island-data %s needs the manifest of atoll prepare: %s", c->islands.data, why.msg);
  }
  const cJSON *sources = cJSON_GetObjectItemCaseSensitive(man, "sources");
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(man, "tokenizer");
  int bytes_tokenizer = !cJSON_IsString(kind) || strcmp(kind->valuestring, "bytes") == 0;
  int joined = c->islands.join[0] != 0, me = joined ? c->islands.id : r->mesh.island;
  int n = cJSON_GetArraySize(sources), islands = joined ? c->islands.count : r->mesh.islands, rc = 0;
  if (!cJSON_IsArray(sources) || n < islands) {
    cJSON_Delete(man);
    return atoll_fail(err, "%s: --island-data %s needs at least %d source files (one per island), found %d", path,
                      c->islands.data, islands, cJSON_IsArray(sources) ? n : 0);
  }
  uint64_t *b = calloc((size_t)n, sizeof(uint64_t)), *e = calloc((size_t)n, sizeof(uint64_t));
  if (!b || !e) rc = atoll_fail(err, "out of memory reading %s", path);
  uint64_t at = 0, mine = 0;
  int m = 0, first = -1, last = -1;
  for (int i = 0; rc == 0 && i < n; i++) {
    long long len_i = source_tokens(cJSON_GetArrayItem(sources, i), i, bytes_tokenizer, ds->ntokens, path, err);
    if (len_i < 0) {
      rc = -1;
      break;
    }
    if ((uint64_t)len_i > ds->ntokens - at) { /* the sum check below, before it could wrap */
      rc = atoll_fail(err, "%s: the sources hold more training tokens than the token files' %llu; prepare the data again",
                      path, (unsigned long long)ds->ntokens);
      break;
    }
    if (takes(mode, i, n, islands, me)) {
      b[m] = at;
      e[m++] = at + (uint64_t)len_i;
      mine += (uint64_t)len_i;
      if (first < 0) first = i;
      last = i;
    }
    at += (uint64_t)len_i;
  }
  /* the sources' tokens must add up to the token files' (a manifest from elsewhere) */
  if (rc == 0 && at != ds->ntokens)
    rc = atoll_fail(err, "%s: the sources hold %llu training tokens, the token files %llu; prepare the data again", path,
                    (unsigned long long)at, (unsigned long long)ds->ntokens);
  char what[64];
  snprintf(what, sizeof what, "--island-data %s (island %d)", c->islands.data, me);
  if (rc == 0) rc = atoll_dataset_restrict(ds, b, e, m, r->seq, what, err);
  if (rc == 0 && r->mesh.island_rank == 0) {
    const cJSON *f0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(sources, first), "path");
    const cJSON *f1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(sources, last), "path");
    const char *p0 = cJSON_IsString(f0) ? f0->valuestring : "?", *p1 = cJSON_IsString(f1) ? f1->valuestring : "?";
    if (mode == 1) /* files: not a range */
      fprintf(stderr, "atoll train: island %d trains on %d of %d source files (--island-data files: one in %d, from #%d %s to #%d %s; %llu tokens)\n",
              me, m, n, islands, first, p0, last, p1, (unsigned long long)mine);
    else
      fprintf(stderr, "atoll train: island %d trains on %d of %d source files (--island-data blocks: #%d %s .. #%d %s; %llu tokens)\n",
              me, m, n, first, p0, last, p1, (unsigned long long)mine);
  }
  free(b);
  free(e);
  cJSON_Delete(man);
  return rc;
}

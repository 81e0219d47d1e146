/* Checkpoints of a (possibly data-parallel, possibly sharded) run.
 *
 * On disk a checkpoint always holds the whole model and the whole AdamW state, in
 * layout order, whatever the world size and ZeRO stage that wrote it. Saving gathers
 * the shards to rank 0, which writes; loading has every rank read the files and keep
 * its own shard. So a run saved at N ranks with any stage resumes at M ranks with any
 * stage: resharding is just a different choice of shard on load. */
#include "train/trainer.h"

#include "ckpt/checkpoint.h"
#include "core/mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static cJSON *rng_to_json(const atoll_rng *r) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < 4; i++) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->s[i]);
    cJSON_AddItemToArray(a, cJSON_CreateString(buf));
  }
  return a;
}

static int rng_from_json(atoll_rng *r, const cJSON *a, const char *dir, atoll_err *err) {
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 4)
    return atoll_fail(err, "%s/state.json: rng must be an array of 4 strings", dir);
  for (int i = 0; i < 4; i++) {
    const cJSON *x = cJSON_GetArrayItem(a, i);
    char *end = NULL;
    if (!cJSON_IsString(x)) return atoll_fail(err, "%s/state.json: rng[%d] is not a string", dir, i);
    errno = 0;
    r->s[i] = strtoull(x->valuestring, &end, 10);
    if (errno || !*x->valuestring || *end) return atoll_fail(err, "%s/state.json: rng[%d] is not an integer", dir, i);
  }
  return 0;
}

static int sharded(const trainer *t) { return t->shard_begin != 0 || t->shard_end != t->lay->nparams; }

/* A full-size moment buffer on every rank holding only this rank's shard, then
 * gathered to rank 0 (other ranks touch only their shard's pages). */
static float *gather_moment(trainer *t, const float *mine) {
  size_t P = t->lay->nparams;
  float *full = atoll_mem_alloc(P * sizeof(float));
  if (!full) return NULL;
  memcpy(full + t->shard_begin, mine, (t->shard_end - t->shard_begin) * sizeof(float));
  size_t *counts = malloc(sizeof(size_t) * (size_t)t->world);
  atoll_dp_chunks(t->dp, 0, P, counts);
  atoll_gather_to_root(t->comm, full, P, counts, 0);
  free(counts);
  return full;
}

static uint64_t hash_floats(const float *p, size_t n) {
  const uint32_t *w = (const uint32_t *)p;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (size_t i = 0; i < n; i++) {
    h ^= w[i];
    h *= 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h;
}

int trainer_check_weights(trainer *t, uint64_t *hash, atoll_err *err) {
  uint64_t mine = hash_floats(atoll_model_params(t->model), t->lay->nparams);
  uint64_t *all = malloc(sizeof(uint64_t) * (size_t)t->world);
  atoll_allgather_bytes(t->comm, &mine, all, sizeof mine);
  int bad = -1;
  for (int r = 0; r < t->world; r++)
    if (all[r] != all[0]) bad = r;
  uint64_t other = bad >= 0 ? all[bad] : 0;
  free(all);
  *hash = mine;
  if (bad >= 0)
    return atoll_fail(err, "weights differ across ranks: rank %d holds hash %016llx, rank 0 %016llx",
                      bad, (unsigned long long)other, (unsigned long long)mine);
  return 0;
}

int trainer_save(trainer *t, int step, atoll_err *err) {
  atoll_dp_gather_weights(t->dp);
  uint64_t hash;
  int rc = trainer_check_weights(t, &hash, err);
  float *m = t->m, *v = t->v;
  if (rc == 0 && sharded(t)) {
    m = gather_moment(t, t->m);
    v = gather_moment(t, t->v);
    if (!m || !v) rc = atoll_fail(err, "out of memory gathering the optimizer state");
  }
  if (rc == 0 && t->rank == 0) {
    char dir[1200];
    atoll_ckpt_dirname(t->ckpt_root, step, dir, sizeof dir);
    cJSON *state = cJSON_CreateObject();
    cJSON_AddNumberToObject(state, "step", step);
    cJSON_AddItemToObject(state, "config", atoll_config_to_json(t->cfg));
    cJSON_AddItemToObject(state, "rng", rng_to_json(&t->rng));
    cJSON *data = cJSON_AddObjectToObject(state, "data");
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)t->cfg->seed);
    cJSON_AddStringToObject(data, "seed", buf);
    cJSON_AddNumberToObject(data, "next_step", step); /* step s's batch is window set (seed, s) */
    cJSON_AddNumberToObject(state, "train_loss", t->last_loss);
    cJSON_AddNumberToObject(state, "world_size", t->world);
    cJSON_AddNumberToObject(state, "shard", t->cfg->shard);
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)hash);
    cJSON_AddStringToObject(state, "weights_hash", buf);
    rc = atoll_ckpt_save(dir, t->lay, atoll_model_params(t->model), m, v, state, err);
    cJSON_Delete(state);
    if (rc == 0) rc = atoll_ckpt_prune(t->ckpt_root, t->cfg->keep, err);
  }
  if (m != t->m) atoll_mem_free(m);
  if (v != t->v) atoll_mem_free(v);
  atoll_dp_release_weights(t->dp);
  /* every rank learns whether rank 0's write worked */
  int ok = rc == 0;
  atoll_broadcast(t->comm, &ok, sizeof ok, 0);
  if (!ok && rc == 0) return atoll_fail(err, "rank 0 could not write checkpoint step %d (see its message)", step);
  return rc;
}

int trainer_load(trainer *t, const char *dir, int *start_step, atoll_err *err) {
  cJSON *state = NULL;
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  int rc = -1;
  size_t P = t->lay->nparams;
  float *fm = NULL, *fv = NULL;
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "step");
  if (!cJSON_IsNumber(step)) {
    atoll_fail(err, "%s/state.json: step missing", dir);
    goto done;
  }
  if (rng_from_json(&t->rng, cJSON_GetObjectItemCaseSensitive(state, "rng"), dir, err)) goto done;
  if (sharded(t)) {
    fm = atoll_mem_alloc(P * sizeof(float));
    fv = atoll_mem_alloc(P * sizeof(float));
    if (!fm || !fv) {
      atoll_fail(err, "out of memory loading the optimizer state");
      goto done;
    }
  }
  if (atoll_ckpt_load(dir, t->lay, atoll_model_params(t->model), fm ? fm : t->m, fv ? fv : t->v, err)) goto done;
  if (fm) {
    size_t n = t->shard_end - t->shard_begin;
    memcpy(t->m, fm + t->shard_begin, n * sizeof(float));
    memcpy(t->v, fv + t->shard_begin, n * sizeof(float));
  }
  *start_step = step->valueint;
  rc = 0;
done:
  atoll_mem_free(fm);
  atoll_mem_free(fv);
  cJSON_Delete(state);
  return rc;
}

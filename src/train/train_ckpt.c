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

/* Island rank j's part of the flat buffer: [j S, (j+1) S), S = ceil(P / island size):
 * its ZeRO shard, and its slice of the DiLoCo outer state. */
static void island_chunk(const trainer *t, int j, size_t *b, size_t *e) {
  size_t P = t->lay->nparams, S = (P + t->mesh.island_size - 1) / t->mesh.island_size;
  *b = (size_t)j * S < P ? (size_t)j * S : P;
  *e = (size_t)(j + 1) * S < P ? (size_t)(j + 1) * S : P;
}

/* Gathers island k's copy of a buffer to world rank 0: every rank of island k sends
 * its island chunk, taken from src (which holds values from flat offset src_begin
 * on). Returns the whole buffer on world rank 0 (caller frees with atoll_mem_free),
 * NULL elsewhere or when out of memory. */
static float *gather_island(trainer *t, int k, const float *src, size_t src_begin) {
  size_t P = t->lay->nparams;
  float *full = atoll_mem_alloc(P * sizeof(float));
  size_t *counts = calloc((size_t)t->world, sizeof(size_t));
  if (!full || !counts) {
    atoll_mem_free(full);
    free(counts);
    return NULL;
  }
  for (int w = 0; w < t->world; w++) {
    size_t b, e;
    island_chunk(t, w % t->mesh.island_size, &b, &e);
    counts[w] = w / t->mesh.island_size == k ? e - b : 0;
  }
  if (t->mesh.island == k) {
    size_t b, e;
    island_chunk(t, t->mesh.island_rank, &b, &e);
    memcpy(full + b, src + (b - src_begin), (e - b) * sizeof(float));
  }
  atoll_gather_to_root(t->comm, full, P, counts, 0);
  free(counts);
  if (t->rank != 0) {
    atoll_mem_free(full);
    return NULL;
  }
  return full;
}

int trainer_check_weights(trainer *t, uint64_t *hash, atoll_err *err) {
  /* islands legitimately differ between outer syncs: compare inside the island */
  int n = t->mesh.island_size;
  uint64_t mine = atoll_hash_floats(atoll_model_params(t->model), t->lay->nparams);
  uint64_t *all = malloc(sizeof(uint64_t) * (size_t)n);
  atoll_allgather_bytes(t->mesh.island_comm, &mine, all, sizeof mine);
  int bad = -1;
  for (int r = 0; r < n; r++)
    if (all[r] != all[0]) bad = r;
  uint64_t other = bad >= 0 ? all[bad] : 0, all0 = all[0];
  free(all);
  *hash = mine;
  if (bad >= 0)
    return atoll_fail(err, "weights differ across ranks: island rank %d holds hash %016llx, island rank 0 %016llx",
                      bad, (unsigned long long)other, (unsigned long long)all0);
  return 0;
}

static cJSON *state_json(trainer *t, int step, uint64_t hash) {
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
  cJSON_AddNumberToObject(state, "islands", t->mesh.islands);
  snprintf(buf, sizeof buf, "%016llx", (unsigned long long)hash);
  cJSON_AddStringToObject(state, "weights_hash", buf);
  return state;
}

#define MAX_ISLAND_FILES 64

/* Collective. World rank 0 gathers and writes; every rank learns the outcome.
 *   one island:  model = the weights, optimizer = the AdamW moments;
 *   DiLoCo:      model = the global weights, optimizer = island 0's moments,
 *                outer.safetensors = the outer momentum, island_K.safetensors = island
 *                K's own weights and moments. */
int trainer_save(trainer *t, int step, atoll_err *err) {
  int K = t->mesh.islands;
  if (K > MAX_ISLAND_FILES) return atoll_fail(err, "--islands %d: checkpoints support up to %d islands", K, MAX_ISLAND_FILES);
  uint64_t hash;
  atoll_dp_gather_weights(t->dp);
  int rc = trainer_check_weights(t, &hash, err);
  atoll_dp_release_weights(t->dp);
  float *params = atoll_model_params(t->model);
  size_t m_begin = sharded(t) ? t->shard_begin : 0;
  /* whole buffers on rank 0: [0] weights (or global), [1] m, [2] v, then per island
   * weights, m, v, then the outer momentum */
  float *bufs[3 + 3 * MAX_ISLAND_FILES + 1] = {0};
  int nb = 0;
  if (rc == 0) {
    if (K == 1) {
      bufs[nb++] = gather_island(t, 0, params, 0);
      bufs[nb++] = gather_island(t, 0, t->m, m_begin);
      bufs[nb++] = gather_island(t, 0, t->v, m_begin);
    } else {
      size_t sb, se;
      atoll_diloco_slice(t->diloco, &sb, &se);
      bufs[nb++] = gather_island(t, 0, atoll_diloco_global(t->diloco), sb);
      bufs[nb++] = gather_island(t, 0, t->m, m_begin);
      bufs[nb++] = gather_island(t, 0, t->v, m_begin);
      for (int k = 0; k < K; k++) {
        bufs[nb++] = gather_island(t, k, params, 0);
        bufs[nb++] = gather_island(t, k, t->m, m_begin);
        bufs[nb++] = gather_island(t, k, t->v, m_begin);
      }
      bufs[nb++] = gather_island(t, 0, atoll_diloco_momentum(t->diloco), sb);
    }
  }
  if (rc == 0 && t->rank == 0) {
    for (int i = 0; i < nb; i++)
      if (!bufs[i]) rc = atoll_fail(err, "out of memory gathering the checkpoint");
  }
  if (rc == 0 && t->rank == 0) {
    char dir[1200];
    atoll_ckpt_dirname(t->ckpt_root, step, dir, sizeof dir);
    cJSON *state = state_json(t, step, hash);
    char names[MAX_ISLAND_FILES][32];
    st_part parts[MAX_ISLAND_FILES][3];
    atoll_ckpt_extra extras[MAX_ISLAND_FILES + 1];
    int ne = 0;
    if (K > 1) {
      st_part outer = {"outer_momentum.", bufs[nb - 1]};
      extras[ne++] = (atoll_ckpt_extra){"outer.safetensors", &outer, 1};
      for (int k = 0; k < K; k++) {
        snprintf(names[k], sizeof names[k], "island_%d.safetensors", k);
        parts[k][0] = (st_part){"weights.", bufs[3 + 3 * k]};
        parts[k][1] = (st_part){"exp_avg.", bufs[4 + 3 * k]};
        parts[k][2] = (st_part){"exp_avg_sq.", bufs[5 + 3 * k]};
        extras[ne++] = (atoll_ckpt_extra){names[k], parts[k], 3};
      }
      rc = atoll_ckpt_save_ex(dir, t->lay, bufs[0], bufs[1], bufs[2], extras, ne, state, err);
    } else {
      rc = atoll_ckpt_save(dir, t->lay, bufs[0], bufs[1], bufs[2], state, err);
    }
    cJSON_Delete(state);
    if (rc == 0) rc = atoll_ckpt_prune(t->ckpt_root, t->cfg->keep, err);
  }
  for (int i = 0; i < nb; i++) atoll_mem_free(bufs[i]);
  /* every rank learns whether rank 0's write worked */
  int ok = rc == 0;
  atoll_broadcast(t->comm, &ok, sizeof ok, 0);
  if (!ok && rc == 0) return atoll_fail(err, "rank 0 could not write checkpoint step %d (see its message)", step);
  return rc;
}

/* Every rank reads the files and keeps its own part: resharding across world sizes
 * and stages is a different choice of part. DiLoCo checkpoints need the same number
 * of islands. */
int trainer_load(trainer *t, const char *dir, int *start_step, atoll_err *err) {
  cJSON *state = NULL;
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  int rc = -1, K = t->mesh.islands;
  size_t P = t->lay->nparams;
  float *fm = atoll_mem_alloc(P * sizeof(float)), *fv = atoll_mem_alloc(P * sizeof(float));
  float *fg = K > 1 ? atoll_mem_alloc(P * sizeof(float)) : NULL;
  float *params = atoll_model_params(t->model);
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "step");
  const cJSON *islands = cJSON_GetObjectItemCaseSensitive(state, "islands");
  int saved_islands = cJSON_IsNumber(islands) ? islands->valueint : 1;
  if (!fm || !fv || (K > 1 && !fg)) {
    atoll_fail(err, "out of memory loading the optimizer state");
    goto done;
  }
  if (!cJSON_IsNumber(step)) {
    atoll_fail(err, "%s/state.json: step missing", dir);
    goto done;
  }
  if (saved_islands != K) {
    atoll_fail(err, "--islands %d: the checkpoint %s was saved with %d island%s (each island's own state is in it)",
                K, dir, saved_islands, saved_islands == 1 ? "" : "s");
    goto done;
  }
  if (rng_from_json(&t->rng, cJSON_GetObjectItemCaseSensitive(state, "rng"), dir, err)) goto done;
  if (K == 1) {
    if (atoll_ckpt_load(dir, t->lay, params, fm, fv, err)) goto done;
  } else {
    char file[64];
    snprintf(file, sizeof file, "island_%d.safetensors", t->mesh.island);
    st_read_part island[3] = {{"weights.", params}, {"exp_avg.", fm}, {"exp_avg_sq.", fv}};
    st_read_part outer[1] = {{"outer_momentum.", fg}};
    size_t sb, se;
    atoll_diloco_slice(t->diloco, &sb, &se);
    if (atoll_ckpt_load_extra(dir, t->lay, "outer.safetensors", outer, 1, err)) goto done;
    memcpy(atoll_diloco_momentum(t->diloco), fg + sb, (se - sb) * sizeof(float));
    if (atoll_ckpt_load(dir, t->lay, fg, NULL, NULL, err)) goto done; /* the global weights */
    memcpy(atoll_diloco_global(t->diloco), fg + sb, (se - sb) * sizeof(float));
    if (atoll_ckpt_load_extra(dir, t->lay, file, island, 3, err)) goto done;
    atoll_diloco_resume_at(t->diloco, step->valueint);
  }
  size_t b = sharded(t) ? t->shard_begin : 0, e = sharded(t) ? t->shard_end : P;
  memcpy(t->m, fm + b, (e - b) * sizeof(float));
  memcpy(t->v, fv + b, (e - b) * sizeof(float));
  *start_step = step->valueint;
  rc = 0;
done:
  atoll_mem_free(fm);
  atoll_mem_free(fv);
  atoll_mem_free(fg);
  cJSON_Delete(state);
  return rc;
}

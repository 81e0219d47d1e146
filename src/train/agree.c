/* Ranks agree before they act: after any phase that can fail on some ranks only, and
 * on the settings themselves, before the first collective that depends on them. A
 * rank that left on its own would leave the others waiting in a collective forever
 * (or worse, matching its next collective against theirs). Last, every copy of a
 * tensor agrees (atoll_run_check_weights, run.h). */
#include "train/agree.h"
#include "train/run.h"

#include "core/fatal.h"
#include "core/fs.h"
#include "core/rng.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int atoll_train_first_failure(atoll_comm *world, int failed, int *count) {
  int n = atoll_comm_size(world), first = -1, stack[64];
  int *all = n <= 64 ? stack : malloc(sizeof(int) * (size_t)n);
  if (!all) atoll_fatal("out of memory gathering %d ranks' status", n);
  failed = failed != 0;
  atoll_allgather_bytes(world, &failed, all, sizeof failed);
  *count = 0;
  for (int i = n - 1; i >= 0; i--)
    if (all[i]) {
      first = i;
      ++*count;
    }
  if (all != stack) free(all);
  return first;
}

int atoll_train_agree(atoll_comm *world, int rc, atoll_err *err) {
  int rank = atoll_comm_rank(world), count;
  int first = atoll_train_first_failure(world, rc != 0, &count);
  if (first < 0) return 0;
  /* all failed alike (the same settings, the same loss): rank 0 says it as it is */
  if (count == atoll_comm_size(world)) return rank == 0 ? ATOLL_TRAIN_ERROR : ATOLL_TRAIN_QUIET;
  if (rank != first) return ATOLL_TRAIN_QUIET;
  atoll_err own = *err;
  atoll_fail(err, "rank %d: %s", rank, own.msg);
  return ATOLL_TRAIN_ERROR;
}

/* The data's identity: its manifest (sources, token counts), hashed; "none" without
 * one. Two ranks reading different corpora under the same path differ here. */
static void add_data_identity(cJSON *o, const char *data) {
  char path[1100], buf[40] = "none";
  snprintf(path, sizeof path, "%s/manifest.json", data);
  char *text = NULL;
  size_t len = 0;
  atoll_err ignored;
  if (atoll_read_file(path, 64u << 20, &text, &len, &ignored) == 0) {
    uint64_t h = len;
    for (size_t i = 0; i < len; i += 8) {
      uint64_t w = 0;
      memcpy(&w, text + i, len - i < 8 ? len - i : 8);
      h = atoll_hash64(h, w, i, 0);
    }
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
    free(text);
  }
  cJSON_AddStringToObject(o, "data manifest", buf);
}

/* What must be equal on every rank: the whole configuration but the thread count
 * (each rank's own), with stop-after (left out of checkpoints), the data's identity
 * and the checkpoint resumed from. */
static cJSON *settings_json(const atoll_config *cfg, const char *resume_dir) {
  cJSON *o = atoll_config_to_json(cfg);
  if (!o) return NULL;
  cJSON_DeleteItemFromObjectCaseSensitive(o, "threads");
  cJSON_AddNumberToObject(o, "stop-after", cfg->run.stop_after);
  add_data_identity(o, cfg->data.dir);
  cJSON_AddStringToObject(o, "resume", resume_dir ? resume_dir : "");
  return o;
}

/* The text of a value for a message: strings without their quotes, numbers short
 * unless the short forms of the two values would read alike. */
static void value_text(const cJSON *v, int precise, char *out, size_t n) {
  if (!v) {
    snprintf(out, n, "missing");
  } else if (cJSON_IsString(v)) {
    snprintf(out, n, "%s", v->valuestring);
  } else if (cJSON_IsNumber(v)) {
    snprintf(out, n, precise ? "%.17g" : "%g", v->valuedouble);
  } else {
    char *s = cJSON_PrintUnformatted(v);
    snprintf(out, n, "%s", s ? s : "?");
    free(s);
  }
}

/* The first key (in this rank's order) whose value differs from rank 0's; 0 if none. */
static int first_difference(const cJSON *mine, const cJSON *theirs, int rank, atoll_err *err) {
  const cJSON *item;
  cJSON_ArrayForEach(item, mine) {
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(theirs, item->string);
    if (other && cJSON_Compare(item, other, 1)) continue;
    char a[200], b[200];
    for (int precise = 0; precise < 2; precise++) {
      value_text(other, precise, a, sizeof a);
      value_text(item, precise, b, sizeof b);
      if (strcmp(a, b) != 0) break;
    }
    return atoll_fail(err, "ranks disagree on settings: %s is %s on rank 0 but %s on rank %d", item->string, a, b,
                      rank);
  }
  if (cJSON_GetArraySize(theirs) != cJSON_GetArraySize(mine))
    return atoll_fail(err, "ranks disagree on settings: rank 0 has %d keys but rank %d has %d",
                      cJSON_GetArraySize(theirs), rank, cJSON_GetArraySize(mine));
  return 0;
}

int atoll_train_check_same(atoll_comm *world, const atoll_config *cfg, const char *resume_dir, atoll_err *err) {
  if (atoll_comm_size(world) == 1) return 0;
  int rank = atoll_comm_rank(world);
  cJSON *mine = settings_json(cfg, resume_dir);
  char *text = rank == 0 ? cJSON_PrintUnformatted(mine) : NULL;
  /* the length first, so that no rank receives more than it made room for */
  uint64_t len = text ? strlen(text) + 1 : 0;
  if (rank == 0 && !text) atoll_fatal("out of memory printing the settings");
  atoll_broadcast(world, &len, sizeof len, 0);
  if (rank != 0 && !(text = malloc(len))) atoll_fatal("out of memory for %llu bytes of settings", (unsigned long long)len);
  atoll_broadcast(world, text, len, 0);
  text[len - 1] = '\0';
  cJSON *theirs = rank == 0 ? NULL : cJSON_Parse(text);
  int rc = 0;
  if (rank != 0)
    rc = !mine    ? atoll_fail(err, "out of memory building the settings")
         : theirs ? first_difference(mine, theirs, rank, err)
                  : atoll_fail(err, "rank 0's settings do not parse");
  cJSON_Delete(theirs);
  cJSON_Delete(mine);
  free(text);
  /* the lowest rank that differs speaks; its message names both ranks already */
  int count, first = atoll_train_first_failure(world, rc, &count);
  if (first < 0) return 0;
  return rank == first ? ATOLL_TRAIN_ERROR : ATOLL_TRAIN_QUIET;
}

/* 1 and the index of a rank whose hash differs from rank 0's in comm, else 0. */
static int hashes_differ(atoll_comm *c, uint64_t mine, int *which, uint64_t *theirs, uint64_t *first) {
  int n = atoll_comm_size(c);
  uint64_t *all = malloc(sizeof(uint64_t) * (size_t)n);
  if (!all) atoll_fatal("out of memory comparing %d ranks' weight hashes", n);
  atoll_allgather_bytes(c, &mine, all, sizeof mine);
  int bad = -1;
  for (int r = 0; r < n; r++)
    if (all[r] != all[0]) bad = r;
  if (bad >= 0) *which = bad, *theirs = all[bad], *first = all[0];
  free(all);
  return bad >= 0;
}

/* Every copy of a tensor must agree: the data-parallel replicas of a part, the
 * tensor-parallel ranks' replicated tensors, the two ends' tied wte (islands
 * legitimately differ between outer syncs). Every rank takes part in every check and
 * all learn the outcome, the first failing rank's message included. */
int atoll_run_check_weights(atoll_run *r, uint64_t *hash, atoll_err *err) {
  char why[400] = "";
  const float *p = atoll_run_params(r);
  uint64_t mine = atoll_hash_floats(p, r->lay->nparams), other, first;
  int who;
  *hash = mine;
  if (hashes_differ(r->mesh.dp_comm, mine, &who, &other, &first))
    snprintf(why, sizeof why, "weights differ across data-parallel replicas: replica %d holds hash %016llx, replica 0 %016llx",
             who, (unsigned long long)other, (unsigned long long)first);
  if (r->mesh.tp > 1) {
    uint64_t rep = 0;
    for (int i = 0; i < r->lay->ntensors; i++) {
      const atoll_tensor *ten = &r->lay->tensors[i];
      if (ten->split == ATOLL_SPLIT_NONE) rep = atoll_hash64(rep, atoll_hash_floats(p + ten->offset, ten->numel), 0, 0);
    }
    if (hashes_differ(r->mesh.tp_comm, rep, &who, &other, &first) && !why[0])
      snprintf(why, sizeof why, "replicated tensors (LayerNorms, biases, wpe) differ across tensor-parallel ranks: rank %d vs rank 0",
               who);
  }
  if (r->mesh.tie_comm) {
    const atoll_tensor *w = &r->lay->tensors[r->lay->t_wte];
    if (hashes_differ(r->mesh.tie_comm, atoll_hash_floats(p + w->offset, w->numel), &who, &other, &first) && !why[0])
      snprintf(why, sizeof why, "the tied wte differs between the first and the last pp_stage");
  }
  if (r->mesh.tp * r->mesh.pp > 1) {
    /* the run's hash: of every part's hash, in island-rank order */
    int m = r->mesh.island_size;
    uint64_t *parts = malloc(sizeof(uint64_t) * (size_t)m);
    if (!parts) atoll_fatal("out of memory hashing %d parts", m);
    atoll_allgather_bytes(r->mesh.island_comm, &mine, parts, sizeof mine);
    *hash = atoll_hash_floats((const float *)parts, (size_t)m * 2);
    free(parts);
  }
  if (r->world_size == 1) return why[0] ? atoll_fail(err, "%s", why) : 0;
  int count, bad = atoll_train_first_failure(r->world, why[0] != 0, &count);
  if (bad < 0) return 0;
  atoll_broadcast(r->world, why, sizeof why, bad);
  return atoll_fail(err, "rank %d: %s", bad, why);
}

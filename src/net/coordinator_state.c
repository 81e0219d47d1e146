/* The coordinator's state file (docs/formats.md): written atomically after each commit
 * and membership change, read back at start. */
#include "net/coordinator_int.h"

#include "core/fs.h"
#include "core/json_text.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void atoll_coord_save_state(coord *c) {
  cJSON *s = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(s, "members");
  char h[2 * ATOLL_WIRE_HASH + 1];
  for (int i = 0; i < ATOLL_WIRE_HASH; i++) snprintf(h + 2 * i, 3, "%02x", c->hash[i]);
  cJSON_AddNumberToObject(s, "revision", (double)c->revision);
  cJSON_AddStringToObject(s, "hash", h);
  cJSON_AddNumberToObject(s, "step", c->last_step);
  cJSON_AddNumberToObject(s, "ranks", c->ranks);
  cJSON *cnt = cJSON_AddObjectToObject(s, "counts");
  cJSON_AddNumberToObject(cnt, "registered", (double)c->n_registered);
  cJSON_AddNumberToObject(cnt, "left", (double)c->n_left);
  cJSON_AddNumberToObject(cnt, "restarted", (double)c->n_restarted);
  cJSON_AddNumberToObject(cnt, "state_joins", (double)c->n_state_joins);
  cJSON *rh = cJSON_AddArrayToObject(s, "rank_hashes");
  for (uint32_t r = 0; r < c->ranks; r++) {
    char x[2 * ATOLL_WIRE_HASH + 1];
    for (int i = 0; i < ATOLL_WIRE_HASH; i++) snprintf(x + 2 * i, 3, "%02x", c->rank_hash[r][i]);
    cJSON_AddItemToArray(rh, cJSON_CreateString(x));
  }
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (!c->m[i].used) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "island", c->m[i].island);
    cJSON_AddNumberToObject(o, "rank", c->m[i].rank);
    cJSON_AddStringToObject(o, "key", c->m[i].keyz);
    cJSON_AddStringToObject(o, "endpoint", c->m[i].endpoint);
    cJSON_AddItemToArray(mem, o);
  }
  char *text = cJSON_Print(s);
  atoll_err err;
  if (!text || atoll_write_file_atomic(c->state_path, text, strlen(text), &err))
    fprintf(stderr, "coordinator: cannot write the state file %s: %s\n", c->state_path, text ? err.msg : "out of memory");
  cJSON_free(text);
  cJSON_Delete(s);
}

/* A state file from an earlier run: the revision, hash and step carry on. */
int atoll_coord_load_state(coord *c, atoll_err *err) {
  FILE *f = fopen(c->state_path, "r");
  if (!f) return 0; /* a first start */
  fclose(f);
  cJSON *s = atoll_json_read_whole(c->state_path, 1 << 20, err);
  if (!s) return -1;
  const cJSON *rev = cJSON_GetObjectItemCaseSensitive(s, "revision"), *h = cJSON_GetObjectItemCaseSensitive(s, "hash"),
              *st = cJSON_GetObjectItemCaseSensitive(s, "step"), *mem = cJSON_GetObjectItemCaseSensitive(s, "members");
  if (!cJSON_IsNumber(rev) || rev->valuedouble < 0 || !cJSON_IsString(h) || strlen(h->valuestring) != 2 * ATOLL_WIRE_HASH ||
      !cJSON_IsNumber(st)) {
    cJSON_Delete(s);
    return atoll_fail(err, "%s: not a coordinator state file (revision, hash, step)", c->state_path);
  }
  c->revision = (uint64_t)rev->valuedouble;
  c->restored_members = cJSON_GetArraySize(mem);
  c->last_step = (uint32_t)st->valuedouble;
  for (int i = 0; i < ATOLL_WIRE_HASH; i++) {
    unsigned v;
    if (sscanf(h->valuestring + 2 * i, "%2x", &v) != 1) {
      cJSON_Delete(s);
      return atoll_fail(err, "%s: hash is not hexadecimal", c->state_path);
    }
    c->hash[i] = (uint8_t)v;
  }
  memcpy(c->rank_hash[0], c->hash, ATOLL_WIRE_HASH);
  const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(s, "counts"), *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "registered")) && cJSON_IsNumber(v)) c->n_registered = (uint64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "left")) && cJSON_IsNumber(v)) c->n_left = (uint64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "restarted")) && cJSON_IsNumber(v)) c->n_restarted = (uint64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "state_joins")) && cJSON_IsNumber(v)) c->n_state_joins = (uint64_t)v->valuedouble;
  const cJSON *rh = cJSON_GetObjectItemCaseSensitive(s, "rank_hashes");
  for (int r = 0; cJSON_IsArray(rh) && r < cJSON_GetArraySize(rh) && r < MAX_MEMBERS; r++) {
    const cJSON *x = cJSON_GetArrayItem(rh, r);
    if (!cJSON_IsString(x) || strlen(x->valuestring) != 2 * ATOLL_WIRE_HASH) continue;
    for (int i = 0; i < ATOLL_WIRE_HASH; i++) {
      unsigned v = 0;
      sscanf(x->valuestring + 2 * i, "%2x", &v);
      c->rank_hash[r][i] = (uint8_t)v;
    }
  }
  char hh[17];
  atoll_coord_hex(c->hash, hh);
  fprintf(stderr, "coordinator: restored from %s: revision %llu, step %u, hash %s; %d islands were members (they re-register by heartbeat)\n",
          c->state_path, (unsigned long long)c->revision, c->last_step, hh, cJSON_GetArraySize(mem));
  cJSON_Delete(s);
  return 0;
}

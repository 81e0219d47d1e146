/* Per-file hashes of a checkpoint ("file_hashes" in state.json): each tensor file's
 * data section is hashed when it is written and checked when it is read, so that a
 * changed or damaged file fails to load instead of resuming silently. The hash covers
 * what the file holds (the whole model's flat buffers), not how the run that wrote
 * it was laid out, so any layout can check it. */
#include "ckpt/ckpt_internal.h"
#include "ckpt/safetensors_internal.h"
#include "core/rng.h"
#include "model/layout.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define HASH_KEY "file_hashes"

uint64_t atoll_ckpt_buffers_hash(const float *const *bufs, int nbufs, size_t nparams) {
  uint64_t h = 0;
  for (int i = 0; i < nbufs; i++)
    h = atoll_hash64(h, atoll_hash_floats(bufs[i], nparams), (uint64_t)i, (uint64_t)nbufs);
  return h;
}

int atoll_ckpt_record_hash(cJSON *hashes, const char *file, uint64_t hash, atoll_err *err) {
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, hash);
  if (!cJSON_AddStringToObject(hashes, file, hex))
    return atoll_fail(err, "%s: out of memory recording its hash", file);
  return 0;
}

typedef struct {
  size_t nparams;
  int nbuffers;
  int ok; /* the data section had the expected size and alignment */
  uint64_t hash;
} data_hash;

/* atoll_st_data_fn: hashes the data section cut into nbuffers flat buffers. */
static void hash_data(const uint8_t *data, uint64_t size, void *ctx) {
  data_hash *d = ctx;
  const float *bufs[ATOLL_ST_MAX_BUFFERS];
  d->ok = d->nbuffers <= ATOLL_ST_MAX_BUFFERS &&
          size == (uint64_t)d->nbuffers * d->nparams * sizeof(float) &&
          (uintptr_t)data % _Alignof(float) == 0;
  if (!d->ok) return; /* not laid out as atoll writes: cannot match */
  for (int i = 0; i < d->nbuffers; i++) bufs[i] = (const float *)(const void *)data + (size_t)i * d->nparams;
  d->hash = atoll_ckpt_buffers_hash(bufs, d->nbuffers, d->nparams);
}

/* 16 lowercase hex digits into *v. */
static int parse_hex16(const cJSON *item, uint64_t *v) {
  const char *s = cJSON_IsString(item) ? item->valuestring : "";
  int good = strlen(s) == 16;
  for (int i = 0; good && i < 16; i++) good = strchr("0123456789abcdef", s[i]) != NULL;
  return good && sscanf(s, "%16" SCNx64, v) == 1 ? 0 : -1;
}

/* The expected hash of file from state's "file_hashes" into *want; *have is 0 when
 * a version 1 state predates per-file hashes (no such key). From version 2 on every
 * state has them: one without was edited, and is refused. */
static int expected_hash(const cJSON *state, const char *path, const char *file, int *have,
                         uint64_t *want, atoll_err *err) {
  const cJSON *hashes = cJSON_GetObjectItemCaseSensitive(state, HASH_KEY);
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(state, "version");
  *have = hashes != NULL;
  if (!hashes && cJSON_IsNumber(version) && version->valuedouble == ATOLL_CKPT_VERSION_UNHASHED) return 0;
  if (!hashes)
    return atoll_fail(err, "%s: state.json has no \"%s\" (checkpoints of version %d always do): cannot "
                      "check the file", path, HASH_KEY, ATOLL_CKPT_VERSION);
  if (!cJSON_IsObject(hashes))
    return atoll_fail(err, "%s: state.json's \"%s\" is not an object", path, HASH_KEY);
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(hashes, file);
  if (!h)
    return atoll_fail(err, "%s: state.json's \"%s\" has no entry for it (the file was added)",
                      path, HASH_KEY);
  if (parse_hex16(h, want) != 0)
    return atoll_fail(err, "%s: its hash in state.json is not 16 lowercase hex digits", path);
  return 0;
}

int atoll_ckpt_read_verified(const char *dir, const char *file, const cJSON *state,
                             const atoll_layout *lay, const atoll_st_read_buffer *buffers, int nbuffers,
                             cJSON **metadata, atoll_err *err) {
  char path[ATOLL_CKPT_PATH];
  int have;
  uint64_t want = 0;
  if (metadata) *metadata = NULL;
  if (atoll_ckpt_join(path, sizeof path, dir, file, err) != 0) return -1;
  if (expected_hash(state, path, file, &have, &want, err) != 0) return -1;
  data_hash d = {lay->nparams, nbuffers, 0, 0};
  if (atoll_st_read_buffers_ex(path, lay, buffers, nbuffers, metadata, have ? hash_data : NULL, &d,
                             err) != 0)
    return -1;
  if (have && (!d.ok || d.hash != want)) {
    if (metadata) cJSON_Delete(*metadata), *metadata = NULL;
    return atoll_fail(err, "%s: contents do not match the hash in state.json (the file was "
                      "changed or damaged)", path);
  }
  return 0;
}

/* A recorded setting of the run, as a number (def when absent or not a number). */
static double config_number(const cJSON *state, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(state, "config"), key);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

int atoll_ckpt_check_weights_hash(const cJSON *state, const atoll_layout *lay, const float *params,
                                  const char *path, atoll_err *err) {
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(state, "weights_hash");
  if (!h) return 0;
  uint64_t want;
  if (parse_hex16(h, &want) != 0)
    return atoll_fail(err, "%s: state.json's \"weights_hash\" is not 16 lowercase hex digits", path);
  const cJSON *islands = cJSON_GetObjectItemCaseSensitive(state, "islands");
  const cJSON *join = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(state, "config"), "join");
  int whole = config_number(state, "tp", 1) == 1 && config_number(state, "pp", 1) == 1 &&
              config_number(state, "islands", 1) == 1 && (!islands || (cJSON_IsNumber(islands) && islands->valuedouble == 1)) &&
              (!cJSON_IsString(join) || !join->valuestring[0]);
  if (whole && atoll_hash_floats(params, lay->nparams) != want)
    return atoll_fail(err, "%s: the weights do not match state.json's weights_hash (the file or state.json was "
                      "changed)", path);
  return 0;
}

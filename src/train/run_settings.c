/* The run's settings from the coordinator (run_settings.h). */
#include "train/run_settings.h"

#include "core/json_text.h"
#include "train/config.h"

#include <stdlib.h>
#include <string.h>

/* The keys a run may not set for its islands: their own files, addresses and slot. */
static const char *const OWN[] = {"data", "out", "resume", "move-newer", "join", "island-key", "coordinator-key",
                                  "island-listen", "island-advertise", "island-id", "init-from", "init-from-hf",
                                  "eval-data", "stop-after", "config", "tensorboard"};

/* key with '_' read as '-' (the settings accept both) */
static void dashed(const char *key, char *out, size_t n) {
  snprintf(out, n, "%s", key);
  for (char *p = out; *p; p++)
    if (*p == '_') *p = '-';
}

int atoll_run_settings_read(const char *file, char **json, atoll_err *err) {
  *json = NULL;
  char source[1100];
  snprintf(source, sizeof source, "--run %s", file);
  cJSON *obj = atoll_json_read_whole(file, 1u << 20, err);
  if (!obj) return -1;
  atoll_config probe;
  atoll_config_defaults(&probe);
  int rc = atoll_json_unique_keys(obj, source, err) || atoll_config_apply_json(&probe, obj, source, err) ? -1 : 0;
  for (const cJSON *it = obj->child; rc == 0 && it; it = it->next) {
    char k[64];
    dashed(it->string, k, sizeof k);
    for (size_t i = 0; i < sizeof OWN / sizeof OWN[0]; i++)
      if (strcmp(k, OWN[i]) == 0)
        rc = atoll_fail(err, "%s: %s is each island's own (its flag), not the run's", source, it->string);
  }
  char *text = rc == 0 ? cJSON_PrintUnformatted(obj) : NULL;
  cJSON_Delete(obj);
  if (rc) return -1;
  if (!text) return atoll_fail(err, "%s: out of memory", source);
  size_t n = strlen(text);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e) {
      free(text);
      return atoll_fail(err, "%s: holds a byte that is not printable ASCII (at %zu of the compact text)", source, i);
    }
  if (n > 32u << 10) {
    free(text);
    return atoll_fail(err, "%s: %zu bytes once compacted; at most 32 KiB", source, n);
  }
  *json = text;
  return 0;
}

int atoll_run_settings_apply(atoll_config *c, const char *json, atoll_err *err) {
  return atoll_config_apply_text(c, json, strlen(json), "the coordinator's --run settings", err);
}

int atoll_run_settings_agree(const atoll_config *run, const atoll_config *mine, const char *json, atoll_err *err) {
  cJSON *given = atoll_json_parse_whole(json, strlen(json), "the coordinator's --run settings", err);
  if (!given) return -1;
  cJSON *a = atoll_config_to_json(run), *b = atoll_config_to_json(mine);
  int rc = a && b ? 0 : atoll_fail(err, "out of memory");
  for (const cJSON *it = given->child; rc == 0 && it; it = it->next) {
    char k[64];
    dashed(it->string, k, sizeof k);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, k), *y = cJSON_GetObjectItemCaseSensitive(b, k);
    if (x && y && !cJSON_Compare(x, y, 1)) {
      char *want = cJSON_PrintUnformatted(x), *got = cJSON_PrintUnformatted(y);
      rc = atoll_fail(err, "--%s %s: the coordinator's run sets %s = %s; leave the flag out or give that value", k,
                      got ? got : "?", k, want ? want : "?");
      free(want);
      free(got);
    }
  }
  cJSON_Delete(a);
  cJSON_Delete(b);
  cJSON_Delete(given);
  return rc;
}

int atoll_run_settings_open(const char *file, const char *json, int *phase, int *steps, atoll_err *err) {
  cJSON *given = atoll_json_parse_whole(json, strlen(json), "the run's settings", err);
  if (!given) return -1;
  atoll_config c;
  atoll_config_defaults(&c);
  int rc = atoll_run_settings_apply(&c, json, err);
  for (const cJSON *it = given->child; rc == 0 && it; it = it->next) {
    char k[64];
    dashed(it->string, k, sizeof k);
    if (strcmp(k, "islands") == 0)
      rc = atoll_fail(err, "--run %s: sets islands; an open run (--open 1) has no fixed number of islands: leave it out", file);
  }
  if (rc == 0 && c.islands.fragments != 1)
    rc = atoll_fail(err, "--run %s: fragments %d; an open run hands out its data one unit per inner phase: fragments 1", file,
                    c.islands.fragments);
  if (rc == 0 && strcmp(c.islands.data, "iid") != 0)
    rc = atoll_fail(err, "--run %s: island-data %s; an open run hands out its data in units: island-data iid", file,
                    c.islands.data);
  *phase = c.islands.sync_every, *steps = c.run.steps;
  cJSON_Delete(given);
  return rc;
}

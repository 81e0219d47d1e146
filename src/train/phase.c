/* An island's inner phase in tokens or seconds (phase.h). */
#include "train/phase.h"

#include <math.h>

int atoll_phase_on(const atoll_phase_rule *rule) { return rule->tokens > 0 || rule->seconds > 0; }

int atoll_phase_takes(const atoll_phase_rule *rule, const atoll_phase *p) {
  if (p->taken == 0) return 1; /* every phase trains at least one step */
  if (rule->tokens > 0 && (uint64_t)(p->taken + 1) * rule->tokens_per_step > rule->tokens) return 0;
  if (rule->seconds > 0 && p->seconds + p->last > rule->seconds) return 0;
  return 1;
}

void atoll_phase_took(atoll_phase *p, double seconds) {
  p->taken++;
  p->seconds += seconds;
  p->last = seconds;
}

void atoll_phase_begin(atoll_phase *p) {
  p->taken = 0;
  p->seconds = 0;
}

int atoll_phase_to_json(cJSON *state, const atoll_phase *p, int skipped_since_sync, uint64_t taken, uint64_t skipped) {
  cJSON *o = cJSON_AddObjectToObject(state, "island_phase");
  return o && cJSON_AddNumberToObject(o, "taken", p->taken) && cJSON_AddNumberToObject(o, "seconds", p->seconds) &&
         cJSON_AddNumberToObject(o, "last_seconds", p->last) &&
         cJSON_AddNumberToObject(o, "skipped_since_sync", skipped_since_sync) &&
         cJSON_AddNumberToObject(o, "steps_taken", (double)taken) && cJSON_AddNumberToObject(o, "skipped", (double)skipped);
}

/* A whole number in [0, max], or -1. */
static double whole(const cJSON *o, const char *key, double max) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > max || v->valuedouble != floor(v->valuedouble))
    return -1;
  return v->valuedouble;
}

/* Seconds: a finite number in [0, 1e9], or -1. */
static double seconds(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !(v->valuedouble <= 1e9)) return -1;
  return v->valuedouble;
}

int atoll_phase_from_json(const cJSON *state, const char *dir, int step, int sync_every, atoll_phase *p,
                          int *skipped_since_sync, uint64_t *taken_all, uint64_t *skipped, atoll_err *err) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(state, "island_phase");
  if (!o) return 0; /* (a checkpoint of a run without a phase: one begins here) */
  int phase = step < sync_every ? step : sync_every;
  double taken = whole(o, "taken", phase), since = whole(o, "skipped_since_sync", phase), all = whole(o, "skipped", step);
  double took = whole(o, "steps_taken", step);
  double s = seconds(o, "seconds"), last = seconds(o, "last_seconds");
  if (!cJSON_IsObject(o) || taken < 0 || since < 0 || all < 0 || took < 0 || s < 0 || last < 0 || since > all ||
      taken + since > phase || took + all > step)
    return atoll_fail(err, "%s/state.json: island_phase must hold whole numbers taken, skipped_since_sync <= skipped "
                      "(taken + skipped_since_sync at most %d, a phase), steps_taken (steps_taken + skipped at most the "
                      "step %d) and seconds, last_seconds in [0, 1e9]", dir, phase, step);
  *p = (atoll_phase){(int)taken, s, last};
  *skipped_since_sync = (int)since;
  *skipped = (uint64_t)all;
  *taken_all = (uint64_t)took;
  return 0;
}

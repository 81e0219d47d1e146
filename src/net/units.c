/* The data units' table (units.h). */
#include "net/units.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXACT_MAX 9007199254740992.0 /* 2^53: the largest integer a JSON number holds exactly */

static void give_back(atoll_units *u, uint64_t unit) {
  if (u->nreturned < ATOLL_UNITS_RETURNED) u->returned[u->nreturned++] = unit; /* (never full: see take) */
}

static void drop(atoll_units *u, uint32_t island, int j) {
  atoll_unit_hold *h = u->held[island];
  memmove(h + j, h + j + 1, (size_t)(u->nheld[island] - j - 1) * sizeof *h);
  u->nheld[island]--;
}

/* The unit of island's phase (start, end]: the one it holds, or a returned one (oldest
 * first), or a fresh one. A fresh unit is taken only when none is returned, so returned
 * and held units together never exceed the holds' limit. (The caller checked that a
 * hold is free.) 1 when the table changed. */
static int take(atoll_units *u, uint32_t island, uint32_t start, uint32_t end, int started, uint64_t *unit, int *again) {
  atoll_unit_hold *h = u->held[island];
  for (int j = 0; j < u->nheld[island]; j++)
    if (h[j].start == start) {
      int changed = started && !h[j].started;
      h[j].started |= started;
      *unit = h[j].unit;
      return changed;
    }
  if (u->nreturned > 0) {
    *unit = u->returned[0];
    memmove(u->returned, u->returned + 1, (size_t)(u->nreturned - 1) * sizeof u->returned[0]);
    u->nreturned--;
    u->again++;
    *again = 1;
  } else {
    *unit = u->next++;
  }
  h[u->nheld[island]++] = (atoll_unit_hold){start, end, *unit, started};
  return 1;
}

static int holds(const atoll_units *u, uint32_t island, uint32_t start) {
  for (int j = 0; j < u->nheld[island]; j++)
    if (u->held[island][j].start == start) return 1;
  return 0;
}

/* A stale ask's answer for phase (start, end]: its unit when it is a past one, else the
 * unit a fresh ask would take next (nothing taken: its work is not kept). */
static uint64_t stale_unit(const atoll_units *u, uint32_t island, uint32_t start) {
  for (int j = 0; j < u->npast[island]; j++)
    if (u->past[island][j].start == start) return u->past[island][j].unit;
  return u->nreturned > 0 ? u->returned[0] : u->next;
}

/* Phases held before `start` that go back at an ask: never begun, or their work lost. */
static int goes_back(const atoll_unit_hold *h, uint32_t start, uint32_t lost_from) {
  return h->start < start && (!h->started || h->start >= lost_from);
}

int atoll_units_ask(atoll_units *u, uint32_t island, uint32_t start, uint32_t end, uint32_t next_start, uint32_t next_end,
                    uint32_t lost_from, uint64_t *unit, uint64_t *next_unit, int *again, char *why, size_t whysz) {
  *again = 0;
  *next_unit = 0;
  if (island >= ATOLL_UNITS_ISLANDS) {
    snprintf(why, whysz, "island %u: beyond the %d island slots", island, ATOLL_UNITS_ISLANDS);
    return -1;
  }
  int last = next_start == 0 && next_end == 0; /* the run's last phase: nothing ahead */
  if (!(start < end && (last || (end <= next_start && next_start < next_end)) && lost_from <= start)) {
    snprintf(why, whysz, "phases (%u, %u] and (%u, %u], lost from %u: not two phases in order", start, end, next_start,
             next_end, lost_from);
    return -1;
  }
  /* stale: a commit that included this island took the phase in; nothing held changes
   * (the next phase, when live, is asked ahead as usual) */
  int stale = end <= u->committed_to[island], stale_next = !last && next_end <= u->committed_to[island];
  int kept = 0; /* room first, so that a refused ask leaves the table as it was */
  for (int j = 0; j < u->nheld[island]; j++) kept += stale || !goes_back(&u->held[island][j], start, lost_from);
  int need = kept + (!stale && !holds(u, island, start)) + (!last && !stale_next && !holds(u, island, next_start));
  if (need > ATOLL_UNITS_HELD) {
    snprintf(why, whysz, "island %u holds %d phases' units already (the most)", island, ATOLL_UNITS_HELD);
    return -1;
  }
  int changed = 0;
  for (int j = 0; !stale && j < u->nheld[island];) { /* phases it jumped over or lost (a join) go back */
    if (goes_back(&u->held[island][j], start, lost_from)) {
      give_back(u, u->held[island][j].unit);
      drop(u, island, j);
      changed = 1;
    } else {
      j++;
    }
  }
  if (stale) *unit = stale_unit(u, island, start);
  else changed |= take(u, island, start, end, 1, unit, again);
  if (stale_next) *next_unit = stale_unit(u, island, next_start);
  else if (!last) changed |= take(u, island, next_start, next_end, 0, next_unit, again);
  return changed;
}

int atoll_units_committed(atoll_units *u, uint32_t island, uint32_t step) {
  if (island >= ATOLL_UNITS_ISLANDS) return 0;
  if (step > u->committed_to[island]) u->committed_to[island] = step;
  int n = 0;
  for (int j = 0; j < u->nheld[island];) {
    atoll_unit_hold *h = &u->held[island][j];
    if (h->started && h->end <= step) {
      atoll_unit_hold *p = u->past[island];
      if (u->npast[island] == ATOLL_UNITS_PAST) { /* forget the oldest */
        memmove(p, p + 1, (ATOLL_UNITS_PAST - 1) * sizeof *p);
        u->npast[island]--;
      }
      p[u->npast[island]++] = *h;
      drop(u, island, j);
      u->done++;
      n++;
    } else {
      j++;
    }
  }
  return n;
}

int atoll_units_release(atoll_units *u, uint32_t island) {
  if (island >= ATOLL_UNITS_ISLANDS) return 0;
  int n = u->nheld[island];
  for (int j = 0; j < n; j++) give_back(u, u->held[island][j].unit);
  u->nheld[island] = 0;
  return n;
}

/* ---------------------------------------------------------------- JSON --- */

static void add_holds(cJSON *arr, uint32_t island, const atoll_unit_hold *h, int n) {
  for (int j = 0; j < n; j++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "island", island);
    cJSON_AddNumberToObject(e, "start", h[j].start);
    cJSON_AddNumberToObject(e, "end", h[j].end);
    cJSON_AddNumberToObject(e, "unit", (double)h[j].unit);
    cJSON_AddBoolToObject(e, "started", h[j].started);
    cJSON_AddItemToArray(arr, e);
  }
}

cJSON *atoll_units_to_json(const atoll_units *u) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "next", (double)u->next);
  cJSON_AddNumberToObject(o, "done", (double)u->done);
  cJSON_AddNumberToObject(o, "again", (double)u->again);
  cJSON *r = cJSON_AddArrayToObject(o, "returned"), *held = cJSON_AddArrayToObject(o, "held");
  cJSON *past = cJSON_AddArrayToObject(o, "past"), *committed = cJSON_AddArrayToObject(o, "committed");
  for (int j = 0; j < u->nreturned; j++) cJSON_AddItemToArray(r, cJSON_CreateNumber((double)u->returned[j]));
  for (uint32_t i = 0; i < ATOLL_UNITS_ISLANDS; i++) {
    add_holds(held, i, u->held[i], u->nheld[i]);
    add_holds(past, i, u->past[i], u->npast[i]);
    if (!u->committed_to[i]) continue;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "island", i);
    cJSON_AddNumberToObject(e, "step", u->committed_to[i]);
    cJSON_AddItemToArray(committed, e);
  }
  return o;
}

static int number(const cJSON *o, const char *name, double max, uint64_t *out, const char *path, const char *where, char *why,
                  size_t whysz) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (!(x >= 0 && x <= max && x == floor(x))) {
    snprintf(why, whysz, "%s: units.%s%s must be an integer in [0, %.0f]", path, where, name, max);
    return -1;
  }
  *out = (uint64_t)x;
  return 0;
}

/* One entry of units.held or units.past (`name`), appended to its island's list of at
 * most `most` (a phase at most once per island). */
static int parse_hold(const cJSON *e, const char *path, const char *name, int k, atoll_units *u, atoll_unit_hold list[][ATOLL_UNITS_HELD],
                      int *count, int most, char *why, size_t whysz) {
  char where[40];
  snprintf(where, sizeof where, "%s[%d].", name, k);
  uint64_t island, start, end, unit;
  const cJSON *st = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "started") : NULL;
  if (!cJSON_IsObject(e) || !cJSON_IsBool(st)) {
    snprintf(why, whysz, "%s: units.%s must be an object of island, start, end, unit and started (true or false)", path, where);
    return -1;
  }
  if (number(e, "island", ATOLL_UNITS_ISLANDS - 1, &island, path, where, why, whysz) ||
      number(e, "start", UINT32_MAX, &start, path, where, why, whysz) ||
      number(e, "end", UINT32_MAX, &end, path, where, why, whysz) ||
      number(e, "unit", EXACT_MAX, &unit, path, where, why, whysz))
    return -1;
  int dup = 0;
  for (int j = 0; j < count[island]; j++) dup |= list[island][j].start == start;
  if (start >= end || unit >= u->next || count[island] >= most || dup) {
    snprintf(why, whysz, "%s: units.%s: a phase (start < end) of a unit below units.next, at most %d per island, each once", path,
             where, most);
    return -1;
  }
  list[island][count[island]++] = (atoll_unit_hold){(uint32_t)start, (uint32_t)end, unit, cJSON_IsTrue(st)};
  return 0;
}

static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Every unit in one place at most (returned, held by one island's phase, or past), and
 * every unit handed out done, returned or held. */
static int books_balance(const atoll_units *u, const char *path, char *why, size_t whysz) {
  static uint64_t all[ATOLL_UNITS_RETURNED * 2 + ATOLL_UNITS_ISLANDS * ATOLL_UNITS_PAST];
  size_t n = 0, held = 0;
  for (int j = 0; j < u->nreturned; j++) all[n++] = u->returned[j];
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++) {
    for (int j = 0; j < u->nheld[i]; j++) all[n++] = u->held[i][j].unit;
    for (int j = 0; j < u->npast[i]; j++) all[n++] = u->past[i][j].unit;
    held += (size_t)u->nheld[i];
  }
  qsort(all, n, sizeof all[0], by_value);
  for (size_t j = 1; j < n; j++)
    if (all[j] == all[j - 1]) {
      snprintf(why, whysz, "%s: units: unit %llu is in two places (returned, held or past)", path, (unsigned long long)all[j]);
      return -1;
    }
  if (u->done + (uint64_t)u->nreturned + held != u->next) {
    snprintf(why, whysz, "%s: units: done (%llu) + returned (%d) + held (%zu) must be next (%llu), the units handed out", path,
             (unsigned long long)u->done, u->nreturned, held, (unsigned long long)u->next);
    return -1;
  }
  return 0;
}

int atoll_units_parse(const cJSON *o, const char *path, atoll_units *u, char *why, size_t whysz) {
  memset(u, 0, sizeof *u);
  if (!cJSON_IsObject(o)) {
    snprintf(why, whysz, "%s: units must be an object", path);
    return -1;
  }
  if (number(o, "next", EXACT_MAX, &u->next, path, "", why, whysz) ||
      number(o, "done", EXACT_MAX, &u->done, path, "", why, whysz) ||
      number(o, "again", EXACT_MAX, &u->again, path, "", why, whysz))
    return -1;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "returned"), *held = cJSON_GetObjectItemCaseSensitive(o, "held");
  const cJSON *past = cJSON_GetObjectItemCaseSensitive(o, "past"), *committed = cJSON_GetObjectItemCaseSensitive(o, "committed");
  /* (past and committed may be missing: a file of atoll before them) */
  if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) > ATOLL_UNITS_RETURNED || !cJSON_IsArray(held) ||
      cJSON_GetArraySize(held) > ATOLL_UNITS_RETURNED || (past && !cJSON_IsArray(past)) ||
      (committed && !cJSON_IsArray(committed)) || cJSON_GetArraySize(past) > ATOLL_UNITS_ISLANDS * ATOLL_UNITS_PAST ||
      cJSON_GetArraySize(committed) > ATOLL_UNITS_ISLANDS) {
    snprintf(why, whysz, "%s: units.returned, .held, .past and .committed must be arrays (of at most %d, %d, %d, %d)", path,
             ATOLL_UNITS_RETURNED, ATOLL_UNITS_RETURNED, ATOLL_UNITS_ISLANDS * ATOLL_UNITS_PAST, ATOLL_UNITS_ISLANDS);
    return -1;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, r) {
    double x = cJSON_IsNumber(e) ? e->valuedouble : NAN;
    if (!(x >= 0 && x < (double)u->next && x == floor(x))) {
      snprintf(why, whysz, "%s: units.returned[%d] must be a unit below units.next", path, u->nreturned);
      return -1;
    }
    u->returned[u->nreturned++] = (uint64_t)x;
  }
  int k = 0;
  cJSON_ArrayForEach(e, held) {
    if (parse_hold(e, path, "held", k++, u, u->held, u->nheld, ATOLL_UNITS_HELD, why, whysz)) return -1;
  }
  if (u->nreturned + k > ATOLL_UNITS_RETURNED) {
    snprintf(why, whysz, "%s: units: more than %d units returned and held", path, ATOLL_UNITS_RETURNED);
    return -1;
  }
  static atoll_unit_hold past_list[ATOLL_UNITS_ISLANDS][ATOLL_UNITS_HELD]; /* (read into rows of the holds' width) */
  k = 0;
  cJSON_ArrayForEach(e, past) {
    if (parse_hold(e, path, "past", k++, u, past_list, u->npast, ATOLL_UNITS_PAST, why, whysz)) return -1;
  }
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++) memcpy(u->past[i], past_list[i], sizeof u->past[i]);
  k = 0;
  cJSON_ArrayForEach(e, committed) {
    char where[40];
    snprintf(where, sizeof where, "committed[%d].", k++);
    uint64_t island, step = 1; /* (1: not read; number() writes it only when valid) */
    if (!cJSON_IsObject(e) || number(e, "island", ATOLL_UNITS_ISLANDS - 1, &island, path, where, why, whysz) ||
        number(e, "step", UINT32_MAX, &step, path, where, why, whysz) || step == 0) {
      if (cJSON_IsObject(e) && step == 0) snprintf(why, whysz, "%s: units.%sstep must be a commit's step (at least 1)", path, where);
      if (!cJSON_IsObject(e)) snprintf(why, whysz, "%s: units.%s must be an object of island and step", path, where);
      return -1;
    }
    if (u->committed_to[island]) {
      snprintf(why, whysz, "%s: units.%s: island %llu is listed twice", path, where, (unsigned long long)island);
      return -1;
    }
    u->committed_to[island] = (uint32_t)step;
  }
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++)
    for (int j = 0; j < u->nheld[i]; j++) /* (a commit with the island marks its begun phases done) */
      if (u->held[i][j].started && u->held[i][j].end <= u->committed_to[i]) {
        snprintf(why, whysz, "%s: units.held: island %d's begun phase (%u, %u] ends at or before its last commit (step %u): it would be done",
                 path, i, u->held[i][j].start, u->held[i][j].end, u->committed_to[i]);
        return -1;
      }
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++)
    for (int j = 0; j < u->npast[i]; j++)
      if (u->past[i][j].end > u->committed_to[i]) {
        snprintf(why, whysz, "%s: units.past: island %d's phase (%u, %u] ends after its last commit (step %u in units.committed)",
                 path, i, u->past[i][j].start, u->past[i][j].end, u->committed_to[i]);
        return -1;
      }
  return books_balance(u, path, why, whysz);
}

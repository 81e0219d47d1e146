/* The data units' table (units.h). */
#include "net/units.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
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
 * and held units together never exceed the holds' limit. */
static int take(atoll_units *u, uint32_t island, uint32_t start, uint32_t end, int started, uint64_t *unit, int *again,
                char *why, size_t whysz) {
  atoll_unit_hold *h = u->held[island];
  for (int j = 0; j < u->nheld[island]; j++)
    if (h[j].start == start) {
      h[j].started |= started;
      *unit = h[j].unit;
      return 0;
    }
  if (u->nheld[island] >= ATOLL_UNITS_HELD) {
    snprintf(why, whysz, "island %u holds %d phases' units already (the most)", island, ATOLL_UNITS_HELD);
    return -1;
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
  return 0;
}

int atoll_units_ask(atoll_units *u, uint32_t island, uint32_t start, uint32_t end, uint32_t next_start, uint32_t next_end,
                    uint32_t lost_from, uint64_t *unit, uint64_t *next_unit, int *again, char *why, size_t whysz) {
  *again = 0;
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
  for (int j = 0; j < u->nheld[island];) { /* phases it jumped over or lost (a join) go back */
    atoll_unit_hold *h = &u->held[island][j];
    if (h->start < start && (!h->started || h->start >= lost_from)) {
      give_back(u, h->unit);
      drop(u, island, j);
    } else {
      j++;
    }
  }
  if (take(u, island, start, end, 1, unit, again, why, whysz)) return -1;
  *next_unit = 0;
  return last ? 0 : take(u, island, next_start, next_end, 0, next_unit, again, why, whysz);
}

int atoll_units_committed(atoll_units *u, uint32_t island, uint32_t step) {
  if (island >= ATOLL_UNITS_ISLANDS) return 0;
  int n = 0;
  for (int j = 0; j < u->nheld[island];) {
    atoll_unit_hold *h = &u->held[island][j];
    if (h->started && h->end <= step) {
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

cJSON *atoll_units_to_json(const atoll_units *u) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "next", (double)u->next);
  cJSON_AddNumberToObject(o, "done", (double)u->done);
  cJSON_AddNumberToObject(o, "again", (double)u->again);
  cJSON *r = cJSON_AddArrayToObject(o, "returned"), *held = cJSON_AddArrayToObject(o, "held");
  for (int j = 0; j < u->nreturned; j++) cJSON_AddItemToArray(r, cJSON_CreateNumber((double)u->returned[j]));
  for (uint32_t i = 0; i < ATOLL_UNITS_ISLANDS; i++)
    for (int j = 0; j < u->nheld[i]; j++) {
      const atoll_unit_hold *h = &u->held[i][j];
      cJSON *e = cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "island", i);
      cJSON_AddNumberToObject(e, "start", h->start);
      cJSON_AddNumberToObject(e, "end", h->end);
      cJSON_AddNumberToObject(e, "unit", (double)h->unit);
      cJSON_AddBoolToObject(e, "started", h->started);
      cJSON_AddItemToArray(held, e);
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
  if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) > ATOLL_UNITS_RETURNED || !cJSON_IsArray(held) ||
      cJSON_GetArraySize(held) > ATOLL_UNITS_RETURNED) {
    snprintf(why, whysz, "%s: units.returned and units.held must be arrays of at most %d", path, ATOLL_UNITS_RETURNED);
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
    char where[32];
    snprintf(where, sizeof where, "held[%d].", k++);
    uint64_t island, start, end, unit;
    const cJSON *st = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "started") : NULL;
    if (!cJSON_IsObject(e) || !cJSON_IsBool(st)) {
      snprintf(why, whysz, "%s: units.%s must be an object of island, start, end, unit and started (true or false)", path,
               where);
      return -1;
    }
    if (number(e, "island", ATOLL_UNITS_ISLANDS - 1, &island, path, where, why, whysz) ||
        number(e, "start", UINT32_MAX, &start, path, where, why, whysz) ||
        number(e, "end", UINT32_MAX, &end, path, where, why, whysz) ||
        number(e, "unit", EXACT_MAX, &unit, path, where, why, whysz))
      return -1;
    if (start >= end || unit >= u->next || u->nheld[island] >= ATOLL_UNITS_HELD ||
        u->nreturned + k > ATOLL_UNITS_RETURNED) {
      snprintf(why, whysz, "%s: units.%s: a phase (start < end) of a unit below units.next, at most %d per island", path,
               where, ATOLL_UNITS_HELD);
      return -1;
    }
    u->held[island][u->nheld[island]++] = (atoll_unit_hold){(uint32_t)start, (uint32_t)end, unit, cJSON_IsTrue(st)};
  }
  return 0;
}

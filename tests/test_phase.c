/* An island's inner phase in tokens or seconds (src/train/phase.h): the rule that
 * decides which steps a phase takes, by hand, and state.json's island_phase read back
 * exactly and refused, in one line naming the file, when any field is out of range. */
#include "check.h"
#include "train/phase.h"

#include <string.h>

/* The steps a phase of at most h steps takes under rule r when every step costs
 * `seconds`. */
static int steps_taken(const atoll_phase_rule *r, int h, double seconds) {
  atoll_phase p = {0};
  int taken = 0;
  for (int i = 0; i < h; i++)
    if (atoll_phase_takes(r, &p)) {
      atoll_phase_took(&p, seconds);
      taken++;
    }
  return taken;
}

static void test_rule(void) {
  atoll_phase_rule off = {0, 0, 64};
  CHECK(!atoll_phase_on(&off));
  CHECK(steps_taken(&off, 10, 1.0) == 10);
  /* tokens: (taken + 1) x 64 within 200: 3 steps */
  atoll_phase_rule tokens = {200, 0, 64};
  CHECK(atoll_phase_on(&tokens));
  CHECK(steps_taken(&tokens, 10, 1.0) == 3);
  CHECK(steps_taken(&tokens, 2, 1.0) == 2); /* never more than the phase's steps */
  atoll_phase_rule exact = {192, 0, 64};
  CHECK(steps_taken(&exact, 10, 1.0) == 3); /* the budget reached exactly is in */
  atoll_phase_rule tiny = {1, 0, 64};
  CHECK(steps_taken(&tiny, 10, 1.0) == 1); /* every phase takes its first step */
  /* seconds: so far + the last step's within 1.0: 0.3 x 3 = 0.9, 0.9 + 0.3 > 1 */
  atoll_phase_rule secs = {0, 1.0, 64};
  CHECK(steps_taken(&secs, 10, 0.3) == 3);
  CHECK(steps_taken(&secs, 10, 5.0) == 1);
  CHECK(steps_taken(&secs, 10, 0.25) == 4); /* 0.75 + 0.25 = 1.0: within */
  /* a new phase keeps the last step's time as its estimate, but counts anew */
  atoll_phase p = {0};
  atoll_phase_took(&p, 0.4);
  atoll_phase_took(&p, 0.4);
  CHECK(!atoll_phase_takes(&secs, &p)); /* 0.8 + 0.4 > 1 */
  atoll_phase_begin(&p);
  CHECK(p.taken == 0 && p.seconds == 0 && p.last == 0.4);
  CHECK(atoll_phase_takes(&secs, &p));
}

/* island_phase from a JSON text: 0 or -1, with err */
static int read(const char *text, int step, atoll_phase *p, int *since, uint64_t *taken, uint64_t *skipped, atoll_err *err) {
  cJSON *state = cJSON_Parse(text);
  CHECK(state != NULL);
  int rc = atoll_phase_from_json(state, "CK", step, 4, p, since, taken, skipped, err); /* phases of 4 steps */
  cJSON_Delete(state);
  return rc;
}

static void test_json(void) {
  atoll_phase p = {2, 0.75, 0.25}, q = {0};
  cJSON *state = cJSON_CreateObject();
  CHECK(atoll_phase_to_json(state, &p, 1, 5, 3));
  int since = -1;
  uint64_t taken = 0, skipped = 0;
  atoll_err err = {0};
  CHECK(atoll_phase_from_json(state, "CK", 8, 4, &q, &since, &taken, &skipped, &err) == 0);
  CHECK(q.taken == 2 && q.seconds == 0.75 && q.last == 0.25 && since == 1 && taken == 5 && skipped == 3);
  cJSON_Delete(state);
  /* absent: nothing read, nothing changed */
  q = (atoll_phase){7, 1, 1};
  CHECK(read("{}", 8, &q, &since, &taken, &skipped, &err) == 0 && q.taken == 7);
  const char *bad[] = {
      "{\"island_phase\": 3}",
      "{\"island_phase\": {}}",
      "{\"island_phase\": {\"taken\": -1, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 0, \"steps_taken\": 0, \"skipped\": 0}}",
      "{\"island_phase\": {\"taken\": 1.5, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 0, \"steps_taken\": 0, \"skipped\": 0}}",
      "{\"island_phase\": {\"taken\": 9, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 0, \"steps_taken\": 0, \"skipped\": 0}}",
      "{\"island_phase\": {\"taken\": 1, \"seconds\": -1, \"last_seconds\": 0, \"skipped_since_sync\": 0, \"steps_taken\": 0, \"skipped\": 0}}",
      "{\"island_phase\": {\"taken\": 1, \"seconds\": 1e300, \"last_seconds\": 0, \"skipped_since_sync\": 0, \"steps_taken\": 0, \"skipped\": 0}}",
      "{\"island_phase\": {\"taken\": 1, \"seconds\": 0, \"last_seconds\": \"x\", \"skipped_since_sync\": 0, \"steps_taken\": 0, \"skipped\": 0}}",
      "{\"island_phase\": {\"taken\": 1, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 2, \"steps_taken\": 0, \"skipped\": 1}}",
      "{\"island_phase\": {\"taken\": 5, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 4, \"steps_taken\": 0, \"skipped\": 4}}",
      "{\"island_phase\": {\"taken\": 1, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 0, \"steps_taken\": 6, \"skipped\": 3}}",
      "{\"island_phase\": {\"taken\": 1, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 0, \"skipped\": 0}}",
      /* more than a phase of 4 steps since the sync, though within the step */
      "{\"island_phase\": {\"taken\": 0, \"seconds\": 0, \"last_seconds\": 0, \"skipped_since_sync\": 5, \"steps_taken\": 0, \"skipped\": 5}}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err.msg[0] = 0;
    CHECK(read(bad[i], 8, &q, &since, &taken, &skipped, &err) == -1);
    CHECK(strstr(err.msg, "CK/state.json: island_phase") != NULL && strchr(err.msg, '\n') == NULL);
  }
}

int main(void) {
  test_rule();
  test_json();
  if (check_failures == 0) printf("test_phase: ok\n");
  return check_failures;
}

/* The data units' table of an open run (src/net/units.c): fresh units in order, a
 * phase's unit the same when asked again, phases jumped over or lost by a join handed
 * out again before any fresh unit, a commit's phases done, a leaving island's units
 * back, stale asks (a phase a commit took in) that change nothing, a refused ask that
 * leaves the table as it was, the limits, and the state file's "units" read back and
 * refused when hostile (a unit in two places, books that do not balance). */
#include "check.h"
#include "net/units.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_units u;
static char why[300];

static uint64_t ask(uint32_t island, uint32_t start, uint32_t lost, uint64_t *next, int *again) {
  uint64_t unit = 99;
  CHECK(atoll_units_ask(&u, island, start, start + 3, start + 3, start + 6, lost, &unit, next, again, why, sizeof why) >= 0);
  return unit;
}

static void refused_json(const char *text, const char *want) {
  cJSON *o = cJSON_Parse(text);
  CHECK(o != NULL);
  static atoll_units v;
  CHECK(atoll_units_parse(o, "s.json", &v, why, sizeof why) == -1);
  if (!strstr(why, want)) fprintf(stderr, "expected '%s' in '%s'\n", want, why);
  CHECK(strstr(why, want) != NULL);
  CHECK(strchr(why, '\n') == NULL);
  cJSON_Delete(o);
}

int main(void) {
  uint64_t next;
  int again;
  /* fresh units in order; the same phase asked again (another rank) gets the same */
  CHECK(ask(0, 0, 0, &next, &again) == 0 && next == 1 && !again);
  CHECK(ask(0, 0, 0, &next, &again) == 0 && next == 1 && !again);
  CHECK(ask(1, 0, 0, &next, &again) == 2 && next == 3);
  CHECK(u.next == 4 && u.nheld[0] == 2 && u.nheld[1] == 2);
  /* island 0 begins its next phase: the unit asked ahead is now started */
  CHECK(ask(0, 3, 3, &next, &again) == 1 && next == 4);
  /* a commit of step 3 with island 0: its phase (0, 3] is done; (3, 6] is not ended */
  CHECK(atoll_units_committed(&u, 0, 3) == 1 && u.done == 1 && u.nheld[0] == 2);
  /* island 1 jumps (joins) from phase (0, 3] to (9, 12], having lost the work from step
   * 0 on: (0, 3] (begun) and (3, 6] (only asked ahead) go back, and island 1 takes them
   * first, before a fresh unit */
  CHECK(ask(1, 9, 0, &next, &again) == 2 && next == 3 && again);
  CHECK(u.again == 2 && u.nreturned == 0 && u.next == 5);
  /* a late contribution: island 0 began (3, 6], missed the exchange, goes on to (6, 9]
   * and keeps its work (lost_from 6): (3, 6] stays held until a commit takes it in */
  CHECK(ask(0, 6, 6, &next, &again) == 4 && next == 5);
  CHECK(u.nheld[0] == 3);
  CHECK(atoll_units_committed(&u, 0, 9) == 2 && u.done == 3 && u.nheld[0] == 1);
  /* island 1 leaves: its units go back, oldest first, and go out again before fresh ones */
  CHECK(atoll_units_release(&u, 1) == 2 && u.nreturned == 2 && u.returned[0] == 2 && u.returned[1] == 3);
  CHECK(ask(2, 0, 0, &next, &again) == 2 && next == 3 && again);
  CHECK(ask(2, 3, 3, &next, &again) == 3 && next == 6);
  /* the run's last phase asks nothing ahead */
  uint64_t unit;
  CHECK(atoll_units_ask(&u, 2, 6, 8, 0, 0, 6, &unit, &next, &again, why, sizeof why) == 1 && unit == 6 && next == 0);
  /* asked again (a resent question): nothing changes */
  CHECK(atoll_units_ask(&u, 2, 6, 8, 0, 0, 6, &unit, &next, &again, why, sizeof why) == 0 && unit == 6);
  /* refused: phases out of order, lost_from after start, an island beyond the slots,
   * more than ATOLL_UNITS_HELD phases held */
  CHECK(atoll_units_ask(&u, 3, 6, 3, 9, 12, 6, &unit, &next, &again, why, sizeof why) == -1 && strstr(why, "in order"));
  CHECK(atoll_units_ask(&u, 3, 6, 9, 9, 12, 7, &unit, &next, &again, why, sizeof why) == -1);
  CHECK(atoll_units_ask(&u, ATOLL_UNITS_ISLANDS, 0, 3, 3, 6, 0, &unit, &next, &again, why, sizeof why) == -1);
  int rc = 0;
  static atoll_units before;
  for (uint32_t s = 0; rc >= 0 && s < 100; s += 6) { /* began, never committed: held */
    before = u;
    rc = atoll_units_ask(&u, 4, s, s + 3, s + 3, s + 6, s, &unit, &next, &again, why, sizeof why);
  }
  CHECK(rc == -1 && strstr(why, "holds") != NULL && u.nheld[4] == ATOLL_UNITS_HELD);
  CHECK(memcmp(&before, &u, sizeof u) == 0); /* refused: the table as it was (nothing given back, nothing taken) */

  /* stale asks: island 5 trains (0, 3] and (3, 6]; a commit of step 6 takes both in.
   * The question for (0, 3], repeated late, gets the same unit and changes nothing (it
   * did take a fresh unit for a phase the next commit then called done, untrained) */
  uint64_t u0 = ask(5, 0, 0, &next, &again), u1 = next;
  CHECK(ask(5, 3, 3, &next, &again) == u1);
  uint64_t u2 = next;
  CHECK(atoll_units_committed(&u, 5, 6) == 2 && u.committed_to[5] == 6);
  before = u;
  CHECK(atoll_units_ask(&u, 5, 0, 3, 3, 6, 0, &unit, &next, &again, why, sizeof why) == 0 && unit == u0 && next == u1);
  CHECK(memcmp(&before, &u, sizeof u) == 0);
  /* a stale phase whose next is live (a process restarted from an older checkpoint):
   * the next one's unit is the one held for it */
  CHECK(atoll_units_ask(&u, 5, 3, 6, 6, 9, 3, &unit, &next, &again, why, sizeof why) == 0 && unit == u1 && next == u2);
  CHECK(memcmp(&before, &u, sizeof u) == 0);
  /* three more phases done: (0, 3] is no longer among the past ones; a stale ask for it
   * is answered with the unit a fresh ask would get, and nothing is taken */
  for (uint32_t s = 6; s < 15; s += 3) ask(5, s, s, &next, &again);
  CHECK(atoll_units_committed(&u, 5, 15) == 3 && u.npast[5] == ATOLL_UNITS_PAST);
  before = u;
  CHECK(atoll_units_ask(&u, 5, 0, 3, 3, 6, 0, &unit, &next, &again, why, sizeof why) == 0 && unit == u.next);
  CHECK(memcmp(&before, &u, sizeof u) == 0);
  /* a jump back past the last commit does not give back what is held after it */
  CHECK(u.nheld[5] == 1 && u.held[5][0].start == 15);
  /* every unit handed out is done, returned or held: none lost from the books */
  uint64_t held = 0;
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++) held += (uint64_t)u.nheld[i];
  CHECK(u.done + (uint64_t)u.nreturned + held == u.next);
  /* a member that applied an exchange and left: released after the commit marked its
   * phase done, only what the commit did not take in goes back */
  ask(6, 0, 0, &next, &again);
  CHECK(atoll_units_committed(&u, 6, 3) == 1 && atoll_units_release(&u, 6) == 1);
  CHECK(u.returned[u.nreturned - 1] == next);

  /* the state file's units: written and read back the same */
  cJSON *o = atoll_units_to_json(&u);
  static atoll_units back;
  CHECK(atoll_units_parse(o, "s.json", &back, why, sizeof why) == 0);
  CHECK(back.next == u.next && back.done == u.done && back.again == u.again && back.nreturned == u.nreturned);
  CHECK(memcmp(back.returned, u.returned, sizeof u.returned[0] * (size_t)u.nreturned) == 0);
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++) {
    CHECK(back.nheld[i] == u.nheld[i]);
    for (int j = 0; j < u.nheld[i]; j++)
      CHECK(back.held[i][j].start == u.held[i][j].start && back.held[i][j].end == u.held[i][j].end &&
            back.held[i][j].unit == u.held[i][j].unit && back.held[i][j].started == u.held[i][j].started);
    CHECK(back.npast[i] == u.npast[i] && back.committed_to[i] == u.committed_to[i]);
    for (int j = 0; j < u.npast[i]; j++) CHECK(back.past[i][j].start == u.past[i][j].start && back.past[i][j].unit == u.past[i][j].unit);
  }
  /* read back, the table answers as before: island 5's stale ask gets its past unit */
  CHECK(atoll_units_ask(&back, 5, 12, 15, 15, 18, 12, &unit, &next, &again, why, sizeof why) == 0 && unit == u.past[5][1].unit);
  cJSON_Delete(o);
  refused_json("[]", "units must be an object");
  refused_json("{\"next\": -1, \"done\": 0, \"again\": 0, \"returned\": [], \"held\": []}", "units.next must be an integer");
  refused_json("{\"next\": 1.5, \"done\": 0, \"again\": 0, \"returned\": [], \"held\": []}", "units.next must be an integer");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [2], \"held\": []}", "units.returned[0]");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": {}, \"held\": []}", "must be arrays");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [], \"held\": [{\"island\": 0, \"start\": 3, "
               "\"end\": 3, \"unit\": 1, \"started\": true}]}",
               "held[0].: a phase");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [], \"held\": [{\"island\": 5000, \"start\": 0, "
               "\"end\": 3, \"unit\": 1, \"started\": true}]}",
               "held[0].island");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [], \"held\": [{\"island\": 0, \"start\": 0, "
               "\"end\": 3, \"unit\": 1, \"started\": 1}]}",
               "started (true or false)");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [], \"held\": [7]}", "must be an object");
  /* a unit in two places; a phase held twice; books that do not balance; a past phase
   * after the island's last commit */
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [1, 1], \"held\": []}", "unit 1 is in two places");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [1], \"held\": [{\"island\": 0, \"start\": 0, "
               "\"end\": 3, \"unit\": 1, \"started\": true}]}",
               "unit 1 is in two places");
  refused_json("{\"next\": 2, \"done\": 0, \"again\": 0, \"returned\": [], \"held\": [{\"island\": 0, \"start\": 0, "
               "\"end\": 3, \"unit\": 0, \"started\": true}, {\"island\": 0, \"start\": 0, \"end\": 3, \"unit\": 1, "
               "\"started\": true}]}",
               "each once");
  refused_json("{\"next\": 3, \"done\": 0, \"again\": 0, \"returned\": [0], \"held\": []}", "must be next (3)");
  refused_json("{\"next\": 1, \"done\": 1, \"again\": 0, \"returned\": [], \"held\": [], \"committed\": [], "
               "\"past\": [{\"island\": 0, \"start\": 0, \"end\": 3, \"unit\": 0, \"started\": true}]}",
               "ends after its last commit");
  refused_json("{\"next\": 1, \"done\": 1, \"again\": 0, \"returned\": [], \"held\": [], "
               "\"committed\": [{\"island\": 0, \"step\": 3}, {\"island\": 0, \"step\": 6}]}",
               "listed twice");
  refused_json("{\"next\": 1, \"done\": 1, \"again\": 0, \"returned\": [], \"held\": [], \"committed\": [4]}",
               "committed[0]. must be an object");
  refused_json("{\"next\": 1, \"done\": 1, \"again\": 0, \"returned\": [], \"held\": [], "
               "\"committed\": [{\"island\": 0, \"step\": 0}, {\"island\": 0, \"step\": 0}]}",
               "step must be a commit's step");
  /* a begun phase held past the island's last commit: that commit would have done it */
  refused_json("{\"next\": 2, \"done\": 1, \"again\": 0, \"returned\": [], \"held\": [{\"island\": 0, \"start\": 0, "
               "\"end\": 3, \"unit\": 1, \"started\": true}], \"committed\": [{\"island\": 0, \"step\": 3}]}",
               "it would be done");
  return check_failures ? 1 : 0;
}

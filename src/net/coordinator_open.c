/* An open run (coordinator --open 1; docs/islands.md, "Open membership"): an island
 * needs no slot of its own. Any key in allowed/ (read again every 2 s, so a machine
 * whose key is copied there can join while the run goes on) gets a slot at its first
 * ASK, kept in the state file, so that the same key has the same slot after a restart
 * of either side. The training data goes out in units (units.h): an island asks for
 * the unit of each phase as it begins it, and for the next one ahead. */
#include "net/coordinator_int.h"

#include <stdio.h>
#include <string.h>

int atoll_coord_slot_of(const coord *c, const char *keyz) {
  for (int i = 0; i < c->nslots; i++)
    if (strcmp(c->slots[i], keyz) == 0) return i;
  return -1;
}

int atoll_coord_open_slot(coord *c, const char *keyz) {
  int slot = atoll_coord_slot_of(c, keyz);
  if (slot >= 0) return slot;
  if (c->nslots >= MAX_MEMBERS) return -1;
  snprintf(c->slots[c->nslots], sizeof c->slots[0], "%s", keyz);
  fprintf(stderr, "coordinator: key %.8s... takes island slot %d (open run)\n", keyz, c->nslots);
  c->nslots++;
  atoll_coord_save_state(c);
  return c->nslots - 1;
}

/* Phases of this run: (start, end] begins at a multiple of the inner phase and ends one
 * phase later or at --steps; the next is the one after it, none after the last. */
static int run_phases(const coord *c, const atoll_wire_units *q, char *why, size_t whysz) {
  uint32_t H = (uint32_t)c->cfg->phase, steps = (uint32_t)c->cfg->steps;
  if (H == 0 || steps == 0) return 0; /* (not known: a test's coordinator) */
  uint32_t end = q->start + H < steps ? q->start + H : steps;
  uint32_t next_end = end + H < steps ? end + H : steps;
  int ok = q->start % H == 0 && q->start < steps && q->end == end &&
           (end == steps ? q->next_start == 0 && q->next_end == 0 : q->next_start == end && q->next_end == next_end);
  if (!ok)
    snprintf(why, whysz, "phases (%u, %u] and (%u, %u] are not this run's (an inner phase of %u steps, --steps %u): does the island set its own --sync-every or --steps?",
             q->start, q->end, q->next_start, q->next_end, H, steps);
  return ok ? 0 : -1;
}

static void refuse_units(coord *c, const route *from, const char *keyz, const char *who, const char *why) {
  char text[400];
  snprintf(text, sizeof text, "UNITS: %s", why);
  if (atoll_coord_say(&c->refused_units, keyz)) fprintf(stderr, "coordinator: refused %s from %s\n", text, who);
  atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
}

void atoll_coord_on_units(coord *c, const route *from, const char *keyz, const char *who, const atoll_wire_units *q) {
  char why[300];
  int slot = atoll_coord_slot_of(c, keyz);
  if (!c->cfg->open || slot < 0) {
    refuse_units(c, from, keyz, who,
                 c->cfg->open ? "this key has no island slot (it never asked: ASK first)" : "this coordinator's run is not open (--open 1)");
    return;
  }
  if (run_phases(c, q, why, sizeof why)) {
    refuse_units(c, from, keyz, who, why);
    return;
  }
  atoll_units *u = &c->units;
  uint32_t starts[2] = {q->start, q->next_start}, ends[2] = {q->end, q->next_end};
  int taken[2]; /* a unit newly handed out for the phase: not held, not one a commit took in already */
  for (int k = 0; k < 2; k++) {
    taken[k] = ends[k] != 0 && ends[k] > u->committed_to[slot];
    for (int j = 0; j < u->nheld[slot]; j++) taken[k] &= u->held[slot][j].start != starts[k];
  }
  uint64_t next_before = u->next;
  int again;
  atoll_wire_msg a = {.type = ATOLL_WIRE_UNIT};
  a.u.units = *q;
  int changed = atoll_units_ask(u, (uint32_t)slot, q->start, q->end, q->next_start, q->next_end, q->lost_from, &a.u.units.unit,
                                &a.u.units.next_unit, &again, why, sizeof why);
  if (changed < 0) {
    refuse_units(c, from, keyz, who, why);
    return;
  }
  uint64_t units[2] = {a.u.units.unit, a.u.units.next_unit};
  for (int k = 0; k < 2; k++)
    if (taken[k])
      fprintf(stderr, "coordinator: island %d takes unit %llu for steps (%u, %u]%s\n", slot, (unsigned long long)units[k],
              starts[k], ends[k], units[k] < next_before ? " (again: its island left, or jumped past it, before a commit)" : "");
  if (changed) atoll_coord_save_state(c);
  c->slot_heard[slot] = atoll_net_now();
  atoll_coord_send_to(c, from, &a);
}

void atoll_coord_units_committed(coord *c, uint32_t island, uint32_t step) {
  if (c->cfg->open) atoll_units_committed(&c->units, island, step);
}

void atoll_coord_units_left(coord *c, uint32_t island) {
  if (!c->cfg->open) return;
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].island == island) return; /* a rank of it is still here */
  for (int j = 0; j < c->cq.n; j++)
    if (c->cq.island[j] == island) return; /* it applied the exchange in commit: the commit marks its phase
                                              done first, then gives back the rest (atoll_coord_try_commit) */
  int n = atoll_units_release(&c->units, island);
  if (n) fprintf(stderr, "coordinator: island %u left: the units of its %d uncommitted phase(s) go out again first\n", island, n);
}

/* An island that holds units and has not been heard for --island-timeout is gone, though
 * it never left as a member: it died while this coordinator was down (a restarted one
 * knows it only by the state file), or after a stalled exchange dropped it. */
static void expire_holders(coord *c, double now) {
  for (int k = 0; k < c->nslots; k++) {
    if (!c->units.nheld[k]) continue;
    int member = 0;
    for (int i = 0; i < MAX_MEMBERS && !member; i++) member = c->m[i].used && c->m[i].island == (uint32_t)k;
    for (int j = 0; j < c->cq.n && !member; j++) member = c->cq.island[j] == (uint32_t)k; /* (its commit decides) */
    double heard = c->slot_heard[k] > c->started ? c->slot_heard[k] : c->started;
    if (member) c->slot_heard[k] = now;
    else if (now - heard > c->cfg->island_timeout) {
      int n = atoll_units_release(&c->units, (uint32_t)k);
      fprintf(stderr, "coordinator: island %d is not here (silent for %.0f s): the units of its %d uncommitted phase(s) go out again first\n",
              k, now - heard, n);
      atoll_coord_save_state(c);
    }
  }
}

void atoll_coord_reread_allowed(coord *c) {
  double now = atoll_net_now();
  if (!c->cfg->open || now - c->allowed_read < 2.0) return;
  c->allowed_read = now;
  expire_holders(c, now);
  int before = atoll_zap_count(c->zap), bad = 0;
  atoll_err err = {{0}};
  int rc = atoll_zap_allow_dir(c->zap, c->allowed, &bad, &err);
  char said[sizeof c->allowed_said] = ""; /* (the same trouble is said once, not every 2 s) */
  if (rc < 0 || bad) snprintf(said, sizeof said, "%d %s", bad, err.msg); /* (another bad file: said again) */
  if (strcmp(said, c->allowed_said) != 0 && said[0])
    fprintf(stderr, "coordinator: reading the allow-list again: %s%s\n", err.msg,
            bad > 1 ? " (and more files: each such file is skipped)" : bad ? " (the file is skipped)" : "");
  snprintf(c->allowed_said, sizeof c->allowed_said, "%s", said);
  if (rc < 0) return;
  int after = atoll_zap_count(c->zap);
  if (after != before) fprintf(stderr, "coordinator: %d new island key(s) in %s/: %d allowed\n", after - before, c->allowed, after);
}

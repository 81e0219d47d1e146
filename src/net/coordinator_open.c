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

void atoll_coord_on_units(coord *c, const route *from, const char *keyz, const char *who, const atoll_wire_units *q) {
  char why[200];
  int slot = atoll_coord_slot_of(c, keyz);
  if (!c->cfg->open || slot < 0) {
    snprintf(why, sizeof why, "UNITS from %s: %s", who,
             c->cfg->open ? "this key has no island slot (it never asked: ASK first)" : "this coordinator's run is not open (--open 1)");
    fprintf(stderr, "coordinator: refused %s\n", why);
    atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, why);
    return;
  }
  atoll_units *u = &c->units;
  uint64_t again_before = u->again;
  int held = u->nheld[slot], returned = u->nreturned, had[2] = {0, 0}, again;
  for (int j = 0; j < held; j++) had[0] |= u->held[slot][j].start == q->start, had[1] |= u->held[slot][j].start == q->next_start;
  atoll_wire_msg a = {.type = ATOLL_WIRE_UNIT};
  a.u.units = *q;
  if (atoll_units_ask(u, (uint32_t)slot, q->start, q->end, q->next_start, q->next_end, q->lost_from, &a.u.units.unit,
                      &a.u.units.next_unit, &again, why, sizeof why)) {
    char text[300];
    snprintf(text, sizeof text, "UNITS: %s", why);
    fprintf(stderr, "coordinator: refused %s from %s\n", text, who);
    atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
    return;
  }
  /* one line per unit handed out; a returned unit goes to the first phase that takes one */
  int agains = (int)(u->again - again_before);
  for (int k = 0; k < 2; k++) {
    if (had[k] || (k == 1 && q->next_end == 0)) continue;
    int was_returned = agains > 0;
    agains -= was_returned;
    fprintf(stderr, "coordinator: island %d takes unit %llu for steps (%u, %u]%s\n", slot,
            (unsigned long long)(k ? a.u.units.next_unit : a.u.units.unit), k ? q->next_start : q->start,
            k ? q->next_end : q->end, was_returned ? " (again: its island left, or jumped past it, before a commit)" : "");
  }
  if (!had[0] || (!had[1] && q->next_end) || u->nheld[slot] != held || u->nreturned != returned) atoll_coord_save_state(c);
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
    if (member) c->slot_heard[k] = now;
    else if (now - (c->slot_heard[k] > c->started ? c->slot_heard[k] : c->started) > c->cfg->island_timeout) {
      int n = atoll_units_release(&c->units, (uint32_t)k);
      fprintf(stderr, "coordinator: island %d is not here (silent for %g s): the units of its %d uncommitted phase(s) go out again first\n",
              k, c->cfg->island_timeout, n);
      atoll_coord_save_state(c);
    }
  }
}

void atoll_coord_reread_allowed(coord *c) {
  double now = atoll_net_now();
  if (!c->cfg->open || now - c->allowed_read < 2.0) return;
  c->allowed_read = now;
  expire_holders(c, now);
  int before = atoll_zap_count(c->zap);
  atoll_err err;
  if (atoll_zap_allow_dir(c->zap, c->allowed, &err) < 0) {
    fprintf(stderr, "coordinator: reading the allow-list again: %s\n", err.msg);
    return;
  }
  int after = atoll_zap_count(c->zap);
  if (after != before) fprintf(stderr, "coordinator: %d new island key(s) in %s/: %d allowed\n", after - before, c->allowed, after);
}

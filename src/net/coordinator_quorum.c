/* The coordinator's exchanges: forming the quorum, GO once every member holds every
 * piece, and aborting. */
#include "net/coordinator_int.h"
#include "net/merge_policy.h"

#include <stdio.h>
#include <string.h>

/* The exchange in flight is abandoned: every member still alive is told to discard
 * what it received and retry (its input is untouched until GO). */
void atoll_coord_abort_exchange(coord *c, const char *why) {
  if (!c->xq.open) return;
  for (int j = 0; j < c->xq.n; j++) {
    member *m = atoll_coord_group_member(c, &c->xq, j);
    if (m) atoll_coord_send_sync(c, &m->ready_to, ATOLL_WIRE_ABORT, c->xq.step, c->xq.frag, c->xq.id, NULL);
  }
  fprintf(stderr, "coordinator: step %u fragment %u: exchange %llu aborted (%s); the others retry\n", c->xq.step,
          c->xq.frag, (unsigned long long)c->xq.id, why);
  c->xq.open = 0;
}

/* A member ready for an exchange at or before the step the others committed (or are
 * committing) did not apply that step: it is behind and joins at the next commit. */
void atoll_coord_mark_behind(coord *c, member *m, uint32_t step) {
  if (m->joining) return;
  fprintf(stderr, "coordinator: island %u is behind (ready for step %u, step %u is committed or committing): it joins at the next commit\n",
          m->island, m->ready_step, step);
  for (int i = 0; i < MAX_MEMBERS; i++) { /* the island is one unit: all its ranks join */
    member *o = &c->m[i];
    if (!o->used || o->island != m->island || o->joining) continue;
    o->joining = 1;
    if (o->ready) atoll_coord_send_text(c, &o->ready_to, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
  }
}

/* Rank r's QUORUM: the rank-r members of the exchange, in island order. */
void atoll_coord_send_quorum(coord *c, member *m) {
  static atoll_wire_member mine[MAX_MEMBERS];
  uint32_t k = 0;
  for (int j = 0; j < c->xq.n; j++)
    if (c->qrank[j] == m->rank) mine[k++] = c->qmem[j];
  atoll_wire_msg msg = {.type = ATOLL_WIRE_QUORUM};
  msg.u.quorum = (atoll_wire_quorum){c->xq.step, c->xq.frag, c->revision, c->xq.id, {0}, k, mine};
  memcpy(msg.u.quorum.hash, c->hash, ATOLL_WIRE_HASH);
  atoll_coord_send_to(c, &m->ready_to, &msg);
}

/* An island fetching the state is about to be a member: the ready ones wait for it,
 * told so (a WAIT extends their bound on the wait). */
static void wait_for_fetch(coord *c, const member *f) {
  char text[120];
  snprintf(text, sizeof text, "waiting for island %u to fetch the committed state", f->island);
  for (int j = 0; j < MAX_MEMBERS; j++)
    if (c->m[j].used && c->m[j].ready && !c->m[j].joining && !c->m[j].waiting_told) {
      atoll_coord_send_text(c, &c->m[j].ready_to, ATOLL_WIRE_WAIT, text);
      c->m[j].waiting_told = 1;
    }
}

/* A ready part of an island that is not whole waits for the rest of it, told so. */
static void tell_partial(coord *c, member *m) {
  if (!m->ready || m->waiting_told) return;
  char text[160];
  int have = atoll_coord_island_ranks(c, m->island);
  if (have == (int)c->ranks)
    snprintf(text, sizeof text, "island %u: a rank of it is behind; waiting for it to join", m->island);
  else
    snprintf(text, sizeof text, "island %u: %d of its %u ranks registered; waiting for the others", m->island, have, c->ranks);
  atoll_coord_send_text(c, &m->ready_to, ATOLL_WIRE_WAIT, text);
  m->waiting_told = 1;
}

/* Members ready for different exchanges: those behind the most advanced fetch the
 * state at the next commit (all ranks of their island). */
static void drop_behind(coord *c, uint32_t hi_step, uint32_t hi_frag) {
  for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    if (!m->used || m->joining || !atoll_coord_island_whole(c, m->island) || (m->ready_step == hi_step && m->ready_frag == hi_frag))
      continue;
    fprintf(stderr, "coordinator: island %u is behind (ready for step %u, the others for step %u): it joins at the next commit\n",
            m->island, m->ready_step, hi_step);
    for (int o = 0; o < MAX_MEMBERS; o++) /* all its ranks */
      if (c->m[o].used && c->m[o].island == m->island && !c->m[o].joining) {
        c->m[o].joining = 1;
        if (c->m[o].ready) atoll_coord_send_text(c, &c->m[o].ready_to, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
      }
  }
}

/* Fewer islands than --min-islands: every member waits, told so once. 1 when too few. */
static int too_few(coord *c, int islands, uint32_t step) {
  if (islands >= c->cfg->min_islands) return 0;
  char text[200];
  snprintf(text, sizeof text, ATOLL_WIRE_WAIT_ISLANDS, islands, c->cfg->min_islands);
  int told = 0;
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && !c->m[i].waiting_told) {
      atoll_coord_send_text(c, &c->m[i].ready_to, ATOLL_WIRE_WAIT, text);
      c->m[i].waiting_told = told = 1;
    }
  if (told) fprintf(stderr, "coordinator: step %u: %s\n", step, text);
  return 1;
}

/* After a restart, the members of the state file get --island-timeout to re-register
 * (by heartbeat) before a quorum forms without them. Every registered member counts,
 * joining ones too (a restarted island re-registers behind). The ready ones are told
 * to WAIT, which extends their bound on the wait: heard nothing, they gave up after
 * --net-timeout, counted from a READY sent while the coordinator was down. 1 while
 * the grace lasts. */
static int restart_grace(coord *c) {
  if (atoll_coord_live(c) >= c->restored_members || atoll_net_now() - c->started >= c->cfg->island_timeout) return 0;
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].ready && !c->m[i].joining && !c->m[i].waiting_told) {
      atoll_coord_send_text(c, &c->m[i].ready_to, ATOLL_WIRE_WAIT,
                            "the coordinator restarted: waiting for the islands of its state file to re-register");
      c->m[i].waiting_told = 1;
    }
  return 1;
}

/* Whether every rank of island `id` is ready for (step, frag). */
static int island_ready(const coord *c, uint32_t id, uint32_t step, uint32_t frag) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && !c->m[i].joining && c->m[i].island == id &&
        !(c->m[i].ready && c->m[i].ready_step == step && c->m[i].ready_frag == frag))
      return 0;
  return 1;
}

/* Opens the exchange of (step, frag) with the n whole members, in island order (with
 * only_ready, those of islands ready for it). */
static void open_exchange(coord *c, int n, uint32_t step, uint32_t frag, int only_ready) {
  group *g = &c->xq;
  memset(g, 0, sizeof *g);
  c->first_ready = 0;
  int k = 0;
  for (uint32_t id = 0; id < ATOLL_WIRE_MAX_MEMBERS && k < n; id++)
    for (int i = 0; i < MAX_MEMBERS; i++)
      if (c->m[i].used && !c->m[i].joining && c->m[i].island == id && atoll_coord_island_whole(c, id) &&
          (!only_ready || island_ready(c, id, step, frag))) {
        c->qrank[k] = c->m[i].rank;
        c->qmem[k].island = id;
        memcpy(c->qmem[k].key, c->m[i].key, ATOLL_KEY_BYTES);
        snprintf(c->qmem[k].endpoint, sizeof c->qmem[k].endpoint, "%s", c->m[i].endpoint);
        g->slot[k] = i;
        g->island[k] = id, g->rank[k] = c->m[i].rank;
        g->gen[k++] = c->m[i].gen;
      }
  g->n = k;
  g->step = step;
  g->frag = frag;
  g->id = ++c->next_id;
  g->opened = atoll_net_now();
  g->open = 1;
  for (int j = 0; j < k; j++) {
    member *m = &c->m[g->slot[j]];
    atoll_coord_send_quorum(c, m);
    m->ready = m->waiting_told = 0;
  }
}

/* The grace window ended (merge_policy.h): the exchange of (step, frag) opens with the
 * islands ready for it; every rank of the others is late: it is still computing, and
 * joins at the first commit after its next READY (the commits between go on without it). */
static void open_without_late(coord *c, uint32_t step, uint32_t frag) {
  int n = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    if (!m->used || m->joining || !atoll_coord_island_whole(c, m->island)) continue;
    if (island_ready(c, m->island, step, frag)) {
      n++;
      continue;
    }
    fprintf(stderr, "coordinator: step %u: island %u is late (--quorum-grace %g s ended): the exchange opens without it; it joins at the first commit after it asks (its next READY)\n",
            step, m->island, c->cfg->quorum_grace);
    for (int o = 0; o < MAX_MEMBERS; o++) /* all its ranks */
      if (c->m[o].used && c->m[o].island == m->island && !c->m[o].joining) {
        c->m[o].joining = 1;
        if (c->m[o].ready) atoll_coord_send_text(c, &c->m[o].ready_to, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
      }
  }
  open_exchange(c, n, step, frag, 1);
}

/* Forms the quorum when every live member is ready for the same exchange, or, with a
 * grace window, when enough are and the window ended (merge_policy.h). */
void atoll_coord_try_quorum(coord *c) {
  if (c->xq.open) return;
  int n = 0, islands = 0, ready = 0, differ = 0, waiting = 0;
  uint32_t step = 0, frag = 0, hi_step = 0, hi_frag = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (c->m[i].used && c->m[i].joining == 2) { /* fetching the state: it is about to be a member */
      wait_for_fetch(c, &c->m[i]);
      return;
    }
    if (!c->m[i].used || c->m[i].joining) continue;
    if (!atoll_coord_island_whole(c, c->m[i].island)) { /* a part of an island waits for the rest of it */
      tell_partial(c, &c->m[i]);
      continue;
    }
    n++;
    islands += c->m[i].rank == 0;
    if (!c->m[i].ready) {
      if (c->cfg->quorum_grace <= 0) return;
      waiting++;
      continue;
    }
    uint32_t s = c->m[i].ready_step, f = c->m[i].ready_frag;
    if (ready++ == 0) step = hi_step = s, frag = hi_frag = f;
    else if (s != step || f != frag) differ = 1;
    if (s > hi_step || (s == hi_step && f > hi_frag)) hi_step = s, hi_frag = f;
  }
  if (n == 0) return;
  if (differ) {
    drop_behind(c, hi_step, hi_frag);
    atoll_coord_try_quorum(c);
    return;
  }
  if (waiting) { /* some not ready, with a grace window: the policy decides */
    if (ready == 0) return;
    double now = atoll_net_now(), wake;
    if (c->first_ready == 0) c->first_ready = now;
    int ready_islands = 0;
    for (int i = 0; i < MAX_MEMBERS; i++)
      if (c->m[i].used && !c->m[i].joining && c->m[i].rank == 0 && atoll_coord_island_whole(c, c->m[i].island) &&
          island_ready(c, c->m[i].island, step, frag))
        ready_islands++;
    atoll_merge_policy p = {c->cfg->min_islands, c->cfg->quorum_grace};
    if (atoll_policy_quorum(&p, islands, ready_islands, c->first_ready, now, &wake) != ATOLL_POLICY_OPEN) return;
    if (restart_grace(c)) return;
    open_without_late(c, step, frag);
    return;
  }
  if (restart_grace(c)) return;
  if (too_few(c, islands, step)) {
    atoll_coord_feed_waiting(c);
    return;
  }
  open_exchange(c, n, step, frag, 0);
}

/* Every member of the exchange holds every piece: each may apply it (GO). */
void atoll_coord_try_go(coord *c) {
  if (!c->xq.open) return;
  for (int j = 0; j < c->xq.n; j++)
    if (!c->xq.done[j]) return;
  for (int j = 0; j < c->xq.n; j++) {
    member *m = atoll_coord_group_member(c, &c->xq, j);
    if (m) atoll_coord_send_sync(c, &m->ready_to, ATOLL_WIRE_GO, c->xq.step, c->xq.frag, c->xq.id, NULL);
  }
  c->go_id = c->xq.id;
  c->xq.open = 0;
  int islands = c->xq.n / (c->ranks ? (int)c->ranks : 1);
  if (c->last_members != islands)
    fprintf(stderr, "coordinator: step %u: %d islands in the exchange (were %d)\n", c->xq.step, islands, c->last_members);
  c->last_members = islands;
  c->cq = c->xq; /* its members commit the step */
}

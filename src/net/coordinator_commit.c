/* The coordinator's commits: the members' hashes of a step, and the islands that join
 * with the committed state. */
#include "net/coordinator_int.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* The joiners of one commit: the islands that fetch its state, each rank from its donor. */
typedef struct {
  atoll_wire_member who[MAX_MEMBERS];
  uint32_t rank[MAX_MEMBERS];
  int n;
  int per_rank[MAX_MEMBERS];
} joiners;

/* Per rank, the first member (island order) that committed the group's step; the
 * islands counted in *n. 0 when every member that applied it committed, -1 when some
 * are still to send their hash. */
static int collect(coord *c, group *g, member *first[MAX_MEMBERS], int *n) {
  for (int j = 0; j < g->n; j++) {
    member *m = atoll_coord_group_member(c, g, j);
    if (!m) continue; /* left after applying: the others commit without it */
    if (m->joining) continue; /* behind (it did not apply the exchange): it fetches this commit's state */
    if (!m->committed || m->commit_step != g->step) {
      if (!(m->ready && m->ready_step <= g->step)) return -1;
      /* ready for an exchange of this step or before: it never got the GO of this
       * step's exchange (a coordinator restart between the GO messages), so it is
       * behind the members that applied it, and joins with this commit's state */
      atoll_coord_mark_behind(c, m, g->step);
      continue;
    }
    if (!first[m->rank]) first[m->rank] = m;
    *n += m->rank == 0;
  }
  for (uint32_t r = 0; r < (c->ranks ? c->ranks : 1); r++)
    if (!first[r]) return -1;
  return 0;
}

/* The committed hash of the global weights (rank 0's with one rank per island, else
 * the BLAKE2b-256 of the ranks' hashes in rank order). */
static void whole_hash(const coord *c, member *first[MAX_MEMBERS], uint8_t whole[ATOLL_WIRE_HASH]) {
  if (c->ranks <= 1) {
    memcpy(whole, first[0]->commit_hash, ATOLL_WIRE_HASH);
    return;
  }
  crypto_generichash_state st;
  crypto_generichash_init(&st, NULL, 0, ATOLL_WIRE_HASH);
  for (uint32_t r = 0; r < c->ranks; r++) crypto_generichash_update(&st, first[r]->commit_hash, ATOLL_WIRE_HASH);
  crypto_generichash_final(&st, whole, ATOLL_WIRE_HASH);
}

/* Tells member m of a joining island where to fetch rank m->rank's committed state. */
static void send_state_from(coord *c, group *g, member *m, member *donor, joiners *jn, const char *h) {
  jn->who[jn->n].island = m->island;
  memcpy(jn->who[jn->n].key, m->key, ATOLL_KEY_BYTES);
  snprintf(jn->who[jn->n].endpoint, sizeof jn->who[0].endpoint, "%s", m->endpoint);
  jn->rank[jn->n++] = m->rank;
  jn->per_rank[m->rank]++;
  atoll_wire_member dm;
  dm.island = donor->island;
  memcpy(dm.key, donor->key, ATOLL_KEY_BYTES);
  snprintf(dm.endpoint, sizeof dm.endpoint, "%s", donor->endpoint);
  atoll_wire_msg sf = {.type = ATOLL_WIRE_STATE_FROM};
  sf.u.quorum = (atoll_wire_quorum){g->step, 0, c->revision, c->revision, {0}, 1, &dm};
  memcpy(sf.u.quorum.hash, c->rank_hash[m->rank], ATOLL_WIRE_HASH);
  atoll_coord_send_to(c, &m->ready_to, &sf);
  m->joining = 2;
  c->n_state_joins += m->rank == 0;
  m->state_sent = atoll_net_now();
  m->ready = 0;
  if (m->rank == 0)
    fprintf(stderr, "coordinator: island %u joins at step %u: fetches revision %llu (hash %s) from island %u\n", m->island,
            g->step, (unsigned long long)c->revision, h, donor->island);
}

/* Joining islands that asked (READY with each of their ranks) fetch this commit's
 * state: rank r from the first member of rank r. Every rank of an island asks, or none joins. */
static void send_joins(coord *c, group *g, member *first[MAX_MEMBERS], joiners *jn, const char *h) {
  for (uint32_t id = 0; id < ATOLL_WIRE_MAX_MEMBERS; id++) { /* in island order */
    int ranks = 0, asking = 0;
    for (int i = 0; i < MAX_MEMBERS; i++) {
      member *m = &c->m[i];
      if (!m->used || m->island != id) continue;
      ranks++;
      asking += m->joining == 1 && m->ready;
    }
    if (ranks == 0 || ranks != (int)c->ranks || asking != ranks) continue;
    for (int i = 0; i < MAX_MEMBERS; i++)
      if (c->m[i].used && c->m[i].island == id) send_state_from(c, g, &c->m[i], first[c->m[i].rank], jn, h);
  }
}

/* FEED to the donor of rank r at route `to`: its rank's joiners of the state of `step`. */
static void send_feed(coord *c, const route *to, uint32_t step, uint32_t r, const joiners *jn) {
  static atoll_wire_member mine[MAX_MEMBERS];
  uint32_t k = 0;
  for (int t = 0; t < jn->n; t++)
    if (jn->rank[t] == r) mine[k++] = jn->who[t];
  atoll_wire_msg feed = {.type = ATOLL_WIRE_FEED};
  feed.u.quorum = (atoll_wire_quorum){step, 0, c->revision, c->revision, {0}, k, mine};
  memcpy(feed.u.quorum.hash, c->rank_hash[r], ATOLL_WIRE_HASH);
  atoll_coord_send_to(c, to, &feed);
}

/* COMMITTED to member m; a donor also gets the FEED of its rank's joiners. */
static void send_committed(coord *c, group *g, member *m, member *first[MAX_MEMBERS], const joiners *jn) {
  int donor = m == first[m->rank];
  atoll_coord_send_sync(c, &m->commit_to, ATOLL_WIRE_COMMITTED, g->step, donor ? (uint32_t)jn->per_rank[m->rank] : 0,
                        c->revision, c->rank_hash[m->rank]);
  if (donor && jn->per_rank[m->rank]) send_feed(c, &m->commit_to, g->step, m->rank, jn);
}

/* Commits the step when every live member that applied it sent its hash. Each rank
 * of an island hashes its own slice: the members of one rank must agree, and the
 * committed hash is that of the run's global weights. */
void atoll_coord_try_commit(coord *c) {
  group *g = &c->cq;
  int n = 0;
  member *first[MAX_MEMBERS] = {0};
  if (collect(c, g, first, &n)) return;
  int same = 1;
  member *odd = NULL;
  for (int j = 0; j < g->n; j++) {
    member *m = atoll_coord_group_member(c, g, j);
    if (m && !m->joining && memcmp(m->commit_hash, first[m->rank]->commit_hash, ATOLL_WIRE_HASH) != 0) same = 0, odd = m;
  }
  char text[300], h[17];
  uint8_t whole[ATOLL_WIRE_HASH];
  whole_hash(c, first, whole);
  if (same) {
    c->revision++;
    c->last_step = g->step;
    memcpy(c->hash, whole, ATOLL_WIRE_HASH);
    for (uint32_t r = 0; r < (c->ranks ? c->ranks : 1); r++) memcpy(c->rank_hash[r], first[r]->commit_hash, ATOLL_WIRE_HASH);
    for (int j = 0; j < g->n; j++) { /* (an open run: the units of the phases this commit took in are done,
                                          those of a member that left after applying it too) */
      member *m = atoll_coord_group_member(c, g, j);
      if (!m || !m->joining) atoll_coord_units_committed(c, g->island[j], g->step);
    }
    atoll_coord_save_state(c);
    atoll_coord_status_commit(c, g);
  }
  atoll_coord_hex(whole, h);
  static joiners jn;
  memset(&jn, 0, sizeof jn);
  if (same) send_joins(c, g, first, &jn, h);
  for (int j = 0; j < g->n; j++) {
    member *m = atoll_coord_group_member(c, g, j);
    if (!m || m->joining) continue;
    if (same) send_committed(c, g, m, first, &jn);
    else {
      char mh[17], fh[17];
      atoll_coord_hex(odd->commit_hash, mh);
      atoll_coord_hex(first[odd->rank]->commit_hash, fh);
      snprintf(text, sizeof text, "step %u: the islands' global weights differ (island %u rank %u holds %s, island %u %s)",
               g->step, odd->island, odd->rank, mh, first[odd->rank]->island, fh);
      atoll_coord_send_text(c, &m->commit_to, ATOLL_WIRE_ERROR, text);
    }
    m->committed = 0;
  }
  if (same)
    fprintf(stderr, "coordinator: step %u committed: revision %llu, %d islands, hash %s\n", g->step,
            (unsigned long long)c->revision, n, h);
  else
    fprintf(stderr, "coordinator: step %u: hash mismatch between islands; nothing committed\n", g->step);
  uint32_t gone[MAX_MEMBERS];
  int ngone = 0;
  for (int j = 0; j < g->n; j++)
    if (!atoll_coord_group_member(c, g, j)) gone[ngone++] = g->island[j];
  g->n = 0;
  for (int j = 0; j < ngone; j++) atoll_coord_units_left(c, gone[j]); /* (what this commit did not take in goes back) */
  if (ngone && c->cfg->open) atoll_coord_save_state(c);
}

/* Too few islands for the next exchange while whole islands wait to join at the next
 * commit, which then never comes (their donors died: a chaos run left one up-to-date
 * island of --min-islands 2). They fetch the last committed state now instead, rank r
 * from a member of rank r that waits for the next exchange: its global weights and
 * outer momentum are still the committed ones (the donor checks their hash before it
 * sends, the joiner after it fetched). 1 when some island was told where to fetch. */
int atoll_coord_feed_waiting(coord *c) {
  if (c->revision == 0) return 0;
  member *first[MAX_MEMBERS] = {0};
  for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    if (m->used && !m->joining && m->ready && atoll_coord_island_whole(c, m->island) && !first[m->rank]) first[m->rank] = m;
  }
  for (uint32_t r = 0; r < (c->ranks ? c->ranks : 1); r++)
    if (!first[r]) return 0;
  group g = {.step = c->last_step};
  char h[17];
  atoll_coord_hex(c->hash, h);
  static joiners jn;
  memset(&jn, 0, sizeof jn);
  send_joins(c, &g, first, &jn, h);
  if (jn.n == 0) return 0;
  for (uint32_t r = 0; r < (c->ranks ? c->ranks : 1); r++)
    if (jn.per_rank[r]) send_feed(c, &first[r]->ready_to, g.step, r, &jn);
  return 1;
}

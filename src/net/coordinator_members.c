/* The coordinator's membership: registration (HELLO), replays, silence timeouts, and
 * the small helpers every part uses (lookups, sends). */
#include "net/coordinator_int.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

void atoll_coord_hex(const uint8_t *h, char out[17]) {
  for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

int atoll_coord_say(said_lately *s, const char *keyz) {
  double now = atoll_net_now();
  int oldest = 0;
  for (int i = 0; i < SAID_KEYS; i++) {
    if (strncmp(s->key[i], keyz, ATOLL_KEY_Z85) == 0) {
      if (now - s->at[i] < 10) return 0;
      oldest = i;
      break;
    }
    if (s->at[i] < s->at[oldest]) oldest = i;
  }
  snprintf(s->key[oldest], sizeof s->key[oldest], "%.40s", keyz);
  s->at[oldest] = now;
  return 1;
}

int atoll_coord_live(const coord *c) {
  int n = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) n += c->m[i].used;
  return n;
}

void atoll_coord_name_of(const coord *c, const char *keyz, const char *addr, char *out, size_t n) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && strcmp(c->m[i].keyz, keyz) == 0) {
      snprintf(out, n, "island %u (key %.8s..., %s)", c->m[i].island, keyz, addr);
      return;
    }
  snprintf(out, n, "peer with key %.8s... at %s", keyz, addr);
}

/* A member is one rank of an island: its key (shared by the island's ranks) and rank. */
member *atoll_coord_by_key(coord *c, const char *keyz, uint32_t rank) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].rank == rank && strcmp(c->m[i].keyz, keyz) == 0) return &c->m[i];
  return NULL;
}

/* An island takes part in a quorum only whole: each of its ranks registered, none behind. */
int atoll_coord_island_whole(const coord *c, uint32_t island) {
  int n = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    const member *m = &c->m[i];
    if (!m->used || m->island != island) continue;
    if (m->joining) return 0;
    n++;
  }
  return n == (int)c->ranks;
}

int atoll_coord_island_ranks(const coord *c, uint32_t island) {
  int n = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) n += c->m[i].used && c->m[i].island == island;
  return n;
}

void atoll_coord_send_to(coord *c, const route *r, atoll_wire_msg *msg) {
  if (atoll_sock_send(c->sock, &c->tx, msg, r->rid, r->rid_len))
    fprintf(stderr, "coordinator: cannot send %s: %s\n", atoll_wire_type_name(msg->type), zmq_strerror(zmq_errno()));
}

void atoll_coord_send_text(coord *c, const route *r, atoll_wire_type type, const char *text) {
  atoll_wire_msg msg = {.type = type};
  snprintf(msg.u.text, sizeof msg.u.text, "%s", text);
  atoll_coord_send_to(c, r, &msg);
}

int atoll_coord_in_group(const coord *c, const group *g, const member *m) {
  for (int j = 0; j < g->n; j++)
    if (&c->m[g->slot[j]] == m && m->gen == g->gen[j]) return j;
  return -1;
}

member *atoll_coord_group_member(coord *c, const group *g, int j) {
  member *m = &c->m[g->slot[j]];
  return m->used && m->gen == g->gen[j] ? m : NULL;
}

void atoll_coord_send_sync(coord *c, const route *r, atoll_wire_type type, uint32_t step, uint32_t frag, uint64_t v,
                      const uint8_t *hash) {
  atoll_wire_msg msg = {.type = type};
  msg.u.sync = (atoll_wire_sync){step, frag, v, {0}, 0};
  if (hash) memcpy(msg.u.sync.hash, hash, ATOLL_WIRE_HASH);
  atoll_coord_send_to(c, r, &msg);
}

/* Replays: a (session, seq) at or below the last one seen from that session. A
 * member's live sessions (heard within `window` s) are never pushed out: a new session
 * takes a free slot or the one silent longest, if silent for more than window, whose
 * session and last seq go to a ring of RETIRED that is still checked; with every slot
 * live, the new session is refused (2). So whoever opens new sessions with a member's
 * key cannot evict a live one, and a retired one stays checked until RETIRED more have
 * retired: at least RETIRED / SESSIONS windows. A retired session that speaks again,
 * with a higher seq (an island's socket silent between syncs), is live again. */
int atoll_coord_replayed(member *m, uint64_t session, uint32_t seq, double now, double window) {
  for (int i = 0; i < SESSIONS; i++)
    if (m->heard[i] > 0 && m->sessions[i] == session) {
      if (seq <= m->seqs[i]) return 1;
      m->seqs[i] = seq, m->heard[i] = now;
      return 0;
    }
  for (int j = 0; j < RETIRED; j++)
    if (session != 0 && m->retired[j] == session) {
      if (seq <= m->retired_seqs[j]) return 1;
      m->retired[j] = 0, m->retired_seqs[j] = 0; /* live again (below) */
    }
  int slot = -1;
  for (int i = 0; i < SESSIONS; i++)
    if (m->heard[i] == 0 || (now - m->heard[i] > window && (slot < 0 || m->heard[i] < m->heard[slot]))) {
      slot = i;
      if (m->heard[i] == 0) break;
    }
  if (slot < 0) return 2;
  if (m->heard[slot] > 0) {
    int j = m->next_retired++ % RETIRED;
    m->retired[j] = m->sessions[slot], m->retired_seqs[j] = m->seqs[slot];
  }
  m->sessions[slot] = session, m->seqs[slot] = seq, m->heard[slot] = now;
  return 0;
}

/* Every island has the same ranks and inner layout (so that rank r's slice is the
 * same part of the model in each): the first rank to register sets them for the run
 * (anew when no member is left); a mismatch is refused with one line, told to it. */
static int layout_refused(coord *c, const char *keyz, const atoll_wire_hello *h, const route *from, const char *addr) {
  if (atoll_coord_live(c) == 0) {
    c->ranks = 0;
    memset(c->layout_set, 0, sizeof c->layout_set);
  }
  char text[300] = "";
  if (c->ranks && h->ranks != c->ranks)
    snprintf(text, sizeof text, "island %u has %u rank(s), the run's islands have %u: every island needs the same ranks and inner layout (their slices line up); refused",
             h->island, h->ranks, c->ranks);
  else if (h->rank < MAX_MEMBERS && c->layout_set[h->rank] && c->layouts[h->rank] != h->layout)
    snprintf(text, sizeof text, "island %u rank %u: its layout (tp x pp x dp, the model, --islands, --island-data, --sync-every, --fragments or --outer-dtype) differs from the run's islands' (fingerprint %016llx, not %016llx); refused",
             h->island, h->rank, (unsigned long long)h->layout, (unsigned long long)c->layouts[h->rank]);
  else if (h->rank >= MAX_MEMBERS)
    snprintf(text, sizeof text, "island %u rank %u: at most %d ranks per island; refused", h->island, h->rank, MAX_MEMBERS);
  if (!text[0]) {
    c->ranks = h->ranks;
    c->layouts[h->rank] = h->layout;
    c->layout_set[h->rank] = 1;
    return 0;
  }
  if (atoll_coord_say(&c->refused, keyz)) fprintf(stderr, "coordinator: %s (key %.8s..., %s)\n", text, keyz, addr);
  atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
  return 1;
}

/* An island restarted with another shape (its key's members have a different rank
 * count, e.g. a 2-rank island now started as one process): its old ranks are dropped
 * so that the new incarnation registers anew; register_island then adopts its shape
 * if no other island sets the run's, or refuses it with one line. */
void atoll_coord_forget_reshaped(coord *c, const char *keyz, const atoll_wire_hello *h) {
  int found = 0;
  uint32_t was = 0;
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].ranks != h->ranks && strcmp(c->m[i].keyz, keyz) == 0) {
      if (!found && c->xq.open && atoll_coord_in_group(c, &c->xq, &c->m[i]) >= 0) {
        char why[96];
        snprintf(why, sizeof why, "island %u restarted with %u rank(s)", c->m[i].island, h->ranks);
        atoll_coord_abort_exchange(c, why);
      }
      found = 1;
      was = c->m[i].ranks;
    }
  if (!found) return;
  fprintf(stderr, "coordinator: island %u restarted with %u rank(s), was %u (key %.8s...): its old ranks are dropped; it registers anew\n",
          h->island, h->ranks, was, keyz);
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].ranks != h->ranks && strcmp(c->m[i].keyz, keyz) == 0) c->m[i].used = 0;
  c->n_restarted++;
  atoll_coord_save_state(c);
  atoll_coord_try_commit(c);
}

member *atoll_coord_register_island(coord *c, const char *keyz, const atoll_wire_hello *h, const route *from, const char *addr) {
  if (c->cfg->open && atoll_coord_slot_of(c, keyz) != (int)h->island) {
    char text[300];
    snprintf(text, sizeof text, "island %u: this is an open run (coordinator --open 1), where an island's slot is its key's (%d: none yet); start it without --islands and --island-id; refused",
             h->island, atoll_coord_slot_of(c, keyz));
    if (atoll_coord_say(&c->refused, keyz)) fprintf(stderr, "coordinator: %s (key %.8s..., %s)\n", text, keyz, addr);
    atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
    return NULL;
  }
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].island == h->island && strcmp(c->m[i].keyz, keyz) != 0) {
      /* (not refused: the same island restarted with a new key registers once the old
       * member leaves; its HELLO every second is logged once per 10 s) */
      if (atoll_coord_say(&c->held_by, keyz))
        fprintf(stderr, "coordinator: dropped HELLO from key %.8s... at %s: island %u is held by key %.8s... (it registers once that one leaves)\n",
                keyz, addr, h->island, c->m[i].keyz);
      return NULL;
    }
  int free_slot = -1; /* (found before the layout is taken: a refused HELLO sets nothing) */
  for (int i = 0; i < MAX_MEMBERS && free_slot < 0; i++)
    if (!c->m[i].used) free_slot = i;
  if (free_slot >= 0 && layout_refused(c, keyz, h, from, addr)) return NULL;
  for (int i = free_slot; i >= 0 && i < MAX_MEMBERS; i++) {
    if (c->m[i].used) continue;
    member *m = &c->m[i];
    if (m->probing) close(m->probe_fd); /* (a rank dropped in this same turn, forget_reshaped) */
    memset(m, 0, sizeof *m);
    m->fds[0] = m->fds[1] = -1;
    m->used = 1;
    m->gen = ++c->gens;
    snprintf(m->keyz, sizeof m->keyz, "%.40s", keyz);
    zmq_z85_decode(m->key, m->keyz);
    m->island = h->island;
    m->rank = h->rank, m->ranks = h->ranks, m->layout = h->layout;
    c->n_registered++;
    snprintf(m->endpoint, sizeof m->endpoint, "%s", h->endpoint);
    if (h->ranks == 1)
      fprintf(stderr, "coordinator: island %u joined (key %.8s..., %s, data at %s, step %u); %d members\n", h->island, keyz,
              addr, h->endpoint, h->step, atoll_coord_live(c));
    else
      fprintf(stderr, "coordinator: island %u rank %u of %u joined (key %.8s..., %s, data at %s, step %u); %d members\n",
              h->island, h->rank, h->ranks, keyz, addr, h->endpoint, h->step, atoll_coord_live(c));
    atoll_coord_save_state_soon(c);
    return m;
  }
  /* full: told so in one line (unanswered, it would wait out its limit for a WELCOME); the
   * log says it once per 10 s, whichever island (a crowd past the maximum repeats it) */
  char text[300];
  snprintf(text, sizeof text, "the coordinator holds its most members (%d): island %u is refused; no slot frees until a member leaves",
           MAX_MEMBERS, h->island);
  c->n_full++;
  if (atoll_coord_say(&c->full, "full"))
    fprintf(stderr, "coordinator: refused HELLO from island %u (key %.8s..., %s): %d members already, the most it holds (%llu refused so far; said at most once per 10 s)\n",
            h->island, keyz, addr, MAX_MEMBERS, (unsigned long long)c->n_full);
  atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
  return NULL;
}

void atoll_coord_save_state_soon(coord *c) { c->state_dirty = 1; }

void atoll_coord_save_state_due(coord *c) {
  double now = atoll_net_now();
  if (!c->state_dirty || now - c->state_saved < 1.0) return;
  atoll_coord_save_state(c);
  c->state_saved = now;
}

void atoll_coord_heard_on(member *m, int fd) {
  char peer[64];
  atoll_sock_peer(fd, peer);
  if (!peer[0]) return; /* its connection closed already: a message it sent before (the mark stays) */
  m->closed_at = 0;
  int k = m->fds[0] == fd ? 0 : m->fds[1] == fd ? 1 : -1;
  if (k < 0) { /* a connection not seen before: it takes the older entry's place */
    m->fds[1] = m->fds[0];
    memcpy(m->peers[1], m->peers[0], sizeof m->peers[0]);
    k = 0;
  }
  m->fds[k] = fd;
  snprintf(m->peers[k], sizeof m->peers[k], "%s", peer);
}

void atoll_coord_connection_closed(coord *c, int fd, const char *peer) {
  if (!peer[0]) return; /* closed before its peer was known: it carried no member's messages */
  double now = atoll_net_now();
  for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    for (int k = 0; m->used && k < 2; k++)
      if (m->fds[k] == fd && strcmp(m->peers[k], peer) == 0) {
        if (m->closed_at == 0) m->closed_at = now;
        m->fds[k] = -1, m->peers[k][0] = 0; /* (applied: a later close of that number is another's) */
      }
  }
}

/* A member whose connection closed and that was not heard since for CLOSED_GRACE (or
 * --island-timeout, if shorter) is gone: a killed process's connections close at once,
 * while a live island that lost a connection reconnects and sends its next heartbeat
 * (every 0.5 s) within about a second on a fast link. A connection is its descriptor and
 * its peer's address and port: a later connection given the same descriptor number (a
 * port scanner's, another island's) is another one. */
#define CLOSED_GRACE 1.5
static int closed_and_silent(const coord *c, const member *m, double now) {
  double grace = CLOSED_GRACE < c->cfg->island_timeout ? CLOSED_GRACE : c->cfg->island_timeout;
  return m->closed_at > 0 && m->last_heard <= m->closed_at && now - m->closed_at > grace;
}

/* Islands silent for --island-timeout leave, and those whose connection closed. */
void atoll_coord_expire(coord *c) {
  double now = atoll_net_now();
  int changed = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    int closed = m->used && closed_and_silent(c, m, now);
    if (!m->used || (now - m->last_heard <= c->cfg->island_timeout && !closed)) continue;
    m->used = 0;
    changed = 1;
    c->n_left++;
    atoll_coord_units_left(c, m->island);
    char rank[32] = "", cause[96];
    if (m->ranks > 1) snprintf(rank, sizeof rank, " rank %u", m->rank);
    if (closed) snprintf(cause, sizeof cause, "its connection closed %.1f s ago, not heard since", now - m->closed_at);
    else snprintf(cause, sizeof cause, "silent for %.1f s", now - m->last_heard);
    fprintf(stderr, "coordinator: island %u%s left (%s, key %.8s...); %d members\n", m->island, rank, cause, m->keyz,
            atoll_coord_live(c));
    if (c->xq.open && atoll_coord_in_group(c, &c->xq, m) < 0) continue;
    char why[96];
    snprintf(why, sizeof why, "island %u left", m->island);
    m->used = 1; /* still a member while the abort is sent to the others */
    atoll_coord_abort_exchange(c, why);
    m->used = 0;
  }
  /* a member that is alive but does not finish the exchange in time stalls it: it is
   * dropped (its heartbeats bring it back as a new member) and the others retry */
  /* (twice the silence limit: a member waiting for a dead one is not itself stalled,
   * and the dead one's silence is noticed first) */
  if (c->xq.open && now - c->xq.opened > 2 * c->cfg->island_timeout) {
    char why[160] = "stalled:";
    for (int j = 0; j < c->xq.n; j++) {
      member *m = atoll_coord_group_member(c, &c->xq, j);
      if (m && !c->xq.done[j])
        snprintf(why + strlen(why), sizeof why - strlen(why), " island %u", m->island);
    }
    atoll_coord_abort_exchange(c, why);
    for (int j = 0; j < c->xq.n; j++) {
      member *m = atoll_coord_group_member(c, &c->xq, j);
      if (m && !c->xq.done[j]) {
        m->used = 0;
        changed = 1;
        c->n_left++;
        fprintf(stderr, "coordinator: island %u left (stalled in exchange %llu for %.1f s); %d members\n", m->island,
                (unsigned long long)c->xq.id, now - c->xq.opened, atoll_coord_live(c));
      }
    }
  }
  if (changed) {
    atoll_coord_save_state(c);
    atoll_coord_try_commit(c);
    atoll_coord_try_quorum(c);
  }
}

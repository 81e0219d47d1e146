/* The islands' coordinator (coordinator.h). One thread: a ROUTER socket polled every
 * 100 ms; membership timeouts are checked between messages.
 * Over the house's 600 lines: membership, quorum, commits and the state file belong in
 * files of their own; a split was prepared but is not merged until it passes the
 * coordinator-restart chaos runs (docs/islands.md, "Not yet"). */
#include "net/coordinator.h"

#include "core/fs.h"
#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"
#include "net/zap.h"

#include <cjson/cJSON.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define MAX_MEMBERS 256
#define SESSIONS 8

typedef struct {
  uint8_t rid[256];
  size_t rid_len;
} route;

typedef struct {
  int used;
  uint8_t key[ATOLL_KEY_BYTES];
  char keyz[ATOLL_KEY_Z85 + 1];
  uint32_t island, step;
  uint32_t rank, ranks;   /* a rank of the island's job, of ranks (docs/islands.md, "Islands of several ranks") */
  uint64_t layout;
  char endpoint[ATOLL_WIRE_MAX_ENDPOINT + 1];
  double last_heard;
  uint64_t sessions[SESSIONS];
  uint32_t seqs[SESSIONS];
  int next_session;
  int ready;              /* READY for (ready_step, ready_frag) */
  uint32_t ready_step, ready_frag;
  route ready_to;
  int committed;          /* COMMIT for commit_step */
  uint32_t commit_step;
  uint8_t commit_hash[ATOLL_WIRE_HASH];
  route commit_to;
  int waiting_told;       /* told to wait for this READY */
  uint64_t gen;           /* registration number: a slot reused by another island differs */
  int joining;            /* 1: behind, fetches the state at the next commit; 2: told where */
  uint64_t hello_session; /* the session of its HELLO: another one is a restarted process */
  double state_sent;      /* when it was told where to fetch the state (joining 2) */
} member;

/* A set of members (slot and registration), in island order. */
typedef struct {
  int slot[MAX_MEMBERS];
  uint64_t gen[MAX_MEMBERS];
  int done[MAX_MEMBERS];
  int n;
  uint32_t step, frag;
  uint64_t id;
  double opened;
  int open;
} group;

typedef struct {
  const atoll_coordinator_config *cfg;
  char state_path[4200];
  void *ctx, *sock;
  atoll_zap *zap;
  atoll_sender tx;
  member m[MAX_MEMBERS];
  uint64_t revision;
  uint8_t hash[ATOLL_WIRE_HASH];
  uint32_t last_step;
  group xq;        /* the exchange in flight (open: waiting for DONE from every member) */
  group cq;        /* the members that applied the last exchange: they commit its step */
  uint64_t next_id, go_id;
  uint64_t gens;
  int last_members; /* islands in the last exchange applied */
  int restored_members; /* members in the state file: wait for them (or the grace) after a restart */
  double started;
  atoll_wire_member qmem[MAX_MEMBERS]; /* the open exchange's members, resent on a repeated READY */
  uint32_t qrank[MAX_MEMBERS];         /* their ranks: rank r's QUORUM lists the rank-r members */
  uint32_t ranks;                      /* ranks per island in this run (0: none registered yet) */
  uint64_t layouts[MAX_MEMBERS];       /* the inner layout's fingerprint of each rank */
  int layout_set[MAX_MEMBERS];
  uint8_t rank_hash[MAX_MEMBERS][ATOLL_WIRE_HASH]; /* the committed hash of each rank's slice */
  /* membership changes of the run (state file "counts"; restored after a restart):
   * members that registered, left (silent or stalled) or restarted, and islands that
   * joined with the committed state */
  uint64_t n_registered, n_left, n_restarted, n_state_joins;
  char refused_key[ATOLL_KEY_Z85 + 1];  /* the last refused layout (logged once per 10 s) */
  double refused_at;
  uint8_t buf[ATOLL_WIRE_MAX_DATA + 1];
} coord;

static void hex(const uint8_t *h, char out[17]) {
  for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static int live(const coord *c) {
  int n = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) n += c->m[i].used;
  return n;
}

static void save_state(coord *c) {
  cJSON *s = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(s, "members");
  char h[2 * ATOLL_WIRE_HASH + 1];
  for (int i = 0; i < ATOLL_WIRE_HASH; i++) snprintf(h + 2 * i, 3, "%02x", c->hash[i]);
  cJSON_AddNumberToObject(s, "revision", (double)c->revision);
  cJSON_AddStringToObject(s, "hash", h);
  cJSON_AddNumberToObject(s, "step", c->last_step);
  cJSON_AddNumberToObject(s, "ranks", c->ranks);
  cJSON *cnt = cJSON_AddObjectToObject(s, "counts");
  cJSON_AddNumberToObject(cnt, "registered", (double)c->n_registered);
  cJSON_AddNumberToObject(cnt, "left", (double)c->n_left);
  cJSON_AddNumberToObject(cnt, "restarted", (double)c->n_restarted);
  cJSON_AddNumberToObject(cnt, "state_joins", (double)c->n_state_joins);
  cJSON *rh = cJSON_AddArrayToObject(s, "rank_hashes");
  for (uint32_t r = 0; r < c->ranks; r++) {
    char x[2 * ATOLL_WIRE_HASH + 1];
    for (int i = 0; i < ATOLL_WIRE_HASH; i++) snprintf(x + 2 * i, 3, "%02x", c->rank_hash[r][i]);
    cJSON_AddItemToArray(rh, cJSON_CreateString(x));
  }
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (!c->m[i].used) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "island", c->m[i].island);
    cJSON_AddNumberToObject(o, "rank", c->m[i].rank);
    cJSON_AddStringToObject(o, "key", c->m[i].keyz);
    cJSON_AddStringToObject(o, "endpoint", c->m[i].endpoint);
    cJSON_AddItemToArray(mem, o);
  }
  char *text = cJSON_Print(s);
  atoll_err err;
  if (!text || atoll_write_file_atomic(c->state_path, text, strlen(text), &err))
    fprintf(stderr, "coordinator: cannot write the state file %s: %s\n", c->state_path, text ? err.msg : "out of memory");
  cJSON_free(text);
  cJSON_Delete(s);
}

/* A state file from an earlier run: the revision, hash and step carry on. */
static int load_state(coord *c, atoll_err *err) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = fopen(c->state_path, "r");
  if (!f) return 0; /* a first start */
  fclose(f);
  if (atoll_read_file(c->state_path, 1 << 20, &text, &len, err)) return -1;
  cJSON *s = cJSON_ParseWithLength(text, len);
  free(text);
  const cJSON *rev = cJSON_GetObjectItemCaseSensitive(s, "revision"), *h = cJSON_GetObjectItemCaseSensitive(s, "hash"),
              *st = cJSON_GetObjectItemCaseSensitive(s, "step"), *mem = cJSON_GetObjectItemCaseSensitive(s, "members");
  if (!cJSON_IsNumber(rev) || rev->valuedouble < 0 || !cJSON_IsString(h) || strlen(h->valuestring) != 2 * ATOLL_WIRE_HASH ||
      !cJSON_IsNumber(st)) {
    cJSON_Delete(s);
    return atoll_fail(err, "%s: not a coordinator state file (revision, hash, step)", c->state_path);
  }
  c->revision = (uint64_t)rev->valuedouble;
  c->restored_members = cJSON_GetArraySize(mem);
  c->last_step = (uint32_t)st->valuedouble;
  for (int i = 0; i < ATOLL_WIRE_HASH; i++) {
    unsigned v;
    if (sscanf(h->valuestring + 2 * i, "%2x", &v) != 1) {
      cJSON_Delete(s);
      return atoll_fail(err, "%s: hash is not hexadecimal", c->state_path);
    }
    c->hash[i] = (uint8_t)v;
  }
  memcpy(c->rank_hash[0], c->hash, ATOLL_WIRE_HASH);
  const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(s, "counts"), *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "registered")) && cJSON_IsNumber(v)) c->n_registered = (uint64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "left")) && cJSON_IsNumber(v)) c->n_left = (uint64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "restarted")) && cJSON_IsNumber(v)) c->n_restarted = (uint64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(cnt, "state_joins")) && cJSON_IsNumber(v)) c->n_state_joins = (uint64_t)v->valuedouble;
  const cJSON *rh = cJSON_GetObjectItemCaseSensitive(s, "rank_hashes");
  for (int r = 0; cJSON_IsArray(rh) && r < cJSON_GetArraySize(rh) && r < MAX_MEMBERS; r++) {
    const cJSON *x = cJSON_GetArrayItem(rh, r);
    if (!cJSON_IsString(x) || strlen(x->valuestring) != 2 * ATOLL_WIRE_HASH) continue;
    for (int i = 0; i < ATOLL_WIRE_HASH; i++) {
      unsigned v = 0;
      sscanf(x->valuestring + 2 * i, "%2x", &v);
      c->rank_hash[r][i] = (uint8_t)v;
    }
  }
  char hh[17];
  hex(c->hash, hh);
  fprintf(stderr, "coordinator: restored from %s: revision %llu, step %u, hash %s; %d islands were members (they re-register by heartbeat)\n",
          c->state_path, (unsigned long long)c->revision, c->last_step, hh, cJSON_GetArraySize(mem));
  cJSON_Delete(s);
  return 0;
}

static void name_of(const coord *c, const char *keyz, const char *addr, char *out, size_t n) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && strcmp(c->m[i].keyz, keyz) == 0) {
      snprintf(out, n, "island %u (key %.8s..., %s)", c->m[i].island, keyz, addr);
      return;
    }
  snprintf(out, n, "peer with key %.8s... at %s", keyz, addr);
}

/* A member is one rank of an island: its key (shared by the island's ranks) and rank. */
static member *by_key(coord *c, const char *keyz, uint32_t rank) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].rank == rank && strcmp(c->m[i].keyz, keyz) == 0) return &c->m[i];
  return NULL;
}

/* An island takes part in a quorum only whole: each of its ranks registered, none behind. */
static int island_whole(const coord *c, uint32_t island) {
  int n = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    const member *m = &c->m[i];
    if (!m->used || m->island != island) continue;
    if (m->joining) return 0;
    n++;
  }
  return n == (int)c->ranks;
}

static int island_ranks(const coord *c, uint32_t island) {
  int n = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) n += c->m[i].used && c->m[i].island == island;
  return n;
}

static void send_to(coord *c, const route *r, atoll_wire_msg *msg) {
  if (atoll_sock_send(c->sock, &c->tx, msg, r->rid, r->rid_len))
    fprintf(stderr, "coordinator: cannot send %s: %s\n", atoll_wire_type_name(msg->type), zmq_strerror(zmq_errno()));
}

static void send_text(coord *c, const route *r, atoll_wire_type type, const char *text) {
  atoll_wire_msg msg = {.type = type};
  snprintf(msg.u.text, sizeof msg.u.text, "%s", text);
  send_to(c, r, &msg);
}

static int in_group(const coord *c, const group *g, const member *m) {
  for (int j = 0; j < g->n; j++)
    if (&c->m[g->slot[j]] == m && m->gen == g->gen[j]) return j;
  return -1;
}
static member *group_member(coord *c, const group *g, int j) {
  member *m = &c->m[g->slot[j]];
  return m->used && m->gen == g->gen[j] ? m : NULL;
}

static void send_sync(coord *c, const route *r, atoll_wire_type type, uint32_t step, uint32_t frag, uint64_t v,
                      const uint8_t *hash) {
  atoll_wire_msg msg = {.type = type};
  msg.u.sync = (atoll_wire_sync){step, frag, v, {0}, 0};
  if (hash) memcpy(msg.u.sync.hash, hash, ATOLL_WIRE_HASH);
  send_to(c, r, &msg);
}

/* The exchange in flight is abandoned: every member still alive is told to discard
 * what it received and retry (its input is untouched until GO). */
static void abort_exchange(coord *c, const char *why) {
  if (!c->xq.open) return;
  for (int j = 0; j < c->xq.n; j++) {
    member *m = group_member(c, &c->xq, j);
    if (m) send_sync(c, &m->ready_to, ATOLL_WIRE_ABORT, c->xq.step, c->xq.frag, c->xq.id, NULL);
  }
  fprintf(stderr, "coordinator: step %u fragment %u: exchange %llu aborted (%s); the others retry\n", c->xq.step,
          c->xq.frag, (unsigned long long)c->xq.id, why);
  c->xq.open = 0;
}

/* A member ready for an exchange at or before the step the others committed (or are
 * committing) did not apply that step: it is behind and joins at the next commit. */
static void mark_behind(coord *c, member *m, uint32_t step) {
  if (m->joining) return;
  fprintf(stderr, "coordinator: island %u is behind (ready for step %u, step %u is committed or committing): it joins at the next commit\n",
          m->island, m->ready_step, step);
  for (int i = 0; i < MAX_MEMBERS; i++) { /* the island is one unit: all its ranks join */
    member *o = &c->m[i];
    if (!o->used || o->island != m->island || o->joining) continue;
    o->joining = 1;
    if (o->ready) send_text(c, &o->ready_to, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
  }
}

/* Rank r's QUORUM: the rank-r members of the exchange, in island order. */
static void send_quorum(coord *c, member *m) {
  static atoll_wire_member mine[MAX_MEMBERS];
  uint32_t k = 0;
  for (int j = 0; j < c->xq.n; j++)
    if (c->qrank[j] == m->rank) mine[k++] = c->qmem[j];
  atoll_wire_msg msg = {.type = ATOLL_WIRE_QUORUM};
  msg.u.quorum = (atoll_wire_quorum){c->xq.step, c->xq.frag, c->revision, c->xq.id, {0}, k, mine};
  memcpy(msg.u.quorum.hash, c->hash, ATOLL_WIRE_HASH);
  send_to(c, &m->ready_to, &msg);
}

/* Forms the quorum when every live member is ready for the same exchange. */
static void try_quorum(coord *c) {
  if (c->xq.open) return;
  int n = 0, islands = 0, ready = 0, differ = 0;
  uint32_t step = 0, frag = 0, hi_step = 0, hi_frag = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (c->m[i].used && c->m[i].joining == 2) { /* fetching the state: it is about to be a member */
      /* the ready ones wait for it, told so (a WAIT extends their bound on the wait) */
      char text[120];
      snprintf(text, sizeof text, "waiting for island %u to fetch the committed state", c->m[i].island);
      for (int j = 0; j < MAX_MEMBERS; j++)
        if (c->m[j].used && c->m[j].ready && !c->m[j].joining && !c->m[j].waiting_told) {
          send_text(c, &c->m[j].ready_to, ATOLL_WIRE_WAIT, text);
          c->m[j].waiting_told = 1;
        }
      return;
    }
    if (!c->m[i].used || c->m[i].joining) continue;
    if (!island_whole(c, c->m[i].island)) { /* a part of an island waits for the rest of it */
      if (c->m[i].ready && !c->m[i].waiting_told) {
        char text[160];
        if (island_ranks(c, c->m[i].island) == (int)c->ranks)
          snprintf(text, sizeof text, "island %u: a rank of it is behind; waiting for it to join", c->m[i].island);
        else
          snprintf(text, sizeof text, "island %u: %d of its %u ranks registered; waiting for the others", c->m[i].island,
                   island_ranks(c, c->m[i].island), c->ranks);
        send_text(c, &c->m[i].ready_to, ATOLL_WIRE_WAIT, text);
        c->m[i].waiting_told = 1;
      }
      continue;
    }
    n++;
    islands += c->m[i].rank == 0;
    if (!c->m[i].ready) return;
    uint32_t s = c->m[i].ready_step, f = c->m[i].ready_frag;
    if (ready++ == 0) step = hi_step = s, frag = hi_frag = f;
    else if (s != step || f != frag) differ = 1;
    if (s > hi_step || (s == hi_step && f > hi_frag)) hi_step = s, hi_frag = f;
  }
  if (n == 0) return;
  if (differ) { /* those behind the most advanced fetch the state at the next commit */
    for (int i = 0; i < MAX_MEMBERS; i++) {
      member *m = &c->m[i];
      if (!m->used || m->joining || !island_whole(c, m->island) || (m->ready_step == hi_step && m->ready_frag == hi_frag))
        continue;
      fprintf(stderr, "coordinator: island %u is behind (ready for step %u, the others for step %u): it joins at the next commit\n",
              m->island, m->ready_step, hi_step);
      for (int o = 0; o < MAX_MEMBERS; o++) /* all its ranks */
        if (c->m[o].used && c->m[o].island == m->island && !c->m[o].joining) {
          c->m[o].joining = 1;
          if (c->m[o].ready) send_text(c, &c->m[o].ready_to, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
        }
    }
    try_quorum(c);
    return;
  }
  /* after a restart, the islands of the state file get a grace to re-register */
  if (n < c->restored_members && atoll_net_now() - c->started < c->cfg->island_timeout) return;
  if (islands < c->cfg->min_islands) {
    char text[200];
    snprintf(text, sizeof text, "waiting for islands: %d present, at least %d needed (--min-islands)", islands, c->cfg->min_islands);
    int told = 0;
    for (int i = 0; i < MAX_MEMBERS; i++)
      if (c->m[i].used && !c->m[i].waiting_told) {
        send_text(c, &c->m[i].ready_to, ATOLL_WIRE_WAIT, text);
        c->m[i].waiting_told = told = 1;
      }
    if (told) fprintf(stderr, "coordinator: step %u: %s\n", step, text);
    return;
  }
  group *g = &c->xq;
  memset(g, 0, sizeof *g);
  int k = 0;
  for (uint32_t id = 0; id < ATOLL_WIRE_MAX_MEMBERS && k < n; id++)
    for (int i = 0; i < MAX_MEMBERS; i++)
      if (c->m[i].used && !c->m[i].joining && c->m[i].island == id && island_whole(c, id)) {
        c->qrank[k] = c->m[i].rank;
        c->qmem[k].island = id;
        memcpy(c->qmem[k].key, c->m[i].key, ATOLL_KEY_BYTES);
        snprintf(c->qmem[k].endpoint, sizeof c->qmem[k].endpoint, "%s", c->m[i].endpoint);
        g->slot[k] = i;
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
    send_quorum(c, m);
    m->ready = m->waiting_told = 0;
  }
}

/* Every member of the exchange holds every piece: each may apply it (GO). */
static void try_go(coord *c) {
  if (!c->xq.open) return;
  for (int j = 0; j < c->xq.n; j++)
    if (!c->xq.done[j]) return;
  for (int j = 0; j < c->xq.n; j++) {
    member *m = group_member(c, &c->xq, j);
    if (m) send_sync(c, &m->ready_to, ATOLL_WIRE_GO, c->xq.step, c->xq.frag, c->xq.id, NULL);
  }
  c->go_id = c->xq.id;
  c->xq.open = 0;
  int islands = c->xq.n / (c->ranks ? (int)c->ranks : 1);
  if (c->last_members != islands)
    fprintf(stderr, "coordinator: step %u: %d islands in the exchange (were %d)\n", c->xq.step, islands, c->last_members);
  c->last_members = islands;
  c->cq = c->xq; /* its members commit the step */
}

/* Commits the step when every live member that applied it sent its hash. Each rank
 * of an island hashes its own slice: the members of one rank must agree, and the
 * committed hash is that of the run's global weights: rank 0's hash with one rank per
 * island, else the BLAKE2b-256 of the ranks' hashes in rank order. */
static void try_commit(coord *c) {
  group *g = &c->cq;
  int n = 0;
  member *first[MAX_MEMBERS] = {0}; /* per rank: the first member (island order) that committed */
  for (int j = 0; j < g->n; j++) {
    member *m = group_member(c, g, j);
    if (!m) continue; /* left after applying: the others commit without it */
    if (m->joining) continue; /* behind (it did not apply the exchange): it fetches this commit's state */
    if (!m->committed || m->commit_step != g->step) {
      if (!(m->ready && m->ready_step <= g->step)) return;
      /* ready for an exchange of this step or before: it never got the GO of this
       * step's exchange (a coordinator restart between the GO messages), so it is
       * behind the members that applied it, and joins with this commit's state */
      mark_behind(c, m, g->step);
      continue;
    }
    if (!first[m->rank]) first[m->rank] = m;
    n += m->rank == 0;
  }
  for (uint32_t r = 0; r < (c->ranks ? c->ranks : 1); r++)
    if (!first[r]) return;
  int same = 1;
  member *odd = NULL;
  for (int j = 0; j < g->n; j++) {
    member *m = group_member(c, g, j);
    if (m && !m->joining && memcmp(m->commit_hash, first[m->rank]->commit_hash, ATOLL_WIRE_HASH) != 0) same = 0, odd = m;
  }
  char text[300], h[17];
  uint8_t whole[ATOLL_WIRE_HASH];
  if (c->ranks <= 1) memcpy(whole, first[0]->commit_hash, ATOLL_WIRE_HASH);
  else {
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, ATOLL_WIRE_HASH);
    for (uint32_t r = 0; r < c->ranks; r++) crypto_generichash_update(&st, first[r]->commit_hash, ATOLL_WIRE_HASH);
    crypto_generichash_final(&st, whole, ATOLL_WIRE_HASH);
  }
  if (same) {
    c->revision++;
    c->last_step = g->step;
    memcpy(c->hash, whole, ATOLL_WIRE_HASH);
    for (uint32_t r = 0; r < (c->ranks ? c->ranks : 1); r++) memcpy(c->rank_hash[r], first[r]->commit_hash, ATOLL_WIRE_HASH);
    save_state(c);
  }
  hex(whole, h);
  /* joining islands that asked (READY with each of their ranks) fetch this commit's
   * state: rank r from the first member of rank r */
  static atoll_wire_member joiners[MAX_MEMBERS];
  int njoin[MAX_MEMBERS] = {0}, islands_joining = 0;
  uint32_t jrank[MAX_MEMBERS];
  int nj = 0;
  for (uint32_t id = 0; same && id < ATOLL_WIRE_MAX_MEMBERS; id++) { /* in island order */
    int ranks = 0, asking = 0;
    for (int i = 0; i < MAX_MEMBERS; i++) {
      member *m = &c->m[i];
      if (!m->used || m->island != id) continue;
      ranks++;
      asking += m->joining == 1 && m->ready;
    }
    if (ranks == 0 || ranks != (int)c->ranks || asking != ranks) continue; /* every rank of it asks, or none joins */
    islands_joining++;
    for (int i = 0; i < MAX_MEMBERS; i++) {
      member *m = &c->m[i];
      if (!m->used || m->island != id) continue;
      member *donor = first[m->rank];
      joiners[nj].island = m->island;
      memcpy(joiners[nj].key, m->key, ATOLL_KEY_BYTES);
      snprintf(joiners[nj].endpoint, sizeof joiners[0].endpoint, "%s", m->endpoint);
      jrank[nj++] = m->rank;
      njoin[m->rank]++;
      atoll_wire_member dm;
      dm.island = donor->island;
      memcpy(dm.key, donor->key, ATOLL_KEY_BYTES);
      snprintf(dm.endpoint, sizeof dm.endpoint, "%s", donor->endpoint);
      atoll_wire_msg sf = {.type = ATOLL_WIRE_STATE_FROM};
      sf.u.quorum = (atoll_wire_quorum){g->step, 0, c->revision, c->revision, {0}, 1, &dm};
      memcpy(sf.u.quorum.hash, c->rank_hash[m->rank], ATOLL_WIRE_HASH);
      send_to(c, &m->ready_to, &sf);
      m->joining = 2;
      c->n_state_joins += m->rank == 0;
      m->state_sent = atoll_net_now();
      m->ready = 0;
      if (m->rank == 0)
        fprintf(stderr, "coordinator: island %u joins at step %u: fetches revision %llu (hash %s) from island %u\n", m->island,
                g->step, (unsigned long long)c->revision, h, donor->island);
    }
  }
  (void)islands_joining;
  for (int j = 0; j < g->n; j++) {
    member *m = group_member(c, g, j);
    if (!m || m->joining) continue;
    if (same) {
      int donor = m == first[m->rank];
      send_sync(c, &m->commit_to, ATOLL_WIRE_COMMITTED, g->step, donor ? (uint32_t)njoin[m->rank] : 0, c->revision,
                c->rank_hash[m->rank]);
      if (donor && njoin[m->rank]) {
        static atoll_wire_member mine[MAX_MEMBERS];
        uint32_t k = 0;
        for (int t = 0; t < nj; t++)
          if (jrank[t] == m->rank) mine[k++] = joiners[t];
        atoll_wire_msg feed = {.type = ATOLL_WIRE_FEED};
        feed.u.quorum = (atoll_wire_quorum){g->step, 0, c->revision, c->revision, {0}, k, mine};
        memcpy(feed.u.quorum.hash, c->rank_hash[m->rank], ATOLL_WIRE_HASH);
        send_to(c, &m->commit_to, &feed);
      }
    } else {
      char mh[17], fh[17];
      hex(odd->commit_hash, mh);
      hex(first[odd->rank]->commit_hash, fh);
      snprintf(text, sizeof text, "step %u: the islands' global weights differ (island %u rank %u holds %s, island %u %s)",
               g->step, odd->island, odd->rank, mh, first[odd->rank]->island, fh);
      send_text(c, &m->commit_to, ATOLL_WIRE_ERROR, text);
    }
    m->committed = 0;
  }
  if (same)
    fprintf(stderr, "coordinator: step %u committed: revision %llu, %d islands, hash %s\n", g->step,
            (unsigned long long)c->revision, n, h);
  else
    fprintf(stderr, "coordinator: step %u: hash mismatch between islands; nothing committed\n", g->step);
  g->n = 0;
}

/* Replays: a (session, seq) at or below the last one seen from that session. */
static int replayed(member *m, uint64_t session, uint32_t seq) {
  for (int i = 0; i < SESSIONS; i++)
    if (m->sessions[i] == session && session != 0) {
      if (seq <= m->seqs[i]) return 1;
      m->seqs[i] = seq;
      return 0;
    }
  int i = m->next_session++ % SESSIONS;
  m->sessions[i] = session;
  m->seqs[i] = seq;
  return 0;
}

/* Every island has the same ranks and inner layout (so that rank r's slice is the
 * same part of the model in each): the first rank to register sets them for the run
 * (anew when no member is left); a mismatch is refused with one line, told to it. */
static int layout_refused(coord *c, const char *keyz, const atoll_wire_hello *h, const route *from, const char *addr) {
  if (live(c) == 0) {
    c->ranks = 0;
    memset(c->layout_set, 0, sizeof c->layout_set);
  }
  char text[300] = "";
  if (c->ranks && h->ranks != c->ranks)
    snprintf(text, sizeof text, "island %u has %u rank(s), the run's islands have %u: every island needs the same ranks and inner layout (their slices line up); refused",
             h->island, h->ranks, c->ranks);
  else if (h->rank < MAX_MEMBERS && c->layout_set[h->rank] && c->layouts[h->rank] != h->layout)
    snprintf(text, sizeof text, "island %u rank %u: its inner layout (tp x pp x dp, or the model) differs from the run's islands' (fingerprint %016llx, not %016llx); refused",
             h->island, h->rank, (unsigned long long)h->layout, (unsigned long long)c->layouts[h->rank]);
  else if (h->rank >= MAX_MEMBERS)
    snprintf(text, sizeof text, "island %u rank %u: at most %d ranks per island; refused", h->island, h->rank, MAX_MEMBERS);
  if (!text[0]) {
    c->ranks = h->ranks;
    c->layouts[h->rank] = h->layout;
    c->layout_set[h->rank] = 1;
    return 0;
  }
  if (strcmp(c->refused_key, keyz) != 0 || atoll_net_now() - c->refused_at > 10) { /* heartbeats repeat it */
    fprintf(stderr, "coordinator: %s (key %.8s..., %s)\n", text, keyz, addr);
    snprintf(c->refused_key, sizeof c->refused_key, "%.40s", keyz);
    c->refused_at = atoll_net_now();
  }
  send_text(c, from, ATOLL_WIRE_ERROR, text);
  return 1;
}

static member *register_island(coord *c, const char *keyz, const atoll_wire_hello *h, const route *from, const char *addr) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].island == h->island && strcmp(c->m[i].keyz, keyz) != 0) {
      fprintf(stderr, "coordinator: dropped HELLO from key %.8s... at %s: island %u is held by key %.8s...\n", keyz, addr,
              h->island, c->m[i].keyz);
      return NULL;
    }
  if (layout_refused(c, keyz, h, from, addr)) return NULL;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (c->m[i].used) continue;
    member *m = &c->m[i];
    memset(m, 0, sizeof *m);
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
              addr, h->endpoint, h->step, live(c));
    else
      fprintf(stderr, "coordinator: island %u rank %u of %u joined (key %.8s..., %s, data at %s, step %u); %d members\n",
              h->island, h->rank, h->ranks, keyz, addr, h->endpoint, h->step, live(c));
    save_state(c);
    return m;
  }
  fprintf(stderr, "coordinator: dropped HELLO from island %u: %d members already\n", h->island, MAX_MEMBERS);
  return NULL;
}

static void handle(coord *c, long n, const route *from, const char *keyz, const char *addr) {
  atoll_wire_msg msg;
  static atoll_wire_member scratch[4];
  char why[200], who[200];
  name_of(c, keyz, addr, who, sizeof who);
  if (n == -2) {
    fprintf(stderr, "coordinator: dropped a message from %s: more than one frame\n", who);
    return;
  }
  if (n > (long)ATOLL_WIRE_MAX_CONTROL) {
    fprintf(stderr, "coordinator: dropped a message from %s: oversized (%ld bytes; at most %u)\n", who, n, ATOLL_WIRE_MAX_CONTROL);
    return;
  }
  if (atoll_wire_parse(c->buf, (size_t)n, &msg, scratch, 4, why, sizeof why)) {
    fprintf(stderr, "coordinator: dropped a message from %s: %s\n", who, why);
    return;
  }
  int hello = msg.type == ATOLL_WIRE_HELLO || msg.type == ATOLL_WIRE_HEARTBEAT;
  member *m = by_key(c, keyz, hello ? msg.u.hello.rank : msg.u.sync.rank);
  if (hello) {
    if (!m && !(m = register_island(c, keyz, &msg.u.hello, from, addr))) return;
    if (m->island != msg.u.hello.island) {
      fprintf(stderr, "coordinator: dropped %s from %s: it claims island %u\n", atoll_wire_type_name(msg.type), who,
              msg.u.hello.island);
      return;
    }
  } else if (msg.type != ATOLL_WIRE_READY && msg.type != ATOLL_WIRE_COMMIT && msg.type != ATOLL_WIRE_DONE) {
    fprintf(stderr, "coordinator: dropped a message from %s: %s is not sent to a coordinator\n", who,
            atoll_wire_type_name(msg.type));
    return;
  } else if (!m) {
    fprintf(stderr, "coordinator: dropped %s from %s: not registered (no HELLO)\n", atoll_wire_type_name(msg.type), who);
    return;
  }
  if (replayed(m, msg.session, msg.seq)) {
    fprintf(stderr, "coordinator: dropped %s from %s: replayed (session %016llx, seq %u already seen)\n",
            atoll_wire_type_name(msg.type), who, (unsigned long long)msg.session, msg.seq);
    return;
  }
  m->last_heard = atoll_net_now();
  if (msg.type == ATOLL_WIRE_HELLO) {
    if (m->hello_session && m->hello_session != msg.session) { /* the island's process was restarted */
      fprintf(stderr, "coordinator: island %u restarted (a new process with the same key); it joins anew\n", m->island);
      c->n_restarted++;
      int in_exchange = c->xq.open && in_group(c, &c->xq, m) >= 0;
      char why[96];
      snprintf(why, sizeof why, "island %u restarted", m->island);
      if (in_exchange) abort_exchange(c, why);
      m->gen = ++c->gens; /* no longer the member of any exchange or commit in flight */
      m->ready = m->committed = m->joining = 0;
      try_commit(c);
    }
    m->hello_session = msg.session;
  }
  switch (msg.type) {
  case ATOLL_WIRE_HELLO:
  case ATOLL_WIRE_HEARTBEAT:
    m->step = msg.u.hello.step;
    /* more than one revision behind (a restarted island, or one still fetching when
     * this coordinator restarted): not waited for; it joins when it asks (READY) */
    if (!m->joining && msg.u.hello.revision + 1 < c->revision) {
      m->joining = 1;
      m->ready = 0;
      fprintf(stderr, "coordinator: island %u holds revision %llu, the run is at %llu: it joins when it asks\n", m->island,
              (unsigned long long)msg.u.hello.revision, (unsigned long long)c->revision);
      try_quorum(c);
    }
    snprintf(m->endpoint, sizeof m->endpoint, "%s", msg.u.hello.endpoint);
    break;
  case ATOLL_WIRE_READY: /* islands repeat READY until they get an answer */
    m->ready_to = *from;
    if (c->xq.open && in_group(c, &c->xq, m) >= 0 && c->xq.step == msg.u.sync.step && c->xq.frag == msg.u.sync.fragment) {
      send_quorum(c, m); /* its QUORUM was lost (a restart of the island's socket) */
      break;
    }
    if (!(m->ready && m->ready_step == msg.u.sync.step && m->ready_frag == msg.u.sync.fragment)) m->waiting_told = 0;
    if (c->revision > 0 && (msg.u.sync.revision != c->revision || msg.u.sync.step <= c->last_step ||
                            (c->cq.n > 0 && msg.u.sync.step <= c->cq.step && m->joining))) {
      if (!m->joining) {
        if (msg.u.sync.revision != c->revision)
          fprintf(stderr, "coordinator: island %u holds revision %llu, the run is at %llu: it joins at the next commit\n", m->island,
                  (unsigned long long)msg.u.sync.revision, (unsigned long long)c->revision);
        else
          fprintf(stderr, "coordinator: island %u is behind (ready for step %u, step %u is committed): it joins at the next commit\n",
                  m->island, msg.u.sync.step, c->last_step);
      }
      if (!m->joining || !m->waiting_told) { /* (a WAIT extends the island's bound on its wait) */
        send_text(c, from, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
        m->waiting_told = 1;
      }
      /* told where to fetch the state, it asks again: the fetch failed (the donor died) */
      if (m->joining != 2 || atoll_net_now() - m->state_sent > 2.0) m->joining = 1;
    } else {
      m->joining = 0;
    }
    m->ready = 1;
    m->ready_step = msg.u.sync.step;
    m->ready_frag = msg.u.sync.fragment;
    try_quorum(c);
    break;
  case ATOLL_WIRE_DONE: {
    m->ready_to = *from;
    int j = c->xq.open && c->xq.id == msg.u.sync.revision ? in_group(c, &c->xq, m) : -1;
    if (j >= 0) {
      c->xq.done[j] = 1;
      try_go(c);
    } else if (msg.u.sync.revision == c->go_id && c->go_id) {
      send_sync(c, from, ATOLL_WIRE_GO, msg.u.sync.step, msg.u.sync.fragment, c->go_id, NULL); /* GO was lost */
    } else { /* an exchange this coordinator does not know (it restarted, or aborted it) */
      send_sync(c, from, ATOLL_WIRE_ABORT, msg.u.sync.step, msg.u.sync.fragment, msg.u.sync.revision, NULL);
    }
    break;
  }
  case ATOLL_WIRE_COMMIT:
    m->commit_to = *from;
    if (msg.u.sync.step == c->last_step && c->revision > 0 && memcmp(msg.u.sync.hash, c->rank_hash[m->rank], ATOLL_WIRE_HASH) == 0 &&
        !(c->cq.n > 0 && c->cq.step == msg.u.sync.step)) {
      send_sync(c, from, ATOLL_WIRE_COMMITTED, c->last_step, 0, c->revision, c->rank_hash[m->rank]); /* already committed */
      break;
    }
    m->committed = 1;
    m->commit_step = msg.u.sync.step;
    memcpy(m->commit_hash, msg.u.sync.hash, ATOLL_WIRE_HASH);
    if (c->cq.n == 0 || c->cq.step != msg.u.sync.step) { /* e.g. after a restart: the members that commit */
      group *g = &c->cq;
      memset(g, 0, sizeof *g);
      g->step = msg.u.sync.step;
      for (int i = 0; i < MAX_MEMBERS; i++) {
        member *o = &c->m[i];
        if (o->used && !o->joining && o != m && o->ready && o->ready_step <= msg.u.sync.step)
          mark_behind(c, o, msg.u.sync.step);
        if (o->used && !o->joining) g->slot[g->n] = i, g->gen[g->n++] = o->gen;
      }
    }
    try_commit(c);
    break;
  default: break;
  }
}

/* Islands silent for --island-timeout leave. */
static void expire(coord *c) {
  double now = atoll_net_now();
  int changed = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    if (!m->used || now - m->last_heard <= c->cfg->island_timeout) continue;
    m->used = 0;
    changed = 1;
    c->n_left++;
    if (m->ranks > 1)
      fprintf(stderr, "coordinator: island %u rank %u left (silent for %.1f s, key %.8s...); %d members\n", m->island, m->rank,
              now - m->last_heard, m->keyz, live(c));
    else
      fprintf(stderr, "coordinator: island %u left (silent for %.1f s, key %.8s...); %d members\n", m->island,
              now - m->last_heard, m->keyz, live(c));
    if (c->xq.open && in_group(c, &c->xq, m) < 0) continue;
    char why[96];
    snprintf(why, sizeof why, "island %u left", m->island);
    m->used = 1; /* still a member while the abort is sent to the others */
    abort_exchange(c, why);
    m->used = 0;
  }
  /* a member that is alive but does not finish the exchange in time stalls it: it is
   * dropped (its heartbeats bring it back as a new member) and the others retry */
  /* (twice the silence limit: a member waiting for a dead one is not itself stalled,
   * and the dead one's silence is noticed first) */
  if (c->xq.open && now - c->xq.opened > 2 * c->cfg->island_timeout) {
    char why[160] = "stalled:";
    for (int j = 0; j < c->xq.n; j++) {
      member *m = group_member(c, &c->xq, j);
      if (m && !c->xq.done[j])
        snprintf(why + strlen(why), sizeof why - strlen(why), " island %u", m->island);
    }
    abort_exchange(c, why);
    for (int j = 0; j < c->xq.n; j++) {
      member *m = group_member(c, &c->xq, j);
      if (m && !c->xq.done[j]) {
        m->used = 0;
        changed = 1;
        c->n_left++;
        fprintf(stderr, "coordinator: island %u left (stalled in exchange %llu for %.1f s); %d members\n", m->island,
                (unsigned long long)c->xq.id, now - c->xq.opened, live(c));
      }
    }
  }
  if (changed) {
    save_state(c);
    try_commit(c);
    try_quorum(c);
  }
}

int atoll_coordinator_run(const atoll_coordinator_config *cfg, const volatile sig_atomic_t *stop, atoll_err *err) {
  if (sodium_init() < 0) return atoll_fail(err, "libsodium cannot start");
  coord *c = calloc(1, sizeof *c);
  if (!c) return atoll_fail(err, "out of memory");
  c->cfg = cfg;
  if (cfg->state) snprintf(c->state_path, sizeof c->state_path, "%s", cfg->state);
  else snprintf(c->state_path, sizeof c->state_path, "%s/coordinator.json", cfg->keys);
  int rc = -1;
  uint8_t secret[ATOLL_KEY_BYTES], pub[ATOLL_KEY_BYTES];
  char path[4200];
  snprintf(path, sizeof path, "%s/key.secret", cfg->keys);
  if (atoll_key_read_secret(path, secret, pub, err) || load_state(c, err)) goto done;
  atoll_sender_init(&c->tx);
  c->ctx = zmq_ctx_new();
  if (atoll_zap_start(&c->zap, c->ctx, "coordinator", 0, err)) goto done;
  snprintf(path, sizeof path, "%s/allowed", cfg->keys);
  int allowed = atoll_zap_allow_dir(c->zap, path, err);
  if (allowed < 0) goto done;
  if (allowed == 0) {
    atoll_fail(err, "--keys %s: no island keys in %s/ (copy each island's key.pub there, as NAME.pub)", cfg->keys, path);
    goto done;
  }
  c->sock = atoll_sock_server(c->ctx, ZMQ_ROUTER, secret, err);
  if (!c->sock) goto done;
  int handover = 1; /* a restarted island takes over its routing id */
  zmq_setsockopt(c->sock, ZMQ_ROUTER_HANDOVER, &handover, sizeof handover);
  if (zmq_bind(c->sock, cfg->listen)) {
    atoll_fail(err, "--listen %s: %s", cfg->listen, zmq_strerror(zmq_errno()));
    goto done;
  }
  char pz[ATOLL_KEY_Z85 + 1];
  atoll_key_z85(pub, pz);
  fprintf(stderr, "coordinator: listening on %s (key %s), %d island keys allowed, min islands %d, island timeout %g s\n",
          cfg->listen, pz, allowed, cfg->min_islands, cfg->island_timeout);
  double start = atoll_net_now();
  c->started = start;
  while (!(stop && *stop) && !(cfg->run_seconds > 0 && atoll_net_now() - start > cfg->run_seconds)) {
    route from;
    char keyz[64], addr[64];
    long n = atoll_sock_recv(c->sock, c->buf, sizeof c->buf, from.rid, &from.rid_len, keyz, addr, 100);
    if (n >= 0 || n == -2) handle(c, n, &from, keyz, addr);
    expire(c);
  }
  fprintf(stderr, "coordinator: stopping at revision %llu (step %u); members registered %llu, left %llu, restarted %llu; islands joined with the committed state %llu\n",
          (unsigned long long)c->revision, c->last_step, (unsigned long long)c->n_registered, (unsigned long long)c->n_left,
          (unsigned long long)c->n_restarted, (unsigned long long)c->n_state_joins);
  save_state(c);
  rc = 0;
done:
  if (c->sock) zmq_close(c->sock);
  atoll_zap_stop(c->zap);
  if (c->ctx) zmq_ctx_term(c->ctx);
  free(c);
  return rc;
}

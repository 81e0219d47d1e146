/* The islands' coordinator (coordinator.h). One thread: a ROUTER socket polled every
 * 100 ms; membership timeouts are checked between messages. */
#include "net/coordinator.h"

#include "core/fs.h"
#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"
#include "net/zap.h"

#include <cjson/cJSON.h>
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
  atoll_wire_member qmem[MAX_MEMBERS]; /* the open exchange's QUORUM, resent on a repeated READY */
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
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (!c->m[i].used) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "island", c->m[i].island);
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

static member *by_key(coord *c, const char *keyz) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && strcmp(c->m[i].keyz, keyz) == 0) return &c->m[i];
  return NULL;
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
  msg.u.sync = (atoll_wire_sync){step, frag, v, {0}};
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

static void send_quorum(coord *c, member *m) {
  atoll_wire_msg msg = {.type = ATOLL_WIRE_QUORUM};
  msg.u.quorum = (atoll_wire_quorum){c->xq.step, c->xq.frag, c->revision, c->xq.id, {0}, (uint32_t)c->xq.n, c->qmem};
  memcpy(msg.u.quorum.hash, c->hash, ATOLL_WIRE_HASH);
  send_to(c, &m->ready_to, &msg);
}

/* Forms the quorum when every live member is ready for the same exchange. */
static void try_quorum(coord *c) {
  if (c->xq.open) return;
  int n = 0, ready = 0, differ = 0;
  uint32_t step = 0, frag = 0, hi_step = 0, hi_frag = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (c->m[i].used && c->m[i].joining == 2) return; /* fetching the state: it is about to be a member */
    if (!c->m[i].used || c->m[i].joining) continue;
    n++;
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
      if (!m->used || m->joining || (m->ready_step == hi_step && m->ready_frag == hi_frag)) continue;
      m->joining = 1;
      send_text(c, &m->ready_to, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
      fprintf(stderr, "coordinator: island %u is behind (ready for step %u, the others for step %u): it joins at the next commit\n",
              m->island, m->ready_step, hi_step);
    }
    try_quorum(c);
    return;
  }
  /* after a restart, the islands of the state file get a grace to re-register */
  if (n < c->restored_members && atoll_net_now() - c->started < c->cfg->island_timeout) return;
  if (n < c->cfg->min_islands) {
    char text[200];
    snprintf(text, sizeof text, "waiting for islands: %d present, at least %d needed (--min-islands)", n, c->cfg->min_islands);
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
      if (c->m[i].used && !c->m[i].joining && c->m[i].island == id) {
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
  if (c->last_members != c->xq.n)
    fprintf(stderr, "coordinator: step %u: %d islands in the exchange (were %d)\n", c->xq.step, c->xq.n, c->last_members);
  c->last_members = c->xq.n;
  c->cq = c->xq; /* its members commit the step */
}

/* Commits the step when every live member that applied it sent its hash. */
static void try_commit(coord *c) {
  group *g = &c->cq;
  int n = 0;
  member *first = NULL;
  for (int j = 0; j < g->n; j++) {
    member *m = group_member(c, g, j);
    if (!m) continue; /* left after applying: the others commit without it */
    if (!m->committed || m->commit_step != g->step) return;
    if (!first) first = m;
    n++;
  }
  if (!first) return;
  int same = 1;
  for (int j = 0; j < g->n; j++) {
    member *m = group_member(c, g, j);
    if (m) same &= memcmp(m->commit_hash, first->commit_hash, ATOLL_WIRE_HASH) == 0;
  }
  char text[300], h[17];
  if (same) {
    c->revision++;
    c->last_step = g->step;
    memcpy(c->hash, first->commit_hash, ATOLL_WIRE_HASH);
    save_state(c);
  }
  hex(first->commit_hash, h);
  /* joining islands that asked (READY) fetch this commit's state from the first member */
  atoll_wire_member joiners[MAX_MEMBERS], donor;
  int njoin = 0;
  for (uint32_t id = 0; same && id < ATOLL_WIRE_MAX_MEMBERS; id++) /* in island order */
    for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    if (!m->used || m->joining != 1 || !m->ready || m->island != id) continue;
    joiners[njoin].island = m->island;
    memcpy(joiners[njoin].key, m->key, ATOLL_KEY_BYTES);
    snprintf(joiners[njoin++].endpoint, sizeof joiners[0].endpoint, "%s", m->endpoint);
  }
  if (njoin) {
    donor.island = first->island;
    memcpy(donor.key, first->key, ATOLL_KEY_BYTES);
    snprintf(donor.endpoint, sizeof donor.endpoint, "%s", first->endpoint);
    for (int i = 0; i < MAX_MEMBERS; i++) {
      member *m = &c->m[i];
      if (!m->used || m->joining != 1 || !m->ready) continue;
      atoll_wire_msg sf = {.type = ATOLL_WIRE_STATE_FROM};
      sf.u.quorum = (atoll_wire_quorum){g->step, 0, c->revision, c->revision, {0}, 1, &donor};
      memcpy(sf.u.quorum.hash, c->hash, ATOLL_WIRE_HASH);
      send_to(c, &m->ready_to, &sf);
      m->joining = 2;
      m->ready = 0;
      fprintf(stderr, "coordinator: island %u joins at step %u: fetches revision %llu (hash %s) from island %u\n", m->island,
              g->step, (unsigned long long)c->revision, h, donor.island);
    }
  }
  for (int j = 0; j < g->n; j++) {
    member *m = group_member(c, g, j);
    if (!m) continue;
    if (same) {
      send_sync(c, &m->commit_to, ATOLL_WIRE_COMMITTED, g->step, m == first ? (uint32_t)njoin : 0, c->revision, c->hash);
      if (m == first && njoin) {
        atoll_wire_msg feed = {.type = ATOLL_WIRE_FEED};
        feed.u.quorum = (atoll_wire_quorum){g->step, 0, c->revision, c->revision, {0}, (uint32_t)njoin, joiners};
        memcpy(feed.u.quorum.hash, c->hash, ATOLL_WIRE_HASH);
        send_to(c, &m->commit_to, &feed);
      }
    } else {
      char mh[17];
      hex(m->commit_hash, mh);
      snprintf(text, sizeof text, "step %u: the islands' global weights differ (island %u holds %s, island %u %s)",
               g->step, m->island, mh, first->island, h);
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

static member *register_island(coord *c, const char *keyz, const atoll_wire_hello *h, const char *addr) {
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && c->m[i].island == h->island && strcmp(c->m[i].keyz, keyz) != 0) {
      fprintf(stderr, "coordinator: dropped HELLO from key %.8s... at %s: island %u is held by key %.8s...\n", keyz, addr,
              h->island, c->m[i].keyz);
      return NULL;
    }
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (c->m[i].used) continue;
    member *m = &c->m[i];
    memset(m, 0, sizeof *m);
    m->used = 1;
    m->gen = ++c->gens;
    snprintf(m->keyz, sizeof m->keyz, "%.40s", keyz);
    zmq_z85_decode(m->key, m->keyz);
    m->island = h->island;
    snprintf(m->endpoint, sizeof m->endpoint, "%s", h->endpoint);
    fprintf(stderr, "coordinator: island %u joined (key %.8s..., %s, data at %s, step %u); %d members\n", h->island, keyz,
            addr, h->endpoint, h->step, live(c));
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
  member *m = by_key(c, keyz);
  if (msg.type == ATOLL_WIRE_HELLO || msg.type == ATOLL_WIRE_HEARTBEAT) {
    if (!m && !(m = register_island(c, keyz, &msg.u.hello, addr))) return;
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
    if (c->revision > 0 && msg.u.sync.revision != c->revision) {
      if (!m->joining) {
        fprintf(stderr, "coordinator: island %u holds revision %llu, the run is at %llu: it joins at the next commit\n", m->island,
                (unsigned long long)msg.u.sync.revision, (unsigned long long)c->revision);
        send_text(c, from, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
      }
      if (m->joining != 2) m->joining = 1;
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
    if (msg.u.sync.step == c->last_step && c->revision > 0 && memcmp(msg.u.sync.hash, c->hash, ATOLL_WIRE_HASH) == 0 &&
        !(c->cq.n > 0 && c->cq.step == msg.u.sync.step)) {
      send_sync(c, from, ATOLL_WIRE_COMMITTED, c->last_step, 0, c->revision, c->hash); /* already committed */
      break;
    }
    m->committed = 1;
    m->commit_step = msg.u.sync.step;
    memcpy(m->commit_hash, msg.u.sync.hash, ATOLL_WIRE_HASH);
    if (c->cq.n == 0 || c->cq.step != msg.u.sync.step) { /* e.g. after a restart: the members that commit */
      group *g = &c->cq;
      memset(g, 0, sizeof *g);
      g->step = msg.u.sync.step;
      for (int i = 0; i < MAX_MEMBERS; i++)
        if (c->m[i].used && !c->m[i].joining) g->slot[g->n] = i, g->gen[g->n++] = c->m[i].gen;
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
  rc = 0;
done:
  if (c->sock) zmq_close(c->sock);
  atoll_zap_stop(c->zap);
  if (c->ctx) zmq_ctx_term(c->ctx);
  free(c);
  return rc;
}

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
} member;

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
  int quorum[MAX_MEMBERS], quorum_n; /* member slots of the last quorum */
  uint32_t quorum_step;
  int quorum_open;                   /* waiting for its commits */
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

/* Forms the quorum when every live member is ready for the same exchange. */
static void try_quorum(coord *c) {
  int n = 0, ready = 0;
  uint32_t step = 0, frag = 0;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (!c->m[i].used) continue;
    n++;
    if (!c->m[i].ready) return;
    if (ready++ == 0) step = c->m[i].ready_step, frag = c->m[i].ready_frag;
    else if (c->m[i].ready_step != step || c->m[i].ready_frag != frag) return;
  }
  if (n == 0) return;
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
  atoll_wire_member mem[MAX_MEMBERS];
  int slot[MAX_MEMBERS];
  int k = 0;
  for (uint32_t id = 0; id < ATOLL_WIRE_MAX_MEMBERS && k < n; id++)
    for (int i = 0; i < MAX_MEMBERS; i++)
      if (c->m[i].used && c->m[i].island == id) {
        mem[k].island = id;
        memcpy(mem[k].key, c->m[i].key, ATOLL_KEY_BYTES);
        snprintf(mem[k].endpoint, sizeof mem[k].endpoint, "%s", c->m[i].endpoint);
        slot[k++] = i;
      }
  atoll_wire_msg msg = {.type = ATOLL_WIRE_QUORUM};
  msg.u.quorum = (atoll_wire_quorum){step, frag, c->revision, (uint32_t)k, mem};
  for (int j = 0; j < k; j++) {
    member *m = &c->m[slot[j]];
    send_to(c, &m->ready_to, &msg);
    m->ready = m->waiting_told = 0;
    c->quorum[j] = slot[j];
  }
  c->quorum_n = k;
  c->quorum_step = step;
  c->quorum_open = 1;
}

/* Commits the step when every member of its quorum sent its hash. */
static void try_commit(coord *c) {
  if (!c->quorum_open) return;
  for (int j = 0; j < c->quorum_n; j++) {
    member *m = &c->m[c->quorum[j]];
    if (!m->used) { /* a member left: the islands' exchange times out and retries */
      c->quorum_open = 0;
      return;
    }
    if (!m->committed || m->commit_step != c->quorum_step) return;
  }
  member *first = &c->m[c->quorum[0]];
  int same = 1;
  for (int j = 1; j < c->quorum_n; j++) same &= memcmp(c->m[c->quorum[j]].commit_hash, first->commit_hash, ATOLL_WIRE_HASH) == 0;
  char text[300], h[17];
  if (same) {
    c->revision++;
    c->last_step = c->quorum_step;
    memcpy(c->hash, first->commit_hash, ATOLL_WIRE_HASH);
    save_state(c);
  }
  hex(first->commit_hash, h);
  atoll_wire_msg ok = {.type = ATOLL_WIRE_COMMITTED};
  ok.u.sync = (atoll_wire_sync){c->quorum_step, 0, c->revision, {0}};
  memcpy(ok.u.sync.hash, c->hash, ATOLL_WIRE_HASH);
  for (int j = 0; j < c->quorum_n; j++) {
    member *m = &c->m[c->quorum[j]];
    if (same) {
      send_to(c, &m->commit_to, &ok);
    } else {
      char mh[17];
      hex(m->commit_hash, mh);
      snprintf(text, sizeof text, "step %u: the islands' global weights differ (island %u holds %s, island %u %s)",
               c->quorum_step, m->island, mh, first->island, h);
      send_text(c, &m->commit_to, ATOLL_WIRE_ERROR, text);
    }
    m->committed = 0;
  }
  if (same)
    fprintf(stderr, "coordinator: step %u committed: revision %llu, %d islands, hash %s\n", c->quorum_step,
            (unsigned long long)c->revision, c->quorum_n, h);
  else
    fprintf(stderr, "coordinator: step %u: hash mismatch between islands; nothing committed\n", c->quorum_step);
  c->quorum_open = 0;
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
  } else if (msg.type != ATOLL_WIRE_READY && msg.type != ATOLL_WIRE_COMMIT) {
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
  switch (msg.type) {
  case ATOLL_WIRE_HELLO:
  case ATOLL_WIRE_HEARTBEAT:
    m->step = msg.u.hello.step;
    snprintf(m->endpoint, sizeof m->endpoint, "%s", msg.u.hello.endpoint);
    break;
  case ATOLL_WIRE_READY:
    m->ready = 1;
    m->ready_step = msg.u.sync.step;
    m->ready_frag = msg.u.sync.fragment;
    m->ready_to = *from;
    m->waiting_told = 0;
    try_quorum(c);
    break;
  case ATOLL_WIRE_COMMIT:
    m->committed = 1;
    m->commit_step = msg.u.sync.step;
    memcpy(m->commit_hash, msg.u.sync.hash, ATOLL_WIRE_HASH);
    m->commit_to = *from;
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

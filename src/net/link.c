/* An island's network link (link.h): one job, an island's side of the islands
 * protocol, in three parts that share the private atoll_link struct and the
 * coordinator session (coord_poll, coord_ask) below:
 *   - the session: open, heartbeat thread, poll and ask the coordinator, commit;
 *   - the exchange: peers, chunks and the two-phase attempt (attempt_setup .. attempt);
 *   - the state transfer: fetch_state for a joining island; send_state_to for its
 *     donor, after a commit (feed_state) or while it waits for an exchange (coord_ask).
 * It stays one file (about 850 lines) for now because splitting it means moving that struct
 * and the session helpers into an internal header, as coordinator_int.h did for the
 * coordinator; that split is the next step, not done at the end of the session that
 * last changed it (it needs the islands chaos and WAN tests rerun on a quiet machine). */
#include "net/link.h"

#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"
#include "net/zap.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define MAX_CHUNK (1u << 20)

/* Chunk size of a piece of qb bytes: about a sixteenth of it (so that even small
 * pieces spread over the streams), whole 4 KiB (at least one: a rank of a multi-rank
 * island may hold nothing of a fragment, qb = 0), at most 1 MiB. Sender and receiver
 * derive it alike. */
static size_t chunk_of(size_t qb) {
  size_t c = ((qb + 15) / 16 + 4095) / 4096 * 4096;
  return c < 4096 ? 4096 : c < MAX_CHUNK ? c : MAX_CHUNK;
}
#define MAX_PEERS 256
#define MAX_STREAMS 64

typedef struct {
  int used;
  uint32_t island;
  uint8_t key[ATOLL_KEY_BYTES];
  char endpoint[ATOLL_WIRE_MAX_ENDPOINT + 1];
  void *push[MAX_STREAMS];
  atoll_sender tx;
  int broken; /* a send failed: its sockets are made anew before the next use */
  uint64_t qid; /* the last quorum this peer was used in */
  uint8_t again[5]; /* per phase: its sockets were made anew once in this attempt */
} peer;

struct atoll_link {
  atoll_link_config cfg;
  char join[256], listen[256];
  void *ctx, *coord, *pull;
  atoll_zap *zap;
  atoll_sender coord_tx;
  uint8_t pub[ATOLL_KEY_BYTES], sec[ATOLL_KEY_BYTES], cpub[ATOLL_KEY_BYTES];
  pthread_t hb;
  int hb_started;
  atomic_int hb_stop;
  atomic_uint step;
  atomic_ullong hb_revision; /* what heartbeats report */
  uint64_t revision;
  atoll_link_stats stats;
  uint64_t hb_bytes;
  peer peers[MAX_PEERS];
  atoll_wire_member members[MAX_PEERS];
  uint8_t *rbuf;
  /* exchange scratch, each with its capacity */
  size_t cap_bytes, cap_mine, cap_got, cap_floats;
  uint8_t *send, *recv1, *recv2, *mine2, *got;
  double transfer_s; /* the last attempt's time from QUORUM to holding every piece */
  uint64_t transfer_b; /* and the bytes it sent to its peers meanwhile */
  float *sum, *decoded;
  int waited_told;
  const volatile sig_atomic_t *stop; /* NULL, or the run's stop flag */
  float *global, *momentum; /* the island's outer state (atoll_link_bind) */
  size_t state_n;
  uint32_t joined_step;
  uint64_t joined_from;  /* the revision held before the last join (atoll_link_unjoin) */
  double join_t0;        /* when the failed fetches began (0: none pending) */
  int fetches;           /* fetches begun (the test hook fails the first) */
  uint64_t last_qid; /* this island's previous quorum */
};

void atoll_link_state_hash(const atoll_link *l, const float *global, size_t n, uint8_t out[32]) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, NULL, 0, 32);
  crypto_generichash_update(&st, (const uint8_t *)global, n * sizeof(float));
  if (l->momentum && l->state_n == n) crypto_generichash_update(&st, (const uint8_t *)l->momentum, n * sizeof(float));
  crypto_generichash_final(&st, out, 32);
}

void atoll_link_bind(atoll_link *l, float *global, float *momentum, size_t n) {
  l->global = global;
  l->momentum = momentum;
  l->state_n = n;
}

uint32_t atoll_link_joined_step(const atoll_link *l) { return l->joined_step; }

/* ---------------------------------------------------------------- heartbeat --- */

static void *heartbeat_main(void *arg) {
  atoll_link *l = arg;
  atoll_err err;
  void *s = atoll_sock_client(l->ctx, ZMQ_DEALER, l->pub, l->sec, l->cpub, &err);
  if (!s) return NULL;
  if (zmq_connect(s, l->join)) {
    zmq_close(s);
    return NULL;
  }
  atoll_sender tx;
  atoll_sender_init(&tx);
  uint8_t junk[4096];
  double next = 0;
  while (!atomic_load(&l->hb_stop)) {
    if (atoll_net_now() >= next) {
      atoll_wire_msg m = {.type = ATOLL_WIRE_HEARTBEAT};
      m.u.hello.island = l->cfg.island;
      m.u.hello.step = atomic_load(&l->step);
      m.u.hello.revision = atomic_load(&l->hb_revision);
      m.u.hello.rank = l->cfg.rank, m.u.hello.ranks = l->cfg.ranks, m.u.hello.layout = l->cfg.layout;
      snprintf(m.u.hello.endpoint, sizeof m.u.hello.endpoint, "%s", l->listen);
      atoll_sock_send_within(s, &tx, &m, NULL, 0, 200); /* the coordinator may be down: the next one follows */
      next = atoll_net_now() + l->cfg.heartbeat;
    }
    atoll_sock_recv(s, junk, sizeof junk, NULL, NULL, NULL, NULL, 50); /* nothing is sent back; drain */
  }
  l->hb_bytes = tx.bytes;
  zmq_close(s);
  return NULL;
}

/* --------------------------------------------------------------- open/close --- */

/* Binds the data socket to --island-listen and sets l->listen, the endpoint the other
 * islands are told: --island-advertise, else the one bound (its real port for 0 or *);
 * a wildcard host cannot be told, so it needs --island-advertise. */
static int bind_data(atoll_link *l, const atoll_link_config *cfg, atoll_err *err) {
  char bound[256];
  if (atoll_sock_bind(l->pull, "--island-listen", cfg->listen, bound, sizeof bound, err)) return -1;
  const char *adv = cfg->advertise && cfg->advertise[0] ? cfg->advertise : NULL;
  if (!adv) {
    if (atoll_sock_wildcard(bound))
      return atoll_fail(err, "--island-listen %s: a wildcard address cannot be told to the other islands; give the address they reach this island at with --island-advertise tcp://HOST:PORT",
                        cfg->listen);
    snprintf(l->listen, sizeof l->listen, "%s", bound);
    return 0;
  }
  if (atoll_sock_check_endpoint("--island-advertise", adv, err)) return -1;
  const char *colon = strrchr(adv, ':'), *bport = strrchr(bound, ':');
  if (strncmp(adv, "tcp://", 6) != 0 || atoll_sock_wildcard(adv))
    return atoll_fail(err, "--island-advertise %s: needs tcp://HOST:PORT with a HOST the other islands can reach", adv);
  int n = strcmp(colon + 1, "0") == 0 || strcmp(colon + 1, "*") == 0 /* the bound port */
              ? snprintf(l->listen, sizeof l->listen, "%.*s%s", (int)(colon - adv), adv, bport ? bport : ":0")
              : snprintf(l->listen, sizeof l->listen, "%s", adv);
  if (n < 0 || n > ATOLL_WIRE_MAX_ENDPOINT) return atoll_fail(err, "--island-advertise %s: longer than %d bytes", adv, ATOLL_WIRE_MAX_ENDPOINT);
  return 0;
}

int atoll_link_open(atoll_link **out, const atoll_link_config *cfg, atoll_err *err) {
  *out = NULL;
  if (cfg->ranks < 1 || cfg->rank >= cfg->ranks) return atoll_fail(err, "island rank %u of %u: out of range", cfg->rank, cfg->ranks);
  if (cfg->streams < 1 || cfg->streams > MAX_STREAMS) return atoll_fail(err, "--net-streams %d: must be in [1, %d]", cfg->streams, MAX_STREAMS);
  atoll_link *l = calloc(1, sizeof *l);
  if (!l) return atoll_fail(err, "out of memory");
  l->cfg = *cfg;
  snprintf(l->join, sizeof l->join, "%s", cfg->join);
  l->rbuf = malloc(ATOLL_WIRE_MAX_DATA + 1);
  if (!l->rbuf) goto oom;
  if (atoll_key_read_secret(cfg->key_file, l->sec, l->pub, err) || atoll_key_read_public(cfg->coordinator_key, l->cpub, err))
    goto fail;
  l->ctx = zmq_ctx_new();
  zmq_ctx_set(l->ctx, ZMQ_IO_THREADS, cfg->streams < 4 ? cfg->streams : 4);
  char label[32];
  snprintf(label, sizeof label, "island %u", cfg->island);
  /* a grace of 2 s: a peer that connects before this island read the quorum naming it
   * (its own came first) waits for this island's allow-list instead of being refused,
   * logged as a stranger and sent to again 2 s later (the handler holds its request
   * without holding its thread: a restarted peer's stale sockets delay no one else) */
  if (atoll_zap_start(&l->zap, l->ctx, label, 2.0, err)) goto fail;
  l->pull = atoll_sock_server(l->ctx, ZMQ_PULL, l->sec, err);
  if (!l->pull) goto fail;
  if (bind_data(l, cfg, err)) goto fail;
  l->coord = atoll_sock_client(l->ctx, ZMQ_DEALER, l->pub, l->sec, l->cpub, err);
  if (!l->coord) goto fail;
  if (zmq_connect(l->coord, cfg->join)) {
    atoll_fail(err, "--join %s: %s", cfg->join, zmq_strerror(zmq_errno()));
    goto fail;
  }
  atoll_sender_init(&l->coord_tx);
  atoll_wire_msg m = {.type = ATOLL_WIRE_HELLO};
  m.u.hello.island = cfg->island;
  m.u.hello.rank = cfg->rank, m.u.hello.ranks = cfg->ranks, m.u.hello.layout = cfg->layout;
  snprintf(m.u.hello.endpoint, sizeof m.u.hello.endpoint, "%s", l->listen);
  atoll_sock_send_within(l->coord, &l->coord_tx, &m, NULL, 0, (int)(1000 * cfg->timeout));
  if (pthread_create(&l->hb, NULL, heartbeat_main, l)) {
    atoll_fail(err, "cannot start the heartbeat thread");
    goto fail;
  }
  l->hb_started = 1;
  *out = l;
  return 0;
oom:
  atoll_fail(err, "out of memory");
fail:
  atoll_link_close(l);
  return -1;
}

void atoll_link_close(atoll_link *l) {
  if (!l) return;
  if (l->hb_started) {
    atomic_store(&l->hb_stop, 1);
    pthread_join(l->hb, NULL);
  }
  for (int i = 0; i < MAX_PEERS; i++)
    for (int s = 0; s < MAX_STREAMS; s++)
      if (l->peers[i].push[s]) zmq_close(l->peers[i].push[s]);
  if (l->pull) zmq_close(l->pull);
  if (l->coord) zmq_close(l->coord);
  atoll_zap_stop(l->zap);
  if (l->ctx) zmq_ctx_term(l->ctx);
  free(l->rbuf);
  free(l->send);
  free(l->recv1);
  free(l->recv2);
  free(l->mine2);
  free(l->got);
  free(l->sum);
  free(l->decoded);
  free(l);
}

void atoll_link_progress(atoll_link *l, uint32_t step) { atomic_store(&l->step, step); }

static int coord_poll(atoll_link *l, atoll_wire_msg *m, int timeout_ms);

int atoll_link_check(atoll_link *l, atoll_err *err) {
  atoll_wire_msg m;
  while (coord_poll(l, &m, 0)) /* between exchanges nothing else is awaited: stale answers are dropped */
    if (m.type == ATOLL_WIRE_ERROR) return atoll_fail(err, "--join %s: the coordinator says: %s", l->join, m.u.text);
  return 0;
}

atoll_link_stats atoll_link_get_stats(const atoll_link *l) {
  atoll_link_stats s = l->stats;
  s.wire_bytes = l->coord_tx.bytes + l->hb_bytes;
  for (int i = 0; i < MAX_PEERS; i++) s.wire_bytes += l->peers[i].tx.bytes;
  return s;
}

/* ------------------------------------------------------------- coordinator --- */

/* One message from the coordinator, if one arrives within timeout_ms: 1, else 0. */
static int coord_poll(atoll_link *l, atoll_wire_msg *m, int timeout_ms) {
  char why[200];
  long n = atoll_sock_recv(l->coord, l->rbuf, ATOLL_WIRE_MAX_CONTROL, NULL, NULL, NULL, NULL, timeout_ms);
  if (n == -1) return 0;
  if (n < 0 || n > (long)ATOLL_WIRE_MAX_CONTROL || atoll_wire_parse(l->rbuf, (size_t)n, m, l->members, MAX_PEERS, why, sizeof why)) {
    fprintf(stderr, "island %u: dropped a message from the coordinator: %s\n", l->cfg.island,
            n < 0 ? "more than one frame" : n > (long)ATOLL_WIRE_MAX_CONTROL ? "oversized" : why);
    return 0;
  }
  return 1;
}

static uint32_t msg_step(const atoll_wire_msg *m) { return m->type == ATOLL_WIRE_QUORUM ? m->u.quorum.step : m->u.sync.step; }
static uint32_t msg_frag(const atoll_wire_msg *m) {
  return m->type == ATOLL_WIRE_QUORUM ? m->u.quorum.fragment : m->u.sync.fragment;
}

static int send_state_to(atoll_link *l, const atoll_wire_msg *m, atoll_err *err);

/* Sends `req` and waits for a reply of type a or b about (step, fragment), repeating
 * the request every second (a restarted coordinator never saw it), up to `limit` s
 * (WAIT extends it to wait_timeout). Returns 0, or -1 with err. */
static int coord_ask(atoll_link *l, atoll_wire_msg *req, atoll_wire_msg *m, atoll_wire_type a, atoll_wire_type b,
                     double limit, const char *what, atoll_err *err) {
  double t0 = atoll_net_now(), sent = -1;
  uint32_t step = req->u.sync.step, fragment = req->u.sync.fragment;
  while (atoll_net_now() - t0 < limit) {
    if (atoll_net_now() - sent >= 1.0) {
      atoll_wire_msg copy = *req;
      /* not sent (the coordinator is down, or restarting): tried again in a second */
      atoll_sock_send(l->coord, &l->coord_tx, &copy, NULL, 0);
      sent = atoll_net_now();
    }
    if (l->stop && *l->stop) return atoll_fail(err, "%s: stopped by a signal while waiting for the coordinator", what);
    if (!coord_poll(l, m, 100)) continue;
    if (m->type == ATOLL_WIRE_ERROR) return atoll_fail(err, "%s: the coordinator says: %s", what, m->u.text);
    if (m->type == ATOLL_WIRE_WAIT) {
      int have, need;
      if (l->cfg.islands && sscanf(m->u.text, ATOLL_WIRE_WAIT_ISLANDS, &have, &need) == 2 && need > (int)l->cfg.islands)
        return atoll_fail(err, "--islands %u: the coordinator %s needs at least %d islands (its --min-islands), but --islands %u leaves slots for only %u (--island-id 0 to %u): no quorum can form; give every island --islands of at least %d",
                          l->cfg.islands, l->join, need, l->cfg.islands, l->cfg.islands, l->cfg.islands - 1, need);
      if (!l->waited_told) fprintf(stderr, "island %u: %s: %s\n", l->cfg.island, what, m->u.text);
      l->waited_told = 1;
      limit = l->cfg.wait_timeout; /* waiting for islands is allowed to take longer */
      continue;
    }
    /* (COMMITTED's fragment field counts the joining islands this one is to feed) */
    if ((m->type == a || m->type == b) && msg_step(m) == step && (msg_frag(m) == fragment || m->type == ATOLL_WIRE_COMMITTED))
      return 0;
    if (m->type == ATOLL_WIRE_STATE_FROM && a == ATOLL_WIRE_QUORUM) return 0; /* this island is behind: it joins */
    /* waiting for an exchange too few islands are left for: the joiners take this
     * island's state (atoll_coord_feed_waiting) */
    if (m->type == ATOLL_WIRE_FEED && a == ATOLL_WIRE_QUORUM && l->global) {
      if (send_state_to(l, m, err)) return -1;
      continue;
    }
    /* an answer to an earlier request (repeated, or of an aborted attempt): not this one */
  }
  if (l->waited_told)
    return atoll_fail(err, "%s: the coordinator %s said to wait for more islands, and they did not come within %g s", what,
                      l->join, limit);
  return atoll_fail(err, "%s: no answer from the coordinator %s within %g s", what, l->join, limit);
}

void atoll_link_set_stop(atoll_link *l, const volatile sig_atomic_t *stop) { l->stop = stop; }

/* ---------------------------------------------------------------- exchange --- */

/* A data socket to a peer. ZMQ_IMMEDIATE: messages queue only on a connection whose
 * handshake is done; otherwise they queue on the pending one and are lost, silently,
 * when the peer refuses the handshake (its QUORUM, which allows this island's key,
 * came a moment after this island's): the send must fail instead, so that the piece is
 * sent again on fresh sockets (send_piece). */
static void *data_socket(atoll_link *l, const peer *p, atoll_err *err) {
  void *s = atoll_sock_client(l->ctx, ZMQ_PUSH, l->pub, l->sec, p->key, err);
  int one = 1;
  if (s) zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one);
  return s;
}

static peer *peer_for(atoll_link *l, const atoll_wire_member *mb, atoll_err *err) {
  peer *free_slot = NULL;
  for (int i = 0; i < MAX_PEERS; i++) {
    peer *p = &l->peers[i];
    if (p->used && p->island == mb->island) {
      if (!p->broken && memcmp(p->key, mb->key, ATOLL_KEY_BYTES) == 0 && strcmp(p->endpoint, mb->endpoint) == 0) return p;
      for (int s = 0; s < MAX_STREAMS; s++)
        if (p->push[s]) zmq_close(p->push[s]), p->push[s] = NULL;
      p->used = 0;
    }
    if (!p->used && !free_slot) free_slot = p;
  }
  peer *p = free_slot;
  if (!p) {
    atoll_fail(err, "too many peers");
    return NULL;
  }
  uint64_t bytes = p->tx.bytes;
  memset(p, 0, sizeof *p);
  p->island = mb->island;
  memcpy(p->key, mb->key, ATOLL_KEY_BYTES);
  snprintf(p->endpoint, sizeof p->endpoint, "%s", mb->endpoint);
  atoll_sender_init(&p->tx);
  p->tx.bytes = bytes;
  for (int s = 0; s < l->cfg.streams; s++) {
    p->push[s] = data_socket(l, p, err);
    if (!p->push[s] || zmq_connect(p->push[s], p->endpoint)) {
      atoll_fail(err, "island %u: cannot connect to %s: %s", p->island, p->endpoint, zmq_strerror(zmq_errno()));
      return NULL;
    }
  }
  p->used = 1;
  return p;
}

/* Scratch for an exchange of K pieces of qb bytes (piece floats, nch chunks each);
 * each buffer grows on its own (K changes between exchanges). */
static int grow(atoll_link *l, size_t qb, int members, size_t piece, size_t nch) {
  size_t need = qb * (size_t)members + 1, gotn = 2 * (size_t)members * nch + nch + 1, fl = sizeof(float) * (piece + 1);
  if (need <= l->cap_bytes && qb + 1 <= l->cap_mine && gotn <= l->cap_got && fl <= l->cap_floats) return 0;
  free(l->send), free(l->recv1), free(l->recv2), free(l->mine2), free(l->got), free(l->sum), free(l->decoded);
  size_t nb = need > l->cap_bytes ? need : l->cap_bytes, nm = qb + 1 > l->cap_mine ? qb + 1 : l->cap_mine;
  size_t ng = gotn > l->cap_got ? gotn : l->cap_got, nf = fl > l->cap_floats ? fl : l->cap_floats;
  l->send = malloc(nb), l->recv1 = malloc(nb), l->recv2 = malloc(nb), l->mine2 = malloc(nm), l->got = malloc(ng);
  l->sum = malloc(nf), l->decoded = malloc(nf);
  l->cap_bytes = l->cap_mine = l->cap_got = l->cap_floats = 0;
  if (!l->send || !l->recv1 || !l->recv2 || !l->mine2 || !l->got || !l->sum || !l->decoded) return -1;
  l->cap_bytes = nb, l->cap_mine = nm, l->cap_got = ng, l->cap_floats = nf;
  return 0;
}

/* The peer's sockets made anew (same key and endpoint). */
static int remake(atoll_link *l, peer *p) {
  atoll_err err;
  for (int s = 0; s < MAX_STREAMS; s++)
    if (p->push[s]) zmq_close(p->push[s]), p->push[s] = NULL;
  for (int s = 0; s < l->cfg.streams; s++) {
    p->push[s] = data_socket(l, p, &err);
    if (!p->push[s] || zmq_connect(p->push[s], p->endpoint)) return -1;
  }
  return 0;
}

/* Sends chunks [c0, c1) of a piece of qb bytes (chunk_of(qb) each), chunk c on stream
 * c % streams. */
static void send_chunks(atoll_link *l, peer *p, uint32_t step, uint32_t frag, uint64_t qid, uint8_t phase, uint32_t piece,
                        const uint8_t *bytes, size_t qb, size_t c0, size_t c1) {
  size_t CHUNK = chunk_of(qb);
  if (!p || p->broken || qb == 0) return;
  for (size_t c = c0; c < c1; c++) {
    size_t off = c * CHUNK;
    atoll_wire_msg m = {.type = ATOLL_WIRE_DATA};
    size_t len = qb - off < CHUNK ? qb - off : CHUNK;
    m.u.data = (atoll_wire_data){step, frag, qid, l->cfg.island, phase, piece, off, qb, (uint32_t)len, bytes + off};
    /* A socket that cannot take data within 2 s has no connection and will not get
     * one: its peer died, or refused the handshake (ZeroMQ does not reconnect after a
     * refused handshake). The data is lost (the coordinator aborts the attempt), and
     * the peer's sockets are made anew for the next attempt. */
    if (atoll_sock_send_within(p->push[c % (size_t)l->cfg.streams], &p->tx, &m, NULL, 0,
                               l->cfg.timeout < 2 ? (int)(1000 * l->cfg.timeout) : 2000)) {
      /* Once per phase of an attempt, fresh sockets and the piece again, from its first
       * chunk: the usual cause is a handshake the peer refused because its QUORUM,
       * which allows this island's key, came a moment after this island's (chunks that
       * did get through arrive twice, and the receiver skips identical copies). */
      if (!p->again[phase]++ && remake(l, p) == 0) {
        c = (size_t)0 - 1; /* the loop's increment brings it to 0 */
        continue;
      }
      fprintf(stderr, "island %u: cannot send to island %u (%s): no connection; reconnecting for the next attempt\n",
              l->cfg.island, p->island, p->endpoint);
      p->broken = 1;
      return;
    }
  }
}

static void send_piece(atoll_link *l, peer *p, uint32_t step, uint32_t frag, uint64_t qid, uint8_t phase, uint32_t piece,
                       const uint8_t *bytes, size_t qb) {
  if (p) p->again[phase] = 0;
  send_chunks(l, p, step, frag, qid, phase, piece, bytes, qb, 0, (qb + chunk_of(qb) - 1) / chunk_of(qb));
}

/* Phase 2 of chunk c of this island's piece (fp32 and bf16 only: their encoding is
 * per float, so a chunk of bytes is a range of floats): the sum, in quorum order, of
 * the K encodings' floats in that range, divided by K, encoded into mine2 (the same
 * arithmetic as the whole piece at once) and sent to every peer. */
static void sum_chunk(atoll_link *l, atoll_qtype q, int K, int k, size_t qb, size_t len, size_t c, peer **peers,
                      uint32_t step, uint32_t frag, uint64_t qid) {
  size_t e = q == ATOLL_Q_FP32 ? 4 : 2, CHUNK = chunk_of(qb), end = (c + 1) * CHUNK < qb ? (c + 1) * CHUNK : qb;
  size_t a = c * CHUNK / e, b = end / e < len ? end / e : len;
  if (a < b) {
    memset(l->sum + a, 0, sizeof(float) * (b - a));
    for (int i = 0; i < K; i++) {
      const uint8_t *src = i == k ? l->send + qb * (size_t)k : l->recv1 + qb * (size_t)i;
      atoll_q_decode(q, src + a * e, b - a, l->decoded + a);
      for (size_t t = a; t < b; t++) l->sum[t] += l->decoded[t];
    }
    for (size_t t = a; t < b; t++) l->sum[t] /= (float)K;
    atoll_q_encode(q, l->sum + a, b - a, l->mine2 + a * e);
  }
  for (int i = 0; i < K; i++)
    if (i != k) send_chunks(l, peers[i], step, frag, qid, 2, (uint32_t)k, l->mine2, qb, c, c + 1);
}

/* One attempt's state: the exchange of (step, frag) in quorum qid of K members, this
 * island at position k; piece floats per member, qb bytes each, in nch chunks. */
typedef struct {
  atoll_qtype q;
  float *x;
  size_t n;
  uint32_t step, frag;
  uint64_t qid;
  int K, k;
  const char *what;
  size_t piece, qb, CHUNK, nch, lo_k, hi_k;
  peer *peers[MAX_PEERS];
  uint8_t *arrived;           /* per chunk, the members whose phase-1 chunk arrived */
  size_t need, have1, have2, next2;
  int sent2, per_float;
  double t_quorum, last_progress, last_ask;
  uint64_t bytes0;
} xchg;

/* This island's place in the quorum, the peers' sockets and the scratch. 0, or -1. */
static int attempt_setup(atoll_link *l, xchg *e, atoll_err *err) {
  e->k = -1;
  for (int i = 0; i < e->K; i++) {
    if (l->members[i].island == l->cfg.island && memcmp(l->members[i].key, l->pub, ATOLL_KEY_BYTES) == 0) {
      e->k = i;
      continue;
    }
    if (atoll_zap_allow(l->zap, l->members[i].key)) return atoll_fail(err, "%s: out of memory for the allow-list", e->what);
  }
  if (e->k < 0) return atoll_fail(err, "%s: this island is not in the quorum the coordinator sent", e->what);
  e->t_quorum = atoll_net_now(); /* net.transfer_seconds counts from here */
  /* A peer that was not in this island's previous quorum may be a restarted process
   * at the same endpoint, whose handshake with the old sockets was refused while it
   * did not know this island yet (ZeroMQ then gives up on that connection): its
   * sockets are made anew. Members of consecutive quorums keep their connections. */
  e->piece = (e->n + (size_t)e->K - 1) / (size_t)e->K, e->qb = atoll_q_bytes(e->q, e->piece), e->CHUNK = chunk_of(e->qb);
  for (int i = 0; i < MAX_PEERS; i++)
    if (l->peers[i].used && l->peers[i].qid != l->last_qid) l->peers[i].broken = 1;
  /* a rank of a multi-rank island that holds nothing of this fragment (qb = 0) sends
   * nothing and makes no sockets: connections it would never use could be refused
   * unnoticed, then trusted at the next exchange; the next one makes them anew */
  for (int i = 0; i < e->K && e->qb > 0; i++) {
    if (i == e->k) continue;
    if (!(e->peers[i] = peer_for(l, &l->members[i], err))) return -1;
    e->peers[i]->qid = e->qid;
  }
  l->last_qid = e->qid;
  l->stats.members = e->K;
  e->nch = (e->qb + e->CHUNK - 1) / e->CHUNK;
  if (grow(l, e->qb, e->K, e->piece, e->nch)) return atoll_fail(err, "%s: out of memory", e->what);
  e->lo_k = (size_t)e->k * e->piece < e->n ? (size_t)e->k * e->piece : e->n;
  e->hi_k = e->lo_k + e->piece < e->n ? e->lo_k + e->piece : e->n;
  e->per_float = e->q == ATOLL_Q_FP32 || e->q == ATOLL_Q_BF16;
  e->need = (size_t)(e->K - 1) * e->nch;
  return 0;
}

/* Phase 1: my encoding of piece c to island c (as diloco.c's islands_mean), each
 * queued as soon as it is encoded, this island's own last, so that the link starts at
 * once. *bad: the first NaN or Inf. */
static void send_phase1(atoll_link *l, xchg *e, size_t *bad) {
  *bad = SIZE_MAX;
  e->bytes0 = 0;
  for (int i = 0; i < e->K; i++)
    if (e->peers[i]) e->bytes0 += e->peers[i]->tx.bytes, e->peers[i]->again[1] = e->peers[i]->again[2] = 0;
  size_t qb = e->qb;
  for (int j = 1; j <= e->K; j++) {
    int c = (e->k + j) % e->K;
    size_t lo = (size_t)c * e->piece < e->n ? (size_t)c * e->piece : e->n, hi = lo + e->piece < e->n ? lo + e->piece : e->n, b;
    /* fp32 and bf16 write every byte of their encoding: only the rest of the piece's
     * qb bytes is zeroed; int8 leaves a zero block's values as they were */
    size_t used = e->per_float ? atoll_q_bytes(e->q, hi - lo) : 0;
    memset(l->send + qb * (size_t)c + used, 0, qb - used);
    if (atoll_q_encode_checked(e->q, e->x + lo, hi - lo, l->send + qb * (size_t)c, &b) && (*bad == SIZE_MAX || lo + b < *bad))
      *bad = lo + b;
    if (c != e->k) send_piece(l, e->peers[c], e->step, e->frag, e->qid, 1, (uint32_t)c, l->send + qb * (size_t)c, qb);
  }
  /* got: per phase and member, a flag per chunk; then `arrived` */
  memset(l->got, 0, 2 * (size_t)e->K * e->nch + e->nch);
  e->arrived = l->got + 2 * (size_t)e->K * e->nch;
  memset(l->mine2, 0, qb);
  e->last_progress = e->last_ask = atoll_net_now();
}

/* Phase 2 as far as phase 1 allows: fp32 and bf16 per chunk, as soon as every
 * member's phase-1 chunk is here (in chunk order), so that the sum overlaps the
 * transfer and the link does not idle between the phases; block-scaled types the
 * whole piece once all of phase 1 is here, summed in quorum order. */
static void send_phase2(atoll_link *l, xchg *e) {
  size_t qb = e->qb;
  while (e->per_float && e->next2 < e->nch && e->arrived[e->next2] == (uint8_t)(e->K - 1))
    sum_chunk(l, e->q, e->K, e->k, qb, e->hi_k - e->lo_k, e->next2++, e->peers, e->step, e->frag, e->qid);
  if (!e->sent2 && e->per_float && e->next2 == e->nch) {
    memcpy(l->recv2 + qb * (size_t)e->k, l->mine2, qb);
    e->sent2 = 1;
  }
  if (e->have1 != e->need || e->sent2) return;
  size_t len = e->hi_k - e->lo_k;
  memset(l->sum, 0, sizeof(float) * (len + 1));
  for (int i = 0; i < e->K; i++) {
    atoll_q_decode(e->q, i == e->k ? l->send + qb * (size_t)e->k : l->recv1 + qb * (size_t)i, len, l->decoded);
    for (size_t t = 0; t < len; t++) l->sum[t] += l->decoded[t];
  }
  for (size_t t = 0; t < len; t++) l->sum[t] /= (float)e->K;
  atoll_q_encode(e->q, l->sum, len, l->mine2);
  for (int c = 0; c < e->K; c++)
    if (c != e->k) send_piece(l, e->peers[c], e->step, e->frag, e->qid, 2, (uint32_t)e->k, l->mine2, qb);
  memcpy(l->recv2 + qb * (size_t)e->k, l->mine2, qb);
  e->sent2 = 1;
}

/* While the data comes: the coordinator may abort the attempt (a member died or
 * stalled), or, restarted, know nothing of it: asked again (READY) it forms a new
 * quorum. 1: aborted; -1: no progress for 2 x --net-timeout (err); else 0. */
static int watch(atoll_link *l, xchg *e, atoll_err *err) {
  atoll_wire_msg cm;
  if (coord_poll(l, &cm, 0)) {
    if (cm.type == ATOLL_WIRE_ABORT && cm.u.sync.revision == e->qid) return 1;
    if (cm.type == ATOLL_WIRE_QUORUM && cm.u.quorum.step == e->step && cm.u.quorum.fragment == e->frag && cm.u.quorum.id != e->qid)
      return 1;
  }
  double now = atoll_net_now();
  if (now - e->last_progress > 1.0 && now - e->last_ask > 1.0) {
    atoll_wire_msg again = {.type = ATOLL_WIRE_READY};
    again.u.sync = (atoll_wire_sync){e->step, e->frag, l->revision, {0}, l->cfg.rank};
    atoll_sock_send(l->coord, &l->coord_tx, &again, NULL, 0);
    e->last_ask = now;
  }
  if (now - e->last_progress <= 2 * l->cfg.timeout) return 0;
  char missing[256] = "";
  for (int i = 0; i < e->K; i++) {
    size_t got = 0;
    for (size_t c = 0; c < e->nch; c++) got += l->got[(size_t)i * e->nch + c] + l->got[((size_t)e->K + i) * e->nch + c];
    if (i != e->k && got < 2 * e->nch) snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %u", l->members[i].island);
  }
  return atoll_fail(err, "%s: no data for %g s and no abort from the coordinator; waiting for island(s)%s", e->what,
                    2 * l->cfg.timeout, missing);
}

/* The chunk that a DATA frame's range is, in a piece of qb bytes cut into CHUNK-byte
 * chunks: its index (below the piece's chunk count), or -1 when the range is not
 * exactly one of them (another total, an offset inside or past the piece, another
 * length). Every place and flag a frame writes is indexed through this. */
static long chunk_at(const atoll_wire_data *w, size_t qb, size_t CHUNK) {
  if (w->total != qb || w->offset >= qb || w->offset % CHUNK) return -1;
  size_t want = qb - w->offset < CHUNK ? qb - w->offset : CHUNK;
  return w->len == want ? (long)(w->offset / CHUNK) : -1;
}

/* A parsed DATA frame from key `keyz`: stored in its place and counted, or a reason
 * in why (empty: used, or expected and ignored). *from: the member it comes from. */
static void take_data(atoll_link *l, xchg *e, const atoll_wire_data *w, const char *keyz, int *from, char *why, size_t whysz) {
  uint8_t key[ATOLL_KEY_BYTES];
  size_t qb = e->qb, CHUNK = e->CHUNK;
  for (int i = 0; i < e->K; i++)
    if (l->members[i].island == w->from) *from = i;
  if (w->quorum < e->qid) return; /* an aborted attempt's data, still in flight: expected */
  if (*from < 0 || *from == e->k) snprintf(why, whysz, "island %u is not a peer of this exchange", w->from);
  else if (!zmq_z85_decode(key, keyz) || memcmp(key, l->members[*from].key, ATOLL_KEY_BYTES) != 0)
    snprintf(why, whysz, "claims to be island %u, whose key differs", w->from);
  else if (w->step != e->step || w->fragment != e->frag || w->quorum != e->qid)
    snprintf(why, whysz, "not of this exchange (step %u, fragment %u, quorum %llu)", w->step, w->fragment,
             (unsigned long long)w->quorum);
  else if (w->phase > 2) /* (a joining island's state: its rows are not in got) */
    snprintf(why, whysz, "phase %u is not sent in an exchange", w->phase);
  else if (w->piece != (w->phase == 1 ? (uint32_t)e->k : (uint32_t)*from) || chunk_at(w, qb, CHUNK) < 0)
    snprintf(why, whysz, "piece %u range [%llu, +%u) of %llu does not fit this exchange", w->piece,
             (unsigned long long)w->offset, w->len, (unsigned long long)w->total);
  else {
    size_t c = (size_t)chunk_at(w, qb, CHUNK);
    uint8_t *seen = &l->got[((size_t)(w->phase - 1) * e->K + *from) * e->nch + c];
    uint8_t *place = (w->phase == 1 ? l->recv1 : l->recv2) + qb * (size_t)*from + w->offset;
    if (*seen && memcmp(place, w->bytes, w->len) != 0)
      snprintf(why, whysz, "replayed (phase %u, offset %llu already received, different bytes)", w->phase,
               (unsigned long long)w->offset);
    else if (!*seen) { /* (seen with the same bytes: a resent chunk, send_chunks' second try) */
      *seen = 1;
      memcpy(place, w->bytes, w->len);
      if (w->phase == 1) e->have1++, e->arrived[c]++;
      else e->have2++;
      e->last_progress = atoll_net_now();
    }
  }
}

/* One frame from the data socket, if one comes within 50 ms; a frame that is not
 * usable is dropped with one line naming its sender. */
static void receive(atoll_link *l, xchg *e) {
  char keyz[64], addr[64], why[200] = "";
  zmq_msg_t fr;
  long len = atoll_sock_recv_msg(l->pull, &fr, keyz, addr, 50);
  if (len == -1) return;
  atoll_wire_msg d;
  int from = -1;
  if (len < 0 || len > (long)ATOLL_WIRE_MAX_DATA)
    snprintf(why, sizeof why, "%s", len < 0 ? "more than one frame" : "oversized");
  else if (atoll_wire_parse(zmq_msg_data(&fr), (size_t)len, &d, NULL, 0, why, sizeof why) == 0) {
    why[0] = 0;
    if (d.type != ATOLL_WIRE_DATA) snprintf(why, sizeof why, "%s is not sent between islands", atoll_wire_type_name(d.type));
    else take_data(l, e, &d.u.data, keyz, &from, why, sizeof why);
  }
  if (len >= 0) zmq_msg_close(&fr);
  if (why[0])
    fprintf(stderr, "island %u: dropped a data message from %s (key %.8s..., %s): %s\n", l->cfg.island,
            from >= 0 ? "a member" : "a peer", keyz, addr, why);
}

/* Every piece is here: applied only once every member has them too (all or nothing:
 * DONE, then GO or ABORT). 0: x written; 1: aborted; -1: failed. */
static int finish_attempt(atoll_link *l, xchg *e, atoll_err *err) {
  l->transfer_s = atoll_net_now() - e->t_quorum;
  l->transfer_b = 0;
  for (int i = 0; i < e->K; i++)
    if (e->peers[i]) l->transfer_b += e->peers[i]->tx.bytes;
  l->transfer_b -= e->bytes0;
  atoll_wire_msg req = {.type = ATOLL_WIRE_DONE}, cm;
  req.u.sync = (atoll_wire_sync){e->step, e->frag, e->qid, {0}, l->cfg.rank};
  if (coord_ask(l, &req, &cm, ATOLL_WIRE_GO, ATOLL_WIRE_ABORT, 2 * l->cfg.timeout, e->what, err)) return -1;
  if (cm.type == ATOLL_WIRE_ABORT || cm.u.sync.revision != e->qid) return 1;
  for (int c = 0; c < e->K; c++) {
    size_t clo = (size_t)c * e->piece < e->n ? (size_t)c * e->piece : e->n, chi = clo + e->piece < e->n ? clo + e->piece : e->n;
    atoll_q_decode(e->q, l->recv2 + e->qb * (size_t)c, chi - clo, e->x + clo);
  }
  return 0;
}

/* One attempt of the exchange with the quorum in l->members; 0: done (x written),
 * 1: aborted (retry; x untouched), -1: failed. */
static int attempt(atoll_link *l, atoll_qtype q, float *x, size_t n, uint32_t step, uint32_t frag, uint64_t qid, int K,
                   size_t *bad, const char *what, atoll_err *err) {
  xchg e = {.q = q, .x = x, .n = n, .step = step, .frag = frag, .qid = qid, .K = K, .what = what};
  if (attempt_setup(l, &e, err)) return -1;
  send_phase1(l, &e, bad);
  for (;;) {
    send_phase2(l, &e);
    if (e.sent2 && e.have2 == e.need) break;
    int rc = watch(l, &e, err);
    if (rc) return rc;
    receive(l, &e);
  }
  return finish_attempt(l, &e, err);
}

/* A joining island fetches the committed state (global weights, outer momentum) from
 * the member named in STATE_FROM, checks its hash and adopts it. */
static int fetch_state(atoll_link *l, const atoll_wire_msg *sf, atoll_err *err) {
  const atoll_wire_member *donor = &sf->u.quorum.members[0];
  uint32_t step = sf->u.quorum.step;
  uint64_t id = sf->u.quorum.id;
  uint8_t want[ATOLL_WIRE_HASH], key[ATOLL_KEY_BYTES];
  memcpy(want, sf->u.quorum.hash, ATOLL_WIRE_HASH);
  if (atoll_zap_allow(l->zap, donor->key)) return atoll_fail(err, "joining at step %u: out of memory for the allow-list", step);
  size_t qb = l->state_n * sizeof(float), CHUNK = chunk_of(qb), nch = (qb + CHUNK - 1) / CHUNK;
  uint8_t *buf = malloc(2 * qb + 1), *got = calloc(2 * nch + 1, 1);
  if (!buf || !got) {
    free(buf), free(got);
    return atoll_fail(err, "out of memory for the joining state");
  }
  fprintf(stderr, "island %u: joining at step %u: fetching revision %llu from island %u\n", l->cfg.island, step,
          (unsigned long long)sf->u.quorum.revision, donor->island);
  if (l->cfg.fail_first_fetch && l->fetches++ == 0) {
    free(buf), free(got);
    fprintf(stderr, "island %u rank %u: test hook: this first fetch fails (as if the donor died)\n", l->cfg.island, l->cfg.rank);
    return 1;
  }
  size_t have = 0;
  double last = atoll_net_now();
  while (have < 2 * nch) {
    if (atoll_net_now() - last > 2 * l->cfg.timeout) {
      free(buf), free(got);
      fprintf(stderr, "island %u: joining at step %u: no state from island %u for %g s; asking again\n", l->cfg.island, step,
              donor->island, 2 * l->cfg.timeout);
      return 1;
    }
    char keyz[64], addr[64], why[200];
    long len = atoll_sock_recv(l->pull, l->rbuf, ATOLL_WIRE_MAX_DATA, NULL, NULL, keyz, addr, 100);
    if (len == -1) continue;
    atoll_wire_msg d;
    if (len < 0 || len > (long)ATOLL_WIRE_MAX_DATA || atoll_wire_parse(l->rbuf, (size_t)len, &d, NULL, 0, why, sizeof why))
      continue; /* the exchange's checks name such peers; here only the donor's state counts */
    const atoll_wire_data *w = &d.u.data;
    if (d.type != ATOLL_WIRE_DATA || w->phase < 3 || w->quorum != id || w->step != step) continue; /* earlier traffic */
    long c = chunk_at(w, qb, CHUNK);
    if (!zmq_z85_decode(key, keyz) || memcmp(key, donor->key, ATOLL_KEY_BYTES) || w->from != donor->island || c < 0) {
      fprintf(stderr, "island %u: dropped a state message from key %.8s... (%s): not the donor's, or the model's size differs\n",
              l->cfg.island, keyz, addr);
      continue;
    }
    uint8_t *seen = &got[(size_t)(w->phase - 3) * nch + (size_t)c];
    if (*seen) continue;
    *seen = 1;
    memcpy(buf + (size_t)(w->phase - 3) * qb + w->offset, w->bytes, w->len);
    have++;
    last = atoll_net_now();
  }
  uint8_t hash[ATOLL_WIRE_HASH]; /* of the global weights and the momentum, as committed */
  crypto_generichash(hash, sizeof hash, buf, 2 * qb, NULL, 0);
  if (memcmp(hash, want, ATOLL_WIRE_HASH) != 0) {
    free(buf), free(got);
    return atoll_fail(err, "joining at step %u: the weights and outer momentum fetched from island %u do not match the quorum's hash; refusing them",
                      step, donor->island);
  }
  memcpy(l->global, buf, qb);
  memcpy(l->momentum, buf + qb, qb);
  free(buf), free(got);
  l->joined_from = l->revision;
  l->revision = sf->u.quorum.revision;
  atomic_store(&l->hb_revision, l->revision);
  l->joined_step = step;
  l->stats.joins++;
  fprintf(stderr, "island %u: joined at step %u (revision %llu, hash checked)\n", l->cfg.island, step,
          (unsigned long long)l->revision);
  return 0;
}

/* Sends this island's global weights and outer momentum to the joining islands of a
 * FEED: after a commit, or while it waits for an exchange that too few islands are
 * left for (the coordinator then feeds the joiners the last commit's state). The
 * joiners check the hash; so does this island first, since after a fragment's sync
 * its state is no longer the committed one. */
static int send_state_to(atoll_link *l, const atoll_wire_msg *m, atoll_err *err) {
  size_t qb = l->state_n * sizeof(float);
  uint8_t hash[ATOLL_WIRE_HASH];
  atoll_link_state_hash(l, l->global, l->state_n, hash);
  if (memcmp(hash, m->u.quorum.hash, ATOLL_WIRE_HASH) != 0) {
    fprintf(stderr, "island %u: asked to send the state of step %u, but this island's differs from it; not sent\n",
            l->cfg.island, m->u.quorum.step);
    return 0;
  }
  for (uint32_t i = 0; i < m->u.quorum.n; i++) {
    for (int j = 0; j < MAX_PEERS; j++) /* a joining island is a new process: no stale connection */
      if (l->peers[j].used && l->peers[j].island == m->u.quorum.members[i].island) {
        for (int st = 0; st < MAX_STREAMS; st++)
          if (l->peers[j].push[st]) zmq_close(l->peers[j].push[st]), l->peers[j].push[st] = NULL;
        l->peers[j].used = 0;
      }
    peer *p = peer_for(l, &m->u.quorum.members[i], err);
    if (!p) return -1;
    send_piece(l, p, m->u.quorum.step, 0, m->u.quorum.id, 3, 0, (const uint8_t *)l->global, qb);
    if (l->cfg.feed_bad_momentum && qb) ((uint8_t *)l->momentum)[0] ^= 1; /* test hook: a damaged momentum */
    send_piece(l, p, m->u.quorum.step, 0, m->u.quorum.id, 4, 0, (const uint8_t *)l->momentum, qb);
    if (l->cfg.feed_bad_momentum && qb) ((uint8_t *)l->momentum)[0] ^= 1;
    fprintf(stderr, "island %u: sent the state of step %u to joining island %u\n", l->cfg.island, m->u.quorum.step,
            m->u.quorum.members[i].island);
  }
  return 0;
}

/* The first member of a commit sends the committed state to the joining islands. */
static int feed_state(atoll_link *l, int expect, atoll_err *err) {
  atoll_wire_msg m;
  double t0 = atoll_net_now();
  while (!coord_poll(l, &m, 100) || m.type != ATOLL_WIRE_FEED) {
    if (atoll_net_now() - t0 > l->cfg.timeout) {
      fprintf(stderr, "island %u: %d joining island(s) announced, but no FEED arrived; they will time out\n", l->cfg.island, expect);
      return 0;
    }
  }
  return send_state_to(l, &m, err);
}

int atoll_link_mean(atoll_link *l, atoll_qtype q, float *x, size_t n, uint32_t step, uint32_t frag, size_t *bad,
                    atoll_err *err) {
  double t0 = atoll_net_now();
  char what[96];
  snprintf(what, sizeof what, "outer exchange at step %u (fragment %u)", step, frag);
  atoll_link_progress(l, step);
  for (int tries = 0;; tries++) {
    atoll_wire_msg req = {.type = ATOLL_WIRE_READY}, m;
    req.u.sync = (atoll_wire_sync){step, frag, l->revision, {0}, l->cfg.rank};
    l->waited_told = 0;
    if (coord_ask(l, &req, &m, ATOLL_WIRE_QUORUM, ATOLL_WIRE_QUORUM, l->cfg.timeout, what, err)) return -1;
    if (m.type == ATOLL_WIRE_STATE_FROM) {
      if (!l->global) return atoll_fail(err, "%s: this island is behind, and has no state to adopt", what);
      int rc = fetch_state(l, &m, err);
      if (rc < 0) return -1;
      if (rc == 0) {
        l->join_t0 = 0;
        return 2;
      }
      if (l->join_t0 == 0) l->join_t0 = t0;
      if (atoll_net_now() - l->join_t0 > l->cfg.wait_timeout)
        return atoll_fail(err, "%s: could not fetch the state to join within %g s", what, l->cfg.wait_timeout);
      return 3; /* the donor died or the coordinator restarted: the island's ranks agree, then ask again */
    }
    int rc = attempt(l, q, x, n, step, frag, m.u.quorum.id, (int)m.u.quorum.n, bad, what, err);
    if (rc < 0) return -1;
    if (rc == 0) break;
    l->stats.retries++;
    if (atoll_net_now() - t0 > l->cfg.wait_timeout)
      return atoll_fail(err, "%s: no exchange succeeded within %g s (%d attempts aborted)", what, l->cfg.wait_timeout, tries + 1);
    fprintf(stderr, "island %u: %s: aborted by the coordinator (a member left or stalled); retrying with the others\n",
            l->cfg.island, what);
    if (tries > 1000) return atoll_fail(err, "%s: aborted 1000 times; giving up", what);
  }
  l->stats.exchanges++;
  l->stats.transfer_seconds += l->transfer_s;
  l->stats.transfer_bytes += l->transfer_b;
  if (l->stats.members_min == 0 || l->stats.members < l->stats.members_min) l->stats.members_min = l->stats.members;
  if (l->stats.members > l->stats.members_max) l->stats.members_max = l->stats.members;
  l->stats.exchange_seconds += atoll_net_now() - t0;
  return 0;
}

void atoll_link_unjoin(atoll_link *l) {
  fprintf(stderr, "island %u rank %u: another rank of the island could not fetch the state; asking again with it\n",
          l->cfg.island, l->cfg.rank);
  l->revision = l->joined_from;
  atomic_store(&l->hb_revision, l->revision);
  l->joined_step = 0;
  if (l->stats.joins) l->stats.joins--;
  if (l->join_t0 == 0) l->join_t0 = atoll_net_now();
}

void atoll_link_goodbye(atoll_link *l) {
  atoll_wire_msg m = {.type = ATOLL_WIRE_BYE};
  m.u.sync = (atoll_wire_sync){atomic_load(&l->step), 0, l->revision, {0}, l->cfg.rank};
  atoll_sock_send_within(l->coord, &l->coord_tx, &m, NULL, 0, 1000);
  int linger = 1000; /* atoll_link_close waits this long for it to leave */
  zmq_setsockopt(l->coord, ZMQ_LINGER, &linger, sizeof linger);
}

int atoll_link_commit(atoll_link *l, uint32_t step, const uint8_t hash[32], atoll_err *err) {
  double t0 = atoll_net_now();
  char what[64];
  snprintf(what, sizeof what, "commit of step %u", step);
  atoll_wire_msg req = {.type = ATOLL_WIRE_COMMIT}, m;
  req.u.sync = (atoll_wire_sync){step, 0, l->revision, {0}, l->cfg.rank};
  if (l->cfg.commit_sigstop == step) raise(SIGSTOP); /* test hook: silent (a cut link) until SIGCONT */
  memcpy(req.u.sync.hash, hash, ATOLL_WIRE_HASH);
  if (coord_ask(l, &req, &m, ATOLL_WIRE_COMMITTED, ATOLL_WIRE_COMMITTED, 2 * l->cfg.timeout, what, err)) return -1;
  if (memcmp(m.u.sync.hash, hash, ATOLL_WIRE_HASH) != 0)
    return atoll_fail(err, "%s: the coordinator committed another hash than this island's", what);
  l->revision = m.u.sync.revision;
  atomic_store(&l->hb_revision, l->revision);
  if (m.u.sync.fragment > 0 && l->global && feed_state(l, (int)m.u.sync.fragment, err)) return -1;
  l->stats.exchange_seconds += atoll_net_now() - t0;
  return 0;
}

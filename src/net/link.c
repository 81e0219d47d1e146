/* An island's network link (link.h), its control logic: the island's side of the
 * protocol with the coordinator, and the public atoll_link_* API:
 *   - the session: open (HELLO), the heartbeat thread, poll and ask the coordinator
 *     (atoll_link_coord_poll, coord_ask), check, goodbye (BYE);
 *   - one outer exchange: READY / QUORUM, an attempt's steps and its dialogue with the
 *     coordinator around the data (watch: ABORT, a newer QUORUM, READY again;
 *     finish_attempt: DONE, then GO or ABORT), retries with a new quorum (atoll_link_mean);
 *   - commits and joins: COMMIT, its COMMITTED taken after the next inner steps
 *     (atoll_link_check) or awaited (atoll_link_settle), FEED (feed_state), STATE_FROM,
 *     unjoin.
 * Moving the bytes between islands (the peers' sockets, pieces in chunks over the
 * streams, the receipt and checks of every DATA frame, the state sent to and fetched by
 * a joining island) is link_data.c's; the two share link_internal.h. */
#include "net/link_internal.h"

#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

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

uint64_t atoll_link_revision(const atoll_link *l) { return l->revision; }

void atoll_link_set_revision(atoll_link *l, uint64_t revision) {
  l->revision = revision;
  atomic_store(&l->hb_revision, revision);
}

/* ---------------------------------------------------------------- heartbeat --- */

/* A HEARTBEAT: what the island holds and, for the coordinator's status page, its progress. */
static void progress_msg(atoll_link *l, atoll_wire_msg *m) {
  *m = (atoll_wire_msg){.type = ATOLL_WIRE_HEARTBEAT};
  m->u.hello.island = l->cfg.island;
  m->u.hello.step = atomic_load(&l->step);
  m->u.hello.revision = atomic_load(&l->hb_revision);
  m->u.hello.rank = l->cfg.rank, m->u.hello.ranks = l->cfg.ranks, m->u.hello.layout = l->cfg.layout;
  snprintf(m->u.hello.endpoint, sizeof m->u.hello.endpoint, "%s", l->listen);
  m->u.hello.tokens_per_step = atomic_load(&l->hb_tokens_per_step);
  uint32_t loss = atomic_load(&l->hb_loss);
  memcpy(&m->u.hello.loss, &loss, 4);
  m->u.hello.sent_bytes = atomic_load(&l->hb_sent);
}

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
      atoll_wire_msg m;
      progress_msg(l, &m);
      atoll_sock_send_within(s, &tx, &m, NULL, 0, 200); /* the coordinator may be down: the next one follows */
      next = atoll_net_now() + l->cfg.heartbeat;
    }
    atoll_sock_recv(s, junk, sizeof junk, NULL, NULL, NULL, NULL, 50); /* nothing is sent back; drain */
  }
  l->hb_bytes = tx.bytes;
  zmq_close(s);
  return NULL;
}

/* Before BYE (a heartbeat sent after it would register the finished island again) and at close. */
static void stop_heartbeat(atoll_link *l) {
  if (!l->hb_started) return;
  atomic_store(&l->hb_stop, 1);
  pthread_join(l->hb, NULL);
  l->hb_started = 0;
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
  atomic_store(&l->hb_loss, 0x7fc00000u); /* NaN: no loss yet */
  l->stop = cfg->stop;
  l->revision = cfg->revision;
  atomic_store(&l->hb_revision, cfg->revision);
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
  if (atoll_link_watch_coord(l, err)) goto fail;
  if (zmq_connect(l->coord, cfg->join)) {
    atoll_fail(err, "--join %s: %s", cfg->join, zmq_strerror(zmq_errno()));
    goto fail;
  }
  atoll_sender_init(&l->coord_tx);
  atoll_wire_msg m = {.type = ATOLL_WIRE_HELLO};
  m.u.hello.island = cfg->island;
  m.u.hello.revision = cfg->revision; /* a resumed island's: the coordinator sees at once whether it is behind */
  m.u.hello.rank = cfg->rank, m.u.hello.ranks = cfg->ranks, m.u.hello.layout = cfg->layout;
  snprintf(m.u.hello.endpoint, sizeof m.u.hello.endpoint, "%s", l->listen);
  m.u.hello.loss = NAN;
  if (atoll_link_greet(l, &m, err)) goto fail;
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
  stop_heartbeat(l);
  for (int i = 0; i < MAX_PEERS; i++) atoll_link_streams_close(&l->peers[i]);
  if (l->pull) zmq_close(l->pull);
  if (l->coord_mon) zmq_socket_monitor(l->coord, NULL, 0), zmq_close(l->coord_mon);
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

void atoll_link_report(atoll_link *l, uint64_t tokens_per_step, float loss, uint64_t sent_bytes) {
  uint32_t bits;
  memcpy(&bits, &loss, 4);
  atomic_store(&l->hb_tokens_per_step, tokens_per_step);
  atomic_store(&l->hb_loss, bits);
  atomic_store(&l->hb_sent, sent_bytes);
}

static int take_committed(atoll_link *l, const atoll_wire_msg *m, atoll_err *err);

int atoll_link_check(atoll_link *l, atoll_err *err) {
  atoll_wire_msg m;
  if (l->commit.failed) return *err = l->commit.err, -1;
  /* between exchanges only the COMMITTED of a commit in flight is awaited: other
   * answers are stale and dropped; an unanswered COMMIT is repeated every second */
  while (atoll_link_coord_poll(l, &m, 0)) {
    if (m.type == ATOLL_WIRE_ERROR) return atoll_fail(err, "--join %s: the coordinator says: %s", l->join, m.u.text);
    if (l->commit.pending && m.type == ATOLL_WIRE_COMMITTED && m.u.sync.step == l->commit.req.u.sync.step)
      return take_committed(l, &m, err);
  }
  if (l->commit.pending && atoll_net_now() - l->commit.sent >= 1.0) {
    atoll_wire_msg copy = l->commit.req;
    atoll_sock_send(l->coord, &l->coord_tx, &copy, NULL, 0);
    l->commit.sent = atoll_net_now();
  }
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
int atoll_link_coord_poll(atoll_link *l, atoll_wire_msg *m, int timeout_ms) {
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

/* Sends `req` and waits for a reply of type a or b about (step, fragment), repeating
 * the request every second (a restarted coordinator never saw it), up to `limit` s
 * (WAIT extends it to wait_timeout). Returns 0, or -1 with err. */
static int coord_wait(atoll_link *l, atoll_wire_msg *req, atoll_wire_msg *m, atoll_wire_type a, atoll_wire_type b,
                      double limit, const char *what, double t0, double sent, atoll_err *err) {
  uint32_t step = req->u.sync.step, fragment = req->u.sync.fragment;
  while (atoll_net_now() - t0 < limit) {
    if (atoll_net_now() - sent >= 1.0) {
      atoll_wire_msg copy = *req;
      /* not sent (the coordinator is down, or restarting): tried again in a second */
      atoll_sock_send(l->coord, &l->coord_tx, &copy, NULL, 0);
      sent = atoll_net_now();
    }
    /* a first stop signal lets the island finish its sync and leave (train.c); it ends
     * only a wait for more islands, which may be long */
    int quorum = a == ATOLL_WIRE_QUORUM; /* (while asking for one, x is untouched: the island may end here) */
    if (l->stop && (*l->stop >= 2 || (*l->stop && l->waited_told))) {
      if (quorum) l->ended = ATOLL_LINK_SIGNALLED;
      return atoll_fail(err, "%s: stopped by a signal while waiting for the coordinator", what);
    }
    if (!atoll_link_coord_poll(l, m, 100)) continue;
    if (m->type == ATOLL_WIRE_ERROR) {
      if (quorum && strncmp(m->u.text, ATOLL_WIRE_RUN_ENDED, strlen(ATOLL_WIRE_RUN_ENDED)) == 0) l->ended = ATOLL_LINK_RUN_ENDED;
      if (quorum && strncmp(m->u.text, ATOLL_WIRE_NO_DONOR, strlen(ATOLL_WIRE_NO_DONOR)) == 0) l->ended = ATOLL_LINK_NO_DONOR;
      return atoll_fail(err, "%s: the coordinator says: %s", what, m->u.text);
    }
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
      if (atoll_link_send_state_to(l, m, err)) return -1;
      continue;
    }
    /* an answer to an earlier request (repeated, or of an aborted attempt): not this one */
  }
  if (l->waited_told)
    return atoll_fail(err, "%s: the coordinator %s said to wait for more islands, and they did not come within %g s", what,
                      l->join, limit);
  return atoll_fail(err, "%s: no answer from the coordinator %s within %g s", what, l->join, limit);
}

/* coord_wait from now, the request sent first. */
static int coord_ask(atoll_link *l, atoll_wire_msg *req, atoll_wire_msg *m, atoll_wire_type a, atoll_wire_type b,
                     double limit, const char *what, atoll_err *err) {
  return coord_wait(l, req, m, a, b, limit, what, atoll_net_now(), -1, err);
}

void atoll_link_set_stop(atoll_link *l, const volatile sig_atomic_t *stop) { l->stop = stop; }

/* While the data comes: the coordinator may abort the attempt (a member died or
 * stalled), or, restarted, know nothing of it: asked again (READY) it forms a new
 * quorum. 1: aborted; -1: no progress for 2 x --net-timeout (err); else 0. */
static int watch(atoll_link *l, xchg *e, atoll_err *err) {
  atoll_wire_msg cm;
  if (atoll_link_coord_poll(l, &cm, 0)) {
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
static int attempt(atoll_link *l, atoll_qtype q, float *x, size_t n, uint64_t tokens, uint32_t step, uint32_t frag,
                   uint64_t qid, int K, size_t *bad, const char *what, atoll_err *err) {
  xchg e = {.q = q, .x = x, .n = n, .step = step, .frag = frag, .qid = qid, .K = K, .what = what, .tokens = tokens};
  if (atoll_link_attempt_setup(l, &e, err)) return -1;
  atoll_link_send_phase1(l, &e, bad);
  for (;;) {
    atoll_link_send_phase2(l, &e);
    if (e.sent2 && e.have2 == e.need) break;
    int rc = watch(l, &e, err);
    if (rc) return rc;
    atoll_link_receive(l, &e);
  }
  return finish_attempt(l, &e, err);
}

/* The first member of a commit sends the committed state to the joining islands. */
static int feed_state(atoll_link *l, int expect, atoll_err *err) {
  atoll_wire_msg m;
  double t0 = atoll_net_now();
  while (!atoll_link_coord_poll(l, &m, 100) || m.type != ATOLL_WIRE_FEED) {
    if (atoll_net_now() - t0 > l->cfg.timeout) {
      fprintf(stderr, "island %u: %d joining island(s) announced, but no FEED arrived; they will time out\n", l->cfg.island, expect);
      return 0;
    }
  }
  return atoll_link_send_state_to(l, &m, err);
}

int atoll_link_mean(atoll_link *l, atoll_qtype q, float *x, size_t n, uint64_t tokens, uint32_t step, uint32_t frag,
                    size_t *bad, atoll_err *err) {
  if (atoll_link_settle(l, err)) return -1; /* READY carries the revision the last COMMITTED gave */
  double t0 = atoll_net_now();
  char what[96];
  snprintf(what, sizeof what, "outer exchange at step %u (fragment %u)", step, frag);
  atoll_link_progress(l, step);
  for (int tries = 0;; tries++) {
    atoll_wire_msg req = {.type = ATOLL_WIRE_READY}, m;
    req.u.sync = (atoll_wire_sync){step, frag, l->revision, {0}, l->cfg.rank};
    l->waited_told = l->ended = 0;
    if (coord_ask(l, &req, &m, ATOLL_WIRE_QUORUM, ATOLL_WIRE_QUORUM, l->cfg.timeout, what, err)) return l->ended ? l->ended : -1;
    if (m.type == ATOLL_WIRE_STATE_FROM) {
      if (!l->global) return atoll_fail(err, "%s: this island is behind, and has no state to adopt", what);
      int rc = atoll_link_fetch_state(l, &m, err);
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
    int rc = attempt(l, q, x, n, tokens, step, frag, m.u.quorum.id, (int)m.u.quorum.n, bad, what, err);
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
  if (l->stats.joins) l->stats.joins--, l->stats.missed -= l->revision - l->joined_from;
  l->revision = l->joined_from;
  atomic_store(&l->hb_revision, l->revision);
  l->joined_step = 0;
  if (l->join_t0 == 0) l->join_t0 = atoll_net_now();
}

int atoll_link_goodbye(atoll_link *l, atoll_err *err) {
  if (atoll_link_settle(l, err)) return -1; /* the last commit: as a failed one ended the run before, no BYE */
  if (l->cfg.bye_sigstop) raise(SIGSTOP); /* test hook: finished, not yet gone, until SIGCONT */
  stop_heartbeat(l);
  atoll_wire_msg m;
  progress_msg(l, &m); /* the final progress, on BYE's socket: it arrives first (the status page) */
  atoll_sock_send_within(l->coord, &l->coord_tx, &m, NULL, 0, 200);
  m = (atoll_wire_msg){.type = ATOLL_WIRE_BYE};
  m.u.sync = (atoll_wire_sync){atomic_load(&l->step), 0, l->revision, {0}, l->cfg.rank};
  atoll_sock_send_within(l->coord, &l->coord_tx, &m, NULL, 0, 1000);
  int linger = 1000; /* atoll_link_close waits this long for it to leave */
  zmq_setsockopt(l->coord, ZMQ_LINGER, &linger, sizeof linger);
  return 0;
}

/* COMMITTED for the commit in flight: its hash must be this island's; it gives the
 * revision, and a donor then feeds the joining islands. 0, or -1 (err, kept: every
 * later call of the link fails with it). */
static int take_committed(atoll_link *l, const atoll_wire_msg *m, atoll_err *err) {
  l->commit.pending = 0;
  if (memcmp(m->u.sync.hash, l->commit.req.u.sync.hash, ATOLL_WIRE_HASH) != 0)
    atoll_fail(err, "%s: the coordinator committed another hash than this island's", l->commit.what);
  else {
    l->revision = m->u.sync.revision;
    atomic_store(&l->hb_revision, l->revision);
    if (!(m->u.sync.fragment > 0 && l->global && feed_state(l, (int)m->u.sync.fragment, err))) return 0;
  }
  l->commit.failed = 1, l->commit.err = *err;
  return -1;
}

int atoll_link_settle(atoll_link *l, atoll_err *err) {
  if (l->commit.failed) return *err = l->commit.err, -1;
  if (!l->commit.pending) return 0;
  double t0 = atoll_net_now();
  atoll_wire_msg m;
  int rc = atoll_link_check(l, err); /* an answer already here is taken, whatever the stop flag says */
  if (rc == 0 && l->commit.pending) {
    l->waited_told = 0; /* (a WAIT told before the quorum: a first stop signal ends only such a wait) */
    rc = coord_wait(l, &l->commit.req, &m, ATOLL_WIRE_COMMITTED, ATOLL_WIRE_COMMITTED, 2 * l->cfg.timeout, l->commit.what, t0,
                    l->commit.sent, err)
             ? -1
             : take_committed(l, &m, err);
  }
  if (rc && !l->commit.failed) l->commit.pending = 0, l->commit.failed = 1, l->commit.err = *err;
  l->stats.exchange_seconds += atoll_net_now() - t0;
  return rc;
}

int atoll_link_commit(atoll_link *l, uint32_t step, const uint8_t hash[32], atoll_err *err) {
  if (atoll_link_settle(l, err)) return -1;
  double t0 = atoll_net_now();
  atoll_wire_msg *req = &l->commit.req;
  snprintf(l->commit.what, sizeof l->commit.what, "commit of step %u", step);
  *req = (atoll_wire_msg){.type = ATOLL_WIRE_COMMIT};
  req->u.sync = (atoll_wire_sync){step, 0, l->revision, {0}, l->cfg.rank};
  if (l->cfg.commit_sigstop == step) raise(SIGSTOP); /* test hook: silent (a cut link) until SIGCONT */
  memcpy(req->u.sync.hash, hash, ATOLL_WIRE_HASH);
  atoll_wire_msg copy = *req;
  atoll_sock_send(l->coord, &l->coord_tx, &copy, NULL, 0); /* (not sent: repeated a second later) */
  l->commit.sent = atoll_net_now(), l->commit.pending = 1;
  l->stats.exchange_seconds += atoll_net_now() - t0;
  return 0;
}

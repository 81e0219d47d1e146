/* coord_load's clients and phases (coord_load.h). One thread drives every client: a
 * poll over all their sockets, then whatever each client is due to send. A client
 * speaks as an island does (src/net/link_hello.c) but holds no model: its HELLO names a
 * data endpoint nobody listens on (tcp://127.0.0.1:1), which the coordinator's probe
 * finds refused at once, so its WELCOME comes without the probe's 2 s wait. */
#include "coord_load.h"

#include "net/keys.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <zmq.h>

#define DEAD_ENDPOINT "tcp://127.0.0.1:1"
#define WAIT_ISLANDS "waiting for islands" /* the start of ATOLL_WIRE_WAIT_ISLANDS */
#define FULL "most members ("           /* the coordinator's refusal at MAX_MEMBERS */

/* N DEALER sockets take about 2 descriptors each (the connection, the socket's
 * mailbox): the soft limit goes to the hard one when lower than that. */
static void raise_open_files(int clients) {
  struct rlimit rl;
  rlim_t need = (rlim_t)(3 * clients + 64);
  if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need)
    fprintf(stderr, "coord_load: WARNING: at most %llu open files (ulimit -n): %d clients need about %llu\n",
            (unsigned long long)rl.rlim_cur, clients, (unsigned long long)need);
}

int cl_open(cl_run *r) {
  const cl_config *cfg = r->cfg;
  atoll_err err;
  char path[4200];
  raise_open_files(cfg->clients);
  if (atoll_key_path(path, sizeof path, cfg->keys, "key.pub", &err) || atoll_key_read_public(path, r->coord_pub, &err))
    return fprintf(stderr, "coord_load: %s\n", err.msg), -1;
  r->ctx = zmq_ctx_new();
  if (!r->ctx || zmq_ctx_set(r->ctx, ZMQ_MAX_SOCKETS, cfg->clients + 64))
    return fprintf(stderr, "coord_load: zmq context: %s\n", zmq_strerror(zmq_errno())), -1;
  r->c = calloc((size_t)cfg->clients, sizeof *r->c);
  r->items = calloc((size_t)cfg->clients, sizeof(zmq_pollitem_t));
  if (!r->c || !r->items) return fprintf(stderr, "coord_load: out of memory for %d clients\n", cfg->clients), -1;
  zmq_pollitem_t *it = r->items;
  for (int i = 0; i < cfg->clients; i++) {
    cl_client *c = &r->c[i];
    char name[32];
    uint8_t sec[32], pub[32];
    snprintf(name, sizeof name, "clients/c%04d.secret", i);
    if (atoll_key_path(path, sizeof path, cfg->keys, name, &err) || atoll_key_read_secret(path, sec, pub, &err))
      return fprintf(stderr, "coord_load: %s (make the keys with coord_load --setup %s --clients N)\n", err.msg, cfg->keys), -1;
    c->s = atoll_sock_client(r->ctx, ZMQ_DEALER, pub, sec, r->coord_pub, &err);
    if (!c->s) return fprintf(stderr, "coord_load: client %d: %s\n", i, err.msg), -1;
    if (zmq_connect(c->s, cfg->endpoint))
      return fprintf(stderr, "coord_load: --endpoint %s: %s\n", cfg->endpoint, zmq_strerror(zmq_errno())), -1;
    atoll_sender_init(&c->tx);
    c->island = (uint32_t)i;
    it[i] = (zmq_pollitem_t){c->s, 0, ZMQ_POLLIN, 0};
  }
  return 0;
}

void cl_close(cl_run *r) {
  if (r->c)
    for (int i = 0; i < r->cfg->clients; i++)
      if (r->c[i].s) zmq_close(r->c[i].s);
  if (r->ctx) zmq_ctx_term(r->ctx);
  free(r->c);
  free(r->items);
  free(r->admit.v);
  free(r->rtt.v);
}

static void send_hello(cl_client *c, atoll_wire_type type) {
  atoll_wire_msg m = {.type = type};
  m.u.hello.island = c->island;
  m.u.hello.ranks = 1;
  snprintf(m.u.hello.endpoint, sizeof m.u.hello.endpoint, "%s", DEAD_ENDPOINT);
  if (atoll_sock_send(c->s, &c->tx, &m, NULL, 0))
    fprintf(stderr, "coord_load: island %u cannot send %s: %s\n", c->island, atoll_wire_type_name(type), zmq_strerror(zmq_errno()));
}

static void send_sync(cl_client *c, atoll_wire_type type, uint32_t step, uint64_t revision, int hash) {
  atoll_wire_msg m = {.type = type};
  m.u.sync.step = step;
  m.u.sync.revision = revision;
  if (hash) memset(m.u.sync.hash, 0x11, ATOLL_WIRE_HASH); /* every client's "weights" agree */
  if (atoll_sock_send(c->s, &c->tx, &m, NULL, 0))
    fprintf(stderr, "coord_load: island %u cannot send %s: %s\n", c->island, atoll_wire_type_name(type), zmq_strerror(zmq_errno()));
}

/* One reply to client c, received at now. */
static void on_reply(cl_run *r, cl_client *c, const atoll_wire_msg *m, size_t len, double now) {
  switch (m->type) {
  case ATOLL_WIRE_WELCOME:
    c->welcomes++;
    if (c->state == C_HELLO) {
      c->state = C_ADMITTED;
      cl_samples_add(&r->admit, now - c->hello_at);
      c->next_beat = now + 1;
    } else if (c->pending && r->cfg->rtt == RTT_HELLO) {
      cl_samples_add(&r->rtt, now - c->asked_at);
      c->pending = 0, c->answered++;
    }
    break;
  case ATOLL_WIRE_ERROR:
    c->errors++;
    c->errors_max += strstr(m->u.text, FULL) != NULL;
    if (c->state == C_HELLO && strstr(m->u.text, FULL)) {
      c->state = C_REFUSED;
      if (!r->refusal[0]) snprintf(r->refusal, sizeof r->refusal, "%s", m->u.text);
    }
    else {
      r->other_errors++;
      if (r->other_errors <= 3) fprintf(stderr, "coord_load: island %u: ERROR %s\n", c->island, m->u.text);
    }
    break;
  case ATOLL_WIRE_WAIT:
    /* (other WAITs, e.g. "behind the run", come unasked: a READY's answer is this one) */
    if (c->pending && r->cfg->rtt == RTT_READY && strncmp(m->u.text, WAIT_ISLANDS, strlen(WAIT_ISLANDS)) == 0) {
      if (c->asked > 1) cl_samples_add(&r->rtt, now - c->asked_at); /* (step 1: the warm-up) */
      c->pending = 0, c->answered++;
    }
    break;
  case ATOLL_WIRE_QUORUM:
    if (c->x == 1) {
      c->quorum = m->u.quorum.id, c->quorum_bytes = len;
      r->x_members = (int)m->u.quorum.n;
      r->x_quorum = now;
      send_sync(c, ATOLL_WIRE_DONE, c->asked, c->quorum, 0);
      c->x = 2;
    }
    break;
  case ATOLL_WIRE_GO:
    if (c->x == 2 && m->u.sync.revision == c->quorum) {
      r->x_go = now;
      send_sync(c, ATOLL_WIRE_COMMIT, c->asked, 0, 1);
      c->x = 3;
    }
    break;
  case ATOLL_WIRE_COMMITTED:
    if (c->x == 3) c->x = 4, r->x_merge = now;
    break;
  case ATOLL_WIRE_ABORT: /* as an island does: discard, and ask again */
    c->aborts++;
    if (c->x == 2 || c->x == 3) c->x = 1, send_sync(c, ATOLL_WIRE_READY, c->asked, 0, 0);
    break;
  default: break;
  }
}

/* Waits up to timeout_ms for replies and takes every one waiting. */
static void pump(cl_run *r, int timeout_ms) {
  static uint8_t buf[ATOLL_WIRE_MAX_CONTROL + 1];
  static atoll_wire_member mem[ATOLL_WIRE_MAX_MEMBERS];
  zmq_pollitem_t *it = r->items;
  if (zmq_poll(it, r->cfg->clients, timeout_ms) <= 0) return;
  for (int i = 0; i < r->cfg->clients; i++) {
    if (!(it[i].revents & ZMQ_POLLIN)) continue;
    for (;;) {
      int n = zmq_recv(r->c[i].s, buf, sizeof buf, ZMQ_DONTWAIT);
      if (n < 0) break;
      double now = atoll_net_now();
      atoll_wire_msg m;
      char why[200];
      size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf;
      if (atoll_wire_parse(buf, len, &m, mem, ATOLL_WIRE_MAX_MEMBERS, why, sizeof why) == 0) on_reply(r, &r->c[i], &m, len, now);
      else fprintf(stderr, "coord_load: island %d: unreadable reply: %s\n", i, why);
    }
  }
}

/* Admitted clients heartbeat every second, as islands do (no reply). */
static void beats(cl_run *r) {
  double now = atoll_net_now();
  for (int i = 0; i < r->cfg->clients; i++) {
    cl_client *c = &r->c[i];
    if (c->state != C_ADMITTED || c->next_beat > now) continue;
    send_hello(c, ATOLL_WIRE_HEARTBEAT);
    c->next_beat = c->next_beat + 1 > now ? c->next_beat + 1 : now + 1;
  }
}

static double cpu_now(const cl_run *r) { return r->cfg->coordinator_pid ? cl_proc_cpu(r->cfg->coordinator_pid) : NAN; }

/* (a) every client's HELLO at once (one each: a refused client is told once, and the
 * coordinator's socket keeps a HELLO queued until the connection is up), then replies
 * until each is admitted or refused, or the timeout */
int cl_register(cl_run *r) {
  int n = r->cfg->clients;
  r->cpu0 = cpu_now(r);
  double t0 = atoll_net_now();
  for (int i = 0; i < n; i++) {
    r->c[i].state = C_HELLO;
    r->c[i].hello_at = atoll_net_now();
    send_hello(&r->c[i], ATOLL_WIRE_HELLO);
  }
  for (;;) {
    int open = 0;
    for (int i = 0; i < n; i++) open += r->c[i].state == C_HELLO;
    if (open == 0 || atoll_net_now() - t0 > r->cfg->admit_timeout) break;
    pump(r, 10);
    beats(r);
  }
  r->t_register = atoll_net_now() - t0;
  r->cpu_register = cpu_now(r) - r->cpu0;
  for (int i = 0; i < n; i++) {
    r->admitted += r->c[i].state == C_ADMITTED;
    r->refused += r->c[i].state == C_REFUSED;
    r->unanswered += r->c[i].state == C_HELLO;
  }
  return 0;
}

static void ask(cl_client *c, int rtt) {
  c->pending = 1;
  c->asked_at = atoll_net_now();
  if (rtt == RTT_READY) send_sync(c, ATOLL_WIRE_READY, ++c->asked, 0, 0);
  else send_hello(c, ATOLL_WIRE_HELLO);
}

/* Replies for up to secs, heartbeating, until no admitted client has a question open. */
static void drain(cl_run *r, double secs) {
  double t0 = atoll_net_now();
  for (;;) {
    int open = 0;
    for (int i = 0; i < r->cfg->clients; i++) open += r->c[i].state == C_ADMITTED && r->c[i].pending;
    if (open == 0 || atoll_net_now() - t0 > secs) return;
    pump(r, 10);
    beats(r);
  }
}

/* (b) for --seconds: heartbeats, and one question a second from each admitted client,
 * spread evenly over the second (islands are not in step). READY carries a new step
 * each time: the coordinator answers a READY with a WAIT only when its (step, fragment)
 * is new (coordinator.c, on_ready). A first READY from everyone comes before (the
 * coordinator answers none until every member is ready: a barrier, not a round trip). */
int cl_steady(cl_run *r) {
  const cl_config *cfg = r->cfg;
  if (cfg->seconds <= 0 || r->admitted == 0) return 0;
  if (cfg->rtt == RTT_READY) {
    for (int i = 0; i < cfg->clients; i++)
      if (r->c[i].state == C_ADMITTED) ask(&r->c[i], RTT_READY);
    drain(r, 10);
  }
  double t0 = atoll_net_now(), cs = cpu_now(r);
  int k = 0;
  for (int i = 0; i < cfg->clients; i++)
    if (r->c[i].state == C_ADMITTED) r->c[i].next_ask = t0 + (double)k++ / r->admitted;
  while (atoll_net_now() - t0 < cfg->seconds) {
    pump(r, 5);
    beats(r);
    double now = atoll_net_now();
    for (int i = 0; cfg->rtt != RTT_NONE && i < cfg->clients; i++) {
      cl_client *c = &r->c[i];
      if (c->state != C_ADMITTED || c->next_ask > now) continue;
      if (!c->pending) ask(c, cfg->rtt); /* (still open: the question of the last second is late) */
      c->next_ask += 1;
    }
  }
  r->t_steady = atoll_net_now() - t0;
  r->cpu_steady = cpu_now(r) - cs;
  drain(r, 3);
  for (int i = 0; i < cfg->clients; i++) {
    r->rtt_clients += r->c[i].state == C_ADMITTED && r->c[i].answered > 0;
    r->rtt_unanswered += r->c[i].state == C_ADMITTED && r->c[i].pending;
  }
  return 0;
}

/* (c) every admitted client READY for the same step at once; each answers the QUORUM
 * with DONE, the GO with COMMIT (the same hash), and waits for COMMITTED */
int cl_exchange(cl_run *r) {
  const cl_config *cfg = r->cfg;
  if (!cfg->exchange || r->admitted == 0) return 0;
  uint32_t step = 0;
  for (int i = 0; i < cfg->clients; i++)
    if (r->c[i].asked > step) step = r->c[i].asked;
  step++;
  double cs = cpu_now(r);
  for (int i = 0; i < cfg->clients; i++) {
    cl_client *c = &r->c[i];
    if (c->state != C_ADMITTED) continue;
    c->asked = step, c->x = 1;
    send_sync(c, ATOLL_WIRE_READY, step, 0, 0);
  }
  double t0 = atoll_net_now(), again = t0 + 1;
  for (;;) {
    int open = 0;
    for (int i = 0; i < cfg->clients; i++) open += r->c[i].state == C_ADMITTED && r->c[i].x != 4;
    if (open == 0 || atoll_net_now() - t0 > cfg->exchange_timeout) break;
    pump(r, 10);
    beats(r);
    if (atoll_net_now() > again) { /* as islands do: READY again each second until the QUORUM */
      for (int i = 0; i < cfg->clients; i++)
        if (r->c[i].state == C_ADMITTED && r->c[i].x == 1) send_sync(&r->c[i], ATOLL_WIRE_READY, step, 0, 0);
      again += 1;
    }
  }
  r->t_exchange = atoll_net_now() - t0;
  r->cpu_exchange = cpu_now(r) - cs;
  for (int i = 0; i < cfg->clients; i++) {
    r->x_committed += r->c[i].state == C_ADMITTED && r->c[i].x == 4;
    r->x_aborts += r->c[i].aborts;
    if (r->c[i].quorum_bytes > r->x_quorum_bytes) r->x_quorum_bytes = r->c[i].quorum_bytes;
  }
  r->x_quorum = r->x_quorum > 0 ? r->x_quorum - t0 : NAN;
  r->x_go = r->x_go > 0 ? r->x_go - t0 : NAN;
  r->x_merge = r->x_committed == r->admitted ? r->x_merge - t0 : NAN;
  return 0;
}

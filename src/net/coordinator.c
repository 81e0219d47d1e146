/* The islands' coordinator (coordinator.h). One thread: a ROUTER socket polled every
 * 100 ms; membership timeouts are checked between messages. */
#include "net/coordinator_int.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static void handle(coord *c, long n, const route *from, const char *keyz, const char *addr) {
  atoll_wire_msg msg;
  static atoll_wire_member scratch[4];
  char why[200], who[200];
  atoll_coord_name_of(c, keyz, addr, who, sizeof who);
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
  member *m = atoll_coord_by_key(c, keyz, hello ? msg.u.hello.rank : msg.u.sync.rank);
  if (hello) {
    if (!m && !(m = atoll_coord_register_island(c, keyz, &msg.u.hello, from, addr))) return;
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
  if (atoll_coord_replayed(m, msg.session, msg.seq)) {
    fprintf(stderr, "coordinator: dropped %s from %s: replayed (session %016llx, seq %u already seen)\n",
            atoll_wire_type_name(msg.type), who, (unsigned long long)msg.session, msg.seq);
    return;
  }
  m->last_heard = atoll_net_now();
  if (msg.type == ATOLL_WIRE_HELLO) {
    if (m->hello_session && m->hello_session != msg.session) { /* the island's process was restarted */
      fprintf(stderr, "coordinator: island %u restarted (a new process with the same key); it joins anew\n", m->island);
      c->n_restarted++;
      int in_exchange = c->xq.open && atoll_coord_in_group(c, &c->xq, m) >= 0;
      char why[96];
      snprintf(why, sizeof why, "island %u restarted", m->island);
      if (in_exchange) atoll_coord_abort_exchange(c, why);
      m->gen = ++c->gens; /* no longer the member of any exchange or commit in flight */
      m->ready = m->committed = m->joining = 0;
      atoll_coord_try_commit(c);
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
      atoll_coord_try_quorum(c);
    }
    snprintf(m->endpoint, sizeof m->endpoint, "%s", msg.u.hello.endpoint);
    break;
  case ATOLL_WIRE_READY: /* islands repeat READY until they get an answer */
    m->ready_to = *from;
    if (c->xq.open && atoll_coord_in_group(c, &c->xq, m) >= 0 && c->xq.step == msg.u.sync.step && c->xq.frag == msg.u.sync.fragment) {
      atoll_coord_send_quorum(c, m); /* its QUORUM was lost (a restart of the island's socket) */
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
        atoll_coord_send_text(c, from, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
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
    atoll_coord_try_quorum(c);
    break;
  case ATOLL_WIRE_DONE: {
    m->ready_to = *from;
    int j = c->xq.open && c->xq.id == msg.u.sync.revision ? atoll_coord_in_group(c, &c->xq, m) : -1;
    if (j >= 0) {
      c->xq.done[j] = 1;
      atoll_coord_try_go(c);
    } else if (msg.u.sync.revision == c->go_id && c->go_id) {
      atoll_coord_send_sync(c, from, ATOLL_WIRE_GO, msg.u.sync.step, msg.u.sync.fragment, c->go_id, NULL); /* GO was lost */
    } else { /* an exchange this coordinator does not know (it restarted, or aborted it) */
      atoll_coord_send_sync(c, from, ATOLL_WIRE_ABORT, msg.u.sync.step, msg.u.sync.fragment, msg.u.sync.revision, NULL);
    }
    break;
  }
  case ATOLL_WIRE_COMMIT:
    m->commit_to = *from;
    if (msg.u.sync.step == c->last_step && c->revision > 0 && memcmp(msg.u.sync.hash, c->rank_hash[m->rank], ATOLL_WIRE_HASH) == 0 &&
        !(c->cq.n > 0 && c->cq.step == msg.u.sync.step)) {
      atoll_coord_send_sync(c, from, ATOLL_WIRE_COMMITTED, c->last_step, 0, c->revision, c->rank_hash[m->rank]); /* already committed */
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
          atoll_coord_mark_behind(c, o, msg.u.sync.step);
        if (o->used && !o->joining) g->slot[g->n] = i, g->gen[g->n++] = o->gen;
      }
    }
    atoll_coord_try_commit(c);
    break;
  default: break;
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
  if (atoll_key_read_secret(path, secret, pub, err) || atoll_coord_load_state(c, err)) goto done;
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
    atoll_coord_expire(c);
  }
  fprintf(stderr, "coordinator: stopping at revision %llu (step %u); members registered %llu, left %llu, restarted %llu; islands joined with the committed state %llu\n",
          (unsigned long long)c->revision, c->last_step, (unsigned long long)c->n_registered, (unsigned long long)c->n_left,
          (unsigned long long)c->n_restarted, (unsigned long long)c->n_state_joins);
  atoll_coord_save_state(c);
  rc = 0;
done:
  if (c->sock) zmq_close(c->sock);
  atoll_zap_stop(c->zap);
  if (c->ctx) zmq_ctx_term(c->ctx);
  free(c);
  return rc;
}

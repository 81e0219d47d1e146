/* The islands' coordinator (coordinator.h). One thread: a ROUTER socket polled every
 * 100 ms; membership timeouts are checked between messages. (The status page, with
 * --status-listen, has a thread of its own that reads only the snapshots this loop
 * publishes: coordinator_status.c.) */
#include "net/coordinator_int.h"
#include "net/monitor.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static void on_hello(coord *c, member *m, const atoll_wire_msg *msg, const route *from) {
  char text[200] = "";
  if (msg->type == ATOLL_WIRE_HELLO) {
    /* the island waits for this before any compute: its key and layout were taken (and
     * its data endpoint probed: the WELCOME goes after, atoll_coord_probe_start) */
    snprintf(text, sizeof text, "registered as island %u rank %u; the run is at step %u (revision %llu); members now %d, islands needed %d",
             m->island, m->rank, c->last_step, (unsigned long long)c->revision, atoll_coord_live(c), c->cfg->min_islands);
    if (m->hello_session && m->hello_session != msg->session) { /* the island's process was restarted */
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
    m->hello_session = msg->session;
  }
  m->step = msg->u.hello.step;
  /* more than one revision behind (a restarted island, or one still fetching when
   * this coordinator restarted): not waited for; it joins when it asks (READY) */
  if (!m->joining && msg->u.hello.revision + 1 < c->revision) {
    m->joining = 1;
    m->ready = 0;
    fprintf(stderr, "coordinator: island %u holds revision %llu, the run is at %llu: it joins when it asks\n", m->island,
            (unsigned long long)msg->u.hello.revision, (unsigned long long)c->revision);
    atoll_coord_try_quorum(c);
  }
  snprintf(m->endpoint, sizeof m->endpoint, "%s", msg->u.hello.endpoint);
  m->held = msg->u.hello.revision; /* (the status page's) */
  m->tokens_per_step = msg->u.hello.tokens_per_step, m->loss = msg->u.hello.loss, m->sent_bytes = msg->u.hello.sent_bytes;
  if (text[0]) atoll_coord_probe_start(c, m, from, text);
}

/* Whether a joining island can never get the committed state: an island finished the
 * run, and no member that holds the state is left to send it. */
static int nothing_to_join(const coord *c) {
  if (c->n_finished == 0) return 0;
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && !c->m[i].joining) return 0;
  return 1;
}

/* No island holding the committed state is registered, and none finished: the others
 * stopped (--stop-after, a signal) or left silent. After a restart's grace (the members
 * re-register by heartbeat meanwhile) a joiner is told so: no commit comes until they
 * are back (it waited out 10 x --net-timeout, and a stop signal left no checkpoint). */
static int no_donor(const coord *c) {
  if (c->n_finished || atoll_net_now() - c->started < c->cfg->island_timeout) return 0;
  for (int i = 0; i < MAX_MEMBERS; i++)
    if (c->m[i].used && !c->m[i].joining) return 0;
  return 1;
}

static void tell_no_donor(coord *c, member *m, const route *from) {
  char text[300];
  snprintf(text, sizeof text,
           ATOLL_WIRE_NO_DONOR "no island holding the run's state (revision %llu, step %u) is registered: they stopped or left; "
           "start island %u again once they are back",
           (unsigned long long)c->revision, c->last_step, m->island);
  if (atoll_coord_say(&c->unreg, m->keyz)) /* (once per 10 s: it asks every second) */
    fprintf(stderr, "coordinator: island %u asks to join, but no island holding the run's state is registered: told that no commit is coming\n",
            m->island);
  atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
}

/* A joining island meets a finished run: told so in one line (else it would wait for
 * a commit that never comes), and it leaves. */
static void refuse_join_after_end(coord *c, member *m, const route *from) {
  char text[300];
  snprintf(text, sizeof text,
           ATOLL_WIRE_RUN_ENDED "%u (revision %llu) while island %u was away: the islands that finished hold its final weights; "
           "nothing is left to join",
           c->last_step, (unsigned long long)c->revision, m->island);
  fprintf(stderr, "coordinator: island %u asks to join, but the run ended at step %u and no island holding its state is left: told so\n",
          m->island, c->last_step);
  atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
  m->used = 0;
  c->n_left++;
  c->finished_here += c->finished_here == 0; /* with no member left, this coordinator ends too */
}

static void on_ready(coord *c, member *m, const atoll_wire_sync *s, const route *from) {
  m->ready_to = *from; /* islands repeat READY until they get an answer */
  if (c->xq.open && atoll_coord_in_group(c, &c->xq, m) >= 0 && c->xq.step == s->step && c->xq.frag == s->fragment) {
    atoll_coord_send_quorum(c, m); /* its QUORUM was lost (a restart of the island's socket) */
    return;
  }
  if (!(m->ready && m->ready_step == s->step && m->ready_frag == s->fragment)) m->waiting_told = 0;
  if (c->revision > 0 && s->revision > c->revision) { /* its state is newer than this coordinator's */
    char text[300];
    snprintf(text, sizeof text,
             "island %u holds revision %llu, ahead of this coordinator's revision %llu: the coordinator's state file is older than the run (restore the newer one, or start the islands from checkpoints of this revision)",
             m->island, (unsigned long long)s->revision, (unsigned long long)c->revision);
    if (atoll_coord_say(&c->unreg, m->keyz)) fprintf(stderr, "coordinator: refused: %s\n", text);
    atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
    return;
  }
  /* (also: late for an exchange that opened without it when a grace window ended) */
  int late = c->xq.open && s->step <= c->xq.step && m->joining;
  if (late || (c->revision > 0 && (s->revision != c->revision || s->step <= c->last_step ||
                                   (c->cq.n > 0 && s->step <= c->cq.step && m->joining)))) {
    if (!m->joining) {
      if (s->revision != c->revision)
        fprintf(stderr, "coordinator: island %u holds revision %llu, the run is at %llu: it joins at the next commit\n", m->island,
                (unsigned long long)s->revision, (unsigned long long)c->revision);
      else
        fprintf(stderr, "coordinator: island %u is behind (ready for step %u, step %u is committed): it joins at the next commit\n",
                m->island, s->step, c->last_step);
    }
    if (!m->joining || !m->waiting_told) { /* (a WAIT extends the island's bound on its wait) */
      atoll_coord_send_text(c, from, ATOLL_WIRE_WAIT, "behind the run: joining at the next commit");
      m->waiting_told = 1;
    }
    /* told where to fetch the state, it asks again: the fetch failed (the donor died) */
    if (m->joining != 2 || atoll_net_now() - m->state_sent > 2.0) m->joining = 1;
    if (m->joining == 1 && nothing_to_join(c)) {
      refuse_join_after_end(c, m, from);
      return;
    }
    if (m->joining != 2 && no_donor(c)) {
      tell_no_donor(c, m, from);
      return;
    }
  } else {
    m->joining = 0;
  }
  m->ready = 1;
  m->ready_step = s->step;
  m->ready_frag = s->fragment;
  atoll_coord_try_quorum(c);
}

static void on_done(coord *c, member *m, const atoll_wire_sync *s, const route *from) {
  m->ready_to = *from;
  int j = c->xq.open && c->xq.id == s->revision ? atoll_coord_in_group(c, &c->xq, m) : -1;
  if (j >= 0) {
    c->xq.done[j] = 1;
    atoll_coord_try_go(c);
  } else if (s->revision == c->go_id && c->go_id) {
    atoll_coord_send_sync(c, from, ATOLL_WIRE_GO, s->step, s->fragment, c->go_id, NULL); /* GO was lost */
  } else { /* an exchange this coordinator does not know (it restarted, or aborted it) */
    atoll_coord_send_sync(c, from, ATOLL_WIRE_ABORT, s->step, s->fragment, s->revision, NULL);
  }
}

static void on_commit(coord *c, member *m, const atoll_wire_sync *s, const route *from) {
  m->commit_to = *from;
  if (c->revision > 0 && s->step < c->last_step) {
    /* the run committed later steps without it: it left during this commit (its link
     * was cut, or it was stopped, for longer than --island-timeout) and came back.
     * Unanswered it waited out its bound and stopped; it is answered with its own
     * revision and hash (nothing new for it), so that its next READY finds it behind
     * and it joins with the committed state */
    if (m->commit_step != s->step) /* (once: a restored link delivers its repeated COMMITs at once) */
      fprintf(stderr, "coordinator: island %u commits step %u, the run is at step %u (revision %llu): it left meanwhile; it keeps revision %llu and joins\n",
              m->island, s->step, c->last_step, (unsigned long long)c->revision, (unsigned long long)s->revision);
    m->commit_step = s->step;
    atoll_coord_send_sync(c, from, ATOLL_WIRE_COMMITTED, s->step, 0, s->revision, s->hash);
    return;
  }
  if (s->step == c->last_step && c->revision > 0 && memcmp(s->hash, c->rank_hash[m->rank], ATOLL_WIRE_HASH) == 0 &&
      !(c->cq.n > 0 && c->cq.step == s->step)) {
    atoll_coord_send_sync(c, from, ATOLL_WIRE_COMMITTED, c->last_step, 0, c->revision, c->rank_hash[m->rank]); /* already committed */
    return;
  }
  m->committed = 1;
  m->commit_step = s->step;
  memcpy(m->commit_hash, s->hash, ATOLL_WIRE_HASH);
  group *g = &c->cq;
  if (g->n == 0 || g->step != s->step) { /* e.g. after a restart: the members that commit */
    memset(g, 0, sizeof *g);
    g->step = s->step;
    g->rebuilt = 1;
    for (int i = 0; i < MAX_MEMBERS; i++) {
      member *o = &c->m[i];
      if (o->used && !o->joining && o != m && o->ready && o->ready_step <= s->step) atoll_coord_mark_behind(c, o, s->step);
      if (o->used && !o->joining) g->slot[g->n] = i, g->island[g->n] = o->island, g->rank[g->n] = o->rank, g->gen[g->n++] = o->gen;
    }
  } else if (g->rebuilt && !m->joining && atoll_coord_in_group(c, g, m) < 0 && g->n < MAX_MEMBERS) {
    /* a rebuilt commit group is only those registered when the first COMMIT came; a
     * member that re-registered since (its heartbeat came later) and commits the same
     * step applied it too: without it, a rank of the run could have no hash at all */
    g->slot[g->n] = (int)(m - c->m), g->island[g->n] = m->island, g->rank[g->n] = m->rank, g->gen[g->n++] = m->gen;
  } else if (!m->joining && atoll_coord_in_group(c, g, m) < 0) {
    /* a member of the group that left after its GO (silent, or its connection closed)
     * and registered again (a new generation) applied the exchange too: it takes its old
     * entry back, or no member of its rank would be left to commit and the step would
     * wait for ever (its hash is still compared with the others') */
    for (int j = 0; j < g->n; j++)
      if (g->island[j] == m->island && g->rank[j] == m->rank && !atoll_coord_group_member(c, g, j)) {
        g->slot[j] = (int)(m - c->m), g->gen[j] = m->gen;
        break;
      }
  }
  atoll_coord_try_commit(c);
}

/* Parses one message; 0, or -1 (dropped, with one line). */
static int parse(coord *c, long n, const char *who, atoll_wire_msg *msg) {
  static atoll_wire_member scratch[4];
  char why[200];
  if (n == -2) {
    fprintf(stderr, "coordinator: dropped a message from %s: more than one frame\n", who);
    return -1;
  }
  if (n > (long)ATOLL_WIRE_MAX_CONTROL) {
    fprintf(stderr, "coordinator: dropped a message from %s: oversized (%ld bytes; at most %u)\n", who, n, ATOLL_WIRE_MAX_CONTROL);
    return -1;
  }
  if (atoll_wire_parse(c->buf, (size_t)n, msg, scratch, 4, why, sizeof why)) {
    fprintf(stderr, "coordinator: dropped a message from %s: %s\n", who, why);
    return -1;
  }
  return 0;
}

/* READY, DONE, COMMIT or BYE from an allowed key that is not a member: normal, not an
 * attack. An island that left (silent through a cut link, or stalled) or that a restarted
 * coordinator does not know yet keeps repeating its READY, and when a cut link comes back
 * its socket delivers every READY queued meanwhile at once (a second's worth each),
 * before its next heartbeat registers it again. Ignored, and said once per key per 10 s. */
static void unregistered(coord *c, const atoll_wire_msg *msg, const char *keyz, const char *who) {
  if (!atoll_coord_say(&c->unreg, keyz)) return;
  fprintf(stderr, "coordinator: ignored %s from %s: not a member (it left, or this coordinator restarted); its next heartbeat registers it\n",
          atoll_wire_type_name(msg->type), who);
}

/* A heartbeat sent by a finished island just before its BYE may arrive after it (the
 * heartbeat has its own connection): from a session that said goodbye it is dropped
 * rather than registering the finished island again. */
static int said_goodbye(const coord *c, uint64_t session) {
  for (int i = 0; i < RETIRED; i++)
    if (session && c->bye_sessions[i] == session) return 1;
  return 0;
}

/* The member a message comes from (registering it on HELLO), or NULL (dropped, with one line). */
static member *sender(coord *c, const atoll_wire_msg *msg, const route *from, const char *keyz, const char *addr,
                      const char *who) {
  int hello = msg->type == ATOLL_WIRE_HELLO || msg->type == ATOLL_WIRE_HEARTBEAT;
  if (hello) atoll_coord_forget_reshaped(c, keyz, &msg->u.hello);
  member *m = atoll_coord_by_key(c, keyz, hello ? msg->u.hello.rank : msg->u.sync.rank);
  if (hello) {
    if (!m && msg->type == ATOLL_WIRE_HEARTBEAT && said_goodbye(c, msg->session)) return NULL;
    if (!m && !(m = atoll_coord_register_island(c, keyz, &msg->u.hello, from, addr))) return NULL;
    if (m->island != msg->u.hello.island) {
      fprintf(stderr, "coordinator: dropped %s from %s: it claims island %u\n", atoll_wire_type_name(msg->type), who,
              msg->u.hello.island);
      return NULL;
    }
  } else if (msg->type != ATOLL_WIRE_READY && msg->type != ATOLL_WIRE_COMMIT && msg->type != ATOLL_WIRE_DONE &&
             msg->type != ATOLL_WIRE_BYE) {
    fprintf(stderr, "coordinator: dropped a message from %s: %s is not sent to a coordinator\n", who,
            atoll_wire_type_name(msg->type));
    return NULL;
  } else if (!m) {
    unregistered(c, msg, keyz, who);
    return NULL;
  }
  int replay = atoll_coord_replayed(m, msg->session, msg->seq, atoll_net_now(), c->cfg->island_timeout);
  if (replay == 1)
    fprintf(stderr, "coordinator: dropped %s from %s: replayed (session %016llx, seq %u already seen)\n",
            atoll_wire_type_name(msg->type), who, (unsigned long long)msg->session, msg->seq);
  else if (replay == 2)
    fprintf(stderr, "coordinator: dropped %s from %s: a new session while %d of its sessions are live (heard within --island-timeout %g s)\n",
            atoll_wire_type_name(msg->type), who, SESSIONS, c->cfg->island_timeout);
  if (replay) return NULL;
  return m;
}

/* A coordinator restored at revision R > 0 continues the run whose islands hold R (or
 * R - 1: the COMMITTED of R not yet read; such an island's COMMIT of the committed step
 * is answered). Islands that all hold less are fresh processes (restarted islands join
 * by fetching from one that holds R): once no island of the state's run re-registered
 * within --island-timeout, they belong to another run given the same --state, and would
 * wait for a donor that never comes; each is refused with an ERROR, logged once. */
static int other_run(coord *c, const member *m, const atoll_wire_msg *msg, const route *from) {
  if (!c->unconfirmed || msg->type == ATOLL_WIRE_DONE || msg->type == ATOLL_WIRE_BYE) return 0;
  int hello = msg->type == ATOLL_WIRE_HELLO || msg->type == ATOLL_WIRE_HEARTBEAT;
  uint64_t rev = hello ? msg->u.hello.revision : msg->u.sync.revision;
  int committed = msg->type == ATOLL_WIRE_COMMIT && msg->u.sync.step == c->last_step &&
                  memcmp(msg->u.sync.hash, c->rank_hash[m->rank], ATOLL_WIRE_HASH) == 0;
  if ((rev > 0 && rev + 1 >= c->revision) || committed) {
    c->unconfirmed = 0;
    return 0;
  }
  if (atoll_net_now() - c->started < c->cfg->island_timeout) return 0; /* the grace to re-register */
  char text[600];
  snprintf(text, sizeof text,
           "the coordinator's state file %.300s is at revision %llu (step %u) of an earlier run, and no island of that run is left: "
           "start this run's coordinator with another --state (or remove that file)",
           c->state_path, (unsigned long long)c->revision, c->last_step);
  if (!c->refused_run)
    fprintf(stderr, "coordinator: refused island %u (revision %llu): %s\n", m->island, (unsigned long long)rev, text);
  c->refused_run = 1;
  if (msg->type != ATOLL_WIRE_HEARTBEAT) atoll_coord_send_text(c, from, ATOLL_WIRE_ERROR, text);
  return 1;
}

/* A finished island says so (BYE): it leaves now, not after --island-timeout of silence. */
static void on_bye(coord *c, member *m, uint32_t step) {
  if (c->xq.open && atoll_coord_in_group(c, &c->xq, m) >= 0) {
    char why[96];
    snprintf(why, sizeof why, "island %u finished", m->island);
    atoll_coord_abort_exchange(c, why);
  }
  for (int i = 0; i < SESSIONS; i++)
    if (m->sessions[i]) c->bye_sessions[c->next_bye++ % RETIRED] = m->sessions[i];
  m->used = 0;
  atoll_coord_units_left(c, m->island); /* (an open run: the unit it asked ahead goes back) */
  c->n_finished++;
  c->finished_here++;
  if (m->ranks > 1)
    fprintf(stderr, "coordinator: island %u rank %u finished (said goodbye at step %u); %d members\n", m->island, m->rank,
            step, atoll_coord_live(c));
  else
    fprintf(stderr, "coordinator: island %u finished (said goodbye at step %u); %d members\n", m->island, step,
            atoll_coord_live(c));
  atoll_coord_save_state(c);
  atoll_coord_try_commit(c);
  atoll_coord_try_quorum(c);
}

static void handle(coord *c, long n, const route *from, const char *keyz, const char *addr) {
  atoll_wire_msg msg;
  char who[200];
  atoll_coord_name_of(c, keyz, addr, who, sizeof who);
  if (parse(c, n, who, &msg)) return;
  if (msg.type == ATOLL_WIRE_ASK) { /* before any HELLO: answered, no member made */
    atoll_coord_on_ask(c, from, keyz, who, msg.u.settings.rank);
    return;
  }
  if (msg.type == ATOLL_WIRE_UNITS) { /* on a socket of its own, by slot: answered, no member made */
    atoll_coord_on_units(c, from, keyz, who, &msg.u.units);
    return;
  }
  member *m = sender(c, &msg, from, keyz, addr, who);
  if (!m) return;
  m->last_heard = atoll_net_now();
  atoll_coord_heard_on(m, from->fd);
  if (other_run(c, m, &msg, from)) return;
  switch (msg.type) {
  case ATOLL_WIRE_HELLO:
  case ATOLL_WIRE_HEARTBEAT: on_hello(c, m, &msg, from); break;
  case ATOLL_WIRE_READY: on_ready(c, m, &msg.u.sync, from); break;
  case ATOLL_WIRE_DONE: on_done(c, m, &msg.u.sync, from); break;
  case ATOLL_WIRE_COMMIT: on_commit(c, m, &msg.u.sync, from); break;
  case ATOLL_WIRE_BYE: atoll_coord_status_bye(c, m, msg.u.sync.step), on_bye(c, m, msg.u.sync.step); break;
  default: break;
  }
}

/* Connections that closed (a killed island's: the kernel closes them at once) mark
 * the members last heard on them. */
static void closed_connections(coord *c, atoll_monitor *mon) {
  static atoll_monitor_conn closed[ATOLL_MONITOR_CLOSED];
  int lost = 0, n = atoll_monitor_closed(mon, closed, ATOLL_MONITOR_CLOSED, &lost);
  for (int i = 0; i < n; i++) atoll_coord_connection_closed(c, closed[i].fd, closed[i].peer);
  /* (lost: more closed at once than kept; those members leave after --island-timeout) */
}

/* Quorum ids increase across restarts: islands match DONE, GO and ABORT by id and take
 * DATA of a lower id for an aborted attempt's. A restarted coordinator counting from 1
 * again would reuse its predecessor's ids (a DONE of the old exchange 3 counted for the
 * new exchange 3), so ids start at the wall clock in microseconds: above every id of a
 * predecessor, which started earlier and gave fewer than one id per microsecond. */
static uint64_t first_quorum_id(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Each member holds up to three connections to the coordinator (its link, its
 * heartbeats, an open run's UNITS) and each HELLO opens a probe (coordinator_probe.c):
 * MAX_MEMBERS of them need more descriptors than the usual soft limit of 1024. The soft
 * limit is raised to the hard one when lower than that; still lower, it says so once. */
static void raise_open_files(void) {
  const rlim_t need = 4 * MAX_MEMBERS + 64;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need) return;
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl)) getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < need)
    fprintf(stderr, "coordinator: WARNING: at most %llu open files (ulimit -n, hard limit %llu; was %llu): %d members need about %llu; members past that may be cut off\n",
            (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, (unsigned long long)was, MAX_MEMBERS,
            (unsigned long long)need);
}

int atoll_coordinator_run(const atoll_coordinator_config *cfg, const volatile sig_atomic_t *stop, atoll_err *err) {
  if (sodium_init() < 0) return atoll_fail(err, "libsodium cannot start");
  raise_open_files();
  coord *c = calloc(1, sizeof *c);
  if (!c) return atoll_fail(err, "out of memory");
  c->cfg = cfg;
  c->lock_fd = -1;
  /* state only where --state names it: a default in the keys directory, shared by every
   * run that uses those keys, made a new run continue an old run's revision */
  if (cfg->state && snprintf(c->state_path, sizeof c->state_path, "%s", cfg->state) >= (int)sizeof c->state_path) {
    free(c);
    return atoll_fail(err, "--state %.200s...: path too long", cfg->state);
  }
  int rc = -1;
  atoll_monitor *mon = NULL; /* logs failed handshakes (monitor.h) */
  uint8_t secret[ATOLL_KEY_BYTES], pub[ATOLL_KEY_BYTES];
  char path[4200];
  if (atoll_key_path(path, sizeof path, cfg->keys, "key.secret", err) || atoll_key_read_secret(path, secret, pub, err) ||
      atoll_coord_lock_state(c, err) || atoll_coord_load_state(c, err))
    goto done;
  atoll_sender_init(&c->tx);
  c->ctx = zmq_ctx_new();
  if (atoll_zap_start(&c->zap, c->ctx, "coordinator", 0, err)) goto done;
  atoll_key_path(path, sizeof path, cfg->keys, "allowed", err); /* (shorter than key.secret's, checked above) */
  snprintf(c->allowed, sizeof c->allowed, "%s", path);
  if (atoll_keys_private_dir(cfg->keys, err) || atoll_keys_private_dir(path, err)) goto done;
  int allowed = atoll_zap_allow_dir(c->zap, path, NULL, err);
  if (allowed < 0 || atoll_coord_load_slots(c, path, err)) goto done;
  if (allowed == 0) {
    atoll_fail(err, "--keys %s: no island keys in %s/ (copy each island's key.pub there, as NAME.pub)", cfg->keys, path);
    goto done;
  }
  c->sock = atoll_sock_server(c->ctx, ZMQ_ROUTER, secret, err);
  if (!c->sock) goto done;
  int handover = 1; /* a restarted island takes over its routing id */
  zmq_setsockopt(c->sock, ZMQ_ROUTER_HANDOVER, &handover, sizeof handover);
  if (atoll_monitor_start(&mon, c->ctx, c->sock, "coordinator", err)) goto done;
  char bound[256]; /* (the port ZeroMQ took, for tcp://HOST:0) */
  if (atoll_sock_bind(c->sock, "--listen", cfg->listen, bound, sizeof bound, err)) goto done;
  char pz[ATOLL_KEY_Z85 + 1];
  atoll_key_z85(pub, pz);
  char grace[64] = "";
  if (cfg->quorum_grace > 0) snprintf(grace, sizeof grace, ", quorum grace %g s", cfg->quorum_grace);
  fprintf(stderr, "coordinator: listening on %s (key %s), %d island keys allowed, min islands %d, island timeout %g s%s\n",
          bound, pz, allowed, cfg->min_islands, cfg->island_timeout, grace);
  if (atoll_coord_status_start(c, err)) goto done;
  double start = atoll_net_now();
  c->started = start;
  c->next_id = first_quorum_id();
  int finished = 0;
  while (!(stop && *stop) && !(cfg->run_seconds > 0 && atoll_net_now() - start > cfg->run_seconds)) {
    route from;
    char keyz[64], addr[64];
    long n = atoll_sock_recv_fd(c->sock, c->buf, sizeof c->buf, from.rid, &from.rid_len, keyz, addr, &from.fd, 100);
    if (n >= 0 || n == -2) handle(c, n, &from, keyz, addr);
    closed_connections(c, mon);
    atoll_coord_save_state_due(c);
    atoll_coord_expire(c);
    atoll_coord_probe_poll(c);
    atoll_coord_reread_allowed(c);
    if (cfg->quorum_grace > 0) atoll_coord_try_quorum(c); /* a grace window may have ended */
    atoll_coord_status_publish(c);
    /* the run is over once every member left and the last ones said they finished */
    if ((finished = c->finished_here > 0 && atoll_coord_live(c) == 0)) break;
  }
  fprintf(stderr, "coordinator: %s at revision %llu (step %u); members registered %llu, finished %llu, left %llu, restarted %llu; islands joined with the committed state %llu\n",
          finished ? "every island finished: the run ends" : "stopping", (unsigned long long)c->revision, c->last_step,
          (unsigned long long)c->n_registered, (unsigned long long)c->n_finished, (unsigned long long)c->n_left,
          (unsigned long long)c->n_restarted, (unsigned long long)c->n_state_joins);
  atoll_coord_save_state(c);
  atoll_coord_status_linger(c, stop);
  rc = 0;
done:
  atoll_coord_status_stop(c);
  atoll_monitor_stop(mon);
  if (c->sock) zmq_close(c->sock);
  atoll_zap_stop(c->zap);
  if (c->ctx) zmq_ctx_term(c->ctx);
  if (c->lock_fd >= 0) close(c->lock_fd);
  free(c);
  return rc;
}

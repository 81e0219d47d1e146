/* DiLoCo islands under the coordinator's merge policy, event by event (sim.h).
 *
 * An island computes a phase of H inner steps, then is READY. The coordinator opens an
 * exchange when atoll_policy_quorum (src/net/merge_policy.c, the real coordinator's rule)
 * says so, with the ready islands; the exchange lasts atoll_sim_exchange_seconds and
 * commits revision R + 1, and its members start their next phase. Every other island
 * the coordinator counted is late from the opening on, as in docs/islands.md: the next
 * exchanges do not wait for it. At the end of its phase it keeps its outer gradient and
 * is behind: it fetches the committed state (state_bytes: weights and outer momentum) at
 * the next commit, or at once when too few up-to-date islands are left for one, and
 * goes on; the kept gradient is merged into its next exchange, weighted 1 / (1 + s) for
 * s revisions missed (older kept work fades again at each miss).
 *
 * A failed island is down for restart_seconds and loses its phase and what it kept; the
 * coordinator counts it (live, and ready if it was) until island_timeout after the
 * failure, so an exchange that includes it stalls until then and opens again without
 * it; a restart before that drops it at once (the coordinator sees a new session). A
 * restarted island joins as a late one does. Failures strike running islands only, each
 * accelerator at rate 1 / mtbf. */
#include "sim/sim.h"

#include "core/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { COMPUTING, READY, EXCHANGING, BEHIND, FETCHING, DEAD };
enum { EV_PHASE_END, EV_COMMIT, EV_WAKE, EV_FAIL, EV_DROP, EV_RESTART, EV_FETCH_END };
#define SCRIPTED (-1) /* the tag of a --fail event (epochs are 0 or more) */

typedef struct {
  double t;
  long long seq; /* ties in the order queued: the same run for the same seed */
  int type, island;
  long long tag; /* the island's epoch, or the exchange's number */
} event;

typedef struct {
  event *e;
  int n, cap;
  long long seq;
} queue;

typedef struct {
  int state, counted, ready_seen; /* counted: live in the coordinator's view; ready_seen: ready there */
  long long epoch;                /* bumped by a failure: its queued events are void */
  long long rev, fetch_rev;       /* the revision its phase started from; the one it fetches */
  double step, acc, since;        /* seconds per step, accelerators, time of the last state change */
  double phase_work, phase_steps; /* accelerator-seconds and steps of the phase in progress */
  double kept, kept_discounted;   /* a late outer gradient's work; after its discount */
  long long kept_rev;
  double busy, idle, down;
} island;

typedef struct {
  const atoll_sim_config *c;
  atoll_sim_result *r;
  island *is;
  int K;
  queue q;
  atoll_rng rng;
  double now, fail_rate, first_ready, useful, staleness_sum, members_sum, state_bytes, wake_at, last_commit, steps;
  long long rev, exchange; /* the committed revision; the exchange in flight (0: none) */
  int *members, nmembers, live, ready, stalled;
} sim;

static int later(const event *a, const event *b) { return a->t > b->t || (a->t == b->t && a->seq > b->seq); }

static int push(sim *s, double t, int type, int island, long long tag) {
  queue *q = &s->q;
  if (q->n == q->cap) {
    int cap = q->cap ? 2 * q->cap : 1024;
    event *e = realloc(q->e, (size_t)cap * sizeof *e);
    if (!e) return -1;
    q->e = e, q->cap = cap;
  }
  event ev = {t, q->seq++, type, island, tag};
  int i = q->n++;
  while (i > 0 && later(&q->e[(i - 1) / 2], &ev)) q->e[i] = q->e[(i - 1) / 2], i = (i - 1) / 2;
  q->e[i] = ev;
  return 0;
}

static event pop(queue *q) {
  event top = q->e[0], last = q->e[--q->n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, m = l;
    if (l >= q->n) break;
    if (l + 1 < q->n && later(&q->e[l], &q->e[l + 1])) m = l + 1;
    if (!later(&last, &q->e[m])) break;
    q->e[i] = q->e[m], i = m;
  }
  if (q->n > 0) q->e[i] = last;
  return top;
}

static void set_state(sim *s, int i, int state) {
  island *p = &s->is[i];
  double dt = s->now - p->since;
  if (p->state == COMPUTING) p->busy += dt;
  else if (p->state == DEAD) p->down += dt;
  else p->idle += dt;
  p->state = state, p->since = s->now;
}

/* A phase's length factor: straggler_factor with the chance straggler_share. */
static double straggle(sim *s) {
  if (s->c->straggler_share <= 0) return 1;
  return atoll_rng_uniform(&s->rng) < s->c->straggler_share ? s->c->straggler_factor : 1;
}

/* H steps; with phase_seconds, the steps of its own speed that fit before the phase's
 * deadline, phase_seconds after the last commit (at least one): a late or restarted
 * island then ends its phase with the others. */
static int start_phase(sim *s, int i) {
  island *p = &s->is[i];
  set_state(s, i, COMPUTING);
  p->rev = s->rev;
  double steps = s->c->sync_every;
  if (s->c->phase_seconds > 0) steps = fmax(1, floor((s->last_commit + s->c->phase_seconds - s->now) / p->step + 1e-9));
  p->phase_steps = steps;
  double len = steps * p->step;
  p->phase_work = len * p->acc; /* a straggler's extra time is not work */
  len *= straggle(s);
  return push(s, s->now + len, EV_PHASE_END, i, p->epoch);
}

static int schedule_failure(sim *s, int i) {
  if (!s->c->random_failures) return 0;
  double u = atoll_rng_uniform(&s->rng);
  return push(s, s->now - log1p(-u) / (s->fail_rate * s->is[i].acc), EV_FAIL, i, s->is[i].epoch);
}

/* A late island's outer gradient, kept for its next exchange (older kept work, already
 * discounted at its fetch, rides along). */
static void keep(sim *s, int i) {
  island *p = &s->is[i];
  p->kept = p->phase_work + p->kept_discounted;
  p->kept_discounted = 0;
  p->kept_rev = p->rev;
  p->phase_work = 0;
}

static int fetch(sim *s, int i) {
  island *p = &s->is[i];
  set_state(s, i, FETCHING);
  p->fetch_rev = s->rev;
  s->r->bytes += s->state_bytes;
  double t = s->c->rtt + s->state_bytes * 8 / (s->c->link_bits * s->c->link_efficiency);
  return push(s, s->now + t, EV_FETCH_END, i, p->epoch);
}

/* The behind islands fetch the state at the next commit, or at once when fewer than
 * --min-islands up-to-date islands are left and no exchange is in flight (the next
 * commit would never come): the real coordinator's rule (docs/islands.md, "Joining"). */
static int release(sim *s) {
  if (s->exchange || s->live >= s->c->policy.min_islands) return 0;
  for (int j = 0; j < s->K; j++)
    if (s->is[j].state == BEHIND && fetch(s, j)) return -1;
  return 0;
}

static int behind(sim *s, int i) {
  set_state(s, i, BEHIND);
  return release(s);
}

static int try_open(sim *s) {
  if (s->exchange || s->ready == 0) return 0;
  double wake = 0;
  atoll_policy_verdict v = atoll_policy_quorum(&s->c->policy, s->live, s->ready, s->first_ready, s->now, &wake);
  if (v == ATOLL_POLICY_WAIT && wake > 0 && wake != s->wake_at) { /* one timer per window */
    s->wake_at = wake;
    return push(s, wake, EV_WAKE, -1, 0);
  }
  if (v != ATOLL_POLICY_OPEN) return 0;
  s->nmembers = 0;
  s->stalled = 0;
  for (int i = 0; i < s->K; i++)
    if (s->is[i].ready_seen) {
      s->is[i].ready_seen = 0;
      s->members[s->nmembers++] = i;
      if (s->is[i].state == READY) set_state(s, i, EXCHANGING);
      else s->stalled = 1; /* failed while ready: the coordinator does not know yet */
    } else if (s->is[i].counted) { /* the others are late from now on, until they join again */
      s->is[i].counted = 0;
      s->live--;
    }
  s->ready = 0;
  s->exchange++;
  return push(s, s->now + atoll_sim_exchange_seconds(s->c, s->nmembers), EV_COMMIT, -1, s->exchange);
}

static int commit(sim *s) {
  s->rev++;
  s->r->commits++;
  s->members_sum += s->nmembers;
  s->last_commit = s->now;
  int k = s->nmembers;
  double steps = 0;
  s->r->bytes += k > 1 ? 2.0 * (k - 1) * s->c->outer_bytes : 0;
  for (int m = 0; m < k; m++) {
    island *p = &s->is[s->members[m]];
    s->useful += p->phase_work;
    steps = fmax(steps, p->phase_steps);
    s->r->contributions++;
    if (p->kept_discounted > 0) {
      s->useful += p->kept_discounted;
      s->r->late_contributions++;
      s->staleness_sum += (double)(p->rev - p->kept_rev);
      p->kept_discounted = 0;
    }
  }
  s->steps += steps; /* the global model's inner steps: its longest member phase */
  for (int m = 0; m < k; m++)
    if (start_phase(s, s->members[m])) return -1;
  s->exchange = 0;
  for (int i = 0; i < s->K; i++) /* the late ones waiting for this commit */
    if (s->is[i].state == BEHIND && fetch(s, i)) return -1;
  return 0;
}

/* The coordinator stops counting island i (its timeout ran out, or it came back as a
 * new session); an exchange stalled on it opens again without it. */
static int drop(sim *s, int i) {
  island *p = &s->is[i];
  if (!p->counted) return 0;
  p->counted = 0;
  s->live--;
  if (p->ready_seen) p->ready_seen = 0, s->ready--;
  int member = 0;
  for (int m = 0; s->exchange && m < s->nmembers; m++) member |= s->members[m] == i;
  if (member) { /* abort: the others are ready again */
    s->exchange = 0;
    for (int m = 0; m < s->nmembers; m++) {
      int j = s->members[m];
      if (j == i || s->is[j].state != EXCHANGING) continue;
      set_state(s, j, READY);
      s->is[j].ready_seen = 1;
      if (s->ready++ == 0) s->first_ready = s->now;
    }
    for (int j = 0; j < s->K; j++) {
      island *o = &s->is[j];
      if (o->state == COMPUTING && !o->counted && o->rev == s->rev) /* late for nothing: counted again */
        o->counted = 1, s->live++;
    }
  }
  if (release(s)) return -1;
  return try_open(s);
}

static int phase_end(sim *s, int i) {
  island *p = &s->is[i];
  if (p->counted && p->rev == s->rev && !s->exchange) {
    set_state(s, i, READY);
    p->ready_seen = 1;
    if (s->ready++ == 0) s->first_ready = s->now;
    return try_open(s);
  }
  keep(s, i); /* late: an exchange opened without it (which made it late then) */
  if (p->counted) p->counted = 0, s->live--;
  if (behind(s, i)) return -1;
  return try_open(s);
}

/* It holds revision fetch_rev. A commit meanwhile leaves it behind again; an exchange
 * opened meanwhile went without it, so it steps uncounted, late for that exchange. */
static int fetch_end(sim *s, int i) {
  island *p = &s->is[i];
  if (p->fetch_rev < s->rev) return behind(s, i);
  if (p->kept > 0) {
    p->kept_discounted = p->kept / (1.0 + (double)(s->rev - p->kept_rev));
    p->kept = 0;
  }
  if (!s->exchange && !p->counted) p->counted = 1, s->live++;
  return start_phase(s, i);
}

static int fail(sim *s, int i) {
  island *p = &s->is[i];
  if (p->state == DEAD) return 0;
  s->r->failures++;
  p->epoch++;
  p->kept = p->kept_discounted = p->phase_work = 0;
  set_state(s, i, DEAD);
  if (p->counted && push(s, s->now + s->c->island_timeout, EV_DROP, i, p->epoch)) return -1;
  if (s->exchange)
    for (int m = 0; m < s->nmembers; m++) s->stalled |= s->members[m] == i;
  return push(s, s->now + s->c->restart_seconds, EV_RESTART, i, p->epoch);
}

static int restart(sim *s, int i) {
  if (drop(s, i)) return -1; /* a new session: the old one is dropped now if not before */
  s->is[i].epoch++;          /* and its pending drop is void */
  if (schedule_failure(s, i)) return -1;
  return behind(s, i);
}

static int step(sim *s, event ev) {
  island *p = ev.island >= 0 ? &s->is[ev.island] : NULL;
  switch (ev.type) {
  case EV_PHASE_END: return ev.tag == p->epoch ? phase_end(s, ev.island) : 0;
  case EV_COMMIT: return ev.tag == s->exchange && !s->stalled ? commit(s) : 0;
  case EV_WAKE: return try_open(s);
  case EV_FAIL: return ev.tag == p->epoch ? fail(s, ev.island) : 0;
  case EV_DROP: return ev.tag == p->epoch ? drop(s, ev.island) : 0;
  case EV_RESTART: return ev.tag == p->epoch ? restart(s, ev.island) : 0;
  case EV_FETCH_END: return ev.tag == p->epoch ? fetch_end(s, ev.island) : 0;
  }
  return 0;
}

int atoll_sim_run_islands(const atoll_sim_config *c, atoll_sim_result *r, atoll_err *err) {
  sim s = {.c = c, .r = r, .K = c->islands};
  s.is = calloc((size_t)s.K, sizeof *s.is);
  s.members = calloc((size_t)s.K, sizeof *s.members);
  int rc = 0;
  if (!s.is || !s.members) rc = atoll_fail(err, "out of memory for %d islands", s.K);
  atoll_rng_seed(&s.rng, c->seed);
  s.fail_rate = 1 / (c->mtbf_hours * 3600);
  s.state_bytes = c->grad_bytes * 2; /* fp32 weights and outer momentum */
  for (int i = 0; rc == 0 && i < s.K; i++) {
    island *p = &s.is[i];
    p->acc = c->accelerators / s.K;
    p->step = c->step_seconds * c->speeds[i % c->nspeeds];
    p->counted = 1;
    s.live++;
    if (start_phase(&s, i) || schedule_failure(&s, i)) rc = atoll_fail(err, "out of memory for the event queue");
  }
  for (int f = 0; rc == 0 && f < c->nfails; f++)
    if (push(&s, c->fails[f].at, EV_FAIL, c->fails[f].island, SCRIPTED)) rc = atoll_fail(err, "out of memory for the event queue");
  while (rc == 0 && s.q.n > 0 && s.q.e[0].t < c->seconds) {
    event ev = pop(&s.q);
    s.now = ev.t;
    r->events++;
    /* scripted failures strike whatever epoch the island is in */
    if (ev.type == EV_FAIL && ev.tag == SCRIPTED) ev.tag = s.is[ev.island].epoch;
    if (step(&s, ev)) rc = atoll_fail(err, "out of memory for the event queue");
    /* the coordinator's counts stay those of the islands (a test runs long runs on it) */
    else if (s.live < 0 || s.live > s.K || s.ready < 0 || s.ready > s.live)
      rc = atoll_fail(err, "simulator: %d live and %d ready of %d islands at %.0f s (a defect of atoll simulate)", s.live,
                      s.ready, s.K, s.now);
  }
  if (rc == 0) {
    s.now = c->seconds;
    double N = c->accelerators, umin = INFINITY, usum = 0, isum = 0, imax = 0, dsum = 0;
    for (int i = 0; i < s.K; i++) {
      set_state(&s, i, s.is[i].state); /* closes the last interval */
      double u = s.is[i].busy / c->seconds, w = s.is[i].idle / c->seconds;
      umin = fmin(umin, u), usum += u, isum += w, imax = fmax(imax, w), dsum += s.is[i].down / c->seconds;
    }
    r->seconds = c->seconds;
    r->goodput = s.useful / (N * c->seconds);
    r->utilisation_mean = usum / s.K, r->utilisation_min = umin;
    r->idle_mean = isum / s.K, r->idle_max = imax, r->down_mean = dsum / s.K;
    r->steps = (long long)s.steps;
    r->members_mean = r->commits ? s.members_sum / (double)r->commits : 0;
    r->staleness_mean = r->late_contributions ? s.staleness_sum / (double)r->late_contributions : 0;
  }
  free(s.q.e);
  free(s.is);
  free(s.members);
  return rc;
}

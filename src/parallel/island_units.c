/* An open run's island and its data units (island_units.h). */
#include "parallel/island_units.h"

#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define KNOWN 4 /* the phases whose units are kept: the current, the next, and two before */

struct atoll_island_units {
  void *ctx, *sock;
  atoll_sender tx;
  uint32_t rank;
  int phase, steps;
  double timeout;
  const atoll_diloco *diloco;
  int joins_seen;
  int64_t lost_from;             /* a join's lost phases, to tell at the next ask (-1: none) */
  uint32_t known_start[KNOWN];   /* phase starts, and their units */
  uint64_t known_unit[KNOWN];
  int nknown;
  int asked_start;               /* the phase start last asked for (-1: none yet) */
  atoll_wire_units asked;        /* that question, sent again every second until answered */
  double asked_at;
  int answered;
  char join[256];
  uint8_t buf[ATOLL_WIRE_MAX_CONTROL + 1];
};

static void remember(atoll_island_units *u, uint32_t start, uint64_t unit) {
  for (int i = 0; i < u->nknown; i++)
    if (u->known_start[i] == start) {
      u->known_unit[i] = unit; /* (the coordinator's answer is the truth) */
      return;
    }
  if (u->nknown == KNOWN) { /* forget the oldest */
    memmove(u->known_start, u->known_start + 1, (KNOWN - 1) * sizeof u->known_start[0]);
    memmove(u->known_unit, u->known_unit + 1, (KNOWN - 1) * sizeof u->known_unit[0]);
    u->nknown--;
  }
  u->known_start[u->nknown] = start, u->known_unit[u->nknown++] = unit;
}

int64_t atoll_island_units_of(const atoll_island_units *u, int step) {
  uint32_t start = (uint32_t)(step / u->phase * u->phase);
  for (int i = 0; i < u->nknown; i++)
    if (u->known_start[i] == start) return (int64_t)u->known_unit[i];
  return -1;
}

uint64_t atoll_island_units_window(const atoll_island_units *u, int step) {
  int64_t unit = atoll_island_units_of(u, step);
  /* (before() made sure it is known: a step without it never draws windows) */
  return (uint64_t)(unit < 0 ? 0 : unit) * (uint64_t)u->phase + (uint64_t)(step % u->phase);
}

int atoll_island_units_create(atoll_island_units **out, const char *join, const char *key_file,
                              const char *coordinator_key, uint32_t rank, int phase, int steps, double timeout,
                              const atoll_diloco *diloco, atoll_err *err) {
  *out = NULL;
  if (sodium_init() < 0) return atoll_fail(err, "libsodium cannot start");
  atoll_island_units *u = calloc(1, sizeof *u);
  if (!u) return atoll_fail(err, "out of memory");
  u->rank = rank, u->phase = phase, u->steps = steps, u->timeout = timeout, u->diloco = diloco;
  u->lost_from = -1, u->asked_start = -1;
  snprintf(u->join, sizeof u->join, "%s", join);
  uint8_t pub[ATOLL_KEY_BYTES], sec[ATOLL_KEY_BYTES], cpub[ATOLL_KEY_BYTES];
  if (atoll_key_read_secret(key_file, sec, pub, err) || atoll_key_read_public(coordinator_key, cpub, err)) goto fail;
  u->ctx = zmq_ctx_new();
  if (!u->ctx) {
    atoll_fail(err, "--join %s: ZeroMQ cannot start", join);
    goto fail;
  }
  if (!(u->sock = atoll_sock_client(u->ctx, ZMQ_DEALER, pub, sec, cpub, err))) goto fail;
  if (zmq_connect(u->sock, join)) {
    atoll_fail(err, "--join %s: %s", join, zmq_strerror(zmq_errno()));
    goto fail;
  }
  atoll_sender_init(&u->tx);
  *out = u;
  return 0;
fail:
  atoll_island_units_free(u);
  return -1;
}

void atoll_island_units_free(atoll_island_units *u) {
  if (!u) return;
  if (u->sock) zmq_close(u->sock); /* (linger 0: atoll_sock_client) */
  if (u->ctx) zmq_ctx_term(u->ctx);
  free(u);
}

/* Reads the coordinator's answers for up to wait_ms. 0, or -1 (an ERROR: err). */
static int read_answers(atoll_island_units *u, int wait_ms, atoll_err *err) {
  for (;;) {
    long n = atoll_sock_recv(u->sock, u->buf, ATOLL_WIRE_MAX_CONTROL, NULL, NULL, NULL, NULL, wait_ms);
    if (n < 0 || n > (long)ATOLL_WIRE_MAX_CONTROL) return 0;
    wait_ms = 0; /* then whatever else is queued */
    atoll_wire_msg m;
    atoll_wire_member none[1];
    char why[200];
    if (atoll_wire_parse(u->buf, (size_t)n, &m, none, 1, why, sizeof why)) {
      fprintf(stderr, "island: dropped a message from the coordinator (data units): %s\n", why);
      continue;
    }
    if (m.type == ATOLL_WIRE_ERROR) return atoll_fail(err, "--join %s: the coordinator says: %s", u->join, m.u.text);
    if (m.type != ATOLL_WIRE_UNIT) continue;
    remember(u, m.u.units.start, m.u.units.unit);
    if (m.u.units.next_end) remember(u, m.u.units.next_start, m.u.units.next_unit);
    if (m.u.units.start == u->asked.start && m.u.units.next_start == u->asked.next_start) u->answered = 1;
  }
}

static void send_ask(atoll_island_units *u) {
  atoll_wire_msg m = {.type = ATOLL_WIRE_UNITS};
  m.u.units = u->asked;
  atoll_sock_send_within(u->sock, &u->tx, &m, NULL, 0, 100);
  u->asked_at = atoll_net_now();
}

int atoll_island_units_before(atoll_island_units *u, int step, const volatile sig_atomic_t *stop, atoll_err *err) {
  int exchange;
  int joins = u->diloco ? atoll_diloco_joins(u->diloco, &exchange) : 0;
  if (joins != u->joins_seen) { /* the work since that exchange went with the island's weights */
    u->joins_seen = joins;
    u->lost_from = exchange;
  }
  uint32_t start = (uint32_t)(step / u->phase * u->phase), H = (uint32_t)u->phase;
  if ((int)start != u->asked_start || u->lost_from >= 0) { /* a phase begins (or the island jumped into one) */
    uint32_t lost = u->lost_from >= 0 && (uint32_t)u->lost_from <= start ? (uint32_t)u->lost_from : start;
    /* the run's last phase ends at --steps and has nothing ahead */
    uint32_t steps = (uint32_t)u->steps, end = start + H < steps ? start + H : steps;
    uint32_t next = end < steps ? end : 0, next_end = !next ? 0 : next + H < steps ? next + H : steps;
    u->asked = (atoll_wire_units){u->rank, start, end, next, next_end, lost, 0, 0};
    u->asked_start = (int)start;
    u->answered = 0;
    u->lost_from = -1;
    send_ask(u);
  }
  if (read_answers(u, 0, err)) return -1;
  double t0 = atoll_net_now();
  while (atoll_island_units_of(u, step) < 0) {
    if (stop && *stop) return atoll_fail(err, "stopped by a signal while waiting for the data unit of steps (%u, %u]", start, start + H);
    if (atoll_net_now() - t0 > u->timeout)
      return atoll_fail(err, "--join %s: no data unit for steps (%u, %u] within %g s (--net-timeout): is the coordinator running, with --open 1?",
                        u->join, start, start + H, u->timeout);
    if (read_answers(u, 100, err)) return -1;
    if (!u->answered && atoll_net_now() - u->asked_at >= 1.0) send_ask(u); /* (a lost frame, a coordinator restart) */
  }
  if (!u->answered && atoll_net_now() - u->asked_at >= 1.0) send_ask(u); /* the next phase's, ahead: again */
  return 0;
}

/* A scripted island for the network tests: connects to a coordinator with a key and
 * sends one kind of message (well-formed or not), then reads replies for a while.
 *
 *   net_peer ENDPOINT COORDINATOR_PUB SECRET_FILE ISLAND KIND [SECONDS]
 *
 * KIND: hello, ready (hello then READY for step 1), readyloop (the same, READY repeated
 * every 0.5 s as an island does while it waits), readyonly (READY every 0.5 s, never a
 * HELLO: an island the coordinator does not know), truncated, oversized, badmagic,
 * badtype, badversion, trailing, replay (one HELLO sent twice, same session and seq),
 * multipart, evict (a HELLO; then a HEARTBEAT from each of 8 new sessions, more than
 * the coordinator once remembered; then the first HELLO again, the same bytes), data.
 * Prints each reply as "reply TYPE ..." on stdout (WAIT, ERROR and WELCOME with their
 * text). The HELLO's data endpoint is $NET_PEER_ENDPOINT (default tcp://127.0.0.1:1).
 *
 * data: a member that plays foul in the exchange (the island's data door, link_data.c).
 * It registers with its data socket at $NET_PEER_LISTEN, sends READY for step
 * $NET_PEER_STEP (fragment 0) until the QUORUM comes, waits for the other member's
 * first phase-1 frame (which gives the piece's size and means its key is allowed),
 * then sends that member DATA frames no receiver may take, one each: phase 3 (a
 * joining island's state) at chunk 1, an empty range at offset == total, an offset
 * inside a chunk, another total. Prints "sent N hostile frames".
 *
 * applied: an island of an open run (coordinator --open 1) that applies one exchange.
 * It asks for its slot (ASK), for the units of phases (0, H] and (H, 2H] (UNITS,
 * H = $NET_PEER_STEP), registers, sends READY for step H until the QUORUM comes, DONE,
 * and waits for the GO (the exchange applied). With $NET_PEER_COMMIT set it then
 * commits step H (hash 0x11...), again every 0.5 s with a heartbeat, until COMMITTED
 * ("committed"); without, it exits at once ("applied": a member that dies between
 * applying and committing). $NET_PEER_SILENT=S: silent for S seconds after the GO first
 * (long enough, the coordinator drops it; its heartbeat registers it again). */
#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

static int send_raw(void *s, const uint8_t *b, size_t n) { return zmq_send(s, b, n, 0) < 0 ? -1 : 0; }

/* link_data.c's chunk size of a piece of qb bytes (the receiver derives it alike) */
static size_t chunk_of(size_t qb) {
  size_t c = ((qb + 15) / 16 + 4095) / 4096 * 4096;
  return c < 4096 ? 4096 : c < (1u << 20) ? c : (1u << 20);
}

/* The `data` kind (above): 0 when every hostile frame was sent. */
static int play_data(void *ctx, void *s, atoll_sender *tx, atoll_wire_msg *hello, const uint8_t pub[32], const uint8_t sec[32],
                     double secs) {
  const char *listen = getenv("NET_PEER_LISTEN"), *step_env = getenv("NET_PEER_STEP");
  if (!listen || !step_env) return fprintf(stderr, "net_peer: data needs NET_PEER_LISTEN and NET_PEER_STEP\n"), 1;
  atoll_err err;
  void *pull = atoll_sock_server(ctx, ZMQ_PULL, sec, &err);
  if (!pull || zmq_bind(pull, listen)) return fprintf(stderr, "net_peer: cannot listen on %s\n", listen), 1;
  snprintf(hello->u.hello.endpoint, sizeof hello->u.hello.endpoint, "%s", listen);
  atoll_sock_send(s, tx, hello, NULL, 0);
  static uint8_t buf[ATOLL_WIRE_MAX_DATA + 1];
  static atoll_wire_member mem[64];
  atoll_wire_msg q = {0}, r;
  char why[200];
  double t0 = atoll_net_now(), asked = -1;
  /* the island registered first and set the run's layout: the coordinator's refusal
   * names its fingerprint, which this peer then claims */
  while (atoll_net_now() - t0 < 1) {
    long k = atoll_sock_recv(s, buf, ATOLL_WIRE_MAX_CONTROL, NULL, NULL, NULL, NULL, 100);
    unsigned long long layout;
    const char *at;
    if (k > 0 && atoll_wire_parse(buf, (size_t)k, &r, mem, 64, why, sizeof why) == 0 && r.type == ATOLL_WIRE_ERROR &&
        (at = strstr(r.u.text, ", not ")) && sscanf(at, ", not %llx", &layout) == 1) {
      hello->u.hello.layout = layout;
      atoll_sock_send(s, tx, hello, NULL, 0);
      break;
    }
  }
  while (q.type != ATOLL_WIRE_QUORUM) { /* READY every second until the QUORUM */
    if (atoll_net_now() - t0 > secs) return fprintf(stderr, "net_peer: no quorum\n"), 1;
    if (atoll_net_now() - asked > 1) {
      atoll_wire_msg ready = {.type = ATOLL_WIRE_READY};
      ready.u.sync.step = (uint32_t)atoi(step_env);
      atoll_sock_send(s, tx, &ready, NULL, 0);
      asked = atoll_net_now();
    }
    long k = atoll_sock_recv(s, buf, ATOLL_WIRE_MAX_CONTROL, NULL, NULL, NULL, NULL, 100);
    if (k > 0 && atoll_wire_parse(buf, (size_t)k, &r, mem, 64, why, sizeof why) == 0 && r.type == ATOLL_WIRE_QUORUM) q = r;
  }
  int me = -1, other = -1;
  for (uint32_t i = 0; i < q.u.quorum.n; i++)
    if (mem[i].island == hello->u.hello.island) me = (int)i;
    else if (other < 0) other = (int)i;
  if (me < 0 || other < 0) return fprintf(stderr, "net_peer: not a quorum of two\n"), 1;
  atoll_wire_msg d = {0};
  while (d.type != ATOLL_WIRE_DATA || d.u.data.phase != 1) { /* the other's phase 1: its size */
    if (atoll_net_now() - t0 > secs) return fprintf(stderr, "net_peer: no data from the other member\n"), 1;
    long k = atoll_sock_recv(pull, buf, ATOLL_WIRE_MAX_DATA, NULL, NULL, NULL, NULL, 100);
    if (k > 0 && atoll_wire_parse(buf, (size_t)k, &r, NULL, 0, why, sizeof why) == 0) d = r;
  }
  size_t qb = d.u.data.total, CHUNK = chunk_of(qb), nch = (qb + CHUNK - 1) / CHUNK;
  void *push = atoll_sock_client(ctx, ZMQ_PUSH, pub, sec, mem[other].key, &err);
  if (!push || zmq_connect(push, mem[other].endpoint)) return 1;
  static uint8_t zeros[1u << 20];
  size_t c1 = nch > 1 ? CHUNK : 0, len1 = qb - c1 < CHUNK ? qb - c1 : CHUNK;
  atoll_wire_data base = {q.u.quorum.step, q.u.quorum.fragment, q.u.quorum.id, hello->u.hello.island, 1, (uint32_t)other,
                          0, qb, 0, 0, zeros};
  atoll_wire_data foul[4] = {base, base, base, base};
  foul[0].phase = 3, foul[0].piece = (uint32_t)me, foul[0].offset = c1, foul[0].len = (uint32_t)len1;
  foul[1].offset = qb, foul[1].len = 0; /* an empty range at offset == total */
  foul[2].offset = 1, foul[2].len = (uint32_t)(qb - 1 < CHUNK ? qb - 1 : CHUNK);
  foul[3].total = qb + 4096, foul[3].len = (uint32_t)(CHUNK < qb ? CHUNK : qb);
  int sent = 0;
  for (int i = 0; i < 4; i++) {
    atoll_wire_msg m = {.type = ATOLL_WIRE_DATA};
    m.u.data = foul[i];
    m.session = tx->session, m.seq = ++tx->seq; /* (encoded here: the sender refuses what the parser would) */
    size_t n = atoll_wire_encode(&m, buf, sizeof buf);
    zmq_pollitem_t it = {push, 0, ZMQ_POLLOUT, 0};
    if (n && zmq_poll(&it, 1, 5000) == 1 && send_raw(push, buf, n) == 0) sent++;
  }
  printf("sent %d hostile frames (piece of %zu bytes, %zu chunks)\n", sent, qb, nch);
  fflush(stdout);
  double t1 = atoll_net_now(); /* the frames leave before the sockets close */
  while (atoll_net_now() - t1 < 1) atoll_sock_recv(pull, buf, ATOLL_WIRE_MAX_DATA, NULL, NULL, NULL, NULL, 100);
  zmq_close(push);
  zmq_close(pull);
  return sent == 4 ? 0 : 1;
}

/* Waits up to secs for a message of `type` (heartbeats every 0.5 s when hb is given). */
static int await(void *s, atoll_sender *tx, atoll_wire_type type, atoll_wire_msg *out, double secs, atoll_wire_msg *hb) {
  static uint8_t buf[ATOLL_WIRE_MAX_CONTROL + 1];
  static atoll_wire_member mem[64];
  char why[200];
  double t0 = atoll_net_now(), beat = t0;
  while (atoll_net_now() - t0 < secs) {
    if (hb && atoll_net_now() - beat > 0.5) atoll_sock_send(s, tx, hb, NULL, 0), beat = atoll_net_now();
    long k = atoll_sock_recv(s, buf, ATOLL_WIRE_MAX_CONTROL, NULL, NULL, NULL, NULL, 100);
    if (k > 0 && atoll_wire_parse(buf, (size_t)k, out, mem, 64, why, sizeof why) == 0) {
      if (out->type == type) return 0;
      if (out->type == ATOLL_WIRE_ERROR) return fprintf(stderr, "net_peer: ERROR: %s\n", out->u.text), -1;
    }
  }
  return fprintf(stderr, "net_peer: no %s within %g s\n", atoll_wire_type_name(type), secs), -1;
}

/* The `applied` kind (above): 0 when it got the GO (and, committing, the COMMITTED). */
static int play_applied(void *s, atoll_sender *tx, atoll_wire_msg *hello, double secs) {
  const char *step_env = getenv("NET_PEER_STEP");
  if (!step_env) return fprintf(stderr, "net_peer: applied needs NET_PEER_STEP\n"), 1;
  uint32_t H = (uint32_t)atoi(step_env);
  atoll_wire_msg ask = {.type = ATOLL_WIRE_ASK}, r;
  atoll_sock_send(s, tx, &ask, NULL, 0);
  if (await(s, tx, ATOLL_WIRE_SETTINGS, &r, secs, NULL)) return 1;
  hello->u.hello.island = r.u.settings.slot;
  atoll_wire_msg units = {.type = ATOLL_WIRE_UNITS};
  units.u.units = (atoll_wire_units){0, 0, H, H, 2 * H, 0, 0, 0};
  atoll_sock_send(s, tx, &units, NULL, 0);
  if (await(s, tx, ATOLL_WIRE_UNIT, &r, secs, NULL)) return 1;
  printf("slot %u units %llu %llu\n", hello->u.hello.island, (unsigned long long)r.u.units.unit,
         (unsigned long long)r.u.units.next_unit);
  fflush(stdout);
  hello->u.hello.step = H;
  atoll_sock_send(s, tx, hello, NULL, 0);
  atoll_wire_msg hb = *hello, ready = {.type = ATOLL_WIRE_READY};
  hb.type = ATOLL_WIRE_HEARTBEAT;
  ready.u.sync.step = H;
  double t0 = atoll_net_now();
  for (;;) { /* READY every second until the QUORUM */
    atoll_sock_send(s, tx, &ready, NULL, 0);
    if (await(s, tx, ATOLL_WIRE_QUORUM, &r, 1.0, &hb) == 0) break;
    if (atoll_net_now() - t0 > secs) return 1;
  }
  atoll_wire_msg done = {.type = ATOLL_WIRE_DONE};
  done.u.sync = (atoll_wire_sync){H, 0, r.u.quorum.id, {0}, 0};
  atoll_sock_send(s, tx, &done, NULL, 0);
  if (await(s, tx, ATOLL_WIRE_GO, &r, secs, &hb)) return 1;
  if (!getenv("NET_PEER_COMMIT")) return printf("applied\n"), 0; /* (dies before its COMMIT) */
  if (getenv("NET_PEER_SILENT")) usleep((useconds_t)(atof(getenv("NET_PEER_SILENT")) * 1e6));
  atoll_wire_msg commit = {.type = ATOLL_WIRE_COMMIT};
  commit.u.sync = (atoll_wire_sync){H, 0, 0, {0}, 0};
  memset(commit.u.sync.hash, 0x11, ATOLL_WIRE_HASH);
  for (double t1 = atoll_net_now(); atoll_net_now() - t1 < secs;) { /* as an island: COMMIT until answered */
    atoll_sock_send(s, tx, &hb, NULL, 0);
    atoll_sock_send(s, tx, &commit, NULL, 0);
    if (await(s, tx, ATOLL_WIRE_COMMITTED, &r, 0.5, &hb) == 0) return printf("committed\n"), 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: net_peer ENDPOINT COORDINATOR_PUB SECRET_FILE ISLAND KIND [SECONDS]\n");
    return 2;
  }
  atoll_err err;
  uint8_t cpub[32], sec[32], pub[32];
  if (atoll_key_read_public(argv[2], cpub, &err) || atoll_key_read_secret(argv[3], sec, pub, &err)) {
    fprintf(stderr, "net_peer: %s\n", err.msg);
    return 1;
  }
  const char *kind = argv[5];
  double secs = argc > 6 ? atof(argv[6]) : 1.0;
  void *ctx = zmq_ctx_new();
  void *s = atoll_sock_client(ctx, ZMQ_DEALER, pub, sec, cpub, &err);
  if (!s || zmq_connect(s, argv[1])) return 1;
  atoll_sender tx;
  atoll_sender_init(&tx);
  atoll_wire_msg m = {.type = ATOLL_WIRE_HELLO};
  m.u.hello.island = (uint32_t)atoi(argv[4]);
  m.u.hello.ranks = getenv("NET_PEER_RANKS") ? (uint32_t)atoi(getenv("NET_PEER_RANKS")) : 1; /* an island of several ranks (its rank 0) */
  snprintf(m.u.hello.endpoint, sizeof m.u.hello.endpoint, "%s", getenv("NET_PEER_ENDPOINT") ? getenv("NET_PEER_ENDPOINT") : "tcp://127.0.0.1:1");
  m.session = 77;
  m.seq = 1;
  static uint8_t buf[200000];
  size_t n = atoll_wire_encode(&m, buf, sizeof buf);
  int loop_ready = strcmp(kind, "readyloop") == 0 || strcmp(kind, "readyonly") == 0;
  if (strcmp(kind, "data") == 0 || strcmp(kind, "applied") == 0) {
    int rc = kind[0] == 'd' ? play_data(ctx, s, &tx, &m, pub, sec, secs) : play_applied(s, &tx, &m, secs);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return rc;
  } else if (strcmp(kind, "readyonly") == 0) {
    /* no HELLO: the loop below sends the READYs */
  } else if (strcmp(kind, "hello") == 0 || strcmp(kind, "ready") == 0 || loop_ready) {
    atoll_sock_send(s, &tx, &m, NULL, 0);
    if (strcmp(kind, "ready") == 0 || loop_ready) {
      atoll_wire_msg r = {.type = ATOLL_WIRE_READY};
      r.u.sync.step = 1;
      atoll_sock_send(s, &tx, &r, NULL, 0);
    }
  } else if (strcmp(kind, "truncated") == 0) {
    send_raw(s, buf, n - 5);
  } else if (strcmp(kind, "oversized") == 0) {
    memset(buf + n, 'x', 100000);
    uint32_t plen = (uint32_t)(n - ATOLL_WIRE_HEADER + 100000);
    memcpy(buf + 20, &plen, 4);
    send_raw(s, buf, n + 100000);
  } else if (strcmp(kind, "badmagic") == 0) {
    buf[0] = 'X';
    send_raw(s, buf, n);
  } else if (strcmp(kind, "badtype") == 0) {
    buf[5] = 200;
    send_raw(s, buf, n);
  } else if (strcmp(kind, "badversion") == 0) {
    buf[4] = 9;
    send_raw(s, buf, n);
  } else if (strcmp(kind, "trailing") == 0) {
    buf[n] = 0;
    send_raw(s, buf, n + 1);
  } else if (strcmp(kind, "replay") == 0) {
    send_raw(s, buf, n);
    send_raw(s, buf, n);
  } else if (strcmp(kind, "evict") == 0) { /* sessions 0xe0 (the HELLO), 0xe1 to 0xe8 */
    atoll_wire_msg e = m;
    e.session = 0xe0;
    n = atoll_wire_encode(&e, buf, sizeof buf);
    send_raw(s, buf, n);
    static uint8_t hb[4096];
    for (uint64_t i = 1; i <= 8; i++) {
      atoll_wire_msg h = e;
      h.type = ATOLL_WIRE_HEARTBEAT, h.session = 0xe0 + i;
      send_raw(s, hb, atoll_wire_encode(&h, hb, sizeof hb));
    }
    send_raw(s, buf, n);
  } else if (strcmp(kind, "multipart") == 0) {
    zmq_send(s, buf, n, ZMQ_SNDMORE);
    send_raw(s, buf, n);
  } else {
    fprintf(stderr, "net_peer: unknown kind %s\n", kind);
    return 2;
  }
  double t0 = atoll_net_now(), sent = t0 - 1;
  while (atoll_net_now() - t0 < secs) {
    if (loop_ready && atoll_net_now() - sent >= 0.5) {
      atoll_wire_msg r = {.type = ATOLL_WIRE_READY};
      r.u.sync.step = 1;
      atoll_sock_send(s, &tx, &r, NULL, 0);
      sent = atoll_net_now();
    }
    long k = atoll_sock_recv(s, buf, sizeof buf, NULL, NULL, NULL, NULL, 100);
    if (k < 0) continue;
    atoll_wire_msg r;
    atoll_wire_member mem[64];
    char why[200];
    if (atoll_wire_parse(buf, (size_t)k, &r, mem, 64, why, sizeof why)) printf("reply unreadable: %s\n", why);
    else if (r.type == ATOLL_WIRE_WAIT || r.type == ATOLL_WIRE_ERROR || r.type == ATOLL_WIRE_WELCOME)
      printf("reply %s: %s\n", atoll_wire_type_name(r.type), r.u.text); /* the reason, for the tests */
    else printf("reply %s\n", atoll_wire_type_name(r.type));
    fflush(stdout);
  }
  zmq_close(s);
  zmq_ctx_term(ctx);
  return 0;
}

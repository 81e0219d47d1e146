/* A scripted island for the network tests: connects to a coordinator with a key and
 * sends one kind of message (well-formed or not), then reads replies for a while.
 *
 *   net_peer ENDPOINT COORDINATOR_PUB SECRET_FILE ISLAND KIND [SECONDS]
 *
 * KIND: hello, ready (hello then READY for step 1), readyloop (the same, READY repeated
 * every 0.5 s as an island does while it waits), readyonly (READY every 0.5 s, never a
 * HELLO: an island the coordinator does not know), truncated, oversized, badmagic,
 * badtype, badversion, trailing, replay (one HELLO sent twice, same session and seq),
 * multipart. Prints each reply as "reply TYPE ..." on stdout. */
#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static int send_raw(void *s, const uint8_t *b, size_t n) { return zmq_send(s, b, n, 0) < 0 ? -1 : 0; }

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
  snprintf(m.u.hello.endpoint, sizeof m.u.hello.endpoint, "tcp://127.0.0.1:1");
  m.session = 77;
  m.seq = 1;
  static uint8_t buf[200000];
  size_t n = atoll_wire_encode(&m, buf, sizeof buf);
  int loop_ready = strcmp(kind, "readyloop") == 0 || strcmp(kind, "readyonly") == 0;
  if (strcmp(kind, "readyonly") == 0) {
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
    else if (r.type == ATOLL_WIRE_WAIT || r.type == ATOLL_WIRE_ERROR)
      printf("reply %s: %s\n", atoll_wire_type_name(r.type), r.u.text); /* the reason, for the tests */
    else printf("reply %s\n", atoll_wire_type_name(r.type));
    fflush(stdout);
  }
  zmq_close(s);
  zmq_ctx_term(ctx);
  return 0;
}

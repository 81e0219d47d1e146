/* A peer's data streams (link_internal.h): its `--net-streams` CURVE PUSH sockets,
 * each watched by a ZeroMQ socket monitor, and the send of one chunk on whichever
 * stream has room.
 *
 * Why: with every chunk queued at once (no high-water mark) the kernel's autotuned send
 * buffers took a few MB per stream, so each stream carried a fixed share of a piece; at
 * 100 ms round trip the streams did not get equal rates, and the last one to finish
 * ran alone while the link idled (docs/islands.md, "WAN"). Here a stream takes a chunk
 * only when it has room: one message waiting in ZeroMQ (ZMQ_SNDHWM 1) and at most
 * NOTSENT bytes not yet sent in its TCP socket (TCP_NOTSENT_LOWAT, set on the socket the
 * monitor names when it connects). Bytes in flight are not bounded, so a stream's window
 * (TCP autotuning) is untouched. The monitor also tells whether a stream's handshake is
 * done, so that a send waiting for room (a slow link) is not taken for one without a
 * connection. */
#include "net/link_internal.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#define NOTSENT (128 * 1024)

static atomic_uint monitors; /* a unique inproc endpoint per monitor */

static void close_stream(peer *p, int s) {
  if (p->mon[s]) zmq_socket_monitor(p->push[s], NULL, 0), zmq_close(p->mon[s]);
  if (p->push[s]) zmq_close(p->push[s]);
  p->push[s] = p->mon[s] = NULL, p->up[s] = 0;
}

void atoll_link_streams_close(peer *p) {
  for (int s = 0; s < MAX_STREAMS; s++) close_stream(p, s);
}

/* ZMQ_IMMEDIATE: messages queue only on a connection whose handshake is done;
 * otherwise they queue on the pending one and are lost, silently, when the peer
 * refuses the handshake (its QUORUM, which allows this island's key, came a moment
 * after this island's): the send must fail instead, so that the piece is sent again
 * on fresh sockets (link_data.c, send_chunks). */
static int open_stream(atoll_link *l, peer *p, int s) {
  atoll_err err;
  int one = 1;
  char ep[64];
  void *push = atoll_sock_client(l->ctx, ZMQ_PUSH, l->pub, l->sec, p->key, &err);
  if (!push) return -1;
  p->push[s] = push;
  zmq_setsockopt(push, ZMQ_IMMEDIATE, &one, sizeof one);
  zmq_setsockopt(push, ZMQ_SNDHWM, &one, sizeof one);
  snprintf(ep, sizeof ep, "inproc://atoll-stream-%u", atomic_fetch_add(&monitors, 1));
  int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED |
               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  if (zmq_socket_monitor(push, ep, events) == 0) {
    p->mon[s] = zmq_socket(l->ctx, ZMQ_PAIR);
    if (p->mon[s] && zmq_connect(p->mon[s], ep)) zmq_close(p->mon[s]), p->mon[s] = NULL;
    if (!p->mon[s]) zmq_socket_monitor(push, NULL, 0);
  }
  return zmq_connect(push, p->endpoint);
}

int atoll_link_streams_open(atoll_link *l, peer *p) {
  atoll_link_streams_close(p);
  for (int s = 0; s < l->cfg.streams; s++)
    if (open_stream(l, p, s)) return -1;
  return 0;
}

/* The stream's monitor events so far: a new TCP connection gets its unsent bytes
 * bounded; up: its handshake is done and it has not been lost since. */
static void events(peer *p, int s) {
  zmq_msg_t m;
  if (!p->mon[s]) return;
  for (;;) {
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, p->mon[s], ZMQ_DONTWAIT) < 0) break;
    uint16_t event = 0;
    uint32_t value = 0;
    if (zmq_msg_size(&m) >= 6) memcpy(&event, zmq_msg_data(&m), 2), memcpy(&value, (uint8_t *)zmq_msg_data(&m) + 2, 4);
    while (zmq_msg_more(&m)) zmq_msg_recv(&m, p->mon[s], 0); /* the endpoint's frame */
    zmq_msg_close(&m);
    if (event == ZMQ_EVENT_CONNECTED) { /* value: the connection's file descriptor, ZeroMQ's I/O thread's */
      int lowat = NOTSENT;
      setsockopt((int)value, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
      p->up[s] = 1;
    else
      p->up[s] = 0;
  }
  zmq_msg_close(&m);
}

int atoll_link_stream_send(atoll_link *l, peer *p, atoll_wire_msg *m) {
  zmq_msg_t msg;
  if (atoll_sock_encode(&p->tx, m, &msg)) return -1;
  /* No stream can take data within 2 s and none has a connection: its peer died, or
   * refused the handshake (ZeroMQ does not reconnect after a refused handshake). A
   * connected stream that has no room (a slow link) is waited for up to twice
   * --net-timeout, the bound of a wait for data without progress. */
  double t0 = atoll_net_now(), none = l->cfg.timeout < 2 ? l->cfg.timeout : 2, most = 2 * l->cfg.timeout;
  int rc = -1;
  for (;;) {
    int up = 0;
    for (int s = 0; s < l->cfg.streams; s++) events(p, s), up |= p->up[s];
    if (atoll_sock_put(p->push, l->cfg.streams, &p->next, &p->tx, &msg, NULL, 0, 50) >= 0) {
      rc = 0;
      break;
    }
    double waited = atoll_net_now() - t0;
    if (waited > (up ? most : none)) break;
  }
  zmq_msg_close(&msg);
  return rc;
}

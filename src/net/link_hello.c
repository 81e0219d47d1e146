/* An island's first contact with its coordinator, before any compute (link.h): the
 * HELLO is answered by WELCOME (the coordinator took this island's key, its layout and
 * its run) or by ERROR (one line, the coordinator's), and a refused handshake is named
 * from ZeroMQ's socket monitor on the island's side: a key not in the coordinator's
 * allow-list, or a --coordinator-key that is not the coordinator's. Without this, a bad
 * key showed only at the first outer sync, after H steps of compute, as "no answer". */
#include "net/link_internal.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

int atoll_link_watch_coord(atoll_link *l, atoll_err *err) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://island-coord-monitor-%p", (void *)l);
  int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_DISCONNECTED;
  if (zmq_socket_monitor(l->coord, ep, events)) return atoll_fail(err, "cannot watch the coordinator's socket: %s", zmq_strerror(zmq_errno()));
  l->coord_mon = zmq_socket(l->ctx, ZMQ_PAIR);
  if (!l->coord_mon || zmq_connect(l->coord_mon, ep))
    return atoll_fail(err, "cannot watch the coordinator's socket: %s", zmq_strerror(zmq_errno()));
  return 0;
}

static void unwatch(atoll_link *l) {
  if (!l->coord_mon) return;
  zmq_socket_monitor(l->coord, NULL, 0);
  zmq_close(l->coord_mon);
  l->coord_mon = NULL;
}

/* The monitor's next event without waiting: 1 (event, value), else 0. */
static int next_event(atoll_link *l, uint16_t *event, uint32_t *value) {
  zmq_msg_t m;
  zmq_msg_init(&m);
  if (zmq_msg_recv(&m, l->coord_mon, ZMQ_DONTWAIT) < 0) return zmq_msg_close(&m), 0;
  int ok = zmq_msg_size(&m) >= 6;
  if (ok) {
    const uint8_t *d = zmq_msg_data(&m);
    memcpy(event, d, sizeof *event);
    memcpy(value, d + 2, sizeof *value);
  }
  while (zmq_msg_more(&m)) zmq_msg_recv(&m, l->coord_mon, 0); /* the endpoint's frame */
  zmq_msg_close(&m);
  return ok;
}

/* A refused handshake, named: -1 with err; 0 otherwise. *connected: a TCP connection
 * was made at least once; *closed: handshakes the coordinator closed unexplained (it
 * could not open this island's CURVE box, so it cannot say why: ZeroMQ reconnects and
 * tries again every 100 ms). */
static int handshake_refused(atoll_link *l, int *connected, int *closed, atoll_err *err) {
  uint16_t event;
  uint32_t value;
  while (next_event(l, &event, &value)) {
    if (event == ZMQ_EVENT_CONNECTED) *connected = 1;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      return atoll_fail(err, "--island-key %s: the coordinator %s refused this island's key: its public half (key.pub beside it) is not in the coordinator's KEYS/allowed/",
                        l->cfg.key_file, l->join);
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) ++*closed;
    if (*closed >= 3)
      return atoll_fail(err, "--coordinator-key %s: the coordinator %s closed this island's handshake %d times: that file is most likely not its public key (KEYS/key.pub of the coordinator's --keys)",
                        l->cfg.coordinator_key, l->join, *closed);
  }
  return 0;
}

int atoll_link_greet(atoll_link *l, const atoll_wire_msg *hello, atoll_err *err) {
  double t0 = atoll_net_now(), sent = -1, limit = l->cfg.wait_timeout > 0 ? l->cfg.wait_timeout : l->cfg.timeout;
  int connected = 0, closed = 0, told = 0, rc = -1;
  while (atoll_net_now() - t0 < limit) {
    if (atoll_net_now() - sent >= 1.0) { /* (a coordinator not up yet never saw the first) */
      atoll_wire_msg copy = *hello;
      atoll_sock_send_within(l->coord, &l->coord_tx, &copy, NULL, 0, 200);
      sent = atoll_net_now();
    }
    if (l->coord_mon && handshake_refused(l, &connected, &closed, err)) goto done;
    if (l->stop && *l->stop) {
      atoll_fail(err, "--join %s: stopped by a signal while waiting for the coordinator", l->join);
      goto done;
    }
    if (!told && atoll_net_now() - t0 > l->cfg.timeout) {
      fprintf(stderr, "island %u: no answer yet from the coordinator %s (%s); waiting up to %g s\n", l->cfg.island, l->join,
              connected ? "a connection was made" : "nothing accepted a connection there", limit);
      told = 1;
    }
    atoll_wire_msg m;
    if (!atoll_link_coord_poll(l, &m, 100)) continue;
    if (m.type == ATOLL_WIRE_ERROR) {
      atoll_fail(err, "--join %s: the coordinator says: %s", l->join, m.u.text);
      goto done;
    }
    if (m.type == ATOLL_WIRE_WELCOME) {
      if (l->cfg.rank == 0 || strstr(m.u.text, "WARNING")) /* (every rank's endpoint is probed) */
        fprintf(stderr, "island %u: the coordinator %s took this island's key: %s\n", l->cfg.island, l->join, m.u.text);
      rc = 0;
      goto done;
    }
  }
  atoll_fail(err, "--join %s: no answer from the coordinator within %g s (%s)", l->join, limit,
             connected ? "a connection was made, but no reply came" : "nothing accepted a connection there: is it running, and reachable from here?");
done:
  unwatch(l);
  return rc;
}

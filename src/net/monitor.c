/* Handshake failures, logged (monitor.h).
 *
 * ZeroMQ's monitor (version 1, the stable API) names a bound socket's own endpoint in
 * every event, not the peer's; the peer is known by the descriptor that ACCEPTED and
 * DISCONNECTED carry, whose address is read (getpeername) when ACCEPTED arrives: a
 * peer whose connection ZeroMQ closed before that (junk sent with the connect) is
 * "an address that closed at once". With
 * one I/O thread (the coordinator's context) a failing connection's HANDSHAKE_FAILED_*
 * comes right before its DISCONNECTED (the same call in ZeroMQ), so the two are paired.
 * Some failures have no such event (a first byte that is not ZMTP 3's, a frame too long
 * to decode): a DISCONNECTED with no HANDSHAKE_SUCCEEDED since its ACCEPTED is one of
 * them. HANDSHAKE_SUCCEEDED names no connection, so such a failure that overlaps
 * another connection's successful handshake is not logged (a guess would blame a
 * good island when it leaves). */
#include "net/monitor.h"
#include "net/sock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <zmq.h>

#define RECENT 64 /* addresses logged in the last 10 s */

typedef struct {
  char addr[64]; /* "" until ACCEPTED (or when getpeername came too late) */
  int port;
  char peer[64]; /* atoll_sock_peer's "ADDRESS:PORT" (the same then) */
  uint64_t succeeded_before; /* handshakes that succeeded before its ACCEPTED */
} conn;

struct atoll_monitor {
  void *pair, *sock;
  pthread_t thread;
  atomic_int stop, logged;
  char label[64];
  conn *conns; /* by descriptor */
  int nconns;
  uint16_t failed_event; /* the last HANDSHAKE_FAILED_* not yet matched to a connection */
  uint32_t failed_value;
  uint64_t succeeded; /* HANDSHAKE_SUCCEEDED events so far */
  pthread_mutex_t lock; /* closed[]: descriptors of closed connections, not yet taken */
  atoll_monitor_conn closed[ATOLL_MONITOR_CLOSED];
  int nclosed, closed_lost;
  char recent[RECENT][64];
  double recent_at[RECENT];
  int recent_quiet[RECENT]; /* failures not written since that line */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static conn *conn_of(atoll_monitor *m, int fd) {
  if (fd < 0 || fd > 1 << 20) return NULL;
  if (fd >= m->nconns) {
    int n = fd + 1 > 2 * m->nconns ? fd + 1 : 2 * m->nconns;
    conn *c = realloc(m->conns, (size_t)n * sizeof *c);
    if (!c) return NULL;
    memset(c + m->nconns, 0, (size_t)(n - m->nconns) * sizeof *c);
    m->conns = c, m->nconns = n;
  }
  return &m->conns[fd];
}

static void peer_of(int fd, conn *c) {
  struct sockaddr_storage sa;
  socklen_t len = sizeof sa;
  c->addr[0] = 0, c->port = 0;
  if (getpeername(fd, (struct sockaddr *)&sa, &len)) return; /* closed already */
  if (sa.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, c->addr, sizeof c->addr);
    c->port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, c->addr, sizeof c->addr);
    c->port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
  }
}

/* Why a handshake failed, from the last HANDSHAKE_FAILED_* event (0: none came). */
static void reason(uint16_t event, uint32_t value, char *out, size_t n) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
    snprintf(out, n, "a CURVE box did not open (the peer uses another coordinator key, or replays another connection's bytes)");
  else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    snprintf(out, n, "the peer does not speak CURVE");
  else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
    snprintf(out, n, "ZMTP protocol error 0x%08x", (unsigned)value);
  else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    snprintf(out, n, "closed or timed out before the handshake ended (a stalled or cut greeting)");
  else
    snprintf(out, n, "not a ZMTP 3 greeting, or a frame it cannot take (junk, another protocol, an oversized frame)");
}

/* One line per address per 10 s; the failures not written meanwhile are counted in the next. */
static void report(atoll_monitor *m, const conn *c) {
  if (m->failed_event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return; /* the ZAP handler's line */
  const char *addr = c && c->addr[0] ? c->addr : "an address that closed at once";
  double t = now_s();
  int slot = 0;
  for (int i = 0; i < RECENT; i++) {
    if (strcmp(m->recent[i], addr) == 0) {
      slot = i;
      break;
    }
    if (m->recent_at[i] < m->recent_at[slot]) slot = i; /* else the oldest */
  }
  if (strcmp(m->recent[slot], addr) == 0 && t - m->recent_at[slot] < 10) {
    m->recent_quiet[slot]++;
    return;
  }
  int quiet = strcmp(m->recent[slot], addr) == 0 ? m->recent_quiet[slot] : 0;
  snprintf(m->recent[slot], sizeof m->recent[slot], "%s", addr);
  m->recent_at[slot] = t, m->recent_quiet[slot] = 0;
  char why[160], more[64] = "";
  reason(m->failed_event, m->failed_value, why, sizeof why);
  if (quiet) snprintf(more, sizeof more, " (and %d more from it, not logged)", quiet);
  char port[24] = "";
  if (c && c->port) snprintf(port, sizeof port, " port %d", c->port);
  fprintf(stderr, "%s: handshake failed with %s%s: %s; connection closed%s\n", m->label, addr, port, why, more);
  atomic_fetch_add(&m->logged, 1);
}

static void on_event(atoll_monitor *m, uint16_t event, uint32_t value) {
  conn *c;
  switch (event) {
  case ZMQ_EVENT_ACCEPTED:
    if ((c = conn_of(m, (int)value))) peer_of((int)value, c), atoll_sock_peer((int)value, c->peer), c->succeeded_before = m->succeeded;
    break;
  case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: m->succeeded++; break;
  case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
  case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
  case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: m->failed_event = event, m->failed_value = value; break;
  case ZMQ_EVENT_DISCONNECTED:
    c = conn_of(m, (int)value);
    if (m->failed_event || (c && c->addr[0] && c->succeeded_before == m->succeeded)) report(m, c);
    m->failed_event = 0;
    pthread_mutex_lock(&m->lock);
    if (m->nclosed < ATOLL_MONITOR_CLOSED) {
      atoll_monitor_conn *k = &m->closed[m->nclosed++];
      k->fd = (int)value;
      snprintf(k->peer, sizeof k->peer, "%s", c ? c->peer : "");
    } else {
      m->closed_lost = 1;
    }
    pthread_mutex_unlock(&m->lock);
    if (c) c->addr[0] = 0, c->peer[0] = 0;
    break;
  default: break;
  }
}

static void *monitor_main(void *arg) {
  atoll_monitor *m = arg;
  while (!atomic_load(&m->stop)) {
    zmq_pollitem_t it = {m->pair, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 100) <= 0) continue;
    uint8_t head[6];
    char where[256];
    int n = zmq_recv(m->pair, head, sizeof head, 0);
    int more = 0;
    size_t sz = sizeof more;
    zmq_getsockopt(m->pair, ZMQ_RCVMORE, &more, &sz);
    if (more) zmq_recv(m->pair, where, sizeof where, 0); /* the socket's own endpoint */
    if (n != 6) continue;
    uint16_t event;
    uint32_t value;
    memcpy(&event, head, 2), memcpy(&value, head + 2, 4);
    on_event(m, event, value);
  }
  return NULL;
}

int atoll_monitor_start(atoll_monitor **out, void *ctx, void *sock, const char *label, atoll_err *err) {
  *out = NULL;
  atoll_monitor *m = calloc(1, sizeof *m);
  if (!m) return atoll_fail(err, "out of memory");
  snprintf(m->label, sizeof m->label, "%s", label);
  pthread_mutex_init(&m->lock, NULL);
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://atoll.monitor.%p", sock);
  int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  m->sock = sock;
  m->pair = zmq_socket(ctx, ZMQ_PAIR);
  int linger = 0;
  if (!m->pair || zmq_socket_monitor(sock, ep, events) || zmq_setsockopt(m->pair, ZMQ_LINGER, &linger, sizeof linger) ||
      zmq_connect(m->pair, ep)) {
    int e = zmq_errno();
    if (m->pair) zmq_close(m->pair);
    free(m);
    return atoll_fail(err, "socket monitor: %s", zmq_strerror(e));
  }
  if (pthread_create(&m->thread, NULL, monitor_main, m)) {
    zmq_socket_monitor(sock, NULL, 0);
    zmq_close(m->pair);
    free(m);
    return atoll_fail(err, "socket monitor: cannot start its thread");
  }
  *out = m;
  return 0;
}

void atoll_monitor_stop(atoll_monitor *m) {
  if (!m) return;
  atomic_store(&m->stop, 1);
  pthread_join(m->thread, NULL);
  zmq_socket_monitor(m->sock, NULL, 0);
  zmq_close(m->pair);
  pthread_mutex_destroy(&m->lock);
  free(m->conns);
  free(m);
}

int atoll_monitor_logged(atoll_monitor *m) { return atomic_load(&m->logged); }

int atoll_monitor_closed(atoll_monitor *m, atoll_monitor_conn *out, int max, int *lost) {
  pthread_mutex_lock(&m->lock);
  int n = m->nclosed < max ? m->nclosed : max;
  memcpy(out, m->closed, (size_t)n * sizeof *out);
  memmove(m->closed, m->closed + n, (size_t)(m->nclosed - n) * sizeof *out);
  m->nclosed -= n;
  *lost = m->closed_lost;
  m->closed_lost = 0;
  pthread_mutex_unlock(&m->lock);
  return n;
}

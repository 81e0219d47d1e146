/* ZeroMQ sockets (sock.h). */
#include "net/sock.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* ZMTP frame header (up to 9 bytes) and a CURVE MESSAGE command (about 33 bytes:
 * command name, nonce, MAC) around each message */
#define WIRE_OVERHEAD 42

double atoll_net_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *sock_common(void *ctx, int type, atoll_err *err) {
  void *s = zmq_socket(ctx, type);
  if (!s) {
    atoll_fail(err, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    return NULL;
  }
  int linger = 0, hwm = 0;
  int64_t maxsz = (int64_t)ATOLL_WIRE_MAX_DATA + 4096;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
  return s;
}

void *atoll_sock_server(void *ctx, int type, const uint8_t secret[ATOLL_KEY_BYTES], atoll_err *err) {
  void *s = sock_common(ctx, type, err);
  if (!s) return NULL;
  int one = 1;
  if (zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one) ||
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret, ATOLL_KEY_BYTES) ||
      zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "atoll", 5)) {
    atoll_fail(err, "CURVE server socket: %s", zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  return s;
}

void *atoll_sock_client(void *ctx, int type, const uint8_t pub[ATOLL_KEY_BYTES], const uint8_t secret[ATOLL_KEY_BYTES],
                        const uint8_t server_key[ATOLL_KEY_BYTES], atoll_err *err) {
  void *s = sock_common(ctx, type, err);
  if (!s) return NULL;
  if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_key, ATOLL_KEY_BYTES) ||
      zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, ATOLL_KEY_BYTES) ||
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret, ATOLL_KEY_BYTES)) {
    atoll_fail(err, "CURVE client socket: %s", zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  return s;
}

/* The host and port of a tcp:// endpoint (port: after the last ':'); 0, or -1. */
static int tcp_parts(const char *ep, const char **host, size_t *host_len, const char **port) {
  if (strncmp(ep, "tcp://", 6) != 0) return -1;
  const char *colon = strrchr(ep + 6, ':');
  if (!colon) return -1;
  *host = ep + 6, *host_len = (size_t)(colon - ep - 6), *port = colon + 1;
  return 0;
}

int atoll_sock_check_endpoint(const char *flag, const char *ep, atoll_err *err) {
  const char *host, *port;
  size_t hl;
  if (strncmp(ep, "tcp://", 6) != 0) return 0; /* ipc://, inproc://: ZeroMQ's to judge */
  if (tcp_parts(ep, &host, &hl, &port) || hl == 0)
    return atoll_fail(err, "%s %s: expected tcp://HOST:PORT", flag, ep);
  size_t digits = strspn(port, "0123456789");
  long v = digits > 0 && digits <= 5 && !port[digits] ? strtol(port, NULL, 10) : -1;
  if (strcmp(port, "*") != 0 && (v < 0 || v > 65535))
    return atoll_fail(err, "%s %s: port %s is not a port (1 to 65535, or 0 or * for any free one)", flag, ep, port);
  return 0;
}

int atoll_sock_default_listen(const char *coordinator, char *out, size_t n, atoll_err *err) {
  const char *host, *port;
  size_t hl;
  if (tcp_parts(coordinator, &host, &hl, &port) || hl == 0 || hl >= 256)
    return atoll_fail(err, "--join %s: expected tcp://HOST:PORT (an island without --island-listen listens where it reaches the coordinator from)",
                      coordinator);
  char name[256];
  memcpy(name, host, hl);
  name[hl] = 0;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
  int rc = getaddrinfo(name, port, &hints, &ai);
  if (rc != 0)
    return atoll_fail(err, "--join %s: cannot resolve %s to an IPv4 address (%s); give --island-listen tcp://ADDR:PORT",
                      coordinator, name, gai_strerror(rc));
  /* a UDP socket's connect only chooses the route: nothing is sent */
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in local;
  socklen_t len = sizeof local;
  int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
           getsockname(fd, (struct sockaddr *)&local, &len) == 0;
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  char ip[INET_ADDRSTRLEN];
  if (!ok || !inet_ntop(AF_INET, &local.sin_addr, ip, sizeof ip))
    return atoll_fail(err, "--join %s: no route to %s from this host; give --island-listen tcp://ADDR:PORT", coordinator, name);
  snprintf(out, n, "tcp://%s:0", ip);
  return 0;
}

int atoll_sock_wildcard(const char *ep) {
  const char *host, *port;
  size_t hl;
  if (tcp_parts(ep, &host, &hl, &port)) return 0;
  static const char *any[] = {"*", "0.0.0.0", "[::]", "::", "[0:0:0:0:0:0:0:0]"};
  for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
    if (hl == strlen(any[i]) && strncmp(host, any[i], hl) == 0) return 1;
  return 0;
}

int atoll_sock_bind(void *s, const char *flag, const char *ep, char *bound, size_t n, atoll_err *err) {
  if (atoll_sock_check_endpoint(flag, ep, err)) return -1;
  if (zmq_bind(s, ep)) return atoll_fail(err, "%s %s: %s", flag, ep, zmq_strerror(zmq_errno()));
  size_t len = n;
  if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, bound, &len) || len == 0 || len > n)
    snprintf(bound, n, "%s", ep);
  return 0;
}

void atoll_sender_init(atoll_sender *s) {
  memset(s, 0, sizeof *s);
  if (sodium_init() < 0) abort(); /* libsodium cannot start: nothing secure can follow */
  randombytes_buf(&s->session, sizeof s->session);
}

int atoll_sock_send(void *sock, atoll_sender *s, atoll_wire_msg *m, const void *rid, size_t rid_len) {
  return atoll_sock_send_within(sock, s, m, rid, rid_len, 1000);
}

int atoll_sock_send_within(void *sock, atoll_sender *s, atoll_wire_msg *m, const void *rid, size_t rid_len, int timeout_ms) {
  zmq_msg_t msg;
  if (atoll_sock_encode(s, m, &msg)) return -1;
  int rc = atoll_sock_put(&sock, 1, NULL, s, &msg, rid, rid_len, timeout_ms) < 0 ? -1 : 0;
  zmq_msg_close(&msg); /* after a send, an empty message: no-op */
  return rc;
}

int atoll_sock_encode(atoll_sender *s, atoll_wire_msg *m, zmq_msg_t *msg) {
  m->session = s->session;
  m->seq = ++s->seq;
  /* encoded straight into the message ZeroMQ sends (no buffer of our own to copy
   * from, and no allocation the size of a chunk per send beyond the message itself) */
  size_t cap = atoll_wire_size(m);
  if (zmq_msg_init_size(msg, cap)) return -1;
  size_t n = atoll_wire_encode(m, zmq_msg_data(msg), cap);
  if (n > 0 && n < cap) { /* a control message's size is an upper bound: trimmed (small) */
    zmq_msg_t exact;
    if (zmq_msg_init_size(&exact, n) == 0) memcpy(zmq_msg_data(&exact), zmq_msg_data(msg), n);
    else n = 0;
    zmq_msg_close(msg);
    *msg = exact;
  }
  if (n == 0) zmq_msg_close(msg);
  return n == 0 ? -1 : 0;
}

int atoll_sock_put(void **socks, int n, int *next, atoll_sender *s, zmq_msg_t *msg, const void *rid, size_t rid_len,
                   int timeout_ms) {
  /* Never block for ever: a PUSH or DEALER socket whose only peer died (or refused the
   * handshake, and is being reconnected) has no pipe to queue on, and a blocking send
   * would wait until one comes back: for a dead peer, for ever, and the island falls
   * silent in the middle of an exchange. Wait at most timeout_ms for a pipe (or, under a
   * high-water mark, for room), then give up. */
  zmq_pollitem_t it[64];
  size_t len = zmq_msg_size(msg);
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) it[i] = (zmq_pollitem_t){socks[i], 0, ZMQ_POLLOUT, 0};
  if (zmq_poll(it, n, timeout_ms) <= 0) return -1;
  int first = next ? *next % n : 0;
  for (int j = 0; j < n; j++) {
    int i = (first + j) % n;
    if ((it[i].revents & ZMQ_POLLOUT) && (!rid || zmq_send(socks[i], rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) &&
        zmq_msg_send(msg, socks[i], ZMQ_DONTWAIT) >= 0) {
      s->bytes += len + WIRE_OVERHEAD;
      if (next) *next = i + 1;
      return i;
    }
  }
  return -1;
}

/* The peer's identity of a received frame. */
void atoll_sock_peer(int fd, char out[64]) {
  struct sockaddr_storage sa;
  socklen_t len = sizeof sa;
  char a[INET6_ADDRSTRLEN] = "";
  out[0] = 0;
  if (fd < 0 || getpeername(fd, (struct sockaddr *)&sa, &len)) return;
  if (sa.ss_family == AF_INET && inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, a, sizeof a))
    snprintf(out, 64, "%s:%d", a, ntohs(((struct sockaddr_in *)&sa)->sin_port));
  else if (sa.ss_family == AF_INET6 && inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, a, sizeof a))
    snprintf(out, 64, "[%s]:%d", a, ntohs(((struct sockaddr_in6 *)&sa)->sin6_port));
}

static void who(zmq_msg_t *msg, char user[64], char addr[64]) {
  const char *u = zmq_msg_gets(msg, "User-Id"), *a = zmq_msg_gets(msg, "Peer-Address");
  if (user) snprintf(user, 64, "%s", u ? u : "?");
  if (addr) snprintf(addr, 64, "%s", a ? a : "?");
}

/* Drops the frames after the first of a message: -2 if there were any, else n. */
static long drop_more(void *sock, long n) {
  int more = 0;
  size_t sz = sizeof more;
  zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz);
  while (more) { /* a well-formed peer sends one frame: drop the rest */
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    zmq_msg_recv(&msg, sock, 0);
    zmq_msg_close(&msg);
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz);
    n = -2; /* refused as malformed */
  }
  return n;
}

long atoll_sock_recv(void *sock, uint8_t *buf, size_t cap, uint8_t *rid, size_t *rid_len, char user[64],
                     char addr[64], int timeout_ms) {
  return atoll_sock_recv_fd(sock, buf, cap, rid, rid_len, user, addr, NULL, timeout_ms);
}

long atoll_sock_recv_fd(void *sock, uint8_t *buf, size_t cap, uint8_t *rid, size_t *rid_len, char user[64],
                        char addr[64], int *fd, int timeout_ms) {
  if (fd) *fd = -1;
  zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, timeout_ms) <= 0) return -1;
  zmq_msg_t msg;
  if (rid) {
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, 0) < 0) {
      zmq_msg_close(&msg);
      return -1;
    }
    *rid_len = zmq_msg_size(&msg) < 256 ? zmq_msg_size(&msg) : 256;
    memcpy(rid, zmq_msg_data(&msg), *rid_len);
    zmq_msg_close(&msg);
  }
  zmq_msg_init(&msg);
  if (zmq_msg_recv(&msg, sock, 0) < 0) {
    zmq_msg_close(&msg);
    return -1;
  }
  long n = (long)zmq_msg_size(&msg);
  memcpy(buf, zmq_msg_data(&msg), (size_t)n < cap ? (size_t)n : cap);
  if ((size_t)n > cap) n = (long)cap + 1;
  who(&msg, user, addr);
  if (fd) *fd = zmq_msg_get(&msg, ZMQ_SRCFD); /* (deprecated in ZeroMQ, not removed: the only way to the descriptor) */
  zmq_msg_close(&msg);
  return drop_more(sock, n);
}

long atoll_sock_recv_msg(void *sock, zmq_msg_t *msg, char user[64], char addr[64], int timeout_ms) {
  zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, timeout_ms) <= 0) return -1;
  zmq_msg_init(msg);
  if (zmq_msg_recv(msg, sock, 0) < 0) {
    zmq_msg_close(msg);
    return -1;
  }
  who(msg, user, addr);
  long n = drop_more(sock, (long)zmq_msg_size(msg));
  if (n < 0) zmq_msg_close(msg);
  return n;
}

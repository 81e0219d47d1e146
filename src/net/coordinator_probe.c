/* Whether an island's data endpoint can be reached (docs/islands.md, "The coordinator",
 * Reachability): at each HELLO the coordinator opens a TCP connection to the endpoint
 * the island gave (where the other islands will connect), reads the ZeroMQ greeting's
 * signature there and closes it, without a byte sent; the WELCOME waits for the
 * answer, at most PROBE_SECONDS (or half --island-timeout), and says it, so
 * that the island reports it in one line before any compute. The connect is
 * non-blocking: the loop goes on meanwhile (atoll_coord_probe_poll). An endpoint with
 * a host name, not an address, is not probed (resolving it could hold the loop). */
#include "net/coordinator_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROBE_SECONDS 2.0
#define HINT "the other islands will likely not reach it either (--island-listen, --island-advertise, a firewall?)"

static void welcome(coord *c, member *m, const char *said) {
  char text[ATOLL_WIRE_MAX_TEXT + 1];
  snprintf(text, sizeof text, "%s; %s", m->welcome, said);
  atoll_coord_send_text(c, &m->welcome_to, ATOLL_WIRE_WELCOME, text);
  if (m->probing) close(m->probe_fd);
  m->probing = 0, m->welcome[0] = 0;
}

/* tcp://HOST:PORT (HOST an address, or [v6]) to host and port; 0, or -1 when it is not one */
static int split(const char *ep, char *host, size_t hn, char *port, size_t pn) {
  if (strncmp(ep, "tcp://", 6) != 0) return -1;
  const char *h = ep + 6, *colon = strrchr(h, ':');
  if (!colon || colon == h) return -1;
  size_t len = (size_t)(colon - h);
  if (h[0] == '[' && len >= 2 && h[len - 1] == ']') h++, len -= 2;
  if (len == 0 || len >= hn || strlen(colon + 1) >= pn) return -1;
  memcpy(host, h, len);
  host[len] = 0;
  snprintf(port, pn, "%s", colon + 1);
  return 0;
}

static int unspecified(const struct sockaddr *a) {
  if (a->sa_family == AF_INET) return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (a->sa_family != AF_INET6) return 0;
  const struct in6_addr *v6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
  if (IN6_IS_ADDR_UNSPECIFIED(v6)) return 1;
  static const uint8_t zero4[4] = {0}; /* ::ffff:0.0.0.0, the IPv4 wildcard written as IPv6 */
  return IN6_IS_ADDR_V4MAPPED(v6) && memcmp(v6->s6_addr + 12, zero4, 4) == 0;
  return 0;
}

void atoll_coord_probe_start(coord *c, member *m, const route *from, const char *text) {
  snprintf(m->welcome, sizeof m->welcome, "%s", text);
  m->welcome_to = *from;
  if (m->probing) return; /* the island repeats its HELLO every second: the probe in flight answers it */
  char host[256], port[16], said[600];
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV}, *ai = NULL;
  if (strncmp(m->endpoint, "tcp://", 6) != 0) {
    snprintf(said, sizeof said, "WARNING: its data endpoint %.200s is not a tcp:// address: not probed; islands on other machines cannot connect to it",
             m->endpoint);
    welcome(c, m, said);
    return;
  }
  int parsed = split(m->endpoint, host, sizeof host, port, sizeof port) == 0;
  int resolved = parsed && strcmp(host, "*") != 0 && getaddrinfo(host, port, &hints, &ai) == 0;
  if (parsed && (!strcmp(host, "*") || (resolved && unspecified(ai->ai_addr)))) { /* (a connect there reaches this machine) */
    if (ai) freeaddrinfo(ai);
    snprintf(said, sizeof said, "WARNING: its data endpoint %.200s is a wildcard address, which no other island can connect to: "
             "give --island-advertise tcp://ADDRESS:PORT", m->endpoint);
    welcome(c, m, said);
    return;
  }
  if (!resolved) {
    if (ai) freeaddrinfo(ai);
    welcome(c, m, "its data endpoint names a host, not an address: not probed");
    return;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
  int e = errno;
  freeaddrinfo(ai);
  if (rc == 0 || (fd >= 0 && e == EINPROGRESS)) {
    m->probing = 1, m->probe_fd = fd;
    m->probe_t0 = atoll_net_now();
    if (rc == 0) atoll_coord_probe_poll(c);
    return;
  }
  if (fd >= 0) close(fd);
  snprintf(said, sizeof said, "WARNING: its data endpoint %s did not answer the coordinator (%s): " HINT, m->endpoint, strerror(e));
  welcome(c, m, said);
}

/* A ZeroMQ socket sends its ZMTP greeting's signature at once: 0xFF, eight bytes,
 * 0x7F. Waiting for it tells a data socket from anything else that accepts a TCP
 * connection (a proxy, another program on that port). */
static int greeting(const uint8_t *b, size_t n) { return n >= 10 && b[0] == 0xFF && b[9] == 0x7F; }

void atoll_coord_probe_poll(coord *c) {
  double now = atoll_net_now();
  /* (within half the silence after which an island leaves: its heartbeats begin with the WELCOME) */
  double limit = PROBE_SECONDS < 0.5 * c->cfg->island_timeout ? PROBE_SECONDS : 0.5 * c->cfg->island_timeout;
  for (int i = 0; i < MAX_MEMBERS; i++) {
    member *m = &c->m[i];
    if (!m->probing) continue;
    if (!m->used) { /* it left meanwhile */
      close(m->probe_fd);
      m->probing = 0;
      continue;
    }
    struct pollfd p = {.fd = m->probe_fd, .events = m->probing == 1 ? POLLOUT : POLLIN};
    char said[600] = "";
    const char *hint = HINT;
    if (poll(&p, 1, 0) > 0 && m->probing == 1) { /* connected, or refused */
      int e = 0;
      socklen_t n = sizeof e;
      getsockopt(m->probe_fd, SOL_SOCKET, SO_ERROR, &e, &n);
      if (e == 0) m->probing = 2, m->probe_got = 0;
      else snprintf(said, sizeof said, "WARNING: its data endpoint %s did not answer the coordinator (%s): %s", m->endpoint, strerror(e), hint);
    } else if (p.revents && m->probing == 2) { /* the greeting, or the end */
      ssize_t got = read(m->probe_fd, m->probe_buf + m->probe_got, sizeof m->probe_buf - (size_t)m->probe_got);
      if (got > 0) m->probe_got += (int)got;
      if (greeting(m->probe_buf, (size_t)m->probe_got))
        snprintf(said, sizeof said, "its data endpoint %s answered the coordinator (other islands connect there)", m->endpoint);
      else if (got <= 0 || m->probe_got == (int)sizeof m->probe_buf)
        snprintf(said, sizeof said, "WARNING: what answers at its data endpoint %s is not a ZeroMQ socket: %s", m->endpoint, hint);
    }
    if (!said[0] && now - m->probe_t0 > limit)
      snprintf(said, sizeof said, "WARNING: its data endpoint %s did not answer the coordinator within %g s%s: %s", m->endpoint,
               limit, m->probing == 2 ? " (a connection, but no ZeroMQ greeting)" : "", hint);
    if (said[0]) welcome(c, m, said);
  }
}

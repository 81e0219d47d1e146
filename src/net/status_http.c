/* The coordinator's status server (status_http.h): libmicrohttpd on its own thread,
 * answering from the last published snapshot. */
#include "net/status_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_URL 512      /* longer URLs: 414 */
#define MAX_CONNECTIONS 64
#define CONNECTION_SECONDS 10

struct atoll_status {
  struct MHD_Daemon *d;
  int fd;
  pthread_mutex_t lock;
  atoll_status_snapshot snap; /* the last published, read under lock */
};

/* HOST:PORT, or PORT alone, into addr; 0 or -1 with one line. */
static int parse_listen(const char *value, struct sockaddr_in *addr, atoll_err *err) {
  const char *colon = strrchr(value, ':');
  const char *port = colon ? colon + 1 : value;
  char host[64] = "127.0.0.1";
  if (colon) {
    size_t n = (size_t)(colon - value);
    if (n == 0 || n >= sizeof host) goto bad;
    memcpy(host, value, n);
    host[n] = 0;
  }
  if (strcmp(host, "localhost") == 0) snprintf(host, sizeof host, "127.0.0.1");
  char *end = NULL;
  errno = 0;
  long p = strtol(port, &end, 10);
  if (!*port || *end || errno || p < 0 || p > 65535 || port[0] == '-' || port[0] == '+') goto bad;
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  addr->sin_port = htons((uint16_t)p);
  if (inet_pton(AF_INET, host, &addr->sin_addr) != 1) goto bad;
  return 0;
bad:
  return atoll_fail(err, "--status-listen %.200s: expected HOST:PORT (an IPv4 address or localhost, a port in [0, 65535]) or PORT alone",
                    value);
}

int atoll_status_check_listen(const char *value, atoll_err *err) {
  struct sockaddr_in a;
  return parse_listen(value, &a, err);
}

/* A bound and listening socket (its errors named), which MHD then serves. */
static int listen_on(const char *value, struct sockaddr_in *addr, atoll_err *err) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return atoll_fail(err, "--status-listen %s: cannot make a socket: %s", value, strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof *addr;
  if (bind(fd, (struct sockaddr *)addr, sizeof *addr) || listen(fd, 64) || getsockname(fd, (struct sockaddr *)addr, &len)) {
    atoll_fail(err, "--status-listen %s: cannot listen: %s", value, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned code, const char *type, char *body) {
  if (!body) return MHD_NO; /* out of memory: the connection is closed */
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result ok = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result refuse(struct MHD_Connection *conn, unsigned code, const char *why) {
  char *body = malloc(strlen(why) + 2);
  if (body) sprintf(body, "%s\n", why);
  return send_text(conn, code, "text/plain; charset=utf-8", body);
}

/* One request: answered at its first call (a body sent with it is not read). */
static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)version, (void)upload, (void)upload_size, (void)con_cls;
  atoll_status *s = cls;
  if (strlen(url) > MAX_URL) return refuse(conn, MHD_HTTP_URI_TOO_LONG, "URL too long");
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
    return refuse(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "read-only: GET or HEAD");
  int page = strcmp(url, "/") == 0 ? 0 : strcmp(url, "/status.json") == 0 ? 1 : strcmp(url, "/metrics") == 0 ? 2 : -1;
  if (page < 0) return refuse(conn, MHD_HTTP_NOT_FOUND, "not found: /, /status.json and /metrics are served");
  atoll_status_snapshot *snap = malloc(sizeof *snap);
  if (!snap) return MHD_NO;
  pthread_mutex_lock(&s->lock);
  memcpy(snap, &s->snap, sizeof *snap);
  pthread_mutex_unlock(&s->lock);
  char *body = page == 0 ? atoll_status_html(snap) : page == 1 ? atoll_status_json(snap) : atoll_status_metrics(snap);
  free(snap);
  const char *type = page == 0   ? "text/html; charset=utf-8"
                     : page == 1 ? "application/json"
                                 : "text/plain; version=0.0.4; charset=utf-8";
  return send_text(conn, MHD_HTTP_OK, type, body);
}

static int loopback(const struct sockaddr_in *a) { return (ntohl(a->sin_addr.s_addr) >> 24) == 127; }

int atoll_status_start(atoll_status **out, const char *listen, atoll_err *err) {
  *out = NULL;
  struct sockaddr_in addr;
  if (parse_listen(listen, &addr, err)) return -1;
  atoll_status *s = calloc(1, sizeof *s);
  if (!s) return atoll_fail(err, "out of memory");
  pthread_mutex_init(&s->lock, NULL);
  s->fd = listen_on(listen, &addr, err);
  if (s->fd < 0) {
    pthread_mutex_destroy(&s->lock);
    free(s);
    return -1;
  }
  /* one internal thread polls every connection; MHD answers malformed requests (400)
   * itself, and a request line or headers past its per-connection memory get 414 or 431 */
  s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, answer, s,
                          MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->fd,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_SECONDS,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 << 10), MHD_OPTION_END);
  if (!s->d) {
    atoll_fail(err, "--status-listen %s: libmicrohttpd cannot start", listen);
    close(s->fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return -1;
  }
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr.sin_addr, host, sizeof host);
  fprintf(stderr, "coordinator: status page at http://%s:%u/ (also /status.json, /metrics; read-only)\n", host,
          ntohs(addr.sin_port));
  if (!loopback(&addr))
    fprintf(stderr, "coordinator: warning: the status page listens on %s, not on loopback: anyone who reaches it sees the run's islands, steps and losses\n",
            host);
  *out = s;
  return 0;
}

void atoll_status_publish(atoll_status *s, const atoll_status_snapshot *snap) {
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  memcpy(&s->snap, snap, sizeof *snap);
  pthread_mutex_unlock(&s->lock);
}

void atoll_status_stop(atoll_status *s) {
  if (!s) return;
  MHD_stop_daemon(s->d); /* (closes the listening socket too) */
  pthread_mutex_destroy(&s->lock);
  free(s);
}

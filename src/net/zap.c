/* ZAP handler with an allow-list of CURVE keys (zap.h).
 *
 * The handler is a ROUTER (each connection's ZAP request comes with its routing id), so
 * that it can hold a request: with a grace, a request whose key is not (yet) allowed
 * waits, without holding the thread, until the key is allowed (answered at once) or
 * the grace is over (refused). An island learns its peers' keys from the quorum, which
 * a faster peer may act on first: its connection then waits a moment instead of being
 * refused (and logged as a stranger) and retried 2 s later. */
#include "net/zap.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define PENDING 64 /* requests waiting for their key at once (more: refused at once) */

/* One ZAP request (RFC 27): the connection's routing id, the request id, the peer's
 * address and mechanism, its key when it has one. */
typedef struct {
  uint8_t rid[256];
  int rid_len;
  char reqid[256];
  int reqid_len;
  char addr[256], mech[32];
  uint8_t key[ATOLL_KEY_BYTES];
  int keyed;
  double until; /* a held request: refused after this */
} request;

struct atoll_zap {
  void *rep;
  pthread_t thread;
  pthread_mutex_t mu;
  atomic_int stop, refused;
  double grace; /* seconds a request with an unknown key waits for the key to be added */
  uint8_t last_refused[ATOLL_KEY_BYTES]; /* log a retrying peer's refusals once per 10 s */
  double last_logged;
  char label[64];
  /* keys refused after their grace, and when: a key refused in the last 10 s gets no
   * grace again (a dead peer's sockets reconnect every 100 ms, each a held request) */
  uint8_t graceless[16][ATOLL_KEY_BYTES];
  double graceless_at[16];
  int graceless_next;
  request held[PENDING];
  int nheld;
  int n, cap;
  uint8_t (*keys)[ATOLL_KEY_BYTES]; /* n keys, room for cap: grows (no fixed limit) */
};

static int find(atoll_zap *z, const uint8_t *key) {
  for (int i = 0; i < z->n; i++)
    if (memcmp(z->keys[i], key, ATOLL_KEY_BYTES) == 0) return 1;
  return 0;
}

static int known(atoll_zap *z, const uint8_t *key) {
  pthread_mutex_lock(&z->mu);
  int ok = find(z, key);
  pthread_mutex_unlock(&z->mu);
  return ok;
}

int atoll_zap_allow(atoll_zap *z, const uint8_t key[ATOLL_KEY_BYTES]) {
  int rc = 0;
  pthread_mutex_lock(&z->mu);
  if (!find(z, key)) {
    if (z->n == z->cap) {
      int cap = z->cap ? 2 * z->cap : 64;
      void *grown = cap > z->cap ? realloc(z->keys, (size_t)cap * ATOLL_KEY_BYTES) : NULL;
      if (grown) z->keys = grown, z->cap = cap;
    }
    if (z->n < z->cap) memcpy(z->keys[z->n++], key, ATOLL_KEY_BYTES);
    else rc = -1;
  }
  pthread_mutex_unlock(&z->mu);
  return rc;
}

int atoll_zap_count(atoll_zap *z) {
  pthread_mutex_lock(&z->mu);
  int n = z->n;
  pthread_mutex_unlock(&z->mu);
  return n;
}

int atoll_zap_refused(atoll_zap *z) { return atomic_load(&z->refused); }

int atoll_zap_allow_dir(atoll_zap *z, const char *dir, int *bad, atoll_err *err) {
  DIR *d = opendir(dir);
  if (!d) return atoll_fail(err, "%s: cannot open the allow-list directory", dir);
  int count = 0, rc = 0;
  atoll_err first;
  if (bad) *bad = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".pub") != 0) continue;
    char path[4400];
    uint8_t key[ATOLL_KEY_BYTES];
    if (atoll_key_path(path, sizeof path, dir, e->d_name, err) || atoll_key_read_public(path, key, err)) {
      if (bad) { /* skipped (a key being copied in, a stray file): the others still count */
        if (!(*bad)++) first = *err;
        continue;
      }
      rc = -1;
      break;
    }
    if (atoll_zap_allow(z, key)) {
      rc = atoll_fail(err, "%s: out of memory for the allow-list (%d keys)", path, count);
      break;
    }
    count++;
  }
  closedir(d);
  if (bad && *bad) *err = first;
  return rc ? -1 : count;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One frame into buf (NUL-terminated, cut at cap - 1); its size, or -1. *more: more follow. */
static int recv_frame(void *s, void *buf, int cap, int *more) {
  int n = zmq_recv(s, buf, (size_t)cap - 1, 0);
  if (n < 0) return -1;
  if (n > cap - 1) n = cap - 1;
  ((char *)buf)[n] = 0;
  size_t sz = sizeof *more;
  zmq_getsockopt(s, ZMQ_RCVMORE, more, &sz);
  return n;
}

/* A request: routing id, empty delimiter, then version, request id, domain, address,
 * identity, mechanism, credentials. 0, or -1 (not one: dropped). */
static int read_request(void *s, request *r) {
  char f[7][256];
  int len[7] = {0}, more = 1, nf = 0;
  memset(r, 0, sizeof *r);
  if ((r->rid_len = recv_frame(s, r->rid, sizeof r->rid, &more)) < 0 || !more) return -1;
  char delim[8];
  if (recv_frame(s, delim, sizeof delim, &more) != 0) more = 0, nf = -1;
  while (more && nf >= 0 && nf < 7) {
    if ((len[nf] = recv_frame(s, f[nf], sizeof f[nf], &more)) < 0) break;
    nf++;
  }
  while (more) { /* drain unexpected frames */
    char junk[256];
    if (recv_frame(s, junk, sizeof junk, &more) < 0) break;
  }
  if (nf < 6) return -1;
  memcpy(r->reqid, f[1], (size_t)len[1]), r->reqid_len = len[1];
  snprintf(r->addr, sizeof r->addr, "%s", f[3]);
  snprintf(r->mech, sizeof r->mech, "%.31s", f[5]);
  r->keyed = nf == 7 && len[6] == ATOLL_KEY_BYTES;
  if (r->keyed) memcpy(r->key, f[6], ATOLL_KEY_BYTES);
  return 0;
}

static void answer(atoll_zap *z, const request *r, int ok) {
  char who[ATOLL_KEY_Z85 + 1] = "";
  if (r->keyed) atoll_key_z85(r->key, who);
  if (!ok) {
    atomic_fetch_add(&z->refused, 1);
    double now = now_s();
    int quiet = r->keyed && memcmp(z->last_refused, r->key, ATOLL_KEY_BYTES) == 0 && now - z->last_logged < 10;
    if (r->keyed && !quiet) memcpy(z->last_refused, r->key, ATOLL_KEY_BYTES), z->last_logged = now;
    if (!quiet)
      fprintf(stderr, "%s: refused a connection from %s: %s key %s is not in the allow-list\n", z->label, r->addr, r->mech,
              who[0] ? who : "(none)");
  }
  zmq_send(z->rep, r->rid, (size_t)r->rid_len, ZMQ_SNDMORE);
  zmq_send(z->rep, "", 0, ZMQ_SNDMORE);
  zmq_send(z->rep, "1.0", 3, ZMQ_SNDMORE);
  zmq_send(z->rep, r->reqid, (size_t)r->reqid_len, ZMQ_SNDMORE);
  zmq_send(z->rep, ok ? "200" : "400", 3, ZMQ_SNDMORE);
  zmq_send(z->rep, ok ? "OK" : "key not allowed", ok ? 2 : 15, ZMQ_SNDMORE);
  zmq_send(z->rep, who, ok ? strlen(who) : 0, ZMQ_SNDMORE);
  zmq_send(z->rep, "", 0, 0);
}

/* A new request: answered, or held for its key (a CURVE key not refused after its
 * grace in the last 10 s, while fewer than PENDING are held). */
static void on_request(atoll_zap *z, request *r, double now) {
  int curve = r->keyed && strcmp(r->mech, "CURVE") == 0;
  if (curve && known(z, r->key)) {
    answer(z, r, 1);
    return;
  }
  int grace = curve && z->grace > 0 && z->nheld < PENDING;
  for (int i = 0; grace && i < 16; i++)
    if (z->graceless_at[i] > 0 && now - z->graceless_at[i] < 10 && memcmp(z->graceless[i], r->key, ATOLL_KEY_BYTES) == 0)
      grace = 0;
  if (!grace) {
    answer(z, r, 0);
    return;
  }
  r->until = now + z->grace;
  z->held[z->nheld++] = *r;
}

/* The held requests whose key came (accepted) or whose grace is over (refused). */
static void review_held(atoll_zap *z, double now) {
  for (int i = 0; i < z->nheld;) {
    request *r = &z->held[i];
    int ok = known(z, r->key);
    if (!ok && now < r->until) {
      i++;
      continue;
    }
    if (!ok) {
      memcpy(z->graceless[z->graceless_next], r->key, ATOLL_KEY_BYTES);
      z->graceless_at[z->graceless_next] = now;
      z->graceless_next = (z->graceless_next + 1) % 16;
    }
    answer(z, r, ok);
    z->held[i] = z->held[--z->nheld];
  }
}

static void *zap_main(void *arg) {
  atoll_zap *z = arg;
  while (!atomic_load(&z->stop)) {
    zmq_pollitem_t it = {z->rep, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&it, 1, z->nheld ? 5 : 100); /* (a held key is looked for every 5 ms) */
    request r;
    if (rc > 0 && read_request(z->rep, &r) == 0) on_request(z, &r, now_s());
    if (z->nheld) review_held(z, now_s());
  }
  return NULL;
}

int atoll_zap_start(atoll_zap **out, void *ctx, const char *label, double grace, atoll_err *err) {
  *out = NULL;
  atoll_zap *z = calloc(1, sizeof *z);
  if (!z) return atoll_fail(err, "out of memory");
  snprintf(z->label, sizeof z->label, "%s", label);
  pthread_mutex_init(&z->mu, NULL);
  z->grace = grace;
  z->rep = zmq_socket(ctx, ZMQ_ROUTER);
  int linger = 0;
  if (!z->rep || zmq_setsockopt(z->rep, ZMQ_LINGER, &linger, sizeof linger) ||
      zmq_bind(z->rep, "inproc://zeromq.zap.01")) {
    int e = zmq_errno();
    if (z->rep) zmq_close(z->rep);
    free(z);
    return atoll_fail(err, "ZAP handler: %s", zmq_strerror(e));
  }
  if (pthread_create(&z->thread, NULL, zap_main, z)) {
    zmq_close(z->rep);
    free(z);
    return atoll_fail(err, "ZAP handler: cannot start its thread");
  }
  *out = z;
  return 0;
}

void atoll_zap_stop(atoll_zap *z) {
  if (!z) return;
  atomic_store(&z->stop, 1);
  pthread_join(z->thread, NULL);
  zmq_close(z->rep);
  pthread_mutex_destroy(&z->mu);
  free(z->keys);
  free(z);
}

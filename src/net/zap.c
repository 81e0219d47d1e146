/* ZAP handler with an allow-list of CURVE keys (zap.h). */
#include "net/zap.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

struct atoll_zap {
  void *rep;
  pthread_t thread;
  pthread_mutex_t mu;
  atomic_int stop, refused;
  pthread_cond_t changed;
  double grace; /* seconds to wait for an unknown key to be added */
  uint8_t last_refused[ATOLL_KEY_BYTES]; /* log a retrying peer's refusals once per 10 s */
  double last_logged;
  char label[64];
  /* keys refused after their grace, and when: a key refused in the last 10 s gets no
   * grace again (a dead peer's sockets reconnect every 100 ms, and each grace would
   * hold this one thread, and every other peer's handshake behind it) */
  uint8_t graceless[16][ATOLL_KEY_BYTES];
  double graceless_at[16];
  int graceless_next;
  int n, cap;
  uint8_t (*keys)[ATOLL_KEY_BYTES]; /* n keys, room for cap: grows (no fixed limit) */
};

static int find(atoll_zap *z, const uint8_t *key) {
  for (int i = 0; i < z->n; i++)
    if (memcmp(z->keys[i], key, ATOLL_KEY_BYTES) == 0) return 1;
  return 0;
}

/* With a grace period, an unknown key may still be added meanwhile: an island learns
 * its peers' keys from the coordinator's quorum, which a faster peer may act on first. */
static int allowed(atoll_zap *z, const uint8_t *key, double grace) {
  pthread_mutex_lock(&z->mu);
  int ok = find(z, key);
  if (!ok && grace > 0) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long ns = until.tv_nsec + (long)((grace - (long)grace) * 1e9);
    until.tv_sec += (time_t)grace + ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    while (!(ok = find(z, key)))
      if (pthread_cond_timedwait(&z->changed, &z->mu, &until)) break;
  }
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
  pthread_cond_broadcast(&z->changed);
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

int atoll_zap_allow_dir(atoll_zap *z, const char *dir, atoll_err *err) {
  DIR *d = opendir(dir);
  if (!d) return atoll_fail(err, "%s: cannot open the allow-list directory", dir);
  int count = 0, rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".pub") != 0) continue;
    char path[4400];
    uint8_t key[ATOLL_KEY_BYTES];
    if (atoll_key_path(path, sizeof path, dir, e->d_name, err) || atoll_key_read_public(path, key, err)) {
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
  return rc ? -1 : count;
}

/* One frame of a request into buf (NUL-terminated); returns its size or -1. */
static int recv_frame(void *s, char *buf, int cap, int *more) {
  int n = zmq_recv(s, buf, (size_t)cap - 1, 0);
  if (n < 0) return -1;
  if (n > cap - 1) n = cap - 1;
  buf[n] = 0;
  size_t sz = sizeof *more;
  zmq_getsockopt(s, ZMQ_RCVMORE, more, &sz);
  return n;
}

static void *zap_main(void *arg) {
  atoll_zap *z = arg;
  while (!atomic_load(&z->stop)) {
    zmq_pollitem_t it = {z->rep, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 100) <= 0) continue;
    char f[7][256];
    int len[7] = {0}, more = 1, nf = 0;
    while (more && nf < 7) {
      len[nf] = recv_frame(z->rep, f[nf], sizeof f[nf], &more);
      if (len[nf] < 0) break;
      nf++;
    }
    while (more) { /* drain unexpected frames */
      char junk[256];
      if (recv_frame(z->rep, junk, sizeof junk, &more) < 0) break;
    }
    if (nf < 6) continue;
    /* frames: version, request id, domain, address, identity, mechanism, credentials */
    struct timespec now_ts;
    clock_gettime(CLOCK_MONOTONIC, &now_ts);
    double now = (double)now_ts.tv_sec + now_ts.tv_nsec * 1e-9, grace = z->grace;
    int keyed = nf == 7 && len[6] == ATOLL_KEY_BYTES;
    for (int i = 0; keyed && i < 16; i++)
      if (z->graceless_at[i] > 0 && now - z->graceless_at[i] < 10 && memcmp(z->graceless[i], f[6], ATOLL_KEY_BYTES) == 0)
        grace = 0;
    int ok = keyed && strcmp(f[5], "CURVE") == 0 && allowed(z, (uint8_t *)f[6], grace);
    if (!ok && keyed && grace > 0) {
      memcpy(z->graceless[z->graceless_next], f[6], ATOLL_KEY_BYTES);
      z->graceless_at[z->graceless_next] = now;
      z->graceless_next = (z->graceless_next + 1) % 16;
    }
    char who[ATOLL_KEY_Z85 + 1] = "";
    if (keyed) atoll_key_z85((uint8_t *)f[6], who);
    int quiet = !ok && nf == 7 && len[6] == ATOLL_KEY_BYTES && memcmp(z->last_refused, f[6], ATOLL_KEY_BYTES) == 0 &&
                now - z->last_logged < 10;
    if (!ok && nf == 7 && len[6] == ATOLL_KEY_BYTES && !quiet) {
      memcpy(z->last_refused, f[6], ATOLL_KEY_BYTES);
      z->last_logged = now;
    }
    if (!ok) atomic_fetch_add(&z->refused, 1);
    if (!ok && !quiet) {
      fprintf(stderr, "%s: refused a connection from %s: %s key %s is not in the allow-list\n", z->label, f[3], f[5],
              who[0] ? who : "(none)");
    }
    zmq_send(z->rep, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->rep, f[1], (size_t)len[1], ZMQ_SNDMORE);
    zmq_send(z->rep, ok ? "200" : "400", 3, ZMQ_SNDMORE);
    zmq_send(z->rep, ok ? "OK" : "key not allowed", ok ? 2 : 15, ZMQ_SNDMORE);
    zmq_send(z->rep, who, ok ? strlen(who) : 0, ZMQ_SNDMORE);
    zmq_send(z->rep, "", 0, 0);
  }
  return NULL;
}

int atoll_zap_start(atoll_zap **out, void *ctx, const char *label, double grace, atoll_err *err) {
  *out = NULL;
  atoll_zap *z = calloc(1, sizeof *z);
  if (!z) return atoll_fail(err, "out of memory");
  snprintf(z->label, sizeof z->label, "%s", label);
  pthread_mutex_init(&z->mu, NULL);
  pthread_cond_init(&z->changed, NULL);
  z->grace = grace;
  z->rep = zmq_socket(ctx, ZMQ_REP);
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
  pthread_cond_destroy(&z->changed);
  free(z->keys);
  free(z);
}

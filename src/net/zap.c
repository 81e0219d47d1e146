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

#define MAX_KEYS 4096

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
  int n;
  uint8_t keys[MAX_KEYS][ATOLL_KEY_BYTES];
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

void atoll_zap_allow(atoll_zap *z, const uint8_t key[ATOLL_KEY_BYTES]) {
  pthread_mutex_lock(&z->mu);
  if (!find(z, key) && z->n < MAX_KEYS) memcpy(z->keys[z->n++], key, ATOLL_KEY_BYTES);
  pthread_cond_broadcast(&z->changed);
  pthread_mutex_unlock(&z->mu);
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
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (atoll_key_read_public(path, key, err)) {
      rc = -1;
      break;
    }
    atoll_zap_allow(z, key);
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
    int ok = nf == 7 && strcmp(f[5], "CURVE") == 0 && len[6] == ATOLL_KEY_BYTES && allowed(z, (uint8_t *)f[6], z->grace);
    char who[ATOLL_KEY_Z85 + 1] = "";
    if (nf == 7 && len[6] == ATOLL_KEY_BYTES) atoll_key_z85((uint8_t *)f[6], who);
    struct timespec now_ts;
    clock_gettime(CLOCK_MONOTONIC, &now_ts);
    double now = (double)now_ts.tv_sec + now_ts.tv_nsec * 1e-9;
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
  free(z);
}

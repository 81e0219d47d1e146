/* The CURVE allow-list (src/net/zap.c, docs/islands.md "Keys and the allow-list"): an
 * allowed/ directory of 4100 keys (more than the 4096 the list once held, silently)
 * is read whole, and a 4101st key's client gets through the CURVE handshake to a
 * server of that context while a key not listed does not; a key path too long for
 * its buffer is an error, never a path cut short (src/net/keys.c). With a grace, a
 * connection whose key is allowed a moment later gets through, and one whose key never
 * comes holds up no other connection. */
#include "check.h"
#include "net/keys.h"
#include "net/sock.h"
#include "net/zap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define KEYS 4100

/* A client with (pub, sec) that sends one frame to the server at ep (queued until its
 * handshake is done); the caller closes it. */
static void *client(void *ctx, const char *ep, const uint8_t spub[32], const uint8_t pub[32], const uint8_t sec[32]) {
  atoll_err err;
  void *c = atoll_sock_client(ctx, ZMQ_DEALER, pub, sec, spub, &err);
  if (c && zmq_connect(c, ep) == 0) zmq_send(c, "hi", 2, ZMQ_DONTWAIT);
  return c;
}

/* A frame arrives at the server within ms. */
static int arrives(void *server, int ms) {
  uint8_t buf[64];
  return atoll_sock_recv(server, buf, sizeof buf, buf, &(size_t){0}, NULL, NULL, ms) == 2;
}

static int gets_through(void *ctx, void *server, const char *ep, const uint8_t spub[32], const uint8_t pub[32],
                        const uint8_t sec[32]) {
  void *c = client(ctx, ep, spub, pub, sec);
  int ok = c && arrives(server, 1500);
  if (c) zmq_close(c);
  return ok;
}

static void keypair(uint8_t pub[32], uint8_t sec[32]) {
  char pz[41], sz[41];
  CHECK(zmq_curve_keypair(pz, sz) == 0);
  zmq_z85_decode(pub, pz), zmq_z85_decode(sec, sz);
}

/* With a grace, a connection whose key is allowed a moment after it came gets through
 * (an island's peer that read the quorum first), and one whose key never comes does
 * not hold up another connection meanwhile (islands' ZAP handler, issue 32 item 13). */
static void grace(void) {
  atoll_err err;
  void *ctx = zmq_ctx_new();
  atoll_zap *z;
  CHECK_OK(atoll_zap_start(&z, ctx, "grace", 2.0, &err), &err);
  uint8_t spub[32], ssec[32], late[32], late_sec[32], never[32], never_sec[32], known[32], known_sec[32];
  keypair(spub, ssec), keypair(late, late_sec), keypair(never, never_sec), keypair(known, known_sec);
  atoll_zap_allow(z, known);
  void *server = atoll_sock_server(ctx, ZMQ_ROUTER, ssec, &err);
  char ep[256];
  size_t eplen = sizeof ep;
  CHECK(server && zmq_bind(server, "tcp://127.0.0.1:*") == 0 && zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, ep, &eplen) == 0);
  void *c = client(ctx, ep, spub, late, late_sec);
  usleep(300000);
  atoll_zap_allow(z, late);
  CHECK(arrives(server, 1500));
  zmq_close(c);
  c = client(ctx, ep, spub, never, never_sec); /* held for 2 s, then refused */
  usleep(200000);
  double t0 = atoll_net_now();
  CHECK(gets_through(ctx, server, ep, spub, known, known_sec));
  CHECK(atoll_net_now() - t0 < 1.0);
  CHECK(atoll_zap_refused(z) == 0);
  CHECK(!arrives(server, 2500));
  CHECK(atoll_zap_refused(z) == 1);
  zmq_close(c);
  zmq_close(server);
  atoll_zap_stop(z);
  zmq_ctx_term(ctx);
}

int main(void) {
  atoll_err err;
  char dir[] = "/tmp/atoll_zap_XXXXXX", path[600], allowed[500];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(allowed, sizeof allowed, "%s/allowed", dir);
  CHECK(mkdir(allowed, 0700) == 0);
  char z85pub[41], z85sec[41];
  uint8_t pub[32], sec[32];
  for (int i = 0; i < KEYS; i++) {
    CHECK(zmq_curve_keypair(z85pub, z85sec) == 0);
    snprintf(path, sizeof path, "%s/k%04d.pub", allowed, i);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) break;
    fprintf(f, "%s\n", z85pub);
    fclose(f);
  }
  CHECK(zmq_curve_keypair(z85pub, z85sec) == 0); /* one more: key 4101 */
  zmq_z85_decode(pub, z85pub), zmq_z85_decode(sec, z85sec);

  void *ctx = zmq_ctx_new();
  atoll_zap *z;
  CHECK_OK(atoll_zap_start(&z, ctx, "test", 0, &err), &err);
  CHECK(atoll_zap_allow_dir(z, allowed, NULL, &err) == KEYS);
  CHECK(atoll_zap_count(z) == KEYS);
  CHECK(atoll_zap_allow(z, pub) == 0 && atoll_zap_count(z) == KEYS + 1);
  CHECK(atoll_zap_allow(z, pub) == 0 && atoll_zap_count(z) == KEYS + 1); /* not twice */

  /* key 4101 gets through the handshake; a stranger's does not */
  char spz[41], ssz[41];
  uint8_t spub[32], ssec[32];
  CHECK(zmq_curve_keypair(spz, ssz) == 0);
  zmq_z85_decode(spub, spz), zmq_z85_decode(ssec, ssz);
  void *server = atoll_sock_server(ctx, ZMQ_ROUTER, ssec, &err);
  char ep[256];
  size_t eplen = sizeof ep;
  CHECK(server && zmq_bind(server, "tcp://127.0.0.1:*") == 0 && zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, ep, &eplen) == 0);
  CHECK(gets_through(ctx, server, ep, spub, pub, sec));
  uint8_t spub2[32], ssec2[32];
  CHECK(zmq_curve_keypair(z85pub, z85sec) == 0);
  zmq_z85_decode(spub2, z85pub), zmq_z85_decode(ssec2, z85sec);
  CHECK(!gets_through(ctx, server, ep, spub, spub2, ssec2));
  CHECK(atoll_zap_refused(z) >= 1);
  zmq_close(server);
  atoll_zap_stop(z);
  zmq_ctx_term(ctx);

  /* a path that does not fit its buffer is an error naming it */
  char small[16];
  CHECK(atoll_key_path(small, sizeof small, "/tmp/k", "key.pub", &err) == 0 && strcmp(small, "/tmp/k/key.pub") == 0);
  CHECK(atoll_key_path(small, sizeof small, "/tmp/keys", "key.secret", &err) == -1 && strstr(err.msg, "path too long"));

  grace();

  char cmd[4500];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}

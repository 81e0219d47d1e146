/* ASK and its answer (ask.h). */
#include "net/ask.h"

#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"

#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* ZeroMQ resolves a tcp:// host in the background and retries a name that does not
 * resolve for ever: said here at once instead of after the timeout. */
static int resolves(const char *join, atoll_err *err) {
  if (strncmp(join, "tcp://", 6) != 0) return 0;
  const char *host = join + 6, *colon = strrchr(host, ':');
  if (!colon || colon == host || colon - host > 255) return atoll_fail(err, "--join %s: expected tcp://HOST:PORT", join);
  char name[256];
  memcpy(name, host, (size_t)(colon - host));
  name[colon - host] = 0;
  if (name[0] == '[') return 0; /* IPv6 literal: ZeroMQ's to judge */
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  int rc = getaddrinfo(name, NULL, &hints, &ai);
  if (ai) freeaddrinfo(ai);
  return rc ? atoll_fail(err, "--join %s: cannot resolve %s (%s)", join, name, gai_strerror(rc)) : 0;
}

int atoll_net_ask(const char *join, const char *key_file, const char *coordinator_key, uint32_t rank, double timeout,
                  const volatile sig_atomic_t *stop, uint32_t *slot, int *open, char **json, atoll_err *err) {
  *json = NULL;
  *open = 0;
  *slot = ATOLL_WIRE_NO_SLOT;
  if (sodium_init() < 0) return atoll_fail(err, "libsodium cannot start");
  uint8_t pub[ATOLL_KEY_BYTES], sec[ATOLL_KEY_BYTES], cpub[ATOLL_KEY_BYTES];
  if (atoll_key_read_secret(key_file, sec, pub, err) || atoll_key_read_public(coordinator_key, cpub, err)) return -1;
  void *ctx = zmq_ctx_new();
  void *s = ctx ? atoll_sock_client(ctx, ZMQ_DEALER, pub, sec, cpub, err) : NULL;
  uint8_t *buf = malloc(ATOLL_WIRE_MAX_CONTROL + 1);
  int rc = -1, got = 0;
  if (!ctx || !s || !buf) {
    if (ctx && s && !buf) atoll_fail(err, "out of memory");
    else if (!ctx) atoll_fail(err, "--join %s: ZeroMQ cannot start", join);
    goto done;
  }
  if (resolves(join, err)) goto done;
  if (zmq_connect(s, join)) {
    atoll_fail(err, "--join %s: %s", join, zmq_strerror(zmq_errno()));
    goto done;
  }
  atoll_sender tx;
  atoll_sender_init(&tx);
  double t0 = atoll_net_now(), sent = -1;
  while (!got && atoll_net_now() - t0 < timeout && !(stop && *stop)) {
    if (atoll_net_now() - sent >= 1.0) { /* not answered (the coordinator starting, or a lost frame): again */
      atoll_wire_msg ask = {.type = ATOLL_WIRE_ASK};
      ask.u.settings.rank = rank;
      atoll_sock_send(s, &tx, &ask, NULL, 0);
      sent = atoll_net_now();
    }
    long n = atoll_sock_recv(s, buf, ATOLL_WIRE_MAX_CONTROL, NULL, NULL, NULL, NULL, 100);
    if (n < 0 || n > (long)ATOLL_WIRE_MAX_CONTROL) continue;
    atoll_wire_msg m;
    atoll_wire_member none[1];
    char why[200];
    if (atoll_wire_parse(buf, (size_t)n, &m, none, 1, why, sizeof why)) {
      fprintf(stderr, "island: dropped a message from the coordinator: %s\n", why);
      continue;
    }
    if (m.type == ATOLL_WIRE_ERROR) {
      atoll_fail(err, "--join %s: the coordinator says: %s", join, m.u.text);
      goto done;
    }
    if (m.type != ATOLL_WIRE_SETTINGS) continue;
    *slot = m.u.settings.slot;
    *open = (int)m.u.settings.open;
    if (m.u.settings.len > 0) {
      if (!(*json = malloc(m.u.settings.len + 1))) {
        atoll_fail(err, "out of memory");
        goto done;
      }
      memcpy(*json, m.u.settings.json, m.u.settings.len);
      (*json)[m.u.settings.len] = 0;
    }
    got = 1;
  }
  if (got) rc = 0;
  else if (stop && *stop) atoll_fail(err, "--join %s: stopped by a signal while asking the coordinator for the run's settings", join);
  else
    atoll_fail(err, "--join %s: no answer within %g s to this island's question for the run's settings: is the coordinator running there, is this island's key.pub in its allowed/, and is --coordinator-key its public key?",
               join, timeout);
done:
  free(buf);
  if (s) {
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(s);
  }
  if (ctx) zmq_ctx_term(ctx);
  return rc;
}

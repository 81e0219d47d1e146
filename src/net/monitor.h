/* Handshake failures on a CURVE server socket, logged (docs/islands.md, "What is
 * logged"): a thread reads ZeroMQ's socket monitor and writes one line for each
 * connection that closed before its handshake was done, naming the peer's address and
 * the reason, at most once per address per 10 s. Refusals by the allow-list are left
 * to the ZAP handler's own line (zap.h), which names the key. It also keeps the
 * descriptors of closed connections for the socket's owner (a coordinator notices a
 * killed island by its closed connections: atoll_monitor_closed). */
#ifndef ATOLL_NET_MONITOR_H
#define ATOLL_NET_MONITOR_H

#include "atoll/atoll.h"

typedef struct atoll_monitor atoll_monitor;

/* Watches sock (of ctx), before it binds; label prefixes the lines ("coordinator"). */
int atoll_monitor_start(atoll_monitor **out, void *ctx, void *sock, const char *label, atoll_err *err);
void atoll_monitor_stop(atoll_monitor *m);
/* Lines written so far. */
int atoll_monitor_logged(atoll_monitor *m);
/* A connection that closed: its descriptor, and its peer as atoll_sock_peer gave it when
 * it was accepted ("" when it closed before that could be read). The descriptor number
 * is reused by later connections; the two together name this one. */
typedef struct {
  int fd;
  char peer[64];
} atoll_monitor_conn;
/* The connections that closed since the last call (DISCONNECTED events): up to max into
 * out; how many. *lost: 1 when more closed than were kept (ATOLL_MONITOR_CLOSED). */
#define ATOLL_MONITOR_CLOSED 4096
int atoll_monitor_closed(atoll_monitor *m, atoll_monitor_conn *out, int max, int *lost);

#endif

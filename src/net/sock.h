/* ZeroMQ sockets for islands and coordinators: CURVE servers and clients, sending a
 * wire message, receiving one frame with the peer's identity. */
#ifndef ATOLL_NET_SOCK_H
#define ATOLL_NET_SOCK_H

#include "atoll/atoll.h"
#include "net/keys.h"
#include "net/wire.h"

#include <stdint.h>
#include <zmq.h>

/* A socket of `type`; server: CURVE server with secret (ZAP domain "atoll");
 * client: CURVE client of server_key with pub/secret. Linger 0, maximum message size
 * ATOLL_WIRE_MAX_DATA + header. */
void *atoll_sock_server(void *ctx, int type, const uint8_t secret[ATOLL_KEY_BYTES], atoll_err *err);
void *atoll_sock_client(void *ctx, int type, const uint8_t pub[ATOLL_KEY_BYTES], const uint8_t secret[ATOLL_KEY_BYTES],
                        const uint8_t server_key[ATOLL_KEY_BYTES], atoll_err *err);

/* A tcp:// endpoint's port must be 1 to 65535, or 0 or * (any free one; ZeroMQ would
 * take 99999 as another port): 0, or -1 with err naming flag. Other transports pass. */
int atoll_sock_check_endpoint(const char *flag, const char *ep, atoll_err *err);
/* 1 when a tcp:// endpoint's host is a wildcard (*, 0.0.0.0, [::]): bindable, but no
 * address to give a peer. */
int atoll_sock_wildcard(const char *ep);
/* An island given no --island-listen: tcp://IP:0, IP the address of this host on its
 * route to the coordinator's endpoint (IPv4; resolved, nothing sent), port any free
 * one. 0, or -1 with one line naming --join. */
int atoll_sock_default_listen(const char *coordinator, char *out, size_t n, atoll_err *err);
/* Checks ep (above), binds s to it and writes the endpoint bound (ZMQ_LAST_ENDPOINT:
 * the port ZeroMQ chose for 0 or *) into bound (n bytes). 0, or -1 with err. */
int atoll_sock_bind(void *s, const char *flag, const char *ep, char *bound, size_t n, atoll_err *err);

/* The sender side of a socket: a random session number, and a sequence. */
typedef struct {
  uint64_t session;
  uint32_t seq;
  uint64_t bytes; /* frames sent, with an estimate of ZMTP framing and CURVE boxes */
} atoll_sender;

void atoll_sender_init(atoll_sender *s);
/* Encodes and sends m (flags: ZMQ_SNDMORE etc. for the frames before it are the
 * caller's); returns 0 or -1. A ROUTER passes the routing id first. */
int atoll_sock_send(void *sock, atoll_sender *s, atoll_wire_msg *m, const void *rid, size_t rid_len);
/* As atoll_sock_send, waiting at most timeout_ms for the socket to take the message
 * (atoll_sock_send waits 1 s): -1 when it cannot, e.g. its only peer is dead. */
int atoll_sock_send_within(void *sock, atoll_sender *s, atoll_wire_msg *m, const void *rid, size_t rid_len, int timeout_ms);
/* m encoded into msg (a new message, the sender's session and next sequence): 0, or -1
 * (msg then holds nothing to close). */
int atoll_sock_encode(atoll_sender *s, atoll_wire_msg *m, zmq_msg_t *msg);
/* Sends msg on whichever of n sockets (at most 64) can take it first, waiting at most
 * timeout_ms; of several, the first from *next (NULL: from the first), and *next
 * becomes the one after it. The socket's index (msg is then empty), or -1 (msg kept). */
int atoll_sock_put(void **socks, int n, int *next, atoll_sender *s, zmq_msg_t *msg, const void *rid, size_t rid_len,
                   int timeout_ms);

/* One received frame (after a ROUTER's routing id, when rid is not NULL) into buf;
 * user: the peer's key as Z85 (ZAP User-Id), addr: its address. Returns the frame's
 * length (cap + 1: longer than cap, to be refused), -2 for a message of several frames
 * (dropped), or -1 on timeout (timeout_ms) / error. */
long atoll_sock_recv(void *sock, uint8_t *buf, size_t cap, uint8_t *rid, size_t *rid_len, char user[64],
                     char addr[64], int timeout_ms);
/* The same, and *fd: the descriptor of the connection the frame came on (-1: unknown),
 * as the socket monitor's ACCEPTED and DISCONNECTED events name it (monitor.h). */
long atoll_sock_recv_fd(void *sock, uint8_t *buf, size_t cap, uint8_t *rid, size_t *rid_len, char user[64],
                        char addr[64], int *fd, int timeout_ms);

/* As atoll_sock_recv, but the frame stays in ZeroMQ's message (no copy): returns its
 * length with *msg holding it (the caller closes it), or -1 / -2 with nothing held. */
long atoll_sock_recv_msg(void *sock, zmq_msg_t *msg, char user[64], char addr[64], int timeout_ms);

/* The peer of connected socket fd as "ADDRESS:PORT" ("" when it is not connected: closed,
 * or reused by nothing): with the descriptor, what tells one connection from a later one
 * given the same descriptor number. */
void atoll_sock_peer(int fd, char out[64]);

double atoll_net_now(void);

#endif

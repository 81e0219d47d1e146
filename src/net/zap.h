/* The allow-list of CURVE public keys, enforced by a ZAP handler (ZeroMQ RFC 27): a
 * thread answering the authentication requests of every CURVE server socket of one
 * ZeroMQ context. A connection whose client key is not in the list is refused during
 * the handshake (it never delivers a message) and logged with its address and key.
 * An accepted connection's messages carry the key's Z85 text as their "User-Id". */
#ifndef ATOLL_NET_ZAP_H
#define ATOLL_NET_ZAP_H

#include "atoll/atoll.h"
#include "net/keys.h"

typedef struct atoll_zap atoll_zap;

/* Starts the handler on ctx; label prefixes its log lines ("coordinator"). grace:
 * seconds a CURVE connection with an unknown key waits for the key to be allowed (0:
 * none); it waits without holding the handler (other connections are answered), and a
 * key refused after its grace gets none for 10 s. */
int atoll_zap_start(atoll_zap **out, void *ctx, const char *label, double grace, atoll_err *err);
void atoll_zap_stop(atoll_zap *z);
/* Adds a key (thread-safe); a key already there is not added twice. The list grows
 * as needed: -1 only when memory runs out (the key is not added), else 0. */
int atoll_zap_allow(atoll_zap *z, const uint8_t key[ATOLL_KEY_BYTES]);
/* Adds every DIR/\*.pub; returns how many keys, or -1 (err) for an unreadable file.
 * With *bad given, an unreadable file is skipped instead: *bad counts them, and err
 * holds the first one's reason. */
int atoll_zap_allow_dir(atoll_zap *z, const char *dir, int *bad, atoll_err *err);
int atoll_zap_count(atoll_zap *z);
/* Refusals so far (for tests and logs). */
int atoll_zap_refused(atoll_zap *z);

#endif

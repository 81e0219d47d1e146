/* CURVE keys for islands and coordinators (ZeroMQ's CurveZMQ, Curve25519).
 *
 * `atoll keys --out DIR` writes DIR/key.pub (the public key) and DIR/key.secret (the
 * secret key), each 40 Z85 characters and a newline, mode 0600, and an empty
 * DIR/allowed/ (a coordinator's allow-list: copy islands' key.pub files there, any
 * name ending in .pub). DIR or DIR/allowed/ writable by group or others is refused
 * (nothing is written), and so is a secret key file readable by group or others. */
#ifndef ATOLL_NET_KEYS_H
#define ATOLL_NET_KEYS_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

#define ATOLL_KEY_BYTES 32
#define ATOLL_KEY_Z85 40

int atoll_keys_generate(const char *dir, atoll_err *err);
/* 0 when only its owner may write to dir (or it does not exist: its reader says so);
 * else -1 naming it: others could add a key to
 * an allow-list there, or replace a key (keys --out and the coordinator check). */
int atoll_keys_private_dir(const char *dir, atoll_err *err);
/* The secret key in path and the public key derived from it. */
int atoll_key_read_secret(const char *path, uint8_t secret[ATOLL_KEY_BYTES], uint8_t pub[ATOLL_KEY_BYTES],
                          atoll_err *err);
int atoll_key_read_public(const char *path, uint8_t pub[ATOLL_KEY_BYTES], atoll_err *err);
/* DIR/NAME into out (n bytes): 0, or -1 (err names both) when it does not fit: a
 * path cut short would name another file. */
int atoll_key_path(char *out, size_t n, const char *dir, const char *name, atoll_err *err);
/* Z85 text of a key (41 bytes with the NUL). */
void atoll_key_z85(const uint8_t key[ATOLL_KEY_BYTES], char out[ATOLL_KEY_Z85 + 1]);

#endif

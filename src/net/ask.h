/* An island's question before it registers (docs/islands.md, "Few flags"): ASK the
 * coordinator for the run's settings and this island's slot, over a connection of its
 * own that is closed after the answer. */
#ifndef ATOLL_NET_ASK_H
#define ATOLL_NET_ASK_H

#include "atoll/atoll.h"

#include <signal.h>
#include <stdint.h>

/* Asks every second until SETTINGS comes, up to timeout seconds (or *stop, if stop is
 * not NULL). *slot: ATOLL_WIRE_NO_SLOT or the slot; *open: 1 in an open run; *json: the run's settings as a
 * NUL-terminated string (free it), or NULL when the coordinator has none. 0, or -1 with
 * one line naming --join. */
int atoll_net_ask(const char *join, const char *key_file, const char *coordinator_key, uint32_t rank, double timeout,
                  const volatile sig_atomic_t *stop, uint32_t *slot, int *open, char **json, atoll_err *err);

#endif

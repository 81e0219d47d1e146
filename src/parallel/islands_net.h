/* Islands as separate jobs (docs/islands.md): the DiLoCo object's outer exchange goes
 * over the network link of src/net/link.h instead of the mesh's cross-island
 * communicator. This object owns the link; as a strategy it tells the heartbeats how
 * far the island is (after_step) and closes the link at the end of the run. It is
 * added to the list before DiLoCo, so DiLoCo (destroyed first) never outlives it. */
#ifndef ATOLL_ISLANDS_NET_H
#define ATOLL_ISLANDS_NET_H

#include "net/link.h"
#include "parallel/diloco.h"
#include "parallel/strategy.h"

typedef struct atoll_islands_net atoll_islands_net;

/* Takes the link's settings (copied, strings too); registers nothing yet: the island
 * reads its checkpoint first (a bad one never reaches the coordinator), then connects. */
int atoll_islands_net_create(atoll_islands_net **out, const atoll_link_config *cfg, atoll_err *err);
/* Opens the link: HELLO with the checkpoint's revision, ended early by *stop. */
int atoll_islands_net_connect(atoll_islands_net *n, const volatile sig_atomic_t *stop, atoll_err *err);
const atoll_outer_link *atoll_islands_net_link(atoll_islands_net *n);
atoll_strategy *atoll_islands_net_strategy(atoll_islands_net *n);
atoll_link_stats atoll_islands_net_stats(const atoll_islands_net *n);
/* The run finished: the island tells the coordinator it leaves (atoll_link_goodbye). */
int atoll_islands_net_finish(atoll_islands_net *n, atoll_err *err);
/* What the heartbeats tell the coordinator's status page: tokens per step, the last loss
 * (and the bytes sent so far). */
void atoll_islands_net_report(atoll_islands_net *n, uint64_t tokens_per_step, float loss);
void atoll_islands_net_set_stop(atoll_islands_net *n, const volatile sig_atomic_t *stop);
/* The revision of the island's global weights (a checkpoint records it), and a resumed
 * island's (atoll_link_set_revision). */
uint64_t atoll_islands_net_revision(atoll_islands_net *n);
/* Before a checkpoint: the last commit's answer (atoll_link_settle; 0 while an exchange
 * holds the link); -1: that commit failed, and no checkpoint may name its weights. */
int atoll_islands_net_settle(atoll_islands_net *n, atoll_err *err);
void atoll_islands_net_resume_revision(atoll_islands_net *n, uint64_t revision);

/* An island of several ranks: rank r's data endpoint is --island-listen's with the
 * port + r (tcp://HOST:PORT only). */
int atoll_islands_net_rank_endpoint(const char *listen, int rank, char *out, size_t n, atoll_err *err);
/* The fingerprint of a rank's inner layout (the values that decide its slice), told to
 * the coordinator so that islands whose slices do not line up are refused. */
uint64_t atoll_islands_net_layout(const int *values, int count);

#endif

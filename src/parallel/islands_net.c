/* Islands as separate jobs: DiLoCo's outer exchange over the network (islands_net.h). */
#include "parallel/islands_net.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct atoll_islands_net {
  atoll_strategy base;
  atoll_link *link;
  atoll_outer_link outer;
  /* DiLoCo's exchange thread holds the link (--overlap): the training thread leaves its
   * sockets alone and reports the stats taken before */
  int busy;
  atoll_link_stats before;
  /* until atoll_islands_net_connect: the link's settings and what it will be given */
  atoll_link_config cfg;
  char join[1100], listen[300], advertise[300], key[1100], coordinator_key[1100];
  float *global, *momentum;
  size_t state_n;
};

_Static_assert((int)ATOLL_LINK_RUN_ENDED == (int)ATOLL_OUTER_RUN_ENDED && (int)ATOLL_LINK_NO_DONOR == (int)ATOLL_OUTER_NO_DONOR &&
                   (int)ATOLL_LINK_SIGNALLED == (int)ATOLL_OUTER_SIGNALLED, "the link's ends are DiLoCo's");

static atoll_link *link_of(void *ctx) { return ((atoll_islands_net *)ctx)->link; }

static int net_mean(void *ctx, atoll_qtype dtype, float *x, size_t n, uint64_t tokens, int step, int fragment, size_t *bad,
                    atoll_err *err) {
  return atoll_link_mean(link_of(ctx), dtype, x, n, tokens, (uint32_t)step, (uint32_t)fragment, bad, err);
}

/* The islands agree on the BLAKE2b-256 hash of the global weights and outer momentum
 * (what a joining island adopts, checked against the same hash). */
static int net_commit(void *ctx, int step, const float *global, size_t n, atoll_err *err) {
  uint8_t hash[32];
  atoll_link_state_hash(link_of(ctx), global, n, hash);
  return atoll_link_commit(link_of(ctx), (uint32_t)step, hash, err);
}

/* (the revision after the last commit: its answer is awaited; a failure is the link's
 * next call's) */
static uint64_t net_revision(void *ctx) {
  atoll_err ignored;
  atoll_link_settle(link_of(ctx), &ignored);
  return atoll_link_revision(link_of(ctx));
}
static uint64_t net_bytes(void *ctx) { return atoll_link_get_stats(link_of(ctx)).wire_bytes; }
static void net_bind(void *ctx, float *global, float *momentum, size_t n) {
  atoll_islands_net *in = ctx;
  in->global = global, in->momentum = momentum, in->state_n = n;
  if (in->link) atoll_link_bind(in->link, global, momentum, n);
}
static int net_joined_step(void *ctx) { return (int)atoll_link_joined_step(link_of(ctx)); }
static void net_unjoin(void *ctx) { atoll_link_unjoin(link_of(ctx)); }
static void net_busy(void *ctx, int on) {
  atoll_islands_net *n = ctx;
  if (on) n->before = atoll_link_get_stats(n->link);
  n->busy = on;
}

static int net_after_step(atoll_strategy *s, int step, int last, double compute_seconds, atoll_err *err) {
  (void)last, (void)compute_seconds;
  atoll_islands_net *n = (atoll_islands_net *)s;
  atoll_link_progress(n->link, (uint32_t)step); /* (an atomic: the heartbeats' thread reads it) */
  return n->busy ? 0 : atoll_link_check(n->link, err);
}

static void net_destroy(atoll_strategy *s) {
  atoll_islands_net *n = (atoll_islands_net *)s;
  if (n->link) atoll_link_close(n->link);
  free(n);
}

static const atoll_strategy_ops NET_OPS = {.name = "islands-net", .after_step = net_after_step, .destroy = net_destroy};

int atoll_islands_net_create(atoll_islands_net **out, const atoll_link_config *cfg, atoll_err *err) {
  *out = NULL;
  if (sodium_init() < 0) return atoll_fail(err, "libsodium cannot start");
  atoll_islands_net *n = calloc(1, sizeof *n);
  if (!n) return atoll_fail(err, "out of memory");
  n->cfg = *cfg;
  /* (the caller's strings may not outlive this call) */
  snprintf(n->join, sizeof n->join, "%s", cfg->join ? cfg->join : "");
  snprintf(n->listen, sizeof n->listen, "%s", cfg->listen ? cfg->listen : "");
  snprintf(n->advertise, sizeof n->advertise, "%s", cfg->advertise ? cfg->advertise : "");
  snprintf(n->key, sizeof n->key, "%s", cfg->key_file ? cfg->key_file : "");
  snprintf(n->coordinator_key, sizeof n->coordinator_key, "%s", cfg->coordinator_key ? cfg->coordinator_key : "");
  n->cfg.join = n->join, n->cfg.listen = n->listen, n->cfg.advertise = n->advertise;
  n->cfg.key_file = n->key, n->cfg.coordinator_key = n->coordinator_key;
  n->base.ops = &NET_OPS;
  n->outer = (atoll_outer_link){n, net_mean, net_commit, net_bytes, net_bind, net_joined_step, net_unjoin, net_busy, net_revision};
  *out = n;
  return 0;
}

int atoll_islands_net_connect(atoll_islands_net *n, const volatile sig_atomic_t *stop, atoll_err *err) {
  n->cfg.stop = stop;
  if (atoll_link_open(&n->link, &n->cfg, err)) return -1;
  if (n->global) atoll_link_bind(n->link, n->global, n->momentum, n->state_n);
  return 0;
}

const atoll_outer_link *atoll_islands_net_link(atoll_islands_net *n) { return &n->outer; }
atoll_strategy *atoll_islands_net_strategy(atoll_islands_net *n) { return n ? &n->base : NULL; }
uint64_t atoll_islands_net_revision(atoll_islands_net *n) {
  if (!n->link) return n->cfg.revision;
  atoll_err ignored; /* (a failed commit fails the link's next call) */
  if (!n->busy) atoll_link_settle(n->link, &ignored);
  return atoll_link_revision(n->link);
}
void atoll_islands_net_resume_revision(atoll_islands_net *n, uint64_t revision) {
  n->cfg.revision = revision;
  if (n->link) atoll_link_set_revision(n->link, revision);
}
void atoll_islands_net_set_stop(atoll_islands_net *n, const volatile sig_atomic_t *stop) {
  n->cfg.stop = stop;
  if (n->link) atoll_link_set_stop(n->link, stop);
}
int atoll_islands_net_settle(atoll_islands_net *n, atoll_err *err) {
  return n->link && !n->busy ? atoll_link_settle(n->link, err) : 0;
}
int atoll_islands_net_finish(atoll_islands_net *n, atoll_err *err) { return n->link ? atoll_link_goodbye(n->link, err) : 0; }
void atoll_islands_net_report(atoll_islands_net *n, uint64_t tokens_per_step, float loss) {
  if (n->link) atoll_link_report(n->link, tokens_per_step, loss, atoll_islands_net_stats(n).wire_bytes);
}
atoll_link_stats atoll_islands_net_stats(const atoll_islands_net *n) {
  if (!n->link) return (atoll_link_stats){0};
  return n->busy ? n->before : atoll_link_get_stats(n->link);
}

int atoll_islands_net_rank_endpoint(const char *listen, int rank, char *out, size_t n, atoll_err *err) {
  const char *colon = strrchr(listen, ':');
  char *end = NULL;
  long port = colon ? strtol(colon + 1, &end, 10) : -1;
  if (rank == 0) {
    snprintf(out, n, "%s", listen);
    return 0;
  }
  if (strncmp(listen, "tcp://", 6) != 0 || !colon || end == colon + 1 || *end || port < 1 || port + rank > 65535)
    return atoll_fail(err, "--island-listen %s: an island of several ranks needs tcp://HOST:PORT (rank r listens on PORT + r)", listen);
  snprintf(out, n, "%.*s:%ld", (int)(colon - listen), listen, port + rank);
  return 0;
}

uint64_t atoll_islands_net_layout(const int *values, int count) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the values' bytes */
  for (int i = 0; i < count; i++)
    for (int b = 0; b < 4; b++) h = (h ^ (uint8_t)((uint32_t)values[i] >> (8 * b))) * 1099511628211ull;
  return h;
}

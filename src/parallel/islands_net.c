/* Islands as separate jobs: DiLoCo's outer exchange over the network (islands_net.h). */
#include "parallel/islands_net.h"

#include <sodium.h>
#include <stdlib.h>

struct atoll_islands_net {
  atoll_strategy base;
  atoll_link *link;
  atoll_outer_link outer;
};

static int net_mean(void *ctx, atoll_qtype dtype, float *x, size_t n, int step, int fragment, size_t *bad, atoll_err *err) {
  return atoll_link_mean(ctx, dtype, x, n, (uint32_t)step, (uint32_t)fragment, bad, err);
}

/* The islands agree on the BLAKE2b-256 hash of the global weights. */
static int net_commit(void *ctx, int step, const float *global, size_t n, atoll_err *err) {
  uint8_t hash[32];
  crypto_generichash(hash, sizeof hash, (const unsigned char *)global, n * sizeof(float), NULL, 0);
  return atoll_link_commit(ctx, (uint32_t)step, hash, err);
}

static uint64_t net_bytes(void *ctx) { return atoll_link_get_stats(ctx).wire_bytes; }
static void net_bind(void *ctx, float *global, float *momentum, size_t n) { atoll_link_bind(ctx, global, momentum, n); }
static int net_joined_step(void *ctx) { return (int)atoll_link_joined_step(ctx); }

static int net_after_step(atoll_strategy *s, int step, int last, double compute_seconds, atoll_err *err) {
  (void)last, (void)compute_seconds, (void)err;
  atoll_link_progress(((atoll_islands_net *)s)->link, (uint32_t)step);
  return 0;
}

static void net_destroy(atoll_strategy *s) {
  atoll_islands_net *n = (atoll_islands_net *)s;
  atoll_link_close(n->link);
  free(n);
}

static const atoll_strategy_ops NET_OPS = {.name = "islands-net", .after_step = net_after_step, .destroy = net_destroy};

int atoll_islands_net_create(atoll_islands_net **out, const atoll_link_config *cfg, atoll_err *err) {
  *out = NULL;
  if (sodium_init() < 0) return atoll_fail(err, "libsodium cannot start");
  atoll_islands_net *n = calloc(1, sizeof *n);
  if (!n) return atoll_fail(err, "out of memory");
  if (atoll_link_open(&n->link, cfg, err)) {
    free(n);
    return -1;
  }
  n->base.ops = &NET_OPS;
  n->outer = (atoll_outer_link){n->link, net_mean, net_commit, net_bytes, net_bind, net_joined_step};
  *out = n;
  return 0;
}

const atoll_outer_link *atoll_islands_net_link(atoll_islands_net *n) { return &n->outer; }
atoll_strategy *atoll_islands_net_strategy(atoll_islands_net *n) { return n ? &n->base : NULL; }
atoll_link_stats atoll_islands_net_stats(const atoll_islands_net *n) { return atoll_link_get_stats(n->link); }

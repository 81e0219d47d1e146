/* DiLoCo (Douillard et al. 2023, arXiv 2311.08105) and its streaming variant
 * (Douillard et al. 2025, arXiv 2501.18512) across the islands of the mesh.
 *
 * Every island trains on its own data with its own inner optimizer (data parallel
 * inside, src/parallel/dp.h, and tensor / pipeline parallel: each rank syncs the part
 * it holds, with the ranks holding the same part in the other islands). The global weights g are the model. Every H steps a
 * fragment f of the parameters (a contiguous group of layers; one fragment = the
 * whole model) is synchronised:
 *
 *   outer gradient   d = g - mean over islands of the island's weights   (on f)
 *   nesterov         u = mu u + d;  g = g - lr (d + mu u)
 *   sgd              u = mu u + d;  g = g - lr u              (mu = 0: g = g - lr d)
 *   islands          w = g                      (overlap T = 0, at the sync)
 *                    w = alpha w + (1 - alpha) g (overlap T > 0, T steps later)
 *
 * Fragment p of F syncs after steps s with s mod H = floor(p H / F). With overlap T the
 * exchange runs on a thread of its own (diloco_exchange.c) while the island takes T
 * more inner steps, and the new global fragment is merged after them: the outer
 * gradient is taken at the sync and the arithmetic is the same as if the exchange had
 * finished there, so the result does not depend on when the thread ran. The link model
 * (--wan-gbps) charges only the part of a modelled exchange longer than the T steps'
 * compute. The last step syncs and merges every fragment at once.
 *
 * Outer state is sharded like the island's ZeRO shards: island rank j keeps g and u
 * only for its slice [j S, (j+1) S) (S = ceil(parameters / dp), the ZeRO shard rule), and exchanges only
 * that slice with rank j of the other islands (the mesh's cross-island
 * communicator): reduce-scatter and all-gather phases done as an all-to-all and an
 * all-gather of compressed bytes (quant.h), so each rank sends about
 * 2 (K - 1) / K x (its slice of f) x bytes per value per sync, and decoded values are
 * summed in island order in fp32 (every island gets the same bits). After each sync
 * the islands compare a hash of g; a mismatch stops the run. */
#ifndef ATOLL_DILOCO_H
#define ATOLL_DILOCO_H

#include "core/hooks.h"
#include "model/layout.h"
#include "ops/ops.h"
#include "parallel/mesh.h"
#include "parallel/outer_lr.h"
#include "core/quant.h"
#include "parallel/strategy.h"

/* The outer exchange between islands that are separate jobs (islands_net.c): when a
 * DiLoCo object has one, its mean over islands and its agreement check go over it
 * instead of the mesh's cross-island communicator. */
/* No exchange comes, and the island ends here with a checkpoint (net/link.h's
 * ATOLL_LINK_*, same values): the run ended, no island holding the state is left, or a
 * stop signal ended the wait for the quorum. */
enum { ATOLL_OUTER_RUN_ENDED = 4, ATOLL_OUTER_NO_DONOR = 5, ATOLL_OUTER_SIGNALLED = 6 };

typedef struct {
  void *ctx;
  /* mean over the islands of exchange (step, fragment) of x[0, n), in place, encoded as
   * dtype, each island's x weighted by its tokens (docs/islands.md, "Token-weighted
   * mean"); *bad: index of the first NaN or Inf of this island's x, or SIZE_MAX */
  int (*mean)(void *ctx, atoll_qtype dtype, float *x, size_t n, uint64_t tokens, int step, int fragment, size_t *bad,
              atoll_err *err);
  /* (mean returns 0, -1, 2 or 3 as atoll_link_mean, or an ATOLL_OUTER_* end below) */
  /* after the step's syncs: the islands agree on the global weights (this rank's
   * slice of them) */
  int (*commit)(void *ctx, int step, const float *global, size_t n, atoll_err *err);
  /* bytes this rank sent to other islands so far */
  uint64_t (*bytes_sent)(void *ctx);
  /* this rank's outer state, given once: sent to joining islands, replaced on joining */
  void (*bind)(void *ctx, float *global, float *momentum, size_t n);
  /* after mean returned 2 (this island was behind and adopted the committed state):
   * the step that state is after */
  int (*joined_step)(void *ctx);
  /* mean returned 3 (this rank's fetch of the state failed) on some rank of the island
   * and 2 on this one: take the join back, to ask again with the others */
  void (*unjoin)(void *ctx);
  /* an exchange is in flight on a thread of its own (1) or was joined (0): meanwhile
   * that thread alone calls the entries above; NULL: not told */
  void (*busy)(void *ctx, int on);
  /* the revision of the global weights this rank holds (a join raises it); NULL: none */
  uint64_t (*revision)(void *ctx);
} atoll_outer_link;

typedef struct {
  int sync_every;       /* H */
  float outer_lr, outer_momentum;
  int nesterov;         /* else plain (heavy-ball) SGD */
  int fragments;        /* F in the formulas above */
  int overlap;          /* T, 0 <= T < H / F */
  float merge_alpha;    /* weight of the island's own weights when merging (T > 0) */
  int async;            /* with T > 0: merge at the first step from T on at which the exchange is done
                           (--outer-mode async), not at T, waiting for it */
  atoll_qtype dtype;
  double wan_gbps, wan_latency_ms; /* link model for inter-island traffic */
  int throttle;         /* hold inter-island exchanges to the modelled time */
  int stage3;           /* the island shards its weights (ZeRO-3): no gather after sync */
  uint64_t tokens_per_step; /* the island's tokens per inner step: its outer gradient's
                               weight is this times the steps since the fragment's last sync */
  const atoll_layout *whole; /* the whole model's layout, on which fragments are cut
                                (NULL: the layout given is the whole model) */
  const atoll_test_hooks *hooks; /* desync_island (NULL: none) */
  const atoll_outer_link *link;  /* islands as separate jobs (NULL: the mesh's islands) */
  /* A model on a device (ops->device): host_copy holds the weights on the host, and the
   * outer steps run there, with the weights copied from the device before the syncs
   * and merges of a step and back after them (and around swap_eval_weights). NULL: the
   * weights are host memory. */
  const atoll_ops *ops;
  float *host_copy;
} atoll_diloco_config;

typedef struct {
  uint64_t outer_syncs;        /* fragment syncs */
  uint64_t inter_island_bytes; /* sent by this rank to other islands */
  double wan_seconds;          /* modelled time of those sends over the WAN */
  double wan_exposed_seconds;  /* the part not hidden by overlap */
  double sync_seconds;         /* measured time in exchanges (on their thread with overlap) */
  double exchange_wait_seconds; /* the training thread's wait for exchanges: all of it
                                 * without overlap; with it, the wait at the merge */
  uint64_t contributed_steps;  /* inner steps whose outer gradient reached an outer sync
                                * (those an island discarded by joining do not count) */
  uint64_t merges;             /* outer steps applied to the weights (fragments counted) */
  uint64_t staleness_sum;      /* over those: steps between the sync and the merge */
  int staleness_max;           /* (0 without --overlap: applied at once) */
  int staleness_last;          /* the last merge's */
  uint64_t late_kept;          /* islands as separate jobs: contributions that came too late for
                                * their exchange (the island joined instead) and were kept */
  uint64_t late_merged;        /* and merged into a later exchange, staleness-weighted */
} atoll_diloco_stats;

typedef struct atoll_diloco atoll_diloco;

/* The settings alone (sync period, fragments for a model of `layers` blocks, overlap):
 * one line naming the flag. atoll_diloco_create checks them too; a run checks them
 * before an island joins its coordinator. */
int atoll_diloco_check(const atoll_diloco_config *cfg, int layers, atoll_err *err);
/* params: the island's weight buffer (full size; valid at least on this rank's slice).
 * Call atoll_diloco_reset_global once the weights are set (or fill the global
 * weights and momentum from a checkpoint); with a device (cfg->host_copy), once the
 * host copy holds them. */
/* cfg->outer_lr < 0: the default for cfg->sync_every (outer_lr.h). */
int atoll_diloco_create(atoll_diloco **out, const atoll_diloco_config *cfg, atoll_mesh *mesh,
                        const atoll_layout *lay, float *params, atoll_err *err);
void atoll_diloco_destroy(atoll_diloco *d);
/* The object as a strategy (strategy.h): begin_step (the desync test hook), after_step
 * (add_compute, then the syncs and merges due), swap_eval_weights, and save/load: the
 * global weights are the checkpoint's model weights, the outer momentum is
 * outer.safetensors. The list destroys it. */
atoll_strategy *atoll_diloco_strategy(atoll_diloco *d);
/* Global weights = this rank's slice of the island's weights; momentum = 0. */
void atoll_diloco_reset_global(atoll_diloco *d);
/* After loading a checkpoint taken after step `step`: re-derives which fragments
 * still have a merge pending (a sync within the last `overlap` steps), since the
 * schedule is a function of the step. */
void atoll_diloco_resume_at(atoll_diloco *d, int step);
/* The step the run began at: 0, or its source checkpoint's with --init-step 1 (state.json
 * "first_step"); call before atoll_diloco_resume_at. No sync happened at or before it. */
void atoll_diloco_set_first_step(atoll_diloco *d, int step);

/* After inner step `step` (1-based count of steps done; last = final step): runs the
 * syncs and merges due. Fails if the islands' global weights differ. */
int atoll_diloco_after_step(atoll_diloco *d, int step, int last, atoll_err *err);

/* Inner compute time of the step just done, for the link model: an overlapped
 * exchange is exposed only where its modelled time exceeds the compute it overlapped. */
void atoll_diloco_add_compute(atoll_diloco *d, double seconds);

/* The first step from `step` on (up to the run's last, `steps`) after which an outer
 * sync happens. */
int atoll_diloco_next_sync(const atoll_diloco *d, int step, int steps);

/* Waits for the outer exchange in flight (with overlap) and takes its result, as the
 * strategy entry `settle` does before evaluation and checkpoints. */
int atoll_diloco_settle(atoll_diloco *d, atoll_err *err);

/* With an outer link: the step the island jumped to by joining after the last
 * after_step (the loop continues from there), or 0; reading it clears it. */
int atoll_diloco_take_jump(atoll_diloco *d);
/* With a link: the joins so far (an exchange that ended in the committed state instead),
 * and *exchange_step, the step of the last such exchange: the island's work since then
 * was discarded with its weights (an open run gives those phases' data units back). */
int atoll_diloco_joins(const atoll_diloco *d, int *exchange_step);
/* With an outer link: no exchange comes (ATOLL_OUTER_*): the kind,
 * and *why the reason; 0 while the run goes on. The loop saves and stops. */
int atoll_diloco_ended(const atoll_diloco *d, const char **why);
/* With an outer link: fragment f's kept late contribution's weight in tokens (0: none;
 * docs/islands.md, "Late contributions"), for checkpoints (state.json); set on resume
 * before the strategies load, which then read its outer gradient (late.safetensors). */
double atoll_diloco_late_tokens(const atoll_diloco *d, int f);
void atoll_diloco_set_late_tokens(atoll_diloco *d, int f, double tokens);
int atoll_diloco_fragments(const atoll_diloco *d);
/* An island's phase in tokens or seconds (train/phase.h): the loop skipped the step
 * just counted (no compute; after_step still runs). The next sync's outer gradient
 * leaves the skipped steps out of its tokens. The count since the last sync, for
 * checkpoints, and set back on resume. (Phases need one fragment.) */
void atoll_diloco_skipped(atoll_diloco *d);
int atoll_diloco_phase_skipped(const atoll_diloco *d);
void atoll_diloco_set_phase_skipped(atoll_diloco *d, int steps);

/* This rank's slice and its global weights and outer momentum (for checkpoints). */
void atoll_diloco_slice(const atoll_diloco *d, size_t *begin, size_t *end);
float *atoll_diloco_global(atoll_diloco *d);
float *atoll_diloco_momentum(atoll_diloco *d);
atoll_diloco_stats atoll_diloco_get_stats(const atoll_diloco *d);
/* Swaps this rank's slice of the island weights with the global weights (and makes
 * the island's buffer whole again), so that evaluation and checkpoints see the global
 * model; call twice to swap back. */
void atoll_diloco_swap_global(atoll_diloco *d);

#endif

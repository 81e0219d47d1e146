/* DiLoCo outer synchronisation; see diloco.h for the algorithm and byte counts. */
#include "core/clock.h"
#include "core/rng.h"
#include "model/layout.h"
#include "parallel/diloco.h"
#include "parallel/dp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct atoll_diloco {
  atoll_strategy base;
  atoll_diloco_config cfg;
  atoll_mesh *mesh;
  const atoll_layout *lay;
  float *params;        /* the weights the outer steps read and write: host memory */
  float *device_params; /* with a device: the model's own weights there, else NULL */
  size_t slice_begin, slice_end; /* this rank's slice of the flat buffer */
  float *global, *momentum;                  /* [slice_end - slice_begin] */
  size_t *frag_begin, *frag_end;             /* fragment ranges of the flat buffer */
  int *merge_due;                            /* per fragment: step of a pending merge, or 0 */
  int first_step;                            /* the step the run began at (--init-step 1: not 0) */
  int contributed_to;                        /* the last step counted in stats.contributed_steps */
  double *pending_wan, *pending_clock;       /* per fragment: modelled link time, compute clock at its sync */
  double compute_clock;                      /* inner compute seconds so far */
  atoll_diloco_stats stats;
  /* scratch */
  float *delta, *sum, *decoded;
  uint8_t *send, *recv;
  size_t *counts;
  uint64_t *hashes;          /* [islands] */
  size_t bad_at;             /* first non-finite outer gradient value this sync (flat index), or SIZE_MAX */
  int64_t *verdicts;         /* [world size][3]: every rank's view of the sync */
  float *tie_global, *tie_momentum; /* [wte] with an embedding tie */
  int jump_to;               /* with a link: the step this island joined at, for the loop */
};

int atoll_diloco_take_jump(atoll_diloco *d) {
  int j = d->jump_to;
  d->jump_to = 0;
  return j;
}

/* Fragments: contiguous runs of units (embeddings, blocks, final LayerNorm), cut on
 * the whole model where the running size passes p/F of it (F fragments), so that every layout (any
 * --tp, --pp) syncs the same layers at the same steps; a part's fragment p is the
 * units it holds of the whole model's fragment p (a contiguous range of its buffer,
 * possibly empty). */
static void plan_fragments(atoll_diloco *d) {
  const atoll_layout *W = d->cfg.whole ? d->cfg.whole : d->lay;
  int frags = d->cfg.fragments, layers = W->shape.layers;
  size_t total = W->nparams;
  int p = 0, *last_unit = d->merge_due; /* scratch: merge_due is zeroed below */
  for (int u = -1; u <= layers; u++) {
    size_t b, e;
    atoll_layout_unit(W, u, &b, &e);
    int units_left = layers - u; /* units after this one */
    int frags_left = frags - 1 - p;
    if (frags_left > 0 && (e * (size_t)frags >= total * (size_t)(p + 1) || units_left <= frags_left))
      last_unit[p++] = u;
  }
  last_unit[frags - 1] = layers;
  d->frag_begin[0] = 0;
  for (p = 0; p < frags; p++) {
    size_t b, e;
    atoll_layout_unit(d->lay, last_unit[p], &b, &e);
    d->frag_end[p] = p == frags - 1 ? d->lay->nparams : e;
    if (p + 1 < frags) d->frag_begin[p + 1] = d->frag_end[p];
  }
  memset(d->merge_due, 0, sizeof(int) * (size_t)frags);
}

static size_t island_slice_lo(const atoll_diloco *d, int j) {
  return atoll_dp_shard_start(d->lay->nparams, d->mesh->dp, j);
}

static const atoll_strategy_ops DILOCO_OPS;

int atoll_diloco_check(const atoll_diloco_config *cfg, int layers, atoll_err *err) {
  int units = layers + 2;
  if (cfg->sync_every < 1) return atoll_fail(err, "--sync-every: must be at least 1, got %d", cfg->sync_every);
  if (cfg->fragments < 1 || cfg->fragments > units)
    return atoll_fail(err, "--fragments %d: must be in [1, %d] (layers + embeddings + final LayerNorm)",
                      cfg->fragments, units);
  if (cfg->overlap < 0 || cfg->overlap * cfg->fragments >= cfg->sync_every)
    return atoll_fail(err, "--overlap %d: must be >= 0 and below sync-every / fragments (%d / %d)",
                      cfg->overlap, cfg->sync_every, cfg->fragments);
  return 0;
}

int atoll_diloco_create(atoll_diloco **out, const atoll_diloco_config *cfg, atoll_mesh *mesh,
                        const atoll_layout *lay, float *params, atoll_err *err) {
  *out = NULL;
  if (atoll_diloco_check(cfg, lay->shape.layers, err)) return -1;
  atoll_diloco *d = calloc(1, sizeof *d);
  if (!d) return atoll_fail(err, "out of memory");
  d->base.ops = &DILOCO_OPS;
  d->cfg = *cfg;
  if (d->cfg.outer_lr < 0) d->cfg.outer_lr = atoll_diloco_default_outer_lr(d->cfg.sync_every);
  d->mesh = mesh;
  d->lay = lay;
  d->params = cfg->host_copy ? cfg->host_copy : params;
  d->device_params = cfg->host_copy ? params : NULL;
  int dp = mesh->dp, islands = mesh->islands;
  d->slice_begin = island_slice_lo(d, mesh->dp_rank);
  d->slice_end = island_slice_lo(d, mesh->dp_rank + 1);
  size_t n = d->slice_end - d->slice_begin, piece = (n + islands - 1) / islands + 1;
  size_t qpiece = atoll_q_bytes(cfg->dtype, piece);
  d->global = malloc(sizeof(float) * (n + 1));
  d->momentum = calloc(n + 1, sizeof(float));
  d->delta = malloc(sizeof(float) * (n + 1));
  d->sum = malloc(sizeof(float) * (piece + 1));
  d->decoded = malloc(sizeof(float) * (piece + 1));
  d->send = malloc(qpiece * (size_t)islands + 1);
  d->recv = malloc(qpiece * (size_t)islands + 1);
  d->counts = calloc((size_t)dp, sizeof(size_t));
  d->hashes = calloc((size_t)islands, sizeof(uint64_t));
  d->bad_at = SIZE_MAX;
  d->verdicts = calloc((size_t)atoll_comm_size(mesh->world) * 3, sizeof(int64_t));
  size_t tie_n = mesh->tie_comm && lay->t_wte >= 0 ? lay->tensors[lay->t_wte].numel : 0;
  d->tie_global = malloc(sizeof(float) * (tie_n + 1));
  d->tie_momentum = malloc(sizeof(float) * (tie_n + 1));
  d->frag_begin = calloc((size_t)cfg->fragments, sizeof(size_t));
  d->frag_end = calloc((size_t)cfg->fragments, sizeof(size_t));
  d->merge_due = calloc((size_t)cfg->fragments, sizeof(int));
  d->pending_wan = calloc((size_t)cfg->fragments, sizeof(double));
  d->pending_clock = calloc((size_t)cfg->fragments, sizeof(double));
  if (!d->global || !d->momentum || !d->delta || !d->sum || !d->decoded || !d->send || !d->recv || !d->counts ||
      !d->frag_begin || !d->frag_end || !d->merge_due || !d->pending_wan || !d->pending_clock || !d->hashes ||
      !d->verdicts || !d->tie_global || !d->tie_momentum) {
    atoll_diloco_destroy(d);
    return atoll_fail(err, "out of memory for the outer state");
  }
  plan_fragments(d);
  if (cfg->link && cfg->link->bind) cfg->link->bind(cfg->link->ctx, d->global, d->momentum, n);
  *out = d;
  return 0;
}

void atoll_diloco_destroy(atoll_diloco *d) {
  if (!d) return;
  free(d->global);
  free(d->momentum);
  free(d->delta);
  free(d->sum);
  free(d->decoded);
  free(d->send);
  free(d->recv);
  free(d->counts);
  free(d->frag_begin);
  free(d->frag_end);
  free(d->merge_due);
  free(d->pending_wan);
  free(d->pending_clock);
  free(d->hashes);
  free(d->verdicts);
  free(d->tie_global);
  free(d->tie_momentum);
  free(d);
}

void atoll_diloco_add_compute(atoll_diloco *d, double seconds) { d->compute_clock += seconds; }

void atoll_diloco_reset_global(atoll_diloco *d) {
  size_t n = d->slice_end - d->slice_begin;
  memcpy(d->global, d->params + d->slice_begin, sizeof(float) * n);
  memset(d->momentum, 0, sizeof(float) * n);
}

static int fragment_offset(const atoll_diloco *d, int f) {
  return (int)((long)f * d->cfg.sync_every / d->cfg.fragments);
}

void atoll_diloco_set_first_step(atoll_diloco *d, int step) { d->first_step = d->contributed_to = step; }

void atoll_diloco_resume_at(atoll_diloco *d, int step) {
  int H = d->cfg.sync_every;
  d->contributed_to = step;
  for (int f = 0; f < d->cfg.fragments; f++) {
    int off = fragment_offset(d, f);
    int last = step - ((step - off) % H + H) % H; /* latest s <= step with s mod H = off */
    /* a sync happens after a step the run took: none at or before its first step */
    int synced = last > d->first_step;
    d->merge_due[f] = (d->cfg.overlap > 0 && synced && last + d->cfg.overlap > step) ? last + d->cfg.overlap : 0;
  }
}

void atoll_diloco_slice(const atoll_diloco *d, size_t *begin, size_t *end) {
  *begin = d->slice_begin;
  *end = d->slice_end;
}
float *atoll_diloco_global(atoll_diloco *d) { return d->global; }
float *atoll_diloco_momentum(atoll_diloco *d) { return d->momentum; }
atoll_diloco_stats atoll_diloco_get_stats(const atoll_diloco *d) { return d->stats; }

/* Makes the island's weights on [b, e) whole on every island rank after each rank
 * changed its own slice (not needed when the island shards its weights). */
static void island_gather(atoll_diloco *d, size_t b, size_t e) {
  if (d->cfg.stage3 || d->mesh->dp == 1 || e <= b) return;
  atoll_shard_pieces(d->lay->nparams, d->mesh->dp, b, e, d->counts);
  atoll_allgather(d->mesh->dp_comm, d->params + b, e - b, d->counts);
}

/* Mean over islands of x[0, n), in place: compressed all-to-all of pieces, decode and
 * sum in island order, compressed all-gather of the sums. x is the flat buffer's
 * values from `at` on. A NaN or Inf in this rank's x is noted (bad_at) and sent all
 * the same, so that every rank finishes the exchange; check_sync stops the run. */
static void islands_mean(atoll_diloco *d, float *x, size_t n, size_t at) {
  int islands = d->mesh->islands, k = d->mesh->island;
  atoll_qtype q = d->cfg.dtype;
  size_t piece = (n + islands - 1) / islands;
  size_t qb = atoll_q_bytes(q, piece);
  memset(d->send, 0, qb * (size_t)islands);
  for (int c = 0; c < islands; c++) {
    size_t lo = (size_t)c * piece < n ? (size_t)c * piece : n, hi = lo + piece < n ? lo + piece : n;
    size_t bad;
    if (atoll_q_encode_checked(q, x + lo, hi - lo, d->send + qb * (size_t)c, &bad) && d->bad_at == SIZE_MAX)
      d->bad_at = at + lo + bad;
  }
  atoll_alltoall_bytes(d->mesh->cross, d->send, d->recv, qb);
  /* my piece k from every island, summed in island order */
  size_t lo = (size_t)k * piece < n ? (size_t)k * piece : n, hi = lo + piece < n ? lo + piece : n, len = hi - lo;
  memset(d->sum, 0, sizeof(float) * (len + 1));
  for (int i = 0; i < islands; i++) {
    atoll_q_decode(q, d->recv + qb * (size_t)i, len, d->decoded);
    for (size_t t = 0; t < len; t++) d->sum[t] += d->decoded[t];
  }
  for (size_t t = 0; t < len; t++) d->sum[t] /= (float)islands;
  atoll_q_encode(q, d->sum, len, d->send);
  atoll_allgather_blocks(d->mesh->cross, d->send, d->recv, qb);
  for (int c = 0; c < islands; c++) {
    size_t clo = (size_t)c * piece < n ? (size_t)c * piece : n, chi = clo + piece < n ? clo + piece : n;
    atoll_q_decode(q, d->recv + qb * (size_t)c, chi - clo, x + clo);
  }
}

/* The modelled WAN time of this rank's inter-island sends (two phases). */
static double wan_time(const atoll_diloco *d, uint64_t bytes) {
  if (d->cfg.wan_gbps <= 0) return 0;
  return 2 * d->cfg.wan_latency_ms * 1e-3 + (double)bytes * 8 / (d->cfg.wan_gbps * 1e9);
}

/* Every island must hold the same global weights and have sent finite outer
 * gradients. Each rank sees only its own slice, so every rank's verdict is gathered
 * over the world: all ranks stop together, with the same message. */
static int check_sync(atoll_diloco *d, int step, atoll_err *err) {
  uint64_t mine = atoll_hash_floats(d->global, d->slice_end - d->slice_begin), *all = d->hashes;
  atoll_allgather_bytes(d->mesh->cross, &mine, all, sizeof mine);
  int64_t v[3] = {-1, d->bad_at == SIZE_MAX ? -1 : (int64_t)d->bad_at, d->mesh->island};
  for (int i = 0; i < d->mesh->islands; i++)
    if (all[i] != all[0]) v[0] = i;
  d->bad_at = SIZE_MAX;
  atoll_allgather_bytes(d->mesh->world, v, d->verdicts, sizeof v);
  int n = atoll_comm_size(d->mesh->world), drift = -1;
  for (int r = 0; r < n; r++) {
    const int64_t *w = d->verdicts + 3 * (size_t)r;
    if (w[1] >= 0)
      return atoll_fail(err, "step %d: rank %d (island %d): the outer gradient holds NaN or Inf at parameter %lld of its part (outer dtype %s); stopping",
                        step, r, (int)w[2], (long long)w[1], atoll_qtype_name(d->cfg.dtype));
    if (w[0] > drift) drift = (int)w[0];
  }
  if (drift >= 0)
    return atoll_fail(err, "step %d: island %d holds different global weights than island 0 (hash mismatch at the outer sync); stopping",
                      step, drift);
  return 0;
}

/* Tensor parallelism: replicated tensors (LayerNorms, biases of the row-parallel
 * products, wpe) sit in every tensor-parallel rank's part, but a compressed outer
 * gradient is scaled per block of its neighbours, which differ from rank to rank; so
 * tensor-parallel rank 0's outer step is the one kept, for g and u of [b, e). */
static void keep_replicas_equal(atoll_diloco *d, size_t b, size_t e) {
  if (d->mesh->tp == 1) return;
  for (int i = 0; i < d->lay->ntensors; i++) {
    const atoll_tensor *t = &d->lay->tensors[i];
    size_t lo, hi;
    if (t->split != ATOLL_SPLIT_NONE || !atoll_tensor_clip(t, b, e, &lo, &hi)) continue;
    size_t o = lo - d->slice_begin;
    atoll_broadcast(d->mesh->tp_comm, d->global + o, (hi - lo) * sizeof(float), 0);
    atoll_broadcast(d->mesh->tp_comm, d->momentum + o, (hi - lo) * sizeof(float), 0);
  }
}

/* Pipeline parallelism: the first and last pp_stage both hold wte (embedding and tied
 * LM head), in buffers of different sizes, so a compressed outer gradient is cut into
 * blocks differently at the two ends; the first pp_stage's outer step on wte is the one
 * kept (its data-parallel ranks assemble wte's g and u, and send them over the tie). */
static void keep_tie_equal(atoll_diloco *d, int f) {
  atoll_comm *tie = d->mesh->tie_comm;
  if (!tie || d->lay->t_wte < 0) return;
  const atoll_tensor *w = &d->lay->tensors[d->lay->t_wte];
  size_t wb = w->offset, we = w->offset + w->numel, n = w->numel;
  if (d->frag_begin[f] > wb || d->frag_end[f] < we) return; /* wte syncs with fragment 0 */
  float *g = d->tie_global, *u = d->tie_momentum;
  atoll_shard_pieces(d->lay->nparams, d->mesh->dp, wb, we, d->counts);
  size_t lo = d->slice_begin > wb ? d->slice_begin : wb, hi = d->slice_end < we ? d->slice_end : we;
  if (d->lay->first_stage) {
    if (hi > lo) {
      memcpy(g + (lo - wb), d->global + (lo - d->slice_begin), sizeof(float) * (hi - lo));
      memcpy(u + (lo - wb), d->momentum + (lo - d->slice_begin), sizeof(float) * (hi - lo));
    }
    atoll_allgather(d->mesh->dp_comm, g, n, d->counts);
    atoll_allgather(d->mesh->dp_comm, u, n, d->counts);
  }
  atoll_broadcast(tie, g, sizeof(float) * n, 0); /* tie rank 0 is the first pp_stage */
  atoll_broadcast(tie, u, sizeof(float) * n, 0);
  if (!d->lay->first_stage && hi > lo) {
    memcpy(d->global + (lo - d->slice_begin), g + (lo - wb), sizeof(float) * (hi - lo));
    memcpy(d->momentum + (lo - d->slice_begin), u + (lo - wb), sizeof(float) * (hi - lo));
  }
}

/* Outer step on fragment f's part of this rank's slice. */
static int sync_fragment(atoll_diloco *d, int f, int step, atoll_err *err) {
  size_t b = d->frag_begin[f] > d->slice_begin ? d->frag_begin[f] : d->slice_begin;
  size_t e = d->frag_end[f] < d->slice_end ? d->frag_end[f] : d->slice_end;
  size_t n = e > b ? e - b : 0, o = b - d->slice_begin;
  float *g = d->global + o, *u = d->momentum + o, *w = d->params + b, *delta = d->delta + o;
  double t0 = atoll_seconds();
  atoll_comm_stats before = atoll_comm_get_stats(d->mesh->cross);
  for (size_t i = 0; i < n; i++) delta[i] = g[i] - w[i];
  const atoll_outer_link *link = d->cfg.link;
  uint64_t link_before = link ? link->bytes_sent(link->ctx) : 0;
  if (link) {
    size_t bad;
    int rc;
    for (;;) { /* joining (2 or 3): the island's ranks join together or ask again together */
      rc = link->mean(link->ctx, d->cfg.dtype, delta, n, step, f, &bad, err);
      if (rc < 0) return -1;
      if (rc != 2 && rc != 3) break;
      int64_t failed = rc == 3, any = 0;
      atoll_allgather_bytes(d->mesh->world, &failed, d->verdicts, sizeof failed);
      for (int r = 0; r < atoll_comm_size(d->mesh->world); r++) any |= d->verdicts[r];
      if (!any) break;
      if (rc == 2 && link->unjoin) link->unjoin(link->ctx);
    }
    if (rc == 2) { /* this island was behind: it adopted the committed global weights and momentum */
      int at = link->joined_step(link->ctx);
      memcpy(d->params + d->slice_begin, d->global, sizeof(float) * (d->slice_end - d->slice_begin));
      island_gather(d, 0, d->lay->nparams);
      atoll_diloco_resume_at(d, at);
      d->jump_to = at;
      return 2;
    }
    if (bad != SIZE_MAX && d->bad_at == SIZE_MAX) d->bad_at = b + bad;
  } else if (d->mesh->islands > 1) {
    islands_mean(d, delta, n, b);
  }
  float lr = d->cfg.outer_lr, mu = d->cfg.outer_momentum;
  for (size_t i = 0; i < n; i++) {
    u[i] = mu * u[i] + delta[i];
    g[i] -= lr * (d->cfg.nesterov ? delta[i] + mu * u[i] : u[i]);
  }
  if (d->cfg.dtype != ATOLL_Q_FP32) {
    keep_replicas_equal(d, b, e);
    keep_tie_equal(d, f);
  }
  atoll_comm_stats after = atoll_comm_get_stats(d->mesh->cross);
  uint64_t bytes = 0;
  for (int op = 0; op < ATOLL_OP_COUNT; op++) bytes += after.bytes_sent[op] - before.bytes_sent[op];
  if (link) bytes += link->bytes_sent(link->ctx) - link_before;
  double modelled = wan_time(d, bytes), took = atoll_seconds() - t0;
  if (d->cfg.throttle && modelled > took) {
    double rest = modelled - took;
    struct timespec ts = {(time_t)rest, (long)((rest - floor(rest)) * 1e9)};
    nanosleep(&ts, NULL);
  }
  d->stats.outer_syncs++;
  d->stats.inter_island_bytes += bytes;
  d->stats.wan_seconds += modelled;
  /* with T = 0 the exchange is charged in full; with overlap it is charged at the
   * merge, less the compute of the T steps that ran meanwhile */
  if (d->cfg.overlap == 0) d->stats.wan_exposed_seconds += modelled;
  d->pending_wan[f] = modelled;
  d->pending_clock[f] = d->compute_clock;
  d->stats.sync_seconds += atoll_seconds() - t0;
  if (d->cfg.overlap == 0) {
    memcpy(w, g, sizeof(float) * n);
    island_gather(d, d->frag_begin[f], d->frag_end[f]);
    d->stats.merges++;
  } else {
    d->merge_due[f] = step + d->cfg.overlap;
  }
  return 0;
}

/* Fragment f's outer step, synced `overlap` steps ago (or fewer, at the run's last
 * step), merged into the weights after step `step`. */
static void merge_fragment(atoll_diloco *d, int f, int step) {
  size_t b = d->frag_begin[f] > d->slice_begin ? d->frag_begin[f] : d->slice_begin;
  size_t e = d->frag_end[f] < d->slice_end ? d->frag_end[f] : d->slice_end;
  double hidden = d->compute_clock - d->pending_clock[f];
  if (d->pending_wan[f] > hidden) d->stats.wan_exposed_seconds += d->pending_wan[f] - hidden;
  float a = d->cfg.merge_alpha;
  for (size_t i = b; i < e; i++) d->params[i] = a * d->params[i] + (1.0f - a) * d->global[i - d->slice_begin];
  island_gather(d, d->frag_begin[f], d->frag_end[f]);
  int stale = step - (d->merge_due[f] - d->cfg.overlap);
  d->stats.merges++;
  d->stats.staleness_sum += (uint64_t)stale;
  if (stale > d->stats.staleness_max) d->stats.staleness_max = stale;
  d->merge_due[f] = 0;
}

/* With a device: the weights from the device to their host copy, and back. */
static void pull(atoll_diloco *d) {
  if (d->device_params) d->cfg.ops->to_host(d->params, d->device_params, sizeof(float) * d->lay->nparams);
}
static void push(atoll_diloco *d) {
  if (d->device_params) d->cfg.ops->to_device(d->device_params, d->params, sizeof(float) * d->lay->nparams);
}

/* Whether fragment f merges / syncs after step `step`. */
static int merge_now(const atoll_diloco *d, int f, int step, int last) {
  return d->merge_due[f] && (d->merge_due[f] <= step || last);
}
static int sync_now(const atoll_diloco *d, int f, int step, int last) {
  return step % d->cfg.sync_every == fragment_offset(d, f) || last;
}

/* The syncs and merges due after step `step`, on the host's weights. */
static int run_due(atoll_diloco *d, int step, int last, atoll_err *err) {
  int frags = d->cfg.fragments, synced = 0;
  for (int f = 0; f < frags; f++)
    if (merge_now(d, f, step, last)) merge_fragment(d, f, step);
  for (int f = 0; f < frags; f++) {
    if (sync_now(d, f, step, last)) {
      int rc = sync_fragment(d, f, step, err);
      if (rc < 0) return -1;
      if (rc == 2) return 0; /* joined: the loop continues from the joined step */
      if (last && d->merge_due[f]) merge_fragment(d, f, step);
      synced = 1;
    }
  }
  if (!synced) return 0;
  d->stats.contributed_steps += (uint64_t)(step - d->contributed_to);
  d->contributed_to = step;
  if (check_sync(d, step, err)) return -1;
  return d->cfg.link ? d->cfg.link->commit(d->cfg.link->ctx, step, d->global, d->slice_end - d->slice_begin, err) : 0;
}

static int work_due(const atoll_diloco *d, int step, int last) {
  for (int f = 0; f < d->cfg.fragments; f++)
    if (merge_now(d, f, step, last) || sync_now(d, f, step, last)) return 1;
  return 0;
}

int atoll_diloco_after_step(atoll_diloco *d, int step, int last, atoll_err *err) {
  if (!work_due(d, step, last)) return 0;
  pull(d);
  /* test hook: a NaN in island outer_nan_island's weights reaches its first outer gradient */
  if (d->cfg.hooks && step == d->cfg.sync_every && d->mesh->island == d->cfg.hooks->outer_nan_island &&
      d->slice_end > d->slice_begin)
    d->params[d->slice_begin] = NAN;
  int rc = run_due(d, step, last, err);
  push(d);
  return rc;
}

void atoll_diloco_swap_global(atoll_diloco *d) {
  pull(d);
  size_t n = d->slice_end - d->slice_begin;
  float *w = d->params + d->slice_begin;
  for (size_t i = 0; i < n; i++) {
    float t = w[i];
    w[i] = d->global[i];
    d->global[i] = t;
  }
  island_gather(d, 0, d->lay->nparams);
  push(d);
}

/* ------------------------------------------------------ strategy entries --- */

/* Test hook: island desync_island's copy of the global weights drifts before step 2,
 * so that the hash check at the next sync must stop the run. Only the slice of the
 * island's last data-parallel rank drifts: the ranks of the other slices see no
 * difference and must learn of it from the world's verdict. */
static void diloco_begin_step(atoll_strategy *s, int step) {
  atoll_diloco *d = (atoll_diloco *)s;
  if (d->cfg.hooks && step + 1 == 2 && d->mesh->island == d->cfg.hooks->desync_island &&
      d->mesh->dp_rank == d->mesh->dp - 1)
    d->global[0] += 1e-3f;
}

static int diloco_after_step(atoll_strategy *s, int step, int last, double compute_seconds, atoll_err *err) {
  atoll_diloco *d = (atoll_diloco *)s;
  atoll_diloco_add_compute(d, compute_seconds);
  return atoll_diloco_after_step(d, step, last, err);
}

static int diloco_swap_eval_weights(atoll_strategy *s) {
  atoll_diloco_swap_global((atoll_diloco *)s);
  return 1;
}

/* The global weights are the checkpoint's model; the outer momentum has its own file. */
static void diloco_save(atoll_strategy *s, const atoll_ckpt_io *io) {
  atoll_diloco *d = (atoll_diloco *)s;
  io->put(io->ctx, NULL, NULL, 0, d->global, d->slice_begin);
  io->put(io->ctx, "outer.safetensors", "outer_momentum.", 0, d->momentum, d->slice_begin);
}

static int diloco_load(atoll_strategy *s, const atoll_ckpt_io *io, int step, atoll_err *err) {
  atoll_diloco *d = (atoll_diloco *)s;
  if (io->get(io->ctx, "outer.safetensors", "outer_momentum.", d->momentum, d->slice_begin, d->slice_end, err) ||
      io->get(io->ctx, NULL, NULL, d->global, d->slice_begin, d->slice_end, err))
    return -1;
  atoll_diloco_resume_at(d, step);
  return 0;
}

static void diloco_destroy(atoll_strategy *s) { atoll_diloco_destroy((atoll_diloco *)s); }

static const atoll_strategy_ops DILOCO_OPS = {.name = "DiLoCo",
                                              .begin_step = diloco_begin_step,
                                              .after_step = diloco_after_step,
                                              .swap_eval_weights = diloco_swap_eval_weights,
                                              .save = diloco_save,
                                              .load = diloco_load,
                                              .destroy = diloco_destroy};

atoll_strategy *atoll_diloco_strategy(atoll_diloco *d) { return d ? &d->base : NULL; }

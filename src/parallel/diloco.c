/* DiLoCo outer synchronisation; see diloco.h for the algorithm and byte counts. */
#include "core/clock.h"
#include "core/rng.h"
#include "model/layout.h"
#include "parallel/diloco_internal.h"
#include "parallel/dp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int atoll_diloco_ended(const atoll_diloco *d, const char **why) {
  if (why) *why = d->end_err.msg;
  return d->ended;
}

double atoll_diloco_late_tokens(const atoll_diloco *d, int f) { return d->late ? d->late_tokens[f] : 0; }
void atoll_diloco_set_late_tokens(atoll_diloco *d, int f, double tokens) {
  if (d->late) d->late_tokens[f] = tokens;
}
int atoll_diloco_fragments(const atoll_diloco *d) { return d->cfg.fragments; }

void atoll_diloco_skipped(atoll_diloco *d) { d->phase_skipped++; }
int atoll_diloco_phase_skipped(const atoll_diloco *d) { return d->phase_skipped; }
void atoll_diloco_set_phase_skipped(atoll_diloco *d, int steps) { d->phase_skipped = steps; }

static int any_late(const atoll_diloco *d) {
  for (int f = 0; d->late && f < d->cfg.fragments; f++)
    if (d->late_tokens[f] > 0) return 1;
  return 0;
}

int atoll_diloco_joins(const atoll_diloco *d, int *exchange_step) {
  *exchange_step = d->join_exchange;
  return d->joins;
}

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

/* Tells an outer link whether an exchange is in flight (the link is the exchange's then). */
static void link_busy(atoll_diloco *d, int on) {
  if (d->cfg.link && d->cfg.link->busy) d->cfg.link->busy(d->cfg.link->ctx, on);
}

/* With overlap, the exchange runs on a thread of its own, with duplicates of the mesh's
 * communicators (collective, in the same order on every rank). */
static int background_comms(atoll_diloco *d, atoll_err *err) {
  if (!atoll_comm_threads_ok())
    return atoll_fail(err, "--overlap %d: the outer exchange runs on a thread of its own, which needs an MPI started with MPI_THREAD_MULTIPLE; this one was started with less",
                      d->cfg.overlap);
  diloco_comms *k = &d->job.comms;
  const diloco_comms *o = &d->own;
  if (atoll_comm_dup_background(o->world, "outer-world", &k->world, err) ||
      atoll_comm_dup_background(o->cross, "outer-cross", &k->cross, err) ||
      atoll_comm_dup_background(o->dp, "outer-data", &k->dp, err) ||
      atoll_comm_dup_background(o->tp, "outer-tensor", &k->tp, err) ||
      (o->tie && atoll_comm_dup_background(o->tie, "outer-tie", &k->tie, err)))
    return -1;
  return 0;
}

int atoll_diloco_check(const atoll_diloco_config *cfg, int layers, atoll_err *err) {
  int units = layers + 2;
  if (cfg->sync_every < 1) return atoll_fail(err, "--sync-every: must be at least 1, got %d", cfg->sync_every);
  if (cfg->fragments < 1 || cfg->fragments > units)
    return atoll_fail(err, "--fragments %d: must be in [1, %d] (layers + embeddings + final LayerNorm)",
                      cfg->fragments, units);
  if (cfg->overlap < 0 || cfg->overlap * cfg->fragments >= cfg->sync_every)
    return atoll_fail(err, "--overlap %d: must be >= 0 and below sync-every / fragments (%d / %d)",
                      cfg->overlap, cfg->sync_every, cfg->fragments);
  if (cfg->async && cfg->overlap < 1)
    return atoll_fail(err, "--outer-mode async: needs --overlap T >= 1 (the exchange runs beside the inner steps and merges once it is done, T steps after its sync at the earliest)");
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
  d->job.frags = calloc((size_t)cfg->fragments, sizeof(int));
  d->late = cfg->link ? malloc(sizeof(float) * (n + 1)) : NULL;
  d->late_tokens = calloc((size_t)cfg->fragments, sizeof(double));
  d->snapshot = cfg->async ? malloc(sizeof(float) * (n + 1)) : NULL;
  if (!d->global || !d->momentum || !d->delta || !d->sum || !d->decoded || !d->send || !d->recv || !d->counts ||
      !d->frag_begin || !d->frag_end || !d->merge_due || !d->pending_wan || !d->pending_clock || !d->hashes ||
      !d->verdicts || !d->tie_global || !d->tie_momentum || !d->job.frags || (cfg->link && !d->late) || !d->late_tokens ||
      (cfg->async && !d->snapshot)) {
    atoll_diloco_destroy(d);
    return atoll_fail(err, "out of memory for the outer state");
  }
  plan_fragments(d);
  d->own = (diloco_comms){mesh->world, mesh->cross, mesh->dp_comm, mesh->tp_comm, mesh->tie_comm};
  if (cfg->overlap > 0 && background_comms(d, err)) {
    atoll_diloco_destroy(d);
    return -1;
  }
  if (cfg->link && cfg->link->bind) cfg->link->bind(cfg->link->ctx, d->global, d->momentum, n);
  *out = d;
  return 0;
}

void atoll_diloco_destroy(atoll_diloco *d) {
  if (!d) return;
  atoll_err ignored;
  if (d->job.running) {
    atoll_diloco_job_join(d, &ignored);
    link_busy(d, 0);
  }
  diloco_comms *k = &d->job.comms;
  atoll_comm *dups[] = {k->world, k->cross, k->dp, k->tp, k->tie};
  for (int i = 0; i < 5; i++) atoll_comm_free(dups[i]);
  free(d->job.frags);
  free(d->global);
  free(d->momentum);
  free(d->delta);
  free(d->late);
  free(d->late_tokens);
  free(d->snapshot);
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

int atoll_diloco_fragment_offset(const atoll_diloco *d, int f) {
  return (int)((long)f * d->cfg.sync_every / d->cfg.fragments);
}

void atoll_diloco_set_first_step(atoll_diloco *d, int step) { d->first_step = d->contributed_to = step; }

void atoll_diloco_resume_at(atoll_diloco *d, int step) {
  int H = d->cfg.sync_every;
  d->contributed_to = step;
  for (int f = 0; f < d->cfg.fragments; f++) {
    int off = atoll_diloco_fragment_offset(d, f);
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

/* The outer gradient of fragment f on this rank's slice: global - weights, into delta. */
static void outer_delta(atoll_diloco *d, int f) {
  size_t b, e;
  atoll_diloco_fragment_range(d, f, &b, &e);
  size_t o = b - d->slice_begin;
  for (size_t i = 0; i < e - b; i++) d->delta[o + i] = d->global[o + i] - d->params[b + i];
}

/* The island was behind and its exchange adopted the committed global weights and
 * momentum instead: they become its weights, and the loop continues from their step. */
static void adopt_joined(atoll_diloco *d) {
  int at = d->cfg.link->joined_step(d->cfg.link->ctx);
  d->phase_skipped = 0; /* a new phase begins at the joined step */
  memcpy(d->params + d->slice_begin, d->global, sizeof(float) * (d->slice_end - d->slice_begin));
  island_gather(d, 0, d->lay->nparams);
  atoll_diloco_resume_at(d, at);
  d->jump_to = at;
}

/* In the training thread, after the exchange of step `step` (fragments frags[0, n))
 * returned rc: a join is adopted; else the steps are counted as contributed and,
 * without overlap, the new global fragments become the weights at once. */
static int exchange_done(atoll_diloco *d, int step, const int *frags, int n, int rc, const atoll_err *err) {
  if (rc < 0) return -1;
  if (rc >= ATOLL_OUTER_RUN_ENDED) { /* no exchange comes: the weights go on as they are, the loop stops */
    d->ended = rc;
    d->end_err = *err;
    return 0;
  }
  if (rc == 2) {
    adopt_joined(d);
    d->joins++, d->join_exchange = step; /* (an open run's data units: island_units.c) */
    return 0;
  }
  int took = step - d->contributed_to - d->sync_skipped;
  d->stats.contributed_steps += (uint64_t)(took > 0 ? took : 0);
  d->contributed_to = step;
  if (d->cfg.overlap > 0) return 0;
  for (int i = 0; i < n; i++) {
    size_t b, e;
    atoll_diloco_fragment_range(d, frags[i], &b, &e);
    memcpy(d->params + b, d->global + (b - d->slice_begin), sizeof(float) * (e - b));
    island_gather(d, d->frag_begin[frags[i]], d->frag_end[frags[i]]);
    d->stats.merges++;
  }
  return 0;
}

/* Waits for the exchange in the background, if one is in flight, and takes its result. */
static int settle(atoll_diloco *d, atoll_err *err) {
  if (!d->job.running) return 0;
  double t0 = atoll_seconds();
  int rc = atoll_diloco_job_join(d, err);
  d->stats.exchange_wait_seconds += atoll_seconds() - t0;
  link_busy(d, 0);
  return exchange_done(d, d->job.step, d->job.frags, d->job.nfrags, rc, err);
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
  d->stats.staleness_last = stale;
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

/* --outer-mode async: the merges a settle made due (the exchange was done after their
 * step), at once, so that a checkpoint holds them as atoll_diloco_resume_at expects. */
static void merge_overdue(atoll_diloco *d) {
  int step = atomic_load(&d->steps_done);
  for (int f = 0; d->cfg.async && !d->jump_to && !d->ended && f < d->cfg.fragments; f++)
    if (d->merge_due[f] && d->merge_due[f] <= step) merge_fragment(d, f, step);
}

/* A settle outside after_step (evaluation, a checkpoint): a failure is kept for the
 * next after_step or settle to report. */
static void settle_late(atoll_diloco *d) {
  if (!d->job.running) return;
  pull(d);
  if (settle(d, &d->err_late)) d->failed = 1;
  else merge_overdue(d);
  push(d);
}

/* Whether fragment f merges / syncs after step `step`. */
static int merge_now(const atoll_diloco *d, int f, int step, int last) {
  return d->merge_due[f] && (d->merge_due[f] <= step || last);
}
static int sync_now(const atoll_diloco *d, int f, int step, int last) {
  return step % d->cfg.sync_every == atoll_diloco_fragment_offset(d, f) || last;
}

/* The syncs and merges due after step `step`, on the host's weights: the exchange in
 * flight first (its fragments merge now, or the next sync needs its buffers), then the
 * merges due, then the syncs: in the background with overlap (merged T steps later),
 * else here. The run's last step syncs and merges everything here. */
static int run_due(atoll_diloco *d, int step, int last, atoll_err *err) {
  if (settle(d, err)) return -1;
  if (d->jump_to || d->ended) return 0; /* joined: the loop continues from the joined step; or it stops */
  int frags = d->cfg.fragments, n = 0, *due = d->job.frags;
  for (int f = 0; f < frags; f++)
    if (merge_now(d, f, step, last)) merge_fragment(d, f, step);
  for (int f = 0; f < frags; f++)
    if (sync_now(d, f, step, last)) due[n++] = f;
  if (n == 0) return 0;
  d->sync_skipped = d->phase_skipped; /* (the exchange's: the next phase counts anew) */
  d->phase_skipped = 0;
  for (int i = 0; i < n; i++) {
    outer_delta(d, due[i]);
    d->pending_clock[due[i]] = d->compute_clock;
    if (d->cfg.overlap > 0) d->merge_due[due[i]] = step + d->cfg.overlap;
  }
  if (d->cfg.overlap > 0 && !last) {
    d->job.step = step, d->job.nfrags = n;
    if (d->snapshot) memcpy(d->snapshot, d->global, sizeof(float) * (d->slice_end - d->slice_begin));
    link_busy(d, 1);
    atoll_diloco_job_start(d);
    return 0;
  }
  double t0 = atoll_seconds();
  int rc = atoll_diloco_exchange(d, &d->own, step, due, n, &d->stats, err);
  d->stats.exchange_wait_seconds += atoll_seconds() - t0;
  if (exchange_done(d, step, due, n, rc, err)) return -1;
  if (rc == 2 || d->ended) return 0;
  for (int i = 0; i < n; i++) /* the last step, with overlap: merged at once */
    if (d->merge_due[due[i]]) merge_fragment(d, due[i], step);
  return 0;
}

int atoll_diloco_next_sync(const atoll_diloco *d, int step, int steps) {
  for (int s = step; s < steps; s++)
    for (int f = 0; f < d->cfg.fragments; f++)
      if (s > d->first_step && sync_now(d, f, s, 0)) return s;
  return steps;
}

static int work_due(const atoll_diloco *d, int step, int last) {
  for (int f = 0; f < d->cfg.fragments; f++)
    if (merge_now(d, f, step, last) || sync_now(d, f, step, last)) return 1;
  return 0;
}

/* --outer-mode async: the exchange in flight is not waited for while nothing needs it
 * (no sync due, not the last step): its merge comes at the first step at which it is
 * done on every rank (the ranks merge together: the merge's gathers are collective, and
 * an island's parts stay of one age). */
static int carries_on(const atoll_diloco *d, int step, int last) {
  if (!d->cfg.async || !d->job.running || last) return 0;
  for (int f = 0; f < d->cfg.fragments; f++)
    if (sync_now(d, f, step, 0)) return 0;
  int waiting = !atomic_load(&d->job.done);
  if (atoll_comm_size(d->own.world) > 1) waiting = atoll_allreduce_sum_double(d->own.world, waiting) > 0;
  return waiting;
}

int atoll_diloco_after_step(atoll_diloco *d, int step, int last, atoll_err *err) {
  atomic_store(&d->steps_done, step);
  if (d->failed) {
    *err = d->err_late;
    return -1;
  }
  if (!work_due(d, step, last) || carries_on(d, step, last)) return 0;
  pull(d);
  /* test hook: a NaN in island outer_nan_island's weights reaches its first outer gradient */
  if (d->cfg.hooks && step == d->cfg.sync_every && d->mesh->island == d->cfg.hooks->outer_nan_island &&
      d->slice_end > d->slice_begin)
    d->params[d->slice_begin] = NAN;
  int rc = run_due(d, step, last, err);
  push(d);
  return rc;
}

/* With --outer-mode async an evaluation while an exchange is in flight does not wait
 * for it: it sees the global weights the exchange started from (the snapshot taken at
 * its sync), on every rank alike; the swap back uses the buffer the first swap took. */
void atoll_diloco_swap_global(atoll_diloco *d) {
  float *with = d->swapped;
  if (!with) {
    if (d->cfg.async && d->job.running) {
      with = d->snapshot;
    } else {
      settle_late(d);
      with = d->global;
    }
  }
  d->swapped = d->swapped ? NULL : with;
  pull(d);
  size_t n = d->slice_end - d->slice_begin;
  float *w = d->params + d->slice_begin;
  for (size_t i = 0; i < n; i++) {
    float t = w[i];
    w[i] = with[i];
    with[i] = t;
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

/* The global weights are the checkpoint's model; the outer momentum has its own file,
 * and a kept late contribution's outer gradient too (late.safetensors; its weights in
 * tokens are in state.json, atoll_diloco_late_tokens): a stop and resume keeps it. */
static void diloco_save(atoll_strategy *s, const atoll_ckpt_io *io) {
  atoll_diloco *d = (atoll_diloco *)s;
  settle_late(d); /* (the loop settled already: see diloco_settle) */
  io->put(io->ctx, NULL, NULL, 0, d->global, d->slice_begin);
  io->put(io->ctx, "outer.safetensors", "outer_momentum.", 0, d->momentum, d->slice_begin);
  if (any_late(d)) io->put(io->ctx, "late.safetensors", "late_gradient.", 0, d->late, d->slice_begin);
}

static int diloco_load(atoll_strategy *s, const atoll_ckpt_io *io, int step, atoll_err *err) {
  atoll_diloco *d = (atoll_diloco *)s;
  if (io->get(io->ctx, "outer.safetensors", "outer_momentum.", d->momentum, d->slice_begin, d->slice_end, err) ||
      io->get(io->ctx, NULL, NULL, d->global, d->slice_begin, d->slice_end, err) ||
      (any_late(d) && io->get(io->ctx, "late.safetensors", "late_gradient.", d->late, d->slice_begin, d->slice_end, err)))
    return -1;
  atoll_diloco_resume_at(d, step);
  return 0;
}


int atoll_diloco_settle(atoll_diloco *d, atoll_err *err) {
  if (d->failed) {
    *err = d->err_late;
    return -1;
  }
  if (!d->job.running) return 0;
  pull(d);
  int rc = settle(d, err);
  if (rc == 0) merge_overdue(d);
  push(d);
  return rc;
}

static int diloco_settle(atoll_strategy *s, atoll_err *err) { return atoll_diloco_settle((atoll_diloco *)s, err); }

static void diloco_destroy(atoll_strategy *s) { atoll_diloco_destroy((atoll_diloco *)s); }

static const atoll_strategy_ops DILOCO_OPS = {.name = "DiLoCo",
                                              .begin_step = diloco_begin_step,
                                              .after_step = diloco_after_step,
                                              .swap_eval_weights = diloco_swap_eval_weights,
                                              .settle = diloco_settle,
                                              .save = diloco_save,
                                              .load = diloco_load,
                                              .destroy = diloco_destroy};

atoll_strategy *atoll_diloco_strategy(atoll_diloco *d) { return d ? &d->base : NULL; }

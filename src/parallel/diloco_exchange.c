/* DiLoCo's outer exchange of one step (diloco_internal.h), in the training thread or,
 * with --overlap, on a thread of its own while the island keeps taking inner steps.
 * It reads the outer gradients in delta and writes the global weights and momentum;
 * it never touches the island's weights, which the training thread owns. */
#include "core/clock.h"
#include "core/rng.h"
#include "parallel/diloco_internal.h"
#include "parallel/dp.h"

#include <math.h>
#include <stdlib.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

void atoll_diloco_fragment_range(const atoll_diloco *d, int f, size_t *b, size_t *e) {
  *b = d->frag_begin[f] > d->slice_begin ? d->frag_begin[f] : d->slice_begin;
  *e = d->frag_end[f] < d->slice_end ? d->frag_end[f] : d->slice_end;
  if (*e < *b) *e = *b;
}

/* Mean over islands of x[0, n), in place: compressed all-to-all of pieces, decode and
 * sum in island order, compressed all-gather of the sums. x is the flat buffer's
 * values from `at` on. A NaN or Inf in this rank's x is noted (bad_at) and sent all
 * the same, so that every rank finishes the exchange; check_sync stops the run. */
static void islands_mean(atoll_diloco *d, const diloco_comms *k, float *x, size_t n, size_t at) {
  int islands = d->mesh->islands, me = d->mesh->island;
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
  atoll_alltoall_bytes(k->cross, d->send, d->recv, qb);
  /* my piece from every island, summed in island order */
  size_t lo = (size_t)me * piece < n ? (size_t)me * piece : n, hi = lo + piece < n ? lo + piece : n, len = hi - lo;
  memset(d->sum, 0, sizeof(float) * (len + 1));
  for (int i = 0; i < islands; i++) {
    atoll_q_decode(q, d->recv + qb * (size_t)i, len, d->decoded);
    for (size_t t = 0; t < len; t++) d->sum[t] += d->decoded[t];
  }
  for (size_t t = 0; t < len; t++) d->sum[t] /= (float)islands;
  atoll_q_encode(q, d->sum, len, d->send);
  atoll_allgather_blocks(k->cross, d->send, d->recv, qb);
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
static int check_sync(atoll_diloco *d, const diloco_comms *k, int step, atoll_err *err) {
  uint64_t mine = atoll_hash_floats(d->global, d->slice_end - d->slice_begin), *all = d->hashes;
  atoll_allgather_bytes(k->cross, &mine, all, sizeof mine);
  int64_t v[3] = {-1, d->bad_at == SIZE_MAX ? -1 : (int64_t)d->bad_at, d->mesh->island};
  for (int i = 0; i < d->mesh->islands; i++)
    if (all[i] != all[0]) v[0] = i;
  d->bad_at = SIZE_MAX;
  atoll_allgather_bytes(k->world, v, d->verdicts, sizeof v);
  int n = atoll_comm_size(k->world), drift = -1;
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
static void keep_replicas_equal(atoll_diloco *d, const diloco_comms *k, size_t b, size_t e) {
  if (d->mesh->tp == 1) return;
  for (int i = 0; i < d->lay->ntensors; i++) {
    const atoll_tensor *t = &d->lay->tensors[i];
    size_t lo, hi;
    if (t->split != ATOLL_SPLIT_NONE || !atoll_tensor_clip(t, b, e, &lo, &hi)) continue;
    size_t o = lo - d->slice_begin;
    atoll_broadcast(k->tp, d->global + o, (hi - lo) * sizeof(float), 0);
    atoll_broadcast(k->tp, d->momentum + o, (hi - lo) * sizeof(float), 0);
  }
}

/* Pipeline parallelism: the first and last pp_stage both hold wte (embedding and tied
 * LM head), in buffers of different sizes, so a compressed outer gradient is cut into
 * blocks differently at the two ends; the first pp_stage's outer step on wte is the one
 * kept (its data-parallel ranks assemble wte's g and u, and send them over the tie). */
static void keep_tie_equal(atoll_diloco *d, const diloco_comms *k, int f) {
  if (!k->tie || d->lay->t_wte < 0) return;
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
    atoll_allgather(k->dp, g, n, d->counts);
    atoll_allgather(k->dp, u, n, d->counts);
  }
  atoll_broadcast(k->tie, g, sizeof(float) * n, 0); /* tie rank 0 is the first pp_stage */
  atoll_broadcast(k->tie, u, sizeof(float) * n, 0);
  if (!d->lay->first_stage && hi > lo) {
    memcpy(d->global + (lo - d->slice_begin), g + (lo - wb), sizeof(float) * (hi - lo));
    memcpy(d->momentum + (lo - d->slice_begin), u + (lo - wb), sizeof(float) * (hi - lo));
  }
}

/* The tokens fragment f's outer gradient of step `step` was trained on: the island's
 * tokens per step times the steps since the fragment's previous sync by the schedule
 * (or since step 0), less those its phase skipped (train/phase.h). Islands with other
 * batches or phases weigh in by their tokens. */
static uint64_t phase_tokens(const atoll_diloco *d, int f, int step) {
  int H = d->cfg.sync_every, since = (step - atoll_diloco_fragment_offset(d, f)) % H;
  if (since <= 0) since += H;
  if (since > step) since = step;
  since -= d->sync_skipped;
  return d->cfg.tokens_per_step * (uint64_t)(since > 0 ? since : 0);
}

/* Late contributions. An island whose exchange opened without it (the coordinator's
 * grace window ended, or it was behind) joins with the committed state instead; its
 * outer gradient g_late, of t_late tokens, is kept and merged into its next exchange of
 * that fragment with its fresh one g (t tokens), discounted by its staleness s (the
 * revisions it missed): that exchange's contribution is
 *     (t g + w g_late) / (t + w), of t + w tokens, w = t_late / (1 + s)
 * (docs/islands.md, "Late contributions"). Late again, the combined one is kept in turn,
 * so older work fades by 1 / (1 + s) per miss rather than being lost. */
static void late_fold(atoll_diloco *d, float *delta, size_t b, size_t n, int f, uint64_t *tokens) {
  double w = d->late_tokens[f];
  if (w <= 0) return;
  if (d->cfg.hooks && d->cfg.hooks->late_weight_pct) w = w * d->cfg.hooks->late_weight_pct / 100.0; /* test hook */
  const float *g = d->late + (b - d->slice_begin);
  double t = (double)*tokens, a = t / (t + w), c = w / (t + w);
  for (size_t i = 0; i < n; i++) delta[i] = (float)(a * delta[i] + c * g[i]);
  *tokens += (uint64_t)(w + 0.5);
}

static void late_keep(atoll_diloco *d, const float *delta, size_t b, size_t n, int f, uint64_t tokens, uint64_t missed) {
  memcpy(d->late + (b - d->slice_begin), delta, sizeof(float) * n);
  d->late_tokens[f] = (double)tokens / (1.0 + (double)missed);
}

/* The link's mean of delta on [b, e); the island's ranks join together or ask again
 * together (2 or 3, see link.h). */
static int link_mean(atoll_diloco *d, const diloco_comms *k, float *delta, size_t b, size_t e, int step, int f,
                     atoll_diloco_stats *st, atoll_err *err) {
  const atoll_outer_link *link = d->cfg.link;
  size_t bad;
  int rc;
  uint64_t tokens = phase_tokens(d, f, step), rev0 = link->revision ? link->revision(link->ctx) : 0;
  int folded = d->late_tokens[f] > 0;
  late_fold(d, delta, b, e - b, f, &tokens);
  for (;;) {
    rc = link->mean(link->ctx, d->cfg.dtype, delta, e - b, tokens, step, f, &bad, err);
    if (rc < 0) return -1;
    if (rc != 2 && rc != 3) break;
    int64_t failed = rc == 3, any = 0;
    atoll_allgather_bytes(k->world, &failed, d->verdicts, sizeof failed);
    for (int r = 0; r < atoll_comm_size(k->world); r++) any |= d->verdicts[r];
    if (!any) break;
    if (rc == 2 && link->unjoin) link->unjoin(link->ctx);
  }
  if (rc >= ATOLL_OUTER_RUN_ENDED) return rc; /* no exchange: a kept contribution stays kept */
  if (rc == 2) { /* joined instead: this contribution is kept for the next exchange */
    uint64_t rev1 = link->revision ? link->revision(link->ctx) : rev0;
    late_keep(d, delta, b, e - b, f, tokens, rev1 > rev0 ? rev1 - rev0 : 1);
    st->late_kept++;
    return 2;
  }
  if (folded) st->late_merged++;
  d->late_tokens[f] = 0;
  if (bad != SIZE_MAX && d->bad_at == SIZE_MAX) d->bad_at = b + bad;
  return 0;
}

/* Outer step on fragment f's part of this rank's slice, from its outer gradient in delta. */
static int exchange_fragment(atoll_diloco *d, const diloco_comms *k, int f, int step, atoll_diloco_stats *st,
                             atoll_err *err) {
  size_t b, e;
  atoll_diloco_fragment_range(d, f, &b, &e);
  size_t n = e - b, o = b - d->slice_begin;
  float *g = d->global + o, *u = d->momentum + o, *delta = d->delta + o;
  double t0 = atoll_seconds();
  atoll_comm_stats before = atoll_comm_get_stats(k->cross);
  const atoll_outer_link *link = d->cfg.link;
  uint64_t link_before = link ? link->bytes_sent(link->ctx) : 0;
  if (link) {
    int rc = link_mean(d, k, delta, b, e, step, f, st, err);
    if (rc) return rc;
  } else if (d->mesh->islands > 1) {
    islands_mean(d, k, delta, n, b);
  }
  float lr = d->cfg.outer_lr, mu = d->cfg.outer_momentum;
  for (size_t i = 0; i < n; i++) {
    u[i] = mu * u[i] + delta[i];
    g[i] -= lr * (d->cfg.nesterov ? delta[i] + mu * u[i] : u[i]);
  }
  if (d->cfg.dtype != ATOLL_Q_FP32) {
    keep_replicas_equal(d, k, b, e);
    keep_tie_equal(d, k, f);
  }
  atoll_comm_stats after = atoll_comm_get_stats(k->cross);
  uint64_t bytes = 0;
  for (int op = 0; op < ATOLL_OP_COUNT; op++) bytes += after.bytes_sent[op] - before.bytes_sent[op];
  if (link) bytes += link->bytes_sent(link->ctx) - link_before;
  double modelled = wan_time(d, bytes), took = atoll_seconds() - t0;
  if (d->cfg.throttle && modelled > took) { /* on the exchange's thread this is time the island trains on */
    double rest = modelled - took;
    struct timespec ts = {(time_t)rest, (long)((rest - floor(rest)) * 1e9)};
    nanosleep(&ts, NULL);
  }
  st->outer_syncs++;
  st->inter_island_bytes += bytes;
  st->wan_seconds += modelled;
  /* with T = 0 the modelled exchange is charged in full; with overlap it is charged at
   * the merge, less the compute of the T steps that ran meanwhile */
  if (d->cfg.overlap == 0) st->wan_exposed_seconds += modelled;
  d->pending_wan[f] = modelled;
  st->sync_seconds += atoll_seconds() - t0;
  return 0;
}

/* A step that syncs several fragments over a link (the run's last step) applies each
 * one's outer step as its mean comes in, but commits them together: when the exchange
 * ends before the commit (ATOLL_OUTER_*: a stop signal, the run ended, no donor), the
 * outer state as it was before the step is put back, so that the checkpoint saved then
 * holds the revision it names (and its kept late contributions). */
typedef struct {
  float *state;  /* global weights, then outer momentum: this rank's slice */
  double *late_tokens;
} undo;

static int undo_save(atoll_diloco *d, undo *u, atoll_err *err) {
  size_t n = d->slice_end - d->slice_begin, F = (size_t)d->cfg.fragments;
  u->state = malloc(sizeof(float) * 2 * (n ? n : 1));
  u->late_tokens = malloc(sizeof(double) * F);
  if (!u->state || !u->late_tokens) return atoll_fail(err, "out of memory keeping the outer state of a %zu-float slice", n);
  memcpy(u->state, d->global, sizeof(float) * n);
  memcpy(u->state + n, d->momentum, sizeof(float) * n);
  memcpy(u->late_tokens, d->late_tokens, sizeof(double) * F);
  return 0;
}

static void undo_apply(atoll_diloco *d, const undo *u) {
  size_t n = d->slice_end - d->slice_begin;
  memcpy(d->global, u->state, sizeof(float) * n);
  memcpy(d->momentum, u->state + n, sizeof(float) * n);
  memcpy(d->late_tokens, u->late_tokens, sizeof(double) * (size_t)d->cfg.fragments);
}

int atoll_diloco_exchange(atoll_diloco *d, const diloco_comms *k, int step, const int *frags, int nfrags,
                          atoll_diloco_stats *st, atoll_err *err) {
  undo u = {0};
  int keep = d->cfg.link && nfrags > 1;
  if (keep && undo_save(d, &u, err)) {
    free(u.state), free(u.late_tokens);
    return -1;
  }
  for (int i = 0; i < nfrags; i++) {
    int rc = exchange_fragment(d, k, frags[i], step, st, err);
    if (rc >= ATOLL_OUTER_RUN_ENDED && keep && i > 0) undo_apply(d, &u);
    if (rc) { /* -1, 2: joined (the other fragments' syncs are moot), or an ATOLL_OUTER_* end */
      free(u.state), free(u.late_tokens);
      return rc;
    }
  }
  free(u.state), free(u.late_tokens);
  if (check_sync(d, k, step, err)) return -1;
  return d->cfg.link ? d->cfg.link->commit(d->cfg.link->ctx, step, d->global, d->slice_end - d->slice_begin, err) : 0;
}

/* ------------------------------------------------------- the job's thread --- */

/* Test hook overlap_proof: the exchange of step s begins only once the training thread
 * has finished step s + T, or waits for it early (evaluation, a checkpoint): an exchange
 * run in place, in the training thread, would wait here for ever. */
static int await_overlap(atoll_diloco *d, atoll_err *err) {
  int want = d->job.step + d->cfg.overlap;
  double t0 = atoll_seconds();
  while (atomic_load(&d->steps_done) < want && !atomic_load(&d->job.joining)) {
    if (atoll_seconds() - t0 > 60)
      return atoll_fail(err, "test hook ATOLL_TEST_OVERLAP_PROOF: the exchange of step %d waited 60 s for step %d, which never came: it is not in the background",
                        d->job.step, want);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

static void *job_main(void *arg) {
  atoll_diloco *d = arg;
  if (d->job.threaded) { /* the stop signals are the training thread's (core/stop_signal.h) */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
  }
  diloco_job *j = &d->job;
  memset(&j->counted, 0, sizeof j->counted);
  j->rc = d->cfg.hooks && d->cfg.hooks->overlap_proof ? await_overlap(d, &j->err) : 0;
  int delay = d->cfg.hooks ? d->cfg.hooks->exchange_delay_ms : 0; /* test hook: a slow link */
  if (j->rc == 0 && delay > 0) nanosleep(&(struct timespec){delay / 1000, (long)(delay % 1000) * 1000000L}, NULL);
  if (j->rc == 0) j->rc = atoll_diloco_exchange(d, &j->comms, j->step, j->frags, j->nfrags, &j->counted, &j->err);
  atomic_store(&j->done, 1);
  return NULL;
}

void atoll_diloco_job_start(atoll_diloco *d) {
  diloco_job *j = &d->job;
  j->running = 1;
  atomic_store(&j->done, 0);
  j->threaded = 1; /* (before the thread starts: it reads it) */
  if (pthread_create(&j->thread, NULL, job_main, d) != 0) {
    j->threaded = 0;
    job_main(d);
  } /* no thread to be had: the same exchange, in place (same bits) */
}

static void add_counted(atoll_diloco_stats *s, const atoll_diloco_stats *c) {
  s->late_kept += c->late_kept;
  s->late_merged += c->late_merged;
  s->outer_syncs += c->outer_syncs;
  s->inter_island_bytes += c->inter_island_bytes;
  s->wan_seconds += c->wan_seconds;
  s->wan_exposed_seconds += c->wan_exposed_seconds;
  s->sync_seconds += c->sync_seconds;
}

int atoll_diloco_job_join(atoll_diloco *d, atoll_err *err) {
  diloco_job *j = &d->job;
  if (!j->running) return 0;
  atomic_store(&j->joining, 1);
  if (j->threaded) pthread_join(j->thread, NULL);
  atomic_store(&j->joining, 0);
  j->running = 0;
  add_counted(&d->stats, &j->counted);
  if (j->rc < 0) *err = j->err;
  return j->rc;
}

/* The pipeline schedule: one step's micro-batches through this rank's pp_stage.
 *
 * Schedules (P pp_stages, M micro-batches, pp_stage s; F i / B i: forward / backward
 * of micro-batch i):
 *   gpipe  F 0 .. F M-1, then B 0 .. B M-1: up to M micro-batches in flight.
 *   1f1b   warm-up F 0 .. F w-1 with w = min(P - s - 1, M), then F w+i, B i for
 *          i = 0 .. M-w-1, then the remaining backwards: at most P - s in flight, so
 *          activations for min(P, M) micro-batches instead of M (Narayanan et al.
 *          2021, PipeDream-Flush).
 *   interleaved (--virtual-stages V > 1, 1f1b): the layers are cut in V P chunks,
 *          pp_stage s holds chunks s, s+P, ...; passes go in groups of P micro-batches
 *          per chunk, warm-up 2 (P - s - 1) + (V - 1) P passes (Narayanan et al.
 *          2021, Megatron-LM's order; M must be a multiple of P). The bubble shrinks
 *          to (P - 1) / (V M) for V times the pipeline messages. Activations are kept
 *          for all M micro-batches (not the schedule's tighter bound).
 * All leave the same gradients (each chunk's backwards add into the buffer in
 * micro-batch order 0 .. M-1). A pass receives its input from the previous pp_stage
 * (or, on pp_stage 0, from pp_stage P-1's previous chunk) and its output gradient from
 * the next by blocking receives, tagged with the sender's (micro-batch, chunk, direction); it
 * sends without blocking and completes a send before its buffer is reused, so no
 * cycle of waits can form.
 *
 * Bubble. The pp_stages of a pipeline start each step's schedule together (a barrier);
 * each records when it finished and how long it computed (forward and backward, not
 * waiting for a message). The step's pipeline time is the latest finish of its
 * pp_stages; a pp_stage's bubble is (pipeline time - its compute) / its compute, whose
 * theory for a uniform split is (P - 1) / M, (P - 1) / (V M) interleaved.
 *
 * For tests, the test hooks' stage_forward_ms / stage_backward_ms (ATOLL_TEST_STAGE_MS)
 * add a sleep to every forward and backward, so that the schedule's timing shows even
 * on an oversubscribed machine.
 *
 * Logical clock. A wall clock on a loaded machine is not a test, so with the test hook
 * ATOLL_TEST_STAGE_UNITS=F,B each pp_stage also keeps a logical clock t: 0 at the start
 * of each step, + F units per forward pass, + B per backward. Every activation or
 * gradient message is followed by a second one of 8 bytes (same peer and tag: MPI keeps
 * their order) holding the sender's t after the pass; the receiver sets
 * t = max(t, t_msg) before its pass. t is then the finish time of each pass when passes
 * cost exactly F and B and messages take no time. The logical bubble is the wall-clock
 * bubble's formula in these units: (the pipeline's logical time, the largest t at the
 * end of the step over its pp_stages, - this pp_stage's busy units) / its busy units.
 * It depends only on the schedule, so it is the same every step, and a schedule that
 * waits more than it must shows as a bubble above (P - 1) / (V M). Without the hook no
 * clock message is sent: normal runs are unchanged. */
#include "parallel/pipeline.h"

#include "core/clock.h"
#include "core/fatal.h"
#include "model/model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct atoll_pipeline {
  atoll_strategy base;
  atoll_mesh *mesh;
  atoll_model *model;
  const atoll_layout *lay;
  int pp, pp_rank, gpipe;
  int micro_batches, chunks, slots, batch, seq;
  double forward_ms, backward_ms; /* test hooks */
  int forward_units, backward_units; /* test hooks: the logical clock, on when both > 0 */
  double clock, busy;             /* logical time and busy units of this step so far */
  double *clock_send;             /* [2 x slots x chunks] clock messages in flight: activations, then gradients */
  atoll_req **clock_req;          /* their sends, same index */
  double *logical;                /* per run: [2k] logical finish, [2k+1] busy units */
  size_t act_bytes;               /* one micro-batch's rows of activations */
  float *dout, **dx_send;         /* [slots x chunks] gradient sends in flight */
  atoll_req **act_req, **dx_req;  /* sends in flight, per slot and chunk */
  int32_t *inputs, *targets;      /* [batch, seq] */
  double *times;                  /* per run: [2k] this pp_stage's end of the schedule (from
                                     the pipeline's common start), [2k+1] its compute seconds */
  int runs, max_runs;
  int has_tie;
  size_t tie_begin, tie_end;
};

static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms * 1e6) % 1000000000L};
  nanosleep(&ts, NULL);
}

int atoll_pipeline_slots(const atoll_pipeline_config *pc, const atoll_mesh *mesh, int *slots, atoll_err *err) {
  int pp = mesh->pp, micro = pc->micro_batches;
  if (micro > ATOLL_MAX_MICRO_BATCHES) /* --global-batch can make more than the flags allow */
    return atoll_fail(err, "--global-batch: %d micro-batches per step (global batch / (batch x replicas)), more than %d",
                      micro, ATOLL_MAX_MICRO_BATCHES);
  if (pc->chunks > 1 && micro % pp != 0)
    return atoll_fail(err, "--virtual-stages %d: the interleaved schedule needs micro-batches (%d) in multiples of --pp %d",
                      pc->chunks, micro, pp);
  if (pp == 1)
    *slots = 1;
  else if (strcmp(pc->schedule, "gpipe") == 0 || pc->chunks > 1)
    *slots = micro;
  else
    *slots = pp - mesh->pp_rank < micro ? pp - mesh->pp_rank : micro;
  return 0;
}

/* Sums the tied wte's gradient over the first and last pp_stage (data parallel held
 * that unit back until now, atoll_dp_defer). */
static void pipe_finish_grads(atoll_strategy *s) {
  atoll_pipeline *p = (atoll_pipeline *)s;
  if (!p->has_tie) return;
  atoll_allreduce(p->mesh->tie_comm, atoll_model_grads(p->model) + p->tie_begin, p->tie_end - p->tie_begin);
}

static void pipe_destroy(atoll_strategy *s) {
  atoll_pipeline *p = (atoll_pipeline *)s;
  if (p->dx_send)
    for (int i = 0; i < p->slots * p->chunks; i++) free(p->dx_send[i]);
  free(p->dx_send);
  free(p->dout);
  free(p->act_req);
  free(p->dx_req);
  free(p->inputs);
  free(p->targets);
  free(p->times);
  free(p->clock_send);
  free(p->clock_req);
  free(p->logical);
  free(p);
}

static const atoll_strategy_ops PIPE_OPS = {.name = "pipeline", .finish_grads = pipe_finish_grads, .destroy = pipe_destroy};

/* The pipeline's message buffers (pp > 1): a pp_stage's input and output are its rows
 * of the micro-batch (a tp-th under sequence parallelism). */
static int alloc_messages(atoll_pipeline *p) {
  /* tokens in size_t: batch x seq may pass int (the model refuses that, but this
   * buffer's size must not depend on it) */
  size_t tokens = (size_t)p->batch * (size_t)p->seq;
  if (tokens > INT_MAX) return -1;
  size_t n = (size_t)atoll_model_local_rows(p->model, (int)tokens) * (size_t)p->lay->shape.dim;
  size_t nb = (size_t)p->slots * p->chunks;
  p->act_bytes = n * sizeof(float);
  p->dout = malloc(p->act_bytes);
  p->dx_send = calloc(nb, sizeof(float *));
  p->act_req = calloc(nb, sizeof(atoll_req *));
  p->dx_req = calloc(nb, sizeof(atoll_req *));
  if (!p->dout || !p->dx_send || !p->act_req || !p->dx_req) return -1;
  for (size_t i = 0; i < nb; i++)
    if (!(p->dx_send[i] = malloc(p->act_bytes))) return -1;
  if (p->forward_units > 0) {
    p->clock_send = calloc(2 * nb, sizeof(double));
    p->clock_req = calloc(2 * nb, sizeof(atoll_req *));
    if (!p->clock_send || !p->clock_req) return -1;
  }
  return 0;
}

int atoll_pipeline_create(atoll_pipeline **out, const atoll_pipeline_config *pc, atoll_mesh *mesh, atoll_model *m,
                          atoll_err *err) {
  *out = NULL;
  atoll_pipeline *p = calloc(1, sizeof *p);
  if (!p) return atoll_fail(err, "out of memory for the pipeline");
  p->base.ops = &PIPE_OPS;
  p->mesh = mesh;
  p->model = m;
  p->lay = atoll_model_layout(m);
  p->pp = mesh->pp;
  p->pp_rank = mesh->pp_rank;
  p->gpipe = strcmp(pc->schedule, "gpipe") == 0;
  p->micro_batches = pc->micro_batches;
  p->chunks = pc->chunks;
  p->batch = pc->batch;
  p->seq = pc->seq;
  p->forward_ms = pc->test_forward_ms;
  p->backward_ms = pc->test_backward_ms;
  if (pc->test_forward_units > 0 && pc->test_backward_units > 0) {
    p->forward_units = pc->test_forward_units;
    p->backward_units = pc->test_backward_units;
  }
  p->max_runs = pc->max_steps;
  if (atoll_pipeline_slots(pc, mesh, &p->slots, err)) {
    pipe_destroy(&p->base);
    return -1;
  }
  size_t rows = (size_t)pc->batch * pc->seq;
  p->inputs = malloc(sizeof(int32_t) * rows);
  p->targets = malloc(sizeof(int32_t) * rows);
  p->times = calloc(2 * (size_t)(p->max_runs > 0 ? p->max_runs : 1), sizeof(double));
  p->logical = calloc(2 * (size_t)(p->max_runs > 0 ? p->max_runs : 1), sizeof(double));
  if (!p->inputs || !p->targets || !p->times || !p->logical || (p->pp > 1 && alloc_messages(p))) {
    pipe_destroy(&p->base);
    return atoll_fail(err, "out of memory for pipeline buffers");
  }
  if (mesh->tie_comm && p->lay->t_wte >= 0) {
    const atoll_tensor *wte = &p->lay->tensors[p->lay->t_wte];
    p->has_tie = 1;
    p->tie_begin = wte->offset;
    p->tie_end = wte->offset + wte->numel;
  }
  *out = p;
  return 0;
}

atoll_strategy *atoll_pipeline_strategy(atoll_pipeline *p) { return p ? &p->base : NULL; }

int atoll_pipeline_tie_range(const atoll_pipeline *p, size_t *begin, size_t *end) {
  *begin = p->tie_begin;
  *end = p->tie_end;
  return p->has_tie;
}

/* Waits for a receive; the time is idle time of the pp_stage. With the logical clock,
 * the sender's clock message follows (same peer and tag) and moves t forward. */
static void recv_wait(atoll_pipeline *p, void *buf, int peer, int tag) {
  atoll_req_wait(atoll_irecv(p->mesh->pp_comm, buf, p->act_bytes, peer, tag));
  if (p->forward_units > 0) {
    double sent;
    atoll_req_wait(atoll_irecv(p->mesh->pp_comm, &sent, sizeof sent, peer, tag));
    if (sent > p->clock) p->clock = sent;
  }
}

/* After a message's send has started: its clock message (index k of clock_send). */
static void send_clock(atoll_pipeline *p, int k, int peer, int tag) {
  if (p->forward_units <= 0) return;
  atoll_req_wait(p->clock_req[k]); /* this buffer's last clock message has left */
  p->clock_send[k] = p->clock;
  p->clock_req[k] = atoll_isend(p->mesh->pp_comm, &p->clock_send[k], sizeof(double), peer, tag);
}

/* Message tags name the sender's pass (i x chunks + c) and its direction in the low
 * bit, inside the tags MPI always allows (ATOLL_TAG_RANGE, odd: 32767). The pass
 * number wraps here, mod (ATOLL_TAG_RANGE - 1) / 2, before the direction is added:
 * wrapping 2 pass + direction mod 32767 instead (as the comm layer once did) turns a
 * forward tag into a backward one 16384 passes later, and with --pp 2 and
 * --virtual-stages the same pair of ranks carries both directions. Two passes with
 * the same tag are 16383 passes apart and still meet the right receive: MPI delivers
 * one sender's messages of one tag in the order they were sent, and both ends go
 * through their passes in the same order. */
int atoll_pipeline_tag(int pass, int backward) { return 2 * (pass % ((ATOLL_TAG_RANGE - 1) / 2)) + backward; }

static int tag_of(const atoll_pipeline *p, int i, int c, int backward) {
  return atoll_pipeline_tag(i * p->chunks + c, backward);
}

static void forward_one(atoll_pipeline *p, const atoll_micro_source *src, int i, int c, double *loss_sum,
                        double *compute) {
  int s = p->pp_rank, pp = p->pp, slot = i % p->slots, k = slot * p->chunks + c;
  int starts = p->lay->first_stage && c == 0, ends = p->lay->last_stage && c == p->chunks - 1;
  if (starts || ends) src->load(src->ctx, i, p->inputs, p->targets);
  if (pp > 1) {
    atoll_req_wait(p->act_req[k]); /* this slot's last output of the chunk has left */
    p->act_req[k] = NULL;
    if (s > 0) recv_wait(p, atoll_model_slot_input(p->model, slot, c), s - 1, tag_of(p, i, c, 0));
    else if (c > 0) recv_wait(p, atoll_model_slot_input(p->model, slot, c), pp - 1, tag_of(p, i, c - 1, 0));
  }
  double t0 = atoll_seconds();
  float loss = atoll_model_forward_slot(p->model, slot, c, p->inputs, p->targets, p->batch, p->seq);
  sleep_ms(p->forward_ms);
  *compute += atoll_seconds() - t0;
  p->clock += p->forward_units;
  p->busy += p->forward_units;
  if (ends) *loss_sum += loss;
  if (pp > 1 && !ends) {
    p->act_req[k] = atoll_isend(p->mesh->pp_comm, atoll_model_slot_output(p->model, slot, c), p->act_bytes,
                                s < pp - 1 ? s + 1 : 0, tag_of(p, i, c, 0));
    send_clock(p, k, s < pp - 1 ? s + 1 : 0, tag_of(p, i, c, 0));
  }
}

static void backward_one(atoll_pipeline *p, const atoll_micro_source *src, int i, int c, float scale,
                         double *compute) {
  int s = p->pp_rank, pp = p->pp, slot = i % p->slots, k = slot * p->chunks + c;
  int starts = p->lay->first_stage && c == 0, ends = p->lay->last_stage && c == p->chunks - 1;
  if (!ends) {
    if (s < pp - 1) recv_wait(p, p->dout, s + 1, tag_of(p, i, c, 1));
    else recv_wait(p, p->dout, 0, tag_of(p, i, c + 1, 1));
  }
  src->before_backward(src->ctx, i == p->micro_batches - 1); /* each chunk's backwards run in micro-batch order */
  double t0 = atoll_seconds();
  atoll_model_backward_slot(p->model, slot, c, scale, ends ? NULL : p->dout);
  sleep_ms(p->backward_ms);
  *compute += atoll_seconds() - t0;
  p->clock += p->backward_units;
  p->busy += p->backward_units;
  if (!starts && pp > 1) {
    atoll_req_wait(p->dx_req[k]);
    memcpy(p->dx_send[k], atoll_model_input_grad(p->model), p->act_bytes);
    p->dx_req[k] = atoll_isend(p->mesh->pp_comm, p->dx_send[k], p->act_bytes, s > 0 ? s - 1 : pp - 1, tag_of(p, i, c, 1));
    send_clock(p, p->slots * p->chunks + k, s > 0 ? s - 1 : pp - 1, tag_of(p, i, c, 1));
  }
}

static void finish_sends(atoll_pipeline *p) {
  if (p->pp == 1) return;
  for (int k = 0; k < p->slots * p->chunks; k++) {
    atoll_req_wait(p->act_req[k]);
    atoll_req_wait(p->dx_req[k]);
    p->act_req[k] = p->dx_req[k] = NULL;
  }
  if (p->forward_units > 0)
    for (int k = 0; k < 2 * p->slots * p->chunks; k++) {
      atoll_req_wait(p->clock_req[k]);
      p->clock_req[k] = NULL;
    }
}

/* The n-th forward (or backward) pass of a pp_stage: groups of P micro-batches go
 * through chunk 0, 1, ..., V-1 (backwards: V-1, ..., 0) before the next group
 * (Megatron-LM's interleaved order; with V = 1 simply micro-batch n). */
static void pass_of(const atoll_pipeline *p, int n, int backward, int *micro, int *chunk) {
  int group = p->pp * p->chunks;
  int c = (n % group) / p->pp;
  *chunk = backward ? p->chunks - 1 - c : c;
  *micro = (n / group) * p->pp + n % p->pp;
}

/* Warm-up forwards, then one forward and one backward in turn, then the rest of the
 * backwards; gpipe: all forwards first. */
static void run_schedule(atoll_pipeline *p, const atoll_micro_source *src, float scale, double *loss_sum,
                         double *compute) {
  int total = p->micro_batches * p->chunks, ahead = p->pp - p->pp_rank - 1;
  int warm = p->gpipe ? total : p->chunks == 1 ? ahead : ahead * 2 + (p->chunks - 1) * p->pp;
  if (warm > total) warm = total;
  int i, c;
  for (int n = 0; n < warm; n++) {
    pass_of(p, n, 0, &i, &c);
    forward_one(p, src, i, c, loss_sum, compute);
  }
  for (int n = 0; n < total - warm; n++) {
    pass_of(p, warm + n, 0, &i, &c);
    forward_one(p, src, i, c, loss_sum, compute);
    pass_of(p, n, 1, &i, &c);
    backward_one(p, src, i, c, scale, compute);
  }
  for (int n = total - warm; n < total; n++) {
    pass_of(p, n, 1, &i, &c);
    backward_one(p, src, i, c, scale, compute);
  }
}

double atoll_pipeline_run(atoll_pipeline *p, const atoll_micro_source *src, float scale) {
  if (p->pp > 1) atoll_barrier(p->mesh->pp_comm); /* a common start for the bubble (no bytes) */
  double loss_sum = 0.0, compute = 0.0, t0 = atoll_seconds();
  p->clock = p->busy = 0; /* the logical clock's common start */
  if (p->pp == 1) { /* no pipeline: accumulation over micro-batches, one slot */
    for (int i = 0; i < p->micro_batches; i++) {
      forward_one(p, src, i, 0, &loss_sum, &compute);
      backward_one(p, src, i, 0, scale, &compute);
    }
  } else {
    run_schedule(p, src, scale, &loss_sum, &compute);
  }
  finish_sends(p);
  if (p->runs < p->max_runs) {
    p->times[2 * p->runs] = atoll_seconds() - t0;
    p->times[2 * p->runs + 1] = compute;
    p->logical[2 * p->runs] = p->clock;
    p->logical[2 * p->runs + 1] = p->busy;
    p->runs++;
  }
  return loss_sum;
}

double atoll_pipeline_forward_eval(atoll_pipeline *p, const atoll_micro_source *src, int e) {
  double loss = 0.0, compute = 0.0;
  for (int c = 0; c < p->chunks; c++) forward_one(p, src, e, c, &loss, &compute);
  finish_sends(p);
  return loss;
}

/* Each step's pipeline time is its slowest pp_stage's finish; this pp_stage's bubble is
 * that time over its compute, less 1. */
double atoll_pipeline_bubble(atoll_pipeline *p, int skip) {
  int n = p->runs, world = atoll_comm_size(p->mesh->world);
  double *all = malloc(sizeof(double) * 2 * (size_t)(n ? n : 1) * world);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!all || !v) atoll_fatal("out of memory for the pipeline bubble (%d steps x %d ranks)", n, world);
  atoll_allgather_bytes(p->mesh->world, p->times, all, sizeof(double) * 2 * (size_t)n);
  int nb = 0;
  const atoll_mesh *mh = p->mesh;
  for (int k = skip; k < n; k++) {
    double end = 0;
    for (int s = 0; s < p->pp; s++) {
      int w = atoll_mesh_world_rank(mh, mh->island, s, mh->dp_rank, mh->tp_rank);
      double e = all[(size_t)w * 2 * n + 2 * k];
      end = e > end ? e : end;
    }
    double comp = p->times[2 * k + 1];
    if (comp > 0) v[nb++] = (end - comp) / comp;
  }
  double mine = nb > 0 ? atoll_median(v, (size_t)nb) : 0;
  free(v);
  free(all);
  return mine;
}

/* The logical bubble of each step, from every pp_stage's logical finish: the largest
 * over the steps (they are all equal, see the header comment). */
int atoll_pipeline_bubble_logical(atoll_pipeline *p, double *bubble) {
  *bubble = 0;
  if (p->forward_units <= 0) return 0;
  int n = p->runs, world = atoll_comm_size(p->mesh->world);
  double *all = malloc(sizeof(double) * 2 * (size_t)(n ? n : 1) * world);
  if (!all) atoll_fatal("out of memory for the logical bubble (%d steps x %d ranks)", n, world);
  atoll_allgather_bytes(p->mesh->world, p->logical, all, sizeof(double) * 2 * (size_t)n);
  const atoll_mesh *mh = p->mesh;
  for (int k = 0; k < n; k++) {
    double end = 0, busy = p->logical[2 * k + 1];
    for (int s = 0; s < p->pp; s++) {
      int w = atoll_mesh_world_rank(mh, mh->island, s, mh->dp_rank, mh->tp_rank);
      double e = all[(size_t)w * 2 * n + 2 * k];
      end = e > end ? e : end;
    }
    double b = busy > 0 ? (end - busy) / busy : 0;
    if (k == 0 || b > *bubble) *bubble = b;
  }
  free(all);
  return 1;
}

/* One step's micro-batches through this rank's pipeline stage, and the tensor-parallel
 * collectives the model calls.
 *
 * Schedules (P stages, M micro-batches, stage s; F i / B i: forward / backward of
 * micro-batch i):
 *   gpipe  F 0 .. F M-1, then B 0 .. B M-1: up to M micro-batches in flight.
 *   1f1b   warm-up F 0 .. F w-1 with w = min(P - s - 1, M), then F w+i, B i for
 *          i = 0 .. M-w-1, then the remaining backwards: at most P - s in flight, so
 *          activations for min(P, M) micro-batches instead of M (Narayanan et al.
 *          2021, PipeDream-Flush).
 *   interleaved (--virtual-stages V > 1, 1f1b): the layers are cut in V P chunks,
 *          stage s holds chunks s, s+P, ...; passes go in groups of P micro-batches
 *          per chunk, warm-up 2 (P - s - 1) + (V - 1) P passes (Narayanan et al.
 *          2021, Megatron-LM's order; M must be a multiple of P). The bubble shrinks
 *          to (P - 1) / (V M) for V times the pipeline messages. Activations are kept
 *          for all M micro-batches (not the schedule's tighter bound).
 * All leave the same gradients (each chunk's backwards add into the buffer in
 * micro-batch order 0 .. M-1). A pass receives its input from the previous stage (or,
 * on stage 0, from stage P-1's previous chunk) and its output gradient from the next
 * by blocking receives, tagged with the sender's (micro-batch, chunk, direction); it
 * sends without blocking and completes a send before its buffer is reused, so no
 * cycle of waits can form.
 *
 * Bubble. The stages of a pipeline start each step's schedule together (a barrier);
 * each records when it finished and how long it computed (forward and backward, not
 * waiting for a message). The step's pipeline time is the latest finish of its stages; a
 * stage's bubble is (pipeline time - its compute) / its compute, whose theory for a
 * uniform split is (P - 1) / M, (P - 1) / (V M) interleaved (train_report.c).
 *
 * For tests, ATOLL_TEST_STAGE_MS="F,B" adds a sleep of F ms to every forward and B ms
 * to every backward, so that the schedule's timing shows even on an oversubscribed
 * machine. */
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void tp_allreduce(void *ctx, float *buf, size_t n) { atoll_allreduce(ctx, buf, n); }
static void tp_allgather(void *ctx, const float *mine, float *all, size_t n) {
  atoll_allgather_bytes(ctx, mine, all, n * sizeof(float));
}
static void tp_reduce_scatter(void *ctx, float *buf, size_t n) { atoll_reduce_scatter(ctx, buf, n, NULL); }
static void tp_allgather_chunks(void *ctx, float *buf, size_t n) { atoll_allgather(ctx, buf, n, NULL); }

static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms * 1e6) % 1000000000L};
  nanosleep(&ts, NULL);
}

int trainer_pipeline_init(trainer *t, atoll_err *err) {
  atoll_mesh *mh = &t->mesh;
  if (mh->tp > 1) {
    atoll_model_tp tp = {.ctx = mh->tp_comm, .allreduce = tp_allreduce, .allgather = tp_allgather,
                         .reduce_scatter = tp_reduce_scatter, .allgather_chunks = tp_allgather_chunks};
    atoll_model_set_tp(t->model, &tp);
  }
  const char *ms = getenv("ATOLL_TEST_STAGE_MS");
  if (ms && sscanf(ms, "%lf,%lf", &t->test_forward_ms, &t->test_backward_ms) != 2)
    return atoll_fail(err, "ATOLL_TEST_STAGE_MS: expected two numbers F,B (milliseconds), got '%s'", ms);
  if (mh->pp == 1) return 0;
  /* a stage's input and output: its rows of the micro-batch (a tp-th under sequence
   * parallelism) */
  size_t n = (size_t)atoll_model_local_rows(t->model, t->cfg->batch * t->seq) * t->cfg->model.dim;
  size_t nb = (size_t)t->nslots * t->chunks;
  t->act_bytes = n * sizeof(float);
  t->dout = malloc(t->act_bytes);
  t->dx_send = calloc(nb, sizeof(float *));
  t->act_req = calloc(nb, sizeof(atoll_req *));
  t->dx_req = calloc(nb, sizeof(atoll_req *));
  if (!t->dout || !t->dx_send || !t->act_req || !t->dx_req)
    return atoll_fail(err, "out of memory for pipeline buffers");
  for (size_t i = 0; i < nb; i++)
    if (!(t->dx_send[i] = malloc(t->act_bytes))) return atoll_fail(err, "out of memory for pipeline buffers");
  return 0;
}

void trainer_pipeline_free(trainer *t) {
  if (t->dx_send)
    for (int i = 0; i < t->nslots * t->chunks; i++) free(t->dx_send[i]);
  free(t->dx_send);
  free(t->dout);
  free(t->act_req);
  free(t->dx_req);
}

/* Waits for a receive; the time is idle time of the stage. */
static void recv_wait(trainer *t, void *buf, int peer, int tag) {
  atoll_req_wait(atoll_irecv(t->mesh.pp_comm, buf, t->act_bytes, peer, tag));
}

/* Message tags name the sender's pass: micro-batch i, chunk c, direction. */
static int tag_of(const trainer *t, int i, int c, int backward) { return 2 * (i * t->chunks + c) + backward; }

static void forward_one(trainer *t, int step, int i, int c, int eval_count, const atoll_dataset *ds,
                        double *loss_sum, double *compute) {
  const atoll_config *cf = t->cfg;
  atoll_mesh *mh = &t->mesh;
  int s = mh->pp_rank, P = mh->pp, V = t->chunks, slot = i % t->nslots, k = slot * V + c;
  const atoll_layout *lay = t->lay;
  int starts = lay->first_stage && c == 0, ends = lay->last_stage && c == V - 1;
  /* global micro-batch index: micro-batch i of replica q is i R + q */
  if (starts || ends) trainer_load_micro(t, ds, step, eval_count ? i : i * t->replicas + t->replica, eval_count);
  if (P > 1) {
    atoll_req_wait(t->act_req[k]); /* this slot's last output of the chunk has left */
    t->act_req[k] = NULL;
    if (s > 0) recv_wait(t, atoll_model_slot_input(t->model, slot, c), s - 1, tag_of(t, i, c, 0));
    else if (c > 0) recv_wait(t, atoll_model_slot_input(t->model, slot, c), P - 1, tag_of(t, i, c - 1, 0));
  }
  double t0 = atoll_seconds();
  float loss = atoll_model_forward_slot(t->model, slot, c, t->inputs, t->targets, cf->batch, t->seq);
  sleep_ms(t->test_forward_ms);
  *compute += atoll_seconds() - t0;
  if (ends) *loss_sum += loss;
  if (P > 1 && !ends)
    t->act_req[k] = atoll_isend(mh->pp_comm, atoll_model_slot_output(t->model, slot, c), t->act_bytes,
                                s < P - 1 ? s + 1 : 0, tag_of(t, i, c, 0));
}

static void backward_one(trainer *t, int i, int c, int M, float scale, double *compute) {
  atoll_mesh *mh = &t->mesh;
  int s = mh->pp_rank, P = mh->pp, V = t->chunks, slot = i % t->nslots, k = slot * V + c;
  const atoll_layout *lay = t->lay;
  int starts = lay->first_stage && c == 0, ends = lay->last_stage && c == V - 1;
  if (!ends) {
    if (s < P - 1) recv_wait(t, t->dout, s + 1, tag_of(t, i, c, 1));
    else recv_wait(t, t->dout, 0, tag_of(t, i, c + 1, 1));
  }
  atoll_dp_set_last_micro(t->dp, i == M - 1); /* each chunk's backwards run in micro-batch order */
  double t0 = atoll_seconds();
  atoll_model_backward_slot(t->model, slot, c, scale, ends ? NULL : t->dout);
  sleep_ms(t->test_backward_ms);
  *compute += atoll_seconds() - t0;
  if (!starts && P > 1) {
    atoll_req_wait(t->dx_req[k]);
    memcpy(t->dx_send[k], atoll_model_input_grad(t->model), t->act_bytes);
    t->dx_req[k] = atoll_isend(mh->pp_comm, t->dx_send[k], t->act_bytes, s > 0 ? s - 1 : P - 1, tag_of(t, i, c, 1));
  }
}

static void finish_sends(trainer *t) {
  if (t->mesh.pp == 1) return;
  for (int k = 0; k < t->nslots * t->chunks; k++) {
    atoll_req_wait(t->act_req[k]);
    atoll_req_wait(t->dx_req[k]);
    t->act_req[k] = t->dx_req[k] = NULL;
  }
}

/* The n-th forward (or backward) pass of a stage: groups of P micro-batches go through
 * chunk 0, 1, ..., V-1 (backwards: V-1, ..., 0) before the next group (Megatron-LM's
 * interleaved order; with V = 1 simply micro-batch n). */
static void pass_of(const trainer *t, int n, int backward, int *micro, int *chunk) {
  int P = t->mesh.pp, V = t->chunks;
  int c = (n % (P * V)) / P;
  *chunk = backward ? V - 1 - c : c;
  *micro = (n / (P * V)) * P + n % P;
}

double trainer_forward_backward(trainer *t, int step, float scale) {
  int M = t->accum, P = t->mesh.pp, V = t->chunks, s = t->mesh.pp_rank, total = M * V;
  if (P > 1) atoll_barrier(t->mesh.pp_comm); /* a common start for the bubble (no bytes) */
  double loss_sum = 0.0, compute = 0.0, t0 = atoll_seconds();
  if (P == 1) { /* no pipeline: accumulation over micro-batches, one slot */
    for (int i = 0; i < M; i++) {
      forward_one(t, step, i, 0, 0, &t->train, &loss_sum, &compute);
      backward_one(t, i, 0, M, scale, &compute);
    }
  } else {
    /* warm-up forwards, then one forward and one backward in turn, then the rest of
     * the backwards; gpipe: all forwards first */
    int w = strcmp(t->cfg->schedule, "gpipe") == 0 ? total
            : V == 1                              ? P - s - 1
                                                  : (P - s - 1) * 2 + (V - 1) * P;
    if (w > total) w = total;
    int i, c;
    for (int n = 0; n < w; n++) {
      pass_of(t, n, 0, &i, &c);
      forward_one(t, step, i, c, 0, &t->train, &loss_sum, &compute);
    }
    for (int n = 0; n < total - w; n++) {
      pass_of(t, w + n, 0, &i, &c);
      forward_one(t, step, i, c, 0, &t->train, &loss_sum, &compute);
      pass_of(t, n, 1, &i, &c);
      backward_one(t, i, c, M, scale, &compute);
    }
    for (int n = total - w; n < total; n++) {
      pass_of(t, n, 1, &i, &c);
      backward_one(t, i, c, M, scale, &compute);
    }
  }
  finish_sends(t);
  t->pipe_wall = atoll_seconds() - t0;
  t->pipe_compute = compute;
  return loss_sum;
}

double trainer_forward_eval(trainer *t, int e, int eval_count) {
  double loss = 0.0, compute = 0.0;
  for (int c = 0; c < t->chunks; c++) forward_one(t, 0, e, c, eval_count, &t->val, &loss, &compute);
  finish_sends(t);
  return loss;
}

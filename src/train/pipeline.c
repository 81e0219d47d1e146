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
 * Both leave the same gradients (each micro-batch's backward adds into the buffer in
 * the order 0 .. M-1). A stage receives activations from s-1 (tag 2i) and output
 * gradients from s+1 (tag 2i+1) by blocking receives; it sends without blocking and
 * completes a send before its buffer is reused, so no cycle of waits can form.
 *
 * Bubble. Each step records this stage's wall time from the schedule's start to its
 * end and the time it spent computing (forward and backward, not waiting for a
 * message); (wall - compute) / compute is the idle fraction, whose theory for a
 * uniform split is (P - 1) / M.
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
  t->act_bytes = n * sizeof(float);
  t->dout = malloc(t->act_bytes);
  t->dx_send = calloc((size_t)t->nslots, sizeof(float *));
  t->act_req = calloc((size_t)t->nslots, sizeof(atoll_req *));
  t->dx_req = calloc((size_t)t->nslots, sizeof(atoll_req *));
  if (!t->dout || !t->dx_send || !t->act_req || !t->dx_req)
    return atoll_fail(err, "out of memory for pipeline buffers");
  for (int i = 0; i < t->nslots; i++)
    if (!(t->dx_send[i] = malloc(t->act_bytes))) return atoll_fail(err, "out of memory for pipeline buffers");
  return 0;
}

void trainer_pipeline_free(trainer *t) {
  if (t->dx_send)
    for (int i = 0; i < t->nslots; i++) free(t->dx_send[i]);
  free(t->dx_send);
  free(t->dout);
  free(t->act_req);
  free(t->dx_req);
}

/* Waits for a receive; the time is idle time of the stage. */
static void recv_wait(trainer *t, void *buf, int peer, int tag) {
  atoll_req_wait(atoll_irecv(t->mesh.pp_comm, buf, t->act_bytes, peer, tag));
}

static void forward_one(trainer *t, int step, int i, int eval_count, const atoll_dataset *ds,
                        double *loss_sum, double *compute) {
  const atoll_config *c = t->cfg;
  atoll_mesh *mh = &t->mesh;
  int s = mh->pp_rank, P = mh->pp, slot = i % t->nslots;
  const atoll_layout *lay = t->lay;
  if (lay->first_stage || lay->last_stage) {
    /* global micro-batch index: micro-batch i of replica q is i R + q */
    trainer_load_micro(t, ds, step, eval_count ? i : i * t->replicas + t->replica, eval_count);
  }
  if (P > 1) {
    atoll_req_wait(t->act_req[slot]); /* the slot's last output has left */
    t->act_req[slot] = NULL;
    if (!lay->first_stage) recv_wait(t, atoll_model_slot_input(t->model, slot), s - 1, 2 * i);
  }
  double t0 = atoll_seconds();
  float loss = atoll_model_forward_slot(t->model, slot, t->inputs, t->targets, c->batch, t->seq);
  sleep_ms(t->test_forward_ms);
  *compute += atoll_seconds() - t0;
  if (lay->last_stage) *loss_sum += loss;
  if (P > 1 && !lay->last_stage)
    t->act_req[slot] = atoll_isend(mh->pp_comm, atoll_model_slot_output(t->model, slot), t->act_bytes, s + 1, 2 * i);
}

static void backward_one(trainer *t, int i, int M, float scale, double *compute) {
  atoll_mesh *mh = &t->mesh;
  int s = mh->pp_rank, slot = i % t->nslots;
  const atoll_layout *lay = t->lay;
  if (!lay->last_stage) recv_wait(t, t->dout, s + 1, 2 * i + 1);
  atoll_dp_set_last_micro(t->dp, i == M - 1);
  double t0 = atoll_seconds();
  atoll_model_backward_slot(t->model, slot, scale, lay->last_stage ? NULL : t->dout);
  sleep_ms(t->test_backward_ms);
  *compute += atoll_seconds() - t0;
  if (!lay->first_stage) {
    atoll_req_wait(t->dx_req[slot]);
    memcpy(t->dx_send[slot], atoll_model_input_grad(t->model), t->act_bytes);
    t->dx_req[slot] = atoll_isend(mh->pp_comm, t->dx_send[slot], t->act_bytes, s - 1, 2 * i + 1);
  }
}

static void finish_sends(trainer *t) {
  if (t->mesh.pp == 1) return;
  for (int k = 0; k < t->nslots; k++) {
    atoll_req_wait(t->act_req[k]);
    atoll_req_wait(t->dx_req[k]);
    t->act_req[k] = t->dx_req[k] = NULL;
  }
}

double trainer_forward_backward(trainer *t, int step, float scale) {
  int M = t->accum, P = t->mesh.pp, s = t->mesh.pp_rank;
  double loss_sum = 0.0, compute = 0.0, t0 = atoll_seconds();
  if (strcmp(t->cfg->schedule, "gpipe") == 0 || P == 1) {
    for (int i = 0; i < M; i++) {
      forward_one(t, step, i, 0, &t->train, &loss_sum, &compute);
      if (P == 1) backward_one(t, i, M, scale, &compute); /* no pipeline: one slot */
    }
    if (P > 1)
      for (int i = 0; i < M; i++) backward_one(t, i, M, scale, &compute);
  } else {
    int w = P - s - 1 < M ? P - s - 1 : M;
    for (int i = 0; i < w; i++) forward_one(t, step, i, 0, &t->train, &loss_sum, &compute);
    for (int i = 0; i < M - w; i++) {
      forward_one(t, step, w + i, 0, &t->train, &loss_sum, &compute);
      backward_one(t, i, M, scale, &compute);
    }
    for (int i = M - w; i < M; i++) backward_one(t, i, M, scale, &compute);
  }
  finish_sends(t);
  t->pipe_wall = atoll_seconds() - t0;
  t->pipe_compute = compute;
  return loss_sum;
}

double trainer_forward_eval(trainer *t, int e, int eval_count) {
  double loss = 0.0, compute = 0.0;
  forward_one(t, 0, e, eval_count, &t->val, &loss, &compute);
  finish_sends(t);
  return loss;
}

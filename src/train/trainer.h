/* The training loop's state, shared by its three parts: train.c (the loop),
 * train_ckpt.c (checkpoints across world sizes and stages) and train_report.c
 * (progress line, metrics.jsonl, summary.json). Internal to src/train/. */
#ifndef ATOLL_TRAINER_H
#define ATOLL_TRAINER_H

#include "comm/comm.h"
#include "parallel/diloco.h"
#include "parallel/dp.h"
#include "parallel/mesh.h"
#include "train/config.h"

#include <stdio.h>

typedef struct {
  const atoll_config *cfg;
  atoll_comm *comm;      /* the world */
  int rank, world;
  atoll_mesh mesh;       /* islands x pipeline x data x tensor parallel */
  int replicas, replica; /* data-parallel replicas of the model over all islands; this rank's */
  atoll_diloco *diloco;  /* NULL with one island */
  int seq, accum;        /* accum: micro-batches per replica per step */
  atoll_model *model;
  const atoll_layout *lay; /* this rank's part of the model */
  atoll_layout whole;    /* the whole model's layout: checkpoints */
  /* pipeline (pipeline.c) */
  int nslots;            /* micro-batches in flight on this stage */
  int chunks;            /* interleaved pipeline: chunks of layers on this stage (V) */
  size_t act_bytes;      /* one micro-batch's activations [batch, seq, dim] */
  float *dout, **dx_send;
  atoll_req **act_req, **dx_req; /* sends in flight, per slot */
  double pipe_wall, pipe_compute; /* the last step's schedule: wall and compute seconds */
  double *pipe_times;    /* per timed step: [2k] this stage's end of the schedule (from the
                            pipeline's common start), [2k+1] its compute seconds */
  double test_forward_ms, test_backward_ms;
  atoll_dp *dp;
  size_t shard_begin, shard_end; /* the range this rank's optimizer updates */
  float *m, *v;          /* AdamW moments of [shard_begin, shard_end) */
  atoll_dataset train, val;
  atoll_rng rng;
  int32_t *tokens;       /* [batch, seq+1] window scratch */
  int32_t *inputs, *targets;
  char ckpt_root[1100];
  FILE *metrics;         /* rank 0 only */
  double *step_seconds;
  int nsteps_timed;
  float last_loss, last_val;
  int have_val;
  atoll_comm_stats step_comm; /* intra-island communication inside training steps */
  atoll_comm_stats axis_comm[4]; /* the same by axis: data, tensor, pipeline, embedding tie */
  double compute_seconds;     /* inner steps, without outer syncs */
  size_t train_peak_rss;      /* resident peak over training steps and evaluation */
  size_t process_peak_rss;    /* resident peak of the whole process, carried across resets */
} trainer;

/* train.c */
/* Fills t->inputs / t->targets with global micro-batch m of step `step` (eval_count > 0:
 * evaluation window set of that many windows). */
void trainer_load_micro(trainer *t, const atoll_dataset *ds, int step, int m, int eval_count);

/* pipeline.c */
int trainer_pipeline_init(trainer *t, atoll_err *err);
void trainer_pipeline_free(trainer *t);
/* Forward and backward of the step's micro-batches on this stage (the schedule of
 * --schedule); returns the sum of their losses on the last stage, 0 elsewhere. */
double trainer_forward_backward(trainer *t, int step, float scale);
/* Forward of evaluation micro-batch e through the pipeline: its loss on the last stage. */
double trainer_forward_eval(trainer *t, int e, int eval_count);

/* train_ckpt.c */
int trainer_save(trainer *t, int step, atoll_err *err);
int trainer_load(trainer *t, const char *dir, int *start_step, atoll_err *err);
/* 64-bit hash of the weights; fails if the ranks' copies differ. */
int trainer_check_weights(trainer *t, uint64_t *hash, atoll_err *err);

/* train_report.c */
size_t trainer_peak_rss(void);
size_t trainer_rss_hwm(void);
void trainer_rss_reset(trainer *t);
int trainer_open_metrics(trainer *t, int keep_steps, atoll_err *err);
void trainer_log_step(trainer *t, int step, float loss, float lr, double norm, double seconds,
                      int evaluated, float val);
void trainer_progress(trainer *t, int step, int start, double run_start, float loss, float lr,
                      double seconds, int evaluated, float val);
int trainer_write_summary(trainer *t, int steps_done, uint64_t weights_hash, atoll_err *err);

#endif

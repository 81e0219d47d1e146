/* The pipeline schedule: one step's micro-batches through this rank's pp_stage (see
 * pipeline.c for the schedules and the bubble). It runs with any --pp: at pp = 1 it is
 * plain gradient accumulation over the micro-batches. It gets its micro-batches from
 * the loop through a callback (atoll_micro_source), so it never calls into the loop.
 * As a strategy it owns the tied-embedding sum: the first and last pp_stage both hold
 * wte (embedding and LM head), and finish_grads sums its gradient over them before
 * data parallel averages that unit (atoll_dp_defer). */
#ifndef ATOLL_PIPELINE_H
#define ATOLL_PIPELINE_H

#include "model/model.h"
#include "parallel/mesh.h"
#include "parallel/strategy.h"

#include <stdint.h>

typedef struct atoll_pipeline atoll_pipeline;

/* Micro-batches per step at most (--accum, --microbatches, or what --global-batch
 * makes): passes per step (micro-batches x chunks) stay far inside int. */
#define ATOLL_MAX_MICRO_BATCHES 65536

typedef struct {
  const char *schedule; /* "1f1b" or "gpipe" */
  int micro_batches;    /* per replica per step */
  int chunks;           /* --virtual-stages: chunks of layers per pp_stage */
  int batch, seq;       /* one micro-batch: batch rows of seq tokens */
  int max_steps;        /* steps this process may run (the per-step timings) */
  double test_forward_ms, test_backward_ms; /* test hooks: sleeps in every pass */
  int test_forward_units, test_backward_units; /* test hooks: the logical clock (0: off) */
} atoll_pipeline_config;

/* Where the micro-batches come from. */
typedef struct {
  void *ctx;
  /* fills inputs and targets ([batch, seq]) with micro-batch `micro` of this replica
   * (training) or evaluation batch `micro` */
  void (*load)(void *ctx, int micro, int32_t *inputs, int32_t *targets);
  /* before each backward: whether it is the step's last micro-batch of its chunk */
  void (*before_backward)(void *ctx, int last_micro);
} atoll_micro_source;

/* The message tag of pass `pass` (micro-batch i, chunk c: i x chunks + c) in one
 * direction (0 forward, 1 backward); see pipeline.c. */
int atoll_pipeline_tag(int pass, int backward);

/* Checks the schedule against the mesh and returns the micro-batches in flight on this
 * pp_stage (the model's activation slots), before the model exists. */
int atoll_pipeline_slots(const atoll_pipeline_config *pc, const atoll_mesh *mesh, int *slots, atoll_err *err);
/* The model must have been created with atoll_pipeline_slots' slots. */
int atoll_pipeline_create(atoll_pipeline **out, const atoll_pipeline_config *pc, atoll_mesh *mesh, atoll_model *m,
                          atoll_err *err);
/* The object as a strategy (strategy.h); the list destroys it. */
atoll_strategy *atoll_pipeline_strategy(atoll_pipeline *p);
/* The range of the flat buffer the embedding tie sums (wte); 0 without a tie. */
int atoll_pipeline_tie_range(const atoll_pipeline *p, size_t *begin, size_t *end);

/* Forward and backward of the step's micro-batches on this pp_stage (the schedule of
 * --schedule); returns the sum of their losses on the last pp_stage, 0 elsewhere. */
double atoll_pipeline_run(atoll_pipeline *p, const atoll_micro_source *src, float scale);
/* Forward of evaluation batch e through the pipeline: its loss on the last pp_stage. */
double atoll_pipeline_forward_eval(atoll_pipeline *p, const atoll_micro_source *src, int e);
/* Collective over the world: this pp_stage's median bubble over the steps this process
 * ran after the first `skip` ((pipeline time - its compute) / its compute). */
double atoll_pipeline_bubble(atoll_pipeline *p, int skip);
/* Collective over the world, only with the logical clock on (test hook
 * ATOLL_TEST_STAGE_UNITS; returns 0 at once without it on every rank): this pp_stage's
 * logical bubble, the largest over the steps run (see pipeline.c). */
int atoll_pipeline_bubble_logical(atoll_pipeline *p, double *bubble);

#endif

/* What a run reports (train_report.c): the progress line (rank 0, stderr),
 * OUT/metrics.jsonl (one object per step), with --tensorboard DIR the same numbers as
 * TensorBoard scalars (tb_events.h), and OUT/summary.json (the run's one
 * machine-readable result). The report owns the numbers it accumulates over the steps.
 * Internal to src/train/. */
#ifndef ATOLL_TRAIN_REPORT_H
#define ATOLL_TRAIN_REPORT_H

#include "train/eval_sets.h"
#include "train/run.h"
#include "train/tb_events.h"

enum { ATOLL_AXES = 4 }; /* data, tensor, pipeline, embedding tie */

typedef struct {
  FILE *metrics;          /* rank 0 only */
  int metrics_errno;      /* rank 0: the first failed write to metrics.jsonl (0: none) */
  atoll_tb tb;            /* rank 0 with --tensorboard: the event file (tb.f NULL: none) */
  int tb_errno;           /* rank 0: the first failed write to it */
  double *step_seconds;   /* per step this process ran */
  int nsteps_timed;
  float last_val;
  int have_val;
  int eval_sets;          /* --eval-data: their names, and their last losses */
  char eval_names[ATOLL_MAX_EVAL_SETS][ATOLL_EVAL_NAME_MAX + 1];
  float last_eval[ATOLL_MAX_EVAL_SETS];
  double bits_per_nat;    /* val_bpb = val_loss x this (split tokens / bytes / ln 2); 0: bytes unknown */
  atoll_comm_stats axis_before[ATOLL_AXES]; /* the counters at the step's start */
  atoll_comm_stats step_comm;               /* intra-island communication inside steps */
  atoll_comm_stats axis_comm[ATOLL_AXES];   /* the same by axis */
  double compute_seconds; /* steps, without outer syncs */
  double loop_seconds;    /* from the loop's start to the last step's report */
  double longest_gap;     /* the longest step gap, and the step it came before */
  int longest_gap_step;
  uint64_t steps_skipped; /* the run's steps skipped by the island's phase (phase.h), so far */
  uint64_t steps_taken;   /* and taken (with a phase) */
  int steps_done;         /* the summary's steps */
  uint64_t merges_logged; /* DiLoCo's merges by the last metrics.jsonl line */
  size_t train_peak_rss;  /* resident peak over training steps and evaluation */
  size_t process_peak_rss; /* resident peak of the whole process, carried across resets */
} atoll_report;

/* Opens metrics.jsonl keeping the metrics of steps <= keep_steps (a resumed run
 * rewrites what follows); with --tensorboard, a new event file whose steps replace
 * those after keep_steps in TensorBoard's view of the directory. */
int atoll_report_open(atoll_report *rep, const atoll_run *r, int keep_steps, atoll_err *err);
void atoll_report_close(atoll_report *rep);
/* The validation split's tokens and bytes of text (bytes 0: unknown, as in manifests
 * written before they were counted): with them the report adds val_bpb, bits per byte. */
void atoll_report_val_text(atoll_report *rep, uint64_t tokens, uint64_t bytes);
/* Around one step's communication: the bytes each axis sent in between are counted. */
void atoll_report_comm_begin(atoll_report *rep, const atoll_run *r);
void atoll_report_comm_end(atoll_report *rep, const atoll_run *r);
/* Resets the resident-set high-water mark, so that checkpoint gathers and loading do
 * not count in the steps' peak. */
void atoll_report_rss_reset(atoll_report *rep);
/* One step done (and evaluated): its times, the steps' memory peak, a metrics.jsonl
 * line (and event) and the progress line. Collective with several ranks: all return -1
 * if rank 0 could not write metrics.jsonl or the event file (a full disk; rank 0 has
 * the message), so the run stops instead of going on without its record. */
typedef struct {
  int step, start;           /* steps done; the step this process started at */
  double run_start;          /* the loop's start */
  double compute, seconds;   /* the step's seconds before outer syncs; in all */
  double gap;                /* seconds from the previous step's compute to this one's */
  double compute_end_wall;   /* the wall clock (Unix seconds) when the step's compute ended */
  float loss, lr, val;
  float eval[ATOLL_MAX_EVAL_SETS]; /* --eval-data's losses, when evaluated */
  double norm;
  int evaluated;
  int skipped;               /* the island's phase skipped it (phase.h): no loss, no compute */
  uint64_t steps_skipped;    /* the run's skipped steps so far, this one included */
  uint64_t steps_taken;      /* and the steps it took (0 for a run without a phase) */
} atoll_step_report;
int atoll_report_step(atoll_report *rep, const atoll_run *r, const atoll_step_report *s, atoll_err *err);
/* Collective: every rank contributes its numbers; rank 0 makes metrics.jsonl durable
 * and writes summary.json atomically; a failure is an error naming the file. */
int atoll_report_summary(atoll_report *rep, const atoll_run *r, int steps_done, float last_loss, uint64_t weights_hash,
                         atoll_err *err);

#endif

/* One training run as the loop's files see it. Internal to src/train/:
 *   train_setup.c   makes the run: mesh, model, the strategy objects in step order
 *   train.c         the loop: data, steps, evaluation (owns the loop's state)
 *   train_ckpt.c    checkpoints across world sizes, ZeRO stages and layouts
 *   train_report.c  progress line, metrics.jsonl, summary.json (owns atoll_report)
 *   train_out.c     the run directory: its lock, start-up clean, refused resumes
 * The strategies (src/parallel/) own their state; atoll_run only holds them, set up once
 * and then read. */
#ifndef ATOLL_TRAIN_RUN_H
#define ATOLL_TRAIN_RUN_H

#include "comm/comm.h"
#include "comm/device_coll.h"
#include "core/hooks.h"
#include "core/rng.h"
#include "data/data_tokenizer.h"
#include "data/dataset.h"
#include "model/model.h"
#include "parallel/diloco.h"
#include "parallel/dp.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "parallel/strategy.h"
#include "train/config.h"
#include "train/phase.h"

#include <stdio.h>

typedef struct {
  const atoll_config *cfg;
  const atoll_test_hooks *hooks; /* never NULL: no_hooks when the caller gave none */
  atoll_test_hooks no_hooks;
  atoll_comm *world;
  int rank, world_size;
  atoll_mesh mesh;         /* islands x pipeline x data x tensor parallel */
  int replicas, replica;   /* data-parallel replicas of the model over all islands; this rank's */
  int data_replicas, data_replica; /* the training windows' split: as replicas, replica; with --join
                                      over the island slots of --islands (docs/islands.md) */
  struct atoll_islands_net *net; /* with --join (owned by the strategy list) */
  struct atoll_island_units *units; /* an open run's island (--data-units 1): its data units; else NULL */
  int seq, micro_batches;  /* micro_batches: per replica per step */
  int chunks;              /* --virtual-stages */
  atoll_model *model;
  const atoll_layout *lay; /* this rank's part of the model */
  atoll_layout whole;      /* the whole model's layout: checkpoints */
  /* the strategies in step order: pipeline, data parallel, tensor parallel, DiLoCo;
   * the list owns them, the pointers below are views for what only one of them does */
  atoll_strategy_list strategies;
  atoll_pipeline *pipe;
  atoll_dp *dp;
  atoll_diloco *diloco;    /* NULL with one island */
  char ckpt_root[1100];    /* OUT/checkpoints */
  atoll_tokenizer_record tokenizer; /* the data's (data/data_tokenizer.h) */
  char *tokenizer_json;    /* its tokenizer.json, copied into checkpoints; NULL for bytes */
  /* --device other than cpu: the model's buffers are device memory; checkpoints,
   * --init-from and the weights' hash read and write this host copy of the weights,
   * which the loop (train.c) copies out before and in after them */
  float *host_params;
  char device_desc[256];   /* the device in words for the header; "" for cpu */
  atoll_device_coll *dcoll; /* --dp-comm nccl: data parallel's device collectives, else NULL */
  double peak_flops;       /* one rank's peak FLOP/s for MFU (--peak-tflops or the GPU table); 0: unknown */
} atoll_run;

/* What a checkpoint holds besides the weights and the strategies' state. */
typedef struct {
  size_t begin, end; /* the range this rank's optimizer updates (its ZeRO shard) */
  float *m, *v;      /* AdamW moments of [begin, end) */
  atoll_rng rng;
  float last_loss;
  int adam_step0;    /* AdamW's step is adam_step0 + step + 1: the moments' steps before this run's
                        step 0 (--init-optim 1: the source checkpoint's), so bias correction goes on
                        from there; less the start step with --init-step 1 (negative for fresh moments) */
  int first_step;    /* the step the run began at: 0, or the source's with --init-step 1 (state.json) */
  /* an island's phase in tokens or seconds (phase.h): the current phase so far, and the
   * steps it took and its phases skipped in the whole run (state.json island_phase) */
  atoll_phase phase;
  uint64_t steps_taken, steps_skipped;
} atoll_train_state;

/* train_setup.c */
/* Layouts that need more ranks than the world has (islands, --tp, --pp in one
 * process) and DiLoCo settings that cannot be (atoll_diloco_check): one line naming
 * the flag. atoll_run_setup checks it too; the CLI checks it before it prepares the
 * default corpus. */
int atoll_run_check_layout(const atoll_config *c, int world_size, atoll_err *err);
/* What this machine must have for c: on the CPU at bf16, AVX512_BF16 or AMX (under
 * ATOLL_MAX_ISA). Machines differ, so the ranks agree on it before any collective;
 * atoll_run_setup checks it too. */
int atoll_run_check_machine(const atoll_config *c, atoll_err *err);
int atoll_run_setup(atoll_run *r, const atoll_config *c, const atoll_test_hooks *hooks, atoll_comm *world,
                    atoll_err *err);
void atoll_run_free(atoll_run *r);

/* train.c: atoll_train_run (atoll/atoll.h) with test hooks (NULL: none); the CLI passes
 * the hooks it read from the environment (src/cli/test_hooks.c). Kept out of the public
 * header so that a library user never sees the hooks. */
int atoll_train_run_hooked(const atoll_config *cfg, const atoll_test_hooks *hooks, atoll_comm *world,
                           const char *resume_dir, const volatile sig_atomic_t *stop, atoll_err *err);
/* island_data.c: --island-data files or blocks restricts ds to this island's source files. */
int atoll_run_island_data(const atoll_run *r, atoll_dataset *ds, atoll_err *err);
/* Sequences per step over all replicas. */
double atoll_run_global_batch(const atoll_run *r);

/* train_ckpt.c */
int atoll_run_save(atoll_run *r, const atoll_train_state *st, int step, atoll_err *err);
int atoll_run_load(atoll_run *r, atoll_train_state *st, const char *dir, int *start_step, atoll_err *err);
/* The weights as checkpoints see them: the model's buffer, or on a device its host copy
 * (host_params). */
float *atoll_run_params(atoll_run *r);
/* This rank's part of a whole-model buffer (a checkpoint's layout) into part. */
void atoll_run_cut_part(const atoll_run *r, float *part, const float *whole);
/* The data's tokenizer (record and tokenizer.json) into r; fails when the model's
 * vocabulary cannot hold its ids. */
int atoll_run_tokenizer(atoll_run *r, atoll_err *err);
/* 64-bit hash of the weights; fails if the ranks' copies differ. */
int atoll_run_check_weights(atoll_run *r, uint64_t *hash, atoll_err *err);

#endif

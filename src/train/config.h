/* Training configuration: command-line flags and --config FILE (JSON with the same
 * keys as the flags, without the leading dashes; flags override the file). */
#ifndef ATOLL_CONFIG_H
#define ATOLL_CONFIG_H

#include "atoll/atoll.h"

#include <cjson/cJSON.h>
#include <stdio.h>

typedef struct {
  atoll_shape model;
  int batch;        /* sequences per micro-batch */
  int seq;          /* tokens per sequence (<= model.context); defaults to context */
  int accum;        /* micro-batches per optimizer step */
  int steps;        /* optimizer steps in total */
  atoll_adamw_config opt;
  uint64_t seed;
  int threads;      /* 0: leave OpenMP/OpenBLAS defaults */
  char data[1024];  /* prepared data directory */
  char out[1024];   /* run directory: metrics.jsonl, summary.json, checkpoints/ */
  char resume[1024];
  int eval_every;   /* 0 disables periodic evaluation (a final one still runs) */
  int eval_batches; /* batches of `batch` windows for a validation loss */
  int save_every;   /* 0: only the final checkpoint */
  int keep;         /* checkpoints kept in OUT/checkpoints */
  int log_every;    /* steps between progress lines when stderr is not a terminal */
  int stop_after;   /* save and stop after this step (0: off); not saved in checkpoints */
  int global_batch; /* sequences per step over all ranks (0: batch x accum x ranks) */
  char parallel[16]; /* data-parallel mode: "ddp" */
  int zero_stage;   /* ZeRO stage 0..3 (--zero; --shard is its older name) */
  float bucket_mb;  /* gradient bucket size */
  /* model parallel (src/parallel/pipeline.c, tp.c, src/model/gpt.c) */
  int tp, pp;        /* tensor-parallel ranks per pp_stage, pp_stages */
  int sequence_parallel; /* with tp > 1: activations cut by tokens */
  int virtual_stages; /* interleaved pipeline: chunks per pp_stage */
  int microbatches;  /* per step per pipeline; 0: accum */
  char schedule[8];  /* "1f1b" or "gpipe" */
  float comm_timeout; /* watchdog, seconds */
  char optimizer[16];   /* inner optimizer: "adamw" or "sgd" */
  /* DiLoCo (src/parallel/diloco.h) */
  int islands, sync_every, fragments, overlap, throttle;
  float outer_lr, outer_momentum, merge_alpha, wan_gbps, wan_latency_ms;
  char outer_optimizer[16]; /* "nesterov" or "sgd" */
  char outer_dtype[8];      /* "fp32", "bf16", "int8", "fp4" */
  char island_data[8];      /* "iid" or "files" */
} atoll_config;

void atoll_config_defaults(atoll_config *c);
/* Applies the keys of a JSON object; unknown keys and wrong types are errors that name
 * `source` (a file name or "flag"). */
int atoll_config_apply_json(atoll_config *c, const cJSON *obj, const char *source, atoll_err *err);
/* Parses JSON text (as read from --config FILE) and applies it. */
int atoll_config_apply_text(atoll_config *c, const char *text, size_t len, const char *source,
                            atoll_err *err);
/* Sets one key from a string value (a flag: key without the dashes). */
int atoll_config_set(atoll_config *c, const char *key, const char *value, atoll_err *err);
/* Checks the whole configuration (shapes, ranges). */
int atoll_config_check(const atoll_config *c, atoll_err *err);
/* The full configuration as a JSON object (for state.json and summary.json). */
cJSON *atoll_config_to_json(const atoll_config *c);
/* One line per key with its help text. */
void atoll_config_print_help(FILE *f);

#endif

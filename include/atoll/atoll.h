/* atoll: a training system for GPT-style language models in C.
 *
 * Public API of libatoll: configure, prepare data, train, find checkpoints, sample; the
 * planner's API is atoll/plan.h. The model, its layout and the parallel strategies are
 * internal (src/). Every function that can fail returns 0 on success and
 * -1 on failure, with a one-line message (naming the file or flag and the problem)
 * in an atoll_err. The library ends the process itself only where no caller could go
 * on: atoll_fatal (src/core/fatal.h: a stalled or failed collective, out of memory for
 * a small buffer inside a kernel or collective, a oneDNN, NCCL or CUDA error, a bad
 * ATOLL_MAX_ISA; it ends every rank of the job), atoll_comm_abort, and the handler that
 * stops a run whose mapped token file shrank (src/data/token_file.c, _exit(1));
 * docs/architecture.md, "Errors, exits and the environment", lists them.
 */
#ifndef ATOLL_ATOLL_H
#define ATOLL_ATOLL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors --- */

typedef struct {
  char msg[512];
} atoll_err;

/* Formats a message into err (if non-NULL) and returns -1. A message longer than msg
 * has its longest words (paths) cut in the middle ("head...tail") so that the rest,
 * the reason, still shows. */
int atoll_fail(atoll_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------ model shape --- */

typedef struct {
  int layers;  /* transformer blocks */
  int heads;   /* attention heads; must divide dim (llama with head_dim: need not) */
  int dim;     /* model width C */
  int context; /* maximum sequence length (position embeddings) */
  int vocab;   /* vocabulary size (256 for the built-in byte tokenizer) */
  /* the block design (zero fields keep GPT-2 and the defaults below) */
  char arch[8];     /* "gpt2" (also when empty) or "llama" */
  int kv_heads;     /* llama: key/value heads, dividing heads (0: heads) */
  int multiple_of;  /* llama: the SwiGLU width is rounded up to a multiple of it (0: 256) */
  int tie;          /* llama: 1 ties the LM head to wte, else it has its own; GPT-2: always tied */
  int qkv_bias;     /* llama: 1 adds a bias to the q, k and v products (Qwen2); GPT-2: always biased */
  float norm_eps;   /* llama: RMSNorm epsilon (0: 1e-5) */
  float rope_theta; /* llama: rotary embedding base (0: 10000) */
  /* llama: the rotary frequencies' scaling (src/model/rope.c): "none" (also when empty) or
   * "llama3" (Llama 3.1's: low frequencies divided by rope_factor, a smooth blend between
   * wavelengths rope_orig_context / rope_high_freq and rope_orig_context / rope_low_freq) */
  char rope_scaling[8];
  float rope_factor, rope_low_freq, rope_high_freq;
  int rope_orig_context;
  int head_dim; /* llama: the size of one attention head (0: dim / heads); q is [heads x head_dim, dim] */
} atoll_shape;

/* Checks that a shape is possible; the message names the offending key. */
int atoll_shape_check(const atoll_shape *s, atoll_err *err);

/* --------------------------------------------------------------- optimizer --- */

/* AdamW and the learning-rate schedule (src/optim/). */
typedef struct {
  float lr;           /* peak learning rate */
  float min_lr_ratio; /* cosine decays to lr * min_lr_ratio */
  int warmup;         /* linear warm-up steps */
  int total_steps;
  float beta1, beta2, eps;
  float weight_decay; /* decoupled, only on tensors with decay = 1 */
  float grad_clip;    /* global L2 norm; <= 0 disables */
} atoll_adamw_config;

/* ----------------------------------------------------------- configuration --- */

/* Training configuration: command-line flags and --config FILE (JSON with the same
 * keys as the flags, without the leading dashes; flags override the file). The keys,
 * their limits and help texts are the table in src/train/config.c. The fields are
 * grouped in sections, as torchtitan's JobConfig is; a section's comment says what it
 * holds, a field's comment names its flag where the name differs. */

/* optim: the inner optimizer, its choice and AdamW's settings with the schedule */
typedef struct {
  char name[16];            /* --optimizer: "adamw" or "sgd" */
  atoll_adamw_config adamw; /* lr, schedule, betas, weight decay, clip */
} atoll_optim_config;

/* data: what each step reads, and how much of it */
typedef struct {
  char dir[1024];       /* --data: the prepared data directory */
  char eval_sets[1024]; /* --eval-data: more validation sets, NAME=DIR[,NAME=DIR...] (src/train/eval_sets.h) */
  int batch;            /* sequences per micro-batch */
  int seq;              /* tokens per sequence (<= model.context); 0: the context */
  int accum;            /* micro-batches per optimizer step */
  int global_batch;     /* sequences per step over all ranks (0: batch x accum x ranks) */
} atoll_data_config;

/* run: how long, where it is written, how often it reports, evaluates and saves */
typedef struct {
  int steps;             /* optimizer steps in total */
  uint64_t seed;
  int threads;           /* 0: leave OpenMP/OpenBLAS defaults */
  char out[1024];        /* run directory: metrics.jsonl, summary.json, checkpoints/ */
  char resume[1024];
  char move_newer[1024]; /* with --resume: where OUT's newer (or another run's) checkpoints go; not saved */
  int eval_every;        /* 0 disables periodic evaluation (a final one still runs) */
  int eval_batches;      /* batches of `batch` windows for a validation loss */
  int save_every;        /* 0: only the final checkpoint */
  int keep;              /* checkpoints kept in OUT/checkpoints */
  int log_every;         /* steps between progress lines when stderr is not a terminal */
  int stop_after;        /* save and stop after this step (0: off); not saved in checkpoints */
  char tensorboard[1024]; /* TensorBoard event files' directory ("": none) */
} atoll_run_config;

/* parallel: the ranks of one job: data parallel, ZeRO, tensor and pipeline parallel
 * (src/parallel/dp.c, pipeline.c, tp.c, src/model/gpt.c) */
typedef struct {
  char mode[16];         /* --parallel: data-parallel mode, "ddp" */
  int zero_stage;        /* --zero: ZeRO stage 0..3 (--shard is its older name) */
  float bucket_mb;       /* gradient bucket size */
  char grad_dtype[8];    /* data-parallel gradient traffic: "fp32" or "bf16" (sums stay fp32) */
  char dp_comm[8];       /* a device run's data-parallel collectives: "host" (staged) or "nccl" */
  int tp, pp;            /* tensor-parallel ranks per pp_stage, pp_stages */
  int sequence_parallel; /* with tp > 1: activations cut by tokens */
  int virtual_stages;    /* interleaved pipeline: chunks per pp_stage */
  int microbatches;      /* per step per pipeline; 0: accum */
  char schedule[8];      /* "1f1b" or "gpipe" */
  float comm_timeout;    /* watchdog, seconds */
} atoll_parallel_config;

/* islands: DiLoCo (src/parallel/diloco.h), inside this job or as separate jobs joined
 * over the network (docs/islands.md, src/parallel/islands_net.c) */
typedef struct {
  int count;                 /* --islands */
  int sync_every, fragments, overlap, throttle;
  float outer_lr, outer_momentum, merge_alpha, wan_gbps, wan_latency_ms;
  char outer_optimizer[16];  /* "nesterov" or "sgd" */
  char outer_mode[8];        /* "sync": an outer step merges T = overlap steps after its sync;
                              * "async": at the first step from then on at which its exchange is done */
  char outer_dtype[8];       /* "fp32", "bf16", "int8", "fp4" */
  char data[8];              /* --island-data: "iid", "files" or "blocks" (src/train/island_data.c) */
  char join[256];            /* the coordinator's endpoint; "": islands inside this job */
  char key[1024];            /* --island-key: this island's secret key file (atoll keys) */
  char coordinator_key[1024]; /* the coordinator's public key file */
  char listen[256];          /* --island-listen: where this island's data socket listens (peers connect there) */
  char advertise[256];       /* --island-advertise: the endpoint told to peers, when listen is a wildcard ("": the bound one) */
  int id;                    /* --island-id: this island's slot of count (its data and its place in the sum) */
  int net_streams;           /* parallel streams (TCP connections) per peer */
  float net_timeout;         /* seconds any network wait may take before the exchange fails */
  /* with join: the island's inner phase ends before its --sync-every steps once it
   * trained phase_tokens tokens, or phase_seconds seconds of inner steps (0: off; the
   * rest of the phase's steps are skipped; docs/islands.md, "Phases in tokens or seconds") */
  uint64_t phase_tokens;
  float phase_seconds;
  int units;                 /* --data-units 1, with join: an open run's island; its data comes in units from
                              * the coordinator, one per inner phase (set by the coordinator's answer;
                              * docs/islands.md, "Open membership") */
} atoll_islands_config;

/* device: where the model lives and how its products are computed */
typedef struct {
  char type[8];      /* --device: "cpu", "cuda" or "shadow" (a test device; src/train/device.h) */
  char precision[8]; /* matrix products: "fp32" or "bf16" (bf16 inputs, fp32 accumulation) */
  float peak_tflops; /* one rank's device peak for MFU; 0: the GPU table's (src/train/device.c), else none */
} atoll_device_config;

/* init: a new run's starting point (src/train/init_from.c); ignored by a resumed run */
typedef struct {
  char from[1024];    /* --init-from: a checkpoint (or run directory): its weights */
  int optim;          /* --init-optim 1: also its AdamW moments */
  int step;           /* --init-step 1: and go on from its step (schedule, data windows, AdamW's count) */
  char from_hf[1024]; /* --init-from-hf: a Hugging Face directory (atoll export --to hf): weights */
} atoll_init_config;

typedef struct {
  atoll_shape model;              /* the network's shape and block design */
  atoll_optim_config optim;       /* the inner optimizer */
  atoll_data_config data;         /* what is read, in what batches */
  atoll_run_config run;           /* length, output, evaluation, checkpoints */
  atoll_parallel_config parallel; /* the ranks of one job */
  atoll_islands_config islands;   /* DiLoCo islands */
  atoll_device_config device;     /* where and in what precision */
  atoll_init_config init;         /* a new run's starting weights */
} atoll_config;

void atoll_config_defaults(atoll_config *c);
/* Sets one key from a string value (a flag: key without the dashes). */
int atoll_config_set(atoll_config *c, const char *key, const char *value, atoll_err *err);
/* Parses JSON text (as read from --config FILE, named `source` in messages) and applies it. */
int atoll_config_apply_text(atoll_config *c, const char *text, size_t len, const char *source,
                            atoll_err *err);
/* Checks the whole configuration (shapes, ranges). */
int atoll_config_check(const atoll_config *c, atoll_err *err);
/* One line per key with its help text. */
void atoll_config_print_help(FILE *f);

/* ---------------------------------------------------------------- training --- */

/* The ranks of the job (MPI; a world of one without a launcher), src/comm/comm.h. */
typedef struct atoll_comm atoll_comm;
/* Starts MPI if needed and returns the world; argc/argv may be NULL. */
int atoll_comm_init(atoll_comm **world, int *argc, char ***argv, atoll_err *err);
/* Frees a communicator; on the world also finalizes MPI if atoll_comm_init started it. */
void atoll_comm_free(atoll_comm *c);

/* Runs training as configured on every rank of world. resume_dir: a checkpoint (or run
 * directory) to continue from, or NULL. stop: optional flag set by a signal handler;
 * once nonzero the loop saves a checkpoint after the current step and returns 1.
 * Writes OUT/metrics.jsonl, OUT/summary.json and OUT/checkpoints/step_NNNNNNNN
 * (docs/formats.md). Returns 0 when done, 1 when stopped, ATOLL_TRAIN_ERROR on error
 * (message in err), ATOLL_TRAIN_QUIET on an error that another rank reports. */
#define ATOLL_TRAIN_ERROR (-1)
#define ATOLL_TRAIN_QUIET (-2)
int atoll_train_run(const atoll_config *cfg, atoll_comm *world, const char *resume_dir,
                    const volatile sig_atomic_t *stop, atoll_err *err);

/* ------------------------------------------------------------- checkpoints --- */

/* root: a checkpoint directory (returned as is) or a run's checkpoints folder: the
 * step_NNNNNNNN subdirectory with the highest step that holds a state.json. */
int atoll_ckpt_find_latest(const char *root, char *out, size_t outsz, atoll_err *err);
/* What a user may name as a checkpoint: a checkpoint directory, a checkpoints folder
 * (its latest) or a run directory (the latest under its checkpoints/). */
int atoll_ckpt_resolve(const char *path, char *out, size_t outsz, atoll_err *err);

/* ---------------------------------------------------------------- sampling --- */

typedef struct {
  const char *ckpt;   /* checkpoint directory (or a run directory: its latest) */
  const char *prompt; /* text fed before generation ("" starts from a newline), encoded
                         with the checkpoint's tokenizer */
  int tokens;         /* tokens to generate */
  float temperature;  /* 0: greedy */
  int top_k;          /* 0: the whole vocabulary */
  uint64_t seed;
  const char *tokenizer; /* NULL: the checkpoint's; else a tokenizer.json that must be it */
  int keep_special;      /* 1: print special added tokens' text; 0: leave them out of the
                            output, as Hugging Face's decode does (they still steer the model) */
  const char *device;    /* NULL or "cpu"; "cuda": one GPU (gpt2); "shadow": a test device */
} atoll_sample_opts;

/* Writes the prompt followed by the generated text to out. */
int atoll_sample(const atoll_sample_opts *o, FILE *out, atoll_err *err);

/* -------------------------------------------------------------------- data --- */

/* Byte-level tokenizer: token = byte value, vocabulary 256. */
#define ATOLL_BYTE_VOCAB 256
/* atoll prepare: tokenizes text files into DIR/train_NNN.bin and DIR/val_NNN.bin. */
int atoll_prepare(const char *const *files, int nfiles, const char *outdir, double val_fraction,
                  atoll_err *err);

/* What atoll prepare reads besides the paths (docs/formats.md, "What prepare reads"). */
typedef struct {
  const char *jsonl_field; /* JSON Lines key holding the text; NULL: "text" */
  int progress;            /* 1: a progress line on stderr (live on a terminal, else every 10 s) */
  int *nfiles_read;        /* if not NULL, receives the number of files read */
  const char *tokenizer;   /* a tokenizer.json (kept as DIR/tokenizer.json); NULL: bytes */
} atoll_prepare_input;

/* atoll prepare over files and directories (walked), plain text, gzip and JSON Lines,
 * streamed; in may be NULL. atoll_prepare is this with in = NULL for files only (a
 * directory is refused there). */
int atoll_prepare_inputs(const char *const *paths, int npaths, const atoll_prepare_input *in,
                         const char *outdir, double val_fraction, atoll_err *err);

#ifdef __cplusplus
}
#endif
#endif

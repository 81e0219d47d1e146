/* atoll plan: the planner's internal API (src/plan/).
 *
 *   catalog.c    models and accelerators, each constant with its source
 *   evaluate.c   one layout: FLOPs, memory per GPU, bytes per link, step time, from
 *                its parts flops.c, comm.c, time.c, memory.c (eval.h); assume.c
 *   search.c     enumeration and ranking of layouts; fewest GPUs; days by GPU count
 *   measure.c    this machine's CPU figures (sgemm peak, elementwise rate)
 *   calibrate.c  a measured atoll run (summary.json) against the plan of that run
 *   report.c     header, table and --json output
 *   explain.c    --explain and --versus in words
 *
 * Built as the library atoll_plan; the command line (flags, --config FILE) is in
 * src/cli/plan_*.c. Errors are returned (atoll_err), never exit the process.
 *
 * Units: bytes, seconds, FLOPs and FLOP/s, bytes/s, unless a name says otherwise.
 * Every modelling assumption lives in atoll_plan_assume (global) or in the accelerator
 * entry (per chip), is documented in docs/plan.md and printed by the tool. */
#ifndef ATOLL_PLAN_H
#define ATOLL_PLAN_H

#include "atoll/atoll.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* ------------------------------------------------------------------ model --- */

typedef enum {
  ATOLL_ARCH_GPT2 = 0, /* MHA with biases, 4x GELU MLP, LayerNorm, learned positions, tied head */
  ATOLL_ARCH_LLAMA = 1 /* GQA, SwiGLU MLP, RMSNorm, rotary positions, untied head, no biases */
} atoll_plan_arch;

typedef struct {
  char name[64];
  atoll_plan_arch arch;
  int layers, dim, heads, kv_heads, ffn, vocab;
  int context;         /* positions the model is built for (GPT-2's position table) */
  int seq;             /* default training sequence length */
  int tied;            /* LM head shares the token embedding */
  double batch_tokens; /* default global batch in tokens (0: atoll's rule, see catalog.c) */
  double token_budget; /* default training tokens (0: 20 per parameter, Chinchilla) */
  const char *source;
} atoll_plan_model;

/* Checks a shape; the message names the offending key. */
int atoll_plan_model_check(const atoll_plan_model *m, atoll_err *err);
/* Parameter counts: all, one block, token embedding (+ GPT-2 positions), LM head (0 if tied). */
double atoll_plan_params(const atoll_plan_model *m);
double atoll_plan_layer_params(const atoll_plan_model *m);
double atoll_plan_embed_params(const atoll_plan_model *m);
double atoll_plan_head_params(const atoll_plan_model *m);
/* Weights of one block that take part in matrix products (no biases, no norms). */
double atoll_plan_layer_matmul_params(const atoll_plan_model *m);
/* Model FLOPs per trained token at sequence length seq:
 *   6 x (L x block matmul weights + V x d)  +  6 x L x d x seq
 * i.e. forward and backward (2 + 4 FLOPs per weight per token) of every weight in a
 * matrix product, the LM head included and the embedding lookup not, plus causal
 * attention (QK^T and PV over seq/2 keys on average). For GPT-2 shapes this is
 * exactly atoll_flops_per_token. Recomputation is not counted: MFU uses this. */
double atoll_plan_flops_per_token(const atoll_plan_model *m, int seq);

/* -------------------------------------------------------------- hardware --- */

typedef struct {
  char name[32];
  const char *desc;
  int is_cpu;        /* fp32 arithmetic (atoll's CPU trainer); peak from a measurement */
  double peak_flops; /* dense bf16 FLOP/s (CPU: fp32 sgemm FLOP/s) */
  double mem_bytes;  /* memory per device */
  double hbm_bw;     /* device memory bandwidth, bytes/s */
  int gpus_per_node;
  double intra_bw;  /* per device, per direction, inside a node (NVLink), bytes/s */
  double intra_lat; /* per ring step inside a node, s */
  double inter_bw;  /* per device, between nodes (its NIC), bytes/s */
  double inter_lat; /* per ring step between nodes, s */
  /* efficiency assumptions of this chip (documented in catalog.c and docs/plan.md) */
  double eta_mm;         /* achievable fraction of peak in large matrix products */
  double eta_attn;       /* same for fused (flash) attention at head dim -> infinity */
  double attn_hd_half;   /* head dim at which attention reaches half of eta_attn */
  double attn_block;     /* attention tile: causal masking wastes about block/seq */
  double elem_bw;        /* bytes/s that elementwise kernels (norms, activations) stream */
  double layer_overhead; /* fixed seconds per block per micro-batch (launches, syncs) */
  double reserved;       /* bytes per device not available to training (runtime, NCCL, fragmentation) */
  const char *source;
  /* matrix-product shape model (src/plan/gemm.c; 0 sms: no tiles, the CPU) */
  int sms;           /* streaming multiprocessors: one output tile each per wave */
  double mm_k_over;  /* fixed cost of one output tile, in elements of K (pipeline fill, epilogue) */
  double clock_eff;  /* sustained share of the boost clock in a training step (power cap); fitted, see docs/plan.md */
} atoll_plan_accel;

typedef struct {
  atoll_plan_accel acc;
  int gpus; /* devices in the cluster (all islands together) */
  int gpus_per_node;
  double intra_bw, intra_lat, inter_bw, inter_lat;
  int islands;    /* DiLoCo islands (1: one cluster) */
  double wan_bw;  /* per island, bytes/s */
  double wan_lat; /* per ring step across islands, s */
  int diloco_h;   /* inner steps between outer syncs */
} atoll_plan_cluster;

typedef enum { ATOLL_PREC_BF16 = 0, ATOLL_PREC_FP32 = 1 } atoll_plan_precision;

typedef struct {
  int seq;             /* tokens per sequence */
  double batch_tokens; /* global batch, tokens per optimizer step (all islands) */
  double token_budget; /* tokens to train on */
  atoll_plan_precision precision;
  double grad_bytes; /* bytes of a gradient element on the data-parallel wire (--grad-dtype);
                        0: as the precision */
} atoll_plan_train;

/* Global modelling assumptions (defaults in assume.c: atoll_plan_assume_defaults). */
typedef struct {
  double link_eff;     /* fraction of a link's bandwidth a ring collective achieves */
  double tp_overlap;   /* fraction of tensor-parallel communication hidden behind compute */
  double cp_overlap;   /* same for context-parallel communication */
  double dp_overlap;   /* fraction of the backward (forward) window data-parallel traffic can use */
  double adam_bytes;   /* bytes of memory traffic per parameter in one AdamW update */
  double diloco_bytes; /* bytes per parameter of the outer (pseudo-)gradient sent across islands */
  double diloco_util;  /* utilization target for the WAN bandwidth figure */
  double tp_regather;  /* 1: sequence-parallel backward re-gathers the column-parallel
                          inputs (Megatron, saves memory); 0: keeps them (atoll) */
  double attn_fused;   /* 1: fused (flash) attention; 0: scores materialized (QK^T and PV as batched
                          products, softmax and dropout streamed through HBM: Megatron-LM before 2023) */
  double seq_par;      /* 1: sequence parallel (norms and residuals on 1/tp of the tokens); 0: every
                          TP rank runs them on all tokens (Megatron-LM before 2022) */
} atoll_plan_assume;

void atoll_plan_assume_defaults(atoll_plan_assume *a);

/* One named assumption, for printing: value, unit, meaning. */
typedef struct {
  const char *name;
  double value;
  const char *unit;
  const char *what;
} atoll_plan_named;
/* Fills out[] (capacity cap) with every assumption in force; returns the count. */
int atoll_plan_assumptions(const atoll_plan_cluster *c, const atoll_plan_assume *a, atoll_plan_named *out, int cap);

/* ----------------------------------------------------------------- catalog --- */

int atoll_plan_model_count(void);
const atoll_plan_model *atoll_plan_model_at(int i);
int atoll_plan_accel_count(void);
const atoll_plan_accel *atoll_plan_accel_at(int i);
/* Looks a name up (case-insensitive, '_' = '-'); the error lists the known names. */
int atoll_plan_model_find(const char *name, atoll_plan_model *out, atoll_err *err);
int atoll_plan_accel_find(const char *name, atoll_plan_accel *out, atoll_err *err);
/* A cluster of n devices with the accelerator's default node and network. */
void atoll_plan_cluster_default(atoll_plan_cluster *c, const atoll_plan_accel *a, int n);

/* ------------------------------------------------------------------ layout --- */

typedef enum { ATOLL_RECOMPUTE_NONE = 0, ATOLL_RECOMPUTE_SELECTIVE = 1, ATOLL_RECOMPUTE_FULL = 2 } atoll_plan_recompute;
const char *atoll_plan_recompute_name(int r);

typedef struct {
  int dp, tp, pp, cp; /* dp: data-parallel size within one island */
  int zero_stage;     /* ZeRO stage 0..3 over dp (and cp) */
  int mb;             /* sequences per micro-batch */
  int chunks;         /* interleaved pipeline: chunks per pp_stage (--interleave) */
  int recompute;      /* atoll_plan_recompute */
  int island_sync;    /* islands > 1: 0 DiLoCo (outer sync every H steps), 1 data parallel
                           across the islands (gradients all-reduced over the WAN every step) */
} atoll_plan_layout;

/* Link classes of a parallel axis. */
enum { ATOLL_LINK_NONE = 0, ATOLL_LINK_INTRA = 1, ATOLL_LINK_INTER = 2, ATOLL_LINK_MIXED = 3, ATOLL_LINK_WAN = 4 };
const char *atoll_plan_link_name(int kind);

/* Everything the cost model says about one layout. Memory is for the most loaded GPU
 * (first or last pp_stage); bytes are sent per GPU per optimizer step. */
typedef struct {
  atoll_plan_layout lay;
  int valid; /* 0: impossible shape (why says which) */
  int fits;  /* memory_total <= device memory */
  char why[200];
  int gpus;            /* devices used (all islands) */
  int seqs_per_rank;   /* sequences per data-parallel rank per step */
  int micro_batches;   /* micro-batches per replica per step (m) */
  double batch_tokens; /* effective global batch (rounded to whole sequences per rank) */
  int pp_stage_layers_first, pp_stage_layers_last; /* blocks on the first and the last pp_stage */
  /* memory per GPU, bytes */
  double mem_weights, mem_grads, mem_optim, mem_act, mem_buffers, mem_outer, mem_reserved, mem_total;
  int mem_pp_stage;      /* 0: the first pp_stage binds, 1: the last */
  double params_per_gpu; /* parameters held (before ZeRO sharding) on the binding pp_stage */
  /* communication: bytes sent per GPU per step, link, seconds spent, seconds exposed */
  double bytes_tp, bytes_cp, bytes_pp, bytes_dp, bytes_wan;
  int link_tp, link_cp, link_pp, link_dp;
  double bw_tp, bw_cp, bw_pp, bw_dp; /* effective bytes/s of each axis's collectives */
  double t_tp, t_cp, t_pp, t_dp;     /* seconds per step of each axis's traffic */
  double x_tp, x_cp, x_pp, x_dp;     /* of which exposed (not hidden behind compute) */
  /* time */
  double t_layer_compute; /* one block, one micro-batch: matmuls + attention + elementwise + overhead */
  double t_layer_mm, t_layer_attn, t_layer_elem; /* its parts (with recomputation) */
  double t_head_mb;                              /* LM head, final norm and loss, one micro-batch */
  double t_pp_stage_mb;                          /* slowest pp_stage, one micro-batch, incl. exposed TP/CP traffic */
  double t_compute;                              /* per step: micro_batches x pure compute of the slowest pp_stage */
  double bubble;                                 /* (p-1) / (v m) */
  double t_bubble;                               /* seconds of pipeline bubble per step */
  double t_optim;
  double t_outer;          /* island sync: DiLoCo outer sync per sync, or the WAN all-reduce per step */
  double t_outer_step;     /* what it adds to each step (amortized over H, or exposed) */
  double step_s;           /* seconds per optimizer step (DiLoCo sync amortized) */
  double model_flops_step; /* per GPU, per step */
  double hw_flops_step;    /* per GPU, per step, with recomputation */
  double tflops_per_gpu, mfu, hfu;
  double tokens_per_s, days;
  double wan_util;      /* islands: step without the sync / step */
  double wan_bw_needed; /* islands: WAN bytes/s per island for diloco_util */
} atoll_plan_result;

/* ---------------------------------------------------------------- failures --- */

/* Failures, checkpoints and restarts of a synchronous job (src/plan/failure.c,
 * docs/plan.md "Failures and goodput"). Defaults: atoll_plan_failure_defaults, derived
 * from Llama 3's 54 days on 16,384 H100s (arXiv 2407.21783, section 3.3.4). */
typedef struct {
  double accel_per_kday;   /* unexpected interruptions per 1000 accelerator-days (GPU faults) */
  double node_per_kday;    /* per 1000 node-days (host, network, storage, software) */
  double planned_per_kday; /* planned stops (maintenance, upgrades) per 1000 node-days */
  double ckpt_bw;          /* bytes/s the job's storage writes (and reads) a checkpoint at, all ranks together */
  double restart_s;        /* a restart's fixed cost: detect, reschedule, initialize (not reading the checkpoint) */
  double ckpt_every_s;     /* 0: the optimal interval (Daly); else checkpoint this often */
} atoll_plan_failure;

void atoll_plan_failure_defaults(atoll_plan_failure *f);

/* Expected goodput of a job of `gpus` accelerators on `nodes` nodes with `state_bytes`
 * of checkpoint and `step_s` per step (checkpoints fall on step boundaries; 0: any time). */
typedef struct {
  double failures_per_day, planned_per_day;
  double mtbf_s;        /* mean time between unexpected interruptions (0 rate: infinite) */
  double state_bytes;   /* one checkpoint: weights and optimizer state */
  double write_s;       /* C: writing it (the job waits) */
  double restart_s;     /* R: a restart, reading the checkpoint back included */
  double young_s;       /* sqrt(2 C M) (Young 1974) */
  double interval_s;    /* the interval used: Daly's optimum (or --ckpt-every), in whole steps */
  double goodput;       /* expected share of wall time that trains (Daly's model, planned stops included) */
} atoll_plan_goodput;

/* Daly (2006) higher-order optimum interval between checkpoints: sqrt(2CM) (1 +
 * sqrt(C/2M)/3 + (C/2M)/9) - C for C < 2M, else M. */
double atoll_plan_daly_interval(double write_s, double mtbf_s);
/* Daly's expected share of wall time spent computing with exponential failures of mean
 * M, checkpoints of C every tau of work and restarts of R: tau / (M e^(R/M) (e^((tau+C)/M) - 1)). */
double atoll_plan_daly_goodput(double tau, double write_s, double restart_s, double mtbf_s);
void atoll_plan_goodput_eval(const atoll_plan_failure *f, double gpus, double nodes, double state_bytes,
                             double step_s, atoll_plan_goodput *g);
/* Bytes of one checkpoint of model m: weights in the training precision plus AdamW's
 * state (bf16 mixed: 2 + 12 per parameter, the fp32 master, m and v; fp32: 4 + 8). */
double atoll_plan_checkpoint_bytes(const atoll_plan_model *m, atoll_plan_precision p);

typedef struct {
  const atoll_plan_model *model;
  const atoll_plan_cluster *cluster;
  const atoll_plan_train *train;
  const atoll_plan_assume *assume;
  const atoll_plan_failure *failure; /* NULL: no failure model (goodput not reported) */
} atoll_plan_ctx;

/* The goodput of layout r under ctx->failure (0 and g zeroed when ctx has none). */
int atoll_plan_goodput_of(const atoll_plan_ctx *ctx, const atoll_plan_result *r, atoll_plan_goodput *g);

/* Evaluates one layout: fills r (r->valid = 0 with r->why for an impossible layout,
 * r->fits = 0 when it does not fit in memory). Never fails otherwise. */
void atoll_plan_evaluate(const atoll_plan_ctx *ctx, const atoll_plan_layout *lay, atoll_plan_result *r);

/* Seconds of `batch` independent matrix products [M x K] @ [K x N] with elements of
 * `elem` bytes on accelerator x: tile and wave quantization over the SMs, a fixed
 * cost per tile, the ceiling eta_mm x clock_eff of peak, and the HBM roofline
 * (src/plan/gemm.c). On a CPU (sms 0): max(FLOPs / (peak x eta_mm), bytes / bw). */
double atoll_plan_gemm_seconds(const atoll_plan_accel *x, double M, double N, double K, double batch, double elem);
/* The share of the ceiling that shape reaches (tile x wave x K efficiency, at most 1). */
double atoll_plan_gemm_shape_eff(const atoll_plan_accel *x, double M, double N, double K, double batch);

/* Ring collective cost (alpha-beta): seconds for n ranks on data of `bytes` (the
 * whole buffer), per-rank bandwidth bw and per-step latency lat. */
double atoll_plan_ring_allreduce_s(int n, double bytes, double bw, double lat);
double atoll_plan_ring_gather_s(int n, double bytes, double bw, double lat); /* all-gather or reduce-scatter */
/* Bytes one rank sends in a ring all-reduce: 2(n-1)/n x bytes; all-gather/reduce-scatter: (n-1)/n. */
double atoll_plan_ring_allreduce_bytes(int n, double bytes);
double atoll_plan_ring_gather_bytes(int n, double bytes);
/* Activation bytes one GPU keeps per token per block (tp shards, recompute policy). */
double atoll_plan_act_bytes_per_token(const atoll_plan_model *m, int tp, int recompute, atoll_plan_precision p);

/* ------------------------------------------------------------------ search --- */

/* What the caller fixes (0 or -1: search). */
typedef struct {
  int dp, tp, pp, cp; /* 0: search */
  int zero_stage;     /* -1: search */
  int mb;             /* 0: search */
  int chunks;         /* 0: search */
  int recompute;      /* -1: search */
  int island_sync;    /* -1: search */
} atoll_plan_fixed;

void atoll_plan_fixed_none(atoll_plan_fixed *f);

typedef struct {
  atoll_plan_result *best; /* one per distinct (dp, tp, pp, cp) mesh, best settings, fastest first */
  int nbest;
  atoll_plan_result smallest; /* of all valid layouts, the one needing the least memory */
  int nvalid, nfit;
  long evaluated;
} atoll_plan_ranking;

/* Enumerates the layouts that use the cluster (or the fixed sizes) and ranks the
 * meshes by time per token. Fails (with a message) only for impossible requests:
 * a fixed size that cannot divide, a layout larger than the cluster. When nothing
 * fits, nfit = 0 and `smallest` says how much memory the lightest layout needs. */
int atoll_plan_search(const atoll_plan_ctx *ctx, const atoll_plan_fixed *fix, atoll_plan_ranking *out, atoll_err *err);
void atoll_plan_ranking_free(atoll_plan_ranking *r);

/* The fewest devices that hold the model for training at data-parallel size 1 and
 * one sequence per step (TP inside a node, any PP, CP 1), on this accelerator. */
int atoll_plan_fewest(const atoll_plan_ctx *ctx, atoll_plan_result *out, atoll_err *err);

/* The best layout at each device count in gpus[0..n): out[i].valid = 0 (with why)
 * where nothing fits or no layout divides. Answers "why 10,000+ GPUs": days to train
 * the token budget by GPU count. */
int atoll_plan_sweep(const atoll_plan_ctx *ctx, const int *gpus, int n, atoll_plan_result *out, atoll_err *err);

/* ------------------------------------------------------------ CPU figures --- */

typedef struct {
  double sgemm_flops; /* cblas_sgemm FLOP/s, square 1024, at the current thread count */
  double elem_bw;     /* bytes/s of atoll's GELU forward+backward kernels */
  int threads;
} atoll_plan_cpu_measure;

/* Measures this machine with the current OpenMP/OpenBLAS thread count (about 1 s). */
int atoll_plan_measure_cpu(atoll_plan_cpu_measure *out, atoll_err *err);
/* Reads the fp32 matmul peak (GFLOP/s) from a bench/run.sh results file: "peak_gflops":
 * {"fp32"} (bench/README.md), or older files' top-level "sgemm_peak_gflops" or "sgemm":
 * {"peak_gflops"}; and the thread count it was measured at ("sgemm": {"threads"} or
 * "threads"; 0 when absent). */
int atoll_plan_read_bench(const char *path, double *gflops, int *threads, atoll_err *err);
/* A CPU's fp32 peak, GFLOP/s, as --cpu-gflops and a results file may give it: from a
 * thousandth of a GFLOP/s to ten PFLOP/s */
#define ATOLL_PLAN_CPU_GFLOPS_MIN 1e-3
#define ATOLL_PLAN_CPU_GFLOPS_MAX 1e7
/* Fills the CPU accelerator's peak (and elementwise rate, derived from it unless
 * measured) for a device of `threads` cores given its sgemm FLOP/s. */
void atoll_plan_cpu_set(atoll_plan_accel *a, double sgemm_flops, double elem_bw);

/* ------------------------------------------------------------- calibrate --- */

typedef struct {
  atoll_plan_model model;
  atoll_plan_train train;
  atoll_plan_layout layout;
  int threads;
  double measured_step_s, measured_tokens_per_s;
  double predicted_step_s;
  double gap; /* predicted / measured - 1 */
  atoll_plan_result result;
} atoll_plan_calibration;

/* Reads an atoll run's summary.json into a model, training settings and layout of one
 * CPU process; the caller sets the CPU figures and calls atoll_plan_calibrate_predict. */
int atoll_plan_calibrate_read(const char *summary_path, atoll_plan_calibration *cal, atoll_err *err);
void atoll_plan_calibrate_predict(atoll_plan_calibration *cal, const atoll_plan_cluster *cpu,
                                  const atoll_plan_assume *a);

/* ----------------------------------------------------------------- report --- */

/* Human units. */
const char *atoll_plan_fmt_bytes(double b, char *buf, size_t n);   /* "61.2 GiB" */
const char *atoll_plan_fmt_count(double x, char *buf, size_t n);   /* "405.9B" */
const char *atoll_plan_fmt_seconds(double s, char *buf, size_t n); /* "6.52 s", "41 ms" */
const char *atoll_plan_fmt_days(double d, char *buf, size_t n);    /* "61.1", "0.05" */

void atoll_plan_print_header(FILE *f, const atoll_plan_ctx *ctx);
void atoll_plan_print_table(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *rows, int n);
void atoll_plan_print_detail(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *r);
void atoll_plan_print_assumptions(FILE *f, const atoll_plan_ctx *ctx);
void atoll_plan_print_explain(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_ranking *rk);
/* Why the planner's first (w) beats a given layout (r, e.g. a published one): the
 * ratio of time per token and the step's parts that differ most, with their settings. */
void atoll_plan_print_versus(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *w,
                             const atoll_plan_result *r);
cJSON *atoll_plan_result_json(const atoll_plan_ctx *ctx, const atoll_plan_result *r);
cJSON *atoll_plan_context_json(const atoll_plan_ctx *ctx);
/* The goodput of r under ctx->failure: two lines of the report, and its JSON object
 * (nothing, NULL, when ctx has no failure model). src/plan/failure.c */
void atoll_plan_print_goodput(FILE *f, const atoll_plan_ctx *ctx, const atoll_plan_result *r);
cJSON *atoll_plan_goodput_json(const atoll_plan_ctx *ctx, const atoll_plan_result *r);

#endif

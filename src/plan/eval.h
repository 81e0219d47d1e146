/* The parts of the cost model of one layout (atoll_plan_evaluate), and what they hand
 * each other. Internal to src/plan; the planner's API is plan.h.
 *
 *   evaluate.c  the layout's checks and batch split; calls the parts in order
 *   flops.c     compute of one block and of the model's ends; FLOPs and rates
 *   comm.c      ring collectives, the links of each mesh axis, traffic per axis
 *   time.c      the split into pp_stages, the pipeline schedule, the step
 *   memory.c    activations, parameters and memory per GPU
 *   assume.c    the global assumptions and their names */
#ifndef ATOLL_PLAN_EVAL_H
#define ATOLL_PLAN_EVAL_H

#include "atoll/plan.h"

/* Bytes of one activation, weight or gradient element; of AdamW's state per parameter
 * (fp32 moments, plus the fp32 master weights in mixed precision). */
static inline double atoll_plan_elem_bytes(atoll_plan_precision p) { return p == ATOLL_PREC_FP32 ? 4.0 : 2.0; }
/* Bytes of a gradient element in the data-parallel reduction: --grad-dtype, else the
 * precision's (atoll's CPU runs at bf16 keep fp32 gradients unless --grad-dtype bf16). */
static inline double atoll_plan_grad_elem_bytes(const atoll_plan_train *t) {
  return t->grad_bytes > 0 ? t->grad_bytes : atoll_plan_elem_bytes(t->precision);
}
static inline double atoll_plan_optim_bytes(atoll_plan_precision p) { return p == ATOLL_PREC_FP32 ? 8.0 : 12.0; }

/* The links of one mesh axis, as its ring collectives see them. */
typedef struct {
  double bw, lat;
  int kind; /* ATOLL_LINK_* */
} atoll_plan_link;

/* Per-rank widths of one block under tensor parallelism. */
typedef struct {
  double h, hd, hq, kv, f, heads; /* h: full width; hd: head dim; hq: local query width; kv: local K (=V) width;
                                     f: local FFN width; heads: local heads */
} atoll_plan_widths;

atoll_plan_widths atoll_plan_local_widths(const atoll_plan_model *m, int tp);

/* One block and the model's ends, one micro-batch on one GPU: seconds and FLOPs. */
typedef struct {
  double layer;            /* one block, compute only */
  double mm, attn, elem;   /* its parts */
  double head;             /* LM head + loss (last pp_stage) */
  double embed;            /* embedding (first pp_stage) */
  double col_bwd;          /* backward of the block's column-parallel products (hides TP traffic) */
  double head_bwd;         /* backward of the LM head's product */
  double mlp_bwd;          /* backward of the MLP's products (runs before the block's attention backward) */
  double q_bwd;            /* the query projection's share of the fused QKV backward */
  double layer_hw_flops, head_flops;
  double tp_layer, tp_head;   /* TP collective seconds per block / for the head */
  double tpx_layer, tpx_head; /* of which exposed */
  double cp_layer, cpx_layer; /* CP collective seconds per block; of which exposed */
  double bytes_tp_layer, bytes_tp_head, bytes_cp_layer;
  double tp_embed, bytes_tp_embed;
} atoll_plan_block;

/* What the parts of one evaluation share. */
typedef struct {
  const atoll_plan_ctx *ctx;
  const atoll_plan_layout *lay;
  int islands;
  double gpus;      /* devices used, all islands */
  double tokens_mb; /* tokens of one micro-batch on one GPU: mb x seq / cp */
  atoll_plan_link link_tp, link_cp, link_pp, link_dp;
  atoll_plan_block block;
  /* pp_stages: blocks on the first and on the last; one micro-batch's seconds on them
   * (exposed TP and CP traffic included) and on the slowest */
  int first_layers, last_layers;
  double t_first, t_last, t_stage;
  /* the slowest pp_stage, the one modelled: its blocks, whether it runs the LM head
   * and the embedding, its compute and TP/CP seconds per micro-batch */
  double stage_layers;
  int head_here, embed_here;
  double stage_compute, stage_tp, stage_tpx, stage_cp;
  double t_pipe;                       /* the pipeline schedule of one step */
  double params_first, params_last;    /* parameters on the first and last pp_stage, before ZeRO */
  double params_max;                   /* of the two, the larger */
  int shard_ranks;                     /* ranks that reduce gradients and ZeRO shards over: dp x cp */
  double fwd_window, bwd_window;       /* seconds of a micro-batch's forward, backward DP traffic can hide in */
} atoll_plan_eval;

/* flops.c */
void atoll_plan_block_compute(atoll_plan_eval *e);
void atoll_plan_rates(const atoll_plan_eval *e, atoll_plan_result *r);

/* comm.c */
void atoll_plan_axis_links(atoll_plan_eval *e, atoll_plan_result *r);
void atoll_plan_block_comm(atoll_plan_eval *e);
void atoll_plan_comm_tp_cp(const atoll_plan_eval *e, atoll_plan_result *r);
void atoll_plan_comm_dp(atoll_plan_eval *e, atoll_plan_result *r);
void atoll_plan_comm_islands(const atoll_plan_eval *e, double step_inner, atoll_plan_result *r);

/* time.c: 0, or -1 with r invalid when no split into pp_stages of whole chunks exists */
int atoll_plan_split_stages(atoll_plan_eval *e, atoll_plan_result *r);
void atoll_plan_pipeline(atoll_plan_eval *e, atoll_plan_result *r);
void atoll_plan_step(atoll_plan_eval *e, atoll_plan_result *r);

/* memory.c */
void atoll_plan_stage_params(atoll_plan_eval *e);
void atoll_plan_memory(const atoll_plan_eval *e, atoll_plan_result *r);

/* evaluate.c: marks r impossible, why = fmt with two integers; returns -1 */
int atoll_plan_invalid(atoll_plan_result *r, const char *fmt, int a, int b);

#endif

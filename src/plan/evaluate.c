/* The cost model of one training step of one layout: the layout's checks and its
 * split of the global batch, then the parts in order (eval.h): compute per block
 * (flops.c), traffic per mesh axis (comm.c), the pp_stages and the step (time.c),
 * memory (memory.c), FLOPs and rates. docs/plan.md explains every term. */
#include "plan/eval.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int atoll_plan_invalid(atoll_plan_result *r, const char *fmt, int a, int b) {
  r->valid = 0;
  r->fits = 0;
  snprintf(r->why, sizeof r->why, fmt, a, b);
  return -1;
}

/* The layout's sizes against the model's shape and the sequence. */
static int check_sizes(const atoll_plan_ctx *ctx, const atoll_plan_layout *lay, atoll_plan_result *r) {
  const atoll_plan_model *m = ctx->model;
  int tp = lay->tp, pp = lay->pp, cp = lay->cp, seq = ctx->train->seq;
  if (tp < 1 || pp < 1 || cp < 1 || lay->dp < 1 || lay->chunks < 1 || lay->mb < 1)
    return atoll_plan_invalid(r, "sizes must be at least 1", 0, 0);
  if (m->heads % tp) return atoll_plan_invalid(r, "tp %d does not divide the %d attention heads", tp, m->heads);
  if (tp > m->kv_heads ? tp % m->kv_heads : m->kv_heads % tp)
    return atoll_plan_invalid(r, "tp %d and the %d KV heads: one must divide the other", tp, m->kv_heads);
  if (m->ffn % tp) return atoll_plan_invalid(r, "tp %d does not divide the FFN width %d", tp, m->ffn);
  if (pp > m->layers)
    return atoll_plan_invalid(r, "pp %d: more pipeline stages than the model's %d layers", pp, m->layers);
  if (cp > 1 && seq % (2 * cp))
    return atoll_plan_invalid(r, "cp %d: the sequence length %d must split into 2 x cp equal chunks", cp, seq);
  if (cp > seq) return atoll_plan_invalid(r, "cp %d is larger than the sequence length %d", cp, seq);
  if (lay->zero_stage < 0 || lay->zero_stage > 3 || lay->recompute < 0 || lay->recompute > 2)
    return atoll_plan_invalid(r, "zero must be 0..3 and recompute none|selective|full", 0, 0);
  if (lay->chunks > 1 && pp == 1)
    return atoll_plan_invalid(r, "interleave %d needs pipeline parallelism (pp > 1)", lay->chunks, 0);
  return 0;
}

/* Whole sequences per data-parallel rank, the global batch kept within 5%; then
 * micro-batches of lay->mb sequences. */
static int split_batch(atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_layout *lay = e->lay;
  int seq = e->ctx->train->seq, islands = e->islands, dp = lay->dp;
  double seqs = e->ctx->train->batch_tokens / seq;
  double per_rank = floor(seqs / ((double)islands * dp) + 0.5);
  if (per_rank < 1 || fabs(per_rank * islands * dp / seqs - 1) > 0.05) {
    snprintf(r->why, sizeof r->why, "the batch of %.0f sequences does not split evenly into %d data-parallel ranks%s",
             seqs, islands * dp, islands > 1 ? " over all islands" : "");
    r->valid = 0;
    return -1;
  }
  if (per_rank > 1e9) per_rank = 1e9;
  r->seqs_per_rank = (int)per_rank;
  if (r->seqs_per_rank % lay->mb) {
    snprintf(r->why, sizeof r->why, "micro-batch %d does not divide the %d sequences per data-parallel rank", lay->mb,
             r->seqs_per_rank);
    r->valid = 0;
    return -1;
  }
  r->micro_batches = r->seqs_per_rank / lay->mb;
  r->batch_tokens = per_rank * dp * islands * (double)seq;
  return 0;
}

void atoll_plan_evaluate(const atoll_plan_ctx *ctx, const atoll_plan_layout *lay, atoll_plan_result *r) {
  memset(r, 0, sizeof *r);
  r->lay = *lay;
  r->valid = 1;
  if (check_sizes(ctx, lay, r)) return;
  atoll_plan_eval e = {.ctx = ctx, .lay = lay};
  e.islands = ctx->cluster->islands > 0 ? ctx->cluster->islands : 1;
  e.gpus = (double)lay->dp * lay->tp * lay->pp * lay->cp * e.islands;
  if (e.gpus > 1e9) {
    atoll_plan_invalid(r, "layout too large", 0, 0);
    return;
  }
  r->gpus = (int)e.gpus;
  if (split_batch(&e, r)) return;
  e.tokens_mb = (double)lay->mb * ctx->train->seq / lay->cp;
  atoll_plan_axis_links(&e, r);
  atoll_plan_block_compute(&e);
  atoll_plan_block_comm(&e);
  if (atoll_plan_split_stages(&e, r)) return;
  atoll_plan_pipeline(&e, r);
  atoll_plan_comm_tp_cp(&e, r);
  atoll_plan_stage_params(&e);
  atoll_plan_comm_dp(&e, r);
  atoll_plan_step(&e, r);
  atoll_plan_memory(&e, r);
  atoll_plan_rates(&e, r);
}

/* Communication of one layout, per mesh axis. The mesh orders ranks [TP, CP, PP, DP]
 * from fastest-varying (as Llama 3): a group of `size` ranks `stride` apart stays
 * inside a node when stride x size <= GPUs per node. Collectives are rings,
 * alpha-beta: (n-1) steps of latency, (n-1)/n of the buffer per rank for all-gather /
 * reduce-scatter, twice that for all-reduce.
 *
 *   TP        Megatron tensor parallel with sequence parallel: per block 10
 *             all-gathers / reduce-scatters of tokens x d activations (4 forward,
 *             6 backward, 4 more under full recomputation); 4 of the backward ones
 *             hide behind the column-parallel backward matmuls (tp_overlap).
 *   CP        Llama 3's all-gather context parallel: K and V gathered per block
 *             (forward, again in backward) and dK, dV reduce-scattered; the
 *             forward's exposed, the backward's behind backward matmuls (cp_exposed).
 *   PP        activations between pp_stages (time.c schedules them).
 *   DP/ZeRO   ZeRO-0: gradient all-reduce once per step; 1: reduce-scatter grads,
 *             all-gather weights once per step; 2: reduce-scatter every micro-batch;
 *             3: also all-gather weights every micro-batch, forward and backward.
 *             Traffic hides behind the backward (forward) of a micro-batch, up to
 *             dp_overlap of that window.
 *   islands   DiLoCo: islands train alone for H steps; then the outer gradient
 *             (every parameter) is all-reduced across islands over the WAN. Or data
 *             parallel across them: gradients over the WAN every step. */
#include "plan/eval.h"

#include <math.h>

/* --------------------------------------------------------------- collectives --- */

double atoll_plan_ring_allreduce_bytes(int n, double bytes) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0; }
double atoll_plan_ring_gather_bytes(int n, double bytes) { return n > 1 ? (double)(n - 1) / n * bytes : 0; }

double atoll_plan_ring_allreduce_s(int n, double bytes, double bw, double lat) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * lat + atoll_plan_ring_allreduce_bytes(n, bytes) / bw;
}

double atoll_plan_ring_gather_s(int n, double bytes, double bw, double lat) {
  if (n <= 1) return 0;
  return (double)(n - 1) * lat + atoll_plan_ring_gather_bytes(n, bytes) / bw;
}

/* The links a group of `size` ranks `stride` apart uses. Inside a node: NVLink. Across
 * nodes with k members per node: NCCL drives k NICs at once (one ring per NIC), so the
 * group's bandwidth per rank is k NICs, at most NVLink. */
static atoll_plan_link axis_link(const atoll_plan_cluster *c, const atoll_plan_assume *a, long stride, long size) {
  atoll_plan_link l = {0, 0, ATOLL_LINK_NONE};
  if (size <= 1) return l;
  long per_node = c->gpus_per_node;
  if (stride * size <= per_node && per_node % (stride * size) == 0) {
    l.bw = c->intra_bw * a->link_eff;
    l.lat = c->intra_lat;
    l.kind = ATOLL_LINK_INTRA;
  } else if (stride >= per_node || per_node % stride) {
    l.bw = c->inter_bw * a->link_eff;
    l.lat = c->inter_lat;
    l.kind = ATOLL_LINK_INTER;
  } else {
    double nics = (double)(per_node / stride);
    double bw = nics * c->inter_bw < c->intra_bw ? nics * c->inter_bw : c->intra_bw;
    l.bw = bw * a->link_eff;
    l.lat = c->inter_lat;
    l.kind = ATOLL_LINK_MIXED;
  }
  return l;
}

void atoll_plan_axis_links(atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_cluster *c = e->ctx->cluster;
  const atoll_plan_assume *a = e->ctx->assume;
  const atoll_plan_layout *lay = e->lay;
  e->link_tp = axis_link(c, a, 1, lay->tp);
  e->link_cp = axis_link(c, a, lay->tp, lay->cp);
  e->link_pp = axis_link(c, a, (long)lay->tp * lay->cp, lay->pp);
  e->link_dp = axis_link(c, a, (long)lay->tp * lay->cp * lay->pp, lay->dp);
  r->link_tp = e->link_tp.kind, r->link_cp = e->link_cp.kind, r->link_pp = e->link_pp.kind;
  r->link_dp = e->link_dp.kind;
  r->bw_tp = e->link_tp.bw, r->bw_cp = e->link_cp.bw, r->bw_pp = e->link_pp.bw, r->bw_dp = e->link_dp.bw;
}

/* ------------------------------------------------------------- TP and CP --- */

/* Exposed seconds of one block's CP collectives (each g seconds), by what waits for
 * each: the forward all-gathers of K and V (n_fwd: the forward's, and the recomputed
 * forward's under full recomputation) feed the attention right after them (Llama 3:
 * "exposed in the critical path"); the backward's re-gather of K and V depends on
 * nothing the backward computes, so it is issued when the block's backward starts and
 * runs behind its MLP backward; the reduce-scatter of dK and dV is needed only by the
 * K and V projections' backward, so it runs behind the query projection's. Each window
 * hides traffic up to tp_overlap of it (NCCL kernels take SMs, as for TP); cp_overlap
 * hides a further share of what is left. */
static double cp_exposed(const atoll_plan_assume *a, const atoll_plan_block *b, double g, double n_fwd) {
  double x = n_fwd * g + fmax(0, g - a->tp_overlap * b->mlp_bwd) + fmax(0, g - a->tp_overlap * b->q_bwd);
  return (1 - a->cp_overlap) * x;
}

/* TP with sequence parallel (Megatron): per block, forward all-gathers the input of
 * the two column-parallel products and reduce-scatters the output of the two
 * row-parallel ones (4); backward all-gathers the row-parallel output gradients (2,
 * exposed), and for each column-parallel product re-gathers its input during its
 * data-gradient matmul and reduce-scatters its input gradient during its weight-
 * gradient matmul (4, hidden up to tp_overlap of those matmuls). Full recomputation
 * repeats the forward's 4. CP: all-gather K and V of the whole sequence (forward,
 * again for backward), reduce-scatter their gradients (cp_exposed says what waits). */
void atoll_plan_block_comm(atoll_plan_eval *e) {
  const atoll_plan_assume *a = e->ctx->assume;
  const atoll_plan_layout *lay = e->lay;
  atoll_plan_block *b = &e->block;
  int tp = lay->tp, cp = lay->cp, seq = e->ctx->train->seq;
  double elem = atoll_plan_elem_bytes(e->ctx->train->precision);
  atoll_plan_widths w = atoll_plan_local_widths(e->ctx->model, tp);
  double act = e->tokens_mb * w.h * elem, col = atoll_plan_ring_gather_s(tp, act, e->link_tp.bw, e->link_tp.lat);
  double regather = a->tp_regather > 0 ? 2 : 0;
  double nexp = lay->recompute == ATOLL_RECOMPUTE_FULL ? 10 : 6, nhid = 2 + regather;
  b->tp_layer = (nexp + nhid) * col;
  b->tpx_layer = tp > 1 ? nexp * col + fmax(0, nhid * col - a->tp_overlap * b->col_bwd) : 0;
  b->bytes_tp_layer = (nexp + nhid) * atoll_plan_ring_gather_bytes(tp, act);
  /* the LM head is column-parallel too: its input gathered forward (exposed), its input
   * gradient reduce-scattered (and its input re-gathered) behind its backward */
  double nhead = 1 + regather / 2;
  b->tp_head = (1 + nhead) * col;
  b->tpx_head = tp > 1 ? col + fmax(0, nhead * col - a->tp_overlap * b->head_bwd) : 0;
  b->bytes_tp_head = (1 + nhead) * atoll_plan_ring_gather_bytes(tp, act);
  /* the vocabulary-parallel embedding: its output reduce-scattered forward, its output
   * gradient gathered backward (exposed) */
  b->tp_embed = 2 * col;
  b->bytes_tp_embed = 2 * atoll_plan_ring_gather_bytes(tp, act);
  double kv = (double)lay->mb * seq * 2 * w.kv * elem, nkv = lay->recompute == ATOLL_RECOMPUTE_FULL ? 4 : 3;
  double g = atoll_plan_ring_gather_s(cp, kv, e->link_cp.bw, e->link_cp.lat);
  b->cp_layer = nkv * g;
  b->bytes_cp_layer = nkv * atoll_plan_ring_gather_bytes(cp, kv);
  b->cpx_layer = cp > 1 ? cp_exposed(a, b, g, nkv - 2) : 0;
}

/* TP and CP over one step of the modelled pp_stage. */
void atoll_plan_comm_tp_cp(const atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_model *m = e->ctx->model;
  const atoll_plan_block *b = &e->block;
  int micro_batches = r->micro_batches;
  r->bytes_tp = micro_batches * (e->stage_layers * b->bytes_tp_layer + (e->head_here ? b->bytes_tp_head : 0) +
                                 (e->embed_here ? b->bytes_tp_embed : 0));
  /* sequence parallel: each rank's LayerNorm gradients cover its tokens only, summed
   * over the group once per step (weight and bias per norm for gpt2, weight for llama) */
  double norms = (m->arch == ATOLL_ARCH_LLAMA ? 2.0 : 4.0) * m->dim * e->stage_layers +
                 (e->head_here ? (m->arch == ATOLL_ARCH_LLAMA ? 1.0 : 2.0) * m->dim : 0);
  r->bytes_tp += atoll_plan_ring_allreduce_bytes(e->lay->tp, norms * atoll_plan_elem_bytes(e->ctx->train->precision));
  r->t_tp = micro_batches * e->stage_tp;
  r->x_tp = micro_batches * e->stage_tpx;
  r->bytes_cp = micro_batches * e->stage_layers * b->bytes_cp_layer;
  r->t_cp = micro_batches * e->stage_cp;
  r->x_cp = micro_batches * e->stage_layers * b->cpx_layer;
}

/* ------------------------------------------------------------ data parallel --- */

/* One step's DP traffic at the layout's ZeRO stage; all_reduce, rs and ag are one
 * all-reduce and one reduce-scatter of the gradients and one all-gather of the
 * weights, each with its per-bucket latency. */
static void zero_traffic(const atoll_plan_eval *e, int micro_batches, double all_reduce, double rs, double ag,
                         double grad_bytes, double weight_bytes, atoll_plan_result *r) {
  int ranks = e->shard_ranks;
  double wf = e->fwd_window, wb = e->bwd_window;
  double rs_bytes = atoll_plan_ring_gather_bytes(ranks, grad_bytes);
  double ag_bytes = atoll_plan_ring_gather_bytes(ranks, weight_bytes);
  switch (e->lay->zero_stage) {
  case 0:
    r->t_dp = all_reduce;
    r->bytes_dp = atoll_plan_ring_allreduce_bytes(ranks, grad_bytes);
    r->x_dp = fmax(0, all_reduce - wb);
    break;
  case 1:
    r->t_dp = rs + ag;
    r->bytes_dp = rs_bytes + ag_bytes;
    r->x_dp = fmax(0, rs - wb) + fmax(0, ag - wf);
    break;
  case 2:
    r->t_dp = micro_batches * rs + ag;
    r->bytes_dp = micro_batches * rs_bytes + ag_bytes;
    r->x_dp = micro_batches * fmax(0, rs - wb) + fmax(0, ag - wf);
    break;
  default:
    r->t_dp = micro_batches * (2 * ag + rs);
    r->bytes_dp = micro_batches * (2 * ag_bytes + rs_bytes);
    r->x_dp = micro_batches * (fmax(0, ag - wf) + fmax(0, ag + rs - wb));
    break;
  }
}

/* Gradients are reduced, and ZeRO shards, over the data-parallel AND context-parallel
 * ranks (context-parallel ranks hold the same weights and see different tokens): a
 * group of dp x cp, as slow as its slower axis. One collective per block (a bucket,
 * an FSDP unit) plus one for the embedding or head: ring latency per bucket. */
void atoll_plan_comm_dp(atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_assume *a = e->ctx->assume;
  const atoll_plan_layout *lay = e->lay;
  int dp = lay->dp, cp = lay->cp, ranks = dp * cp;
  double elem = atoll_plan_elem_bytes(e->ctx->train->precision);
  double fwd_share = lay->recompute == ATOLL_RECOMPUTE_FULL ? 0.25 : 1.0 / 3.0;
  e->shard_ranks = ranks;
  e->fwd_window = a->dp_overlap * fwd_share * e->stage_compute;
  e->bwd_window = a->dp_overlap * (1 - fwd_share) * e->stage_compute;
  double bw = dp > 1 && cp > 1 ? fmin(e->link_dp.bw, e->link_cp.bw) : dp > 1 ? e->link_dp.bw : e->link_cp.bw;
  double lat = dp > 1 ? e->link_dp.lat : e->link_cp.lat;
  if (dp == 1 && cp > 1) r->link_dp = e->link_cp.kind, r->bw_dp = e->link_cp.bw;
  if (ranks <= 1) return;
  double buckets = e->stage_layers + 1, lat_dp = buckets * (ranks - 1) * lat;
  double grad_bytes = e->params_max * atoll_plan_grad_elem_bytes(e->ctx->train), weight_bytes = e->params_max * elem;
  double rs = atoll_plan_ring_gather_s(ranks, grad_bytes, bw, 0) + lat_dp;
  double ag = atoll_plan_ring_gather_s(ranks, weight_bytes, bw, 0) + lat_dp;
  double all_reduce = atoll_plan_ring_allreduce_s(ranks, grad_bytes, bw, 0) + 2 * lat_dp;
  zero_traffic(e, r->micro_batches, all_reduce, rs, ag, grad_bytes, weight_bytes, r);
}

/* ------------------------------------------------------------------ islands --- */

/* The sync across islands: DiLoCo's outer all-reduce every H steps, or data parallel
 * across them (island_sync); step_inner is the step without it. */
void atoll_plan_comm_islands(const atoll_plan_eval *e, double step_inner, atoll_plan_result *r) {
  const atoll_plan_model *m = e->ctx->model;
  const atoll_plan_cluster *c = e->ctx->cluster;
  const atoll_plan_assume *a = e->ctx->assume;
  int islands = e->islands;
  double wan_bw = c->wan_bw * a->link_eff;
  if (islands <= 1) return;
  if (e->lay->island_sync) {
    /* every step, after the island-local reduction, each island's gradients cross the
     * WAN in a ring over the islands (bf16 or fp32 as in the island), bucket by bucket;
     * hidden behind the backward of the last micro-batch up to dp_overlap */
    double grads = atoll_plan_params(m) * atoll_plan_grad_elem_bytes(e->ctx->train);
    r->t_outer =
        atoll_plan_ring_allreduce_s(islands, grads, wan_bw, 0) + (m->layers + 1) * 2.0 * (islands - 1) * c->wan_lat;
    r->t_outer_step = fmax(0, r->t_outer - e->bwd_window);
    r->bytes_wan = atoll_plan_ring_allreduce_bytes(islands, grads);
    r->wan_util = step_inner / (step_inner + r->t_outer_step);
    r->wan_bw_needed =
        r->bytes_wan / (e->bwd_window + step_inner * (1.0 / a->diloco_util - 1.0)) / a->link_eff;
    return;
  }
  double outer = atoll_plan_params(m) * a->diloco_bytes;
  int sync_every = c->diloco_h > 0 ? c->diloco_h : 1;
  r->t_outer = atoll_plan_ring_allreduce_s(islands, outer, wan_bw, c->wan_lat);
  r->t_outer_step = r->t_outer / sync_every;
  r->bytes_wan = atoll_plan_ring_allreduce_bytes(islands, outer) / sync_every;
  r->wan_util = step_inner / (step_inner + r->t_outer_step);
  double allowed = sync_every * step_inner * (1.0 / a->diloco_util - 1.0);
  r->wan_bw_needed = atoll_plan_ring_allreduce_bytes(islands, outer) / allowed / a->link_eff;
}

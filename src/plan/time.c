/* Time of one step of a layout: blocks split into pp_stages so that the LM head
 * counts as work; 1F1B, interleaved with `chunks` chunks per pp_stage: a step is
 * (m + (pp-1)/chunks) micro-batch times plus 2(pp-1) hop latencies to fill and drain,
 * asynchronous sends hidden behind compute unless the link is slower than compute;
 * then exposed DP traffic, the optimizer on the local shard and the islands' sync. */
#include "plan/eval.h"

#include <math.h>

/* Blocks on the first pp_stage (the other stages but the last hold as many, whole
 * chunks of them) that make the slower of the first and the last fastest. */
static int balance_stages(atoll_plan_eval *e, double t_layer, double t_head, double t_embed) {
  const atoll_plan_model *m = e->ctx->model;
  int pp = e->lay->pp, chunks = e->lay->chunks;
  double best = INFINITY;
  int best_layers = -1;
  /* the last pp_stage holds the rest (possibly none: then it runs only the head) */
  for (int layers = (m->layers + pp - 1) / pp; layers <= m->layers; layers++) {
    if (layers % chunks) continue;
    long rest = (long)(pp - 1) * layers;
    int last = rest >= m->layers ? 0 : m->layers - (int)rest;
    double tf = layers * t_layer + t_embed, tl = last * t_layer + t_head;
    double worst = tf > tl ? tf : tl;
    if (worst < best - 1e-15) best = worst, best_layers = layers;
    if (last == 0) break;
  }
  return best_layers;
}

int atoll_plan_split_stages(atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_model *m = e->ctx->model;
  const atoll_plan_block *b = &e->block;
  int pp = e->lay->pp, tp = e->lay->tp;
  double t_layer = b->layer + b->tpx_layer + b->cpx_layer;
  double t_head = b->head + b->tpx_head;
  double t_embed = b->embed + (tp > 1 ? b->tp_embed : 0);
  r->t_layer_compute = b->layer;
  r->t_layer_mm = b->mm, r->t_layer_attn = b->attn, r->t_layer_elem = b->elem;
  r->t_head_mb = b->head;
  e->first_layers = e->last_layers = m->layers;
  if (pp == 1) {
    e->t_first = e->t_last = e->t_stage = m->layers * t_layer + t_head + t_embed;
  } else {
    int first = balance_stages(e, t_layer, t_head, t_embed);
    if (first < 0)
      return atoll_plan_invalid(r, "interleave %d: no split of the layers into %d stages of whole chunks",
                                e->lay->chunks, pp);
    e->first_layers = first;
    e->last_layers = (long)(pp - 1) * first >= m->layers ? 0 : m->layers - (pp - 1) * first;
    e->t_first = first * t_layer + t_embed;
    e->t_last = e->last_layers * t_layer + t_head;
    e->t_stage = e->t_first > e->t_last ? e->t_first : e->t_last;
  }
  r->pp_stage_layers_first = e->first_layers;
  r->pp_stage_layers_last = e->last_layers;
  r->t_pp_stage_mb = e->t_stage;
  /* the slowest pp_stage is the one modelled; it runs the LM head, the embedding or both */
  int slow_first = e->t_first >= e->t_last;
  e->head_here = pp == 1 || !slow_first;
  e->embed_here = pp == 1 || slow_first;
  e->stage_layers = pp == 1 ? e->first_layers : slow_first ? e->first_layers : e->last_layers;
  e->stage_compute = e->stage_layers * b->layer + (e->head_here ? b->head : 0) + (e->embed_here ? b->embed : 0);
  double embed_tp = e->embed_here && tp > 1 ? b->tp_embed : 0;
  e->stage_tp = e->stage_layers * b->tp_layer + (e->head_here ? b->tp_head : 0) + embed_tp;
  e->stage_tpx = e->stage_layers * b->tpx_layer + (e->head_here ? b->tpx_head : 0) + embed_tp;
  e->stage_cp = e->stage_layers * b->cp_layer;
  return 0;
}

void atoll_plan_pipeline(atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_link *link = &e->link_pp;
  int pp = e->lay->pp, chunks = e->lay->chunks, micro_batches = r->micro_batches;
  double act = e->tokens_mb * e->ctx->model->dim * atoll_plan_elem_bytes(e->ctx->train->precision) / e->lay->tp;
  double hop = pp > 1 ? link->lat + act / link->bw : 0;
  double t_mb = e->t_stage;
  if (pp > 1 && 2.0 * chunks * hop > t_mb) t_mb = 2.0 * chunks * hop; /* link-bound */
  /* interleaving needs at least pp micro-batches in flight: with fewer, each of the
   * chunks' rounds still takes pp chunk slots */
  double slots = (chunks > 1 && micro_batches < pp ? pp : micro_batches) + (pp - 1.0) / chunks;
  e->t_pipe = slots * t_mb + (pp > 1 ? 2.0 * (pp - 1) * hop : 0);
  r->bubble = pp > 1 ? (slots - micro_batches) / micro_batches : 0; /* (pp-1)/(chunks m) when m >= pp */
  r->t_bubble = (slots - micro_batches) * t_mb;
  r->t_compute = micro_batches * e->stage_compute;
  /* bytes sent by the modelled (first or last) pp_stage: one direction at its own end
   * of the pipeline, both for its other chunks when interleaved */
  r->bytes_pp = pp > 1 ? (2.0 * chunks - 1) * micro_batches * act : 0;
  r->t_pp = pp > 1 ? 2.0 * chunks * micro_batches * hop : 0;
  r->x_pp = pp > 1 ? 2.0 * (pp - 1) * hop + micro_batches * (t_mb - e->t_stage) : 0;
}

/* The step: the pipeline, exposed DP traffic, AdamW on the local shard, the islands. */
void atoll_plan_step(atoll_plan_eval *e, atoll_plan_result *r) {
  const atoll_plan_layout *lay = e->lay;
  const atoll_plan_assume *a = e->ctx->assume;
  double shard = lay->zero_stage >= 1 ? (double)e->shard_ranks : 1.0;
  r->t_optim = e->params_max / shard * a->adam_bytes / e->ctx->cluster->acc.elem_bw;
  double step_inner = e->t_pipe + r->x_dp + r->t_optim;
  atoll_plan_comm_islands(e, step_inner, r);
  r->step_s = step_inner + r->t_outer_step;
}

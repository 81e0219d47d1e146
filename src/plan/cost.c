/* The cost model of one training step of one layout: FLOPs, memory per GPU, bytes per
 * link, step time. docs/plan.md explains every term; the short version:
 *
 *   mesh       ranks ordered [TP, CP, PP, DP] from fastest-varying (as Llama 3): a
 *              group of `size` ranks `stride` apart stays inside a node when
 *              stride x size <= GPUs per node.
 *   compute    per block and micro-batch: each matrix product as a roofline,
 *              max(FLOPs / (peak x eta_mm), bytes / HBM); fused causal attention at
 *              eta_attn x hd / (hd + hd_half), with block / seq of masked waste;
 *              elementwise kernels as bytes / elem_bw; a fixed overhead per block.
 *   TP         Megatron tensor parallel with sequence parallel: per block 10
 *              all-gathers / reduce-scatters of tokens x d activations (4 forward,
 *              6 backward, 4 more under full recomputation); 4 of the backward ones
 *              hide behind the column-parallel backward matmuls (tp_overlap).
 *   CP         Llama 3's all-gather context parallel: K and V gathered per block
 *              (forward, again in backward) and dK, dV reduce-scattered.
 *   PP         1F1B, interleaved with v chunks per rank: step = (m + (p-1)/v) micro-
 *              batch times plus 2(p-1) hop latencies to fill and drain; asynchronous
 *              sends hidden behind compute unless the link is slower than compute.
 *   DP/ZeRO    ZeRO-0: gradient all-reduce once per step; 1: reduce-scatter grads,
 *              all-gather weights once per step; 2: reduce-scatter every micro-batch;
 *              3: also all-gather weights every micro-batch, forward and backward.
 *              Traffic hides behind the backward (forward) of a micro-batch, up to
 *              dp_overlap of that window.
 *   collectives ring, alpha-beta: (n-1) steps of latency, (n-1)/n of the buffer per
 *              rank for all-gather / reduce-scatter, twice that for all-reduce.
 *   memory     weights, gradients and AdamW state by precision and ZeRO stage (16
 *              bytes per parameter in BF16 mixed precision at ZeRO-0); activations
 *              per block (Korthikanti et al. 2022, with fused attention) times the
 *              micro-batches in flight on the first stage; logits on the last.
 *   DiLoCo     islands train alone for H steps; then the outer gradient (every
 *              parameter) is all-reduced across islands over the WAN. */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void atoll_plan_assume_defaults(atoll_plan_assume *a) {
  a->link_eff = 0.80;    /* NCCL bus bandwidth: ~360 of 450 GB/s NVLink, ~40 of 50 GB/s per NIC */
  a->tp_overlap = 0.8;   /* share of the column-parallel backward GEMMs that hides TP traffic */
  a->cp_overlap = 0.0;   /* the K/V all-gather precedes the attention that needs it */
  a->dp_overlap = 0.8;   /* bucketed DP traffic starts after the first buckets are ready */
  a->adam_bytes = 28;    /* read+write master, m, v (24) + read grad, write bf16 weight (4) */
  a->diloco_bytes = 4;   /* fp32 outer gradient (DiLoCo; quantized variants send less) */
  a->diloco_util = 0.95; /* the target */
  a->tp_regather = 1;    /* Megatron-LM's sequence parallel; atoll keeps the gathered inputs */
}

const char *atoll_plan_recompute_name(int r) {
  return r == ATOLL_RECOMPUTE_NONE ? "none" : r == ATOLL_RECOMPUTE_SELECTIVE ? "selective" : "full";
}

const char *atoll_plan_link_name(int kind) {
  switch (kind) {
  case ATOLL_LINK_INTRA: return "intra-node";
  case ATOLL_LINK_INTER: return "inter-node";
  case ATOLL_LINK_MIXED: return "intra+inter";
  case ATOLL_LINK_WAN: return "WAN";
  default: return "-";
  }
}

int atoll_plan_assumptions(const atoll_plan_cluster *c, const atoll_plan_assume *a, atoll_plan_named *o, int cap) {
  const atoll_plan_accel *x = &c->acc;
  atoll_plan_named all[] = {
      {"eta_mm", x->eta_mm, "of peak", "achievable fraction of peak FLOP/s in large matrix products"},
      {"eta_attn", x->eta_attn, "of peak", "same for fused attention, times hd/(hd+attn_hd_half)"},
      {"attn_hd_half", x->attn_hd_half, "head dim", "head dim at which attention runs at half of eta_attn"},
      {"attn_block", x->attn_block, "tokens", "attention tile; causal masking wastes block/seq"},
      {"elem_bw", x->elem_bw / 1e9, "GB/s", "bandwidth of elementwise kernels (norms, activations, AdamW)"},
      {"layer_overhead", x->layer_overhead * 1e6, "us", "fixed cost per block per micro-batch (kernel launches)"},
      {"reserved", x->reserved / (1024.0 * 1024 * 1024), "GiB", "memory per device not available to training"},
      {"link_eff", a->link_eff, "of link", "bandwidth a ring collective achieves"},
      {"tp_overlap", a->tp_overlap, "fraction",
       "share of column-parallel backward matmuls that hides their TP traffic"},
      {"cp_overlap", a->cp_overlap, "fraction", "context-parallel traffic hidden behind compute"},
      {"dp_overlap", a->dp_overlap, "fraction",
       "share of a micro-batch's backward (forward) that DP traffic can hide in"},
      {"adam_bytes", a->adam_bytes, "B/param", "memory traffic of one AdamW update"},
      {"diloco_bytes", a->diloco_bytes, "B/param", "outer gradient sent across islands"},
      {"diloco_util", a->diloco_util, "fraction", "utilization target for the WAN bandwidth needed"},
      {"tp_regather", a->tp_regather, "0 or 1",
       "sequence-parallel backward re-gathers column-parallel inputs (1, Megatron) or keeps them (0, atoll)"},
  };
  int n = (int)(sizeof all / sizeof all[0]);
  if (n > cap) n = cap;
  memcpy(o, all, sizeof(atoll_plan_named) * (size_t)n);
  return n;
}

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

typedef struct {
  double bw, lat;
  int kind;
} link_t;

/* The links a group of `size` ranks `stride` apart uses. Inside a node: NVLink. Across
 * nodes with k members per node: NCCL drives k NICs at once (one ring per NIC), so the
 * group's bandwidth per rank is k NICs, at most NVLink. */
static link_t axis_link(const atoll_plan_cluster *c, const atoll_plan_assume *a, long stride, long size) {
  link_t l = {0, 0, ATOLL_LINK_NONE};
  if (size <= 1) return l;
  long G = c->gpus_per_node;
  if (stride * size <= G && G % (stride * size) == 0) {
    l.bw = c->intra_bw * a->link_eff;
    l.lat = c->intra_lat;
    l.kind = ATOLL_LINK_INTRA;
  } else if (stride >= G || G % stride) {
    l.bw = c->inter_bw * a->link_eff;
    l.lat = c->inter_lat;
    l.kind = ATOLL_LINK_INTER;
  } else {
    double k = (double)(G / stride);
    double bw = k * c->inter_bw < c->intra_bw ? k * c->inter_bw : c->intra_bw;
    l.bw = bw * a->link_eff;
    l.lat = c->inter_lat;
    l.kind = ATOLL_LINK_MIXED;
  }
  return l;
}

/* ----------------------------------------------------------------- compute --- */

static double act_dtype(atoll_plan_precision p) { return p == ATOLL_PREC_FP32 ? 4.0 : 2.0; }

/* One matrix product [M x K] @ [K x N] as a roofline. */
static double gemm_s(const atoll_plan_accel *x, double M, double N, double K, double d) {
  double tc = 2.0 * M * N * K / (x->peak_flops * x->eta_mm);
  double tm = d * (M * K + K * N + M * N) / x->hbm_bw;
  return tc > tm ? tc : tm;
}

/* Per-rank widths of one block under tensor parallelism. */
typedef struct {
  double h, hd, hq, kv, f, heads; /* h: full width; hq: local query width; kv: local K (=V) width */
} widths;

static widths local_widths(const atoll_plan_model *m, int tp) {
  widths w;
  w.h = m->dim;
  w.hd = (double)m->dim / m->heads;
  w.hq = (double)m->dim / tp;
  int kvh = m->kv_heads >= tp ? m->kv_heads / tp : 1; /* fewer KV heads than ranks: replicated */
  w.kv = kvh * w.hd;
  w.f = (double)m->ffn / tp;
  w.heads = (double)m->heads / tp;
  return w;
}

double atoll_plan_act_bytes_per_token(const atoll_plan_model *m, int tp, int recompute, atoll_plan_precision p) {
  widths w = local_widths(m, tp);
  double d = act_dtype(p), hs = w.h / tp; /* sequence-parallel shard of the residual stream */
  double lse = 4.0 * w.heads;             /* fp32 log-sum-exp per head (fused attention) */
  if (recompute == ATOLL_RECOMPUTE_FULL) return d * hs;
  double attn, mlp;
  if (recompute == ATOLL_RECOMPUTE_NONE) {
    attn = hs + hs + w.hq + 2 * w.kv + w.hq;               /* norm input, norm output, Q, K, V, attention output */
    mlp = m->arch == ATOLL_ARCH_LLAMA ? hs + hs + 3 * w.f  /* norm in/out, gate, up, gate*up */
                                      : hs + hs + 2 * w.f; /* norm in/out, pre- and post-GELU */
  } else {                                                 /* selective: norms and activations recomputed */
    attn = hs + w.hq + 2 * w.kv + w.hq;
    mlp = m->arch == ATOLL_ARCH_LLAMA ? hs + 2 * w.f : hs + w.f;
  }
  return d * (attn + mlp) + lse;
}

/* Elements streamed by elementwise kernels per token per block, forward and backward:
 * norms (read x, write y; backward reads x, dy, writes dx: 6 per norm x 2), residual
 * adds (3 x 2 forward and backward), GPT-2 biases (5 vectors, add and reduce) and GELU
 * (2 forward, 3 backward), Llama's rotary embedding on Q and K (4) and SwiGLU (3
 * forward, 5 backward). */
static double elem_per_token(const atoll_plan_model *m, const widths *w, int tp) {
  double hs = w->h / tp; /* sequence-parallel shard of the residual stream */
  if (m->arch == ATOLL_ARCH_LLAMA) return 12 * hs + 12 * hs + 4 * (w->hq + w->kv) + 8 * w->f;
  return 12 * hs + 12 * hs + 15 * hs + 3 * w->f + 5 * w->f;
}

typedef struct {
  double layer;          /* one block, one micro-batch, compute only */
  double mm, attn, elem; /* its parts */
  double head;           /* LM head + loss (last stage) */
  double embed;          /* embedding (first stage) */
  double layer_hw_flops, head_flops;
  double tp_layer, tp_head;   /* TP collective seconds per block / for the head, per micro-batch */
  double tpx_layer, tpx_head; /* of which exposed */
  double cp_layer;
  double bytes_tp_layer, bytes_tp_head, bytes_cp_layer;
  double tp_embed, bytes_tp_embed;
} block_cost;

static void block_costs(const atoll_plan_ctx *ctx, const atoll_plan_layout *L, link_t ltp, link_t lcp, block_cost *b) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_accel *x = &ctx->cluster->acc;
  int tp = L->tp, cp = L->cp, s = ctx->train->seq;
  double d = act_dtype(ctx->train->precision);
  widths w = local_widths(m, tp);
  double tok = (double)L->mb * s / cp;                                /* tokens of one micro-batch on one GPU */
  double rf = L->recompute == ATOLL_RECOMPUTE_FULL ? 4.0 / 3.0 : 1.0; /* one more forward */
  /* matrix products [out x in], each run forward, backward-data and backward-weights;
   * QKV and gate/up (fc) are column-parallel, the two projections row-parallel */
  double shapes[4][2] = {
      {w.hq + 2 * w.kv, w.h},                             /* fused QKV */
      {w.h, w.hq},                                        /* attention output projection */
      {(m->arch == ATOLL_ARCH_LLAMA ? 2 : 1) * w.f, w.h}, /* gate and up (SwiGLU) or fc */
      {w.h, w.f},                                         /* down or fc2 */
  };
  double t_mm = 0, fl_mm = 0, t_col_bwd = 0;
  for (int i = 0; i < 4; i++) {
    double g = gemm_s(x, tok, shapes[i][0], shapes[i][1], d);
    t_mm += 3 * g;
    if (i == 0 || i == 2) t_col_bwd += 2 * g;
    fl_mm += 6 * tok * shapes[i][0] * shapes[i][1];
  }
  /* fused causal attention: 6 hq s FLOPs per token forward+backward */
  double fl_attn = 6.0 * w.hq * s * tok;
  double eff = x->eta_attn * w.hd / (w.hd + x->attn_hd_half) / (1.0 + x->attn_block / s);
  double t_attn = fl_attn / (x->peak_flops * eff);
  double t_elem = elem_per_token(m, &w, tp) * tok * d / x->elem_bw;
  /* selective recomputation repeats the forward's norms and activation functions:
   * about a third of the elementwise traffic */
  double t_sel = L->recompute == ATOLL_RECOMPUTE_SELECTIVE ? t_elem / 3 : 0;
  b->layer = rf * (t_mm + t_attn + t_elem + x->layer_overhead) + t_sel;
  b->mm = rf * t_mm, b->attn = rf * t_attn, b->elem = rf * t_elem + t_sel;
  b->layer_hw_flops = rf * (fl_mm + fl_attn);
  /* LM head (vocabulary-parallel) and the fp32 softmax cross-entropy; the final norm */
  double vl = (double)m->vocab / tp;
  b->head = 3 * gemm_s(x, tok, vl, w.h, d) + (3.0 * tok * vl * 4.0 + 6.0 * tok * w.h / tp * d) / x->elem_bw;
  b->head_flops = 6.0 * tok * vl * w.h;
  b->embed = 3.0 * tok * w.h / tp * d / x->elem_bw;
  /* TP with sequence parallel (Megatron): per block, forward all-gathers the input of
   * the two column-parallel products and reduce-scatters the output of the two
   * row-parallel ones (4); backward all-gathers the row-parallel output gradients (2,
   * exposed), and for each column-parallel product re-gathers its input during its
   * data-gradient matmul and reduce-scatters its input gradient during its weight-
   * gradient matmul (4, hidden up to tp_overlap of those matmuls). Full recomputation
   * repeats the forward's 4. */
  double D = tok * w.h * d, col = atoll_plan_ring_gather_s(tp, D, ltp.bw, ltp.lat);
  double regather = ctx->assume->tp_regather > 0 ? 2 : 0;
  double nexp = L->recompute == ATOLL_RECOMPUTE_FULL ? 10 : 6, nhid = 2 + regather;
  b->tp_layer = (nexp + nhid) * col;
  b->tpx_layer = tp > 1 ? nexp * col + fmax(0, nhid * col - ctx->assume->tp_overlap * t_col_bwd) : 0;
  b->bytes_tp_layer = (nexp + nhid) * atoll_plan_ring_gather_bytes(tp, D);
  /* the LM head is column-parallel too: its input gathered forward (exposed), its input
   * gradient reduce-scattered (and its input re-gathered) behind its backward */
  double head_bwd = 2 * gemm_s(x, tok, vl, w.h, d), nhead = 1 + regather / 2;
  b->tp_head = (1 + nhead) * col;
  b->tpx_head = tp > 1 ? col + fmax(0, nhead * col - ctx->assume->tp_overlap * head_bwd) : 0;
  b->bytes_tp_head = (1 + nhead) * atoll_plan_ring_gather_bytes(tp, D);
  /* the vocabulary-parallel embedding: its output reduce-scattered forward, its output
   * gradient gathered backward (exposed) */
  b->tp_embed = 2 * col;
  b->bytes_tp_embed = 2 * atoll_plan_ring_gather_bytes(tp, D);
  /* CP: all-gather K and V of the whole sequence (forward, again for backward),
   * reduce-scatter their gradients */
  double Dkv = (double)L->mb * s * 2 * w.kv * d, nkv = L->recompute == ATOLL_RECOMPUTE_FULL ? 4 : 3;
  b->cp_layer = nkv * atoll_plan_ring_gather_s(cp, Dkv, lcp.bw, lcp.lat);
  b->bytes_cp_layer = nkv * atoll_plan_ring_gather_bytes(cp, Dkv);
}

/* ------------------------------------------------------------------ memory --- */

/* Layer-micro-batches of activations held by pipeline rank r (Narayanan et al. 2021;
 * Korthikanti et al. 2022): 1F1B keeps p - r micro-batches of its K blocks; the
 * interleaved schedule keeps 2(p-r-1) + (v-1)p + 1 chunks of K/v blocks. */
static double inflight_layers(int K, int p, int v, int m, int r) {
  if (p == 1) return K;
  if (v == 1) return (double)K * (m < p - r ? m : p - r);
  double chunks = 2.0 * (p - r - 1) + (double)(v - 1) * p + 1;
  if (chunks > (double)m * v) chunks = (double)m * v;
  return (double)K / v * chunks;
}

/* ------------------------------------------------------------------ layout --- */

static int invalid(atoll_plan_result *r, const char *fmt, int a, int b) {
  r->valid = 0;
  r->fits = 0;
  snprintf(r->why, sizeof r->why, fmt, a, b);
  return 0;
}

void atoll_plan_evaluate(const atoll_plan_ctx *ctx, const atoll_plan_layout *lay, atoll_plan_result *r) {
  const atoll_plan_model *m = ctx->model;
  const atoll_plan_cluster *c = ctx->cluster;
  const atoll_plan_accel *x = &c->acc;
  const atoll_plan_assume *a = ctx->assume;
  const atoll_plan_train *t = ctx->train;
  memset(r, 0, sizeof *r);
  r->lay = *lay;
  r->valid = 1;
  const atoll_plan_layout *L = lay;
  int tp = L->tp, pp = L->pp, cp = L->cp, dp = L->dp, v = L->v, s = t->seq;
  if (tp < 1 || pp < 1 || cp < 1 || dp < 1 || v < 1 || L->mb < 1) {
    invalid(r, "sizes must be at least 1", 0, 0);
    return;
  }
  if (m->heads % tp) {
    invalid(r, "tp %d does not divide the %d attention heads", tp, m->heads);
    return;
  }
  if (tp > m->kv_heads ? tp % m->kv_heads : m->kv_heads % tp) {
    invalid(r, "tp %d and the %d KV heads: one must divide the other", tp, m->kv_heads);
    return;
  }
  if (m->ffn % tp) {
    invalid(r, "tp %d does not divide the FFN width %d", tp, m->ffn);
    return;
  }
  if (pp > m->layers) {
    invalid(r, "pp %d: more pipeline stages than the model's %d layers", pp, m->layers);
    return;
  }
  if (cp > 1 && s % (2 * cp)) {
    invalid(r, "cp %d: the sequence length %d must split into 2 x cp equal chunks", cp, s);
    return;
  }
  if (cp > s) {
    invalid(r, "cp %d is larger than the sequence length %d", cp, s);
    return;
  }
  if (L->zero < 0 || L->zero > 3 || L->recompute < 0 || L->recompute > 2) {
    invalid(r, "zero must be 0..3 and recompute none|selective|full", 0, 0);
    return;
  }
  if (v > 1 && pp == 1) {
    invalid(r, "interleave %d needs pipeline parallelism (pp > 1)", v, 0);
    return;
  }
  int islands = c->islands > 0 ? c->islands : 1;
  double gpus = (double)dp * tp * pp * cp * islands;
  if (gpus > 1e9) {
    invalid(r, "layout too large", 0, 0);
    return;
  }
  r->gpus = (int)gpus;

  /* batch: whole sequences per data-parallel rank, the global batch kept within 5% */
  double seqs = t->batch_tokens / s;
  double spr = floor(seqs / ((double)islands * dp) + 0.5);
  if (spr < 1 || fabs(spr * islands * dp / seqs - 1) > 0.05) {
    snprintf(r->why, sizeof r->why, "the batch of %.0f sequences does not split evenly into %d data-parallel ranks%s",
             seqs, islands * dp, islands > 1 ? " over all islands" : "");
    r->valid = 0;
    return;
  }
  if (spr > 1e9) spr = 1e9;
  r->seqs_per_rank = (int)spr;
  if (r->seqs_per_rank % L->mb) {
    snprintf(r->why, sizeof r->why, "micro-batch %d does not divide the %d sequences per data-parallel rank", L->mb,
             r->seqs_per_rank);
    r->valid = 0;
    return;
  }
  int mbs = r->seqs_per_rank / L->mb;
  r->micro_batches = mbs;
  r->batch_tokens = spr * dp * islands * (double)s;

  /* links of each axis: [TP, CP, PP, DP] */
  link_t ltp = axis_link(c, a, 1, tp), lcp = axis_link(c, a, tp, cp), lpp = axis_link(c, a, (long)tp * cp, pp),
         ldp = axis_link(c, a, (long)tp * cp * pp, dp);
  r->link_tp = ltp.kind, r->link_cp = lcp.kind, r->link_pp = lpp.kind, r->link_dp = ldp.kind;
  r->bw_tp = ltp.bw, r->bw_cp = lcp.bw, r->bw_pp = lpp.bw, r->bw_dp = ldp.bw;

  block_cost b;
  block_costs(ctx, L, ltp, lcp, &b);
  double t_layer = b.layer + b.tpx_layer + (1 - a->cp_overlap) * b.cp_layer;
  double t_head = b.head + b.tpx_head;
  double t_embed = b.embed + (L->tp > 1 ? b.tp_embed : 0);
  r->t_layer_compute = b.layer;
  r->t_layer_mm = b.mm, r->t_layer_attn = b.attn, r->t_layer_elem = b.elem;
  r->t_head_mb = b.head;

  /* stages: balance blocks so that the last stage's head counts as work */
  int K = m->layers, Klast = m->layers;
  double t_stage, t_first, t_last;
  if (pp == 1) {
    t_first = t_last = t_stage = K * t_layer + t_head + t_embed;
  } else {
    double best = INFINITY;
    int bestK = -1;
    /* the other stages hold at most k blocks (whole chunks of k/v), the last the rest
     * (possibly none: then it runs only the head) */
    for (int k = (m->layers + pp - 1) / pp; k <= m->layers; k++) {
      if (k % v) continue;
      long rest = (long)(pp - 1) * k;
      int last = rest >= m->layers ? 0 : m->layers - (int)rest;
      double tf = k * t_layer + t_embed, tl = last * t_layer + t_head;
      double worst = tf > tl ? tf : tl;
      if (worst < best - 1e-15) best = worst, bestK = k;
      if (last == 0) break;
    }
    if (bestK < 0) {
      invalid(r, "interleave %d: no split of the layers into %d stages of whole chunks", v, pp);
      return;
    }
    K = bestK;
    Klast = (long)(pp - 1) * K >= m->layers ? 0 : m->layers - (pp - 1) * K;
    t_first = K * t_layer + t_embed;
    t_last = Klast * t_layer + t_head;
    t_stage = t_first > t_last ? t_first : t_last;
  }
  r->stage_layers_first = K;
  r->stage_layers_last = Klast;
  int slow_first = t_first >= t_last;
  int head_here = pp == 1 || !slow_first; /* the slowest stage runs the LM head */
  double stage_layers = pp == 1 ? K : slow_first ? K : Klast;
  double stage_compute = stage_layers * b.layer + (head_here ? b.head : 0) + (pp == 1 || slow_first ? b.embed : 0);
  int embed_here = pp == 1 || slow_first;
  double stage_tp = stage_layers * b.tp_layer + (head_here ? b.tp_head : 0) + (embed_here && tp > 1 ? b.tp_embed : 0);
  double stage_tpx = stage_layers * b.tpx_layer + (head_here ? b.tpx_head : 0) + (embed_here && tp > 1 ? b.tp_embed : 0);
  double stage_cp = stage_layers * b.cp_layer;
  r->t_stage_mb = t_stage;

  /* pipeline */
  double d = act_dtype(t->precision);
  double tok = (double)L->mb * s / cp;
  double Dpp = tok * m->dim * d / tp;
  double hop = pp > 1 ? lpp.lat + Dpp / lpp.bw : 0;
  double t_mb = t_stage;
  if (pp > 1 && 2.0 * v * hop > t_mb) t_mb = 2.0 * v * hop; /* link-bound */
  /* interleaving needs at least p micro-batches in flight: with fewer, each of the v
   * rounds still takes p chunk slots */
  double slots = (v > 1 && mbs < pp ? pp : mbs) + (pp - 1.0) / v;
  double t_pipe = slots * t_mb + (pp > 1 ? 2.0 * (pp - 1) * hop : 0);
  r->bubble = pp > 1 ? (slots - mbs) / mbs : 0; /* (p-1)/(v m) when m >= p */
  r->t_bubble = (slots - mbs) * t_mb;
  r->t_compute = mbs * stage_compute;
  /* bytes sent by the modelled (first or last) stage: one direction at its own end of
   * the pipeline, both for its other chunks when interleaved */
  r->bytes_pp = pp > 1 ? (2.0 * v - 1) * mbs * Dpp : 0;
  r->t_pp = pp > 1 ? 2.0 * v * mbs * hop : 0;
  r->x_pp = pp > 1 ? 2.0 * (pp - 1) * hop + mbs * (t_mb - t_stage) : 0;
  r->bytes_tp = mbs * (stage_layers * b.bytes_tp_layer + (head_here ? b.bytes_tp_head : 0) +
                       (embed_here ? b.bytes_tp_embed : 0));
  /* sequence parallel: each rank's LayerNorm gradients cover its tokens only, summed
   * over the group once per step (weight and bias per norm for gpt2, weight for llama) */
  double norms = (m->arch == ATOLL_ARCH_LLAMA ? 2.0 : 4.0) * m->dim * stage_layers +
                 (head_here ? (m->arch == ATOLL_ARCH_LLAMA ? 1.0 : 2.0) * m->dim : 0);
  double norm_bytes = atoll_plan_ring_allreduce_bytes(tp, norms * (t->precision == ATOLL_PREC_FP32 ? 4 : 2));
  r->bytes_tp += norm_bytes;
  r->t_tp = mbs * stage_tp;
  r->x_tp = mbs * stage_tpx;
  r->bytes_cp = mbs * stage_layers * b.bytes_cp_layer;
  r->t_cp = mbs * stage_cp;
  r->x_cp = (1 - a->cp_overlap) * r->t_cp;

  /* parameters on the heavier stage (before ZeRO sharding) */
  double lp = atoll_plan_layer_params(m), emb = atoll_plan_embed_params(m);
  double head = m->tied ? (pp > 1 ? (double)m->vocab * m->dim : 0) : atoll_plan_head_params(m);
  double fnorm = m->arch == ATOLL_ARCH_LLAMA ? m->dim : 2.0 * m->dim;
  double p_first, p_last;
  if (pp == 1) {
    p_first = p_last = (m->layers * lp + emb + head + fnorm) / tp;
  } else {
    p_first = (K * lp + emb) / tp;
    p_last = (Klast * lp + head + fnorm) / tp;
  }

  /* data parallel */
  int prec32 = t->precision == ATOLL_PREC_FP32;
  double dw = prec32 ? 4 : 2, dg = prec32 ? 4 : 2, dopt = prec32 ? 8 : 12;
  double P = p_first > p_last ? p_first : p_last;
  double fwd_share = L->recompute == ATOLL_RECOMPUTE_FULL ? 0.25 : 1.0 / 3.0;
  double wf = a->dp_overlap * fwd_share * stage_compute, wb = a->dp_overlap * (1 - fwd_share) * stage_compute;
  /* Gradients are reduced, and ZeRO shards, over the data-parallel AND context-parallel
   * ranks (context-parallel ranks hold the same weights and see different tokens): a
   * group of n = dp x cp, as slow as its slower axis. One collective per block (a
   * bucket, an FSDP unit) plus one for the embedding or head: ring latency per bucket. */
  int n = dp * cp;
  double bw_g = dp > 1 && cp > 1 ? fmin(ldp.bw, lcp.bw) : dp > 1 ? ldp.bw : lcp.bw;
  double lat_g = dp > 1 ? ldp.lat : lcp.lat;
  if (dp == 1 && cp > 1) r->link_dp = lcp.kind, r->bw_dp = lcp.bw;
  double buckets = stage_layers + 1, lat_dp = n > 1 ? buckets * (n - 1) * lat_g : 0;
  double rs = atoll_plan_ring_gather_s(n, P * dg, bw_g, 0) + lat_dp;
  double ag = atoll_plan_ring_gather_s(n, P * dw, bw_g, 0) + lat_dp;
  double ex = 0, tdp = 0, bdp = 0;
  if (n > 1) {
    switch (L->zero) {
    case 0:
      tdp = atoll_plan_ring_allreduce_s(n, P * dg, bw_g, 0) + 2 * lat_dp;
      bdp = atoll_plan_ring_allreduce_bytes(n, P * dg);
      ex = fmax(0, tdp - wb);
      break;
    case 1:
      tdp = rs + ag;
      bdp = atoll_plan_ring_gather_bytes(n, P * dg) + atoll_plan_ring_gather_bytes(n, P * dw);
      ex = fmax(0, rs - wb) + fmax(0, ag - wf);
      break;
    case 2:
      tdp = mbs * rs + ag;
      bdp = mbs * atoll_plan_ring_gather_bytes(n, P * dg) + atoll_plan_ring_gather_bytes(n, P * dw);
      ex = mbs * fmax(0, rs - wb) + fmax(0, ag - wf);
      break;
    default:
      tdp = mbs * (2 * ag + rs);
      bdp = mbs * (2 * atoll_plan_ring_gather_bytes(n, P * dw) + atoll_plan_ring_gather_bytes(n, P * dg));
      ex = mbs * (fmax(0, ag - wf) + fmax(0, ag + rs - wb));
      break;
    }
  }
  r->t_dp = tdp;
  r->x_dp = ex;
  r->bytes_dp = bdp;

  /* optimizer on the local shard */
  double shard = L->zero >= 1 ? (double)n : 1.0;
  r->t_optim = P / shard * a->adam_bytes / x->elem_bw;

  /* islands: DiLoCo, or data parallel across them */
  double step_inner = t_pipe + ex + r->t_optim;
  if (islands > 1 && L->island_sync) {
    /* every step, after the island-local reduction, each island's gradients cross the
     * WAN in a ring over the islands (bf16 or fp32 as in the island), bucket by bucket;
     * hidden behind the backward of the last micro-batch up to dp_overlap */
    double grads = atoll_plan_params(m) * dg, wbw = c->wan_bw * a->link_eff;
    r->t_outer =
        atoll_plan_ring_allreduce_s(islands, grads, wbw, 0) + (m->layers + 1) * 2.0 * (islands - 1) * c->wan_lat;
    r->t_outer_step = fmax(0, r->t_outer - wb);
    r->bytes_wan = atoll_plan_ring_allreduce_bytes(islands, grads);
    r->wan_util = step_inner / (step_inner + r->t_outer_step);
    r->wan_bw_needed = r->bytes_wan / (wb + step_inner * (1.0 / a->diloco_util - 1.0)) / a->link_eff;
  } else if (islands > 1) {
    double outer = atoll_plan_params(m) * a->diloco_bytes;
    double wbw = c->wan_bw * a->link_eff;
    int H = c->diloco_h > 0 ? c->diloco_h : 1;
    r->t_outer = atoll_plan_ring_allreduce_s(islands, outer, wbw, c->wan_lat);
    r->t_outer_step = r->t_outer / H;
    r->bytes_wan = atoll_plan_ring_allreduce_bytes(islands, outer) / H;
    r->wan_util = step_inner / (step_inner + r->t_outer_step);
    double allowed = H * step_inner * (1.0 / a->diloco_util - 1.0);
    r->wan_bw_needed = atoll_plan_ring_allreduce_bytes(islands, outer) / allowed / a->link_eff;
  }
  r->step_s = step_inner + r->t_outer_step;

  /* memory of the first and the last stage; the larger binds */
  double act_tok = atoll_plan_act_bytes_per_token(m, tp, L->recompute, t->precision);
  double act_layer = act_tok * tok;
  double full_layer = atoll_plan_act_bytes_per_token(m, tp, ATOLL_RECOMPUTE_NONE, t->precision) * tok;
  double extra = L->recompute == ATOLL_RECOMPUTE_FULL ? full_layer : 0; /* the block being recomputed */
  double act_first = inflight_layers(K, pp, v, mbs, 0) * act_layer + extra;
  double act_last = inflight_layers(Klast, pp, v, mbs, pp - 1) * act_layer + extra +
                    tok * ((double)m->vocab / tp) * 4.0; /* fp32 logits, gradient in place */
  if (pp == 1) act_first = act_last = act_first + tok * ((double)m->vocab / tp) * 4.0;
  double zero3_buf = L->zero == 3 && n > 1 ? (2 * dw + dg) * lp / tp : 0;
  double wshard = L->zero >= 3 ? n : 1, gshard = L->zero >= 2 ? n : 1, oshard = L->zero >= 1 ? n : 1;
  double outer_state = islands > 1 && !L->island_sync ? 8.0 / n : 0; /* fp32 global weights + outer momentum */
  double mem[2];
  double pst[2] = {p_first, p_last}, act[2] = {act_first, act_last};
  for (int i = 0; i < 2; i++)
    mem[i] = pst[i] * (dw / wshard + dg / gshard + dopt / oshard + outer_state) + act[i] + zero3_buf + x->reserved;
  int bind = pp > 1 && mem[1] > mem[0] ? 1 : 0;
  r->mem_stage = bind;
  r->params_per_gpu = pst[bind];
  r->mem_weights = pst[bind] * dw / wshard;
  r->mem_grads = pst[bind] * dg / gshard;
  r->mem_optim = pst[bind] * dopt / oshard;
  r->mem_outer = pst[bind] * outer_state;
  r->mem_act = act[bind];
  r->mem_buffers = zero3_buf;
  r->mem_reserved = x->reserved;
  r->mem_total = mem[bind];
  r->fits = r->mem_total <= x->mem_bytes;

  /* FLOPs and rates */
  double fpt = atoll_plan_flops_per_token(m, s);
  double recompute_fpt = 0;
  if (L->recompute == ATOLL_RECOMPUTE_FULL)
    recompute_fpt = m->layers * (2.0 * atoll_plan_layer_matmul_params(m) + 2.0 * m->dim * (double)s);
  r->model_flops_step = fpt * r->batch_tokens / gpus;
  r->hw_flops_step = (fpt + recompute_fpt) * r->batch_tokens / gpus;
  r->tflops_per_gpu = r->model_flops_step / r->step_s / 1e12;
  r->mfu = r->model_flops_step / (r->step_s * x->peak_flops);
  r->hfu = r->hw_flops_step / (r->step_s * x->peak_flops);
  r->tokens_per_s = r->batch_tokens / r->step_s;
  r->days = t->token_budget / r->tokens_per_s / 86400.0;
  if (!r->fits)
    snprintf(r->why, sizeof r->why, "needs %.1f GiB per device, %s has %.1f GiB", r->mem_total / (1024.0 * 1024 * 1024),
             x->name, x->mem_bytes / (1024.0 * 1024 * 1024));
}

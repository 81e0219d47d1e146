/* The planner's global modelling assumptions (atoll_plan_assume) with the reason for
 * each default, and the names and units the tool prints them under. */
#include "atoll/plan.h"

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
  a->attn_fused = 1;     /* FlashAttention-style kernels (and atoll's own blocked CPU kernel) */
  a->seq_par = 1;        /* Megatron-LM's sequence parallel with TP (atoll's TP too) */
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

int atoll_plan_assumptions(const atoll_plan_cluster *c, const atoll_plan_assume *a, atoll_plan_named *out, int cap) {
  const atoll_plan_accel *x = &c->acc;
  atoll_plan_named all[] = {
      {"eta_mm", x->eta_mm, "of peak", "fraction of peak a large matrix product reaches in isolation (cuBLAS)"},
      {"clock_eff", x->sms > 0 ? x->clock_eff : 1.0, "of clock",
       "sustained share of the boost clock in a training step (fitted on the validation rows)"},
      {"mm_k_over", x->mm_k_over, "K elements", "fixed cost of one matrix-product output tile (small K)"},
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
      {"attn_fused", a->attn_fused, "0 or 1", "fused (flash) attention (1) or scores materialized in HBM (0)"},
      {"seq_par", a->seq_par, "0 or 1", "sequence parallel with TP (1) or norms and residuals on every TP rank (0)"},
  };
  int n = (int)(sizeof all / sizeof all[0]);
  if (n > cap) n = cap;
  memcpy(out, all, sizeof(atoll_plan_named) * (size_t)n);
  return n;
}

/* atoll plan: the cost model's numbers against hand computations, the Llama 3 405B
 * validation (arXiv 2407.21783, Table 4), the search's ranking on 16,384 H100s, and the
 * fewest devices that hold 405B. */
#include "atoll/plan.h"
#include "check.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static atoll_plan_model model(const char *name) {
  atoll_plan_model m;
  atoll_err err;
  memset(&m, 0, sizeof m);
  CHECK_OK(atoll_plan_model_find(name, &m, &err), &err);
  return m;
}

static atoll_plan_cluster cluster(const char *accel, int gpus) {
  atoll_plan_accel a;
  atoll_err err;
  memset(&a, 0, sizeof a);
  CHECK_OK(atoll_plan_accel_find(accel, &a, &err), &err);
  atoll_plan_cluster c;
  atoll_plan_cluster_default(&c, &a, gpus);
  return c;
}

static atoll_plan_train train(int seq, double seqs_per_step) {
  atoll_plan_train t = {seq, seqs_per_step * seq, 15.6e12, ATOLL_PREC_BF16, 0};
  return t;
}

/* ------------------------------------------------------------ parameters --- */

static void test_params(void) {
  atoll_plan_model g = model("gpt2"), l8 = model("llama3-8b"), l70 = model("llama3-70b"), l405 = model("llama3-405b");
  /* GPT-2 small as released: 124,439,808 parameters (Hugging Face's count) */
  CHECK(atoll_plan_params(&g) == 124439808.0);
  /* Llama 3 8B: 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336 + 2 x 4096) + 2 x 128256 x 4096 + 4096 */
  CHECK(atoll_plan_params(&l8) ==
        32.0 * (2.0 * 4096 * 4096 + 2.0 * 4096 * 1024 + 3.0 * 4096 * 14336 + 2 * 4096) + 2.0 * 128256 * 4096 + 4096);
  CHECK_NEAR(atoll_plan_params(&l8) / 1e9, 8.03, 0.01);
  CHECK_NEAR(atoll_plan_params(&l70) / 1e9, 70.55, 0.01);
  CHECK_NEAR(atoll_plan_params(&l405) / 1e9, 405.85, 0.01);
  /* a GPT-2 shape's FLOPs are exactly atoll's own count */
  atoll_shape s = {.layers = 12, .heads = 12, .dim = 768, .context = 1024, .vocab = 50257};
  CHECK(atoll_plan_flops_per_token(&g, 1024) == atoll_flops_per_token(&s, 1024));
  /* Llama 3 405B at 8192: 6 x (126 x matmul weights + V d) + 6 x 126 x d x 8192 */
  double mm = 2.0 * 16384 * 16384 + 2.0 * 16384 * 1024 + 3.0 * 16384 * 53248;
  CHECK(atoll_plan_flops_per_token(&l405, 8192) == 6 * (126 * mm + 128256.0 * 16384) + 6.0 * 126 * 16384 * 8192);
}

/* ---------------------------------------------------------- collectives --- */

static void test_collectives(void) {
  /* ring all-reduce: each rank sends 2(N-1)/N of the buffer; all-gather (N-1)/N */
  CHECK_NEAR(atoll_plan_ring_allreduce_bytes(8, 1e9), 2.0 * 7 / 8 * 1e9, 1e-12);
  CHECK_NEAR(atoll_plan_ring_gather_bytes(8, 1e9), 7.0 / 8 * 1e9, 1e-12);
  CHECK(atoll_plan_ring_allreduce_bytes(1, 1e9) == 0);
  /* alpha-beta: 2(N-1) latencies + bytes / bandwidth */
  CHECK_NEAR(atoll_plan_ring_allreduce_s(4, 1e9, 1e10, 1e-5), 6e-5 + 1.5e9 / 1e10, 1e-12);
  CHECK_NEAR(atoll_plan_ring_gather_s(4, 1e9, 1e10, 1e-5), 3e-5 + 0.75e9 / 1e10, 1e-12);
}

/* --------------------------------------------------------------- memory --- */

/* A small llama on 8 devices of one node, data parallel only. */
static void test_memory(void) {
  atoll_plan_model m = model("llama3-8b");
  m.layers = 4;
  atoll_plan_cluster c = cluster("h100", 8);
  atoll_plan_train t = train(2048, 64);
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  double P = atoll_plan_params(&m);
  double want[4] = {16 * P, 4 * P + 12 * P / 8, 2 * P + 14 * P / 8, 16 * P / 8};
  for (int z = 0; z <= 3; z++) {
    atoll_plan_layout L = {8, 1, 1, 1, z, 1, 1, ATOLL_RECOMPUTE_FULL, 0};
    atoll_plan_result r;
    atoll_plan_evaluate(&ctx, &L, &r);
    CHECK(r.valid);
    /* 16 bytes per parameter in BF16 mixed precision at ZeRO-0, /N at ZeRO-3 */
    CHECK_NEAR((r.mem_weights + r.mem_grads + r.mem_optim) / want[z], 1.0, 1e-12);
    CHECK_NEAR(r.mem_reserved, 3 * GIB, 1);
  }
  /* fp32 (atoll's CPU trainer): 4 + 4 + 8 bytes */
  t.precision = ATOLL_PREC_FP32;
  atoll_plan_layout L = {8, 1, 1, 1, 0, 1, 1, ATOLL_RECOMPUTE_FULL, 0};
  atoll_plan_result r;
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK_NEAR(r.mem_weights / P, 4, 1e-12);
  CHECK_NEAR(r.mem_grads / P, 4, 1e-12);
  CHECK_NEAR(r.mem_optim / P, 8, 1e-12);

  /* activations per token per block (Korthikanti et al. with fused attention), by hand:
   * none keeps norm in/out, Q, K, V, attention out (4h + 2 hkv) and norm in/out, gate,
   * up, gate*up (2h + 3f), 2 bytes each, plus fp32 log-sum-exp per head */
  double h = 4096, hkv = 1024, f = 14336, heads = 32;
  CHECK_NEAR(atoll_plan_act_bytes_per_token(&m, 1, ATOLL_RECOMPUTE_NONE, ATOLL_PREC_BF16),
             2 * (6 * h + 2 * hkv + 3 * f) + 4 * heads, 1e-9);
  CHECK_NEAR(atoll_plan_act_bytes_per_token(&m, 1, ATOLL_RECOMPUTE_SELECTIVE, ATOLL_PREC_BF16),
             2 * (4 * h + 2 * hkv + 2 * f) + 4 * heads, 1e-9);
  CHECK_NEAR(atoll_plan_act_bytes_per_token(&m, 1, ATOLL_RECOMPUTE_FULL, ATOLL_PREC_BF16), 2 * h, 1e-9);
  /* tensor parallel 8 with sequence parallel: everything / 8 (8 KV heads: one per rank) */
  CHECK_NEAR(atoll_plan_act_bytes_per_token(&m, 8, ATOLL_RECOMPUTE_NONE, ATOLL_PREC_BF16),
             (2 * (6 * h + 2 * hkv + 3 * f) + 4 * heads) / 8, 1e-9);
  /* tp 16 > 8 KV heads: each rank keeps one whole KV head (replicated) */
  CHECK_NEAR(atoll_plan_act_bytes_per_token(&m, 16, ATOLL_RECOMPUTE_NONE, ATOLL_PREC_BF16),
             2 * (6 * h / 16 + 2 * 128 + 3 * f / 16) + 4 * heads / 16, 1e-9);
  /* GPT-2: norm in/out, Q K V, out (6h) + norm in/out, pre- and post-GELU (2h + 2f) */
  atoll_plan_model g = model("gpt2");
  CHECK_NEAR(atoll_plan_act_bytes_per_token(&g, 1, ATOLL_RECOMPUTE_NONE, ATOLL_PREC_FP32),
             4 * (8 * 768 + 2 * 3072.0) + 4 * 12, 1e-9);

  /* activation memory of one stage: 1F1B keeps p micro-batches of K blocks on stage 0 */
  atoll_plan_model big = model("llama3-70b");
  atoll_plan_cluster c2 = cluster("h100", 64);
  atoll_plan_train t2 = train(4096, 64);
  atoll_plan_ctx ctx2 = {&big, &c2, &t2, &a, NULL};
  atoll_plan_layout P4 = {2, 8, 4, 1, 1, 1, 1, ATOLL_RECOMPUTE_SELECTIVE, 0};
  atoll_plan_evaluate(&ctx2, &P4, &r);
  CHECK(r.valid && r.mem_pp_stage == 0 && r.pp_stage_layers_first == 20);
  double per_layer_mb = atoll_plan_act_bytes_per_token(&big, 8, ATOLL_RECOMPUTE_SELECTIVE, ATOLL_PREC_BF16) * 4096;
  CHECK_NEAR(r.mem_act / (20 * 4 * per_layer_mb), 1.0, 1e-9);
}

/* ------------------------------------------------------------- pipeline --- */

static void test_pipeline(void) {
  atoll_plan_model m = model("llama3-70b");
  atoll_plan_cluster c = cluster("h100", 64);
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_train t = train(4096, 16); /* dp 2: 8 sequences per rank */
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  atoll_plan_result r;
  /* bubble (p-1)/m, interleaved (p-1)/(v m) */
  atoll_plan_layout L = {2, 8, 4, 1, 1, 1, 1, ATOLL_RECOMPUTE_FULL, 0};
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK(r.valid && r.micro_batches == 8);
  CHECK_NEAR(r.bubble, 3.0 / 8, 1e-12);
  L.chunks = 2;
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK_NEAR(r.bubble, 3.0 / 16, 1e-12);
  /* the bubble's seconds are (p-1)/v micro-batch slots of the slowest stage */
  CHECK_NEAR(r.t_bubble / r.t_pp_stage_mb, 1.5, 1e-9);
  /* fewer micro-batches than stages: interleaving cannot fill the pipeline */
  L.mb = 4; /* m = 2 */
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK_NEAR(r.bubble, (4 + 1.5 - 2) / 2, 1e-12);
  /* stages balanced with the LM head as work: 126 blocks over 16 stages = 15 x 8 + 6 */
  atoll_plan_model b = model("llama3-405b");
  atoll_plan_cluster c16 = cluster("h100", 8192);
  atoll_plan_train t16 = train(8192, 2048);
  atoll_plan_ctx ctx16 = {&b, &c16, &t16, &a, NULL};
  atoll_plan_layout M = {64, 8, 16, 1, 1, 1, 1, ATOLL_RECOMPUTE_SELECTIVE, 0};
  atoll_plan_evaluate(&ctx16, &M, &r);
  CHECK(r.valid && r.pp_stage_layers_first == 8 && r.pp_stage_layers_last == 6);
  /* a stage holds whole chunks: interleave 3 makes the slowest stages hold 9 blocks */
  M.chunks = 3;
  atoll_plan_evaluate(&ctx16, &M, &r);
  CHECK(r.valid && r.pp_stage_layers_first == 9 && r.pp_stage_layers_last == 0);
  M.chunks = 127;
  atoll_plan_evaluate(&ctx16, &M, &r);
  CHECK(!r.valid);
  /* links: TP 8 inside the node, PP and DP across nodes */
  M.chunks = 8;
  atoll_plan_evaluate(&ctx16, &M, &r);
  CHECK(r.valid && r.link_tp == ATOLL_LINK_INTRA && r.link_pp == ATOLL_LINK_INTER && r.link_dp == ATOLL_LINK_INTER);
  /* impossible shapes */
  atoll_plan_layout bad = {64, 3, 16, 1, 1, 1, 1, 0, 0};
  atoll_plan_evaluate(&ctx16, &bad, &r);
  CHECK(!r.valid && strstr(r.why, "heads"));
  atoll_plan_layout deep = {1, 8, 200, 1, 0, 1, 1, 0, 0};
  atoll_plan_evaluate(&ctx16, &deep, &r);
  CHECK(!r.valid && strstr(r.why, "layers"));
}

/* ---------------------------------------------------------- communication --- */

static void test_traffic(void) {
  atoll_plan_model m = model("gpt2");
  atoll_plan_cluster c = cluster("a100-80gb", 8);
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_train t = train(1024, 64);
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  atoll_plan_result r;
  double P = atoll_plan_params(&m) + 50257.0 * 768 * 0; /* tied: one copy on one stage */
  /* ZeRO-0: one bf16 all-reduce of every gradient per step */
  atoll_plan_layout L = {8, 1, 1, 1, 0, 8, 1, ATOLL_RECOMPUTE_NONE, 0};
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK(r.valid && r.link_dp == ATOLL_LINK_INTRA);
  CHECK_NEAR(r.bytes_dp / (2.0 * 7 / 8 * P * 2), 1.0, 1e-12);
  /* ZeRO-1: reduce-scatter + all-gather, the same bytes */
  L.zero_stage = 1;
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK_NEAR(r.bytes_dp / (2.0 * 7 / 8 * P * 2), 1.0, 1e-12);
  /* ZeRO-3: per micro-batch, weights gathered forward and backward, grads scattered */
  L.zero_stage = 3;
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK(r.micro_batches == 1);
  CHECK_NEAR(r.bytes_dp / (3.0 * 7 / 8 * P * 2), 1.0, 1e-12);
  /* TP: 10 all-gathers/reduce-scatters of tokens x d x 2 bytes per block per micro-batch
   * (8 without the backward re-gather), 3 for the LM head (2), 2 for the embedding; the
   * LayerNorm gradients all-reduced once per step */
  atoll_plan_layout T = {4, 2, 1, 1, 1, 16, 1, ATOLL_RECOMPUTE_NONE, 0};
  atoll_plan_evaluate(&ctx, &T, &r);
  double D = 16.0 * 1024 * 768 * 2, norms = (4.0 * 768 * 12 + 2 * 768) * 2;
  CHECK_NEAR(r.bytes_tp / (12 * 10 * 0.5 * D + 3 * 0.5 * D + 2 * 0.5 * D + norms), 1.0, 1e-12);
  a.tp_regather = 0;
  atoll_plan_evaluate(&ctx, &T, &r);
  CHECK_NEAR(r.bytes_tp / (12 * 8 * 0.5 * D + 2 * 0.5 * D + 2 * 0.5 * D + norms), 1.0, 1e-12);
  a.tp_regather = 1;
  /* --grad-dtype: an fp32 run with bf16 gradients on the wire halves the gradient
   * reduction; ZeRO's weight all-gather stays fp32 */
  atoll_plan_train t32 = t;
  t32.precision = ATOLL_PREC_FP32;
  atoll_plan_ctx ctx32 = {&m, &c, &t32, &a, NULL};
  atoll_plan_layout Z = {8, 1, 1, 1, 0, 8, 1, ATOLL_RECOMPUTE_NONE, 0};
  atoll_plan_evaluate(&ctx32, &Z, &r);
  CHECK_NEAR(r.bytes_dp / (2.0 * 7 / 8 * P * 4), 1.0, 1e-12);
  double t_fp32 = r.t_dp;
  t32.grad_bytes = 2;
  atoll_plan_evaluate(&ctx32, &Z, &r);
  CHECK_NEAR(r.bytes_dp / (2.0 * 7 / 8 * P * 2), 1.0, 1e-12);
  CHECK(r.t_dp < t_fp32);
  Z.zero_stage = 1;
  atoll_plan_evaluate(&ctx32, &Z, &r);
  CHECK_NEAR(r.bytes_dp / (7.0 / 8 * P * (2 + 4)), 1.0, 1e-12);
  /* MFU counts model FLOPs only: full recomputation adds hardware FLOPs */
  atoll_plan_layout F = {8, 1, 1, 1, 1, 8, 1, ATOLL_RECOMPUTE_FULL, 0};
  atoll_plan_evaluate(&ctx, &F, &r);
  double fpt = atoll_plan_flops_per_token(&m, 1024);
  double extra = 12 * (2.0 * 12 * 768 * 768 + 2.0 * 768 * 1024);
  CHECK_NEAR(r.hfu / r.mfu, (fpt + extra) / fpt, 1e-9);
  CHECK_NEAR(r.mfu, r.model_flops_step / (r.step_s * c.acc.peak_flops), 1e-12);
}

/* ---------------------------------------------------------------- DiLoCo --- */

static void test_diloco(void) {
  atoll_plan_model m = model("llama3-8b");
  atoll_plan_cluster c = cluster("h100", 4 * 64);
  c.islands = 4;
  c.wan_bw = 100e9 / 8;
  c.diloco_h = 100;
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_train t = train(8192, 512);
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  atoll_plan_layout L = {8, 8, 1, 1, 1, 1, 1, ATOLL_RECOMPUTE_SELECTIVE, 0};
  atoll_plan_result r;
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK(r.valid && r.gpus == 256 && r.seqs_per_rank == 16);
  double bytes = atoll_plan_params(&m) * 4;
  CHECK_NEAR(r.t_outer, atoll_plan_ring_allreduce_s(4, bytes, c.wan_bw * a.link_eff, c.wan_lat), 1e-12);
  CHECK_NEAR(r.t_outer_step, r.t_outer / 100, 1e-12);
  double inner = r.step_s - r.t_outer_step;
  CHECK_NEAR(r.wan_util, inner / r.step_s, 1e-12);
  double need = atoll_plan_ring_allreduce_bytes(4, bytes) / (100 * inner * (1 / 0.95 - 1)) / a.link_eff;
  CHECK_NEAR(r.wan_bw_needed / need, 1.0, 1e-12);
  /* synchronous data parallel across the islands instead: bf16 gradients every step */
  atoll_plan_layout S = L;
  S.island_sync = 1;
  atoll_plan_evaluate(&ctx, &S, &r);
  double grads = atoll_plan_params(&m) * 2;
  CHECK_NEAR(r.bytes_wan / atoll_plan_ring_allreduce_bytes(4, grads), 1.0, 1e-12);
  CHECK_NEAR(r.t_outer, atoll_plan_ring_allreduce_s(4, grads, c.wan_bw * a.link_eff, 0) + 33 * 2.0 * 3 * c.wan_lat,
             1e-9);
  CHECK(r.mem_outer == 0);
  /* over 100 Gbit/s the search keeps DiLoCo; over 10 Tbit/s syncing every step costs nothing */
  atoll_plan_fixed f;
  atoll_plan_fixed_none(&f);
  f.dp = 8, f.tp = 8, f.pp = 1, f.cp = 1;
  atoll_plan_ranking rk;
  atoll_err err;
  CHECK_OK(atoll_plan_search(&ctx, &f, &rk, &err), &err);
  CHECK(rk.nbest == 1 && rk.best[0].lay.island_sync == 0);
  atoll_plan_ranking_free(&rk);
  c.wan_bw = 10e12 / 8;
  c.wan_lat = 1e-3;
  CHECK_OK(atoll_plan_search(&ctx, &f, &rk, &err), &err);
  CHECK(rk.nbest == 1 && rk.best[0].lay.island_sync == 1 && rk.best[0].t_outer_step == 0);
  atoll_plan_ranking_free(&rk);
  /* at the needed bandwidth the utilization is the target */
  c.wan_bw = 100e9 / 8;
  atoll_plan_evaluate(&ctx, &L, &r);
  c.wan_bw = r.wan_bw_needed;
  c.wan_lat = 0;
  atoll_plan_evaluate(&ctx, &L, &r);
  CHECK_NEAR(r.wan_util, 0.95, 1e-9);
}

/* ------------------------------------------------ Llama 3 405B (Table 4) --- */

typedef struct {
  int gpus, tp, cp, pp, dp, seq, seqs;
  double tflops;
} llama_row;

static void test_llama3_rows(void) {
  const llama_row rows[] = {
      {8192, 8, 1, 16, 64, 8192, 2048, 430},
      {16384, 8, 1, 16, 128, 8192, 2048, 400},
      {16384, 8, 16, 16, 8, 131072, 128, 380},
  };
  atoll_plan_model m = model("llama3-405b");
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  for (int i = 0; i < 3; i++) {
    const llama_row *w = &rows[i];
    atoll_plan_cluster c = cluster("h100", w->gpus);
    atoll_plan_train t = train(w->seq, w->seqs);
    atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
    atoll_plan_fixed f;
    atoll_plan_fixed_none(&f);
    f.tp = w->tp, f.cp = w->cp, f.pp = w->pp, f.dp = w->dp;
    atoll_plan_ranking rk;
    atoll_err err;
    CHECK_OK(atoll_plan_search(&ctx, &f, &rk, &err), &err);
    CHECK(rk.nbest == 1);
    if (rk.nbest < 1) continue;
    const atoll_plan_result *r = &rk.best[0];
    double gap = r->tflops_per_gpu / w->tflops - 1;
    printf(
        "llama3-405b %5d GPUs tp %d cp %2d pp %d dp %3d seq %6d: published %3.0f TFLOP/s, predicted %5.1f (%+.1f%%), "
        "MFU %.1f%%, %.1f GiB, ZeRO-%d, interleave %d, %s\n",
        w->gpus, w->tp, w->cp, w->pp, w->dp, w->seq, w->tflops, r->tflops_per_gpu, 100 * gap, 100 * r->mfu,
        r->mem_total / GIB, r->lay.zero_stage, r->lay.chunks, atoll_plan_recompute_name(r->lay.recompute));
    CHECK(fabs(gap) <= 0.15);
    CHECK(r->fits && r->gpus == w->gpus);
    atoll_plan_ranking_free(&rk);
  }
}

/* The step's parts add up to the step, for every kind of layout. */
static void test_breakdown(void) {
  atoll_plan_model m = model("llama3-70b");
  atoll_plan_cluster c = cluster("h100", 1024);
  c.islands = 2;
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_train t = train(8192, 1024);
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  atoll_plan_layout Ls[] = {
      {64, 8, 1, 1, 3, 1, 1, ATOLL_RECOMPUTE_FULL, 0},  {16, 8, 4, 1, 1, 1, 2, ATOLL_RECOMPUTE_SELECTIVE, 0},
      {8, 4, 8, 2, 2, 2, 5, ATOLL_RECOMPUTE_NONE, 0},   {2, 8, 16, 2, 1, 8, 1, ATOLL_RECOMPUTE_SELECTIVE, 0},
      {512, 1, 1, 1, 0, 1, 1, ATOLL_RECOMPUTE_FULL, 0}, {1, 8, 64, 1, 0, 1, 1, ATOLL_RECOMPUTE_FULL, 0},
  };
  for (size_t i = 0; i < sizeof Ls / sizeof Ls[0]; i++) {
    atoll_plan_result r;
    atoll_plan_evaluate(&ctx, &Ls[i], &r);
    CHECK(r.valid);
    if (!r.valid) fprintf(stderr, "layout %zu: %s\n", i, r.why);
    double sum = r.t_compute + r.t_bubble + r.x_tp + r.x_cp + r.x_pp + r.x_dp + r.t_optim + r.t_outer_step;
    CHECK_NEAR(sum / r.step_s, 1.0, 1e-9);
    CHECK(r.x_tp <= r.t_tp + 1e-12 && r.x_cp <= r.t_cp + 1e-12 && r.x_dp <= r.t_dp + 1e-12);
    CHECK(r.mem_total > 0 && r.tflops_per_gpu > 0 && r.mfu < 1 && r.days > 0);
  }
}

/* The search on 16,384 H100s ranks "tensor parallel 8 inside a node, pipeline across
 * nodes" among its top three. */
static void test_search_16k(void) {
  atoll_plan_model m = model("llama3-405b");
  atoll_plan_cluster c = cluster("h100", 16384);
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_train t = train(8192, 2048);
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  atoll_plan_fixed f;
  atoll_plan_fixed_none(&f);
  atoll_plan_ranking rk;
  atoll_err err;
  CHECK_OK(atoll_plan_search(&ctx, &f, &rk, &err), &err);
  CHECK(rk.nbest >= 3);
  int found = 0;
  for (int i = 0; i < 3 && i < rk.nbest; i++) {
    const atoll_plan_result *r = &rk.best[i];
    printf("16384 x h100 rank %d: dp %d tp %d pp %d cp %d ZeRO-%d mb %d v %d %s: %.1f TFLOP/s, %.2f s/step\n", i + 1,
           r->lay.dp, r->lay.tp, r->lay.pp, r->lay.cp, r->lay.zero_stage, r->lay.mb, r->lay.chunks,
           atoll_plan_recompute_name(r->lay.recompute), r->tflops_per_gpu, r->step_s);
    if (r->lay.tp == 8 && r->link_tp == ATOLL_LINK_INTRA && r->lay.pp > 1 && r->link_pp == ATOLL_LINK_INTER) found = 1;
    CHECK(r->fits && r->gpus == 16384);
  }
  CHECK(found);
  /* every listed mesh fits, and they are sorted */
  for (int i = 1; i < rk.nbest; i++)
    CHECK(rk.best[i].step_s / rk.best[i].batch_tokens >= rk.best[i - 1].step_s / rk.best[i - 1].batch_tokens);
  atoll_plan_ranking_free(&rk);
}

/* The fewest H100s that hold 405B for training at DP 1 and one sequence: the 16 bytes
 * per parameter alone need 75.6 of them; the claim is about 100-150. */
static void test_fewest(void) {
  atoll_plan_model m = model("llama3-405b");
  atoll_plan_cluster c = cluster("h100", 8);
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_train t = train(8192, 2048);
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  atoll_plan_result r;
  atoll_err err;
  CHECK_OK(atoll_plan_fewest(&ctx, &r, &err), &err);
  double floor16 = atoll_plan_params(&m) * 16 / c.acc.mem_bytes;
  printf("fewest h100 for llama3-405b: %d (tp %d x pp %d, %s, %.1f GiB); 16 B/param floor %.1f\n", r.gpus, r.lay.tp,
         r.lay.pp, atoll_plan_recompute_name(r.lay.recompute), r.mem_total / GIB, floor16);
  CHECK(r.fits && r.lay.dp == 1 && r.micro_batches == 1);
  CHECK(r.gpus > floor16 && r.gpus <= 150);
  /* one fewer pipeline stage does not fit */
  atoll_plan_layout L = r.lay;
  L.pp -= 1;
  atoll_plan_result s;
  atoll_plan_train one = t;
  one.batch_tokens = t.seq;
  atoll_plan_ctx ctx1 = {&m, &c, &one, &a, NULL};
  atoll_plan_evaluate(&ctx1, &L, &s);
  CHECK(!s.fits);

  /* nothing fits on one node: the search says so and how much the lightest needs */
  atoll_plan_fixed f;
  atoll_plan_fixed_none(&f);
  atoll_plan_ranking rk;
  CHECK_OK(atoll_plan_search(&ctx, &f, &rk, &err), &err);
  CHECK(rk.nfit == 0 && rk.nvalid > 0 && rk.smallest.mem_total > c.acc.mem_bytes);
  atoll_plan_ranking_free(&rk);
  /* a layout larger than the cluster is an error */
  f.tp = 8, f.pp = 16, f.dp = 2, f.cp = 1;
  CHECK(atoll_plan_search(&ctx, &f, &rk, &err) != 0 && strstr(err.msg, "needs 256 devices"));
  atoll_plan_fixed_none(&f);
  f.pp = 127;
  CHECK(atoll_plan_search(&ctx, &f, &rk, &err) != 0 && strstr(err.msg, "126 layers"));
}

/* Days fall with more GPUs: the answer to "why 10,000+". */
static void test_sweep(void) {
  atoll_plan_model m = model("llama3-405b");
  atoll_plan_cluster c = cluster("h100", 8);
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  atoll_plan_train t = train(8192, 2048);
  atoll_plan_ctx ctx = {&m, &c, &t, &a, NULL};
  int n[] = {128, 1024, 4096, 16384};
  atoll_plan_result r[4];
  atoll_err err;
  CHECK_OK(atoll_plan_sweep(&ctx, n, 4, r, &err), &err);
  for (int i = 0; i < 4; i++) {
    CHECK(r[i].valid && r[i].fits);
    printf("%6d h100: %.0f days\n", n[i], r[i].days);
    if (i) CHECK(r[i].days < r[i - 1].days);
  }
  CHECK(r[0].days > 365 * 5); /* on ~100 GPUs: years */
  CHECK(r[3].days < 120);     /* on 16,384: months */
}

static void test_catalog_errors(void) {
  atoll_plan_model m;
  atoll_plan_accel x;
  atoll_err err;
  CHECK(atoll_plan_model_find("llama4", &m, &err) != 0 && strstr(err.msg, "llama3-405b") && strstr(err.msg, "gpt2"));
  CHECK(atoll_plan_accel_find("tpu-v5", &x, &err) != 0 && strstr(err.msg, "h100") && strstr(err.msg, "cpu"));
  CHECK(atoll_plan_model_find("LLAMA3_405B", &m, &err) == 0 && m.layers == 126);
  CHECK(atoll_plan_accel_find("h100-sxm", &x, &err) == 0 && x.peak_flops == 989e12);
  m = model("gpt2");
  m.heads = 5;
  CHECK(atoll_plan_model_check(&m, &err) != 0 && strstr(err.msg, "heads"));
}

/* text into a new temporary file; its name in path (a mkstemp template); 0 or -1 */
static int temp_file(char *path, const char *text) {
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return 0;
}

/* --calibrate reads the run's --grad-dtype: a DDP run that sent bf16 gradients is
 * planned with bf16 gradients on the wire (and an fp32 one with fp32) */
static void test_calibrate_grad_dtype(void) {
  const char *dtypes[] = {"bf16", "fp32", NULL};
  double want[] = {2, 4, 4};
  for (int i = 0; i < 3; i++) {
    char path[] = "/tmp/atoll_test_plan_calXXXXXX", text[512];
    snprintf(text, sizeof text,
             "{\"config\": {\"layers\": 2, \"heads\": 2, \"dim\": 64, \"context\": 32, \"vocab\": 256, "
             "\"batch\": 4, \"threads\": 1, \"precision\": \"fp32\"%s%s%s}, \"world_size\": 2, "
             "\"median_step_seconds\": 0.01}",
             dtypes[i] ? ", \"grad-dtype\": \"" : "", dtypes[i] ? dtypes[i] : "", dtypes[i] ? "\"" : "");
    if (temp_file(path, text)) return;
    atoll_plan_calibration cal;
    atoll_err err = {{0}};
    CHECK_OK(atoll_plan_calibrate_read(path, &cal, &err), &err);
    double got = cal.train.grad_bytes > 0 ? cal.train.grad_bytes : 4; /* 0: as the precision, fp32 */
    printf("calibrate: grad-dtype %s -> %g bytes per gradient\n", dtypes[i] ? dtypes[i] : "(none)", got);
    CHECK(got == want[i]);
    remove(path);
  }
  char path[] = "/tmp/atoll_test_plan_calXXXXXX";
  if (temp_file(path, "{\"config\": {\"layers\": 2, \"heads\": 2, \"dim\": 64, \"context\": 32, \"vocab\": 256, "
                      "\"batch\": 4, \"grad-dtype\": \"fp8\"}, \"median_step_seconds\": 0.01}"))
    return;
  atoll_plan_calibration cal;
  atoll_err err = {{0}};
  CHECK(atoll_plan_calibrate_read(path, &cal, &err) != 0 && strstr(err.msg, "grad-dtype") && strstr(err.msg, path));
  printf("calibrate: %s\n", err.msg);
  remove(path);
}

/* The failure model (src/plan/failure.c) against values computed by hand:
 *   Daly's interval, C = 60 s, M = 3600 s: x = C/2M = 1/120, sqrt(2CM) = 657.267;
 *     657.267 (1 + 0.0912871/3 + 0.0083333/9) - 60 = 617.876 s;
 *   C >= 2M: M;
 *   Daly's goodput, tau 600, C 60, R 300, M 3600: 600 / (3600 e^(1/12) (e^(660/3600) - 1))
 *     = 600 / (3600 x 1.0869040 x 0.2012150) = 0.762075;
 *   1000 GPUs on 125 nodes at 1 and 8 per 1000 days: 2 a day, M = 43200 s; 1 TB at
 *     10 GB/s: C = 100 s, R = 600 + 100 s; tau = 2873.10 s; goodput 0.914237 (planned:
 *     0.5 a day, each C + R: x (1 - 0.5 x 800 / 86400)); with 7 s steps tau = 410 steps. */
static void test_goodput_formula(void) {
  CHECK_NEAR(atoll_plan_daly_interval(60, 3600), 617.8756, 1e-3);
  CHECK_NEAR(atoll_plan_daly_interval(10, 4), 4, 1e-12);
  CHECK_NEAR(atoll_plan_daly_goodput(600, 60, 300, 3600), 0.762075, 1e-6);
  CHECK_NEAR(atoll_plan_daly_goodput(600, 60, 300, INFINITY), 600.0 / 660, 1e-12);
  /* Daly's interval tends to Young's sqrt(2CM) when C << M */
  CHECK_NEAR(atoll_plan_daly_interval(1, 1e5) / sqrt(2e5), 1.0, 0.01);
  atoll_plan_failure f;
  atoll_plan_failure_defaults(&f);
  f.accel_per_kday = 1, f.node_per_kday = 8, f.planned_per_kday = 4, f.ckpt_bw = 1e10, f.restart_s = 600;
  atoll_plan_goodput g;
  atoll_plan_goodput_eval(&f, 1000, 125, 1e12, 0, &g);
  CHECK_NEAR(g.failures_per_day, 2, 1e-12);
  CHECK_NEAR(g.planned_per_day, 0.5, 1e-12);
  CHECK_NEAR(g.mtbf_s, 43200, 1e-9);
  CHECK_NEAR(g.write_s, 100, 1e-12);
  CHECK_NEAR(g.restart_s, 700, 1e-12);
  CHECK_NEAR(g.young_s, sqrt(2 * 100 * 43200.0), 1e-9);
  CHECK_NEAR(g.interval_s, 2873.099, 1e-3);
  CHECK_NEAR(g.goodput, 0.914237, 1e-6);
  atoll_plan_goodput_eval(&f, 1000, 125, 1e12, 7, &g);
  CHECK_NEAR(g.interval_s, 410 * 7, 1e-9);
  f.ckpt_every_s = 3600; /* a fixed interval is used as given (a whole number of steps) */
  atoll_plan_goodput_eval(&f, 1000, 125, 1e12, 0, &g);
  CHECK_NEAR(g.interval_s, 3600, 1e-12);
  CHECK(g.goodput < 0.914237);
  /* the checkpoint: weights and AdamW state, 14 bytes per parameter in bf16 mixed, 12 in fp32 */
  atoll_plan_model m = model("llama3-405b");
  CHECK_NEAR(atoll_plan_checkpoint_bytes(&m, ATOLL_PREC_BF16), 14 * atoll_plan_params(&m), 1);
  CHECK_NEAR(atoll_plan_checkpoint_bytes(&m, ATOLL_PREC_FP32), 12 * atoll_plan_params(&m), 1);
}

int main(void) {
  test_goodput_formula();
  test_params();
  test_collectives();
  test_memory();
  test_pipeline();
  test_traffic();
  test_diloco();
  test_breakdown();
  test_llama3_rows();
  test_search_16k();
  test_fewest();
  test_sweep();
  test_catalog_errors();
  test_calibrate_grad_dtype();
  CHECK_DONE();
}

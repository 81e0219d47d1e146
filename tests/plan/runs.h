/* Public large-scale training runs that atoll plan is validated on (docs/plan.md,
 * "Validation"): shape, cluster, layout, precision, recomputation and the published
 * throughput, each with its source. Shared by tests/test_plan_validate.c (which holds
 * every row to its recorded error) and bench/plan/fit.c (which fits the two free
 * constants on the rows marked `fit` only).
 *
 * Published figures are turned into tokens per second per GPU with the paper's own
 * convention: PUB_TFLOPS_MODEL is TFLOP/s per GPU counted as atoll counts model FLOPs
 * (6 per weight per token plus causal attention: Llama 3's MFU); PUB_TFLOPS_MEGATRON
 * is Megatron-LM's hardware count with full recomputation, 96 l h^2 (1 + s/(6h) +
 * V/(16 l h)) per token (Narayanan et al. 2021, eq. 3; used by MT-NLG and BLOOM's
 * Megatron-DeepSpeed); PUB_STEP_S is seconds per iteration; PUB_TOKENS is tokens/s per
 * GPU. The planner predicts tokens/s per GPU from its step time; error = predicted /
 * published - 1. */
#ifndef ATOLL_TESTS_PLAN_RUNS_H
#define ATOLL_TESTS_PLAN_RUNS_H

#include "atoll/plan.h"

enum { PUB_TFLOPS_MODEL, PUB_TFLOPS_MEGATRON, PUB_STEP_S, PUB_TOKENS };

/* The software stack, as the papers describe it (not a tuned constant):
 * STACK_2023: fused (flash) attention, sequence parallel with Megatron's re-gathers,
 *   TP traffic of the backward overlapped (atoll's defaults);
 * STACK_2021: Megatron-LM as of Narayanan et al. 2021 and the Megatron-DeepSpeed runs
 *   built on it (MT-NLG, BLOOM) and metaseq (OPT): scores materialized, no sequence
 *   parallel (norms and residuals on every TP rank, TP traffic as all-reduces), TP
 *   all-reduces synchronous (tp_overlap 0). */
enum { STACK_2023, STACK_2021 };

typedef struct {
  const char *name, *source;
  int arch, layers, dim, heads, kv_heads, ffn, vocab, tied;
  const char *accel;
  int gpus, tp, pp, cp, dp, seq, seqs; /* seqs: global batch in sequences */
  int recompute;                       /* -1: the planner chooses */
  int zero;                            /* -1: the planner chooses */
  int stack;                           /* STACK_*: what the software did (below) */
  int chunks;                          /* interleaved pipeline chunks; 0: the planner chooses */
  int conv;
  double published;
  int fit;         /* 1: used to fit clock_eff and mm_k_over */
  double recorded; /* predicted / published - 1 when recorded (the test's bound) */
  double hbm_tbs, mem_gib; /* the cluster's GPUs where they differ from the catalog entry (0: as catalog) */
} plan_run;

#define GPT ATOLL_ARCH_GPT2
#define LLAMA ATOLL_ARCH_LLAMA
#define FULL ATOLL_RECOMPUTE_FULL

/* Narayanan et al. 2021 (arXiv 2104.04473) Table 1: GPT, vocabulary 51,200, sequence
 * 2,048, A100 80 GB (Selene, 8 per node, 8 x 200 Gb/s HDR), mixed precision, activation
 * recomputation, no sequence parallelism, Megatron's fused softmax (scores
 * materialized). Table 1's layout is TP x PP; DP = GPUs / (TP PP). */
#define MEG(n, heads, h, l, tp, pp, gpus, batch, tflops, fit, rec)                                               \
  {"Megatron " n,   "arXiv 2104.04473 Table 1", GPT, l, h, heads, heads, 4 * (h), 51200, 1, "a100-80gb", gpus, tp, pp, 1, \
   (gpus) / ((tp) * (pp)), 2048, batch, FULL, -1, STACK_2021, 0, PUB_TFLOPS_MEGATRON, tflops, fit, rec, 0, 0}

static const plan_run PLAN_RUNS[] = {
    /* Llama 3 405B (arXiv 2407.21783 Table 4): H100 SXM, BF16, 16M-token batches;
     * Meta's own stack with fused attention and sequence parallel; MFU in model FLOPs. */
    {"Llama 3 405B 8K", "arXiv 2407.21783 Table 4", LLAMA, 126, 16384, 128, 8, 53248, 128256, 0, "h100", 8192, 8, 16, 1,
     64, 8192, 2048, -1, -1, STACK_2023, 0, PUB_TFLOPS_MODEL, 430, 1, -0.019, 0, 0},
    {"Llama 3 405B 16K", "arXiv 2407.21783 Table 4", LLAMA, 126, 16384, 128, 8, 53248, 128256, 0, "h100", 16384, 8, 16,
     1, 128, 8192, 2048, -1, -1, STACK_2023, 0, PUB_TFLOPS_MODEL, 400, 0, -0.006, 0, 0},
    {"Llama 3 405B 131K", "arXiv 2407.21783 Table 4", LLAMA, 126, 16384, 128, 8, 53248, 128256, 0, "h100", 16384, 8,
     16, 16, 8, 131072, 128, -1, -1, STACK_2023, 0, PUB_TFLOPS_MODEL, 380, 0, -0.092, 0, 0},
    MEG("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 1, -0.043),
    MEG("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 0, -0.043),
    MEG("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 1, -0.058),
    MEG("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135, 0, -0.053),
    MEG("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138, 1, -0.017),
    MEG("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 0, +0.019),
    MEG("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 1, -0.020),
    MEG("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 0, -0.050),
    MEG("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, -0.083),
    MEG("1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163, 0, -0.087),
    /* Megatron-Turing NLG 530B (arXiv 2201.11990 section 2.4): 105 blocks, width
     * 20,480, 128 heads, sequence 2,048, batch 1,920, TP 8 x PP 35 on 280 / 350 / 420
     * DGX A100 nodes (DP 8 / 10 / 12): 60.1 / 50.2 / 44.4 s per iteration (126 / 121 /
     * 113 TFLOP/s per GPU). Megatron-DeepSpeed, recomputation, scores materialized. */
    {"MT-NLG 530B 280 nodes", "arXiv 2201.11990 sec. 2.4", GPT, 105, 20480, 128, 128, 81920, 51200, 1, "a100-80gb",
     2240, 8, 35, 1, 8, 2048, 1920, FULL, 1, STACK_2021, 1, PUB_STEP_S, 60.1, 1, +0.083, 0, 0},
    {"MT-NLG 530B 350 nodes", "arXiv 2201.11990 sec. 2.4", GPT, 105, 20480, 128, 128, 81920, 51200, 1, "a100-80gb",
     2800, 8, 35, 1, 10, 2048, 1920, FULL, 1, STACK_2021, 1, PUB_STEP_S, 50.2, 0, +0.095, 0, 0},
    {"MT-NLG 530B 420 nodes", "arXiv 2201.11990 sec. 2.4", GPT, 105, 20480, 128, 128, 81920, 51200, 1, "a100-80gb",
     3360, 8, 35, 1, 12, 2048, 1920, FULL, 1, STACK_2021, 1, PUB_STEP_S, 44.4, 0, +0.127, 0, 0},
    /* BLOOM 176B (arXiv 2211.05100 sections 3.4-3.5): 70 blocks, width 14,336, 112
     * heads, vocabulary 250,880, sequence 2,048, batch 2,048; 384 A100 80 GB (48 nodes),
     * TP 4 x PP 12 x DP 8, ZeRO-1, BF16, Megatron-DeepSpeed; 156 TFLOP/s per GPU in its
     * Megatron count (recomputation assumed, as that count implies). */
    {"BLOOM 176B", "arXiv 2211.05100 sec. 3.5", GPT, 70, 14336, 112, 112, 57344, 250880, 1, "a100-80gb", 384, 4, 12, 1,
     8, 2048, 2048, FULL, 1, STACK_2021, 1, PUB_TFLOPS_MEGATRON, 156, 0, -0.014, 0, 0},
    /* OPT-175B (arXiv 2205.01068 section 2.4): 96 blocks, width 12,288, 96 heads,
     * sequence 2,048, 2M-token batches, 992 A100 80 GB, Megatron TP 8 with FSDP
     * (ZeRO-3) over 124; "up to 147 TFLOP/s per GPU". Its FLOP convention is not
     * stated: Megatron's (recomputation) is assumed; 124 ranks take 8 sequences each
     * (992 of the 1,024). */
    {"OPT-175B", "arXiv 2205.01068 sec. 2.4", GPT, 96, 12288, 96, 96, 49152, 50272, 1, "a100-80gb", 992, 8, 1, 1, 124,
     2048, 992, FULL, 3, STACK_2021, 1, PUB_TFLOPS_MEGATRON, 147, 0, +0.043, 0, 0},
    /* torchtitan (pytorch/torchtitan docs/performance.md, 2024; arXiv 2410.06511):
     * Llama 3 8B and 70B with FSDP2 (ZeRO-3) on 64 A100 80 GB, local batch 1, sequence
     * 8,192, flash attention (PyTorch SDPA), eager mode; tokens/s per GPU. */
    {"torchtitan 8B 64 A100", "torchtitan performance.md", LLAMA, 32, 4096, 32, 8, 14336, 128256, 0, "a100-80gb", 64,
     1, 1, 1, 64, 8192, 64, ATOLL_RECOMPUTE_SELECTIVE, 3, STACK_2023, 0, PUB_TOKENS, 2973, 0, +0.105, 0, 0},
    {"torchtitan 70B 64 A100", "torchtitan performance.md", LLAMA, 80, 8192, 64, 8, 28672, 128256, 0, "a100-80gb", 64,
     1, 1, 1, 64, 8192, 64, FULL, 3, STACK_2023, 0, PUB_TOKENS, 331, 0, -0.062, 0, 0},
    /* torchtitan on Grand Teton H100s (96 GB HBM2e at 2.4 TB/s, run at a 500 W power
     * limit, which the model does not know), Llama 3.1 8B, FSDP on 8 GPUs, local batch
     * 2, selective recomputation, torch.compile: 6,667 tokens/s per GPU (Table 1). */
    {"torchtitan 8B 8 H100", "arXiv 2410.06511; performance.md Table 1", LLAMA, 32, 4096, 32, 8, 14336, 128256, 0,
     "h100", 8, 1, 1, 1, 8, 8192, 16, ATOLL_RECOMPUTE_SELECTIVE, 3, STACK_2023, 0, PUB_TOKENS, 6667, 0, +0.294, 2.4, 96},
};
#define PLAN_NRUNS (int)(sizeof PLAN_RUNS / sizeof PLAN_RUNS[0])

#undef GPT
#undef LLAMA
#undef FULL

#endif

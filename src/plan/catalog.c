/* The planner's catalogs: models and accelerators, each constant with its source.
 *
 * Memory sizes are the usable capacity as nvidia-smi reports it (the "80 GB" of an
 * H100 is 80 GiB); bandwidths are per device and per direction; peaks are dense
 * (no sparsity) BF16 tensor-core FLOP/s from NVIDIA's datasheets. The efficiency
 * figures are modelling assumptions, explained next to each value and in
 * docs/plan.md; the tool prints the ones in force. */
#include "atoll/plan.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ------------------------------------------------------------------ models --- */

static const atoll_plan_model MODELS[] = {
    /* GPT-2 (Radford et al. 2019) as released (Hugging Face configs): vocabulary
     * 50257, context 1024, MLP 4x width, tied LM head. Batch 512 x 1024 tokens as in
     * the paper; token budget 20 per parameter (Hoffmann et al. 2022). */
    {"gpt2", ATOLL_ARCH_GPT2, 12, 768, 12, 12, 3072, 50257, 1024, 1024, 1, 524288, 0,
     "GPT-2 small (124M): Radford et al. 2019, HF config gpt2"},
    {"gpt2-medium", ATOLL_ARCH_GPT2, 24, 1024, 16, 16, 4096, 50257, 1024, 1024, 1, 524288, 0,
     "GPT-2 medium (355M): HF config gpt2-medium"},
    {"gpt2-large", ATOLL_ARCH_GPT2, 36, 1280, 20, 20, 5120, 50257, 1024, 1024, 1, 524288, 0,
     "GPT-2 large (774M): HF config gpt2-large"},
    {"gpt2-xl", ATOLL_ARCH_GPT2, 48, 1600, 25, 25, 6400, 50257, 1024, 1024, 1, 524288, 0,
     "GPT-2 XL (1.5B): HF config gpt2-xl"},
    /* Llama 3 (arXiv 2407.21783, Table 3; vocabulary 128256 and rope from the released
     * configs): GQA with 8 KV heads, SwiGLU, untied head. Pre-training sequences 8192.
     * 405B: batch 16M tokens (2048 x 8192) in the main stage and 15.6T tokens (paper,
     * section 3.4); 8B and 70B: "over 15T tokens"; their batches are not published:
     * 4M and 8M tokens are atoll's choice. */
    {"llama3-8b", ATOLL_ARCH_LLAMA, 32, 4096, 32, 8, 14336, 128256, 8192, 8192, 0, 512.0 * 8192, 15e12,
     "Llama 3 8B: arXiv 2407.21783 Table 3"},
    {"llama3-70b", ATOLL_ARCH_LLAMA, 80, 8192, 64, 8, 28672, 128256, 8192, 8192, 0, 1024.0 * 8192, 15e12,
     "Llama 3 70B: arXiv 2407.21783 Table 3"},
    {"llama3-405b", ATOLL_ARCH_LLAMA, 126, 16384, 128, 8, 53248, 128256, 8192, 8192, 0, 2048.0 * 8192, 15.6e12,
     "Llama 3 405B: arXiv 2407.21783 Table 3, batch and tokens section 3.4"},
};
#define NMODELS (int)(sizeof MODELS / sizeof MODELS[0])

int atoll_plan_model_count(void) { return NMODELS; }
const atoll_plan_model *atoll_plan_model_at(int i) { return i >= 0 && i < NMODELS ? &MODELS[i] : NULL; }

/* ------------------------------------------------------------ accelerators --- */

/* Efficiency assumptions shared by the GPU entries, with their reasons:
 *   attn_hd_half 32: fused attention is slower at small head dims (FlashAttention-2
 *     reports roughly 1.2-1.3x lower throughput at head dim 64 than at 128), which
 *     eta_attn x hd / (hd + 32) reproduces.
 *   attn_block 128: the tile of fused attention kernels; causal masking wastes about
 *     block / seq of the work.
 *   elem_bw 0.8 x HBM: norms, activations, residuals and rotary embeddings are
 *     memory-bound streams.
 *   layer_overhead 50 us: about 25 kernels per block forward and backward whose launch
 *     gaps are not hidden (matters only for small models).
 *   reserved 3 GiB: CUDA context, NCCL buffers, cuBLAS workspace and allocator
 *     fragmentation. */
/* The matrix-product shape model's constants (gemm.c), shared by the GPUs:
 *   MM_K_OVER: fixed cost of an output tile in elements of K (fitted, docs/plan.md);
 *   CLOCK_EFF: sustained share of the boost clock in training (fitted, docs/plan.md). */
#define MM_K_OVER 176.0
#define CLOCK_EFF 0.76

static const atoll_plan_accel ACCELS[] = {
    /* NVIDIA A100 datasheet: 312 TFLOP/s BF16 dense, 1555 GB/s (40 GB) / 2039 GB/s
     * (80 GB), NVLink 3 600 GB/s total (300 each way); DGX A100: 8 GPUs, one 200 Gb/s
     * HDR InfiniBand NIC per GPU. eta_mm 0.65: cuBLAS reaches about 250 TFLOP/s (0.8)
     * on large BF16 products in isolation; Megatron-LM on 3072 A100s sustained 52% of
     * peak in hardware FLOPs after bubbles and communication (Narayanan et al. 2021).
     * eta_attn 0.65: FlashAttention-2 reaches 50-70% of peak. */
    {"a100-40gb", "NVIDIA A100 SXM 40 GB", 0, 312e12, 40 * GIB, 1555e9, 8, 300e9, 5e-6, 25e9, 10e-6,
     0.85, 0.65, 32, 128, 0.8 * 1555e9, 50e-6, 3 * GIB, "NVIDIA A100 datasheet; DGX A100", 108, MM_K_OVER, CLOCK_EFF},
    {"a100-80gb", "NVIDIA A100 SXM 80 GB", 0, 312e12, 80 * GIB, 2039e9, 8, 300e9, 5e-6, 25e9, 10e-6,
     0.85, 0.65, 32, 128, 0.8 * 2039e9, 50e-6, 3 * GIB, "NVIDIA A100 datasheet; DGX A100", 108, MM_K_OVER, CLOCK_EFF},
    /* NVIDIA H100 SXM5 datasheet: 989 TFLOP/s BF16 dense, 80 GB HBM3 at 3.35 TB/s,
     * NVLink 4 900 GB/s total (450 each way); DGX H100: 8 GPUs, one 400 Gb/s ConnectX-7
     * per GPU (Llama 3's RoCE fabric: 400 Gb/s per GPU as well). eta_mm 0.60: large
     * BF16 products reach about 0.75 of peak in isolation, less at sustained clocks
     * under the 700 W cap; public BF16 runs on H100 report 40-50% MFU, which after this
     * model's explicit losses means about 0.6. It sets the planner's absolute level:
     * docs/plan.md shows how the Llama 3 405B rows bound it (they imply 0.55; above
     * 0.62 the 8,192-GPU row leaves the 15% band). eta_attn 0.55 (0.44 at head dim 128,
     * ~435 TFLOP/s):
     * between FlashAttention-2 (~335 TFLOP/s forward+backward, Dao 2023) and
     * FlashAttention-3 (Shah et al. 2024). */
    {"h100", "NVIDIA H100 SXM 80 GB", 0, 989e12, 80 * GIB, 3.35e12, 8, 450e9, 5e-6, 50e9, 10e-6,
     0.75, 0.55, 32, 128, 0.8 * 3.35e12, 50e-6, 3 * GIB, "NVIDIA H100 datasheet; DGX H100", 132, MM_K_OVER, CLOCK_EFF},
    /* NVIDIA H200 datasheet: H100's compute with 141 GB HBM3e at 4.8 TB/s. */
    {"h200", "NVIDIA H200 SXM 141 GB", 0, 989e12, 141 * GIB, 4.8e12, 8, 450e9, 5e-6, 50e9, 10e-6,
     0.75, 0.55, 32, 128, 0.8 * 4.8e12, 50e-6, 3 * GIB, "NVIDIA H200 datasheet; HGX H200", 132, MM_K_OVER, CLOCK_EFF},
    /* NVIDIA DGX/HGX B200: 2.25 PFLOP/s BF16 dense per GPU (36 PFLOP/s sparse per 8),
     * 180 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s total (900 each way), 400 Gb/s
     * ConnectX-7 per GPU. Efficiencies: no sustained public figure atoll trusts, so
     * H100's are assumed. */
    {"b200", "NVIDIA B200 180 GB", 0, 2.25e15, 180 * GIB, 8e12, 8, 900e9, 5e-6, 50e9, 10e-6,
     0.75, 0.55, 32, 128, 0.8 * 8e12, 50e-6, 3 * GIB, "NVIDIA DGX B200 datasheet", 148, MM_K_OVER, CLOCK_EFF},
    /* This machine's CPU running atoll's own trainer (fp32). The peak is a measurement:
     * --measure, --cpu-gflops or bench/results.json; without one, the value below was
     * measured on atoll's development machine (2 AMD EPYC cores, OpenBLAS sgemm about
     * 200 GFLOP/s idle, ../shared/DESIGN.md; the CLI scales it per core). eta_mm 1.0 because the peak is itself the
     * sgemm rate (the model's products ran at 0.95-1.2x the square-2048 figure).
     * Attention (atoll's blocked kernel, 64-row tiles, probabilities recomputed in
     * backward): measured 0.2x the sgemm rate at head dim 32 and seq 64, 0.47x at 64 and
     * 256, which eta_attn 1.0, hd_half 64, block 64 reproduce. Elementwise kernels (GELU
     * and LayerNorm, forward and backward): about 8 GB/s per core against 40-64 GFLOP/s
     * sgemm on the same core (0.15 byte per sgemm FLOP when not measured, see
     * atoll_plan_cpu_set). Memory: set from /proc/meminfo by the CLI. Links: the
     * shared-memory MPI all-reduce measured 2-3.5 GB/s; 10 GbE between machines. */
    {"cpu", "this machine's CPU (atoll's fp32 trainer)", 1, 200e9, 8 * GIB, 20e9, 1, 2.5e9, 5e-6, 1.25e9, 50e-6,
     1.00, 1.00, 64, 64, 25e9, 20e-6, 1 * GIB, "measured: bench/sgemm_peak.c, atoll plan --measure", 0, 0, 1.0},
};
#define NACCELS (int)(sizeof ACCELS / sizeof ACCELS[0])

int atoll_plan_accel_count(void) { return NACCELS; }
const atoll_plan_accel *atoll_plan_accel_at(int i) { return i >= 0 && i < NACCELS ? &ACCELS[i] : NULL; }

/* Bytes of elementwise traffic per sgemm FLOP on a CPU core (measured, see above). */
#define CPU_ELEM_BYTES_PER_FLOP 0.15

void atoll_plan_cpu_set(atoll_plan_accel *a, double sgemm_flops, double elem_bw) {
  a->peak_flops = sgemm_flops;
  a->elem_bw = elem_bw > 0 ? elem_bw : sgemm_flops * CPU_ELEM_BYTES_PER_FLOP;
}

/* ----------------------------------------------------------------- lookup --- */

static int name_eq(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char x = *a == '_' ? '-' : (char)tolower((unsigned char)*a);
    char y = *b == '_' ? '-' : (char)tolower((unsigned char)*b);
    if (x != y) return 0;
  }
  return *a == *b;
}

/* Common spellings of the same chips. */
static const char *accel_alias(const char *name) {
  static const struct {
    const char *alias, *name;
  } A[] = {{"h100-sxm", "h100"}, {"h100-80gb", "h100"}, {"h100-sxm5", "h100"}, {"a100", "a100-80gb"},
           {"a100-40", "a100-40gb"}, {"a100-80", "a100-80gb"}, {"h200-sxm", "h200"}};
  for (size_t i = 0; i < sizeof A / sizeof A[0]; i++)
    if (name_eq(name, A[i].alias)) return A[i].name;
  return name;
}

int atoll_plan_model_find(const char *name, atoll_plan_model *out, atoll_err *err) {
  for (int i = 0; i < NMODELS; i++)
    if (name_eq(name, MODELS[i].name) || (name_eq(name, "gpt2-small") && i == 0)) {
      *out = MODELS[i];
      return 0;
    }
  char list[256] = "";
  for (int i = 0; i < NMODELS; i++) {
    strncat(list, MODELS[i].name, sizeof list - strlen(list) - 1);
    if (i + 1 < NMODELS) strncat(list, ", ", sizeof list - strlen(list) - 1);
  }
  return atoll_fail(err, "--model %s: unknown model (known: %s; or give --layers --dim --heads ...)", name, list);
}

int atoll_plan_accel_find(const char *name, atoll_plan_accel *out, atoll_err *err) {
  const char *n = accel_alias(name);
  for (int i = 0; i < NACCELS; i++)
    if (name_eq(n, ACCELS[i].name)) {
      *out = ACCELS[i];
      return 0;
    }
  char list[256] = "";
  for (int i = 0; i < NACCELS; i++) {
    strncat(list, ACCELS[i].name, sizeof list - strlen(list) - 1);
    if (i + 1 < NACCELS) strncat(list, ", ", sizeof list - strlen(list) - 1);
  }
  return atoll_fail(err, "--accel %s: unknown accelerator (known: %s)", name, list);
}

void atoll_plan_cluster_default(atoll_plan_cluster *c, const atoll_plan_accel *a, int n) {
  memset(c, 0, sizeof *c);
  c->acc = *a;
  c->gpus = n;
  c->gpus_per_node = a->gpus_per_node;
  c->intra_bw = a->intra_bw;
  c->intra_lat = a->intra_lat;
  c->inter_bw = a->inter_bw;
  c->inter_lat = a->inter_lat;
  c->islands = 1;
  c->wan_bw = 10e9 / 8; /* 10 Gbit/s */
  c->wan_lat = 30e-3;
  c->diloco_h = 500;
}

/* ------------------------------------------------------------ model shape --- */

int atoll_plan_model_check(const atoll_plan_model *m, atoll_err *err) {
  if (m->layers < 1 || m->layers > 100000)
    return atoll_fail(err, "--layers: must be in [1, 100000], got %d", m->layers);
  if (m->dim < 1 || m->dim > 1 << 20) return atoll_fail(err, "--dim: must be in [1, 1048576], got %d", m->dim);
  if (m->heads < 1) return atoll_fail(err, "--heads: must be at least 1, got %d", m->heads);
  if (m->dim % m->heads)
    return atoll_fail(err, "--heads: %d heads do not divide the width --dim %d", m->heads, m->dim);
  if (m->kv_heads < 1 || m->kv_heads > m->heads || m->heads % m->kv_heads)
    return atoll_fail(err, "--kv-heads: %d KV heads must divide the %d attention heads", m->kv_heads, m->heads);
  if (m->ffn < 1 || m->ffn > 1 << 24) return atoll_fail(err, "--ffn: must be in [1, 16777216], got %d", m->ffn);
  if (m->vocab < 2 || m->vocab > 1 << 24) return atoll_fail(err, "--vocab: must be in [2, 16777216], got %d", m->vocab);
  if (m->seq < 1 || m->seq > 1 << 24) return atoll_fail(err, "--seq: must be in [1, 16777216], got %d", m->seq);
  if (m->arch == ATOLL_ARCH_GPT2 && m->kv_heads != m->heads)
    return atoll_fail(err, "--kv-heads: the gpt2 architecture has multi-head attention (kv-heads = heads = %d)",
                      m->heads);
  if (m->arch == ATOLL_ARCH_GPT2 && m->seq > m->context)
    return atoll_fail(err,
                      "--seq: %d is longer than the model's context %d (GPT-2 learns one position embedding per "
                      "position)",
                      m->seq, m->context);
  return 0;
}

/* -------------------------------------------------------------- parameters --- */

double atoll_plan_layer_matmul_params(const atoll_plan_model *m) {
  double h = m->dim, f = m->ffn, hkv = (double)m->kv_heads * (m->dim / m->heads);
  if (m->arch == ATOLL_ARCH_LLAMA) return 2 * h * h + 2 * h * hkv + 3 * h * f; /* q, o; k, v; gate, up, down */
  return 2 * h * h + 2 * h * hkv + 2 * h * f; /* qkv (3h x h), proj; fc, fc2 */
}

double atoll_plan_layer_params(const atoll_plan_model *m) {
  double h = m->dim, f = m->ffn, hkv = (double)m->kv_heads * (m->dim / m->heads);
  if (m->arch == ATOLL_ARCH_LLAMA) return atoll_plan_layer_matmul_params(m) + 2 * h; /* two RMSNorm weights */
  /* biases: qkv (h + 2 hkv), proj h, fc f, fc2 h; two LayerNorms (weight, bias) */
  return atoll_plan_layer_matmul_params(m) + (h + 2 * hkv) + h + f + h + 4 * h;
}

double atoll_plan_embed_params(const atoll_plan_model *m) {
  double e = (double)m->vocab * m->dim;
  if (m->arch == ATOLL_ARCH_GPT2) e += (double)m->context * m->dim; /* learned positions */
  return e;
}

double atoll_plan_head_params(const atoll_plan_model *m) { return m->tied ? 0 : (double)m->vocab * m->dim; }

static double final_norm_params(const atoll_plan_model *m) {
  return m->arch == ATOLL_ARCH_LLAMA ? m->dim : 2.0 * m->dim;
}

double atoll_plan_params(const atoll_plan_model *m) {
  return m->layers * atoll_plan_layer_params(m) + atoll_plan_embed_params(m) + atoll_plan_head_params(m) +
         final_norm_params(m);
}

double atoll_plan_flops_per_token(const atoll_plan_model *m, int seq) {
  double matmul = m->layers * atoll_plan_layer_matmul_params(m) + (double)m->vocab * m->dim;
  return 6.0 * matmul + 6.0 * m->layers * (double)m->dim * seq;
}

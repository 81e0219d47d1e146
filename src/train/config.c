/* Training configuration: one table of keys serves the command-line flags
 * (--key value), the --config JSON file (the same keys) and the JSON copy saved in
 * checkpoints and summary.json. */
#include "train/config.h"
#include "train/eval_sets.h"

#include "core/json_text.h"
#include "parallel/outer_lr.h"
#include "parallel/pipeline.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_INT, K_FLOAT, K_U64, K_STR } key_type;

typedef struct {
  const char *key;
  key_type type;
  size_t offset;
  double min, max; /* numeric range, inclusive; for strings max is the buffer size */
  const char *help;
} key_spec;

/* Maxima: far above any run this trainer makes, low enough that a typo is refused at
 * once with the limit instead of allocating for minutes (issue 12). What the model
 * and its activations need is checked against the machine's memory at start-up
 * (train_memory.c); these only keep every count, and the products of counts the code
 * forms in int, in range. */
#define MAX_LAYERS 1024       /* layers, heads, fragments; GPT-3 has 96 layers */
#define MAX_SEQ (1 << 17)     /* context and seq: 131072 tokens */
#define MAX_VOCAB (1 << 21)   /* 2 Mi ids: 8x the largest tokenizers in use */
#define MAX_COUNT (1 << 16)   /* batch, eval-batches, keep */
#define MAX_STEPS 10000000    /* the report and the pipeline keep times per step: 240 MB at most */
#define MAX_RANKS 4096        /* tp, pp, islands */

#define F(field) offsetof(atoll_config, field)
#define STR(field) K_STR, F(field), 0, sizeof(((atoll_config *)0)->field)
static const key_spec KEYS[] = {
    {"layers", K_INT, F(model.layers), 1, MAX_LAYERS, "transformer blocks"},
    {"heads", K_INT, F(model.heads), 1, MAX_LAYERS, "attention heads (must divide dim, but for llama with --head-dim)"},
    {"dim", K_INT, F(model.dim), 1, 65536, "model width"},
    {"context", K_INT, F(model.context), 1, MAX_SEQ, "maximum sequence length of the model"},
    {"vocab", K_INT, F(model.vocab), 2, MAX_VOCAB, "vocabulary size (256: byte tokenizer)"},
    {"arch", STR(model.arch), "block design: gpt2 (LayerNorm, learned positions, GELU, tied head) or llama (RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases)"},
    {"kv-heads", K_INT, F(model.kv_heads), 0, MAX_LAYERS, "llama: key/value heads, dividing --heads (0: --heads, plain multi-head attention)"},
    {"head-dim", K_INT, F(model.head_dim), 0, 1024, "llama: the width of one attention head (0: dim / heads); q is [heads x head-dim, dim], k and v [kv-heads x head-dim, dim], o [dim, heads x head-dim]"},
    {"multiple-of", K_INT, F(model.multiple_of), 1, 65536, "llama: SwiGLU width = multiple-of x ceil(floor(8 dim / 3) / multiple-of)"},
    {"norm-eps", K_FLOAT, F(model.norm_eps), 1e-12, 1, "llama: RMSNorm epsilon"},
    {"rope-theta", K_FLOAT, F(model.rope_theta), 1, 1e9, "llama: rotary embedding base"},
    {"rope-scaling", STR(model.rope_scaling), "llama: rotary frequency scaling, none or llama3 (Llama 3.1's; the four keys below; docs/formats.md)"},
    {"rope-factor", K_FLOAT, F(model.rope_factor), 1, 1e6, "llama3 rope scaling: low frequencies are divided by it"},
    {"rope-low-freq-factor", K_FLOAT, F(model.rope_low_freq), 1e-6, 1e6, "llama3 rope scaling: wavelengths above original-context / it are scaled fully"},
    {"rope-high-freq-factor", K_FLOAT, F(model.rope_high_freq), 1e-6, 1e6, "llama3 rope scaling: wavelengths below original-context / it are kept"},
    {"rope-original-context", K_INT, F(model.rope_orig_context), 1, 1 << 24, "llama3 rope scaling: the context the model was first trained at"},
    {"tie", K_INT, F(model.tie), -1, 1, "1: LM head tied to the token embedding, 0: its own lm_head (llama only), -1: the arch's default (gpt2 1, llama 0)"},
    {"qkv-bias", K_INT, F(model.qkv_bias), 0, 1, "llama: 1 adds biases to the q, k and v projections (Qwen2's attention)"},
    {"batch", K_INT, F(data.batch), 1, MAX_COUNT, "sequences per micro-batch"},
    {"seq", K_INT, F(data.seq), 0, MAX_SEQ, "tokens per sequence (0: the context length)"},
    {"accum", K_INT, F(data.accum), 1, ATOLL_MAX_MICRO_BATCHES, "micro-batches per optimizer step"},
    {"steps", K_INT, F(run.steps), 1, MAX_STEPS, "optimizer steps in total"},
    {"lr", K_FLOAT, F(optim.adamw.lr), 0, 10, "peak learning rate"},
    {"min-lr-ratio", K_FLOAT, F(optim.adamw.min_lr_ratio), 0, 1, "final learning rate / peak"},
    {"warmup", K_INT, F(optim.adamw.warmup), 0, INT_MAX, "linear warm-up steps"},
    {"weight-decay", K_FLOAT, F(optim.adamw.weight_decay), 0, 10, "AdamW decoupled weight decay"},
    {"grad-clip", K_FLOAT, F(optim.adamw.grad_clip), 0, 1e9, "global gradient-norm clip (0: off)"},
    {"beta1", K_FLOAT, F(optim.adamw.beta1), 0, 0.999999, "AdamW beta1"},
    {"beta2", K_FLOAT, F(optim.adamw.beta2), 0, 0.999999999, "AdamW beta2"},
    {"eps", K_FLOAT, F(optim.adamw.eps), 0, 1, "AdamW epsilon"},
    {"seed", K_U64, F(run.seed), 0, 0, "seed for weights and data order"},
    {"threads", K_INT, F(run.threads), 0, 1024, "threads (0: all cores)"},
    {"data", STR(data.dir), "prepared data directory"},
    {"out", STR(run.out), "run directory"},
    {"resume", STR(run.resume), "checkpoint (or run directory) to continue"},
    {"move-newer", STR(run.move_newer), "with --resume: move OUT's checkpoints newer than the resumed one (or another run's) into DIR, with summary.json and metrics.jsonl, instead of refusing (docs/formats.md)"},
    {"optimizer", STR(optim.name), "inner optimizer: adamw or sgd (plain SGD, for DiLoCo equivalence checks)"},
    {"eval-every", K_INT, F(run.eval_every), 0, INT_MAX, "steps between validation losses (0: end only)"},
    {"eval-batches", K_INT, F(run.eval_batches), 1, MAX_COUNT, "batches per validation loss"},
    {"eval-data", STR(data.eval_sets), "more validation sets, NAME=DIR[,NAME=DIR...] (or the flag again): each prepared directory's val split, reported as val_loss_NAME"},
    {"save-every", K_INT, F(run.save_every), 0, INT_MAX, "steps between checkpoints (0: end only)"},
    {"keep", K_INT, F(run.keep), 1, MAX_COUNT, "checkpoints kept"},
    {"log-every", K_INT, F(run.log_every), 1, INT_MAX, "steps between progress lines when not on a terminal"},
    {"tensorboard", STR(run.tensorboard), "write the metrics also as TensorBoard scalars: an event file in this directory (not given: none; docs/usage.md)"},
    {"stop-after", K_INT, F(run.stop_after), 0, INT_MAX, "save and stop once this step is done (0: run to --steps)"},
    {"global-batch", K_INT, F(data.global_batch), 0, INT_MAX, "sequences per step over all ranks; sets accum = global-batch / (batch x ranks)"},
    {"parallel", STR(parallel.mode), "data-parallel mode with several ranks: ddp"},
    {"zero", K_INT, F(parallel.zero_stage), 0, 3, "ZeRO stage: 0 none (DDP), 1 optimizer state, 2 + gradients, 3 + weights (FSDP)"},
    {"tp", K_INT, F(parallel.tp), 1, MAX_RANKS, "tensor-parallel ranks per pp_stage: heads, MLP width and vocabulary cut across them"},
    {"sequence-parallel", K_INT, F(parallel.sequence_parallel), 0, 1, "1: with --tp, cut LayerNorm regions and the residual stream by tokens (all-gather / reduce-scatter instead of all-reduce)"},
    {"pp", K_INT, F(parallel.pp), 1, MAX_RANKS, "pipeline stages: contiguous groups of layers on different ranks"},
    {"virtual-stages", K_INT, F(parallel.virtual_stages), 1, 64, "interleaved pipeline: chunks of layers per pp_stage (V); the bubble falls to (P-1)/(V M) with P = pp, M micro-batches"},
    {"microbatches", K_INT, F(parallel.microbatches), 0, ATOLL_MAX_MICRO_BATCHES, "micro-batches per step per pipeline (0: --accum); the pipeline streams them"},
    {"schedule", STR(parallel.schedule), "pipeline schedule: 1f1b (one forward, one backward) or gpipe (all forwards, then all backwards)"},
    {"bucket-mb", K_FLOAT, F(parallel.bucket_mb), 0.001, 4096, "gradient bucket size for overlapped communication (MiB)"},
    {"comm-timeout", K_FLOAT, F(parallel.comm_timeout), 0.1, 1e7, "seconds a collective may wait before the job is ended"},
    {"islands", K_INT, F(islands.count), 1, MAX_RANKS, "DiLoCo islands: equal blocks of ranks that sync every --sync-every steps"},
    {"sync-every", K_INT, F(islands.sync_every), 1, INT_MAX, "DiLoCo: inner steps between outer syncs (H)"},
    {"outer-lr", K_FLOAT, F(islands.outer_lr), 0, 100, "DiLoCo outer learning rate (not given: by --sync-every, 0.7 below H = 50 and 1.0 from 50, measured in bench/diloco; the run records the number)"},
    {"outer-momentum", K_FLOAT, F(islands.outer_momentum), 0, 0.999999, "DiLoCo outer momentum"},
    {"outer-optimizer", STR(islands.outer_optimizer), "DiLoCo outer optimizer: nesterov or sgd"},
    {"outer-mode", STR(islands.outer_mode), "DiLoCo: sync (an outer step merges --overlap steps after its sync, waiting for its exchange there) or async (with --overlap T >= 1: it merges at the first step from then on at which its exchange is done; the island waits only at its next sync if the exchange still runs)"},
    {"fragments", K_INT, F(islands.fragments), 1, MAX_LAYERS, "streaming DiLoCo: fragments synced on staggered schedules"},
    {"overlap", K_INT, F(islands.overlap), 0, INT_MAX, "streaming DiLoCo: inner steps run while a fragment's sync is in flight"},
    {"merge-alpha", K_FLOAT, F(islands.merge_alpha), 0, 1, "streaming DiLoCo: weight of the island's own fragment when merging after an overlap"},
    {"outer-dtype", STR(islands.outer_dtype), "outer gradient on the wire: fp32, bf16, int8 or fp4"},
    {"wan-gbps", K_FLOAT, F(islands.wan_gbps), 0, 1e6, "inter-island link bandwidth for the time model (0: none)"},
    {"wan-latency-ms", K_FLOAT, F(islands.wan_latency_ms), 0, 1e6, "inter-island link latency for the time model"},
    {"island-data", STR(islands.data), "DiLoCo data per island: iid (all files), files (island k takes source files k, k+K, ...) or blocks (island k takes the k-th of K contiguous runs of source files: on a corpus sorted by topic, non-i.i.d.)"},
    {"throttle", K_INT, F(islands.throttle), 0, 1, "1: hold inter-island exchanges to the modelled link time"},
    {"init-from", STR(init.from), "a new run starts from this checkpoint's weights (any layout, islands, ZeRO stage); step, schedule and outer momentum start at zero (--init-step 1: the step goes on)"},
    {"init-optim", K_INT, F(init.optim), 0, 1, "with --init-from: 1 also takes the checkpoint's AdamW moments"},
    {"init-step", K_INT, F(init.step), 0, 1, "with --init-from: 1 goes on from the checkpoint's step (learning-rate schedule, data windows, DiLoCo's sync steps and AdamW's step count as the source run would have them; --steps is then the total, as for a resume)"},
    {"init-from-hf", STR(init.from_hf), "a new run starts from the weights of a Hugging Face directory (config.json, model.safetensors; atoll export --to hf)"},
    {"device", STR(device.type), "where the model's weights, gradients, optimizer state and activations live: cpu, or cuda (one GPU per process; gpt2; data parallel with --zero 0 or 1, DiLoCo islands; no --tp/--pp yet; docs/gpu.md). shadow: a test device (the CPU kernels behind memory the host may not touch)"},
    {"dp-comm", STR(parallel.dp_comm), "a device run's data-parallel gradient sums: host (copied through host memory, MPI; bit-identical to the CPU's buckets) or nccl (NCCL on the device buffers; --device cuda, --zero 0; not yet run on a GPU)"},
    {"peak-tflops", K_FLOAT, F(device.peak_tflops), 0, 1e6, "one rank's peak TFLOP/s at --precision, for MFU in the progress line and summary.json (0: a known GPU's datasheet peak, else no MFU)"},
    {"precision", STR(device.precision), "matrix products: fp32, or bf16 (inputs rounded to bfloat16, fp32 accumulation; weights, gradients, optimizer and checkpoints stay fp32; needs AVX512_BF16 or AMX)"},
    {"grad-dtype", STR(parallel.grad_dtype), "data-parallel gradient traffic (DDP all-reduce, ZeRO reduce-scatter): fp32, or bf16 (half the bytes; each hop rounds its fp32 partial sum to bfloat16 and the receiver adds in fp32; the reduced gradient is bf16-valued and identical on every rank)"},
    {"join", STR(islands.join), "islands as separate jobs: the coordinator's endpoint tcp://HOST:PORT (docs/islands.md)"},
    {"island-key", STR(islands.key), "with --join: this island's secret key file (atoll keys --out DIR: DIR/key.secret)"},
    {"coordinator-key", STR(islands.coordinator_key), "with --join: the coordinator's public key file (its key.pub)"},
    {"island-listen", STR(islands.listen), "with --join: this island's data endpoint tcp://ADDR:PORT, where the other islands connect (a wildcard address, * or 0.0.0.0, needs --island-advertise; default: this host's address toward the coordinator, any free port)"},
    {"island-advertise", STR(islands.advertise), "with --join: the endpoint tcp://HOST:PORT the other islands are told to connect to, when --island-listen binds a wildcard address (port 0 or *: the bound port)"},
    {"island-id", K_INT, F(islands.id), 0, MAX_RANKS - 1, "with --join: this island's slot in [0, --islands): its data and its place in the sum"},
    {"net-streams", K_INT, F(islands.net_streams), 1, 64, "with --join: parallel streams (TCP connections) per peer"},
    {"net-timeout", K_FLOAT, F(islands.net_timeout), 0.1, 1e7, "with --join: seconds any network wait may take"},
    {"data-units", K_INT, F(islands.units), 0, 1, "with --join: 1 in an open run (coordinator --open 1; set from the coordinator's answer): the island trains each inner phase on a data unit the coordinator hands out, and its slot is its key's, not a place in --islands"},
    {"phase-tokens", K_U64, F(islands.phase_tokens), 0, 0, "with --join: the island's inner phase ends once it trained this many tokens (at least one step, at most --sync-every); it skips the phase's other steps and contributes what it trained, weighted by its tokens (0: off)"},
    {"phase-seconds", K_FLOAT, F(islands.phase_seconds), 0, 1e7, "with --join: the island's inner phase ends before a step that would take it past this many seconds of inner steps (at least one step, at most --sync-every): a slow island skips the rest and syncs with the others, weighted by its tokens (0: off)"},
};
#undef F
#define NKEYS (int)(sizeof KEYS / sizeof KEYS[0])

void atoll_config_defaults(atoll_config *c) {
  memset(c, 0, sizeof *c);
  c->model = (atoll_shape){.layers = 4, .heads = 4, .dim = 256, .context = 128, .vocab = ATOLL_BYTE_VOCAB,
                           .arch = "gpt2", .kv_heads = 0, .multiple_of = 256, .tie = -1, .norm_eps = 1e-5f,
                           .rope_theta = 10000.0f, .rope_scaling = "none", .rope_factor = 8.0f,
                           .rope_low_freq = 1.0f, .rope_high_freq = 4.0f, .rope_orig_context = 8192};
  c->data.batch = 16;
  c->data.seq = 0;
  c->data.accum = 1;
  c->run.steps = 600;
  c->optim.adamw = (atoll_adamw_config){.lr = 1e-3f, .min_lr_ratio = 0.1f, .warmup = 50, .total_steps = 0,
                                .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                .weight_decay = 0.1f, .grad_clip = 1.0f};
  c->run.seed = 1337;
  c->run.threads = 0;
  snprintf(c->data.dir, sizeof c->data.dir, "data/fortunes");
  snprintf(c->run.out, sizeof c->run.out, "runs/default");
  c->run.eval_every = 100;
  c->run.eval_batches = 8;
  c->run.save_every = 200;
  c->run.keep = 3;
  c->run.log_every = 50;
  c->data.global_batch = 0;
  snprintf(c->parallel.mode, sizeof c->parallel.mode, "ddp");
  c->parallel.zero_stage = 0;
  c->parallel.bucket_mb = 4.0f;
  c->parallel.tp = 1;
  c->parallel.pp = 1;
  c->parallel.virtual_stages = 1;
  c->parallel.microbatches = 0;
  snprintf(c->parallel.schedule, sizeof c->parallel.schedule, "1f1b");
  c->parallel.comm_timeout = 300.0f;
  snprintf(c->optim.name, sizeof c->optim.name, "adamw");
  c->islands.count = 1;
  c->islands.sync_every = 100;
  /* not given: by H (atoll_diloco_default_outer_lr), resolved once H is known; the DiLoCo
   * paper's 0.7 (Nesterov, momentum 0.9) is the table's value below H = 50 */
  c->islands.outer_lr = -1.0f;
  c->islands.outer_momentum = 0.9f;
  snprintf(c->islands.outer_optimizer, sizeof c->islands.outer_optimizer, "nesterov");
  snprintf(c->islands.outer_mode, sizeof c->islands.outer_mode, "sync");
  c->islands.fragments = 1;
  c->islands.overlap = 0;
  c->islands.merge_alpha = 0.5f;
  snprintf(c->islands.outer_dtype, sizeof c->islands.outer_dtype, "fp32");
  snprintf(c->islands.data, sizeof c->islands.data, "iid");
  snprintf(c->device.precision, sizeof c->device.precision, "fp32");
  snprintf(c->device.type, sizeof c->device.type, "cpu");
  snprintf(c->parallel.dp_comm, sizeof c->parallel.dp_comm, "host");
  snprintf(c->parallel.grad_dtype, sizeof c->parallel.grad_dtype, "fp32");
  c->islands.net_streams = 4;
  c->islands.net_timeout = 60.0f;
}

/* Old names still accepted: "shard" was the ZeRO stage's key before "zero", and
 * checkpoints saved then hold it in their state.json. */
static const struct {
  const char *alias, *key;
} ALIASES[] = {{"shard", "zero"}};

/* Keys are written with dashes; JSON files may also use underscores. */
static const key_spec *find_key(const char *key) {
  char norm[64];
  size_t n = strlen(key);
  if (n >= sizeof norm) return NULL;
  for (size_t i = 0; i <= n; i++) norm[i] = key[i] == '_' ? '-' : key[i];
  for (size_t a = 0; a < sizeof ALIASES / sizeof ALIASES[0]; a++)
    if (strcmp(norm, ALIASES[a].alias) == 0) snprintf(norm, sizeof norm, "%s", ALIASES[a].key);
  for (int i = 0; i < NKEYS; i++)
    if (strcmp(KEYS[i].key, norm) == 0) return &KEYS[i];
  return NULL;
}

static int set_number(atoll_config *c, const key_spec *k, double v, const char *source,
                      atoll_err *err) {
  void *field = (char *)c + k->offset;
  if (!isfinite(v)) return atoll_fail(err, "%s: %s must be a finite number", source, k->key);
  if (k->type == K_U64) {
    if (v < 0 || v > 18446744073709549568.0 || v != floor(v))
      return atoll_fail(err, "%s: %s must be a non-negative integer", source, k->key);
    *(uint64_t *)field = (uint64_t)v;
    return 0;
  }
  if (v < k->min || v > k->max)
    return atoll_fail(err, "%s: %s must be in [%.15g, %.15g], got %.15g", source, k->key, k->min, k->max, v);
  if (k->type == K_INT) {
    if (v != floor(v)) return atoll_fail(err, "%s: %s must be an integer, got %g", source, k->key, v);
    *(int *)field = (int)v;
  } else {
    *(float *)field = (float)v;
  }
  return 0;
}

static int set_string(atoll_config *c, const key_spec *k, const char *s, const char *source,
                      atoll_err *err) {
  char *field = (char *)c + k->offset;
  size_t cap = (size_t)k->max;
  if (strlen(s) >= cap) {
    if (strcmp(source, "flag") == 0) /* a path, mostly: a shorter spelling of it works */
      return atoll_fail(err, "--%s: longer than %zu bytes (%zu); for a path, give it relative to the working "
                        "directory", k->key, cap - 1, strlen(s));
    return atoll_fail(err, "%s: %s is longer than %zu bytes", source, k->key, cap - 1);
  }
  memcpy(field, s, strlen(s) + 1);
  return 0;
}

int atoll_config_set(atoll_config *c, const char *key, const char *value, atoll_err *err) {
  const key_spec *k = find_key(key);
  char source[80];
  snprintf(source, sizeof source, "--%s", key);
  if (!k) return atoll_fail(err, "--%s: unknown flag (see `atoll train --help`)", key);
  if (!value) return atoll_fail(err, "--%s: missing value", key);
  /* an empty value is never meant: "--init-from ''" would silently start from scratch */
  if (k->type == K_STR && !value[0]) return atoll_fail(err, "--%s: empty value", key);
  if (k->type == K_STR) return set_string(c, k, value, "flag", err);
  errno = 0;
  char *end = NULL;
  double v;
  if (k->type == K_U64) {
    unsigned long long u = strtoull(value, &end, 10);
    if (errno || end == value || *end || value[0] == '-')
      return atoll_fail(err, "--%s: expected a non-negative integer, got '%s'", key, value);
    *(uint64_t *)((char *)c + k->offset) = (uint64_t)u;
    return 0;
  }
  v = strtod(value, &end);
  if (errno || end == value || *end)
    return atoll_fail(err, "--%s: expected a number, got '%s'", key, value);
  return set_number(c, k, v, source, err);
}

/* A key that a settings object may not hold: twice (which one would win is not
 * obvious), or "resume", which says how to start this invocation, not what the run is.
 * Twice means the same setting (k), whatever the spelling: "sync_every" and
 * "sync-every", or "shard" and its newer name "zero". */
static int check_settings_key(const cJSON *obj, const cJSON *it, const char *key, const key_spec *k,
                              const char *source, atoll_err *err) {
  for (const cJSON *prev = obj->child; prev != it; prev = prev->next) {
    if (!prev->string || find_key(prev->string) != k) continue;
    if (strcmp(prev->string, key) == 0)
      return atoll_fail(err, "%s: key '%s' appears more than once", source, key);
    return atoll_fail(err, "%s: keys '%s' and '%s' are the same setting (%s); give it once", source,
                      prev->string, key, k->key);
  }
  if (strcmp(key, "resume") == 0)
    return atoll_fail(err, "%s: key 'resume' is not read from settings; pass --resume DIR on the "
                      "command line", source);
  return 0;
}

int atoll_config_apply_json(atoll_config *c, const cJSON *obj, const char *source, atoll_err *err) {
  if (!cJSON_IsObject(obj)) return atoll_fail(err, "%s: expected a JSON object of settings", source);
  for (const cJSON *it = obj->child; it; it = it->next) {
    const char *key = it->string ? it->string : "";
    const key_spec *k = find_key(key);
    if (!k) return atoll_fail(err, "%s: unknown key '%s'", source, key);
    if (check_settings_key(obj, it, key, k, source, err)) return -1;
    if (k->type == K_STR) {
      if (!cJSON_IsString(it)) return atoll_fail(err, "%s: %s must be a string", source, k->key);
      if (set_string(c, k, it->valuestring, source, err)) return -1;
    } else if (k->type == K_U64 && cJSON_IsString(it)) {
      /* 64-bit seeds are stored as strings: a JSON double cannot hold every value */
      char *end = NULL;
      errno = 0;
      unsigned long long u = strtoull(it->valuestring, &end, 10);
      if (errno || end == it->valuestring || *end || it->valuestring[0] == '-')
        return atoll_fail(err, "%s: %s must be a non-negative integer", source, k->key);
      *(uint64_t *)((char *)c + k->offset) = (uint64_t)u;
    } else {
      if (!cJSON_IsNumber(it)) return atoll_fail(err, "%s: %s must be a number", source, k->key);
      if (set_number(c, k, it->valuedouble, source, err)) return -1;
    }
  }
  return 0;
}

int atoll_config_apply_text(atoll_config *c, const char *text, size_t len, const char *source,
                            atoll_err *err) {
  cJSON *obj = atoll_json_parse_whole(text, len, source, err);
  if (!obj) return -1;
  int rc = atoll_config_apply_json(c, obj, source, err);
  cJSON_Delete(obj);
  return rc;
}

int atoll_island_data_mode(const char *name) {
  const char *modes[] = {"iid", "files", "blocks"};
  for (int i = 0; i < 3; i++)
    if (strcmp(name, modes[i]) == 0) return i;
  return -1;
}

int atoll_config_check(const atoll_config *c, atoll_err *err) {
  if (atoll_shape_check(&c->model, err)) return -1;
  atoll_eval_set sets[ATOLL_MAX_EVAL_SETS];
  int nsets;
  if (atoll_eval_sets_parse(c->data.eval_sets, sets, &nsets, err)) return -1;
  if (strcmp(c->model.arch, "llama") != 0 && c->model.tie == 0)
    return atoll_fail(err, "--tie 0: GPT-2's LM head is always tied to wte (an untied head needs --arch llama)");
  int seq = c->data.seq ? c->data.seq : c->model.context;
  if (seq > c->model.context)
    return atoll_fail(err, "seq: %d is longer than the model's context %d", seq, c->model.context);
  if ((double)c->data.batch * seq * c->data.accum > 1e12)
    return atoll_fail(err, "batch: batch x seq x accum is absurdly large");
  if (strcmp(c->parallel.mode, "ddp") != 0)
    return atoll_fail(err, "--parallel: unknown mode '%s' (known: ddp)", c->parallel.mode);
  if (atoll_island_data_mode(c->islands.data) < 0)
    return atoll_fail(err, "--island-data: unknown '%s' (known: iid, files, blocks)", c->islands.data);
  if (strcmp(c->optim.name, "adamw") != 0 && strcmp(c->optim.name, "sgd") != 0)
    return atoll_fail(err, "--optimizer: unknown optimizer '%s' (known: adamw, sgd)", c->optim.name);
  if (strcmp(c->islands.outer_optimizer, "nesterov") != 0 && strcmp(c->islands.outer_optimizer, "sgd") != 0)
    return atoll_fail(err, "--outer-optimizer: unknown '%s' (known: nesterov, sgd)", c->islands.outer_optimizer);
  if (strcmp(c->islands.outer_mode, "sync") != 0 && strcmp(c->islands.outer_mode, "async") != 0)
    return atoll_fail(err, "--outer-mode: unknown '%s' (known: sync, async)", c->islands.outer_mode);
  if (strcmp(c->islands.outer_dtype, "fp32") && strcmp(c->islands.outer_dtype, "bf16") && strcmp(c->islands.outer_dtype, "int8") &&
      strcmp(c->islands.outer_dtype, "fp4"))
    return atoll_fail(err, "--outer-dtype: unknown '%s' (known: fp32, bf16, int8, fp4)", c->islands.outer_dtype);
  if (strcmp(c->device.precision, "fp32") != 0 && strcmp(c->device.precision, "bf16") != 0)
    return atoll_fail(err, "--precision: unknown '%s' (known: fp32, bf16)", c->device.precision);
  if (strcmp(c->device.type, "cpu") != 0 && strcmp(c->device.type, "cuda") != 0 && strcmp(c->device.type, "shadow") != 0)
    return atoll_fail(err, "--device: unknown '%s' (known: cpu, cuda; shadow, a test device)", c->device.type);
  if (c->device.peak_tflops > 0 && c->device.peak_tflops < 1e-3)
    return atoll_fail(err, "--peak-tflops: %g is below 0.001 (a GFLOP/s); 0 means the GPU table's peak", c->device.peak_tflops);
  if (strcmp(c->parallel.dp_comm, "host") != 0 && strcmp(c->parallel.dp_comm, "nccl") != 0)
    return atoll_fail(err, "--dp-comm: unknown '%s' (known: host, nccl)", c->parallel.dp_comm);
  if (strcmp(c->parallel.grad_dtype, "fp32") != 0 && strcmp(c->parallel.grad_dtype, "bf16") != 0)
    return atoll_fail(err, "--grad-dtype: unknown '%s' (known: fp32, bf16)", c->parallel.grad_dtype);
  if (strcmp(c->parallel.schedule, "1f1b") != 0 && strcmp(c->parallel.schedule, "gpipe") != 0)
    return atoll_fail(err, "--schedule: unknown pipeline schedule '%s' (known: 1f1b, gpipe)", c->parallel.schedule);
  if (c->parallel.microbatches > 0 && c->data.accum != 1 && c->data.accum != c->parallel.microbatches)
    return atoll_fail(err, "--microbatches %d: conflicts with --accum %d (they are the same count; give one)",
                      c->parallel.microbatches, c->data.accum);
  if (c->parallel.sequence_parallel && c->parallel.tp < 2)
    return atoll_fail(err, "--sequence-parallel 1: needs tensor parallelism (--tp 2 or more)");
  if (c->parallel.sequence_parallel && ((long)c->data.batch * seq) % c->parallel.tp)
    return atoll_fail(err, "--sequence-parallel 1: the %ld tokens of a micro-batch (batch x seq) do not divide over --tp %d",
                      (long)c->data.batch * seq, c->parallel.tp);
  if (c->parallel.pp > c->model.layers)
    return atoll_fail(err, "--pp %d: more pipeline stages than the model's %d layers", c->parallel.pp, c->model.layers);
  if (c->parallel.virtual_stages > 1 && c->parallel.pp < 2)
    return atoll_fail(err, "--virtual-stages %d: needs a pipeline (--pp 2 or more)", c->parallel.virtual_stages);
  if ((long)c->parallel.pp * c->parallel.virtual_stages > c->model.layers)
    return atoll_fail(err, "--virtual-stages %d: --pp %d x %d chunks is more than the model's %d layers", c->parallel.virtual_stages,
                      c->parallel.pp, c->parallel.virtual_stages, c->model.layers);
  if (c->init.from[0] && c->init.from_hf[0])
    return atoll_fail(err, "--init-from-hf: conflicts with --init-from (a run starts from one set of weights)");
  if (c->init.optim && !c->init.from[0])
    return atoll_fail(err, "--init-optim 1: needs --init-from CKPT (the AdamW moments come from an atoll checkpoint)");
  if (c->init.step && !c->init.from[0])
    return atoll_fail(err, "--init-step 1: needs --init-from CKPT (the step comes from an atoll checkpoint)");
  if (c->init.step && c->islands.join[0])
    return atoll_fail(err, "--init-step 1: not supported with --join yet (islands as separate jobs count their exchanges from step 0)");
  if (c->init.optim && strcmp(c->optim.name, "adamw") != 0)
    return atoll_fail(err, "--init-optim 1: needs --optimizer adamw (the checkpoint's moments are AdamW's)");
  if (!c->data.dir[0]) return atoll_fail(err, "data: no data directory given");
  if (!c->run.out[0]) return atoll_fail(err, "out: no run directory given");
  if (c->islands.join[0]) {
    if (!c->islands.key[0] || !c->islands.coordinator_key[0])
      return atoll_fail(err, "--join %s: needs --%s", c->islands.join, !c->islands.key[0] ? "island-key FILE" : "coordinator-key FILE");
    if (!c->islands.listen[0] && c->islands.advertise[0])
      return atoll_fail(err, "--island-advertise %s: needs --island-listen (the endpoint it stands for)", c->islands.advertise);
    if (c->islands.id >= c->islands.count && !c->islands.units)
      return atoll_fail(err, "--island-id %d: must be below --islands %d (the island slots)", c->islands.id, c->islands.count);
    if (c->islands.units && (c->islands.fragments != 1 || strcmp(c->islands.data, "iid") != 0 || c->islands.count != 1))
      return atoll_fail(err, "--data-units 1: an open run's island takes --fragments 1, --island-data iid and no --islands (it has %d, %s, %d)",
                        c->islands.fragments, c->islands.data, c->islands.count);
  } else if (c->islands.units) {
    return atoll_fail(err, "--data-units 1: needs --join (an open run's island)");
  }
  return 0;
}

cJSON *atoll_config_to_json(const atoll_config *c) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; o && i < NKEYS; i++) {
    const key_spec *k = &KEYS[i];
    const void *field = (const char *)c + k->offset;
    /* how this invocation runs, not what the run is: not carried into a resume */
    if (strcmp(k->key, "resume") == 0 || strcmp(k->key, "stop-after") == 0 || strcmp(k->key, "move-newer") == 0)
      continue;
    const cJSON *added = NULL;
    switch (k->type) {
    case K_INT: added = cJSON_AddNumberToObject(o, k->key, *(const int *)field); break;
    case K_FLOAT: {
      double v = *(const float *)field;
      /* an outer lr not given is recorded as the number the run uses */
      if (field == &c->islands.outer_lr && v < 0) v = atoll_diloco_default_outer_lr(c->islands.sync_every);
      added = cJSON_AddNumberToObject(o, k->key, v);
      break;
    }
    case K_U64: {
      char buf[32];
      snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)field);
      added = cJSON_AddStringToObject(o, k->key, buf);
      break;
    }
    case K_STR: added = cJSON_AddStringToObject(o, k->key, (const char *)field); break;
    }
    if (!added) { /* out of memory: no half a configuration (a checkpoint's would not resume) */
      cJSON_Delete(o);
      o = NULL;
    }
  }
  return o;
}

void atoll_config_print_help(FILE *f) {
  for (int i = 0; i < NKEYS; i++) fprintf(f, "  --%-14s %s\n", KEYS[i].key, KEYS[i].help);
  for (size_t a = 0; a < sizeof ALIASES / sizeof ALIASES[0]; a++)
    fprintf(f, "  --%-14s the same as --%s (its older name)\n", ALIASES[a].alias, ALIASES[a].key);
}

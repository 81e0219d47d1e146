/* Dumps what tests/torch/ref_gpt.py checks against PyTorch, into DIR:
 *   weights.safetensors  initial weights (layout names, see src/model/layout.c)
 *   config.json          shape, batch, optimizer settings
 *   batches.bin          int32 [STEPS, 2, B, T]: inputs then targets per step
 *   logits.bin           float32 [B, T, V] of the first batch at the initial weights
 *   grads.bin            float32 flat gradient (layout order) of the first batch's loss
 *   losses.bin           float32 [STEPS]: the loss before each of STEPS AdamW steps
 * usage: torch_dump DIR [llama|qwen2|llama3|headdim]   (llama: the Llama block, checked by
 * ref_llama.py; qwen2: the same with q/k/v biases, --qkv-bias 1, set away from zero; llama3:
 * Llama 3.1's rope scaling and a tied head; headdim: heads 24 wide, not dim / heads = 16, so
 * that q and the attention output are 96 wide in a model 64 wide) */
#include "atoll/atoll.h"
#include "ckpt/safetensors.h"
#include "core/rng.h"
#include "model/model.h"
#include "optim/optim.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 10

static int write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, bytes, f) != bytes) {
    fprintf(stderr, "%s: cannot write\n", path);
    return -1;
  }
  return fclose(f);
}

int main(int argc, char **argv) {
  if (argc != 2 && !(argc == 3 && (strcmp(argv[2], "llama") == 0 || strcmp(argv[2], "qwen2") == 0 ||
                                    strcmp(argv[2], "llama3") == 0 || strcmp(argv[2], "headdim") == 0))) {
    fprintf(stderr, "usage: torch_dump DIR [llama|qwen2|llama3|headdim]\n");
    return 2;
  }
  const char *dir = argv[1];
  /* T > 64 spans several attention blocks (ATT_BLOCK in src/ops/attention_cpu.c) */
  atoll_shape s = {.layers = 2, .heads = 4, .dim = 64, .context = 160, .vocab = 256};
  /* llama: grouped queries (2 per key/value head), an untied head, a SwiGLU width that
   * is rounded up (floor(8 64 / 3) = 170 -> 192), eps and theta off their defaults */
  int llama = argc == 3;
  if (llama)
    s = (atoll_shape){.layers = 2, .heads = 4, .dim = 64, .context = 160, .vocab = 256, .arch = "llama",
                      .kv_heads = 2, .multiple_of = 64, .tie = 0, .norm_eps = 1e-6f, .rope_theta = 5000.0f,
                      .qkv_bias = argc == 3 && strcmp(argv[2], "qwen2") == 0};
  /* llama3: the head tied to wte, and Llama 3.1's rope scaling over an original context of
   * 32: with theta 5000 and 16 dims a head, pair 0 (wavelength 6.3 < 32 / 4) keeps its
   * frequency, pair 1 (18.3) is blended, pairs 2-7 (> 32 / 1) are divided by 4 */
  if (llama && strcmp(argv[2], "llama3") == 0) {
    s.tie = 1;
    strcpy(s.rope_scaling, "llama3");
    s.rope_factor = 4.0f, s.rope_low_freq = 1.0f, s.rope_high_freq = 4.0f, s.rope_orig_context = 32;
  }
  if (llama && strcmp(argv[2], "headdim") == 0) s.head_dim = 24;
  int B = 2, T = 150;
  atoll_adamw_config opt = {.lr = 3e-3f, .min_lr_ratio = 0.1f, .warmup = 3, .total_steps = STEPS,
                            .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .grad_clip = 1.0f};
  atoll_err err;
  atoll_model *m;
  if (atoll_model_create(&m, &s, B, T, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const atoll_layout *lay = atoll_model_layout(m);
  size_t n = lay->nparams;
  atoll_model_init_weights(m, 42);
  for (int i = 0; i < lay->ntensors; i++) /* the q/k/v biases (zero at first) away from zero */
    if (strstr(lay->tensors[i].name, "attn.") && strstr(lay->tensors[i].name, ".bias") && llama)
      for (size_t k = 0; k < lay->tensors[i].numel; k++)
        atoll_model_params(m)[lay->tensors[i].offset + k] = 0.1f * sinf(0.7f * (float)k + (float)i);
  char wpath[1024];
  snprintf(wpath, sizeof wpath, "%s/weights.safetensors", dir);
  if (atoll_st_write(wpath, lay, "", atoll_model_params(m), NULL, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }

  /* batches: mostly a repeated pattern plus noise, so the loss visibly falls */
  atoll_rng rng;
  atoll_rng_seed(&rng, 7);
  int32_t *batches = malloc(sizeof(int32_t) * STEPS * 2 * B * T);
  for (int st = 0; st < STEPS; st++)
    for (int b = 0; b < B; b++) {
      int32_t seq[256];
      for (int t = 0; t <= T; t++)
        seq[t] = (atoll_rng_next(&rng) % 4 == 0) ? (int32_t)(atoll_rng_next(&rng) % 256) : (int32_t)('a' + (t + b) % 7);
      for (int t = 0; t < T; t++) {
        batches[((st * 2 + 0) * B + b) * T + t] = seq[t];
        batches[((st * 2 + 1) * B + b) * T + t] = seq[t + 1];
      }
    }
  float *mom = calloc(n, sizeof(float)), *vel = calloc(n, sizeof(float));
  float losses[STEPS];
  for (int st = 0; st < STEPS; st++) {
    const int32_t *in = batches + (size_t)(st * 2 + 0) * B * T;
    const int32_t *tg = batches + (size_t)(st * 2 + 1) * B * T;
    atoll_model_zero_grads(m);
    losses[st] = atoll_model_forward(m, in, tg, B, T);
    if (st == 0 && write_raw(dir, "logits.bin", atoll_model_logits(m), sizeof(float) * B * T * s.vocab)) return 1;
    atoll_model_backward(m, 1.0f);
    if (st == 0 && write_raw(dir, "grads.bin", atoll_model_grads(m), sizeof(float) * n)) return 1;
    double norm = sqrt(atoll_sumsq(atoll_model_grads(m), 0, n));
    float scale = norm > opt.grad_clip ? (float)(opt.grad_clip / (norm + 1e-6)) : 1.0f;
    atoll_adamw_update(atoll_ops_cpu(), lay, &opt, atoll_model_params(m), atoll_model_grads(m), mom, vel, 0, n, st + 1,
                       atoll_lr_at(&opt, st), scale);
  }
  if (write_raw(dir, "batches.bin", batches, sizeof(int32_t) * STEPS * 2 * B * T)) return 1;
  if (write_raw(dir, "losses.bin", losses, sizeof losses)) return 1;

  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "layers", s.layers);
  cJSON_AddNumberToObject(c, "heads", s.heads);
  cJSON_AddNumberToObject(c, "dim", s.dim);
  cJSON_AddNumberToObject(c, "context", s.context);
  cJSON_AddNumberToObject(c, "vocab", s.vocab);
  if (llama) {
    cJSON_AddStringToObject(c, "arch", s.arch);
    cJSON_AddNumberToObject(c, "kv_heads", s.kv_heads);
    cJSON_AddNumberToObject(c, "hidden", atoll_shape_hidden(&s));
    cJSON_AddNumberToObject(c, "norm_eps", s.norm_eps);
    cJSON_AddNumberToObject(c, "rope_theta", s.rope_theta);
    cJSON_AddNumberToObject(c, "qkv_bias", s.qkv_bias);
    cJSON_AddNumberToObject(c, "tie", s.tie);
    cJSON_AddNumberToObject(c, "head_dim", atoll_shape_head_dim(&s));
    if (atoll_shape_rope_llama3(&s)) {
      cJSON_AddNumberToObject(c, "rope_factor", s.rope_factor);
      cJSON_AddNumberToObject(c, "rope_low_freq", s.rope_low_freq);
      cJSON_AddNumberToObject(c, "rope_high_freq", s.rope_high_freq);
      cJSON_AddNumberToObject(c, "rope_orig_context", s.rope_orig_context);
    }
  }
  cJSON_AddNumberToObject(c, "batch", B);
  cJSON_AddNumberToObject(c, "seq", T);
  cJSON_AddNumberToObject(c, "steps", STEPS);
  cJSON_AddNumberToObject(c, "lr", opt.lr);
  cJSON_AddNumberToObject(c, "min_lr_ratio", opt.min_lr_ratio);
  cJSON_AddNumberToObject(c, "warmup", opt.warmup);
  cJSON_AddNumberToObject(c, "beta1", opt.beta1);
  cJSON_AddNumberToObject(c, "beta2", opt.beta2);
  cJSON_AddNumberToObject(c, "eps", opt.eps);
  cJSON_AddNumberToObject(c, "weight_decay", opt.weight_decay);
  cJSON_AddNumberToObject(c, "grad_clip", opt.grad_clip);
  char *text = cJSON_Print(c);
  int rc = write_raw(dir, "config.json", text, strlen(text));
  free(text);
  cJSON_Delete(c);
  free(batches);
  free(mom);
  free(vel);
  atoll_model_destroy(m);
  return rc ? 1 : 0;
}

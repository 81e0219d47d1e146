/* Per-architecture tables for Hugging Face interop (src/ckpt/hf.h): tensor names,
 * which matrices are stored transposed, config.json. Another architecture is one more
 * table and one more entry in ARCHS. */
#include "ckpt/hf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- GPT-2 --- */

/* GPT2LMHeadModel. Its Conv1D layers hold weights as [in, out]: the transpose of
 * atoll's [out, in]. c_attn's columns are q, k, v (heads contiguous within each), the
 * same order as the rows of atoll's qkv, so the transpose is all it takes. The LM
 * head is tied to wte (save_pretrained leaves lm_head.weight out). */
static const atoll_hf_name GPT2_NAMES[] = {
    {"wte.weight", "transformer.wte.weight", 0},
    {"wpe.weight", "transformer.wpe.weight", 0},
    {"h.%d.ln_1.weight", "transformer.h.%d.ln_1.weight", 0},
    {"h.%d.ln_1.bias", "transformer.h.%d.ln_1.bias", 0},
    {"h.%d.attn.qkv.weight", "transformer.h.%d.attn.c_attn.weight", 1},
    {"h.%d.attn.qkv.bias", "transformer.h.%d.attn.c_attn.bias", 0},
    {"h.%d.attn.proj.weight", "transformer.h.%d.attn.c_proj.weight", 1},
    {"h.%d.attn.proj.bias", "transformer.h.%d.attn.c_proj.bias", 0},
    {"h.%d.ln_2.weight", "transformer.h.%d.ln_2.weight", 0},
    {"h.%d.ln_2.bias", "transformer.h.%d.ln_2.bias", 0},
    {"h.%d.mlp.fc.weight", "transformer.h.%d.mlp.c_fc.weight", 1},
    {"h.%d.mlp.fc.bias", "transformer.h.%d.mlp.c_fc.bias", 0},
    {"h.%d.mlp.proj.weight", "transformer.h.%d.mlp.c_proj.weight", 1},
    {"h.%d.mlp.proj.bias", "transformer.h.%d.mlp.c_proj.bias", 0},
    {"ln_f.weight", "transformer.ln_f.weight", 0},
    {"ln_f.bias", "transformer.ln_f.bias", 0},
};

/* atoll's LayerNorm epsilon (src/ops/ops_cpu.c) */
#define GPT2_LN_EPS 1e-5

static cJSON *gpt2_config_json(const atoll_shape *s) {
  cJSON *o = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(o, "architectures");
  if (!arch || !cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"))) {
    cJSON_Delete(o);
    return NULL;
  }
  int ok = cJSON_AddStringToObject(o, "model_type", "gpt2") && cJSON_AddNumberToObject(o, "vocab_size", s->vocab) &&
           cJSON_AddNumberToObject(o, "n_positions", s->context) && cJSON_AddNumberToObject(o, "n_embd", s->dim) &&
           cJSON_AddNumberToObject(o, "n_layer", s->layers) && cJSON_AddNumberToObject(o, "n_head", s->heads) &&
           cJSON_AddNullToObject(o, "n_inner") && /* 4 x n_embd */
           cJSON_AddStringToObject(o, "activation_function", "gelu_new") && /* tanh GELU */
           cJSON_AddNumberToObject(o, "layer_norm_epsilon", GPT2_LN_EPS) &&
           cJSON_AddTrueToObject(o, "tie_word_embeddings") && cJSON_AddTrueToObject(o, "scale_attn_weights") &&
           cJSON_AddFalseToObject(o, "scale_attn_by_inverse_layer_idx") &&
           cJSON_AddFalseToObject(o, "reorder_and_upcast_attn") && cJSON_AddNumberToObject(o, "resid_pdrop", 0) &&
           cJSON_AddNumberToObject(o, "embd_pdrop", 0) && cJSON_AddNumberToObject(o, "attn_pdrop", 0) &&
           cJSON_AddNullToObject(o, "bos_token_id") && cJSON_AddNullToObject(o, "eos_token_id") && /* bytes only */
           cJSON_AddStringToObject(o, "torch_dtype", "float32");
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* A boolean key that must hold `want` when present (absent: transformers' default). */
static int check_bool(const cJSON *cfg, const char *key, int want, int dflt, const char *path, atoll_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  int have = v ? cJSON_IsTrue(v) : dflt;
  if (v && !cJSON_IsBool(v)) return atoll_fail(err, "%s: %s must be true or false", path, key);
  if (have != want)
    return atoll_fail(err, "%s: %s is %s; atoll's GPT-2 needs %s", path, key, have ? "true" : "false",
                      want ? "true" : "false");
  return 0;
}

static int gpt2_config_check(const cJSON *cfg, const atoll_shape *s, const char *path, atoll_err *err) {
  const char *keys[] = {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"};
  const char *flags[] = {"layers", "heads", "dim", "context", "vocab"};
  const int want[] = {s->layers, s->heads, s->dim, s->context, s->vocab};
  for (int i = 0; i < 5; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[i]);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
      return atoll_fail(err, "%s: %s is missing or not an integer", path, keys[i]);
    if (v->valuedouble != want[i])
      return atoll_fail(err, "%s: %s is %.0f, this run has --%s %d (pass --%s %.0f)", path, keys[i], v->valuedouble,
                        flags[i], want[i], flags[i], v->valuedouble);
  }
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "activation_function");
  const char *a = cJSON_IsString(act) ? act->valuestring : act ? "(not a string)" : "gelu_new";
  if (strcmp(a, "gelu_new") != 0 && strcmp(a, "gelu_pytorch_tanh") != 0)
    return atoll_fail(err, "%s: activation_function is %s; atoll's GPT-2 uses the tanh GELU (gelu_new)", path, a);
  const cJSON *eps = cJSON_GetObjectItemCaseSensitive(cfg, "layer_norm_epsilon");
  double e = cJSON_IsNumber(eps) ? eps->valuedouble : eps ? -1 : GPT2_LN_EPS;
  if (fabs(e - GPT2_LN_EPS) > 1e-12)
    return atoll_fail(err, "%s: layer_norm_epsilon is %g; atoll's LayerNorm uses %g", path, e, GPT2_LN_EPS);
  const cJSON *inner = cJSON_GetObjectItemCaseSensitive(cfg, "n_inner");
  if (inner && !cJSON_IsNull(inner) && !(cJSON_IsNumber(inner) && inner->valuedouble == 4.0 * s->dim))
    return atoll_fail(err, "%s: n_inner must be null or 4 x n_embd = %d", path, 4 * s->dim);
  if (check_bool(cfg, "tie_word_embeddings", 1, 1, path, err) || check_bool(cfg, "scale_attn_weights", 1, 1, path, err) ||
      check_bool(cfg, "scale_attn_by_inverse_layer_idx", 0, 0, path, err))
    return -1;
  return 0;
}

/* ------------------------------------------------------------ the tables --- */

static const atoll_hf_arch ARCHS[] = {
    {"gpt2", GPT2_NAMES, (int)(sizeof GPT2_NAMES / sizeof GPT2_NAMES[0]), "lm_head.weight", "transformer.wte.weight",
     gpt2_config_json, gpt2_config_check},
};

const atoll_hf_arch *atoll_hf_arch_find(const char *model_type) {
  for (size_t i = 0; model_type && i < sizeof ARCHS / sizeof ARCHS[0]; i++)
    if (strcmp(ARCHS[i].model_type, model_type) == 0) return &ARCHS[i];
  return NULL;
}

void atoll_hf_known(char *out, size_t outsz) {
  size_t at = 0;
  out[0] = 0;
  for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0] && at < outsz; i++)
    at += (size_t)snprintf(out + at, outsz - at, "%s%s", i ? ", " : "", ARCHS[i].model_type);
}

const atoll_hf_arch *atoll_hf_arch_of(const atoll_shape *s) {
  (void)s; /* one architecture today */
  return &ARCHS[0];
}

int atoll_hf_name_of(const atoll_hf_arch *a, const atoll_tensor *t, char *out, size_t outsz, int *transpose) {
  char name[96];
  for (int i = 0; i < a->nnames; i++) {
    int block = strstr(a->names[i].atoll, "%d") != NULL;
    if (block != (t->layer >= 0)) continue;
    snprintf(name, sizeof name, a->names[i].atoll, t->layer);
    if (strcmp(name, t->name) != 0) continue;
    snprintf(out, outsz, a->names[i].hf, t->layer);
    *transpose = a->names[i].transpose;
    return 0;
  }
  return -1;
}

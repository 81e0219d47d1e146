/* Per-architecture tables for Hugging Face interop (src/ckpt/hf.h): tensor names,
 * which matrices are stored transposed, config.json. Another architecture is one more
 * table and one more entry in ARCHS. */
#include "ckpt/hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/* atoll's LayerNorm epsilon (src/ops/ops_cpu_elem.c) */
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

/* 0 when train's --flag takes the file's value `have`, so that a hint to pass it may be
 * given; else -1 with err saying so (a hint such as "pass --layers 1000000000" would
 * only be refused in turn). The range is train's own: atoll_config_set decides. */
static int flag_takes(const char *path, const char *key, double have, const char *flag, atoll_err *err) {
  atoll_config c;
  atoll_config_defaults(&c);
  char value[40];
  snprintf(value, sizeof value, "%.17g", have);
  atoll_err why;
  if (atoll_config_set(&c, flag, value, &why) == 0) return 0;
  return atoll_fail(err, "%s: %s is %.15g, which atoll cannot run (%s)", path, key, have, why.msg);
}

/* A boolean key that must hold `want` when present (absent: transformers' default
 * `dflt`); `why` ends the message ("atoll's GPT-2 needs true"). */
static int check_bool(const cJSON *cfg, const char *key, int want, int dflt, const char *path, const char *why,
                      atoll_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  int have = v ? cJSON_IsTrue(v) : dflt;
  if (v && !cJSON_IsBool(v)) return atoll_fail(err, "%s: %s must be true or false", path, key);
  if (have != want) return atoll_fail(err, "%s: %s is %s; %s", path, key, have ? "true" : "false", why);
  return 0;
}

/* Integer keys that must equal the run's values, each set by a flag. A key that is
 * absent takes dflt[i] when dflt is given and dflt[i] >= 0, else it is refused. */
static int check_ints(const cJSON *cfg, int n, const char *const *keys, const char *const *flags, const int *want,
                      const int *dflt, const char *path, atoll_err *err) {
  for (int i = 0; i < n; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[i]);
    double have = dflt && dflt[i] >= 0 && (!v || cJSON_IsNull(v)) ? dflt[i] : cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (have < 0 || have != floor(have) || have > 1e9)
      return atoll_fail(err, "%s: %s is missing or not an integer", path, keys[i]);
    if (have != want[i] && flag_takes(path, keys[i], have, flags[i], err)) return -1;
    if (have != want[i])
      return atoll_fail(err, "%s: %s is %.0f, this run has --%s %d (pass --%s %.0f)", path, keys[i], have, flags[i],
                        want[i], flags[i], have);
  }
  return 0;
}

static int gpt2_config_check(const cJSON *cfg, const atoll_shape *s, const char *path, atoll_err *err) {
  const char *const keys[] = {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"};
  const char *const flags[] = {"layers", "heads", "dim", "context", "vocab"};
  const int want[] = {s->layers, s->heads, s->dim, s->context, s->vocab};
  if (check_ints(cfg, 5, keys, flags, want, NULL, path, err)) return -1;
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
  if (check_bool(cfg, "tie_word_embeddings", 1, 1, path, "atoll's GPT-2 needs true", err) ||
      check_bool(cfg, "scale_attn_weights", 1, 1, path, "atoll's GPT-2 needs true", err) ||
      check_bool(cfg, "scale_attn_by_inverse_layer_idx", 0, 0, path, "atoll's GPT-2 needs false", err))
    return -1;
  return 0;
}

/* ---------------------------------------------------------------- Llama --- */

/* LlamaForCausalLM: every matrix is a torch.nn.Linear ([out, in], like atoll's), so no
 * transposes. q_proj and k_proj rows are stored in the order Hugging Face's half-split
 * rotary embedding (rotate_half) expects, which is atoll's RoPE (src/ops/ops_llama_cpu.c),
 * so they are copied as they are (test_hf_llama compares the logits). lm_head.weight is
 * in atoll's layout only when the head is untied (--tie 0). The order is the modules'
 * (the state_dict's, which save_pretrained shards by; atoll_hf_order). */
static const atoll_hf_name LLAMA_NAMES[] = {
    {"wte.weight", "model.embed_tokens.weight", 0},
    {"h.%d.attn.q.weight", "model.layers.%d.self_attn.q_proj.weight", 0},
    {"h.%d.attn.k.weight", "model.layers.%d.self_attn.k_proj.weight", 0},
    {"h.%d.attn.v.weight", "model.layers.%d.self_attn.v_proj.weight", 0},
    {"h.%d.attn.o.weight", "model.layers.%d.self_attn.o_proj.weight", 0},
    {"h.%d.mlp.gate.weight", "model.layers.%d.mlp.gate_proj.weight", 0},
    {"h.%d.mlp.up.weight", "model.layers.%d.mlp.up_proj.weight", 0},
    {"h.%d.mlp.down.weight", "model.layers.%d.mlp.down_proj.weight", 0},
    {"h.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight", 0},
    {"h.%d.mlp_norm.weight", "model.layers.%d.post_attention_layernorm.weight", 0},
    {"norm.weight", "model.norm.weight", 0},
    {"lm_head.weight", "lm_head.weight", 0},
};

/* transformers' defaults for keys a config.json may leave out (LlamaConfig) */
#define LLAMA_HF_EPS 1e-6

/* The shortest decimal that reads back as the float f (1e-05 for 1e-5f): written into
 * config.json, transformers turns it into the same float32 atoll computes with. */
static double float_decimal(float f) {
  char buf[40];
  for (int p = 1; p < 9; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, (double)f);
    double d = strtod(buf, NULL);
    if ((float)d == f) return d;
  }
  return (double)f;
}

/* transformers' rope_parameters of shape s: the type, theta and llama3's keys */
static cJSON *rope_json(const atoll_shape *s, double theta) {
  cJSON *r = cJSON_CreateObject();
  int l3 = atoll_shape_rope_llama3(s);
  int ok = r && cJSON_AddStringToObject(r, "rope_type", l3 ? "llama3" : "default") &&
           cJSON_AddNumberToObject(r, "rope_theta", theta);
  ok = ok && (!l3 || (cJSON_AddNumberToObject(r, "factor", float_decimal(s->rope_factor)) &&
                      cJSON_AddNumberToObject(r, "low_freq_factor", float_decimal(s->rope_low_freq)) &&
                      cJSON_AddNumberToObject(r, "high_freq_factor", float_decimal(s->rope_high_freq)) &&
                      cJSON_AddNumberToObject(r, "original_max_position_embeddings", s->rope_orig_context)));
  if (!ok) {
    cJSON_Delete(r);
    return NULL;
  }
  return r;
}

static cJSON *llama_config_json(const atoll_shape *s) {
  cJSON *o = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(o, "architectures");
  if (!arch || !cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"))) {
    cJSON_Delete(o);
    return NULL;
  }
  double eps = float_decimal(atoll_shape_norm_eps(s)), theta = float_decimal(atoll_shape_rope_theta(s));
  /* rope_theta twice: top-level for transformers 4.x, in rope_parameters for 5.x; a
   * llama3 scaling also as 4.x's rope_scaling */
  cJSON *rope = rope_json(s, theta), *scaling = atoll_shape_rope_llama3(s) ? rope_json(s, theta) : NULL;
  int ok = rope && (scaling || !atoll_shape_rope_llama3(s)) &&
           (!scaling || (cJSON_AddItemToObject(o, "rope_scaling", scaling) && (scaling = NULL, 1)));
  ok = ok && cJSON_AddStringToObject(o, "model_type", "llama") && cJSON_AddNumberToObject(o, "vocab_size", s->vocab) &&
       cJSON_AddNumberToObject(o, "hidden_size", s->dim) &&
       cJSON_AddNumberToObject(o, "intermediate_size", atoll_shape_hidden(s)) &&
       cJSON_AddNumberToObject(o, "num_hidden_layers", s->layers) &&
       cJSON_AddNumberToObject(o, "num_attention_heads", s->heads) &&
       cJSON_AddNumberToObject(o, "num_key_value_heads", atoll_shape_kv_heads(s)) &&
       cJSON_AddNumberToObject(o, "head_dim", atoll_shape_head_dim(s)) && cJSON_AddStringToObject(o, "hidden_act", "silu") &&
       cJSON_AddNumberToObject(o, "max_position_embeddings", s->context) &&
       cJSON_AddNumberToObject(o, "rms_norm_eps", eps) && cJSON_AddNumberToObject(o, "rope_theta", theta) &&
       cJSON_AddItemToObject(o, "rope_parameters", rope) && (rope = NULL, 1) &&
       cJSON_AddBoolToObject(o, "tie_word_embeddings", atoll_shape_tied(s)) &&
       cJSON_AddFalseToObject(o, "attention_bias") && cJSON_AddFalseToObject(o, "mlp_bias") &&
       cJSON_AddNumberToObject(o, "attention_dropout", 0) && cJSON_AddNumberToObject(o, "pretraining_tp", 1) &&
       cJSON_AddNullToObject(o, "bos_token_id") && cJSON_AddNullToObject(o, "eos_token_id") && /* bytes only */
       cJSON_AddNullToObject(o, "pad_token_id") && cJSON_AddTrueToObject(o, "use_cache") &&
       cJSON_AddStringToObject(o, "torch_dtype", "float32");
  cJSON_Delete(rope);
  cJSON_Delete(scaling);
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* A float key read as transformers reads it (float32 in the model) equal to atoll's
 * value, which --flag sets. */
static int check_float(const cJSON *v, const char *key, double dflt, float want, const char *flag, const char *path,
                       atoll_err *err) {
  if (v && !cJSON_IsNumber(v)) return atoll_fail(err, "%s: %s is not a number", path, key);
  double have = v ? v->valuedouble : dflt;
  if ((float)have != want && flag_takes(path, key, have, flag, err)) return -1;
  if ((float)have != want)
    return atoll_fail(err, "%s: %s is %g, this run has --%s %g (pass --%s %g)", path, key, have, flag,
                      float_decimal(want), flag, have);
  return 0;
}

/* The rotary embedding (atoll_hf_llama_rope reads it) turns by this run's angles. */
static int llama_rope_check(const cJSON *cfg, const atoll_shape *s, const char *path, atoll_err *err) {
  atoll_shape r = *s;
  if (atoll_hf_llama_rope(cfg, path, &r, err)) return -1;
  if (atoll_shape_rope_theta(&r) != atoll_shape_rope_theta(s))
    return check_float(NULL, "rope_theta", atoll_shape_rope_theta(&r), atoll_shape_rope_theta(s), "rope-theta", path,
                       err);
  if (!atoll_shape_rope_same(&r, s))
    return atoll_fail(err, "%s: the rope scaling (%s) is not this run's (--rope-scaling %s and its keys)", path,
                      atoll_shape_rope_llama3(&r) ? "llama3" : "none", atoll_shape_rope_llama3(s) ? "llama3" : "none");
  return 0;
}

/* The keys Llama and Qwen2 share. */
static int llama_common_check(const cJSON *cfg, const atoll_shape *s, const char *path, atoll_err *err) {
  const char *const keys[] = {"num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings",
                              "vocab_size"};
  const char *const flags[] = {"layers", "heads", "dim", "context", "vocab"};
  const int want[] = {s->layers, s->heads, s->dim, s->context, s->vocab};
  if (check_ints(cfg, 5, keys, flags, want, NULL, path, err)) return -1;
  const char *const kv_key[] = {"num_key_value_heads"}, *const kv_flag[] = {"kv-heads"};
  const int kv_want[] = {atoll_shape_kv_heads(s)}, kv_dflt[] = {s->heads}; /* absent: one per head */
  if (check_ints(cfg, 1, kv_key, kv_flag, kv_want, kv_dflt, path, err)) return -1;
  const cJSON *inter = cJSON_GetObjectItemCaseSensitive(cfg, "intermediate_size");
  int H = atoll_shape_hidden(s), least = 8 * s->dim / 3;
  if (!cJSON_IsNumber(inter) || inter->valuedouble != floor(inter->valuedouble) || inter->valuedouble < 1 ||
      inter->valuedouble > 1e9)
    return atoll_fail(err, "%s: intermediate_size is missing or not a positive integer", path);
  double I = inter->valuedouble;
  if (I != H && I >= least && I <= 65536) /* multiple-of I gives I x ceil(least / I) = I */
    return atoll_fail(err, "%s: intermediate_size is %.0f, this run's SwiGLU width is %d (pass --multiple-of %.0f)",
                      path, I, H, I);
  if (I != H)
    return atoll_fail(err,
                      "%s: intermediate_size is %.0f; atoll's SwiGLU width is multiple-of x ceil(%d / multiple-of) "
                      "for --dim %d, at least %d",
                      path, I, least, s->dim, least);
  /* absent or null: hidden_size / num_attention_heads (LlamaConfig) */
  const char *const hd_key[] = {"head_dim"}, *const hd_flag[] = {"head-dim"};
  const int hd_want[] = {atoll_shape_head_dim(s)}, hd_dflt[] = {s->dim / s->heads};
  if (check_ints(cfg, 1, hd_key, hd_flag, hd_want, hd_dflt, path, err)) return -1;
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
  int tied = atoll_shape_tied(s);
  if (tie && !cJSON_IsBool(tie)) return atoll_fail(err, "%s: tie_word_embeddings must be true or false", path);
  if ((tie ? cJSON_IsTrue(tie) : 0) != tied) /* absent: false (LlamaConfig) */
    return atoll_fail(err, "%s: tie_word_embeddings is %s, this run has --tie %d (pass --tie %d)", path,
                      tied ? "false" : "true", tied, !tied);
  if (check_float(cJSON_GetObjectItemCaseSensitive(cfg, "rms_norm_eps"), "rms_norm_eps", LLAMA_HF_EPS,
                  atoll_shape_norm_eps(s), "norm-eps", path, err) ||
      llama_rope_check(cfg, s, path, err))
    return -1;
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
  const char *a = cJSON_IsString(act) ? act->valuestring : act ? "(not a string)" : "silu";
  if (strcmp(a, "silu") != 0 && strcmp(a, "swish") != 0)
    return atoll_fail(err, "%s: hidden_act is %s; atoll's SwiGLU uses silu", path, a);
  return 0;
}

static int llama_config_check(const cJSON *cfg, const atoll_shape *s, const char *path, atoll_err *err) {
  if (llama_common_check(cfg, s, path, err) ||
      check_bool(cfg, "attention_bias", 0, 0, path, "atoll's Llama has no biases (Qwen2's q/k/v biases: model_type qwen2)", err) ||
      check_bool(cfg, "mlp_bias", 0, 0, path, "atoll's Llama has no biases", err))
    return -1;
  return 0;
}

/* ---------------------------------------------------------------- Qwen2 --- */

/* Qwen2ForCausalLM: Llama's tensors and names, and biases on q_proj, k_proj and v_proj
 * (atoll's --arch llama --qkv-bias 1). Its config.json has Llama's keys but no
 * attention_bias or mlp_bias (the q/k/v biases are always there); sliding-window
 * attention (use_sliding_window true) is refused. */
static const atoll_hf_name QWEN2_NAMES[] = { /* in the modules' order, as Llama's */
    {"wte.weight", "model.embed_tokens.weight", 0},
    {"h.%d.attn.q.weight", "model.layers.%d.self_attn.q_proj.weight", 0},
    {"h.%d.attn.q.bias", "model.layers.%d.self_attn.q_proj.bias", 0},
    {"h.%d.attn.k.weight", "model.layers.%d.self_attn.k_proj.weight", 0},
    {"h.%d.attn.k.bias", "model.layers.%d.self_attn.k_proj.bias", 0},
    {"h.%d.attn.v.weight", "model.layers.%d.self_attn.v_proj.weight", 0},
    {"h.%d.attn.v.bias", "model.layers.%d.self_attn.v_proj.bias", 0},
    {"h.%d.attn.o.weight", "model.layers.%d.self_attn.o_proj.weight", 0},
    {"h.%d.mlp.gate.weight", "model.layers.%d.mlp.gate_proj.weight", 0},
    {"h.%d.mlp.up.weight", "model.layers.%d.mlp.up_proj.weight", 0},
    {"h.%d.mlp.down.weight", "model.layers.%d.mlp.down_proj.weight", 0},
    {"h.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight", 0},
    {"h.%d.mlp_norm.weight", "model.layers.%d.post_attention_layernorm.weight", 0},
    {"norm.weight", "model.norm.weight", 0},
    {"lm_head.weight", "lm_head.weight", 0},
};

/* Llama's config.json with Qwen2's class, type and sliding-window keys in place of the
 * bias keys. */
static cJSON *qwen2_config_json(const atoll_shape *s) {
  cJSON *o = llama_config_json(s), *arch = cJSON_CreateArray();
  const char *drop[] = {"architectures", "model_type", "attention_bias", "mlp_bias", "pretraining_tp"};
  for (size_t i = 0; o && i < sizeof drop / sizeof drop[0]; i++) cJSON_DeleteItemFromObjectCaseSensitive(o, drop[i]);
  int ok = o && arch && cJSON_AddItemToArray(arch, cJSON_CreateString("Qwen2ForCausalLM")) &&
           cJSON_AddItemToObject(o, "architectures", arch) && (arch = NULL, 1) &&
           cJSON_AddStringToObject(o, "model_type", "qwen2") && cJSON_AddFalseToObject(o, "use_sliding_window") &&
           cJSON_AddNullToObject(o, "sliding_window") && cJSON_AddNumberToObject(o, "max_window_layers", s->layers);
  cJSON_Delete(arch);
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static int qwen2_config_check(const cJSON *cfg, const atoll_shape *s, const char *path, atoll_err *err) {
  if (llama_common_check(cfg, s, path, err) ||
      check_bool(cfg, "use_sliding_window", 0, 0, path, "atoll's attention is over the whole context", err))
    return -1;
  /* transformers 5 also lists each layer's kind; only full attention is atoll's */
  const cJSON *types = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types"), *t;
  if (types && !cJSON_IsNull(types) && !cJSON_IsArray(types))
    return atoll_fail(err, "%s: layer_types is not a list", path);
  const cJSON *list = cJSON_IsArray(types) ? types : NULL;
  cJSON_ArrayForEach(t, list) {
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention") != 0)
      return atoll_fail(err, "%s: layer_types holds %s; atoll's attention is full_attention only", path,
                        cJSON_IsString(t) ? t->valuestring : "a value that is not a string");
  }
  return 0;
}

/* ------------------------------------------------------------ the tables --- */

static const atoll_hf_arch ARCHS[] = {
    {"gpt2", "--arch gpt2", GPT2_NAMES, (int)(sizeof GPT2_NAMES / sizeof GPT2_NAMES[0]), "lm_head.weight",
     "transformer.wte.weight", gpt2_config_json, gpt2_config_check},
    {"llama", "--arch llama", LLAMA_NAMES, (int)(sizeof LLAMA_NAMES / sizeof LLAMA_NAMES[0]), "lm_head.weight",
     "model.embed_tokens.weight", llama_config_json, llama_config_check},
    {"qwen2", "--arch llama --qkv-bias 1", QWEN2_NAMES, (int)(sizeof QWEN2_NAMES / sizeof QWEN2_NAMES[0]),
     "lm_head.weight", "model.embed_tokens.weight", qwen2_config_json, qwen2_config_check},
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
  return &ARCHS[!atoll_shape_llama(s) ? 0 : s->qkv_bias ? 2 : 1];
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

int64_t atoll_hf_order(const atoll_hf_arch *a, const atoll_tensor *t) {
  char name[96];
  int first_block = a->nnames;
  for (int i = 0; i < a->nnames; i++) {
    int block = strstr(a->names[i].atoll, "%d") != NULL;
    if (block && i < first_block) first_block = i;
    if (block != (t->layer >= 0)) continue;
    snprintf(name, sizeof name, a->names[i].atoll, t->layer);
    if (strcmp(name, t->name) != 0) continue;
    int64_t group = block ? 1 : i < first_block ? 0 : 2;
    return (group << 48) + ((int64_t)(block ? t->layer : 0) << 16) + i;
  }
  return INT64_MAX;
}

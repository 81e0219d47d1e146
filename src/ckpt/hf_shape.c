/* --init-from-hf DIR: the model's whole shape from DIR/config.json (src/ckpt/hf.h).
 * Every key is read as transformers reads it (its defaults for keys left out), each
 * value must be one train's flag takes, and a shape key given on the command line or in
 * --config must say the same. */
#include "ckpt/hf.h"

#include "core/json_text.h"
#include "model/layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* transformers' defaults (LlamaConfig) */
#define LLAMA_HF_EPS 1e-6
#define LLAMA_HF_THETA 10000.0

/* obj's number `key` (absent or null: dflt; dflt < 0: required), named `name` in
 * messages, that train's --flag takes. */
static int number(const cJSON *obj, const char *key, const char *name, double dflt, const char *flag, int integer,
                  const char *path, double *out, atoll_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if ((!v || cJSON_IsNull(v)) && dflt < 0) return atoll_fail(err, "%s: %s is missing", path, name);
  if (v && !cJSON_IsNull(v) && !cJSON_IsNumber(v)) return atoll_fail(err, "%s: %s is not a number", path, name);
  double have = v && !cJSON_IsNull(v) ? v->valuedouble : dflt;
  if (integer && (have != floor(have) || fabs(have) > 2e9))
    return atoll_fail(err, "%s: %s is %.15g, not an integer", path, name, have);
  atoll_config c;
  atoll_config_defaults(&c);
  char value[40];
  snprintf(value, sizeof value, "%.17g", have);
  atoll_err why;
  if (atoll_config_set(&c, flag, value, &why))
    return atoll_fail(err, "%s: %s is %.15g, which atoll cannot run (%s)", path, name, have, why.msg);
  *out = have;
  return 0;
}

#define INT_KEY(key, dflt, flag, field)                                                                              \
  do {                                                                                                               \
    double v_;                                                                                                       \
    if (number(cfg, key, key, dflt, flag, 1, path, &v_, err)) return -1;                                                  \
    (field) = (int)v_;                                                                                               \
  } while (0)

static int gpt2_shape(const cJSON *cfg, const char *path, atoll_shape *s, atoll_err *err) {
  snprintf(s->arch, sizeof s->arch, "gpt2");
  INT_KEY("n_layer", -1, "layers", s->layers);
  INT_KEY("n_head", -1, "heads", s->heads);
  INT_KEY("n_embd", -1, "dim", s->dim);
  INT_KEY("n_positions", -1, "context", s->context);
  INT_KEY("vocab_size", -1, "vocab", s->vocab);
  return 0;
}

/* The rotary embedding: transformers 5's rope_parameters, or 4.x's top-level rope_theta
 * with rope_scaling (which wins over rope_parameters when both are there, as in
 * transformers). Types read: default and llama3. */
int atoll_hf_llama_rope(const cJSON *cfg, const char *path, atoll_shape *s, atoll_err *err) {
  const char *where = "rope_scaling";
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(cfg, where);
  if (!p || cJSON_IsNull(p)) p = cJSON_GetObjectItemCaseSensitive(cfg, where = "rope_parameters");
  if (p && !cJSON_IsNull(p) && !cJSON_IsObject(p)) return atoll_fail(err, "%s: %s is not an object", path, where);
  if (p && cJSON_IsNull(p)) p = NULL;
  const cJSON *type = p ? cJSON_GetObjectItemCaseSensitive(p, "rope_type") : NULL;
  if (p && !type) type = cJSON_GetObjectItemCaseSensitive(p, "type");
  const char *t = !type ? "default" : cJSON_IsString(type) ? type->valuestring : "(not a string)";
  if (strcmp(t, "default") != 0 && strcmp(t, "llama3") != 0)
    return atoll_fail(err, "%s: %s.rope_type is %s; atoll's rotary embedding reads default and llama3", path, where, t);
  double v;
  const cJSON *th = p ? cJSON_GetObjectItemCaseSensitive(p, "rope_theta") : NULL;
  if (number(th ? p : cfg, "rope_theta", "rope_theta", LLAMA_HF_THETA, "rope-theta", 0, path, &v, err)) return -1;
  s->rope_theta = (float)v;
  snprintf(s->rope_scaling, sizeof s->rope_scaling, "%s", strcmp(t, "llama3") == 0 ? "llama3" : "none");
  if (strcmp(t, "llama3") != 0) return 0;
  char key[160];
  const char *keys[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  const char *flags[] = {"rope-factor", "rope-low-freq-factor", "rope-high-freq-factor", "rope-original-context"};
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof key, "%s.%s", where, keys[i]);
    /* as transformers: original_max_position_embeddings defaults to max_position_embeddings */
    if (number(p, keys[i], key, i == 3 ? s->context : -1, flags[i], i == 3, path, &v, err)) return -1;
    if (i == 0) s->rope_factor = (float)v;
    if (i == 1) s->rope_low_freq = (float)v;
    if (i == 2) s->rope_high_freq = (float)v;
    if (i == 3) s->rope_orig_context = (int)v;
  }
  atoll_err why;
  if (atoll_shape_rope_check(s, &why)) return atoll_fail(err, "%s: %s: %s", path, where, why.msg);
  return 0;
}

/* Llama, and Qwen2 (qkv: Llama with q/k/v biases) */
static int llama_shape(const cJSON *cfg, int qkv, const char *path, atoll_shape *s, atoll_err *err) {
  snprintf(s->arch, sizeof s->arch, "llama");
  s->qkv_bias = qkv;
  INT_KEY("num_hidden_layers", -1, "layers", s->layers);
  INT_KEY("num_attention_heads", -1, "heads", s->heads);
  INT_KEY("hidden_size", -1, "dim", s->dim);
  INT_KEY("max_position_embeddings", -1, "context", s->context);
  INT_KEY("vocab_size", -1, "vocab", s->vocab);
  INT_KEY("num_key_value_heads", s->heads, "kv-heads", s->kv_heads); /* absent: one per head */
  /* absent or null: hidden_size / num_attention_heads, as LlamaConfig; atoll's head-dim
   * stays 0 (the default) when it is that */
  int hd;
  INT_KEY("head_dim", s->dim / s->heads, "head-dim", hd);
  s->head_dim = hd * s->heads == s->dim ? 0 : hd;
  /* atoll's SwiGLU width is multiple-of x ceil(floor(8 dim / 3) / multiple-of): multiple-of
   * I gives I for any I of at least floor(8 dim / 3) */
  int least = (int)(8L * s->dim / 3), inter;
  INT_KEY("intermediate_size", -1, "multiple-of", inter);
  if (inter < least)
    return atoll_fail(err, "%s: intermediate_size is %d; atoll's SwiGLU width is at least floor(8 x hidden_size / 3) = %d",
                      path, inter, least);
  s->multiple_of = inter;
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
  if (tie && !cJSON_IsBool(tie)) return atoll_fail(err, "%s: tie_word_embeddings must be true or false", path);
  s->tie = tie && cJSON_IsTrue(tie); /* absent: false (LlamaConfig) */
  double eps;
  if (number(cfg, "rms_norm_eps", "rms_norm_eps", LLAMA_HF_EPS, "norm-eps", 0, path, &eps, err)) return -1;
  s->norm_eps = (float)eps;
  return atoll_hf_llama_rope(cfg, path, s, err);
}

int atoll_hf_shape(const char *dir, atoll_shape *s, atoll_err *err) {
  char path[1200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  cJSON *cfg = atoll_json_read_whole(path, 1u << 20, err);
  if (!cfg) return -1;
  int rc = !cJSON_IsObject(cfg) ? atoll_fail(err, "%s: not a JSON object", path) : atoll_json_unique_keys(cfg, path, err);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  const atoll_hf_arch *a = atoll_hf_arch_find(cJSON_IsString(type) ? type->valuestring : NULL);
  char known[128];
  atoll_hf_known(known, sizeof known);
  if (rc == 0 && !a)
    rc = atoll_fail(err, "%s: model_type %s%s%s is not one atoll reads (known: %s)", path,
                    cJSON_IsString(type) ? "'" : "", cJSON_IsString(type) ? type->valuestring : "missing",
                    cJSON_IsString(type) ? "'" : "", known);
  else if (rc == 0)
    rc = strcmp(a->model_type, "gpt2") == 0 ? gpt2_shape(cfg, path, s, err)
                                             : llama_shape(cfg, strcmp(a->model_type, "qwen2") == 0, path, s, err);
  atoll_err why;
  if (rc == 0 && atoll_shape_check(s, &why)) rc = atoll_fail(err, "%s: %s", path, why.msg);
  /* the keys that are not the shape (activation, biases, ...) */
  if (rc == 0) rc = a->config_check(cfg, s, path, err);
  cJSON_Delete(cfg);
  return rc;
}

/* ------------------------------------------------- flags given beside it --- */

void atoll_hf_shape_unset(atoll_shape *s) {
  memset(s->arch, 0, sizeof s->arch);
  memset(s->rope_scaling, 0, sizeof s->rope_scaling);
  s->layers = s->heads = s->dim = s->context = s->vocab = -1;
  s->kv_heads = s->multiple_of = s->rope_orig_context = s->head_dim = -1;
  s->tie = -2; /* -1 is a value: the arch's default */
  s->qkv_bias = -1;
  s->norm_eps = s->rope_theta = s->rope_factor = s->rope_low_freq = s->rope_high_freq = -1.0f;
}

/* One setting given as --flag `given` that config.json says is `have`. */
static int disagree(const char *dir, const char *flag, const char *given, const char *key, const char *have,
                    atoll_err *err) {
  return atoll_fail(err, "--%s %s: disagrees with %s/config.json's %s %s (--init-from-hf takes the model's shape "
                    "from config.json: leave the flag out)", flag, given, dir, key, have);
}

static int check_int(const char *dir, const char *flag, int given, int want, const char *key, int have, atoll_err *err) {
  if (given == want) return 0;
  char g[24], h[24];
  snprintf(g, sizeof g, "%d", given);
  snprintf(h, sizeof h, "%d", have);
  return disagree(dir, flag, g, key, h, err);
}

static int check_float(const char *dir, const char *flag, float given, float want, const char *key, atoll_err *err) {
  if (given < 0 || given == want) return 0;
  char g[24], h[24];
  snprintf(g, sizeof g, "%g", (double)given);
  snprintf(h, sizeof h, "%g", (double)want);
  return disagree(dir, flag, g, key, h, err);
}

int atoll_hf_take_shape(const char *dir, atoll_shape *run, const atoll_shape *given, atoll_err *err) {
  atoll_config d; /* the other keys as a run without flags has them */
  atoll_config_defaults(&d);
  atoll_shape h = d.model;
  if (atoll_hf_shape(dir, &h, err)) return -1;
  int llama = atoll_shape_llama(&h), l3 = atoll_shape_rope_llama3(&h);
  const char *model_type = atoll_hf_arch_of(&h)->model_type;
  if (given->arch[0] && strcmp(given->arch, h.arch) != 0) return disagree(dir, "arch", given->arch, "model_type", model_type, err);
  if (given->qkv_bias >= 0 && given->qkv_bias != h.qkv_bias)
    return disagree(dir, "qkv-bias", given->qkv_bias ? "1" : "0", "model_type", model_type, err);
  const char *flags[] = {"layers", "heads", "dim", "context", "vocab"};
  const char *keys[2][5] = {{"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"},
                            {"num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings", "vocab_size"}};
  const int g[] = {given->layers, given->heads, given->dim, given->context, given->vocab};
  const int want[] = {h.layers, h.heads, h.dim, h.context, h.vocab};
  for (int i = 0; i < 5; i++)
    if (g[i] >= 0 && check_int(dir, flags[i], g[i], want[i], keys[llama][i], want[i], err)) return -1;
  atoll_shape x = h; /* h with one given key: the derived sizes to compare */
  x.kv_heads = given->kv_heads;
  if (given->kv_heads >= 0 && atoll_shape_kv_heads(&x) != atoll_shape_kv_heads(&h))
    return check_int(dir, "kv-heads", given->kv_heads, -1, "num_key_value_heads", atoll_shape_kv_heads(&h), err);
  x = h;
  x.head_dim = given->head_dim;
  if (given->head_dim >= 0 && atoll_shape_head_dim(&x) != atoll_shape_head_dim(&h))
    return check_int(dir, "head-dim", given->head_dim, -1, "head_dim", atoll_shape_head_dim(&h), err);
  x = h;
  x.multiple_of = given->multiple_of;
  if (given->multiple_of >= 0 && atoll_shape_hidden(&x) != atoll_shape_hidden(&h))
    return check_int(dir, "multiple-of", given->multiple_of, -1, llama ? "intermediate_size" : "n_inner x 4",
                     atoll_shape_hidden(&h), err);
  x = h;
  x.tie = given->tie;
  if (given->tie != -2 && atoll_shape_tied(&x) != atoll_shape_tied(&h))
    return disagree(dir, "tie", given->tie == -1 ? "-1" : given->tie ? "1" : "0", "tie_word_embeddings",
                    atoll_shape_tied(&h) ? "true" : "false", err);
  if (check_float(dir, "norm-eps", given->norm_eps, atoll_shape_norm_eps(&h), "rms_norm_eps", err) ||
      check_float(dir, "rope-theta", given->rope_theta, atoll_shape_rope_theta(&h), "rope_theta", err))
    return -1;
  const char *scaling = l3 ? "llama3" : "none";
  if (given->rope_scaling[0] && strcmp(given->rope_scaling, scaling) != 0)
    return disagree(dir, "rope-scaling", given->rope_scaling, "rope_type", l3 ? "llama3" : "default", err);
  if (check_float(dir, "rope-factor", given->rope_factor, h.rope_factor, l3 ? "factor" : "(no llama3 scaling)", err) ||
      check_float(dir, "rope-low-freq-factor", given->rope_low_freq, h.rope_low_freq,
                  l3 ? "low_freq_factor" : "(no llama3 scaling)", err) ||
      check_float(dir, "rope-high-freq-factor", given->rope_high_freq, h.rope_high_freq,
                  l3 ? "high_freq_factor" : "(no llama3 scaling)", err))
    return -1;
  if (given->rope_orig_context >= 0 && given->rope_orig_context != h.rope_orig_context)
    return check_int(dir, "rope-original-context", given->rope_orig_context, h.rope_orig_context,
                     l3 ? "original_max_position_embeddings" : "(no llama3 scaling)", h.rope_orig_context, err);
  *run = h;
  return 0;
}

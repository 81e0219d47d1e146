/* Calibration against atoll itself: read a finished run's summary.json (its "config"
 * and the measured median step time), plan the same run on the "cpu" accelerator and
 * compare. The model is the run's: atoll's GPT-2 (tied head, learned positions, 4x GELU MLP) or Llama block (--arch),
 * trained in fp32, every activation kept; the layout is the summary's "layout" (data x
 * tensor x pipeline; a run from before model parallelism: data parallel over the
 * world), its micro-batches per step the layout's (or the config's "microbatches" or
 * "accum" for an older summary). */
#include "atoll/plan.h"
#include "core/json_text.h"
#include "model/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int get_int(const cJSON *o, const char *key, int dflt, int *out, const char *path, atoll_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) {
    if (dflt < 0) return atoll_fail(err, "%s: config has no \"%s\"", path, key);
    *out = dflt;
    return 0;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9)
    return atoll_fail(err, "%s: \"%s\" must be a non-negative integer", path, key);
  *out = (int)v->valuedouble;
  return 0;
}

int atoll_plan_calibrate_read(const char *path, atoll_plan_calibration *cal, atoll_err *err) {
  memset(cal, 0, sizeof *cal);
  cJSON *j = atoll_json_read_whole(path, 1 << 22, err);
  if (!j) {
    atoll_err why = *err;
    return atoll_fail(err, "%s (expected an atoll run's summary.json)", why.msg);
  }
  int rc = -1;
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(j, "config");
  const cJSON *med = cJSON_GetObjectItemCaseSensitive(j, "median_step_seconds");
  const cJSON *tps = cJSON_GetObjectItemCaseSensitive(j, "tokens_per_second");
  if (!cJSON_IsObject(cfg)) {
    atoll_fail(err, "%s: no \"config\" object (expected an atoll run's summary.json)", path);
    goto done;
  }
  if (!cJSON_IsNumber(med) || !(med->valuedouble > 0)) {
    atoll_fail(err, "%s: no positive \"median_step_seconds\" (did the run finish more than 3 steps?)", path);
    goto done;
  }
  int layers = 0, heads = 0, dim = 0, context = 0, vocab = 0, batch = 0, seq = 0, accum = 1, threads = 0, world = 1,
      shard = 0, micro = 0, dp = 0, tp = 1, pp = 1, v = 1;
  const cJSON *lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
  if (get_int(cfg, "layers", -1, &layers, path, err) || get_int(cfg, "heads", -1, &heads, path, err) ||
      get_int(cfg, "dim", -1, &dim, path, err) || get_int(cfg, "context", -1, &context, path, err) ||
      get_int(cfg, "vocab", -1, &vocab, path, err) || get_int(cfg, "batch", -1, &batch, path, err) ||
      get_int(cfg, "seq", 0, &seq, path, err) || get_int(cfg, "accum", 1, &accum, path, err) ||
      get_int(cfg, "threads", 0, &threads, path, err) || get_int(j, "world_size", 1, &world, path, err) ||
      get_int(j, "shard", 0, &shard, path, err) || get_int(cfg, "microbatches", 0, &micro, path, err))
    goto done;
  if (cJSON_IsObject(lay) && (get_int(lay, "dp", -1, &dp, path, err) || get_int(lay, "tp", -1, &tp, path, err) ||
                              get_int(lay, "pp", -1, &pp, path, err) || get_int(lay, "virtual_stages", 1, &v, path, err) ||
                              get_int(lay, "microbatches", micro > 0 ? micro : accum, &micro, path, err)))
    goto done;
  if (!cJSON_IsObject(lay)) dp = world;
  if (micro > 0) accum = micro;
  atoll_plan_model *m = &cal->model;
  snprintf(m->name, sizeof m->name, "atoll run L%d H%d C%d T%d", layers, heads, dim, seq ? seq : context);
  /* the run's own block design, with the model's own derived sizes (src/model/layout.c) */
  atoll_shape shape = {.layers = layers, .heads = heads, .dim = dim, .context = context, .vocab = vocab};
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(cfg, "arch");
  if (cJSON_IsString(arch)) snprintf(shape.arch, sizeof shape.arch, "%s", arch->valuestring);
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie"); /* -1: the arch's default */
  shape.tie = cJSON_IsNumber(tie) && tie->valuedouble == 1 ? 1 : 0;
  if (get_int(cfg, "kv-heads", 0, &shape.kv_heads, path, err) || get_int(cfg, "multiple-of", 256, &shape.multiple_of, path, err) ||
      atoll_shape_check(&shape, err))
    goto done;
  m->arch = atoll_shape_llama(&shape) ? ATOLL_ARCH_LLAMA : ATOLL_ARCH_GPT2;
  m->layers = layers, m->dim = dim, m->heads = heads, m->kv_heads = atoll_shape_kv_heads(&shape);
  m->ffn = atoll_shape_hidden(&shape), m->vocab = vocab;
  m->context = context, m->seq = seq ? seq : context, m->tied = atoll_shape_tied(&shape);
  m->source = path;
  if (atoll_plan_model_check(m, err)) goto done;
  if (batch < 1 || accum < 1 || world < 1 || shard > 3 || dp < 1 || tp < 1 || pp < 1 || v < 1) {
    atoll_fail(err, "%s: batch, accum, world_size and the layout's dp, tp, pp must be at least 1 and shard 0..3", path);
    goto done;
  }
  cal->train.seq = m->seq;
  cal->train.batch_tokens = (double)batch * accum * dp * m->seq;
  cal->train.token_budget = cal->train.batch_tokens;
  cal->train.precision = ATOLL_PREC_FP32;
  /* the gradients the run sent (atoll train --grad-dtype; absent in older summaries: fp32) */
  const cJSON *gd = cJSON_GetObjectItemCaseSensitive(cfg, "grad-dtype");
  if (gd && !(cJSON_IsString(gd) && (!strcmp(gd->valuestring, "fp32") || !strcmp(gd->valuestring, "bf16")))) {
    atoll_fail(err, "%s: config.grad-dtype must be \"fp32\" or \"bf16\"", path);
    goto done;
  }
  cal->train.grad_bytes = gd && !strcmp(gd->valuestring, "bf16") ? 2 : 4;
  cal->layout = (atoll_plan_layout){dp, tp, pp, 1, dp > 1 ? shard : 0, batch, v, ATOLL_RECOMPUTE_NONE, 0};
  cal->threads = threads;
  cal->measured_step_s = med->valuedouble;
  cal->measured_tokens_per_s = cJSON_IsNumber(tps) ? tps->valuedouble : 0;
  rc = 0;
done:
  cJSON_Delete(j);
  return rc;
}

void atoll_plan_calibrate_predict(atoll_plan_calibration *cal, const atoll_plan_cluster *cpu,
                                  const atoll_plan_assume *a) {
  atoll_plan_ctx ctx = {&cal->model, cpu, &cal->train, a, NULL};
  atoll_plan_evaluate(&ctx, &cal->layout, &cal->result);
  cal->predicted_step_s = cal->result.step_s;
  cal->gap = cal->predicted_step_s / cal->measured_step_s - 1.0;
}

/* --init-from and --init-from-hf (src/train/init_from.h). A checkpoint holds the whole
 * model in the whole model's layout whatever layout wrote it, so every rank reads it
 * and cuts its own part and ZeRO shard, as a resume does; unlike a resume nothing of
 * the source's run comes along but the weights (and, asked for, the AdamW moments and
 * the step): a different island count, layout or ZeRO stage is fine. */
#include "train/init_from.h"

#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "core/mem.h"
#include "data/data_tokenizer.h"
#include "model/layout.h"
#include "tokenizer/tokenizer.h"
#include "train/config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The source checkpoint's model shape must be the run's. */
static int check_shape(const atoll_run *r, const char *dir, const cJSON *state, atoll_err *err) {
  atoll_config src;
  atoll_config_defaults(&src);
  char source[1300];
  snprintf(source, sizeof source, "%s/state.json", dir);
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(state, "config");
  if (!cfg) return atoll_fail(err, "--init-from %s: state.json holds no config (the model's shape)", dir);
  if (atoll_config_apply_json(&src, cfg, source, err)) return -1;
  const atoll_shape *a = &src.model, *b = &r->cfg->model;
  const char *names[] = {"layers", "heads", "dim", "context", "vocab"};
  const int have[] = {a->layers, a->heads, a->dim, a->context, a->vocab};
  const int want[] = {b->layers, b->heads, b->dim, b->context, b->vocab};
  for (int i = 0; i < 5; i++)
    if (have[i] != want[i])
      return atoll_fail(err, "--init-from %s: the checkpoint's model has %s=%d, this run --%s %d (a run started from weights keeps their shape: pass --%s %d)",
                        dir, names[i], have[i], names[i], want[i], names[i], have[i]);
  /* the block design too: otherwise the first missing tensor is all the message says */
  const char *aa = a->arch[0] ? a->arch : "gpt2", *ba = b->arch[0] ? b->arch : "gpt2";
  if (strcmp(aa, ba) != 0)
    return atoll_fail(err, "--init-from %s: the checkpoint's model has arch=%s, this run --arch %s (pass --arch %s)", dir,
                      aa, ba, aa);
  const char *dnames[] = {"kv-heads", "multiple-of", "tie", "qkv-bias", "head-dim"};
  const int dhave[] = {atoll_shape_kv_heads(a), atoll_shape_hidden(a), atoll_shape_tied(a), a->qkv_bias,
                       atoll_shape_head_dim(a)};
  const int dwant[] = {atoll_shape_kv_heads(b), atoll_shape_hidden(b), atoll_shape_tied(b), b->qkv_bias,
                       atoll_shape_head_dim(b)};
  const int dflag[] = {dhave[0], a->multiple_of ? a->multiple_of : 256, dhave[2], dhave[3], dhave[4]};
  for (int i = 0; i < 5; i++)
    if (dhave[i] != dwant[i])
      return atoll_fail(err, "--init-from %s: the checkpoint's model has another %s (%s %d; this run %d); pass --%s %d",
                        dir, dnames[i], i == 1 ? "SwiGLU width" : dnames[i], dhave[i], dwant[i], dnames[i], dflag[i]);
  if (atoll_shape_llama(a) && !atoll_shape_rope_same(a, b))
    return atoll_fail(err, "--init-from %s: the checkpoint's model has another rotary embedding (rope-theta %g, rope-scaling %s); "
                      "pass its --rope-theta and --rope-scaling keys", dir, atoll_shape_rope_theta(a),
                      atoll_shape_rope_llama3(a) ? "llama3" : "none");
  return 0;
}

/* The checkpoint's ids must mean what --data's ids mean: weights of one tokenizer
 * trained on another's ids would be silently meaningless (as a resume refuses). */
static int check_tokenizer(const atoll_run *r, const char *dir, const cJSON *state, atoll_err *err) {
  char what[1300];
  snprintf(what, sizeof what, "%s/state.json", dir);
  atoll_tokenizer_record saved, data;
  if (atoll_tokenizer_record_from_json(cJSON_GetObjectItemCaseSensitive(state, "tokenizer"), what, &saved, err) ||
      atoll_data_tokenizer(r->cfg->data.dir, &data, err))
    return -1;
  char lead[1300];
  snprintf(lead, sizeof lead, "--init-from %s: the checkpoint was trained on", dir);
  return atoll_tokenizer_same_ids(&saved, &data, r->cfg->data.dir, lead, "prepare the data with the checkpoint's tokenizer",
                                  err);
}

/* The same for a Hugging Face directory, on its tokenizer.json itself (a model's ids
 * mean what its tokenizer says); a directory without one is taken on trust, said once. */
static int check_hf_tokenizer(const atoll_run *r, const char *dir, int *unchecked, atoll_err *err) {
  char path[1300];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  *unchecked = access(path, F_OK) != 0;
  if (*unchecked) return 0;
  atoll_tokenizer *t = NULL;
  atoll_tokenizer_record hf, data;
  if (atoll_tokenizer_load(&t, path, err)) {
    atoll_err why = *err;
    return atoll_fail(err, "--init-from-hf %s: %s", dir, why.msg);
  }
  atoll_tokenizer_record_of(t, &hf);
  atoll_tokenizer_free(t);
  if (atoll_data_tokenizer(r->cfg->data.dir, &data, err)) return -1;
  char lead[1400], fix[1400];
  snprintf(lead, sizeof lead, "--init-from-hf %s: its tokenizer.json is", dir);
  snprintf(fix, sizeof fix, "prepare the data with --tokenizer %s", path);
  return atoll_tokenizer_same_ids(&hf, &data, r->cfg->data.dir, lead, fix, err);
}

/* This rank's shard [begin, end) of a whole-model buffer of moments into dst. */
static void cut_shard(const atoll_run *r, const atoll_train_state *st, float *dst, const float *whole, float *scratch) {
  atoll_run_cut_part(r, scratch, whole);
  memcpy(dst, scratch + st->begin, (st->end - st->begin) * sizeof(float));
}

/* The checkpoint's step, and AdamW's step count before this run's first step: with
 * --init-step 1 the run begins at the source's step, so the count the moments come
 * with (or 0 for fresh moments) is offset by it (t = adam_step0 + step + 1). */
static int start_steps(const atoll_config *c, const char *dir, const cJSON *state, atoll_train_state *st, int *start,
                       atoll_err *err) {
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "step");
  const cJSON *adam = cJSON_GetObjectItemCaseSensitive(state, "adam_steps");
  if (!cJSON_IsNumber(adam)) adam = step; /* older checkpoints: moments from step 0 */
  int saved = cJSON_IsNumber(step) && step->valuedouble >= 0 && step->valuedouble <= 2e9 ? (int)step->valuedouble : -1;
  if (c->init.step && saved < 0) return atoll_fail(err, "--init-step 1: %s/state.json holds no valid step", dir);
  if (c->init.step && saved >= c->run.steps)
    return atoll_fail(err, "--steps %d: --init-step 1 begins at the checkpoint's step %d, and --steps counts from the source's step 0 (as for a resume): pass more than %d",
                      c->run.steps, saved, saved);
  *start = c->init.step ? saved : 0;
  st->adam_step0 = 0;
  if (c->init.optim && adam) {
    if (!cJSON_IsNumber(adam) || adam->valuedouble < 0 || adam->valuedouble > 2e9 ||
        adam->valuedouble != (int)adam->valuedouble)
      return atoll_fail(err, "--init-optim 1: %s/state.json: adam_steps is not a whole number between 0 and 2e9", dir);
    st->adam_step0 = (int)adam->valuedouble;
  }
  st->adam_step0 -= *start;
  return 0;
}

static int from_checkpoint(atoll_run *r, atoll_train_state *st, float *wp, float *wm, float *wv, float *px, int *start,
                           atoll_err *err) {
  const atoll_config *c = r->cfg;
  char dir[1200];
  cJSON *state = NULL;
  if (atoll_ckpt_resolve(c->init.from, dir, sizeof dir, err)) {
    atoll_err why = *err;
    return atoll_fail(err, "--init-from %s: %s", c->init.from, why.msg);
  }
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  /* with the moments, AdamW's bias correction goes on from the source's step count */
  int rc = start_steps(c, dir, state, st, start, err);
  if (rc == 0) rc = check_shape(r, dir, state, err);
  if (rc == 0) rc = check_tokenizer(r, dir, state, err);
  cJSON_Delete(state);
  if (rc) return -1;
  /* a DiLoCo checkpoint's model.safetensors holds the global weights and
   * optimizer.safetensors island 0's moments: both whole models */
  if (atoll_ckpt_load(dir, &r->whole, wp, c->init.optim ? wm : NULL, c->init.optim ? wv : NULL, err)) return -1;
  atoll_run_cut_part(r, atoll_run_params(r), wp);
  if (c->init.optim) {
    cut_shard(r, st, st->m, wm, px);
    cut_shard(r, st, st->v, wv, px);
  }
  if (r->rank == 0)
    fprintf(stderr, "atoll train: starting from the weights%s of %s%s\n", c->init.optim ? " and AdamW moments" : "", dir,
            c->init.step ? ", at its step" : "");
  return 0;
}

int atoll_run_init_from(atoll_run *r, atoll_train_state *st, int *start, atoll_err *err) {
  const atoll_config *c = r->cfg;
  *start = 0;
  if (!c->init.from[0] && !c->init.from_hf[0]) return 0;
  size_t whole_n = r->whole.nparams, part_n = r->lay->nparams;
  int moments = c->init.from[0] && c->init.optim, unchecked = 0;
  float *wp = atoll_mem_alloc(whole_n * sizeof(float));
  float *wm = moments ? atoll_mem_alloc(whole_n * sizeof(float)) : NULL;
  float *wv = moments ? atoll_mem_alloc(whole_n * sizeof(float)) : NULL;
  float *px = moments ? atoll_mem_alloc(part_n * sizeof(float)) : NULL;
  int rc = -1;
  if (!wp || (moments && (!wm || !wv || !px))) {
    atoll_fail(err, "out of memory reading the starting weights (%zu parameters)", whole_n);
  } else if (c->init.from[0]) {
    rc = from_checkpoint(r, st, wp, wm, wv, px, start, err);
  } else if (check_hf_tokenizer(r, c->init.from_hf, &unchecked, err)) {
    /* err names the mismatch */
  } else if (atoll_hf_import(c->init.from_hf, &r->whole, wp, err) == 0) {
    atoll_run_cut_part(r, atoll_run_params(r), wp);
    if (r->rank == 0) fprintf(stderr, "atoll train: starting from the weights of %s\n", c->init.from_hf);
    if (r->rank == 0 && unchecked)
      fprintf(stderr, "atoll train: %s has no tokenizer.json: its token ids were not checked against --data's\n",
              c->init.from_hf);
    rc = 0;
  } else {
    atoll_err why = *err;
    atoll_fail(err, "--init-from-hf: %s", why.msg);
  }
  atoll_mem_free(wp);
  atoll_mem_free(wm);
  atoll_mem_free(wv);
  atoll_mem_free(px);
  return rc;
}

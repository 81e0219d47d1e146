/* atoll eval (--ckpt DIR | --hf DIR) --data DIR: the validation loss of a checkpoint or
 * of a Hugging Face model directory on prepared data, over the windows of training's
 * evaluation (src/train/train.c's evaluate): eval-batches batches of `batch` windows of
 * seq tokens, window i of the evenly spaced set atoll_dataset_eval_window gives, the
 * loss the mean of the batches' mean losses. --batch, --seq and --eval-batches default
 * to the checkpoint's run (train's defaults for --hf; seq: the model's context). The
 * whole model runs on this process's CPU in fp32. docs/usage.md ("atoll eval"). */
#include "cli/eval_cli.h"

#include "atoll/atoll.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "data/data_tokenizer.h"
#include "data/dataset.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/config.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void openblas_set_num_threads(int n);

typedef struct {
  const char *ckpt, *hf, *data, *windows_out;
  int json;
  atoll_config cfg;                   /* the model's shape and the run's settings */
  const char *flags[16], *values[16]; /* --batch, --seq, --eval-batches as given, in order */
  int nflags;
  char dir[PATH_MAX];                 /* the resolved checkpoint directory */
} eval_opts;

static void usage(FILE *f) {
  fprintf(f, "usage: atoll eval (--ckpt DIR | --hf DIR) --data DIR [--batch N] [--seq N] [--eval-batches N]\n"
             "                  [--threads N] [--json] [--windows-out FILE]\n"
             "  the validation loss of a checkpoint (or a Hugging Face model directory) on DIR's val split,\n"
             "  over the windows of training's evaluation: eval-batches batches of batch windows of seq tokens\n"
             "  --batch, --seq, --eval-batches: default to the checkpoint's run (--hf: train's defaults 16 and 8,\n"
             "    seq the model's context)\n"
             "  --json: one JSON object (val_loss, windows, context = tokens per window, batch, eval_batches)\n"
             "  --windows-out FILE: the windows evaluated, int32 [windows, seq + 1] (inputs and the next token)\n");
}

static int parse(int argc, char **argv, eval_opts *o, atoll_err *err) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (strcmp(a, "--json") == 0) {
      o->json = 1;
      continue;
    }
    if (i + 1 >= argc) return atoll_fail(err, "%s: needs a value (see atoll eval --help)", a);
    const char *v = argv[++i];
    if (strcmp(a, "--ckpt") == 0)
      o->ckpt = v;
    else if (strcmp(a, "--hf") == 0)
      o->hf = v;
    else if (strcmp(a, "--data") == 0)
      o->data = v;
    else if (strcmp(a, "--windows-out") == 0)
      o->windows_out = v;
    else if (strcmp(a, "--threads") == 0) {
      atoll_config t;
      atoll_config_defaults(&t);
      if (atoll_config_set(&t, "threads", v, err)) return -1;
      if (t.run.threads > 0) omp_set_num_threads(t.run.threads), openblas_set_num_threads(t.run.threads);
    } else if (strcmp(a, "--batch") == 0 || strcmp(a, "--seq") == 0 || strcmp(a, "--eval-batches") == 0) {
      if (o->nflags == 16) return atoll_fail(err, "%s: given too many times", a);
      o->flags[o->nflags] = a + 2, o->values[o->nflags++] = v; /* applied over the model's settings */
    } else
      return atoll_fail(err, "%s: unknown flag for eval (see atoll eval --help)", a);
  }
  if (!o->ckpt == !o->hf) return atoll_fail(err, "--ckpt or --hf: eval needs exactly one model (see atoll eval --help)");
  if (!o->data) return atoll_fail(err, "--data: eval needs a prepared data directory (atoll prepare)");
  return 0;
}

/* The checkpoint's run settings and shape; its tokenizer must be the data's. */
static int settings_of_ckpt(eval_opts *o, atoll_err *err) {
  cJSON *state = NULL;
  if (atoll_ckpt_resolve(o->ckpt, o->dir, sizeof o->dir, err) || atoll_ckpt_read_state(o->dir, &state, err)) return -1;
  char what[PATH_MAX + 16], lead[PATH_MAX + 64];
  snprintf(what, sizeof what, "%s/state.json", o->dir);
  const cJSON *saved = cJSON_GetObjectItemCaseSensitive(state, "config");
  atoll_tokenizer_record model, data;
  int rc = saved ? atoll_config_apply_json(&o->cfg, saved, what, err)
                 : atoll_fail(err, "%s: holds no config (the model's shape)", what);
  if (rc == 0)
    rc = atoll_tokenizer_record_from_json(cJSON_GetObjectItemCaseSensitive(state, "tokenizer"), what, &model, err);
  cJSON_Delete(state);
  if (rc || atoll_data_tokenizer(o->data, &data, err)) return -1;
  snprintf(lead, sizeof lead, "--ckpt %s: the checkpoint was trained on", o->dir);
  return atoll_tokenizer_same_ids(&model, &data, o->data, lead, "evaluate on data prepared with its tokenizer", err);
}

/* The Hugging Face directory's shape (config.json); its tokenizer.json, when there is
 * one, must give the data's ids. */
static int settings_of_hf(eval_opts *o, atoll_err *err) {
  if (atoll_hf_shape(o->hf, &o->cfg.model, err)) return -1;
  snprintf(o->dir, sizeof o->dir, "%s", o->hf);
  char path[PATH_MAX + 16], lead[PATH_MAX + 64], fix[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/tokenizer.json", o->hf);
  if (access(path, F_OK) != 0) return 0;
  atoll_tokenizer *t = NULL;
  atoll_tokenizer_record hf, data;
  if (atoll_tokenizer_load(&t, path, err)) return -1;
  atoll_tokenizer_record_of(t, &hf);
  atoll_tokenizer_free(t);
  if (atoll_data_tokenizer(o->data, &data, err)) return -1;
  snprintf(lead, sizeof lead, "--hf %s: its tokenizer.json is", o->hf);
  snprintf(fix, sizeof fix, "prepare the data with --tokenizer %s", path);
  return atoll_tokenizer_same_ids(&hf, &data, o->data, lead, fix, err);
}

/* The mean over eval-batches batches of the model's mean loss, as training's evaluation. */
static int run_eval(eval_opts *o, atoll_model *m, const atoll_dataset *val, int seq, double *loss, atoll_err *err) {
  int B = o->cfg.data.batch, batches = o->cfg.run.eval_batches;
  uint64_t count = (uint64_t)batches * (uint64_t)B;
  int32_t *in = malloc(sizeof(int32_t) * (size_t)B * seq), *tg = malloc(sizeof(int32_t) * (size_t)B * seq);
  int32_t *w = malloc(sizeof(int32_t) * ((size_t)seq + 1));
  FILE *out = o->windows_out ? fopen(o->windows_out, "wb") : NULL;
  int rc = !in || !tg || !w ? atoll_fail(err, "out of memory for %d windows of %d tokens", B, seq) : 0;
  if (rc == 0 && o->windows_out && !out) rc = atoll_fail(err, "--windows-out %s: cannot create", o->windows_out);
  double sum = 0.0;
  for (int e = 0; rc == 0 && e < batches; e++) {
    for (int b = 0; b < B; b++) {
      atoll_dataset_eval_window(val, (uint64_t)e * B + b, count, seq, w);
      memcpy(in + (size_t)b * seq, w, sizeof(int32_t) * seq);
      memcpy(tg + (size_t)b * seq, w + 1, sizeof(int32_t) * seq);
      if (out && fwrite(w, sizeof(int32_t), (size_t)seq + 1, out) != (size_t)seq + 1)
        rc = atoll_fail(err, "--windows-out %s: cannot write", o->windows_out);
    }
    sum += atoll_model_forward(m, in, tg, B, seq);
  }
  if (out && fclose(out) != 0 && rc == 0) rc = atoll_fail(err, "--windows-out %s: cannot write", o->windows_out);
  free(in);
  free(tg);
  free(w);
  *loss = (double)(float)(sum / batches); /* training reports it as a float */
  return rc;
}

static int eval(eval_opts *o, atoll_err *err) {
  atoll_config_defaults(&o->cfg);
  if (o->ckpt ? settings_of_ckpt(o, err) : settings_of_hf(o, err)) return -1;
  for (int i = 0; i < o->nflags; i++)
    if (atoll_config_set(&o->cfg, o->flags[i], o->values[i], err)) return -1;
  int seq = o->cfg.data.seq > 0 ? o->cfg.data.seq : o->cfg.model.context;
  if (seq > o->cfg.model.context)
    return atoll_fail(err, "--seq %d: longer than the model's context %d", seq, o->cfg.model.context);
  atoll_dataset val;
  if (atoll_dataset_open(&val, o->data, "val", seq, err)) return -1;
  atoll_model *m = NULL;
  int rc = atoll_dataset_check_vocab(&val, o->cfg.model.vocab, err) ||
           atoll_model_create(&m, &o->cfg.model, o->cfg.data.batch, seq, err);
  if (rc == 0)
    rc = o->ckpt ? atoll_ckpt_load(o->dir, atoll_model_layout(m), atoll_model_params(m), NULL, NULL, err)
                 : atoll_hf_import(o->hf, atoll_model_layout(m), atoll_model_params(m), err);
  double loss = 0;
  if (rc == 0) rc = run_eval(o, m, &val, seq, &loss, err);
  if (rc == 0) {
    long windows = (long)o->cfg.run.eval_batches * o->cfg.data.batch;
    if (o->json)
      printf("{\"val_loss\": %.17g, \"windows\": %ld, \"context\": %d, \"batch\": %d, \"eval_batches\": %d, "
             "\"tokens\": %ld}\n", loss, windows, seq, o->cfg.data.batch, o->cfg.run.eval_batches, windows * seq);
    else
      printf("val_loss %.6f over %ld windows of %d tokens (%d batches of %d) of %s/val, model %s\n", loss, windows, seq,
             o->cfg.run.eval_batches, o->cfg.data.batch, o->data, o->dir);
  }
  atoll_model_destroy(m);
  atoll_dataset_close(&val);
  return rc ? -1 : 0;
}

int atoll_eval_main(int argc, char **argv) {
  static eval_opts o; /* large (paths, config); zeroed */
  atoll_err err;
  if (parse(argc, argv, &o, &err) || eval(&o, &err)) {
    fprintf(stderr, "atoll: error: %s\n", err.msg);
    return 1;
  }
  return 0;
}

/* The training loop: batches from the deterministic loader, forward/backward over
 * micro-batches, global-norm clipping, AdamW, evaluation, metrics, checkpoints.
 *
 * Exact resume: everything a step depends on is either in the checkpoint (weights,
 * AdamW moments, step, RNG state, config) or a pure function of it (the batch of step
 * s is drawn from (seed, s)), so a resumed run repeats the uninterrupted run's
 * arithmetic bit for bit (at the same thread count). */
#include "train/train.h"

#include "ckpt/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  const atoll_config *cfg;
  int seq;
  atoll_model *model;
  const atoll_layout *lay;
  float *m, *v; /* AdamW moments */
  atoll_dataset train, val;
  atoll_rng rng;
  int32_t *tokens; /* [batch, seq+1] window scratch */
  int32_t *inputs, *targets;
  char ckpt_root[1100];
  FILE *metrics;
  double *step_seconds;
  int nsteps_timed;
  float last_loss, last_val;
  int have_val;
} trainer;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t peak_rss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (size_t)ru.ru_maxrss * 1024;
}

static int mkdir_p(const char *path, atoll_err *err) {
  char buf[1100];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return atoll_fail(err, "%s: path too long", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) && errno != EEXIST) return atoll_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0755) && errno != EEXIST) return atoll_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
  return 0;
}

/* Splits the window rows of one micro-batch into inputs (first seq tokens) and
 * targets (the next token at each position). */
static void load_batch(trainer *t, int step, int micro) {
  const atoll_config *c = t->cfg;
  int S = t->seq;
  for (int b = 0; b < c->batch; b++) {
    int32_t *w = t->tokens + (size_t)b * (S + 1);
    atoll_dataset_window(&t->train, c->seed, (uint64_t)step, (uint64_t)micro * c->batch + b, S, w);
    memcpy(t->inputs + (size_t)b * S, w, sizeof(int32_t) * S);
    memcpy(t->targets + (size_t)b * S, w + 1, sizeof(int32_t) * S);
  }
}

static float evaluate(trainer *t) {
  const atoll_config *c = t->cfg;
  int S = t->seq;
  uint64_t count = (uint64_t)c->eval_batches * c->batch;
  double sum = 0.0;
  for (int e = 0; e < c->eval_batches; e++) {
    for (int b = 0; b < c->batch; b++) {
      int32_t *w = t->tokens + (size_t)b * (S + 1);
      atoll_dataset_eval_window(&t->val, (uint64_t)e * c->batch + b, count, S, w);
      memcpy(t->inputs + (size_t)b * S, w, sizeof(int32_t) * S);
      memcpy(t->targets + (size_t)b * S, w + 1, sizeof(int32_t) * S);
    }
    sum += atoll_model_forward(t->model, t->inputs, t->targets, c->batch, S);
  }
  return (float)(sum / c->eval_batches);
}

static cJSON *rng_to_json(const atoll_rng *r) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < 4; i++) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->s[i]);
    cJSON_AddItemToArray(a, cJSON_CreateString(buf));
  }
  return a;
}

static int rng_from_json(atoll_rng *r, const cJSON *a, const char *dir, atoll_err *err) {
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 4)
    return atoll_fail(err, "%s/state.json: rng must be an array of 4 strings", dir);
  for (int i = 0; i < 4; i++) {
    const cJSON *x = cJSON_GetArrayItem(a, i);
    char *end = NULL;
    if (!cJSON_IsString(x)) return atoll_fail(err, "%s/state.json: rng[%d] is not a string", dir, i);
    errno = 0;
    r->s[i] = strtoull(x->valuestring, &end, 10);
    if (errno || !*x->valuestring || *end) return atoll_fail(err, "%s/state.json: rng[%d] is not an integer", dir, i);
  }
  return 0;
}

static int save_checkpoint(trainer *t, int step, atoll_err *err) {
  char dir[1200];
  atoll_ckpt_dirname(t->ckpt_root, step, dir, sizeof dir);
  cJSON *state = cJSON_CreateObject();
  cJSON_AddNumberToObject(state, "step", step);
  cJSON_AddItemToObject(state, "config", atoll_config_to_json(t->cfg));
  cJSON_AddItemToObject(state, "rng", rng_to_json(&t->rng));
  cJSON *data = cJSON_AddObjectToObject(state, "data");
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->cfg->seed);
  cJSON_AddStringToObject(data, "seed", seed);
  cJSON_AddNumberToObject(data, "next_step", step); /* the batch of step s is window set (seed, s) */
  cJSON_AddNumberToObject(state, "train_loss", t->last_loss);
  int rc = atoll_ckpt_save(dir, t->lay, atoll_model_params(t->model), t->m, t->v, state, err);
  cJSON_Delete(state);
  if (rc) return -1;
  return atoll_ckpt_prune(t->ckpt_root, t->cfg->keep, err);
}

/* Restores weights, moments and the training state; returns the step to continue from. */
static int load_checkpoint(trainer *t, const char *dir, int *start_step, atoll_err *err) {
  cJSON *state = NULL;
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  int rc = -1;
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "step");
  if (!cJSON_IsNumber(step)) {
    atoll_fail(err, "%s/state.json: step missing", dir);
    goto done;
  }
  if (rng_from_json(&t->rng, cJSON_GetObjectItemCaseSensitive(state, "rng"), dir, err)) goto done;
  if (atoll_ckpt_load(dir, t->lay, atoll_model_params(t->model), t->m, t->v, err)) goto done;
  *start_step = step->valueint;
  rc = 0;
done:
  cJSON_Delete(state);
  return rc;
}

/* Keeps the metrics of steps <= keep_steps (a resumed run rewrites what follows). */
static int open_metrics(trainer *t, int keep_steps, atoll_err *err) {
  char path[1200];
  snprintf(path, sizeof path, "%s/metrics.jsonl", t->cfg->out);
  char *kept = NULL;
  size_t kept_len = 0;
  if (keep_steps > 0) {
    FILE *old = fopen(path, "r");
    if (old) {
      FILE *mem = open_memstream(&kept, &kept_len);
      char line[4096];
      while (fgets(line, sizeof line, old)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        if (cJSON_IsNumber(s) && s->valueint <= keep_steps) fputs(line, mem);
        cJSON_Delete(o);
      }
      fclose(old);
      fclose(mem);
    }
  }
  t->metrics = fopen(path, "w");
  if (!t->metrics) {
    free(kept);
    return atoll_fail(err, "%s: cannot write: %s", path, strerror(errno));
  }
  if (kept) fwrite(kept, 1, kept_len, t->metrics);
  free(kept);
  fflush(t->metrics);
  return 0;
}

static void format_eta(char *buf, size_t n, double s) {
  if (s < 0 || !isfinite(s)) s = 0;
  int h = (int)(s / 3600), m = (int)(fmod(s, 3600) / 60), sec = (int)fmod(s, 60);
  if (h)
    snprintf(buf, n, "%dh%02dm", h, m);
  else
    snprintf(buf, n, "%dm%02ds", m, sec);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median seconds per step, leaving out the first steps of this process (warm-up:
 * page faults, thread pools, caches). */
static double median_step_seconds(trainer *t) {
  int skip = t->nsteps_timed > 6 ? 3 : (t->nsteps_timed > 1 ? 1 : 0);
  int n = t->nsteps_timed - skip;
  if (n <= 0) return 0;
  double *v = malloc(sizeof(double) * n);
  memcpy(v, t->step_seconds + skip, sizeof(double) * n);
  qsort(v, n, sizeof(double), cmp_double);
  double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  free(v);
  return med;
}

static int write_summary(trainer *t, int steps_done, atoll_err *err) {
  const atoll_config *c = t->cfg;
  double tokens_per_step = (double)c->batch * t->seq * c->accum;
  double med = median_step_seconds(t);
  double tps = med > 0 ? tokens_per_step / med : 0;
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "steps", steps_done);
  cJSON_AddNumberToObject(s, "params", (double)t->lay->nparams);
  cJSON_AddNumberToObject(s, "final_train_loss", t->last_loss);
  if (t->have_val)
    cJSON_AddNumberToObject(s, "final_val_loss", t->last_val);
  else
    cJSON_AddNullToObject(s, "final_val_loss");
  cJSON_AddNumberToObject(s, "tokens_per_second", tps);
  cJSON_AddNumberToObject(s, "flops_per_token", atoll_flops_per_token(&c->model, t->seq));
  cJSON_AddNumberToObject(s, "model_flops_per_second", tps * atoll_flops_per_token(&c->model, t->seq));
  cJSON_AddNumberToObject(s, "median_step_seconds", med);
  cJSON_AddNumberToObject(s, "peak_rss_bytes", (double)peak_rss_bytes());
  cJSON_AddItemToObject(s, "config", atoll_config_to_json(c));
  char *text = cJSON_Print(s);
  cJSON_Delete(s);
  char path[1200], tmp[1300];
  snprintf(path, sizeof path, "%s/summary.json", c->out);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  if (f) ok = (fclose(f) == 0) && ok;
  free(text);
  if (!ok || rename(tmp, path)) return atoll_fail(err, "%s: cannot write: %s", path, strerror(errno));
  return 0;
}

static void trainer_free(trainer *t) {
  atoll_model_destroy(t->model);
  free(t->m);
  free(t->v);
  atoll_dataset_close(&t->train);
  atoll_dataset_close(&t->val);
  free(t->tokens);
  free(t->inputs);
  free(t->targets);
  free(t->step_seconds);
  if (t->metrics) fclose(t->metrics);
}

static int trainer_init(trainer *t, const atoll_config *c, atoll_err *err) {
  memset(t, 0, sizeof *t);
  t->cfg = c;
  t->seq = c->seq ? c->seq : c->model.context;
  if (atoll_config_check(c, err)) return -1;
  if (atoll_dataset_open(&t->train, c->data, "train", t->seq, err)) return -1;
  if (atoll_dataset_open(&t->val, c->data, "val", t->seq, err)) return -1;
  if ((int64_t)t->train.vocab > c->model.vocab)
    return atoll_fail(err, "%s: data vocabulary %u is larger than the model's vocab=%d", c->data,
                      t->train.vocab, c->model.vocab);
  if (atoll_model_create(&t->model, &c->model, c->batch, t->seq, err)) return -1;
  t->lay = atoll_model_layout(t->model);
  size_t n = t->lay->nparams;
  t->m = calloc(n, sizeof(float));
  t->v = calloc(n, sizeof(float));
  size_t rows = (size_t)c->batch;
  t->tokens = malloc(sizeof(int32_t) * rows * (t->seq + 1));
  t->inputs = malloc(sizeof(int32_t) * rows * t->seq);
  t->targets = malloc(sizeof(int32_t) * rows * t->seq);
  t->step_seconds = calloc((size_t)c->steps, sizeof(double));
  if (!t->m || !t->v || !t->tokens || !t->inputs || !t->targets || !t->step_seconds)
    return atoll_fail(err, "out of memory for optimizer state (%zu parameters)", n);
  snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/checkpoints", c->out);
  return 0;
}

int atoll_train_run(const atoll_config *cfg, const char *resume_dir,
                    const volatile sig_atomic_t *stop, atoll_err *err) {
  trainer tr, *t = &tr;
  int rc = -1;
  if (trainer_init(t, cfg, err)) goto done;
  const atoll_config *c = cfg;
  if (mkdir_p(c->out, err)) goto done;

  int start = 0;
  if (resume_dir) {
    if (load_checkpoint(t, resume_dir, &start, err)) goto done;
    if (start > c->steps) {
      atoll_fail(err, "--steps %d: the checkpoint %s is already at step %d", c->steps, resume_dir, start);
      goto done;
    }
    fprintf(stderr, "resuming from %s at step %d\n", resume_dir, start);
  } else {
    char latest[1200];
    atoll_err ignored;
    if (atoll_ckpt_find_latest(t->ckpt_root, latest, sizeof latest, &ignored) == 0) {
      atoll_fail(err, "--out %s: already holds a run with checkpoint %s; pass --resume %s to continue it or choose another --out",
                 c->out, latest, c->out);
      goto done;
    }
    atoll_model_init_weights(t->model, c->seed);
    atoll_rng_seed(&t->rng, atoll_hash64(c->seed, 0x7261696e, 0, 0));
  }
  if (open_metrics(t, start, err)) goto done;

  atoll_adamw_config opt = c->opt;
  opt.total_steps = c->steps;
  int S = c->seq ? c->seq : c->model.context;
  double tokens_per_step = (double)c->batch * S * c->accum;
  double flops_per_token = atoll_flops_per_token(&c->model, S);
  int tty = isatty(STDERR_FILENO);
  fprintf(stderr, "atoll train: %zu parameters, %d layers, %d heads, dim %d, seq %d, batch %d x %d accum = %.0f tokens/step, %d steps\n",
          t->lay->nparams, c->model.layers, c->model.heads, c->model.dim, S, c->batch, c->accum,
          tokens_per_step, c->steps);

  float *params = atoll_model_params(t->model), *grads = atoll_model_grads(t->model);
  /* Fault injection for tests: ATOLL_FAULT_NAN_STEP=N makes step N's loss NaN. */
  const char *fault = getenv("ATOLL_FAULT_NAN_STEP");
  int fault_nan_step = fault ? atoi(fault) : 0;
  int step = start;
  double run_start = now_seconds();
  while (step < c->steps) {
    double t0 = now_seconds();
    atoll_model_zero_grads(t->model);
    double loss_sum = 0.0;
    for (int a = 0; a < c->accum; a++) {
      load_batch(t, step, a);
      loss_sum += atoll_model_forward(t->model, t->inputs, t->targets, c->batch, S);
      atoll_model_backward(t->model, 1.0f / (float)c->accum);
    }
    float loss = (float)(loss_sum / c->accum);
    if (fault_nan_step == step + 1) loss = NAN;
    double norm = sqrt(atoll_sumsq(grads, 0, t->lay->nparams));
    if (!isfinite(loss) || !isfinite(norm)) {
      char latest[1200] = "none";
      atoll_err ignored;
      atoll_ckpt_find_latest(t->ckpt_root, latest, sizeof latest, &ignored);
      if (tty) fputc('\n', stderr);
      atoll_fail(err, "step %d: %s is %s; stopping (last good checkpoint: %s)", step + 1,
                 isfinite(loss) ? "gradient norm" : "loss", isnan(isfinite(loss) ? norm : loss) ? "NaN" : "infinite",
                 latest);
      goto done;
    }
    float scale = 1.0f;
    if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = (float)(opt.grad_clip / (norm + 1e-6));
    float lr = atoll_lr_at(&opt, step);
    atoll_adamw_update(t->lay, &opt, params, grads, t->m, t->v, 0, t->lay->nparams, step + 1, lr, scale);
    double dt = now_seconds() - t0;
    t->step_seconds[t->nsteps_timed++] = dt;
    step++;
    t->last_loss = loss;

    int do_eval = (c->eval_every > 0 && step % c->eval_every == 0) || step == c->steps;
    float val = 0;
    if (do_eval) {
      val = evaluate(t);
      t->last_val = val;
      t->have_val = 1;
    }
    double tps = tokens_per_step / dt;
    fprintf(t->metrics, "{\"step\": %d, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6f, \"tokens_per_s\": %.1f",
            step, loss, lr, norm, tps);
    if (do_eval) fprintf(t->metrics, ", \"val_loss\": %.6f", val);
    fprintf(t->metrics, "}\n");
    fflush(t->metrics);

    double elapsed = now_seconds() - run_start;
    double eta = elapsed / (step - start) * (c->steps - step);
    char etabuf[32];
    format_eta(etabuf, sizeof etabuf, eta);
    if (tty || step % c->log_every == 0 || step == c->steps || do_eval) {
      fprintf(stderr, "%sstep %d/%d | loss %.4f | %.0f tok/s | %.2f GFLOP/s | lr %.2e | ETA %s",
              tty ? "\r\033[K" : "", step, c->steps, loss, tps, tps * flops_per_token * 1e-9, lr, etabuf);
      if (do_eval) fprintf(stderr, " | val_loss %.4f", val);
      if (!tty || do_eval) fputc('\n', stderr);
    }

    int signalled = stop && *stop;
    int stopping = signalled || (c->stop_after > 0 && step >= c->stop_after && step < c->steps);
    if ((c->save_every > 0 && step % c->save_every == 0) || step == c->steps || stopping) {
      if (save_checkpoint(t, step, err)) goto done;
    }
    if (stopping) {
      if (tty) fputc('\n', stderr);
      fprintf(stderr, "stopped at step %d; checkpoint saved; continue with: atoll train --resume %s\n", step, c->out);
      rc = signalled ? 1 : 0;
      break;
    }
  }
  if (tty) fputc('\n', stderr);
  if (write_summary(t, step, err)) {
    rc = -1;
    goto done;
  }
  if (rc != 1) rc = 0;
  fprintf(stderr, "peak memory (RSS): %.1f MiB\n", (double)peak_rss_bytes() / (1 << 20));
done:
  trainer_free(t);
  return rc;
}

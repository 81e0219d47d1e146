/* The training loop: batches from the deterministic loader, forward/backward over
 * micro-batches, data-parallel gradient averaging (src/parallel/dp.c), global-norm
 * clipping, AdamW on this rank's shard, evaluation, metrics, checkpoints.
 *
 * Global batch. A step consumes batch x accum x N sequences. Micro-batch a of rank r
 * is global micro-batch m = a N + r, and its row b is window (seed, step, m batch + b):
 * the same windows as one process with accum x N micro-batches, split disjointly
 * over the ranks.
 *
 * Exact resume: everything a step depends on is either in the checkpoint (weights,
 * AdamW moments, step, RNG state, config) or a pure function of it (the batch of step
 * s is drawn from (seed, s)), so a resumed run repeats the uninterrupted run's
 * arithmetic bit for bit (at the same thread count and world size). */
#include "train/train.h"

#include "ckpt/checkpoint.h"
#include "core/fs.h"
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* All ranks agree whether a phase worked, so that none is left waiting: 0 if every
 * rank succeeded. Otherwise every rank returns an error: ATOLL_TRAIN_ERROR where this
 * rank has a message to report (rank 0 when all failed alike, else each rank that
 * failed), ATOLL_TRAIN_QUIET where another rank reports it. */
static int agree(trainer *t, int rc, atoll_err *err) {
  if (t->world == 1) return rc ? ATOLL_TRAIN_ERROR : 0;
  double failed = atoll_allreduce_sum_double(t->comm, rc ? 1.0 : 0.0);
  if (failed == 0) return 0;
  if (failed == t->world) return t->rank == 0 ? ATOLL_TRAIN_ERROR : ATOLL_TRAIN_QUIET;
  if (rc) {
    atoll_err own = *err;
    atoll_fail(err, "rank %d: %s", t->rank, own.msg);
    return ATOLL_TRAIN_ERROR;
  }
  return ATOLL_TRAIN_QUIET;
}

/* An error every rank met alike (they all see the same loss, hashes, save result):
 * rank 0 reports it. */
static int failed_alike(const trainer *t) { return t->rank == 0 ? ATOLL_TRAIN_ERROR : ATOLL_TRAIN_QUIET; }

void trainer_load_micro(trainer *t, const atoll_dataset *ds, int step, int m, int eval_count) {
  const atoll_config *c = t->cfg;
  int S = t->seq;
  for (int b = 0; b < c->batch; b++) {
    int32_t *w = t->tokens + (size_t)b * (S + 1);
    uint64_t index = (uint64_t)m * c->batch + b;
    if (eval_count)
      atoll_dataset_eval_window(ds, index, (uint64_t)eval_count, S, w);
    else
      atoll_dataset_window(ds, c->seed, (uint64_t)step, index, S, w);
    memcpy(t->inputs + (size_t)b * S, w, sizeof(int32_t) * S);
    memcpy(t->targets + (size_t)b * S, w + 1, sizeof(int32_t) * S);
  }
}

/* Sum of one value per rank, in rank order, divided by n (identical everywhere). */
static float global_mean(trainer *t, double local_sum, double n) {
  return (float)(atoll_allreduce_sum_double(t->comm, local_sum) / n);
}

/* Swaps the island's weights with DiLoCo's global weights. Under ZeRO-3 the units
 * still gathered hold the values from before the swap: release them. */
static void swap_global(trainer *t) {
  atoll_diloco_swap_global(t->diloco);
  atoll_dp_release_weights(t->dp);
}

/* Validation loss over eval_batches fixed batches, split over the data-parallel
 * replicas (batch e on replica e mod R), each through its pipeline. Every replica runs
 * the same number of forwards (sharded weights make each forward collective);
 * surplus ones are computed and dropped. Per-batch losses are summed in batch order,
 * so the result does not depend on the layout. */
static float evaluate(trainer *t) {
  const atoll_config *c = t->cfg;
  if (t->diloco) swap_global(t); /* DiLoCo: the global model is the model */
  int E = c->eval_batches, R = t->replicas, per_rank = (E + R - 1) / R;
  int count = E * c->batch;
  double *mine = calloc((size_t)per_rank, sizeof(double));
  for (int k = 0; k < per_rank; k++) {
    int e = k * R + t->replica;
    double loss = trainer_forward_eval(t, e < E ? e : E - 1, count);
    mine[k] = t->lay->last_stage && t->mesh.tp_rank == 0 ? loss : 0.0;
  }
  double *all = malloc(sizeof(double) * (size_t)per_rank * t->world);
  atoll_allgather_bytes(t->comm, mine, all, sizeof(double) * (size_t)per_rank);
  double sum = 0.0;
  for (int e = 0; e < E; e++) {
    int q = e % R; /* replica q = island * dp + dp rank; its loss is on the last stage, tp rank 0 */
    int w = atoll_mesh_world_rank(&t->mesh, q / t->mesh.dp, t->mesh.pp - 1, q % t->mesh.dp, 0);
    sum += all[(size_t)w * per_rank + e / R];
  }
  free(mine);
  free(all);
  if (t->diloco) swap_global(t);
  return (float)(sum / E);
}

static void trainer_free(trainer *t) {
  trainer_pipeline_free(t);
  free(t->pipe_times);
  atoll_layout_free(&t->whole);
  atoll_diloco_destroy(t->diloco);
  atoll_dp_destroy(t->dp);
  atoll_mesh_free(&t->mesh);
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

static int setup_parallel(trainer *t, atoll_err *err) {
  const atoll_config *c = t->cfg;
  if (c->islands > 1 && t->world == 1)
    return atoll_fail(err, "--islands %d: islands need several ranks; launch with mpirun -np N (or srun)", c->islands);
  if ((c->tp > 1 || c->pp > 1) && t->world == 1)
    return atoll_fail(err, "--tp %d --pp %d: model parallelism needs several ranks; launch with mpirun -np N (or srun)",
                      c->tp, c->pp);
  if (atoll_mesh_create(&t->mesh, t->comm, c->islands, c->tp, c->pp, err)) return -1;
  if (c->shard > 0 && t->mesh.dp == 1)
    return atoll_fail(err, "--shard %d: sharding needs several data-parallel ranks per island (ranks / (tp x pp) > 1); launch with more ranks",
                      c->shard);
  t->replicas = t->mesh.islands * t->mesh.dp;
  t->replica = t->mesh.island * t->mesh.dp + t->mesh.dp_rank;
  int base = c->microbatches > 0 ? c->microbatches : c->accum;
  if (c->global_batch > 0) {
    long per_step = (long)c->batch * t->replicas;
    if (c->global_batch % per_step != 0)
      return atoll_fail(err, "--global-batch %d: not divisible by batch %d x %d data-parallel replicas", c->global_batch,
                        c->batch, t->replicas);
    t->accum = (int)(c->global_batch / per_step);
  } else {
    t->accum = base;
  }
  int P = t->mesh.pp, M = t->accum;
  t->chunks = c->virtual_stages;
  if (t->chunks > 1 && M % P != 0)
    return atoll_fail(err, "--virtual-stages %d: the interleaved schedule needs micro-batches (%d) in multiples of --pp %d",
                      t->chunks, M, P);
  if (P == 1)
    t->nslots = 1;
  else if (strcmp(c->schedule, "gpipe") == 0 || t->chunks > 1)
    t->nslots = M;
  else
    t->nslots = P - t->mesh.pp_rank < M ? P - t->mesh.pp_rank : M;
  return 0;
}

/* --island-data files: island k trains on source files k, k+K, k+2K, ... of the
 * prepared corpus (their token ranges in the train split, from DIR/manifest.json). */
static int restrict_island_data(trainer *t, atoll_err *err) {
  const atoll_config *c = t->cfg;
  char path[1100];
  snprintf(path, sizeof path, "%s/manifest.json", c->data);
  char *text = NULL;
  size_t len = 0;
  if (atoll_read_file(path, 64u << 20, &text, &len, err)) {
    atoll_err why = *err;
    return atoll_fail(err, "--island-data files needs the manifest of atoll prepare: %s", why.msg);
  }
  cJSON *man = cJSON_ParseWithLength(text, len);
  free(text);
  const cJSON *sources = cJSON_GetObjectItemCaseSensitive(man, "sources");
  int n = cJSON_GetArraySize(sources), K = t->mesh.islands, rc = 0;
  if (!cJSON_IsArray(sources) || n < K) {
    cJSON_Delete(man);
    return atoll_fail(err, "%s: --island-data files needs at least %d source files (one per island), found %d", path, K,
                      cJSON_IsArray(sources) ? n : 0);
  }
  uint64_t *b = calloc((size_t)n, sizeof(uint64_t)), *e = calloc((size_t)n, sizeof(uint64_t));
  uint64_t at = 0;
  int m = 0;
  for (int i = 0; i < n; i++) {
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(sources, i), "train_bytes");
    if (!cJSON_IsNumber(tb) || tb->valuedouble < 0) {
      rc = atoll_fail(err, "%s: sources[%d] has no train_bytes", path, i);
      break;
    }
    uint64_t len_i = (uint64_t)tb->valuedouble; /* byte tokenizer: one token per byte */
    if (i % K == t->mesh.island) {
      b[m] = at;
      e[m++] = at + len_i;
    }
    at += len_i;
  }
  char what[64];
  snprintf(what, sizeof what, "--island-data files (island %d)", t->mesh.island);
  if (rc == 0) rc = atoll_dataset_restrict(&t->train, b, e, m, t->seq, what, err);
  free(b);
  free(e);
  cJSON_Delete(man);
  return rc;
}

static int setup_diloco(trainer *t, atoll_err *err) {
  const atoll_config *c = t->cfg;
  atoll_diloco_config dc = {
      .sync_every = c->sync_every, .outer_lr = c->outer_lr, .outer_momentum = c->outer_momentum,
      .nesterov = strcmp(c->outer_optimizer, "nesterov") == 0, .fragments = c->fragments,
      .overlap = c->overlap, .merge_alpha = c->overlap > 0 ? c->merge_alpha : 0.0f,
      .dtype = (atoll_qtype)atoll_qtype_parse(c->outer_dtype), .wan_gbps = c->wan_gbps,
      .wan_latency_ms = c->wan_latency_ms, .throttle = c->throttle,
      .stage3 = t->mesh.dp > 1 && c->shard == 3, .whole = &t->whole};
  return atoll_diloco_create(&t->diloco, &dc, &t->mesh, t->lay, atoll_model_params(t->model), err);
}

static int trainer_init(trainer *t, const atoll_config *c, atoll_comm *comm, const char *resume_dir,
                        int *start, atoll_err *err) {
  memset(t, 0, sizeof *t);
  t->cfg = c;
  t->comm = comm;
  t->rank = atoll_comm_rank(comm);
  t->world = atoll_comm_size(comm);
  t->seq = c->seq ? c->seq : c->model.context;
  atoll_comm_set_timeout(comm, c->comm_timeout);
  if (atoll_config_check(c, err) || setup_parallel(t, err)) return -1;
  if (atoll_dataset_open(&t->train, c->data, "train", t->seq, err)) return -1;
  if (atoll_dataset_open(&t->val, c->data, "val", t->seq, err)) return -1;
  if ((int64_t)t->train.vocab > c->model.vocab)
    return atoll_fail(err, "%s: data vocabulary %u is larger than the model's vocab=%d", c->data,
                      t->train.vocab, c->model.vocab);
  /* this rank's part: stage s of P holds chunks s, s + P, ... of the V P even chunks
   * of the layers (V = 1: blocks [s L / P, (s+1) L / P)) */
  atoll_part part = {t->mesh.tp, t->mesh.tp_rank, t->mesh.pp_rank, t->mesh.pp, t->chunks, c->sequence_parallel};
  if (atoll_layout_init(&t->whole, &c->model, err)) return -1;
  if (atoll_model_create_part(&t->model, &c->model, &part, c->batch, t->seq, t->nslots, err)) return -1;
  t->lay = atoll_model_layout(t->model);
  size_t bucket = (size_t)((double)c->bucket_mb * (1 << 20) / sizeof(float));
  int stage = t->mesh.dp > 1 ? c->shard : 0;
  if (atoll_dp_create(&t->dp, t->model, t->mesh.dp_comm, stage, bucket, err)) return -1;
  if (t->mesh.tie_comm) {
    const atoll_tensor *wte = &t->lay->tensors[t->lay->t_wte];
    atoll_dp_set_tie(t->dp, t->mesh.tie_comm, wte->offset, wte->offset + wte->numel);
  }
  if (trainer_pipeline_init(t, err)) return -1;
  atoll_dp_shard(t->dp, &t->shard_begin, &t->shard_end);
  size_t n = t->shard_end - t->shard_begin;
  t->m = calloc(n ? n : 1, sizeof(float));
  t->v = calloc(n ? n : 1, sizeof(float));
  size_t rows = (size_t)c->batch;
  t->tokens = malloc(sizeof(int32_t) * rows * (t->seq + 1));
  t->inputs = malloc(sizeof(int32_t) * rows * t->seq);
  t->targets = malloc(sizeof(int32_t) * rows * t->seq);
  t->step_seconds = calloc((size_t)c->steps, sizeof(double));
  t->pipe_times = calloc(2 * (size_t)c->steps, sizeof(double));
  if (!t->m || !t->v || !t->tokens || !t->inputs || !t->targets || !t->step_seconds || !t->pipe_times)
    return atoll_fail(err, "out of memory for optimizer state (%zu parameters)", n);
  snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/checkpoints", c->out);

  if (c->islands > 1 && setup_diloco(t, err)) return -1;
  if (c->islands > 1 && strcmp(c->island_data, "files") == 0 && restrict_island_data(t, err)) return -1;
  *start = 0;
  if (resume_dir) {
    if (trainer_load(t, resume_dir, start, err)) return -1;
    if (*start > c->steps)
      return atoll_fail(err, "--steps %d: the checkpoint %s is already at step %d", c->steps, resume_dir, *start);
  } else {
    char latest[1200];
    atoll_err ignored;
    if (t->rank == 0 && atoll_ckpt_find_latest(t->ckpt_root, latest, sizeof latest, &ignored) == 0)
      return atoll_fail(err, "--out %s: already holds a run with checkpoint %s; pass --resume %s to continue it or choose another --out",
                        c->out, latest, c->out);
    if (atoll_model_init_weights(t->model, c->seed)) return atoll_fail(err, "out of memory initialising the weights");
    atoll_rng_seed(&t->rng, atoll_hash64(c->seed, 0x7261696e, 0, 0));
    if (t->diloco) atoll_diloco_reset_global(t->diloco);
  }
  atoll_dp_release_weights(t->dp); /* stage 3 keeps its shard only */
  if (t->rank == 0 && atoll_mkdir_p(c->out, err)) return -1;
  return trainer_open_metrics(t, *start, err);
}

/* Sum of squares of the gradient over the whole model, identical on every rank of the
 * island: each rank adds the tensors its part owns (atoll_layout_owns) inside its
 * data-parallel shard; the partial sums are added in island-rank order (a control
 * message on the island's communicator, not counted in any axis's bytes). Data
 * parallel alone keeps dp.c's arithmetic. */
static double grad_sumsq(trainer *t) {
  if (t->mesh.tp == 1 && t->mesh.pp == 1) return atoll_dp_grad_sumsq(t->dp); /* data parallel alone */
  size_t *counts = calloc((size_t)t->mesh.dp, sizeof(size_t));
  atoll_dp_chunks(t->dp, 0, t->lay->nparams, counts);
  size_t lo = 0;
  for (int r = 0; r < t->mesh.dp_rank; r++) lo += counts[r];
  size_t hi = lo + counts[t->mesh.dp_rank];
  free(counts);
  const float *g = atoll_model_grads(t->model);
  double mine = 0.0;
  for (int i = 0; i < t->lay->ntensors; i++) {
    const atoll_tensor *ten = &t->lay->tensors[i];
    size_t b, e;
    if (atoll_tensor_clip(ten, lo, hi, &b, &e) && atoll_layout_owns(t->lay, ten)) mine += atoll_sumsq(g, b, e);
  }
  int n = t->mesh.island_size;
  double *all = malloc(sizeof(double) * (size_t)n);
  atoll_allgather_bytes(t->mesh.island_comm, &mine, all, sizeof mine);
  double s = 0.0;
  for (int r = 0; r < n; r++) s += all[r];
  free(all);
  return s;
}

/* Sequence parallel: each tensor-parallel rank holds its tokens' share of the
 * LayerNorms' gradients; sum them over the group, inside this rank's data-parallel
 * shard (the shard boundaries are the same on every rank of the group: the same
 * part sizes). */
static void sum_partial_grads(trainer *t) {
  if (!t->cfg->sequence_parallel || t->mesh.tp == 1) return;
  size_t lo = t->shard_begin, hi = t->shard_end;
  float *g = atoll_model_grads(t->model);
  for (int i = 0; i < t->lay->ntensors; i++) {
    const atoll_tensor *ten = &t->lay->tensors[i];
    size_t b, e;
    if (atoll_model_grad_is_partial(t->model, ten) && atoll_tensor_clip(ten, lo, hi, &b, &e))
      atoll_allreduce(t->mesh.tp_comm, g + b, e - b);
  }
}

static atoll_comm *axis_comm(trainer *t, int axis) {
  atoll_comm *c[4] = {t->mesh.dp_comm, t->mesh.tp_comm, t->mesh.pp_comm, t->mesh.tie_comm};
  return c[axis];
}

/* One optimizer step; returns the mean loss over the global batch and the gradient
 * norm before clipping. */
static float train_step(trainer *t, int step, const atoll_adamw_config *opt, double *norm_out) {
  const atoll_config *c = t->cfg;
  atoll_comm_stats before[4];
  for (int a = 0; a < 4; a++) before[a] = axis_comm(t, a) ? atoll_comm_get_stats(axis_comm(t, a)) : (atoll_comm_stats){0};
  atoll_dp_begin_step(t->dp);
  float scale = 1.0f / (float)(t->accum * t->mesh.dp); /* mean over the island's replicas */
  double loss_sum = trainer_forward_backward(t, step, scale);
  if (!(t->lay->last_stage && t->mesh.tp_rank == 0)) loss_sum = 0.0; /* counted once */
  atoll_dp_finish_grads(t->dp);
  sum_partial_grads(t);
  float loss = global_mean(t, loss_sum, (double)t->accum * t->replicas);
  double norm = sqrt(grad_sumsq(t));
  *norm_out = norm;
  if (isfinite(loss) && isfinite(norm)) {
    float clip = 1.0f;
    if (opt->grad_clip > 0 && norm > opt->grad_clip) clip = (float)(opt->grad_clip / (norm + 1e-6));
    float *p = atoll_model_params(t->model), *g = atoll_model_grads(t->model);
    float lr = atoll_lr_at(opt, step);
    if (strcmp(c->optimizer, "sgd") == 0)
      atoll_sgd_update(t->lay, opt->weight_decay, p, g, t->shard_begin, t->shard_end, lr, clip);
    else
      atoll_adamw_update(t->lay, opt, p, g, t->m, t->v, t->shard_begin, t->shard_end, step + 1, lr, clip);
    atoll_dp_after_update(t->dp);
  }
  for (int a = 0; a < 4; a++) {
    if (!axis_comm(t, a)) continue;
    atoll_comm_stats after = atoll_comm_get_stats(axis_comm(t, a));
    for (int op = 0; op < ATOLL_OP_COUNT; op++) {
      uint64_t db = after.bytes_sent[op] - before[a].bytes_sent[op], dc = after.calls[op] - before[a].calls[op];
      t->axis_comm[a].bytes_sent[op] += db;
      t->axis_comm[a].calls[op] += dc;
      t->step_comm.bytes_sent[op] += db;
      t->step_comm.calls[op] += dc;
    }
    double dw = after.wait_seconds - before[a].wait_seconds;
    t->axis_comm[a].wait_seconds += dw;
    t->step_comm.wait_seconds += dw;
  }
  return loss;
}

int atoll_train_run(const atoll_config *cfg, atoll_comm *comm, const char *resume_dir,
                    const volatile sig_atomic_t *stop, atoll_err *err) {
  trainer tr, *t = &tr;
  int rc = -1, start = 0;
  rc = agree(t, trainer_init(t, cfg, comm, resume_dir, &start, err), err);
  if (rc) goto done;
  rc = -1;
  const atoll_config *c = cfg;
  if (resume_dir && t->rank == 0) fprintf(stderr, "resuming from %s at step %d\n", resume_dir, start);

  atoll_adamw_config opt = c->opt;
  opt.total_steps = c->steps;
  /* fault injection for tests: ATOLL_FAULT_NAN_STEP=N makes step N's loss NaN;
   * ATOLL_FAULT_STALL_RANK=R makes rank R stop taking part at step 2 */
  const char *fault = getenv("ATOLL_FAULT_NAN_STEP");
  int fault_nan_step = fault ? atoi(fault) : 0;
  const char *stall = getenv("ATOLL_FAULT_STALL_RANK");
  int stall_rank = stall ? atoi(stall) : -1;
  /* ATOLL_FAULT_DESYNC_ISLAND=K: island K's copy of the global weights drifts at step 2 */
  const char *desync = getenv("ATOLL_FAULT_DESYNC_ISLAND");
  int desync_island = desync && t->diloco ? atoi(desync) : -1;
  if (t->rank == 0) {
    double tokens = (double)c->batch * t->seq * t->accum * t->replicas;
    fprintf(stderr, "atoll train: %zu parameters, %d layers, %d heads, dim %d, seq %d, %.0f tokens/step (batch %d x %s %d x %d replica%s), %d steps",
            t->whole.nparams, c->model.layers, c->model.heads, c->model.dim, t->seq, tokens, c->batch,
            t->mesh.pp > 1 ? "micro-batches" : "accum", t->accum, t->replicas, t->replicas > 1 ? "s" : "", c->steps);
    if (t->mesh.dp > 1)
      fprintf(stderr, ", %s%s", c->parallel, c->shard ? (const char *[]){"", " + ZeRO-1", " + ZeRO-2", " + ZeRO-3"}[c->shard] : "");
    if (t->mesh.tp > 1) fprintf(stderr, ", tensor parallel %d", t->mesh.tp);
    if (t->mesh.pp > 1)
      fprintf(stderr, ", pipeline %d stages (%s%s)", t->mesh.pp, t->chunks > 1 ? "interleaved " : "", c->schedule);
    if (c->islands > 1)
      fprintf(stderr, ", DiLoCo: %d islands of %d, sync every %d (%s, outer lr %g, momentum %g, %d fragment%s, overlap %d, %s)",
              c->islands, t->mesh.island_size, c->sync_every, c->outer_optimizer, c->outer_lr,
              c->outer_momentum, c->fragments, c->fragments > 1 ? "s" : "", c->overlap, c->outer_dtype);
    fputc('\n', stderr);
  }

  int step = start;
  uint64_t hash = 0;
  double run_start = atoll_seconds();
  trainer_rss_reset(t); /* loading and setup are not the steps' memory */
  while (step < c->steps) {
    if (step + 1 == 2 && t->rank == stall_rank)
      for (;;) pause(); /* a stalled peer: the others' watchdog must end the job */
    if (step + 1 == 2 && t->mesh.island == desync_island) atoll_diloco_global(t->diloco)[0] += 1e-3f;
    double t0 = atoll_seconds();
    double norm;
    float loss = train_step(t, step, &opt, &norm);
    if (fault_nan_step == step + 1) loss = NAN;
    if (!isfinite(loss) || !isfinite(norm)) {
      char latest[1200] = "none";
      atoll_err ignored;
      atoll_ckpt_find_latest(t->ckpt_root, latest, sizeof latest, &ignored);
      if (isatty(STDERR_FILENO)) fputc('\n', stderr);
      atoll_fail(err, "step %d: %s is %s; stopping (last good checkpoint: %s)", step + 1,
                 isfinite(loss) ? "gradient norm" : "loss",
                 isnan(isfinite(loss) ? norm : loss) ? "NaN" : "infinite", latest);
      rc = failed_alike(t);
      goto done;
    }
    double dt = atoll_seconds() - t0;
    t->compute_seconds += dt;
    if (t->diloco) atoll_diloco_add_compute(t->diloco, dt);
    if (t->diloco && atoll_diloco_after_step(t->diloco, step + 1, step + 1 == c->steps, err)) {
      rc = failed_alike(t);
      goto done;
    }
    dt = atoll_seconds() - t0;
    t->pipe_times[2 * t->nsteps_timed] = t->pipe_wall;
    t->pipe_times[2 * t->nsteps_timed + 1] = t->pipe_compute;
    t->step_seconds[t->nsteps_timed++] = dt;
    step++;
    t->last_loss = loss;
    float lr = atoll_lr_at(&opt, step - 1);

    int evaluated = (c->eval_every > 0 && step % c->eval_every == 0) || step == c->steps;
    float val = 0;
    if (evaluated) {
      val = evaluate(t);
      t->last_val = val;
      t->have_val = 1;
    }
    size_t hwm = trainer_rss_hwm();
    if (hwm > t->train_peak_rss) t->train_peak_rss = hwm;
    trainer_log_step(t, step, loss, lr, norm, dt, evaluated, val);
    trainer_progress(t, step, start, run_start, loss, lr, dt, evaluated, val);

    /* a signal may reach the ranks at different steps: they agree to stop together */
    int signalled = stop && *stop;
    if (t->world > 1) signalled = atoll_allreduce_sum_double(comm, signalled) > 0;
    int stopping = signalled || (c->stop_after > 0 && step >= c->stop_after && step < c->steps);
    if ((c->save_every > 0 && step % c->save_every == 0) || step == c->steps || stopping) {
      if (trainer_save(t, step, err)) {
        rc = failed_alike(t);
        goto done;
      }
      trainer_rss_reset(t);
    }
    if (stopping) {
      if (t->rank == 0)
        fprintf(stderr, "stopped at step %d; checkpoint saved; continue with: atoll train --resume %s\n", step, c->out);
      rc = signalled ? 1 : 0;
      break;
    }
  }
  atoll_dp_gather_weights(t->dp);
  if (trainer_check_weights(t, &hash, err)) {
    rc = failed_alike(t);
    goto done;
  }
  atoll_dp_release_weights(t->dp);
  if (trainer_write_summary(t, step, hash, err)) {
    rc = failed_alike(t);
    goto done;
  }
  if (rc != 1) rc = 0;
done:
  trainer_free(t);
  return rc;
}

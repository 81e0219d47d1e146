/* The training loop. One step, top to bottom (docs/architecture.md):
 *
 *   strategies.begin_step      zero the gradients (data parallel), test hooks
 *   pipeline run               forward/backward of the step's micro-batches; the
 *                              micro-batches come from load_micro below
 *   strategies.finish_grads    tied-embedding sum (pipeline), averaging or
 *                              reduce-scatter (data parallel), sequence-parallel sum
 *   loss and gradient norm     one path for every layout (atoll_dp_grad_sumsq)
 *   optimizer                  AdamW (or SGD) on this rank's shard, clipped
 *   strategies.after_update    all-gather or release the weights (ZeRO)
 *   strategies.after_step      outer syncs (DiLoCo)
 *   evaluation, report, checkpoint
 *
 * Global batch. A step consumes batch x micro_batches x replicas sequences.
 * Micro-batch i of replica q is global micro-batch i replicas + q, and its row b is
 * window (seed, step, that index x batch + b): the same windows as one process with
 * micro_batches x replicas micro-batches, split disjointly over the replicas. (An open
 * run's island draws each phase from its data unit's stream: island_units.h.)
 *
 * Exact resume: everything a step depends on is either in the checkpoint (weights,
 * AdamW moments, step, RNG state, config) or a pure function of it (the batch of step
 * s is drawn from (seed, s)), so a resumed run repeats the uninterrupted run's
 * arithmetic bit for bit (at the same thread count and world size). */

#include "ckpt/checkpoint.h"
#include "core/clock.h"
#include "core/fs.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "model/model.h"
#include "ops/cpu_features.h"
#include "ops/gemm_cpu.h"
#include "optim/optim.h"
#include "parallel/island_units.h"
#include "parallel/islands_net.h"
#include "train/agree.h"
#include "train/eval_sets.h"
#include "train/report.h"
#include "train/run.h"
#include "train/init_from.h"
#include "train/island_end.h"
#include "train/train_out.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The loop's own state; the strategies keep theirs (atoll_run holds them). */
typedef struct {
  atoll_run run;
  atoll_run_out out;       /* OUT's lock, held for the run */
  atoll_train_state state; /* optimizer moments, RNG, last loss: what checkpoints add */
  atoll_report report;
  atoll_adamw_config opt;
  atoll_dataset train, val;
  atoll_eval_set eval_sets[ATOLL_MAX_EVAL_SETS]; /* --eval-data */
  atoll_dataset evals[ATOLL_MAX_EVAL_SETS];
  int n_evals;
  float *dm, *dv;           /* --device: the AdamW moments on the device (state.m, v: their host copies) */
  int32_t *tokens;          /* [seq + 1] window scratch */
  double *eval_mine, *eval_all; /* evaluation losses: this rank's, every rank's */
  int eval_per_rank;
  double compute_end;       /* when the last inner step's compute ended (0: none yet) */
  atoll_phase_rule phase;   /* --phase-tokens, --phase-seconds (phase.h; its state is in state.phase) */
  int leave_at;             /* an island (--join) told to stop: the step it leaves after (0: none) */
} loop;

/* Where the pipeline's micro-batches come from: a step's training windows, or the
 * evaluation set (eval_count windows). */
typedef struct {
  loop *l;
  const atoll_dataset *ds;
  int step, eval_count;
} micro_source;

static void load_micro(void *ctx, int micro, int32_t *inputs, int32_t *targets) {
  const micro_source *src = ctx;
  const atoll_run *r = &src->l->run;
  int seq = r->seq, batch = r->cfg->data.batch;
  uint64_t global = src->eval_count ? (uint64_t)micro : (uint64_t)micro * r->data_replicas + r->data_replica;
  for (int b = 0; b < batch; b++) {
    int32_t *w = src->l->tokens;
    uint64_t index = global * batch + b;
    if (src->eval_count)
      atoll_dataset_eval_window(src->ds, index, (uint64_t)src->eval_count, seq, w);
    else
      atoll_dataset_window(src->ds, r->cfg->run.seed, /* (an open run: the step's unit's stream) */
                           r->units ? atoll_island_units_window(r->units, src->step) : (uint64_t)src->step, index, seq, w);
    memcpy(inputs + (size_t)b * seq, w, sizeof(int32_t) * seq);
    memcpy(targets + (size_t)b * seq, w + 1, sizeof(int32_t) * seq);
  }
}

static void before_backward(void *ctx, int last_micro) {
  atoll_strategies_before_backward(&((micro_source *)ctx)->l->run.strategies, last_micro);
}

/* An error every rank met alike (they all see the same loss, hashes, save result):
 * rank 0 reports it. */
static int failed_alike(const loop *l) { return l->run.rank == 0 ? ATOLL_TRAIN_ERROR : ATOLL_TRAIN_QUIET; }

/* Validation loss over eval_batches fixed batches, split over the data-parallel
 * replicas (batch e on replica e mod replicas), each through its pipeline. Every
 * replica runs the same number of forwards (sharded weights make each forward
 * collective); surplus ones are computed and dropped. Per-batch losses are summed in
 * batch order, so the result does not depend on the layout. */
static float evaluate(loop *l, const atoll_dataset *ds) {
  atoll_run *r = &l->run;
  int batches = r->cfg->run.eval_batches, replicas = r->replicas, per_rank = l->eval_per_rank;
  micro_source ms = {l, ds, 0, batches * r->cfg->data.batch};
  atoll_micro_source src = {&ms, load_micro, before_backward};
  atoll_strategies_swap_eval_weights(&r->strategies); /* DiLoCo: the global model is the model */
  for (int k = 0; k < per_rank; k++) {
    int e = k * replicas + r->replica;
    double loss = atoll_pipeline_forward_eval(r->pipe, &src, e < batches ? e : batches - 1);
    l->eval_mine[k] = r->lay->last_stage && r->mesh.tp_rank == 0 ? loss : 0.0;
  }
  atoll_allgather_bytes(r->world, l->eval_mine, l->eval_all, sizeof(double) * (size_t)per_rank);
  double sum = 0.0;
  for (int e = 0; e < batches; e++) {
    int q = e % replicas; /* replica q = island * dp + dp rank; its loss is on the last pp_stage, tp rank 0 */
    int w = atoll_mesh_world_rank(&r->mesh, q / r->mesh.dp, r->mesh.pp - 1, q % r->mesh.dp, 0);
    sum += l->eval_all[(size_t)w * per_rank + e / replicas];
  }
  atoll_strategies_swap_eval_weights(&r->strategies);
  return (float)(sum / batches);
}

/* The optimizer on this rank's shard, with the gradient clipped to grad_clip by norm. */
static void update(loop *l, int step, double norm) {
  atoll_run *r = &l->run;
  atoll_train_state *st = &l->state;
  const atoll_adamw_config *opt = &l->opt;
  float clip = 1.0f;
  if (opt->grad_clip > 0 && norm > opt->grad_clip) clip = (float)(opt->grad_clip / (norm + 1e-6));
  float *p = atoll_model_params(r->model), *g = atoll_model_grads(r->model);
  float *m = l->dm ? l->dm : st->m, *v = l->dv ? l->dv : st->v;
  const atoll_ops *o = atoll_model_ops(r->model);
  float lr = atoll_lr_at(opt, step);
  if (strcmp(r->cfg->optim.name, "sgd") == 0)
    atoll_sgd_update(o, r->lay, opt->weight_decay, p, g, st->begin, st->end, lr, clip);
  else
    atoll_adamw_update(o, r->lay, opt, p, g, m, v, st->begin, st->end, st->adam_step0 + step + 1, lr, clip);
}

/* One optimizer step; returns the mean loss over the global batch and the gradient
 * norm before clipping. */
static float train_step(loop *l, int step, double *norm_out) {
  atoll_run *r = &l->run;
  atoll_report_comm_begin(&l->report, r);
  atoll_strategies_begin_step(&r->strategies, step);
  micro_source ms = {l, &l->train, step, 0};
  atoll_micro_source src = {&ms, load_micro, before_backward};
  float scale = 1.0f / (float)(r->micro_batches * r->mesh.dp); /* mean over the island's replicas */
  double loss_sum = atoll_pipeline_run(r->pipe, &src, scale);
  if (!(r->lay->last_stage && r->mesh.tp_rank == 0)) loss_sum = 0.0; /* counted once */
  atoll_strategies_finish_grads(&r->strategies);
  /* one value per rank, summed in rank order: identical everywhere */
  float loss = (float)(atoll_allreduce_sum_double(r->world, loss_sum) / ((double)r->micro_batches * r->replicas));
  double norm = sqrt(atoll_dp_grad_sumsq(r->dp));
  *norm_out = norm;
  if (isfinite(loss) && isfinite(norm)) {
    update(l, step, norm);
    atoll_strategies_after_update(&r->strategies);
  }
  atoll_report_comm_end(&l->report, r);
  return loss;
}

/* --device: the weights and AdamW moments to their host copies, which checkpoints,
 * --init-from and the weights' hash read and write, and back. Nothing on the CPU. */
static void state_to_host(loop *l) {
  atoll_run *r = &l->run;
  if (!r->host_params) return;
  const atoll_ops *o = atoll_model_ops(r->model);
  size_t n = l->state.end - l->state.begin;
  o->to_host(r->host_params, atoll_model_params(r->model), sizeof(float) * r->lay->nparams);
  o->to_host(l->state.m, l->dm, sizeof(float) * n);
  o->to_host(l->state.v, l->dv, sizeof(float) * n);
}

static void state_to_device(loop *l) {
  atoll_run *r = &l->run;
  if (!r->host_params) return;
  const atoll_ops *o = atoll_model_ops(r->model);
  size_t n = l->state.end - l->state.begin;
  o->to_device(atoll_model_params(r->model), r->host_params, sizeof(float) * r->lay->nparams);
  o->to_device(l->dm, l->state.m, sizeof(float) * n);
  o->to_device(l->dv, l->state.v, sizeof(float) * n);
}

static void loop_free(loop *l) {
  if (l->dm) atoll_model_ops(l->run.model)->free(l->dm);
  if (l->dv) atoll_model_ops(l->run.model)->free(l->dv);
  atoll_report_close(&l->report);
  atoll_run_out_close(&l->out);
  atoll_run_free(&l->run);
  free(l->state.m), free(l->state.v);
  atoll_dataset_close(&l->train), atoll_dataset_close(&l->val);
  for (int i = 0; i < l->n_evals; i++) atoll_dataset_close(&l->evals[i]);
  free(l->tokens), free(l->eval_mine), free(l->eval_all);
}

/* The loop's buffers: optimizer moments of this rank's shard, window scratch,
 * evaluation losses. */
static int alloc_buffers(loop *l, atoll_err *err) {
  atoll_run *r = &l->run;
  atoll_dp_shard(r->dp, &l->state.begin, &l->state.end);
  size_t n = l->state.end - l->state.begin;
  l->state.m = calloc(n ? n : 1, sizeof(float));
  l->state.v = calloc(n ? n : 1, sizeof(float));
  l->tokens = malloc(sizeof(int32_t) * (size_t)(r->seq + 1));
  l->eval_per_rank = (r->cfg->run.eval_batches + r->replicas - 1) / r->replicas;
  l->eval_mine = calloc((size_t)l->eval_per_rank, sizeof(double));
  l->eval_all = calloc((size_t)l->eval_per_rank * r->world_size, sizeof(double));
  if (!l->state.m || !l->state.v || !l->tokens || !l->eval_mine || !l->eval_all)
    return atoll_fail(err, "out of memory for optimizer state (%zu parameters)", n);
  const atoll_ops *o = atoll_model_ops(r->model);
  if (o->device && (!(l->dm = o->alloc(sizeof(float) * (n ? n : 1))) || !(l->dv = o->alloc(sizeof(float) * (n ? n : 1)))))
    return atoll_fail(err, "out of %s memory for optimizer state (%zu parameters)", o->name, n);
  return 0;
}

/* Weights, moments and RNG from a checkpoint, or fresh ones for a new run directory. */
static int start_state(loop *l, const char *resume_dir, int *start, atoll_err *err) {
  atoll_run *r = &l->run;
  const atoll_config *c = r->cfg;
  *start = 0;
  if (resume_dir) {
    /* train_out.c's check_resume refused a step past --steps or --stop-after before */
    return atoll_run_load(r, &l->state, resume_dir, start, err) ? -1 : 0;
  }
  if (atoll_model_init_weights(r->model, c->run.seed)) return atoll_fail(err, "out of memory initialising the weights");
  state_to_host(l); /* --init-from changes the host copies */
  atoll_rng_seed(&l->state.rng, atoll_hash64(c->run.seed, 0x7261696e, 0, 0));
  if (atoll_run_init_from(r, &l->state, start, err)) return -1; /* --init-from, --init-from-hf */
  l->state.first_step = *start;
  if (r->diloco) {
    atoll_diloco_set_first_step(r->diloco, *start);
    atoll_diloco_reset_global(r->diloco);
  }
  return 0;
}

/* --eval-data: each set's validation split, in the run's vocabulary. */
static int open_eval_sets(loop *l, const atoll_config *c, atoll_err *err) {
  atoll_run *r = &l->run;
  int n;
  if (atoll_eval_sets_parse(c->data.eval_sets, l->eval_sets, &n, err)) return -1;
  for (int i = 0; i < n; i++) {
    const atoll_eval_set *e = &l->eval_sets[i];
    atoll_err why;
    if (atoll_dataset_open(&l->evals[i], e->dir, "val", r->seq, &why)) {
      /* the reader names the directory as --data's: drop that prefix */
      char prefix[1100];
      snprintf(prefix, sizeof prefix, "--data %s: ", e->dir);
      const char *msg = strncmp(why.msg, prefix, strlen(prefix)) == 0 ? why.msg + strlen(prefix) : why.msg;
      return atoll_fail(err, "--eval-data %s=%s: %s", e->name, e->dir, msg);
    }
    l->n_evals = i + 1;
    if (atoll_dataset_check_vocab(&l->evals[i], c->model.vocab, &why))
      return atoll_fail(err, "--eval-data %s=%s: %s", e->name, e->dir, why.msg);
  }
  return 0;
}

/* Setup, data and buffers: each rank's own, with no collective after the mesh. */
static int open_run(loop *l, const atoll_config *c, const atoll_test_hooks *hooks, atoll_comm *world,
                    atoll_err *err) {
  atoll_run *r = &l->run;
  if (atoll_config_check(c, err) || atoll_run_setup(r, c, hooks, world, err)) return -1;
  if (atoll_dataset_open(&l->train, c->data.dir, "train", r->seq, err)) return -1;
  if (atoll_dataset_open(&l->val, c->data.dir, "val", r->seq, err)) return -1;
  if (atoll_run_tokenizer(r, err) || atoll_dataset_check_vocab(&l->train, c->model.vocab, err) ||
      atoll_dataset_check_vocab(&l->val, c->model.vocab, err))
    return -1;
  if (open_eval_sets(l, c, err) || alloc_buffers(l, err)) return -1;
  if (c->islands.count > 1 && strcmp(c->islands.data, "iid") != 0 && atoll_run_island_data(r, &l->train, err)) return -1;
  return 0;
}

/* Returns 0, or an agreed ATOLL_TRAIN_ERROR / ATOLL_TRAIN_QUIET: the ranks agree after
 * each phase that may fail on some of them, before the next one's collectives
 * (loading a checkpoint is collective). */
/* A new run into an OUT that holds one (a checkpoint) is refused, saying what to do.
 * Checked before the run is set up: an island (--join) registers with its coordinator
 * during the setup, and a restarted island's HELLO aborts the other islands' exchange. */
static int holds_run(const atoll_config *c, atoll_comm *world, const char *resume_dir, atoll_err *err) {
  if (resume_dir || atoll_comm_rank(world) != 0) return 0;
  char root[1200], latest[1200];
  atoll_err ignored;
  if (snprintf(root, sizeof root, "%s/checkpoints", c->run.out) >= (int)sizeof root ||
      atoll_ckpt_find_latest(root, latest, sizeof latest, &ignored) != 0)
    return 0;
  return atoll_fail(err, "--out %s: already holds a run with checkpoint %s; pass --resume %s to continue it%s or choose another --out",
                    c->run.out, latest, c->run.out, c->islands.join[0] ? " (the island joins its run again from there)" : "");
}

static int loop_init(loop *l, const atoll_config *c, const atoll_test_hooks *hooks, atoll_comm *world,
                     const char *resume_dir, const volatile sig_atomic_t *stop, int *start, atoll_err *err) {
  memset(l, 0, sizeof *l);
  l->out.lock_fd = -1; /* not held until atoll_run_out_open */
  atoll_run *r = &l->run;
  atoll_comm_set_timeout(world, c->parallel.comm_timeout);
  /* a rank refused here must not leave the others waiting in setup's collectives */
  int rc = atoll_train_agree(world, atoll_run_check_machine(c, err), err);
  if (rc) return rc;
  rc = atoll_train_agree(world, holds_run(c, world, resume_dir, err), err);
  if (rc) return rc;
  rc = atoll_train_agree(world, open_run(l, c, hooks, world, err), err);
  if (rc) return rc;
  /* the settings are valid on every rank: take OUT before anything is written there
   * (an agreed verdict of rank 0) */
  rc = atoll_run_out_open(&l->out, c, world, resume_dir, err);
  if (rc) return rc;
  rc = start_state(l, resume_dir, start, err);
  if (rc == 0 && !resume_dir) rc = atoll_run_check_start(c, c->init.from, *start, err); /* --init-step 1 */
  /* islands as separate jobs: the island registers only with a checkpoint read and
   * found good (a bad one held a slot at the coordinator until --island-timeout), and
   * says its revision in its HELLO; a stop signal ends the wait for the coordinator */
  if (r->net) {
    rc = atoll_train_agree(world, rc, err);
    if (rc) return rc;
    rc = atoll_islands_net_connect(r->net, stop, err);
  }
  if (rc == 0) {
    state_to_device(l);
    atoll_dp_release_weights(r->dp); /* ZeRO-3 keeps its shard only */
    l->opt = c->optim.adamw;
    l->opt.total_steps = c->run.steps;
    l->phase = (atoll_phase_rule){c->islands.phase_tokens, c->islands.phase_seconds,
                                  (uint64_t)(atoll_run_global_batch(r) * r->seq)};
    if (r->rank == 0) rc = atoll_mkdir_p(c->run.out, err);
    /* a new run keeps no lines of an earlier metrics.jsonl in OUT, whatever its start */
    if (rc == 0) rc = atoll_report_open(&l->report, r, resume_dir ? *start : 0, err);
    if (rc == 0) atoll_report_val_text(&l->report, l->val.ntokens, l->val.text_bytes);
    l->report.eval_sets = l->n_evals;
    for (int i = 0; i < l->n_evals; i++) memcpy(l->report.eval_names[i], l->eval_sets[i].name, sizeof l->eval_sets[i].name);
  }
  return atoll_train_agree(world, rc, err);
}

/* What the run computes on: CPU, instruction sets, matrix engine, kernel family,
 * threads; a warning when OpenBLAS runs generic kernels on a better processor, or
 * kernels above ATOLL_MAX_ISA; a note when bf16 runs without AMX. */
static void print_engine_line(const atoll_run *r) {
  const atoll_config *c = r->cfg;
  if (r->device_desc[0]) {
    fprintf(stderr, "atoll train: device %s: %s; precision %s\n", c->device.type, r->device_desc, c->device.precision);
    return;
  }
  char line[512];
  int threads = c->run.threads > 0 ? c->run.threads : omp_get_max_threads();
  atoll_gemm_describe(line, sizeof line, strcmp(c->device.precision, "bf16") == 0, threads);
  fprintf(stderr, "atoll train: %s; precision %s\n", line, c->device.precision);
  const char *better = atoll_openblas_better_core(), *core = atoll_openblas_core();
  const atoll_cpu_features *f = atoll_cpu();
  if (better && atoll_openblas_generic(core))
    fprintf(stderr, "atoll train: warning: OpenBLAS runs its generic '%s' kernels on a CPU with %s; "
            "set OPENBLAS_CORETYPE=%s for its fast ones\n", core, f->avx512 ? "AVX-512" : "AVX2", better);
  else if (better)
    fprintf(stderr, "atoll train: warning: OpenBLAS runs its '%s' kernels, above ATOLL_MAX_ISA=%s; "
            "set OPENBLAS_CORETYPE=%s for the capped ones\n", core, f->cap, better);
  if (strcmp(c->device.precision, "bf16") == 0 && !atoll_gemm_bf16_on_amx())
    fprintf(stderr, "atoll train: note: without AMX, bf16 products run on %s; on the one such path measured "
            "(a Xeon's AVX512_BF16, bench/README.md) they ran at 0.65x the speed of fp32's and training at 0.72x: "
            "compare with --precision fp32\n", atoll_gemm_bf16_units());
}

static void print_banner(const atoll_run *r) {
  const atoll_config *c = r->cfg;
  const atoll_mesh *mh = &r->mesh;
  fprintf(stderr, "atoll train: %zu parameters, %d layers, %d heads, dim %d, seq %d, %.0f tokens/step (batch %d x %s %d x %d replica%s), %d steps",
          r->whole.nparams, c->model.layers, c->model.heads, c->model.dim, r->seq, atoll_run_global_batch(r) * r->seq,
          c->data.batch, mh->pp > 1 ? "micro-batches" : "accum", r->micro_batches, r->replicas, r->replicas > 1 ? "s" : "",
          c->run.steps);
  if (mh->dp > 1)
    fprintf(stderr, ", %s%s", c->parallel.mode,
            c->parallel.zero_stage ? (const char *[]){"", " + ZeRO-1", " + ZeRO-2", " + ZeRO-3"}[c->parallel.zero_stage] : "");
  if (strcmp(c->parallel.grad_dtype, "fp32") != 0)
    fprintf(stderr, mh->dp > 1 ? ", gradients %s on the wire" : ", --grad-dtype %s (one data-parallel rank: no effect)",
            c->parallel.grad_dtype);
  if (mh->tp > 1) fprintf(stderr, ", tensor parallel %d", mh->tp);
  if (mh->pp > 1) fprintf(stderr, ", pipeline of %d pp_stages (%s%s)", mh->pp, r->chunks > 1 ? "interleaved " : "", c->parallel.schedule);
  if (c->islands.count > 1)
    fprintf(stderr, ", DiLoCo: %d islands of %d, sync every %d (%s, outer lr %g, momentum %g, %d fragment%s, overlap %d%s, %s)",
            c->islands.count, mh->island_size, c->islands.sync_every, c->islands.outer_optimizer, c->islands.outer_lr,
            c->islands.outer_momentum, c->islands.fragments, c->islands.fragments > 1 ? "s" : "", c->islands.overlap,
            strcmp(c->islands.outer_mode, "async") == 0 ? ", async" : "", c->islands.outer_dtype);
  fputc('\n', stderr);
  print_engine_line(r);
}

/* A loss or norm that is not finite stops the run, naming the last good checkpoint. */
static int check_finite(loop *l, int step, float loss, double norm, atoll_err *err) {
  if (isfinite(loss) && isfinite(norm)) return 0;
  char latest[1200] = "none";
  atoll_err ignored;
  atoll_ckpt_find_latest(l->run.ckpt_root, latest, sizeof latest, &ignored);
  if (isatty(STDERR_FILENO)) fputc('\n', stderr);
  return atoll_fail(err, "step %d: %s is %s; stopping (last good checkpoint: %s)", step + 1,
                    isfinite(loss) ? "gradient norm" : "loss", isnan(isfinite(loss) ? norm : loss) ? "NaN" : "infinite",
                    latest);
}

static int step_done(loop *l, atoll_step_report *s, atoll_err *err);

/* Whether the island's phase takes the next step (phase.h): the rule on rank 0's clock,
 * which the island's ranks share (they take a step together or not at all). */
static int phase_takes(loop *l) {
  const atoll_run *r = &l->run;
  if (!atoll_phase_on(&l->phase)) return 1;
  int take = atoll_phase_takes(&l->phase, &l->state.phase);
  if (r->world_size > 1 && l->phase.seconds > 0)
    take = atoll_allreduce_sum_double(r->world, r->rank == 0 ? take : 0) > 0;
  return take;
}

/* A step the island's phase skips: nothing is computed (no batch, no optimizer step)
 * and the schedule goes on; DiLoCo leaves it out of the outer gradient's tokens and
 * AdamW out of its count of updates. */
static void skip_step(loop *l) {
  atoll_diloco_skipped(l->run.diloco);
  l->state.adam_step0--;
  l->state.steps_skipped++;
}

/* Steps `step` (0-based) and what follows it: outer syncs, evaluation, report.
 * Returns 0, or an agreed ATOLL_TRAIN_ERROR / ATOLL_TRAIN_QUIET. */
static int one_step(loop *l, int step, int start, double run_start, atoll_err *err) {
  atoll_run *r = &l->run;
  if (!phase_takes(l)) {
    skip_step(l);
    atoll_step_report s = {.step = step + 1, .start = start, .run_start = run_start, .skipped = 1,
                           .compute_end_wall = atoll_wall_seconds()};
    return step_done(l, &s, err);
  }
  if (step + 1 == 2 && r->rank == r->hooks->stall_rank)
    for (;;) pause(); /* test hook, a stalled peer: the others' watchdog must end the job */
  double t0 = atoll_seconds(), norm;
  float loss = train_step(l, step, &norm);
  /* test hooks: a slower machine, and a one-off stall */
  int slow_ms = r->hooks->step_ms + (r->hooks->pause_step == step + 1 ? r->hooks->pause_ms : 0);
  if (slow_ms > 0) {
    struct timespec ts = {slow_ms / 1000, (long)(slow_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (r->hooks->nan_step == step + 1) { /* test hooks */
    if (r->hooks->nan_island < 0) loss = NAN;
    else if (r->mesh.island == r->hooks->nan_island) norm = NAN;
  }
  int rc = check_finite(l, step, loss, norm, err);
  /* the loss is the world's, but each island has its own gradient norm: the islands
   * agree before the outer sync, whose collectives a stopped island would never join */
  if (r->mesh.islands > 1) rc = atoll_train_agree(r->world, rc, err);
  else if (rc) rc = failed_alike(l);
  if (rc) return rc;
  atoll_step_report s = {.step = step + 1, .start = start, .run_start = run_start, .loss = loss, .norm = norm};
  s.compute = atoll_seconds() - t0;
  s.compute_end_wall = atoll_wall_seconds();
  /* the time between two inner steps: outer syncs, evaluation, checkpoints, reports */
  s.gap = l->compute_end > 0 ? t0 - l->compute_end : 0;
  l->compute_end = t0 + s.compute;
  atoll_phase_took(&l->state.phase, s.compute);
  l->state.steps_taken++;
  l->state.last_loss = loss;
  return step_done(l, &s, err);
}

/* What follows a step, taken or skipped: the outer syncs due, evaluation, the report. */
static int step_done(loop *l, atoll_step_report *sp, atoll_err *err) {
  atoll_run *r = &l->run;
  const atoll_config *c = r->cfg;
  atoll_step_report s = *sp;
  s.steps_skipped = l->state.steps_skipped;
  s.steps_taken = l->state.steps_taken;
  double t0 = atoll_seconds() - s.compute;
  int step = s.step - 1;
  /* DiLoCo agrees on its verdicts over the world itself */
  if (atoll_strategies_after_step(&r->strategies, step + 1, step + 1 == c->run.steps, s.compute, err))
    return failed_alike(l);
  /* a phase begins after each sync (phase.h) */
  if (atoll_phase_on(&l->phase) && atoll_diloco_next_sync(r->diloco, step + 1, c->run.steps) == step + 1)
    atoll_phase_begin(&l->state.phase);
  s.seconds = atoll_seconds() - t0;
  s.lr = atoll_lr_at(&l->opt, step);
  s.evaluated = (c->run.eval_every > 0 && s.step % c->run.eval_every == 0) || s.step == c->run.steps;
  /* evaluation sees the global weights: an outer exchange in flight finishes first
   * (--outer-mode async: it sees those the exchange started from, without waiting) */
  int async = strcmp(c->islands.outer_mode, "async") == 0;
  if (s.evaluated && !async && atoll_strategies_settle(&r->strategies, err)) return failed_alike(l);
  if (s.evaluated) s.val = evaluate(l, &l->val);
  for (int i = 0; s.evaluated && i < l->n_evals; i++) s.eval[i] = evaluate(l, &l->evals[i]);
  return atoll_report_step(&l->report, r, &s, err);
}

/* Saves when due; returns 1 (stopped by a signal or --stop-after), 0, -1, or for an
 * island that ends without its exchange atoll_island_end_line's 1, 2 or 3. */
static int save_or_stop(loop *l, int step, const volatile sig_atomic_t *stop, atoll_err *err) {
  atoll_run *r = &l->run;
  const atoll_config *c = r->cfg;
  /* a signal may reach the ranks at different steps: they agree to stop together */
  int signalled = stop && *stop;
  if (r->world_size > 1) signalled = atoll_allreduce_sum_double(r->world, signalled) > 0;
  int ended = atoll_island_ended(r);
  if (signalled && r->net && !ended && atoll_island_leaves_later(r, &l->leave_at, step, stop)) signalled = 0;
  int stopping = signalled || ended || (c->run.stop_after > 0 && step >= c->run.stop_after && step < c->run.steps);
  if ((c->run.save_every > 0 && step % c->run.save_every == 0) || step == c->run.steps || stopping) {
    if (atoll_strategies_settle(&r->strategies, err)) return -1; /* an outer exchange in flight */
    state_to_host(l);
    if (atoll_run_save(r, &l->state, step, err)) return -1;
    atoll_report_rss_reset(&l->report);
  }
  if (!stopping) return 0;
  if (ended) return atoll_island_end_line(r, ended, step);
  if (r->rank == 0)
    fprintf(stderr, "stopped at step %d; checkpoint saved; continue with: atoll train --resume %s\n", step, c->run.out);
  return signalled ? 1 : 2;
}

/* The weights' hash (checked equal across copies) and summary.json. */
static int finish_run(loop *l, int step, atoll_err *err) {
  atoll_run *r = &l->run;
  uint64_t hash = 0;
  atoll_dp_gather_weights(r->dp);
  state_to_host(l);
  if (atoll_run_check_weights(r, &hash, err)) return -1;
  atoll_dp_release_weights(r->dp);
  return atoll_report_summary(&l->report, r, step, l->state.last_loss, hash, err);
}

int atoll_train_run_hooked(const atoll_config *cfg, const atoll_test_hooks *hooks, atoll_comm *world,
                           const char *resume_dir, const volatile sig_atomic_t *stop, atoll_err *err) {
  loop *l = calloc(1, sizeof *l);
  int start = 0, stopped = 0;
  int rc = l ? loop_init(l, cfg, hooks, world, resume_dir, stop, &start, err)
             : atoll_train_agree(world, atoll_fail(err, "out of memory"), err);
  if (rc) goto done;
  /* islands as separate jobs: a signal also ends a wait for more islands (up to
   * 10 x --net-timeout), not only the steps */
  if (l->run.net) atoll_islands_net_set_stop(l->run.net, stop);
  if (resume_dir && l->run.rank == 0) fprintf(stderr, "resuming from %s at step %d\n", resume_dir, start);
  if (l->run.rank == 0) print_banner(&l->run);
  int step = start;
  double run_start = atoll_seconds();
  atoll_report_rss_reset(&l->report); /* loading and setup are not the steps' memory */
  while (step < cfg->run.steps && !stopped) {
    if (l->run.units && (rc = atoll_island_units_before(l->run.units, step, stop, err))) goto done;
    if ((rc = one_step(l, step, start, run_start, err))) goto done;
    step++;
    /* islands as separate jobs: an island that was behind joined the run at a later step */
    int joined = l->run.diloco ? atoll_diloco_take_jump(l->run.diloco) : 0;
    if (joined > step) step = joined;
    /* a phase begins at the join; the steps taken since the joined step were discarded
     * with the island's weights, so its next contribution leaves them out of its tokens */
    if (joined > 0 && atoll_phase_on(&l->phase)) {
      atoll_phase_begin(&l->state.phase);
      atoll_diloco_set_phase_skipped(l->run.diloco, step - joined);
    }
    /* (a join up to --overlap steps back, --sync-every with --outer-mode async, is the
     * exchange in flight's; further back, the island's checkpoint is ahead of the run) */
    int behind = strcmp(cfg->islands.outer_mode, "async") == 0 ? cfg->islands.sync_every : cfg->islands.overlap;
    if (joined > 0 && step - joined > behind) {
      rc = atoll_fail(err, "joined the run's committed state of step %d, but this island is at step %d: its checkpoint is ahead of the run (a coordinator restarted from an older state file?); stopping",
                      joined, step);
      goto done;
    }
    stopped = save_or_stop(l, step, stop, err);
    if (stopped < 0) {
      rc = failed_alike(l);
      goto done;
    }
  }
  rc = finish_run(l, step, err) ? failed_alike(l) : stopped == 1 ? 1 : stopped == 3 ? ATOLL_TRAIN_QUIET : 0;
  /* islands as separate jobs: a finished island leaves the coordinator at once */
  /* (one that left gracefully too: its last contribution is in, and a restart joins anew) */
  if (l->run.net && ((rc == 0 && !stopped) || (rc == 1 && l->leave_at > 0 && step >= l->leave_at)) &&
      atoll_islands_net_finish(l->run.net, err)) /* (its last commit failed) */
    rc = failed_alike(l);
  /* a kill between the last step's save and its prune left a checkpoint more than
   * --keep; a resume at the last step saves nothing, so it prunes here, after the run
   * finished (a resume that fails on the way deletes nothing) */
  if (rc == 0 && step == start && l->run.rank == 0) {
    atoll_err perr;
    if (atoll_ckpt_prune_ex(l->run.ckpt_root, cfg->run.keep, step, &perr))
      fprintf(stderr, "atoll train: warning: %s\n", perr.msg);
  }
done:
  if (l) loop_free(l);
  free(l);
  return rc;
}

int atoll_train_run(const atoll_config *cfg, atoll_comm *world, const char *resume_dir,
                    const volatile sig_atomic_t *stop, atoll_err *err) {
  return atoll_train_run_hooked(cfg, NULL, world, resume_dir, stop, err);
}

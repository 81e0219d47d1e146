/* atoll plan: the planner's command line. Options (src/plan/options.c) become a
 * plan (src/plan/setup.c), then one of: a layout search (the default), --fewest, --sweep,
 * --calibrate, --list. See `atoll plan --help` and docs/plan.md. Like the rest of the
 * CLI, only this code touches process-wide state (plan_cpu.c: thread counts for
 * --measure) and decides exit statuses; the planner (src/plan) returns errors. */
#include "cli/plan_cli.h"
#include "core/fs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *get(const atoll_plan_opts *o, const char *key) { return atoll_plan_opt(o, key); }

static void list_catalog(void) {
  char a[32];
  printf("models:\n");
  for (int i = 0; i < atoll_plan_model_count(); i++) {
    const atoll_plan_model *m = atoll_plan_model_at(i);
    printf("  %-12s %7s params  %-5s L %-3d d %-5d heads %-3d kv %-3d ffn %-5d vocab %-6d seq %-5d  %s\n", m->name,
           atoll_plan_fmt_count(atoll_plan_params(m), a, sizeof a), m->arch == ATOLL_ARCH_LLAMA ? "llama" : "gpt2",
           m->layers, m->dim, m->heads, m->kv_heads, m->ffn, m->vocab, m->seq, m->source);
  }
  printf("accelerators:\n");
  for (int i = 0; i < atoll_plan_accel_count(); i++) {
    const atoll_plan_accel *x = atoll_plan_accel_at(i);
    if (x->is_cpu)
      printf("  %-10s %s: peak measured (--measure, --cpu-gflops, bench/results.json), memory from /proc/meminfo\n",
             x->name, x->desc);
    else
      printf("  %-10s %-24s %6.0f TFLOP/s bf16  %4.0f GiB  %5.2f TB/s  %d/node  NVLink %3.0f GB/s  NIC %3.0f GB/s\n",
             x->name, x->desc, x->peak_flops / 1e12, x->mem_bytes / GIB, x->hbm_bw / 1e12, x->gpus_per_node,
             x->intra_bw / 1e9, x->inter_bw / 1e9);
  }
}

/* Prints and frees j; a NULL j or text is the allocation that failed. */
static int print_json(cJSON *j, atoll_err *err) {
  char *text = j ? cJSON_Print(j) : NULL;
  cJSON_Delete(j);
  if (!text) return atoll_fail(err, "out of memory writing JSON");
  printf("%s\n", text);
  free(text);
  return 0;
}

static int nothing_fits(const atoll_plan_setup *p, const atoll_plan_ctx *ctx, const atoll_plan_ranking *rk, atoll_err *err) {
  const atoll_plan_result *s = &rk->smallest;
  char a[32], b[32], extra[160] = "";
  atoll_plan_result few;
  atoll_err e2;
  if (atoll_plan_fewest(ctx, &few, &e2) == 0 && few.gpus > p->cluster.gpus)
    snprintf(extra, sizeof extra, "; at one sequence per step it needs at least %d of them (atoll plan --fewest)",
             few.gpus);
  return atoll_fail(
      err,
      "no layout of %s fits on %d x %s: the lightest (dp %d x tp %d x pp %d x cp %d, ZeRO-%d, recompute %s) "
      "needs %s per device, which has %s%s",
      p->model.name, p->cluster.gpus, p->cluster.acc.name, s->lay.dp, s->lay.tp, s->lay.pp, s->lay.cp, s->lay.zero_stage,
      atoll_plan_recompute_name(s->lay.recompute), atoll_plan_fmt_bytes(s->mem_total, a, sizeof a),
      atoll_plan_fmt_bytes(p->cluster.acc.mem_bytes, b, sizeof b), extra);
}

/* --versus dp=N,tp=N,pp=N,cp=N[,zero=N][,microbatch=N][,interleave=N][,recompute=NAME]:
 * a layout to compare the first with (e.g. a published one); the four sizes are needed,
 * what is not given is chosen as for any mesh. */
static int parse_versus(const char *spec, atoll_plan_fixed *f, atoll_err *err) {
  atoll_plan_fixed_none(f);
  char buf[256];
  if (strlen(spec) >= sizeof buf) return atoll_fail(err, "--versus: too long");
  snprintf(buf, sizeof buf, "%s", spec);
  int seen = 0;
  for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) return atoll_fail(err, "--versus %s: expected key=value pairs separated by commas, got '%s'", spec, kv);
    *eq = 0;
    const char *v = eq + 1;
    struct {
      const char *key;
      int *field, min, max, bit;
    } K[] = {{"dp", &f->dp, 1, 1 << 24, 1},
             {"tp", &f->tp, 1, 1 << 16, 2},
             {"pp", &f->pp, 1, 1 << 16, 4},
             {"cp", &f->cp, 1, 1 << 16, 8},
             {"zero", &f->zero_stage, 0, 3, 16},
             {"microbatch", &f->mb, 1, 1 << 20, 32},
             {"interleave", &f->chunks, 1, 1 << 16, 64}};
    int found = 0;
    for (size_t i = 0; i < sizeof K / sizeof K[0] && !found; i++)
      if (strcmp(kv, K[i].key) == 0) {
        if (seen & K[i].bit) return atoll_fail(err, "--versus %s: %s given twice", spec, kv);
        char key[64];
        snprintf(key, sizeof key, "versus %s", K[i].key);
        if (atoll_plan_parse_int(key, v, K[i].min, K[i].max, K[i].field, err)) return -1;
        seen |= K[i].bit, found = 1;
      }
    if (!found && strcmp(kv, "recompute") == 0) {
      if (seen & 128) return atoll_fail(err, "--versus %s: recompute given twice", spec);
      seen |= 128;
      const char *names[] = {"none", "selective", "full"};
      for (int r = 0; r < 3; r++)
        if (strcmp(v, names[r]) == 0) f->recompute = r, found = 1;
      if (!found) return atoll_fail(err, "--versus recompute=%s: expected none, selective or full", v);
    }
    if (!found)
      return atoll_fail(err, "--versus: unknown key '%s' (dp, tp, pp, cp, zero, microbatch, interleave, recompute)",
                        kv);
  }
  if ((seen & 15) != 15) return atoll_fail(err, "--versus %s: give all of dp, tp, pp and cp", spec);
  return 0;
}

/* The --versus layout with its best settings (before anything is printed, so that a
 * bad one is one error line). */
static int versus_layout(const char *spec, const atoll_plan_ctx *ctx, atoll_plan_result *out, atoll_err *err) {
  atoll_plan_fixed f;
  if (parse_versus(spec, &f, err)) return -1;
  atoll_plan_ranking vr;
  if (atoll_plan_search(ctx, &f, &vr, err)) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return atoll_fail(err, "--versus %s: %s", spec, why);
  }
  if (vr.nbest < 1) {
    double need = vr.smallest.mem_total;
    atoll_plan_ranking_free(&vr);
    return atoll_fail(err, "--versus %s: that layout does not fit in memory (it needs %.1f GiB per device)", spec,
                      need / (1024.0 * 1024 * 1024));
  }
  *out = vr.best[0];
  atoll_plan_ranking_free(&vr);
  return 0;
}

static int run_search(const atoll_plan_opts *o, atoll_plan_setup *p, atoll_err *err) {
  atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume, &p->failure};
  int top = 5;
  const char *s;
  if ((s = get(o, "top")) && atoll_plan_parse_int("top", s, 1, 1000000, &top, err)) return -1;
  atoll_plan_ranking rk;
  if (atoll_plan_search(&ctx, &p->fixed, &rk, err)) return -1;
  if (rk.nfit == 0) {
    int rc = nothing_fits(p, &ctx, &rk, err);
    atoll_plan_ranking_free(&rk);
    return rc;
  }
  int n = rk.nbest < top ? rk.nbest : top, rc = 0;
  atoll_plan_result versus;
  if (get(o, "versus") && versus_layout(get(o, "versus"), &ctx, &versus, err)) {
    atoll_plan_ranking_free(&rk);
    return -1;
  }
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON *arr = cJSON_AddArrayToObject(j, "layouts");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, atoll_plan_result_json(&ctx, &rk.best[i]));
    cJSON_AddNumberToObject(j, "meshes_that_fit", rk.nbest);
    cJSON_AddNumberToObject(j, "layouts_evaluated", (double)rk.evaluated);
    if (get(o, "versus")) {
      cJSON *v = atoll_plan_result_json(&ctx, &versus);
      cJSON_AddNumberToObject(v, "time_per_token_vs_first", (versus.step_s / versus.batch_tokens) /
                                                                 (rk.best[0].step_s / rk.best[0].batch_tokens));
      cJSON_AddItemToObject(j, "versus", v);
    }
    if (p->cpu_note[0]) cJSON_AddStringToObject(j, "cpu", p->cpu_note);
    rc = print_json(j, err);
  } else {
    atoll_plan_print_header(stdout, &ctx);
    if (p->cpu_note[0]) printf("         %s\n", p->cpu_note);
    int used = rk.best[0].gpus;
    if (used < p->cluster.gpus)
      printf("note     the fixed layout uses %d of the cluster's %d devices\n", used, p->cluster.gpus);
    printf("\n%d of %ld layouts fit; the best %d of %d meshes (each with its best ZeRO stage, micro-batch, interleave, "
           "recompute):\n",
           rk.nfit, rk.evaluated, n, rk.nbest);
    atoll_plan_print_table(stdout, &ctx, rk.best, n);
    atoll_plan_print_detail(stdout, &ctx, &rk.best[0]);
    if (get(o, "explain")) atoll_plan_print_explain(stdout, &ctx, &rk);
    if (get(o, "versus")) atoll_plan_print_versus(stdout, &ctx, &rk.best[0], &versus);
    atoll_plan_print_assumptions(stdout, &ctx);
  }
  atoll_plan_ranking_free(&rk);
  return rc;
}

static int run_fewest(const atoll_plan_opts *o, atoll_plan_setup *p, atoll_err *err) {
  atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume, &p->failure};
  atoll_plan_result r;
  if (atoll_plan_fewest(&ctx, &r, err)) return -1;
  char a[32], b[32];
  double state = atoll_plan_params(&p->model) * 16;
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON_AddNumberToObject(j, "fewest_gpus", r.gpus);
    cJSON_AddNumberToObject(j, "training_state_bytes", state);
    cJSON_AddItemToObject(j, "layout", atoll_plan_result_json(&ctx, &r));
    return print_json(j, err);
  }
  printf("fewest %s devices that hold %s for training (data parallel 1, one %d-token sequence per step): %d\n",
         p->cluster.acc.name, p->model.name, p->train.seq, r.gpus);
  printf("  layout: tp %d (inside a node of %d) x pp %d, recompute %s; stages of %d blocks (last %d + LM head)\n",
         r.lay.tp, p->cluster.gpus_per_node, r.lay.pp, atoll_plan_recompute_name(r.lay.recompute), r.pp_stage_layers_first,
         r.pp_stage_layers_last);
  char q[7][32];
  printf("  memory per device: %s of %s = weights %s + gradients %s + optimizer %s + activations %s + reserved %s\n",
         atoll_plan_fmt_bytes(r.mem_total, q[0], 32), atoll_plan_fmt_bytes(p->cluster.acc.mem_bytes, q[1], 32),
         atoll_plan_fmt_bytes(r.mem_weights, q[2], 32), atoll_plan_fmt_bytes(r.mem_grads, q[3], 32),
         atoll_plan_fmt_bytes(r.mem_optim, q[4], 32), atoll_plan_fmt_bytes(r.mem_act, q[5], 32),
         atoll_plan_fmt_bytes(r.mem_reserved, q[6], 32));
  printf("  why: weights, gradients and AdamW state alone are 16 bytes x %s parameters = %s, %.1f devices' worth;\n"
         "       with the runtime's reserve, the embedding on the first stage and whole blocks per stage, %d are "
         "needed.\n",
         atoll_plan_fmt_count(atoll_plan_params(&p->model), a, sizeof a), atoll_plan_fmt_bytes(state, b, sizeof b),
         state / p->cluster.acc.mem_bytes, r.gpus);
  printf(
      "  such a run: one sequence per step, %s per step, %.0f TFLOP/s per GPU (MFU %.1f%%; idle %.0f%% of the time in\n"
      "  the pipeline bubble, as one sequence passes through %d stages in turn);\n"
      "  at that rate the %s-token budget takes %.0f years. Hence thousands of GPUs: see --sweep.\n",
      atoll_plan_fmt_seconds(r.step_s, a, sizeof a), r.tflops_per_gpu, 100 * r.mfu, 100 * r.bubble / (1 + r.bubble),
      r.lay.pp, atoll_plan_fmt_count(p->train.token_budget, b, sizeof b), r.days / 365.25);
  return 0;
}

static int run_sweep(const atoll_plan_opts *o, atoll_plan_setup *p, const char *list, atoll_err *err) {
  int counts[64], n = 0;
  if (strcmp(list, "auto") == 0) {
    atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume, &p->failure};
    atoll_plan_result few;
    int start = 1;
    if (atoll_plan_fewest(&ctx, &few, err) == 0) start = few.gpus;
    int g = 1;
    while (g < start) g *= 2;
    for (; g <= (1 << 17) && n < 64; g *= 2) counts[n++] = g;
  } else {
    const char *s = list;
    while (*s && n < 64) {
      char *end;
      errno = 0;
      long v = strtol(s, &end, 10);
      if (errno || end == s || v < 1 || v > (1 << 30) || (*end && *end != ','))
        return atoll_fail(err, "--sweep %s: expected auto or device counts like 1024,4096,16384", list);
      counts[n++] = (int)v;
      s = *end ? end + 1 : end;
    }
  }
  atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume, &p->failure};
  atoll_plan_result *rs = calloc((size_t)n, sizeof *rs);
  if (!rs) return atoll_fail(err, "out of memory");
  atoll_plan_sweep(&ctx, counts, n, rs, err);
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON *arr = cJSON_AddArrayToObject(j, "sweep");
    for (int i = 0; i < n; i++) {
      cJSON *e = rs[i].valid && rs[i].fits ? atoll_plan_result_json(&ctx, &rs[i]) : cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "cluster_gpus", counts[i]);
      if (!(rs[i].valid && rs[i].fits)) cJSON_AddStringToObject(e, "note", rs[i].why);
      cJSON_AddItemToArray(arr, e);
    }
    free(rs);
    return print_json(j, err);
  }
  atoll_plan_print_header(stdout, &ctx);
  char a[32], b[32];
  printf("\n   GPUs   best layout (dp x tp x pp x cp)  zero   step    TFLOP/s   MFU       days\n");
  for (int i = 0; i < n; i++) {
    const atoll_plan_result *r = &rs[i];
    if (!(r->valid && r->fits)) {
      printf("%7d   %s\n", counts[i], r->why);
      continue;
    }
    char name[64];
    snprintf(name, sizeof name, "%d x %d x %d x %d", r->lay.dp, r->lay.tp, r->lay.pp, r->lay.cp);
    char dd[32];
    printf("%7d   %-31s %4d %9s %8.0f %5.1f%% %10s\n", counts[i], name, r->lay.zero_stage,
           atoll_plan_fmt_seconds(r->step_s, a, sizeof a), r->tflops_per_gpu, 100 * r->mfu,
           atoll_plan_fmt_days(r->days, dd, sizeof dd));
  }
  printf("\nGradient descent is sequential in steps, not within one: each step's %s tokens split across the GPUs,\n"
         "so days fall almost in proportion to GPUs until the batch runs out of sequences to share (a data-parallel\n"
         "rank needs at least one) or communication and the pipeline bubble eat the gain. That, not memory, is why\n"
         "runs use 10,000+ GPUs: the model fits on about a hundred, but would take years to train there.\n",
         atoll_plan_fmt_count(p->train.batch_tokens, b, sizeof b));
  free(rs);
  return 0;
}

/* The cpu accelerator as the calibrated run saw it: ranks that oversubscribe the cores
 * each get their share of them (the cpu entry is one process's rate, and the run is
 * taken to have been made on this machine, as the benchmark the rate comes from). */
static int calibrate_cluster(const atoll_plan_opts *o, const atoll_plan_calibration *cal, atoll_plan_cluster *c,
                             atoll_plan_assume *a, char *note, size_t note_size, double *share, atoll_err *err) {
  atoll_plan_opts with_threads = *o; /* the run's thread count unless --threads says otherwise */
  char th[32];
  snprintf(th, sizeof th, "%d", cal->threads);
  atoll_plan_opt_default(&with_threads, "threads", th);
  atoll_plan_accel acc;
  if (atoll_plan_accel_find("cpu", &acc, err) || atoll_plan_setup_cpu(&with_threads, &acc, note, note_size, err))
    return -1;
  int world = cal->layout.dp * cal->layout.tp * cal->layout.pp;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int per_rank = cal->threads > 0 ? cal->threads : (int)(cores > 0 ? cores : 1);
  *share = cores > 0 && (double)world * per_rank > (double)cores ? (double)cores / ((double)world * per_rank) : 1.0;
  if (*share < 1.0) {
    size_t len = strlen(note);
    snprintf(note + len, note_size - len, "; %d ranks x %d thread%s on %ld cores: x %.2f each", world, per_rank,
             per_rank == 1 ? "" : "s", cores, *share);
  }
  atoll_plan_cluster_default(c, &acc, world);
  c->gpus_per_node = world;
  atoll_plan_assume_defaults(a);
  a->tp_regather = 0; /* atoll keeps the gathered inputs of the column-parallel products */
  for (int i = 0; i < o->nsets; i++)
    if (atoll_plan_setup_assumption(c, a, o->sets[i], err)) return -1;
  c->acc.peak_flops *= *share; /* after --set: a given elem_bw is one process's too */
  c->acc.elem_bw *= *share;
  return 0;
}

static void print_calibration(const atoll_plan_calibration *cal, const char *path, const char *note) {
  const atoll_plan_result *r = &cal->result;
  int world = cal->layout.dp * cal->layout.tp * cal->layout.pp;
  char e1[32];
  printf("calibration against %s\n", path);
  printf("  run    %s, %d layer%s, width %d, %d heads, vocab %d; micro-batch %d x %d tokens, %d micro-batch%s, %d "
         "process%s (DP %d x TP %d x PP %d)\n",
         cal->model.name, cal->model.layers, cal->model.layers == 1 ? "" : "s", cal->model.dim, cal->model.heads,
         cal->model.vocab, cal->layout.mb, cal->train.seq, r->micro_batches, r->micro_batches == 1 ? "" : "es", world,
         world == 1 ? "" : "es", cal->layout.dp, cal->layout.tp, cal->layout.pp);
  printf("  %s\n", note);
  /* the modelled pp_stage's blocks (all of them without a pipeline) */
  int stage_layers = cal->layout.pp == 1 ? cal->model.layers
                     : r->pp_stage_layers_first > r->pp_stage_layers_last ? r->pp_stage_layers_first
                                                                    : r->pp_stage_layers_last;
  double nb = (double)r->micro_batches * stage_layers;
  char q[8][32];
  printf("  predicted step %s = blocks %s (matmuls %s, attention %s, elementwise %s, overhead %s)\n"
         "                 + LM head and loss %s + optimizer %s\n",
         atoll_plan_fmt_seconds(cal->predicted_step_s, q[0], 32), atoll_plan_fmt_seconds(nb * r->t_layer_compute, q[1], 32),
         atoll_plan_fmt_seconds(nb * r->t_layer_mm, q[2], 32), atoll_plan_fmt_seconds(nb * r->t_layer_attn, q[3], 32),
         atoll_plan_fmt_seconds(nb * r->t_layer_elem, q[4], 32),
         atoll_plan_fmt_seconds(nb * (r->t_layer_compute - r->t_layer_mm - r->t_layer_attn - r->t_layer_elem), q[5], 32),
         atoll_plan_fmt_seconds(r->micro_batches * r->t_head_mb, q[6], 32), atoll_plan_fmt_seconds(r->t_optim, q[7], 32));
  printf("  measured step  %s (median_step_seconds)\n", atoll_plan_fmt_seconds(cal->measured_step_s, e1, sizeof e1));
  printf("  gap            %+.1f%% (predicted / measured - 1)\n", 100 * cal->gap);
}

static int run_calibrate(const atoll_plan_opts *o, const char *path, atoll_err *err) {
  double tol = -1, share = 1;
  const char *s;
  if ((s = get(o, "tolerance")) && atoll_plan_parse_double("tolerance", s, &tol, err)) return -1;
  if (s && !(tol >= 0)) return atoll_fail(err, "--tolerance %s: must be >= 0 (a fraction: 0.2 is 20%%)", s);
  atoll_plan_calibration cal;
  if (atoll_plan_calibrate_read(path, &cal, err)) return -1;
  char note[256];
  atoll_plan_cluster c;
  atoll_plan_assume a;
  if (calibrate_cluster(o, &cal, &c, &a, note, sizeof note, &share, err)) return -1;
  atoll_plan_calibrate_predict(&cal, &c, &a);
  atoll_plan_ctx ctx = {&cal.model, &c, &cal.train, &a, NULL};
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON_AddStringToObject(j, "summary", path);
    cJSON_AddStringToObject(j, "cpu", note);
    cJSON_AddNumberToObject(j, "core_share", share);
    cJSON_AddNumberToObject(j, "measured_step_seconds", cal.measured_step_s);
    cJSON_AddNumberToObject(j, "predicted_step_seconds", cal.predicted_step_s);
    cJSON_AddNumberToObject(j, "gap", cal.gap);
    cJSON_AddItemToObject(j, "layout", atoll_plan_result_json(&ctx, &cal.result));
    if (print_json(j, err)) return -1;
  } else {
    print_calibration(&cal, path, note);
  }
  if (tol >= 0 && fabs(cal.gap) > tol)
    return atoll_fail(
        err, "--calibrate %s: predicted %.4g s per step, measured %.4g s: gap %+.1f%% exceeds the tolerance %.0f%%",
        path, cal.predicted_step_s, cal.measured_step_s, 100 * cal.gap, 100 * tol);
  return 0;
}

int atoll_plan_main(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      atoll_plan_opts_help(stdout);
      atoll_err help_err;
      if (atoll_flush_file(stdout, "stdout", &help_err) == 0) return 0;
      fprintf(stderr, "atoll: error: %s\n", help_err.msg);
      return 1;
    }
  atoll_err err = {{0}};
  atoll_plan_opts o;
  atoll_plan_setup *p = NULL;
  int rc = 1;
  if (atoll_plan_opts_parse(&o, argc, argv, &err)) goto out;
  if (get(&o, "list")) {
    list_catalog();
    rc = 0;
    goto out;
  }
  const char *cal = get(&o, "calibrate");
  if (cal) {
    rc = run_calibrate(&o, cal, &err) ? 1 : 0;
    goto out;
  }
  p = malloc(sizeof *p);
  if (!p) {
    atoll_fail(&err, "out of memory");
    goto out;
  }
  if (atoll_plan_setup_build(&o, atoll_plan_setup_cpu, p, &err)) goto out;
  const char *sweep = get(&o, "sweep");
  if (get(&o, "fewest") && sweep) {
    atoll_fail(&err, "--fewest and --sweep: give one of them");
    goto out;
  }
  if (get(&o, "fewest"))
    rc = run_fewest(&o, p, &err) ? 1 : 0;
  else if (sweep)
    rc = run_sweep(&o, p, sweep, &err) ? 1 : 0;
  else
    rc = run_search(&o, p, &err) ? 1 : 0;
out:
  /* the plan (table, --json, --list) must have reached stdout: a full disk or a closed
   * stdout is an error, as in tokenizer_cli.c, not a silent status 0 */
  if (rc == 0 && atoll_flush_file(stdout, "stdout", &err)) rc = 1;
  if (rc) fprintf(stderr, "atoll: error: %s\n", err.msg[0] ? err.msg : "plan failed");
  free(p);
  atoll_plan_opts_free(&o);
  return rc;
}

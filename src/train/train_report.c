/* What a run reports; see report.h. */
#include "train/report.h"

#include "core/clock.h"
#include "core/fatal.h"
#include "core/fs.h"
#include "model/model.h"
#include "parallel/islands_net.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static size_t peak_rss(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (size_t)ru.ru_maxrss * 1024;
}

/* The resident-set high-water mark since the last reset (Linux VmHWM), or the
 * process peak where /proc is unavailable. */
static size_t rss_hwm(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return peak_rss();
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
  fclose(f);
  return kb ? kb * 1024 : peak_rss();
}

/* Resets VmHWM (Linux >= 4.0: "5" > /proc/self/clear_refs). The reset also lowers
 * getrusage's ru_maxrss, so the process peak is carried in the report. */
void atoll_report_rss_reset(atoll_report *rep) {
  size_t hwm = rss_hwm();
  if (hwm > rep->process_peak_rss) rep->process_peak_rss = hwm;
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return;
  fputs("5", f);
  fclose(f);
}

static double tokens_per_step(const atoll_run *r) { return atoll_run_global_batch(r) * r->seq; }

/* The metrics of steps <= keep_steps from an earlier metrics.jsonl (NULL: none). */
static char *kept_metrics(const char *path, int keep_steps, size_t *len) {
  char *kept = NULL;
  *len = 0;
  FILE *old = keep_steps > 0 ? fopen(path, "r") : NULL;
  if (!old) return NULL;
  FILE *mem = open_memstream(&kept, len);
  if (!mem) atoll_fatal("out of memory reading %s", path);
  char line[4096];
  while (fgets(line, sizeof line, old)) {
    cJSON *o = cJSON_Parse(line);
    const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    if (cJSON_IsNumber(s) && s->valueint <= keep_steps) fputs(line, mem);
    cJSON_Delete(o);
  }
  fclose(old);
  fclose(mem);
  return kept;
}

/* Records the first failed write to metrics.jsonl (rank 0): ok is the write's result. */
static void metrics_check(atoll_report *rep, int ok) {
  if (!ok && !rep->metrics_errno) rep->metrics_errno = errno ? errno : EIO;
}

static void metrics_path(const atoll_run *r, char *path, size_t n) { snprintf(path, n, "%s/metrics.jsonl", r->cfg->run.out); }

int atoll_report_open(atoll_report *rep, const atoll_run *r, int keep_steps, atoll_err *err) {
  memset(rep, 0, sizeof *rep);
  rep->step_seconds = calloc((size_t)r->cfg->run.steps, sizeof(double));
  if (!rep->step_seconds) return atoll_fail(err, "out of memory for %d steps' timings", r->cfg->run.steps);
  if (r->rank != 0) return 0;
  char path[1200];
  metrics_path(r, path, sizeof path);
  size_t kept_len;
  char *kept = kept_metrics(path, keep_steps, &kept_len);
  /* the kept lines replace the file in one rename: truncating it first and writing
   * them after lost the run's record to a kill in between */
  int had = kept != NULL, rc = had ? atoll_write_file_atomic(path, kept, kept_len, err) : 0;
  free(kept);
  if (rc) return -1;
  rep->metrics = fopen(path, had ? "a" : "w");
  if (!rep->metrics) return atoll_fail(err, "%s: cannot write: %s", path, strerror(errno));
  const char *tb = r->cfg->run.tensorboard;
  return tb[0] ? atoll_tb_open(&rep->tb, tb, keep_steps + 1, err) : 0;
}

void atoll_report_val_text(atoll_report *rep, uint64_t tokens, uint64_t bytes) {
  rep->bits_per_nat = bytes > 0 ? (double)tokens / (double)bytes / log(2.0) : 0.0;
}

void atoll_report_close(atoll_report *rep) {
  free(rep->step_seconds);
  if (rep->metrics) fclose(rep->metrics);
  atoll_tb_close(&rep->tb);
  rep->step_seconds = NULL;
  rep->metrics = NULL;
}

static atoll_comm *axis_comm(const atoll_run *r, int axis) {
  atoll_comm *c[ATOLL_AXES] = {r->mesh.dp_comm, r->mesh.tp_comm, r->mesh.pp_comm, r->mesh.tie_comm};
  return c[axis];
}

void atoll_report_comm_begin(atoll_report *rep, const atoll_run *r) {
  for (int a = 0; a < ATOLL_AXES; a++)
    rep->axis_before[a] = axis_comm(r, a) ? atoll_comm_get_stats(axis_comm(r, a)) : (atoll_comm_stats){0};
}

void atoll_report_comm_end(atoll_report *rep, const atoll_run *r) {
  for (int a = 0; a < ATOLL_AXES; a++) {
    if (!axis_comm(r, a)) continue;
    atoll_comm_stats after = atoll_comm_get_stats(axis_comm(r, a)), *before = &rep->axis_before[a];
    for (int op = 0; op < ATOLL_OP_COUNT; op++) {
      uint64_t db = after.bytes_sent[op] - before->bytes_sent[op], dc = after.calls[op] - before->calls[op];
      rep->axis_comm[a].bytes_sent[op] += db;
      rep->axis_comm[a].calls[op] += dc;
      rep->step_comm.bytes_sent[op] += db;
      rep->step_comm.calls[op] += dc;
    }
    double dw = after.wait_seconds - before->wait_seconds;
    rep->axis_comm[a].wait_seconds += dw;
    rep->step_comm.wait_seconds += dw;
  }
}

/* One step's record: each number is formatted once, and the same text goes into the
 * metrics.jsonl line and, read back as a float, into the TensorBoard event (its tag the
 * key), so that both hold the same values. */
typedef struct {
  FILE *f;
  int ok;
  int n;
  atoll_tb_scalar v[ATOLL_MAX_EVAL_SETS + 20];
  char tags[ATOLL_MAX_EVAL_SETS][ATOLL_EVAL_NAME_MAX + 16];
} step_record;

static void put(step_record *l, const char *key, const char *fmt, double x) {
  char num[64];
  snprintf(num, sizeof num, fmt, x);
  l->ok = fprintf(l->f, ", \"%s\": %s", key, num) >= 0 && l->ok;
  if (l->n < (int)(sizeof l->v / sizeof l->v[0])) l->v[l->n++] = (atoll_tb_scalar){key, strtof(num, NULL)};
}

static void log_step(atoll_report *rep, const atoll_run *r, const atoll_step_report *s) {
  if (!rep->metrics || rep->metrics_errno) return;
  step_record l = {.f = rep->metrics, .ok = 1};
  errno = 0;
  l.ok = fprintf(l.f, "{\"step\": %d", s->step) >= 0;
  if (s->skipped) { /* (no loss, norm or speed: nothing was computed) */
    l.ok = fprintf(l.f, ", \"skipped\": 1") >= 0 && l.ok;
  } else {
    put(&l, "loss", "%.6f", s->loss);
  }
  put(&l, "lr", "%.6g", s->lr);
  if (!s->skipped) put(&l, "grad_norm", "%.6f", s->norm);
  if (!s->skipped) put(&l, "tokens_per_s", "%.1f", tokens_per_step(r) / s->seconds);
  /* time: the wall clock when the step's compute ended, to line up several islands' runs
   * (in the event file, the Event's wall_time) */
  l.ok = fprintf(l.f, ", \"time\": %.3f", s->compute_end_wall) >= 0 && l.ok;
  if (s->evaluated) put(&l, "val_loss", "%.6f", s->val);
  if (s->evaluated && rep->bits_per_nat > 0) put(&l, "val_bpb", "%.6f", s->val * rep->bits_per_nat);
  for (int i = 0; s->evaluated && i < rep->eval_sets; i++) {
    snprintf(l.tags[i], sizeof l.tags[i], "val_loss_%s", rep->eval_names[i]);
    put(&l, l.tags[i], "%.6f", s->eval[i]);
  }
  if (r->diloco) { /* running totals of rank 0's links */
    atoll_diloco_stats d = atoll_diloco_get_stats(r->diloco);
    double intra = 0;
    for (int op = 0; op < ATOLL_OP_COUNT; op++) intra += (double)rep->step_comm.bytes_sent[op];
    put(&l, "outer_syncs", "%.0f", (double)d.outer_syncs);
    /* the staleness of each outer step merged since the last line (one a line: the last's) */
    if (d.merges > rep->merges_logged) put(&l, "merge_staleness", "%.0f", (double)d.staleness_last);
    rep->merges_logged = d.merges;
    put(&l, "inter_island_bytes", "%.0f", (double)d.inter_island_bytes);
    put(&l, "intra_island_bytes", "%.0f", intra);
    /* rank 0's lane of a timeline: its inner step, and the time before it */
    put(&l, "compute_seconds", "%.6f", s->compute);
    put(&l, "gap_seconds", "%.6f", s->gap);
    if (r->net) { /* islands as separate jobs: members of the last exchange, retries so far */
      atoll_link_stats n = atoll_islands_net_stats(r->net);
      put(&l, "members", "%.0f", n.members);
      put(&l, "retries", "%.0f", (double)n.retries);
    }
  }
  l.ok = fprintf(l.f, "}\n") >= 0 && l.ok;
  metrics_check(rep, l.ok && fflush(l.f) == 0); /* a full disk shows here at the latest */
  if (rep->tb.f && !rep->tb_errno && atoll_tb_scalars(&rep->tb, s->compute_end_wall, s->step, l.v, l.n))
    rep->tb_errno = errno ? errno : EIO;
}

static void format_eta(char *buf, size_t n, double s) {
  if (s < 0 || !isfinite(s)) s = 0;
  int h = (int)(s / 3600), m = (int)(fmod(s, 3600) / 60), sec = (int)fmod(s, 60);
  if (h)
    snprintf(buf, n, "%dh%02dm", h, m);
  else
    snprintf(buf, n, "%dm%02ds", m, sec);
}

static void progress(const atoll_report *rep, const atoll_run *r, const atoll_step_report *s) {
  if (r->rank != 0) return;
  const atoll_config *c = r->cfg;
  int tty = isatty(STDERR_FILENO);
  if (!(tty || s->step % c->run.log_every == 0 || s->step == c->run.steps || s->evaluated)) return;
  if (s->skipped) { /* the island's phase (phase.h): nothing computed; an evaluation is still shown */
    if (s->evaluated) fprintf(stderr, "%sstep %d/%d | skipped (phase) | val_loss %.4f\n", tty ? "\r\033[K" : "", s->step, c->run.steps, s->val);
    return;
  }
  double tps = tokens_per_step(r) / s->seconds;
  double eta = (atoll_seconds() - s->run_start) / (s->step - s->start) * (c->run.steps - s->step);
  char etabuf[32];
  format_eta(etabuf, sizeof etabuf, eta);
  double flops = tps * atoll_flops_per_token(&c->model, r->seq);
  fprintf(stderr, "%sstep %d/%d | loss %.4f | %.0f tok/s | %.2f GFLOP/s", tty ? "\r\033[K" : "", s->step, c->run.steps,
          s->loss, tps, flops * 1e-9);
  if (r->peak_flops > 0) fprintf(stderr, " | MFU %.1f%%", 100.0 * flops / (r->peak_flops * r->world_size));
  fprintf(stderr, " | lr %.2e | ETA %s", s->lr, etabuf);
  if (s->evaluated) fprintf(stderr, " | val_loss %.4f", s->val);
  if (s->evaluated && rep->bits_per_nat > 0) fprintf(stderr, " | val_bpb %.4f", s->val * rep->bits_per_nat);
  for (int i = 0; s->evaluated && i < rep->eval_sets; i++) fprintf(stderr, " | %s %.4f", rep->eval_names[i], s->eval[i]);
  if (!tty || s->evaluated || s->step == c->run.steps) fputc('\n', stderr);
}

int atoll_report_step(atoll_report *rep, const atoll_run *r, const atoll_step_report *s, atoll_err *err) {
  rep->compute_seconds += s->compute;
  rep->loop_seconds = atoll_seconds() - s->run_start;
  if (s->gap > rep->longest_gap) rep->longest_gap = s->gap, rep->longest_gap_step = s->step;
  if (!s->skipped && rep->nsteps_timed < r->cfg->run.steps) rep->step_seconds[rep->nsteps_timed++] = s->seconds;
  rep->steps_skipped = s->steps_skipped;
  rep->steps_taken = s->steps_taken;
  if (s->evaluated) {
    rep->last_val = s->val;
    rep->have_val = 1;
    memcpy(rep->last_eval, s->eval, sizeof rep->last_eval);
  }
  size_t hwm = rss_hwm();
  if (hwm > rep->train_peak_rss) rep->train_peak_rss = hwm;
  /* (the status page: its tokens are step x tokens per step, so a phase that skips steps
   * reports the tokens per step it trained on the run's steps so far) */
  if (r->net && !s->skipped) {
    double taken = (double)s->steps_taken, phased = r->cfg->islands.phase_tokens > 0 || r->cfg->islands.phase_seconds > 0;
    double per_step = tokens_per_step(r) * (phased && s->step > 0 ? taken / s->step : 1);
    atoll_islands_net_report(r->net, (uint64_t)(per_step + 0.5), (float)s->loss);
  }
  log_step(rep, r, s);
  progress(rep, r, s);
  /* only rank 0 writes: the others learn whether it could */
  int failed = rep->metrics_errno || rep->tb_errno;
  if (r->world_size > 1) failed = atoll_allreduce_sum_double(r->world, failed ? 1.0 : 0.0) > 0;
  if (!failed) return 0;
  char path[1200];
  metrics_path(r, path, sizeof path);
  int e = rep->metrics_errno ? rep->metrics_errno : rep->tb_errno;
  if (r->rank == 0 && isatty(STDERR_FILENO)) fputc('\n', stderr);
  return atoll_fail(err, "%s: cannot write: %s; stopping at step %d", rep->metrics_errno ? path : rep->tb.path,
                    strerror(e ? e : EIO), s->step);
}

/* Steps of this process left out of medians: the first ones warm up (page faults,
 * thread pools, caches). */
static int warmup_steps(int n) { return n > 6 ? 3 : (n > 1 ? 1 : 0); }

static double median_step_seconds(const atoll_report *rep) {
  int skip = warmup_steps(rep->nsteps_timed), n = rep->nsteps_timed - skip;
  if (n <= 0) return 0;
  double *v = malloc(sizeof(double) * n);
  if (!v) atoll_fatal("out of memory for the median of %d step times", n);
  memcpy(v, rep->step_seconds + skip, sizeof(double) * n);
  double med = atoll_median(v, (size_t)n);
  free(v);
  return med;
}

/* Per-rank values of one number, gathered to every rank, as a JSON array. */
static cJSON *per_rank(const atoll_run *r, double x, double *max_out) {
  double *all = malloc(sizeof(double) * (size_t)r->world_size);
  if (!all) atoll_fatal("out of memory gathering %d ranks' numbers", r->world_size);
  atoll_allgather_bytes(r->world, &x, all, sizeof x);
  cJSON *a = cJSON_CreateArray();
  double mx = 0;
  for (int i = 0; i < r->world_size; i++) {
    cJSON_AddItemToArray(a, cJSON_CreateNumber(all[i]));
    mx = all[i] > mx ? all[i] : mx;
  }
  free(all);
  if (max_out) *max_out = mx;
  return a;
}

/* The run's result: loss, speed, memory. */
static void summary_run(cJSON *s, const atoll_report *rep, const atoll_run *r, int steps_done, float last_loss,
                        uint64_t weights_hash) {
  const atoll_config *c = r->cfg;
  double med = median_step_seconds(rep), flops = atoll_flops_per_token(&c->model, r->seq);
  double tps = med > 0 ? tokens_per_step(r) / med : 0;
  cJSON_AddNumberToObject(s, "steps", steps_done);
  /* false: stopped early (a signal, --stop-after) with a checkpoint to resume from */
  cJSON_AddBoolToObject(s, "finished", steps_done >= c->run.steps);
  cJSON_AddNumberToObject(s, "params", (double)r->whole.nparams);
  cJSON_AddNumberToObject(s, "final_train_loss", last_loss);
  if (rep->have_val)
    cJSON_AddNumberToObject(s, "final_val_loss", rep->last_val);
  else
    cJSON_AddNullToObject(s, "final_val_loss");
  if (rep->eval_sets) { /* --eval-data: the last loss of each set (null before any evaluation) */
    cJSON *e = cJSON_AddObjectToObject(s, "final_val_losses");
    for (int i = 0; e && i < rep->eval_sets; i++) {
      if (rep->have_val) cJSON_AddNumberToObject(e, rep->eval_names[i], rep->last_eval[i]);
      else cJSON_AddNullToObject(e, rep->eval_names[i]);
    }
  }
  if (rep->bits_per_nat > 0 && rep->have_val) /* bits per byte: only where the split's bytes are known */
    cJSON_AddNumberToObject(s, "final_val_bpb", rep->last_val * rep->bits_per_nat);
  else if (rep->bits_per_nat > 0)
    cJSON_AddNullToObject(s, "final_val_bpb");
  cJSON_AddNumberToObject(s, "tokens_per_second", tps);
  cJSON_AddNumberToObject(s, "flops_per_token", flops);
  cJSON_AddNumberToObject(s, "model_flops_per_second", tps * flops);
  /* model FLOP/s over the job's peak: one rank's (--peak-tflops or the GPU table) x ranks */
  if (r->peak_flops > 0) {
    cJSON_AddNumberToObject(s, "peak_flops_per_rank", r->peak_flops);
    cJSON_AddNumberToObject(s, "mfu", tps * flops / (r->peak_flops * r->world_size));
  } else {
    cJSON_AddNullToObject(s, "peak_flops_per_rank");
    cJSON_AddNullToObject(s, "mfu");
  }
  cJSON_AddNumberToObject(s, "median_step_seconds", med);
  cJSON_AddNumberToObject(s, "global_batch_sequences", atoll_run_global_batch(r));
  cJSON_AddNumberToObject(s, "tokens_per_step", tokens_per_step(r));
  char hash[32];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)weights_hash);
  cJSON_AddStringToObject(s, "weights_hash", hash);
  cJSON_AddNumberToObject(s, "world_size", r->world_size);
  cJSON_AddStringToObject(s, "parallel", r->world_size > 1 ? c->parallel.mode : "none");
  cJSON_AddNumberToObject(s, "shard", c->parallel.zero_stage); /* the key before "zero_stage"; kept for readers */
  cJSON_AddNumberToObject(s, "zero_stage", c->parallel.zero_stage);
  double peak, train_peak;
  size_t process_peak = rss_hwm();
  if (rep->process_peak_rss > process_peak) process_peak = rep->process_peak_rss;
  cJSON *rss = per_rank(r, (double)process_peak, &peak);
  cJSON_AddNumberToObject(s, "peak_rss_bytes", peak);
  cJSON_AddItemToObject(s, "peak_rss_bytes_per_rank", rss);
  /* the steps alone, without checkpoint gathers and loading */
  cJSON *train_rss = per_rank(r, (double)rep->train_peak_rss, &train_peak);
  cJSON_AddNumberToObject(s, "train_peak_rss_bytes", train_peak);
  cJSON_AddItemToObject(s, "train_peak_rss_bytes_per_rank", train_rss);
}

/* Bytes each rank sent inside training steps, by collective and by mesh axis; returns
 * the rank's total. */
static double summary_comm(cJSON *s, const atoll_report *rep, const atoll_run *r) {
  double wait_max;
  cJSON *wait = per_rank(r, rep->step_comm.wait_seconds, &wait_max);
  cJSON_AddNumberToObject(s, "comm_wait_seconds", wait_max);
  cJSON_AddItemToObject(s, "comm_wait_seconds_per_rank", wait);
  cJSON *bytes = cJSON_AddObjectToObject(s, "bytes_sent_per_rank");
  cJSON *calls = cJSON_AddObjectToObject(s, "calls");
  double total = 0;
  for (int op = 0; op < ATOLL_OP_COUNT; op++) {
    double mx;
    cJSON_AddItemToObject(bytes, atoll_op_name(op), per_rank(r, (double)rep->step_comm.bytes_sent[op], &mx));
    cJSON_AddNumberToObject(calls, atoll_op_name(op), (double)rep->step_comm.calls[op]);
    total += (double)rep->step_comm.bytes_sent[op];
  }
  int steps_here = rep->nsteps_timed;
  cJSON_AddItemToObject(s, "bytes_sent_per_step_per_rank", per_rank(r, steps_here ? total / steps_here : 0, NULL));
  cJSON *layout = cJSON_AddObjectToObject(s, "layout");
  cJSON_AddNumberToObject(layout, "islands", r->mesh.islands);
  cJSON_AddNumberToObject(layout, "pp", r->mesh.pp);
  cJSON_AddNumberToObject(layout, "dp", r->mesh.dp);
  cJSON_AddNumberToObject(layout, "tp", r->mesh.tp);
  cJSON_AddStringToObject(layout, "rank_order", "island, pp, dp, tp (tp innermost)");
  cJSON_AddNumberToObject(layout, "microbatches", r->micro_batches);
  cJSON_AddStringToObject(layout, "schedule", r->mesh.pp > 1 ? r->cfg->parallel.schedule : "none");
  cJSON_AddNumberToObject(layout, "virtual_stages", r->chunks);
  cJSON_AddItemToObject(layout, "stage_parameters_per_rank", per_rank(r, (double)r->lay->nparams, NULL));
  cJSON *axes = cJSON_AddObjectToObject(s, "bytes_per_step_per_rank_by_axis");
  const char *axis_names[ATOLL_AXES] = {"data", "tensor", "pipeline", "embedding_tie"};
  for (int a = 0; a < ATOLL_AXES; a++) {
    double b = 0;
    for (int op = 0; op < ATOLL_OP_COUNT; op++) b += (double)rep->axis_comm[a].bytes_sent[op];
    cJSON_AddItemToObject(axes, axis_names[a], per_rank(r, steps_here ? b / steps_here : 0, NULL));
  }
  return total;
}

/* The measured bubble, the mean of the pp_stages' medians, against (P - 1) / (V M); with
 * the logical clock on, also its bubble (pipeline.c), the same mean over the ranks. */
static void summary_pipeline(cJSON *s, const atoll_report *rep, const atoll_run *r) {
  double mine = atoll_pipeline_bubble(r->pipe, warmup_steps(rep->nsteps_timed)), mx;
  cJSON *pipe = cJSON_AddObjectToObject(s, "pipeline");
  cJSON *each = per_rank(r, mine, &mx);
  double mean = 0;
  for (int i = 0; i < r->world_size; i++) mean += cJSON_GetArrayItem(each, i)->valuedouble / r->world_size;
  cJSON_AddNumberToObject(pipe, "bubble_measured", mean);
  cJSON_AddNumberToObject(pipe, "bubble_theory", (double)(r->mesh.pp - 1) / ((double)r->chunks * r->micro_batches));
  cJSON_AddItemToObject(pipe, "bubble_per_rank", each);
  double logical; /* the logical clock's bubble (test hook ATOLL_TEST_STAGE_UNITS), exact */
  if (atoll_pipeline_bubble_logical(r->pipe, &logical)) {
    cJSON *lo = per_rank(r, logical, NULL);
    double lmean = 0;
    for (int i = 0; i < r->world_size; i++) lmean += cJSON_GetArrayItem(lo, i)->valuedouble / r->world_size;
    cJSON_AddNumberToObject(pipe, "bubble_logical", lmean);
    cJSON_AddItemToObject(pipe, "bubble_logical_per_rank", lo);
  }
}

/* How an island spends its time and what it gives (docs/usage.md, "summary.json"):
 * the share of the loop's wall time in inner steps, the longest time between two inner
 * steps, the tokens whose outer gradient reached a sync, and the staleness of the
 * outer steps applied. Per rank; the island's number is that of its slowest rank. */
static void summary_timeline(cJSON *s, const atoll_report *rep, const atoll_run *r, const atoll_diloco_stats *d) {
  double util = rep->loop_seconds > 0 ? rep->compute_seconds / rep->loop_seconds : 0, gap_max;
  cJSON *u = per_rank(r, util, NULL);
  double umin = 1;
  for (int i = 0; i < cJSON_GetArraySize(u); i++)
    if (cJSON_GetArrayItem(u, i)->valuedouble < umin) umin = cJSON_GetArrayItem(u, i)->valuedouble;
  cJSON_AddNumberToObject(s, "compute_utilisation", umin);
  cJSON_AddItemToObject(s, "compute_utilisation_per_rank", u);
  cJSON_AddItemToObject(s, "longest_step_gap_seconds_per_rank", per_rank(r, rep->longest_gap, &gap_max));
  cJSON_AddNumberToObject(s, "longest_step_gap_seconds", gap_max);
  cJSON_AddNumberToObject(s, "longest_step_gap_before_step", rep->longest_gap_step); /* rank 0's */
  /* an island's tokens per step: the job's, over the islands it holds */
  double island_tokens = tokens_per_step(r) / (r->net ? 1 : r->mesh.islands);
  cJSON_AddNumberToObject(s, "tokens_contributed_per_island", island_tokens * (double)d->contributed_steps);
  cJSON_AddNumberToObject(s, "merges", (double)d->merges);
  /* an island's phase in tokens or seconds (phase.h): the steps it took and skipped */
  if (r->net && (r->cfg->islands.phase_tokens > 0 || r->cfg->islands.phase_seconds > 0)) {
    cJSON_AddNumberToObject(s, "inner_steps_taken", (double)rep->steps_taken);
    cJSON_AddNumberToObject(s, "steps_skipped", (double)rep->steps_skipped);
  }
  cJSON_AddNumberToObject(s, "staleness_steps_max", d->staleness_max);
  cJSON_AddNumberToObject(s, "staleness_steps_mean", d->merges ? (double)d->staleness_sum / (double)d->merges : 0);
  if (r->net) { /* contributions too late for their exchange, kept and merged into a later one */
    cJSON_AddNumberToObject(s, "late_contributions_kept", (double)d->late_kept);
    cJSON_AddNumberToObject(s, "late_contributions_merged", (double)d->late_merged);
  }
}

static void summary_diloco(cJSON *s, const atoll_report *rep, const atoll_run *r) {
  atoll_diloco_stats d = atoll_diloco_get_stats(r->diloco);
  double inter_max, exposed_max, compute_max;
  cJSON_AddNumberToObject(s, "outer_syncs", (double)d.outer_syncs);
  cJSON_AddItemToObject(s, "inter_island_bytes", per_rank(r, (double)d.inter_island_bytes, &inter_max));
  cJSON_AddNumberToObject(s, "inter_island_bytes_max_rank", inter_max);
  cJSON_AddItemToObject(s, "wan_seconds", per_rank(r, d.wan_seconds, NULL));
  cJSON_AddItemToObject(s, "wan_exposed_seconds", per_rank(r, d.wan_exposed_seconds, &exposed_max));
  cJSON_AddItemToObject(s, "outer_sync_seconds", per_rank(r, d.sync_seconds, NULL));
  /* the part of it the inner steps waited for (with --overlap the rest ran beside them) */
  cJSON_AddItemToObject(s, "exchange_wait_seconds", per_rank(r, d.exchange_wait_seconds, NULL));
  cJSON_AddItemToObject(s, "compute_seconds", per_rank(r, rep->compute_seconds, &compute_max));
  summary_timeline(s, rep, r, &d);
  /* what the run would take if the islands were joined by the modelled WAN */
  cJSON_AddNumberToObject(s, "estimated_seconds_over_wan", compute_max + exposed_max);
  if (r->net) { /* islands as separate jobs: this island's link (docs/islands.md) */
    atoll_link_stats n = atoll_islands_net_stats(r->net);
    cJSON *o = cJSON_AddObjectToObject(s, "net");
    /* an island of several ranks: each rank has its own link; the island's bytes are their sum */
    cJSON *wb = per_rank(r, (double)n.wire_bytes, NULL);
    double total = 0;
    for (int i = 0; i < cJSON_GetArraySize(wb); i++) total += cJSON_GetArrayItem(wb, i)->valuedouble;
    cJSON_AddNumberToObject(o, "wire_bytes", total);
    cJSON_AddItemToObject(o, "wire_bytes_per_rank", wb);
    cJSON_AddNumberToObject(o, "exchanges", (double)n.exchanges);
    cJSON_AddNumberToObject(o, "retries", (double)n.retries);
    cJSON_AddNumberToObject(o, "exchange_seconds", n.exchange_seconds);
    /* the transfer alone (docs/islands.md, "WAN"): bytes summed over the island's ranks,
     * seconds the slowest rank's */
    double tb = 0, ts = 0;
    cJSON *tba = per_rank(r, (double)n.transfer_bytes, NULL);
    for (int i = 0; i < cJSON_GetArraySize(tba); i++) tb += cJSON_GetArrayItem(tba, i)->valuedouble;
    cJSON_Delete(tba);
    cJSON_Delete(per_rank(r, n.transfer_seconds, &ts));
    cJSON_AddNumberToObject(o, "transfer_bytes", tb);
    cJSON_AddNumberToObject(o, "transfer_seconds", ts);
    cJSON_AddNumberToObject(o, "members_last", n.members);
    cJSON_AddNumberToObject(o, "members_min", n.members_min);
    cJSON_AddNumberToObject(o, "members_max", n.members_max);
    cJSON_AddNumberToObject(o, "joins", (double)n.joins);
    cJSON_AddNumberToObject(o, "commits_missed", (double)n.missed);
  }
}

/* metrics.jsonl made durable (an error some file systems report only now), then
 * OUT/summary.json written whole or not at all. */
static int write_files(atoll_report *rep, const cJSON *s, const atoll_run *r, atoll_err *err) {
  char path[1200];
  metrics_path(r, path, sizeof path);
  if (rep->metrics) {
    errno = 0;
    int flushed = fflush(rep->metrics) == 0;
    /* a pipe or a device (metrics.jsonl made a link to one) cannot fsync: nothing to make durable */
    metrics_check(rep, flushed && (fsync(fileno(rep->metrics)) == 0 || errno == EINVAL));
    if (rep->metrics_errno) return atoll_fail(err, "%s: cannot write: %s", path, strerror(rep->metrics_errno));
  }
  if (rep->tb.f && !rep->tb_errno && atoll_tb_sync(&rep->tb)) rep->tb_errno = errno ? errno : EIO;
  if (rep->tb_errno) return atoll_fail(err, "%s: cannot write: %s", rep->tb.path, strerror(rep->tb_errno));
  snprintf(path, sizeof path, "%s/summary.json", r->cfg->run.out);
  char *text = cJSON_Print(s);
  if (!text) return atoll_fail(err, "%s: out of memory formatting the summary", path);
  size_t len = strlen(text);
  text[len] = '\n'; /* cJSON_Print's terminator becomes the file's last newline */
  int rc = atoll_write_file_atomic(path, text, len + 1, err);
  free(text);
  return rc;
}

int atoll_report_summary(atoll_report *rep, const atoll_run *r, int steps_done, float last_loss, uint64_t weights_hash,
                         atoll_err *err) {
  cJSON *s = cJSON_CreateObject();
  rep->steps_done = steps_done;
  summary_run(s, rep, r, steps_done, last_loss, weights_hash);
  double total = summary_comm(s, rep, r);
  if (r->mesh.pp > 1) summary_pipeline(s, rep, r);
  /* islands: intra-island traffic is the traffic of all the axes above */
  /* (a --join job is one island of the run's --islands) */
  cJSON_AddNumberToObject(s, "islands", r->net ? r->cfg->islands.count : r->mesh.islands);
  cJSON_AddItemToObject(s, "intra_island_bytes", per_rank(r, total, NULL));
  if (r->diloco) summary_diloco(s, rep, r);
  cJSON_AddItemToObject(s, "config", atoll_config_to_json(r->cfg));
  int rc = 0;
  if (r->rank == 0) {
    rc = write_files(rep, s, r, err);
    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(s, "peak_rss_bytes"); /* missing if out of memory */
    if (rc == 0 && cJSON_IsNumber(peak))
      fprintf(stderr, "peak memory (RSS): %.1f MiB%s\n", peak->valuedouble / (1 << 20),
              r->world_size > 1 ? " (largest rank)" : "");
  }
  cJSON_Delete(s);
  return rc;
}

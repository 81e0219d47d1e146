/* What a run reports: the progress line (rank 0, stderr), OUT/metrics.jsonl (one
 * object per step) and OUT/summary.json (the run's one machine-readable result). */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

size_t trainer_peak_rss(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (size_t)ru.ru_maxrss * 1024;
}

/* The resident-set high-water mark since the last reset (Linux VmHWM), or the
 * process peak where /proc is unavailable. */
size_t trainer_rss_hwm(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return trainer_peak_rss();
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
  fclose(f);
  return kb ? kb * 1024 : trainer_peak_rss();
}

/* Resets VmHWM (Linux >= 4.0: "5" > /proc/self/clear_refs), so that checkpoint
 * gathers and loading do not count in the training steps' peak. The reset also
 * lowers getrusage's ru_maxrss, so the process peak is carried in the trainer. */
void trainer_rss_reset(trainer *t) {
  size_t hwm = trainer_rss_hwm();
  if (hwm > t->process_peak_rss) t->process_peak_rss = hwm;
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return;
  fputs("5", f);
  fclose(f);
}

static double tokens_per_step(const trainer *t) {
  return (double)t->cfg->batch * t->seq * t->accum * t->replicas;
}

/* Keeps the metrics of steps <= keep_steps (a resumed run rewrites what follows). */
int trainer_open_metrics(trainer *t, int keep_steps, atoll_err *err) {
  if (t->rank != 0) return 0;
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

void trainer_log_step(trainer *t, int step, float loss, float lr, double norm, double seconds,
                      int evaluated, float val) {
  if (!t->metrics) return;
  fprintf(t->metrics, "{\"step\": %d, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6f, \"tokens_per_s\": %.1f",
          step, loss, lr, norm, tokens_per_step(t) / seconds);
  if (evaluated) fprintf(t->metrics, ", \"val_loss\": %.6f", val);
  if (t->diloco) { /* running totals of rank 0's links */
    atoll_diloco_stats d = atoll_diloco_get_stats(t->diloco);
    double intra = 0;
    for (int op = 0; op < ATOLL_OP_COUNT; op++) intra += (double)t->step_comm.bytes_sent[op];
    fprintf(t->metrics, ", \"outer_syncs\": %llu, \"inter_island_bytes\": %llu, \"intra_island_bytes\": %.0f",
            (unsigned long long)d.outer_syncs, (unsigned long long)d.inter_island_bytes, intra);
  }
  fprintf(t->metrics, "}\n");
  fflush(t->metrics);
}

static void format_eta(char *buf, size_t n, double s) {
  if (s < 0 || !isfinite(s)) s = 0;
  int h = (int)(s / 3600), m = (int)(fmod(s, 3600) / 60), sec = (int)fmod(s, 60);
  if (h)
    snprintf(buf, n, "%dh%02dm", h, m);
  else
    snprintf(buf, n, "%dm%02ds", m, sec);
}

void trainer_progress(trainer *t, int step, int start, double run_start, float loss, float lr,
                      double seconds, int evaluated, float val) {
  if (t->rank != 0) return;
  const atoll_config *c = t->cfg;
  int tty = isatty(STDERR_FILENO);
  if (!(tty || step % c->log_every == 0 || step == c->steps || evaluated)) return;
  double tps = tokens_per_step(t) / seconds;
  double eta = (atoll_seconds() - run_start) / (step - start) * (c->steps - step);
  char etabuf[32];
  format_eta(etabuf, sizeof etabuf, eta);
  fprintf(stderr, "%sstep %d/%d | loss %.4f | %.0f tok/s | %.2f GFLOP/s | lr %.2e | ETA %s",
          tty ? "\r\033[K" : "", step, c->steps, loss, tps,
          tps * atoll_flops_per_token(&c->model, t->seq) * 1e-9, lr, etabuf);
  if (evaluated) fprintf(stderr, " | val_loss %.4f", val);
  if (!tty || evaluated || step == c->steps) fputc('\n', stderr);
}

/* Median seconds per step, leaving out the first steps of this process (warm-up:
 * page faults, thread pools, caches). */
static double median_step_seconds(const trainer *t) {
  int skip = t->nsteps_timed > 6 ? 3 : (t->nsteps_timed > 1 ? 1 : 0);
  int n = t->nsteps_timed - skip;
  if (n <= 0) return 0;
  double *v = malloc(sizeof(double) * n);
  memcpy(v, t->step_seconds + skip, sizeof(double) * n);
  double med = atoll_median(v, (size_t)n);
  free(v);
  return med;
}

/* Per-rank values of one number, gathered to every rank, as a JSON array. */
static cJSON *per_rank(trainer *t, double x, double *max_out) {
  double *all = malloc(sizeof(double) * (size_t)t->world);
  atoll_allgather_bytes(t->comm, &x, all, sizeof x);
  cJSON *a = cJSON_CreateArray();
  double mx = 0;
  for (int r = 0; r < t->world; r++) {
    cJSON_AddItemToArray(a, cJSON_CreateNumber(all[r]));
    mx = all[r] > mx ? all[r] : mx;
  }
  free(all);
  if (max_out) *max_out = mx;
  return a;
}

/* Collective: every rank contributes its numbers; rank 0 writes the file. */
int trainer_write_summary(trainer *t, int steps_done, uint64_t weights_hash, atoll_err *err) {
  const atoll_config *c = t->cfg;
  double med = median_step_seconds(t);
  double tps = med > 0 ? tokens_per_step(t) / med : 0;
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "steps", steps_done);
  cJSON_AddNumberToObject(s, "params", (double)t->whole.nparams);
  cJSON_AddNumberToObject(s, "final_train_loss", t->last_loss);
  if (t->have_val)
    cJSON_AddNumberToObject(s, "final_val_loss", t->last_val);
  else
    cJSON_AddNullToObject(s, "final_val_loss");
  cJSON_AddNumberToObject(s, "tokens_per_second", tps);
  cJSON_AddNumberToObject(s, "flops_per_token", atoll_flops_per_token(&c->model, t->seq));
  cJSON_AddNumberToObject(s, "model_flops_per_second", tps * atoll_flops_per_token(&c->model, t->seq));
  cJSON_AddNumberToObject(s, "median_step_seconds", med);
  cJSON_AddNumberToObject(s, "global_batch_sequences", (double)c->batch * t->accum * t->replicas);
  cJSON_AddNumberToObject(s, "tokens_per_step", tokens_per_step(t));
  char hash[32];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)weights_hash);
  cJSON_AddStringToObject(s, "weights_hash", hash);
  /* data parallel */
  cJSON_AddNumberToObject(s, "world_size", t->world);
  cJSON_AddStringToObject(s, "parallel", t->world > 1 ? c->parallel : "none");
  cJSON_AddNumberToObject(s, "shard", c->shard);
  double peak, train_peak;
  size_t process_peak = trainer_rss_hwm();
  if (t->process_peak_rss > process_peak) process_peak = t->process_peak_rss;
  cJSON *rss = per_rank(t, (double)process_peak, &peak);
  cJSON_AddNumberToObject(s, "peak_rss_bytes", peak);
  cJSON_AddItemToObject(s, "peak_rss_bytes_per_rank", rss);
  /* the steps alone, without checkpoint gathers and loading */
  cJSON *train_rss = per_rank(t, (double)t->train_peak_rss, &train_peak);
  cJSON_AddNumberToObject(s, "train_peak_rss_bytes", train_peak);
  cJSON_AddItemToObject(s, "train_peak_rss_bytes_per_rank", train_rss);
  double wait_max;
  cJSON *wait = per_rank(t, t->step_comm.wait_seconds, &wait_max);
  cJSON_AddNumberToObject(s, "comm_wait_seconds", wait_max);
  cJSON_AddItemToObject(s, "comm_wait_seconds_per_rank", wait);
  /* bytes each rank sent inside training steps, by collective */
  cJSON *bytes = cJSON_AddObjectToObject(s, "bytes_sent_per_rank");
  cJSON *calls = cJSON_AddObjectToObject(s, "calls");
  double total = 0;
  for (int op = 0; op < ATOLL_OP_COUNT; op++) {
    double mx;
    cJSON_AddItemToObject(bytes, atoll_op_name(op), per_rank(t, (double)t->step_comm.bytes_sent[op], &mx));
    cJSON_AddNumberToObject(calls, atoll_op_name(op), (double)t->step_comm.calls[op]);
    total += (double)t->step_comm.bytes_sent[op];
  }
  int steps_here = t->nsteps_timed;
  cJSON_AddItemToObject(s, "bytes_sent_per_step_per_rank", per_rank(t, steps_here ? total / steps_here : 0, NULL));
  /* the mesh and the bytes of each of its axes */
  cJSON *layout = cJSON_AddObjectToObject(s, "layout");
  cJSON_AddNumberToObject(layout, "islands", t->mesh.islands);
  cJSON_AddNumberToObject(layout, "pp", t->mesh.pp);
  cJSON_AddNumberToObject(layout, "dp", t->mesh.dp);
  cJSON_AddNumberToObject(layout, "tp", t->mesh.tp);
  cJSON_AddStringToObject(layout, "rank_order", "island, pp, dp, tp (tp innermost)");
  cJSON_AddNumberToObject(layout, "microbatches", t->accum);
  cJSON_AddStringToObject(layout, "schedule", t->mesh.pp > 1 ? c->schedule : "none");
  cJSON_AddNumberToObject(layout, "virtual_stages", t->chunks);
  cJSON_AddItemToObject(layout, "stage_parameters_per_rank", per_rank(t, (double)t->lay->nparams, NULL));
  cJSON *axes = cJSON_AddObjectToObject(s, "bytes_per_step_per_rank_by_axis");
  const char *axis_names[4] = {"data", "tensor", "pipeline", "embedding_tie"};
  for (int a = 0; a < 4; a++) {
    double b = 0;
    for (int op = 0; op < ATOLL_OP_COUNT; op++) b += (double)t->axis_comm[a].bytes_sent[op];
    cJSON_AddItemToObject(axes, axis_names[a], per_rank(t, steps_here ? b / steps_here : 0, NULL));
  }
  if (t->mesh.pp > 1) {
    /* each step's pipeline time is its slowest stage's finish; this stage's bubble is
     * that time over its compute, less 1; median over the steps after warm-up */
    int n = t->nsteps_timed, skip = n > 6 ? 3 : (n > 1 ? 1 : 0), P = t->mesh.pp;
    double *all = malloc(sizeof(double) * 2 * (size_t)(n ? n : 1) * t->world), *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    atoll_allgather_bytes(t->comm, t->pipe_times, all, sizeof(double) * 2 * (size_t)n);
    int nb = 0;
    for (int k = skip; k < n; k++) {
      double end = 0;
      for (int p = 0; p < P; p++) {
        int w = atoll_mesh_world_rank(&t->mesh, t->mesh.island, p, t->mesh.dp_rank, t->mesh.tp_rank);
        double e = all[(size_t)w * 2 * n + 2 * k];
        end = e > end ? e : end;
      }
      double comp = t->pipe_times[2 * k + 1];
      if (comp > 0) v[nb++] = (end - comp) / comp;
    }
    double mine = nb > 0 ? atoll_median(v, (size_t)nb) : 0, mx;
    free(v);
    free(all);
    cJSON *pipe = cJSON_AddObjectToObject(s, "pipeline");
    cJSON *each = per_rank(t, mine, &mx);
    double mean = 0;
    for (int r = 0; r < t->world; r++) mean += cJSON_GetArrayItem(each, r)->valuedouble / t->world;
    cJSON_AddNumberToObject(pipe, "bubble_measured", mean);
    cJSON_AddNumberToObject(pipe, "bubble_theory", (double)(t->mesh.pp - 1) / ((double)t->chunks * t->accum));
    cJSON_AddItemToObject(pipe, "bubble_per_rank", each);
  }
  /* islands: intra-island traffic is the traffic of all the axes above */
  cJSON_AddNumberToObject(s, "islands", t->mesh.islands);
  cJSON_AddItemToObject(s, "intra_island_bytes", per_rank(t, total, NULL));
  if (t->diloco) {
    atoll_diloco_stats d = atoll_diloco_get_stats(t->diloco);
    double inter_max, exposed_max, compute_max;
    cJSON_AddNumberToObject(s, "outer_syncs", (double)d.outer_syncs);
    cJSON_AddItemToObject(s, "inter_island_bytes", per_rank(t, (double)d.inter_island_bytes, &inter_max));
    cJSON_AddNumberToObject(s, "inter_island_bytes_max_rank", inter_max);
    cJSON_AddItemToObject(s, "wan_seconds", per_rank(t, d.wan_seconds, NULL));
    cJSON_AddItemToObject(s, "wan_exposed_seconds", per_rank(t, d.wan_exposed_seconds, &exposed_max));
    cJSON_AddItemToObject(s, "outer_sync_seconds", per_rank(t, d.sync_seconds, NULL));
    cJSON_AddItemToObject(s, "compute_seconds", per_rank(t, t->compute_seconds, &compute_max));
    /* what the run would take if the islands were joined by the modelled WAN */
    cJSON_AddNumberToObject(s, "estimated_seconds_over_wan", compute_max + exposed_max);
  }
  cJSON_AddItemToObject(s, "config", atoll_config_to_json(c));
  int rc = 0;
  if (t->rank == 0) {
    char *text = cJSON_Print(s);
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/summary.json", c->out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f) ok = (fclose(f) == 0) && ok;
    free(text);
    if (!ok || rename(tmp, path)) rc = atoll_fail(err, "%s: cannot write: %s", path, strerror(errno));
    else fprintf(stderr, "peak memory (RSS): %.1f MiB%s\n", peak / (1 << 20), t->world > 1 ? " (largest rank)" : "");
  }
  cJSON_Delete(s);
  return rc;
}

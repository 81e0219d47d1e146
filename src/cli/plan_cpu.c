/* atoll plan --accel cpu: this machine's figures. Measuring (--measure) sets the
 * process's OpenMP and OpenBLAS thread counts, which only the CLI may do. */
#include "cli/plan_cli.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void openblas_set_num_threads(int n); /* OpenBLAS's own API */

static double meminfo_total(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %lf kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024;
}

static void set_threads(int n) {
  if (n <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > 0 ? (int)c : 1;
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

/* The cpu accelerator's figures: --cpu-gflops, --measure, --bench-results (or
 * bench/results.json when present), else the catalog's measured default. */
int atoll_plan_setup_cpu(const atoll_plan_opts *o, atoll_plan_accel *a, char *note, size_t nn, atoll_err *err) {
  const char *s;
  int threads = 0;
  if ((s = atoll_plan_opt(o, "threads")) && atoll_plan_parse_int("threads", s, 0, 4096, &threads, err)) return -1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int th = threads > 0 ? threads : (cores > 0 ? (int)cores : 1);
  double mem = meminfo_total();
  if (mem > 0) a->mem_bytes = mem;
  if ((s = atoll_plan_opt(o, "cpu-gflops"))) {
    double g = 0;
    if (atoll_plan_parse_double("cpu-gflops", s, &g, err)) return -1;
    if (!(g >= ATOLL_PLAN_CPU_GFLOPS_MIN && g <= ATOLL_PLAN_CPU_GFLOPS_MAX))
      return atoll_fail(err, "--cpu-gflops: expected %g to %g (GFLOP/s), got %s", ATOLL_PLAN_CPU_GFLOPS_MIN,
                        ATOLL_PLAN_CPU_GFLOPS_MAX, s);
    atoll_plan_cpu_set(a, g * 1e9, 0);
    snprintf(note, nn, "cpu peak %.1f GFLOP/s (--cpu-gflops)", g);
  } else if (atoll_plan_opt(o, "measure")) {
    set_threads(threads);
    atoll_plan_cpu_measure m;
    if (atoll_plan_measure_cpu(&m, err)) return -1;
    atoll_plan_cpu_set(a, m.sgemm_flops, m.elem_bw);
    snprintf(note, nn, "cpu measured now with %d thread%s: sgemm %.1f GFLOP/s, elementwise %.1f GB/s", m.threads,
             m.threads == 1 ? "" : "s", m.sgemm_flops / 1e9, m.elem_bw / 1e9);
  } else {
    const char *path = atoll_plan_opt(o, "bench-results");
    double g = 0;
    int bth = 0;
    if (path) {
      if (atoll_plan_read_bench(path, &g, &bth, err)) return -1;
    } else if (access("bench/results.json", R_OK) == 0) {
      atoll_err ignore;
      if (atoll_plan_read_bench("bench/results.json", &g, &bth, &ignore)) g = 0;
      path = "bench/results.json";
    }
    if (g > 0) {
      /* scaled from the benchmark's thread count to this plan's */
      double scaled = bth > 0 ? g * th / bth : g;
      atoll_plan_cpu_set(a, scaled * 1e9, 0);
      if (bth > 0 && bth != th)
        snprintf(note, nn, "cpu peak %.1f GFLOP/s: %s's %.1f at %d thread%s, scaled to %d", scaled, path, g, bth,
                 bth == 1 ? "" : "s", th);
      else
        snprintf(note, nn, "cpu peak %.1f GFLOP/s from %s", g, path);
    } else {
      /* the catalog's figure is for 2 cores: scale per core */
      atoll_plan_cpu_set(a, a->peak_flops / 2 * th, 0);
      snprintf(note, nn, "cpu peak %.0f GFLOP/s: atoll's measured 100 GFLOP/s per core x %d (use --measure)",
               a->peak_flops / 1e9, th);
    }
  }
  return 0;
}

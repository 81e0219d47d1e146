/* bench_comm: atoll's ring all-reduce (src/comm/ring.c) against the MPI library's own
 * MPI_Allreduce, on the same buffer in the same run, with nccl-tests' columns.
 *
 *   mpirun -np 2 build/bench_comm [--min BYTES] [--max BYTES] [--factor F] [--iters N]
 *                                 [--warmup N] [--stat median|min] [--wire fp32|bf16]
 *
 * Sizes go from --min (default 8 KiB) to --max (64 MiB) by --factor (2). For each size,
 * after --warmup calls of each, --iters rounds each time one atoll_allreduce and one
 * MPI_Allreduce(MPI_IN_PLACE, ..., MPI_SUM) (interleaved, so a busy spell on a shared
 * machine hurts both). Every call starts after a barrier with the buffer refilled with
 * 1.0 (so each result is checked: every element must equal N); its time is the
 * slowest rank's. The table shows the median over the rounds (--stat min: the fastest
 * round, a steadier number where other processes share the cores: a call that loses
 * its core for a time slice takes 10-30x longer, and on a busy machine that can be
 * half of them, for either peer):
 *   time   microseconds per call
 *   algbw  size / time (GB/s, 1e9 bytes)
 *   busbw  algbw * 2 (N-1) / N: the bytes each rank moves in a bandwidth-optimal
 *          all-reduce, so it is comparable across rank counts (as in nccl-tests)
 *   ratio  atoll busbw / MPI busbw
 * --wire bf16: atoll's ring sends bfloat16 (--grad-dtype bf16; sizes, algbw and busbw
 * stay those of the float buffer, so the columns compare the time to all-reduce the same
 * floats; sums of 1.0 are exact in bf16 up to 256 ranks).
 * Output: the table on rank 0's stdout. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "comm/comm.h"
#include "core/clock.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_wire g_wire = ATOLL_WIRE_FP32;

static void fill(float *buf, size_t n) {
  for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
}

/* 0 when every element equals n. */
static size_t bad_elements(const float *buf, size_t count, int n) {
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) bad += buf[i] != (float)n;
  return bad;
}

/* One timed call; returns the slowest rank's seconds. */
static double timed(atoll_comm *c, float *buf, size_t count, int raw, size_t *bad) {
  int n = atoll_comm_size(c);
  fill(buf, count);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (raw) {
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else {
    atoll_req_wait(atoll_iallreduce_wire(c, buf, count, NULL, g_wire));
  }
  double dt = MPI_Wtime() - t0, slowest;
  MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *bad += bad_elements(buf, count, n);
  return slowest;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024.0;
  else if (*end == 'M' || *end == 'm') v *= 1024.0 * 1024.0;
  else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024.0 * 1024.0;
  return (size_t)v;
}

typedef struct {
  size_t min_bytes, max_bytes;
  int factor, iters, warmup, use_min;
} options;

/* The command line into *o; a bad option ends the job (status 2). */
static void parse_options(atoll_comm *c, int argc, char **argv, options *o) {
  *o = (options){.min_bytes = 8u << 10, .max_bytes = 64u << 20, .factor = 2, .iters = 20,
                 .warmup = 5, .use_min = 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_comm: %s needs a value\n", a);
      atoll_comm_abort(c, 2);
    }
    if (!strcmp(a, "--min")) o->min_bytes = parse_size(v);
    else if (!strcmp(a, "--max")) o->max_bytes = parse_size(v);
    else if (!strcmp(a, "--factor")) o->factor = atoi(v);
    else if (!strcmp(a, "--iters")) o->iters = atoi(v);
    else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
    else if (!strcmp(a, "--wire") && (!strcmp(v, "fp32") || !strcmp(v, "bf16")))
      g_wire = !strcmp(v, "bf16") ? ATOLL_WIRE_BF16 : ATOLL_WIRE_FP32;
    else if (!strcmp(a, "--stat") && (!strcmp(v, "median") || !strcmp(v, "min")))
      o->use_min = !strcmp(v, "min");
    else {
      fprintf(stderr, "bench_comm: unknown option %s\n", a);
      atoll_comm_abort(c, 2);
    }
    i++;
  }
  if (o->factor < 2 || o->iters < 1 || o->warmup < 0 || o->min_bytes < 4 ||
      o->max_bytes < o->min_bytes) {
    fprintf(stderr, "bench_comm: need --factor >= 2, --iters >= 1, 4 <= --min <= --max\n");
    atoll_comm_abort(c, 2);
  }
}

int main(int argc, char **argv) {
  atoll_comm *c = NULL;
  atoll_err err;
  if (atoll_comm_init(&c, &argc, &argv, &err) != 0) {
    fprintf(stderr, "bench_comm: %s\n", err.msg);
    return 1;
  }
  /* The ring tuning from this program's own environment (the library reads none):
   * ATOLL_COMM_SEGMENT (floats) and ATOLL_COMM_WINDOW, 0 or unset for the defaults. */
  const char *seg_env = getenv("ATOLL_COMM_SEGMENT"), *win_env = getenv("ATOLL_COMM_WINDOW");
  atoll_comm_set_tuning(c, seg_env ? (size_t)strtoull(seg_env, NULL, 10) : 0,
                        win_env ? atoi(win_env) : 0);
  options o;
  parse_options(c, argc, argv, &o);
  size_t min_bytes = o.min_bytes, max_bytes = o.max_bytes;
  int factor = o.factor, iters = o.iters, warmup = o.warmup, use_min = o.use_min;
  int rank = atoll_comm_rank(c), n = atoll_comm_size(c);
  float *buf = malloc(max_bytes);
  double *ta = malloc((size_t)iters * sizeof *ta), *tr = malloc((size_t)iters * sizeof *tr);
  if (!buf || !ta || !tr) {
    fprintf(stderr, "bench_comm: out of memory\n");
    atoll_comm_abort(c, 1);
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  for (int i = 0; i < vlen; i++)
    if (version[i] == '\n' || version[i] == ',') version[i] = '\0';
  if (rank == 0) {
    printf("# bench_comm: %d ranks, float sum, %s of %d rounds after %d warm-up calls\n", n,
           use_min ? "fastest" : "median", iters, warmup);
    if (seg_env || win_env)
      printf("# ATOLL_COMM_SEGMENT=%s ATOLL_COMM_WINDOW=%s\n", seg_env ? seg_env : "(default)",
             win_env ? win_env : "(default)");
    printf("# raw: MPI_Allreduce of %s; atoll's wire: %s\n", version, g_wire == ATOLL_WIRE_BF16 ? "bf16" : "fp32");
    printf("#%11s %12s %32s | %32s | %6s\n", "", "", "atoll ring all-reduce",
           "raw MPI_Allreduce", "");
    printf("#%11s %12s %10s %10s %10s | %10s %10s %10s | %6s\n", "size", "count", "time",
           "algbw", "busbw", "time", "algbw", "busbw", "ratio");
    printf("#%11s %12s %10s %10s %10s | %10s %10s %10s | %6s\n", "(B)", "(elements)", "(us)",
           "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "(GB/s)", "busbw");
  }
  size_t bad = 0;
  double worst_ratio = 1e30;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= (size_t)factor) {
    size_t count = bytes / sizeof(float);
    for (int w = 0; w < warmup; w++) {
      timed(c, buf, count, 0, &bad);
      timed(c, buf, count, 1, &bad);
    }
    for (int it = 0; it < iters; it++) {
      ta[it] = timed(c, buf, count, 0, &bad);
      tr[it] = timed(c, buf, count, 1, &bad);
    }
    double t_a = atoll_median(ta, (size_t)iters), t_r = atoll_median(tr, (size_t)iters);
    if (use_min) t_a = ta[0], t_r = tr[0]; /* sorted by atoll_median() */
    double sz = (double)(count * sizeof(float)), busf = 2.0 * (n - 1) / (double)n;
    double alg_a = sz / t_a * 1e-9, alg_r = sz / t_r * 1e-9;
    double ratio = (alg_a * busf) / (alg_r * busf);
    if (n == 1) ratio = t_r / t_a;
    if (bytes >= (1u << 20) && ratio < worst_ratio) worst_ratio = ratio;
    if (rank == 0)
      printf(" %11zu %12zu %10.1f %10.3f %10.3f | %10.1f %10.3f %10.3f | %6.3f\n",
             count * sizeof(float), count, t_a * 1e6, alg_a, alg_a * busf, t_r * 1e6, alg_r,
             alg_r * busf, ratio);
    fflush(stdout);
  }
  uint64_t bad64 = bad, all_bad = 0;
  MPI_Allreduce(&bad64, &all_bad, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (worst_ratio < 1e30) printf("# lowest ratio from 1 MiB up: %.3f\n", worst_ratio);
    printf("# results: %s\n", all_bad ? "WRONG (some elements did not sum to N)" : "all correct");
  }
  free(buf);
  free(ta);
  free(tr);
  atoll_comm_free(c);
  return all_bad ? 1 : 0;
}

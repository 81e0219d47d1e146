/* This machine's CPU figures for the planner's "cpu" accelerator:
 *   sgemm_flops  cblas_sgemm on square 1024 products (median of 7 after a warm-up),
 *                the same yardstick as bench/sgemm_peak.c (which uses 2048);
 *   elem_bw      atoll's own GELU and LayerNorm kernels, forward and backward, on a
 *                1024 x 256 activation, as bytes streamed per second (the planner's
 *                elementwise rate). Medians of 7 runs after a warm-up.
 * Both run at the caller's OpenMP/OpenBLAS thread count (the CLI sets it). */
#define _POSIX_C_SOURCE 200809L
#include "atoll/plan.h"
#include "core/clock.h"
#include "core/json_text.h"
#include "ops/ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7

int atoll_plan_measure_cpu(atoll_plan_cpu_measure *out, atoll_err *err) {
  const int S = 1024, N = 1024, C = 256; /* sgemm size S; elementwise: N rows of C */
  const size_t E = (size_t)N * C;
  size_t nmat = (size_t)S * S;
  float *A = malloc(sizeof(float) * nmat), *B = malloc(sizeof(float) * nmat), *M = malloc(sizeof(float) * nmat);
  float *x = malloc(sizeof(float) * E), *y = malloc(sizeof(float) * E), *g = malloc(sizeof(float) * E);
  float *dx = malloc(sizeof(float) * E), *st = malloc(sizeof(float) * 2 * N), *w = malloc(sizeof(float) * 4 * C);
  if (!A || !B || !M || !x || !y || !g || !dx || !st || !w) {
    free(A), free(B), free(M), free(x), free(y), free(g), free(dx), free(st), free(w);
    return atoll_fail(err, "--measure: out of memory");
  }
  for (size_t i = 0; i < nmat; i++) {
    A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
  }
  for (size_t i = 0; i < E; i++) x[i] = (float)(i % 2000) * 1e-3f - 1.0f, g[i] = 1.0f, dx[i] = 0.0f;
  for (int i = 0; i < 4 * C; i++) w[i] = 1.0f;
  double t[REPS], u[REPS];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0f, A, S, B, S, 0.0f, M, S);
  for (int r = 0; r < REPS; r++) {
    double t0 = atoll_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0f, A, S, B, S, 0.0f, M, S);
    t[r] = atoll_seconds() - t0;
  }
  /* a mix like one block's elementwise work: GELU (transcendental) and LayerNorm
   * (streaming), forward and backward */
  const atoll_ops *ops = atoll_ops_cpu();
  for (int r = -1; r < REPS; r++) {
    double t0 = atoll_seconds();
    ops->gelu_forward(y, x, E);
    ops->gelu_backward(dx, x, g, E);
    ops->layernorm_forward(y, st, st + N, x, w, w + C, N, C);
    ops->layernorm_backward(dx, w + 2 * C, w + 3 * C, g, x, w, st, st + N, N, C);
    if (r >= 0) u[r] = atoll_seconds() - t0;
  }
  out->sgemm_flops = 2.0 * S * S * S / atoll_median(t, REPS);
  /* bytes per element: GELU forward 8 + backward 12; LayerNorm forward 8 + backward 16 */
  out->elem_bw = 44.0 * E / atoll_median(u, REPS);
  out->threads = omp_get_max_threads();
  free(A), free(B), free(M), free(x), free(y), free(g), free(dx), free(st), free(w);
  return 0;
}

int atoll_plan_read_bench(const char *path, double *gflops, int *threads, atoll_err *err) {
  cJSON *j = atoll_json_read_whole(path, 1 << 20, err);
  if (!j) return -1;
  /* bench/run.sh's "peak_gflops": {"fp32": ...}, else older files' keys */
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "peak_gflops"), "fp32");
  if (!cJSON_IsNumber(v)) v = cJSON_GetObjectItemCaseSensitive(j, "sgemm_peak_gflops");
  if (!cJSON_IsNumber(v)) v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "sgemm"), "peak_gflops");
  int found = cJSON_IsNumber(v);
  double g = found ? v->valuedouble : 0.0;
  int ok = found && isfinite(g) && g >= ATOLL_PLAN_CPU_GFLOPS_MIN && g <= ATOLL_PLAN_CPU_GFLOPS_MAX;
  if (ok) *gflops = g;
  /* the thread count it was measured at: "sgemm": {"threads"} or a top-level "threads" */
  const cJSON *th = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "sgemm"), "threads");
  if (!cJSON_IsNumber(th)) th = cJSON_GetObjectItemCaseSensitive(j, "threads");
  double t = cJSON_IsNumber(th) ? th->valuedouble : 0.0;
  if (threads) *threads = t >= 1 && t <= 1e6 && t == floor(t) ? (int)t : 0;
  cJSON_Delete(j);
  if (!found) return atoll_fail(err, "%s: no peak_gflops.fp32 (or sgemm_peak_gflops, sgemm.peak_gflops) number", path);
  if (!ok)
    return atoll_fail(err, "%s: fp32 peak %g GFLOP/s is not a CPU's (expected %g to %g)", path, g,
                      ATOLL_PLAN_CPU_GFLOPS_MIN, ATOLL_PLAN_CPU_GFLOPS_MAX);
  return 0;
}

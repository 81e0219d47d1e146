/* bench_bf16_ops: one GPT training step's kernels at one shape, fp32 table against bf16
 * table, in interleaved rounds (each round times every kernel of both tables once, so a
 * loaded machine slows both alike); prints medians in milliseconds and their ratio.
 *
 *   bench_bf16_ops [--rounds R] [--batch B] [--context T] [--dim C] [--heads NH]
 *
 * Kernels: attention forward and backward, and the four matmuls of a block (qkv,
 * attention projection, fc, mlp projection) forward and backward. */
#define _POSIX_C_SOURCE 200809L
#include "ops/gemm_cpu.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *fill(size_t n, unsigned seed) {
  float *p = malloc(n * sizeof(float));
  if (!p) exit(1);
  unsigned s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = ((float)(s >> 8) / (float)(1u << 24) - 0.5f) * 0.5f;
  }
  return p;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { K_ATT_F, K_ATT_B, K_MM_F, K_MM_B, NK };
static const char *names[NK] = {"attention_fwd", "attention_bwd", "matmuls_fwd", "matmuls_bwd"};

int main(int argc, char **argv) {
  int rounds = 5, B = 8, T = 256, C = 384, NH = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    int v = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--rounds")) rounds = v;
    else if (!strcmp(argv[i], "--batch")) B = v;
    else if (!strcmp(argv[i], "--context")) T = v;
    else if (!strcmp(argv[i], "--dim")) C = v;
    else if (!strcmp(argv[i], "--heads")) NH = v;
    else {
      fprintf(stderr, "bench_bf16_ops: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (rounds < 1 || B < 1 || T < 1 || C < 1 || NH < 1 || C % NH) {
    fprintf(stderr, "bench_bf16_ops: sizes must be positive and --dim a multiple of --heads\n");
    return 2;
  }
  atoll_err err;
  if (atoll_gemm_bf16_check(&err)) {
    fprintf(stderr, "bench_bf16_ops: %s\n", err.msg);
    return 1;
  }
  const atoll_ops *tab[2] = {atoll_ops_cpu(), atoll_ops_cpu_bf16()};
  size_t N = (size_t)B * T;
  float *qkv = fill(N * 3 * C, 1), *dout = fill(N * 4 * C, 2), *out = fill(N * 4 * C, 3), *lse = fill(N * NH, 4);
  float *dqkv = fill(N * 4 * C, 5), *x = fill(N * 4 * C, 6), *w = fill((size_t)16 * C * C, 7), *b = fill(4 * C, 8);
  float *dw = fill((size_t)16 * C * C, 9), *db = fill(4 * C, 10);
  int mm_in[4] = {C, C, C, 4 * C}, mm_out[4] = {3 * C, C, 4 * C, C};
  double *t = calloc((size_t)2 * NK * rounds, sizeof(double));
  for (int r = -1; r < rounds; r++) /* round -1 warms up */
    for (int k = 0; k < NK; k++)
      for (int p = 0; p < 2; p++) {
        const atoll_ops *o = tab[p];
        double t0 = now();
        if (k == K_ATT_F) o->attention_forward(out, lse, qkv, B, T, C, NH);
        if (k == K_ATT_B) o->attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH);
        for (int m = 0; m < 4; m++) {
          if (k == K_MM_F) o->matmul_forward(out, x, w, b, (int)N, mm_in[m], mm_out[m], 0);
          if (k == K_MM_B) o->matmul_backward(dqkv, dw, db, dout, x, w, (int)N, mm_in[m], mm_out[m], 0);
        }
        if (r >= 0) t[((size_t)p * NK + k) * rounds + r] = now() - t0;
      }
  printf("{\"batch\": %d, \"context\": %d, \"dim\": %d, \"heads\": %d, \"rounds\": %d, \"ms\": {", B, T, C, NH,
         rounds);
  for (int k = 0; k < NK; k++) {
    double med[2];
    for (int p = 0; p < 2; p++) {
      double *tk = t + ((size_t)p * NK + k) * rounds;
      qsort(tk, (size_t)rounds, sizeof(double), cmp);
      med[p] = tk[rounds / 2] * 1e3;
    }
    printf("%s\n  \"%s\": {\"fp32\": %.3f, \"bf16\": %.3f, \"fp32_over_bf16\": %.2f}", k ? "," : "", names[k], med[0],
           med[1], med[0] / med[1]);
  }
  printf("}}\n");
  return 0;
}

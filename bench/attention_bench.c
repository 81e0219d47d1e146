/* bench_attention: the fp32 CPU attention (forward then backward) at one shape, GPT-2's
 * multi-head entry and the grouped-query entry, in alternating rounds; prints each
 * one's median and spread in milliseconds and an FNV-1a hash of every output bit, so
 * that two builds can be compared for speed (run their binaries in turn) and for bits.
 *
 *   bench_attention [--rounds R] [--batch B] [--context T] [--dim C] [--heads NH]
 *                   [--kv-heads NKV] [--dump FILE]
 *
 * The grouped-query call has NH query heads of C/NH channels over NKV key/value heads.
 * --dump writes the outputs as raw floats: GPT-2's out, lse, dqkv, then grouped-query's
 * out, lse, dq, dk, dv. */
#define _POSIX_C_SOURCE 200809L
#include "ops/ops.h"

#include <stdint.h>
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
    p[i] = ((float)(s >> 8) / (float)(1u << 24) - 0.5f) * 2.0f;
  }
  return p;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static uint64_t hash(uint64_t h, const float *p, size_t n, FILE *dump) {
  const unsigned char *c = (const unsigned char *)p;
  for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ c[i]) * 1099511628211ull;
  if (dump && fwrite(p, sizeof(float), n, dump) != n) exit(1);
  return h;
}

int main(int argc, char **argv) {
  int rounds = 7, B = 8, T = 256, C = 384, NH = 6, NKV = 2;
  const char *dump_path = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    int v = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--rounds")) rounds = v;
    else if (!strcmp(argv[i], "--batch")) B = v;
    else if (!strcmp(argv[i], "--context")) T = v;
    else if (!strcmp(argv[i], "--dim")) C = v;
    else if (!strcmp(argv[i], "--heads")) NH = v;
    else if (!strcmp(argv[i], "--kv-heads")) NKV = v;
    else if (!strcmp(argv[i], "--dump")) dump_path = argv[i + 1];
    else {
      fprintf(stderr, "bench_attention: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (rounds < 1 || B < 1 || T < 1 || C < 1 || NH < 1 || NKV < 1 || C % NH || NH % NKV) {
    fprintf(stderr, "bench_attention: sizes must be positive, --dim a multiple of --heads, --heads of --kv-heads\n");
    return 2;
  }
  const atoll_ops *o = atoll_ops_cpu();
  size_t N = (size_t)B * T, nk = N * (size_t)(C / NH) * NKV;
  int hs = C / NH;
  float *qkv = fill(N * 3 * C, 1), *dout = fill(N * C, 2), *out = fill(N * C, 3), *lse = fill(N * NH, 4);
  float *dqkv = fill(N * 3 * C, 5);
  float *q = fill(N * C, 6), *k = fill(nk, 7), *v = fill(nk, 8), *gout = fill(N * C, 9), *glse = fill(N * NH, 10);
  float *dq = fill(N * C, 11), *dk = fill(nk, 12), *dv = fill(nk, 13);
  double *t = calloc((size_t)2 * rounds, sizeof(double));
  for (int r = -1; r < rounds; r++) /* round -1 warms up */
    for (int p = 0; p < 2; p++) {
      double t0 = now();
      if (p == 0) {
        o->attention_forward(out, lse, qkv, B, T, C, NH);
        o->attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH);
      } else {
        o->gqa_forward(gout, glse, q, k, v, B, T, T, NH, NKV, hs);
        o->gqa_backward(dq, dk, dv, dout, q, k, v, gout, glse, B, T, NH, NKV, hs);
      }
      if (r >= 0) t[(size_t)p * rounds + r] = now() - t0;
    }
  FILE *dump = dump_path ? fopen(dump_path, "wb") : NULL;
  if (dump_path && !dump) {
    fprintf(stderr, "bench_attention: cannot write %s\n", dump_path);
    return 1;
  }
  uint64_t h1 = 1469598103934665603ull, h2 = h1;
  h1 = hash(hash(hash(h1, out, N * C, dump), lse, N * NH, dump), dqkv, N * 3 * C, dump);
  h2 = hash(hash(hash(h2, gout, N * C, dump), glse, N * NH, dump), dq, N * C, dump);
  h2 = hash(hash(h2, dk, nk, dump), dv, nk, dump);
  if (dump) fclose(dump);
  printf("{\"batch\": %d, \"context\": %d, \"dim\": %d, \"heads\": %d, \"kv_heads\": %d, \"rounds\": %d", B, T, C, NH,
         NKV, rounds);
  static const char *names[2] = {"mha_fwd_bwd", "gqa_fwd_bwd"};
  uint64_t hs2[2] = {h1, h2};
  for (int p = 0; p < 2; p++) {
    double *tp = t + (size_t)p * rounds;
    qsort(tp, (size_t)rounds, sizeof(double), cmp);
    printf(", \"%s\": {\"ms_median\": %.3f, \"ms_min\": %.3f, \"ms_max\": %.3f, \"hash\": \"%016llx\"}", names[p],
           tp[rounds / 2] * 1e3, tp[0] * 1e3, tp[rounds - 1] * 1e3, (unsigned long long)hs2[p]);
  }
  printf("}\n");
  return 0;
}

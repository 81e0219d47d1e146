/* Every op of the CUDA table (src/ops/cuda/) against the CPU table
 * (src/ops/ops_cpu.c), itself checked against double-precision references and finite
 * differences by tests/test_ops.c.
 *
 * STATUS: compiled here; NOT YET RUN ON A GPU (the session that wrote it had none).
 * One file on purpose, though long: every case shares the harness (device copies,
 * guard zones, the error measure, the double-run determinism check) and the device
 * script runs one binary; split it by op family once it has run on a GPU and its
 * harness settles (a header for the harness, a file per family).
 * Without a usable device (cudaGetDeviceCount fails or returns 0) it prints why and
 * exits 77, which ctest reports as skipped. tests/gpu/run_device.sh runs it on one.
 *
 * For each op and each shape: random inputs on the host; the CPU op on host buffers and
 * the CUDA op on device copies of the same data; the results copied back and compared.
 *  error      max |gpu - cpu| / max |cpu| over the buffer (norm-wise, as in test_ops.c;
 *             the scale is 1 when the CPU result is all zero).
 *  contract   every output buffer starts with the same random nonzero values on both
 *             sides, so an op that adds where the CPU overwrites (or the reverse) is off
 *             by the prefill, far above any tolerance.
 *  bounds     every device buffer has guard zones on both sides, checked after each case.
 *  determinism every backward op (and the reductions) runs twice on the GPU from the
 *             same inputs: the results must be bit-identical.
 * Shapes: T = 1, T not a multiple of the attention tile (32), head sizes 4 to 256
 * (every HSMAX instantiation), vocabularies up to GPT-2's 50,304, and GPT-2's width.
 *
 * Tolerances (fp32; u = 2^-24 ~ 6e-8). Both sides are float code with different
 * summation orders (and expf against the CPU's polynomial exp, both within a few u):
 *  embedding fwd/bwd   1e-6  one add per element; bwd adds in the CPU's order (expected
 *                            bit-identical; reported)
 *  gelu fwd/bwd        1e-5  a few flops and one exp per element
 *  layernorm fwd       1e-5  sums over C <= 768
 *  xent fwd            1e-5  sums of exp over V <= 50,304
 *  everything else     1e-4  matmuls (dot products up to 3072 long), attention (online
 *                            softmax against the CPU's two-pass one), backward reductions
 *  bf16 matmul         3e-2  inputs rounded to bf16 (relative 2^-9 each), fp32 accumulate
 *  tf32 matmul         1e-2  inputs rounded to tf32 (relative 2^-11 each)
 *  embedding, no wpe   0     forward is a copy (the CPU's memcpy): bit-identical
 *  memory ops          0     to_device, to_host, copy, zero: byte for byte, at offsets
 *                            and odd byte counts, against memcpy/memset on the host
 *  adamw, sgd          0     against an unfused host reference in this file (compiled with
 *                            -ffp-contract=off: each operation rounded, as the kernels'
 *                            _rn intrinsics do), over spans at offsets of a flat buffer,
 *                            lengths not multiples of the block, decay 1 and not, 3 steps;
 *                      1e-6  against the CPU table, which gcc contracts into FMAs when
 *                            built with -march=native on FMA hardware (a few ulp); the
 *                            summary says whether it was bit-identical (it is expected to
 *                            be in the device bundle, built without -march=native)
 *  sumsq               1e-12 relative to atoll_sumsq_cpu (both in double, different
 *                            orders); two GPU runs bit-identical
 *  gqa_forward         1e-4  decoding attention (T rows after Tk - T cached keys)
 *
 * --quick: the first 3 shapes only (for compute-sanitizer, which is slow).
 * --sync: synchronize after every kernel (atoll_ops_cuda(1)), so that an asynchronous
 * failure names its kernel; may be given with --quick or --bench.
 * --bench: times each op at GPT-2 124M's shapes (B 8, T 1024, C 768, 12 heads, V 50,304)
 * after a warm-up, for the next session's kernel breakdown. */
#define _POSIX_C_SOURCE 200809L

#include "atoll/atoll.h"
#include "check.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "ops/ops_cuda.h"
#include "optim/optim.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const atoll_ops *CPU, *GPU;
static atoll_rng rng;
static char cfgname[160];

/* -------------------------------------------------------------- buffers --- */
/* Host buffers (malloc) and device buffers (GPU->alloc, with guard zones) of one case,
 * released together by case_end(). */

#define MAXBUF 128
#define GUARD 32
static const float SENTINEL = -7.25e7f;

static void *hbufs[MAXBUF];
static int nh;
static struct {
  float *base; /* device, n + 2 * GUARD floats */
  size_t n;
  const char *name;
} dbufs[MAXBUF];
static int nd;

static void *hmalloc(size_t bytes) {
  if (nh == MAXBUF) {
    fprintf(stderr, "test_cuda_ops: too many host buffers\n");
    exit(2);
  }
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) exit(2);
  return hbufs[nh++] = p;
}
static float *hfloats(size_t n) { return hmalloc(n * sizeof(float)); }

/* Device copy of host floats, with guards. */
static float *dfloats(const char *name, const float *host, size_t n) {
  if (nd == MAXBUF) {
    fprintf(stderr, "test_cuda_ops: too many device buffers\n");
    exit(2);
  }
  float *base = GPU->alloc((n + 2 * GUARD) * sizeof(float));
  float guard[GUARD];
  for (int i = 0; i < GUARD; i++) guard[i] = SENTINEL;
  atoll_cuda_copy_to_device(base, guard, sizeof guard);
  atoll_cuda_copy_to_device(base + GUARD + n, guard, sizeof guard);
  atoll_cuda_copy_to_device(base + GUARD, host, n * sizeof(float));
  dbufs[nd].base = base;
  dbufs[nd].n = n;
  dbufs[nd].name = name;
  nd++;
  return base + GUARD;
}

static int32_t *dints(const int32_t *host, size_t n) {
  int32_t *d = GPU->alloc(n * sizeof(int32_t));
  atoll_cuda_copy_to_device(d, host, n * sizeof(int32_t));
  dbufs[nd].base = (float *)d;
  dbufs[nd].n = 0; /* no guards */
  dbufs[nd].name = NULL;
  nd++;
  return d;
}

/* Host copy of a device float buffer. */
static float *back(const float *dev, size_t n) {
  float *h = hfloats(n);
  atoll_cuda_copy_to_host(h, dev, n * sizeof(float));
  return h;
}

static float *copyf(const float *x, size_t n) {
  float *y = hfloats(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}

static void case_end(const char *op) {
  atoll_cuda_synchronize();
  for (int i = 0; i < nd; i++) {
    if (dbufs[i].name) {
      float g[2][GUARD];
      atoll_cuda_copy_to_host(g[0], dbufs[i].base, sizeof g[0]);
      atoll_cuda_copy_to_host(g[1], dbufs[i].base + GUARD + dbufs[i].n, sizeof g[1]);
      for (int k = 0; k < GUARD; k++)
        if (g[0][k] != SENTINEL || g[1][k] != SENTINEL) {
          fprintf(stderr, "FAIL %s [%s]: write outside device buffer %s (%zu floats), guard %s\n",
                  op, cfgname, dbufs[i].name, dbufs[i].n, g[0][k] != SENTINEL ? "before" : "after");
          check_failures++;
          break;
        }
    }
    GPU->free(dbufs[i].base);
  }
  for (int i = 0; i < nh; i++) free(hbufs[i]);
  nh = nd = 0;
}

/* ---------------------------------------------------------------- random --- */

static float *normal(size_t n, float std) {
  float *x = hfloats(n);
  for (size_t i = 0; i < n; i++) x[i] = std * atoll_rng_normal(&rng);
  return x;
}
/* nonzero values of magnitude in [0.5, 1.5], random sign */
static float *prefill(size_t n) {
  float *x = hfloats(n);
  for (size_t i = 0; i < n; i++) {
    float u = atoll_rng_uniform(&rng);
    x[i] = (atoll_rng_uniform(&rng) < 0.5f ? -1.0f : 1.0f) * (0.5f + u);
  }
  return x;
}
static int32_t *tokens(size_t n, int V) {
  int32_t *t = hmalloc(n * sizeof(int32_t));
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(atoll_rng_next(&rng) % (uint64_t)V);
  return t;
}

/* ------------------------------------------------------------ comparison --- */

typedef struct {
  char label[48];
  double worst, tol;
  int count, exact;
} stat;
static stat stats[64];
static int nstats;

static stat *stat_for(const char *label, double tol) {
  int i = 0;
  while (i < nstats && strcmp(stats[i].label, label) != 0) i++;
  if (i == nstats) {
    if (nstats == 64) return NULL;
    snprintf(stats[i].label, sizeof stats[i].label, "%s", label);
    stats[i].worst = 0;
    stats[i].exact = 1;
    nstats++;
  }
  stats[i].tol = tol;
  return &stats[i];
}

/* gpu (copied back) against cpu: max |diff| / max |cpu|. */
static double cmp(const char *label, const float *gpu, const float *cpu, size_t n, double tol) {
  double scale = 0.0, worst = 0.0;
  size_t wi = 0;
  int exact = 1;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)cpu[i]));
  if (scale == 0.0) scale = 1.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)gpu[i] - (double)cpu[i]);
    if (isnan(d)) d = INFINITY;
    if (gpu[i] != cpu[i]) exact = 0;
    if (d > worst) {
      worst = d;
      wi = i;
    }
  }
  double err = worst / scale;
  stat *s = stat_for(label, tol);
  if (s) {
    if (!(err <= s->worst)) s->worst = err;
    s->count++;
    s->exact &= exact;
  }
  if (!(err <= tol)) {
    fprintf(stderr,
            "FAIL %s [%s]: error %.3g > tol %.3g at element %zu of %zu: gpu %.9g, cpu %.9g "
            "(scale %.4g)\n",
            label, cfgname, err, tol, wi, n, (double)gpu[wi], (double)cpu[wi], scale);
    check_failures++;
  }
  return err;
}

/* Two GPU runs of the same op: must be bit-identical. */
static void same_bits(const char *label, const float *a, const float *b, size_t n) {
  if (memcmp(a, b, n * sizeof(float)) != 0) {
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    fprintf(stderr, "FAIL %s [%s]: two GPU runs differ (first at element %zu: %.9g vs %.9g)\n",
            label, cfgname, i, (double)a[i], (double)b[i]);
    check_failures++;
  }
}

/* ------------------------------------------------------------------ cases --- */

typedef struct {
  int B, T, C, NH, V;
} shape;

static void test_embedding(shape s) {
  int B = s.B, T = s.T, C = s.C, V = s.V;
  size_t N = (size_t)B * T;
  int32_t *tok = tokens(N, V);
  float *wte = normal((size_t)V * C, 1.0f), *wpe = normal((size_t)T * C, 1.0f);
  float *out = prefill(N * C);
  float *d_out = dfloats("out", out, N * C);
  GPU->embed_forward(d_out, dints(tok, N), dfloats("wte", wte, (size_t)V * C),
                     dfloats("wpe", wpe, (size_t)T * C), B, T, C);
  CPU->embed_forward(out, tok, wte, wpe, B, T, C);
  cmp("embed_forward out", back(d_out, N * C), out, N * C, 1e-6);

  float *dout = normal(N * C, 1.0f);
  float *dwte = prefill((size_t)V * C), *dwpe = prefill((size_t)T * C);
  float *g[2][2];
  for (int run = 0; run < 2; run++) {
    float *d_dwte = dfloats("dwte", dwte, (size_t)V * C), *d_dwpe = dfloats("dwpe", dwpe, (size_t)T * C);
    GPU->embed_backward(d_dwte, d_dwpe, dfloats("dout", dout, N * C), dints(tok, N), B, T, C);
    g[run][0] = back(d_dwte, (size_t)V * C);
    g[run][1] = back(d_dwpe, (size_t)T * C);
  }
  CPU->embed_backward(dwte, dwpe, dout, tok, B, T, C);
  cmp("embed_backward dwte", g[0][0], dwte, (size_t)V * C, 1e-6);
  cmp("embed_backward dwpe", g[0][1], dwpe, (size_t)T * C, 1e-6);
  same_bits("embed_backward dwte", g[0][0], g[1][0], (size_t)V * C);
  same_bits("embed_backward dwpe", g[0][1], g[1][1], (size_t)T * C);

  /* no position table (llama): wpe and dwpe NULL */
  float *out2 = prefill(N * C);
  float *d_out2 = dfloats("out", out2, N * C);
  GPU->embed_forward(d_out2, dints(tok, N), dfloats("wte", wte, (size_t)V * C), NULL, B, T, C);
  CPU->embed_forward(out2, tok, wte, NULL, B, T, C);
  cmp("embed_forward out (no wpe)", back(d_out2, N * C), out2, N * C, 0.0);
  float *dwte2 = prefill((size_t)V * C);
  float *d_dwte2 = dfloats("dwte", dwte2, (size_t)V * C);
  GPU->embed_backward(d_dwte2, NULL, dfloats("dout", dout, N * C), dints(tok, N), B, T, C);
  CPU->embed_backward(dwte2, NULL, dout, tok, B, T, C);
  cmp("embed_backward dwte (no dwpe)", back(d_dwte2, (size_t)V * C), dwte2, (size_t)V * C, 1e-6);
  case_end("embedding");
}

static void test_layernorm(shape s) {
  int N = s.B * s.T, C = s.C;
  size_t NC = (size_t)N * C;
  float *x = normal(NC, 1.0f), *w = normal(C, 1.0f), *b = normal(C, 1.0f);
  for (size_t i = 0; i < NC; i++) x[i] += 0.5f; /* a nonzero mean */
  float *out = prefill(NC), *mean = prefill(N), *rstd = prefill(N);
  float *d_out = dfloats("out", out, NC), *d_mean = dfloats("mean", mean, N),
        *d_rstd = dfloats("rstd", rstd, N), *d_x = dfloats("x", x, NC), *d_w = dfloats("w", w, C);
  GPU->layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, dfloats("b", b, C), N, C);
  CPU->layernorm_forward(out, mean, rstd, x, w, b, N, C);
  cmp("layernorm_forward out", back(d_out, NC), out, NC, 1e-5);
  cmp("layernorm_forward mean", back(d_mean, N), mean, N, 1e-5);
  cmp("layernorm_forward rstd", back(d_rstd, N), rstd, N, 1e-5);

  /* backward from the CPU's saved statistics on both sides */
  float *dout = normal(NC, 1.0f), *dx = prefill(NC), *dw = prefill(C), *db = prefill(C);
  float *d_mean2 = dfloats("mean", mean, N), *d_rstd2 = dfloats("rstd", rstd, N);
  float *g[2][3];
  for (int run = 0; run < 2; run++) {
    float *d_dx = dfloats("dx", dx, NC), *d_dw = dfloats("dw", dw, C), *d_db = dfloats("db", db, C);
    GPU->layernorm_backward(d_dx, d_dw, d_db, dfloats("dout", dout, NC), d_x, d_w, d_mean2, d_rstd2,
                            N, C);
    g[run][0] = back(d_dx, NC);
    g[run][1] = back(d_dw, C);
    g[run][2] = back(d_db, C);
  }
  CPU->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
  cmp("layernorm_backward dx", g[0][0], dx, NC, 1e-4);
  cmp("layernorm_backward dw", g[0][1], dw, C, 1e-4);
  cmp("layernorm_backward db", g[0][2], db, C, 1e-4);
  for (int k = 0; k < 3; k++)
    same_bits("layernorm_backward", g[0][k], g[1][k], k == 0 ? NC : (size_t)C);
  case_end("layernorm");
}

static void test_matmul_case(int N, int C, int OC, int with_bias, int accumulate, double tol,
                             const char *tag) {
  size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
  float *x = normal(NC, 1.0f), *w = normal(OCC, 0.1f), *bias = with_bias ? normal(OC, 1.0f) : NULL;
  float *out = prefill(NO);
  float *d_out = dfloats("out", out, NO), *d_x = dfloats("x", x, NC), *d_w = dfloats("w", w, OCC);
  GPU->matmul_forward(d_out, d_x, d_w, bias ? dfloats("bias", bias, OC) : NULL, N, C, OC, accumulate);
  CPU->matmul_forward(out, x, w, bias, N, C, OC, accumulate);
  char label[48];
  snprintf(label, sizeof label, "matmul_forward%s out", tag);
  cmp(label, back(d_out, NO), out, NO, tol);

  float *dout = normal(NO, 1.0f), *dx = prefill(NC), *dw = prefill(OCC),
        *dbias = with_bias ? prefill(OC) : NULL;
  float *g[2][3];
  for (int run = 0; run < 2; run++) {
    float *d_dx = dfloats("dx", dx, NC), *d_dw = dfloats("dw", dw, OCC);
    float *d_db = with_bias ? dfloats("dbias", dbias, OC) : NULL;
    GPU->matmul_backward(d_dx, d_dw, d_db, dfloats("dout", dout, NO), d_x, d_w, N, C, OC, accumulate);
    g[run][0] = back(d_dx, NC);
    g[run][1] = back(d_dw, OCC);
    g[run][2] = with_bias ? back(d_db, OC) : NULL;
  }
  CPU->matmul_backward(dx, dw, dbias, dout, x, w, N, C, OC, accumulate);
  snprintf(label, sizeof label, "matmul_backward%s dx", tag);
  cmp(label, g[0][0], dx, NC, tol);
  snprintf(label, sizeof label, "matmul_backward%s dw", tag);
  cmp(label, g[0][1], dw, OCC, tol);
  if (with_bias) {
    snprintf(label, sizeof label, "matmul_backward%s dbias", tag);
    cmp(label, g[0][2], dbias, OC, tol);
    same_bits("matmul_backward dbias", g[0][2], g[1][2], OC);
  }
  if (!*tag) {
    same_bits("matmul_backward dx", g[0][0], g[1][0], NC);
    same_bits("matmul_backward dw", g[0][1], g[1][1], OCC);
  }
  case_end("matmul");
}

static void test_matmul(shape s) {
  int N = s.B * s.T, C = s.C;
  /* the model's products: qkv (bias), attention projection (accumulate into the
   * residual), MLP up and down, the tied LM head (no bias) */
  test_matmul_case(N, C, 3 * C, 1, 0, 1e-4, "");
  test_matmul_case(N, C, C, 1, 1, 1e-4, "");
  test_matmul_case(N, 4 * C, C, 1, 1, 1e-4, "");
  test_matmul_case(N, C, s.V, 0, 0, 1e-4, "");
  /* reduced-precision compute modes (fp32 buffers) */
  atoll_cuda_set_matmul_precision(ATOLL_CUDA_MATMUL_TF32);
  test_matmul_case(N, C, 4 * C, 1, 0, 1e-2, " tf32");
  atoll_cuda_set_matmul_precision(ATOLL_CUDA_MATMUL_BF16);
  test_matmul_case(N, C, 4 * C, 1, 0, 3e-2, " bf16");
  atoll_cuda_set_matmul_precision(ATOLL_CUDA_MATMUL_FP32);
}

/* bf16 storage: the conversion round trip and the bf16-input product. */
static void test_bf16(shape s) {
  int N = s.B * s.T, C = s.C, OC = 3 * s.C;
  size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NO = (size_t)N * OC;
  float *x = normal(NC, 1.0f), *w = normal(OCC, 0.1f), *bias = normal(OC, 1.0f);
  uint16_t *xb = GPU->alloc(NC * 2), *wb = GPU->alloc(OCC * 2);
  float *d_x = dfloats("x", x, NC), *d_w = dfloats("w", w, OCC);
  atoll_cuda_f32_to_bf16(xb, d_x, NC);
  atoll_cuda_f32_to_bf16(wb, d_w, OCC);
  float *d_rt = dfloats("roundtrip", x, NC);
  atoll_cuda_bf16_to_f32(d_rt, xb, NC);
  cmp("bf16 round trip", back(d_rt, NC), x, NC, 4e-3); /* 2^-9 relative, scaled by max */
  float *out = prefill(NO);
  float *d_out = dfloats("out", out, NO);
  atoll_cuda_matmul_forward_bf16(d_out, xb, wb, dfloats("bias", bias, OC), N, C, OC, 0);
  CPU->matmul_forward(out, x, w, bias, N, C, OC, 0);
  cmp("matmul_forward_bf16 out", back(d_out, NO), out, NO, 3e-2);
  atoll_cuda_synchronize();
  GPU->free(xb);
  GPU->free(wb);
  case_end("bf16");
}

static void test_attention(shape s) {
  int B = s.B, T = s.T, C = s.C, NH = s.NH;
  size_t N3 = (size_t)B * T * 3 * C, NC = (size_t)B * T * C, NL = (size_t)B * NH * T;
  float *qkv = normal(N3, 1.0f), *out = prefill(NC), *lse = prefill(NL);
  float *d_qkv = dfloats("qkv", qkv, N3), *d_out = dfloats("out", out, NC),
        *d_lse = dfloats("lse", lse, NL);
  GPU->attention_forward(d_out, d_lse, d_qkv, B, T, C, NH);
  CPU->attention_forward(out, lse, qkv, B, T, C, NH);
  cmp("attention_forward out", back(d_out, NC), out, NC, 1e-4);
  cmp("attention_forward lse", back(d_lse, NL), lse, NL, 1e-4);

  /* backward from the CPU's out and lse on both sides */
  float *dout = normal(NC, 1.0f), *dqkv = prefill(N3);
  float *d_out2 = dfloats("out", out, NC), *d_lse2 = dfloats("lse", lse, NL);
  float *g[2];
  for (int run = 0; run < 2; run++) {
    float *d_dqkv = dfloats("dqkv", dqkv, N3);
    GPU->attention_backward(d_dqkv, dfloats("dout", dout, NC), d_qkv, d_out2, d_lse2, B, T, C, NH);
    g[run] = back(d_dqkv, N3);
  }
  CPU->attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH);
  /* q, k and v parts separately, so that a wrong one is named */
  static const char *part[3] = {"attention_backward dq", "attention_backward dk",
                                "attention_backward dv"};
  for (int p = 0; p < 3; p++) {
    float *gp = hfloats(NC), *cp = hfloats(NC);
    for (size_t n = 0; n < (size_t)B * T; n++) {
      memcpy(gp + n * C, g[0] + n * 3 * C + (size_t)p * C, C * sizeof(float));
      memcpy(cp + n * C, dqkv + n * 3 * C + (size_t)p * C, C * sizeof(float));
    }
    cmp(part[p], gp, cp, NC, 1e-4);
  }
  same_bits("attention_backward", g[0], g[1], N3);
  case_end("attention");
}

static void test_gelu(shape s) {
  size_t n = (size_t)s.B * s.T * 4 * s.C;
  float *x = normal(n, 3.0f), *out = prefill(n);
  x[0] = -12.0f; /* the clamps of 2u */
  if (n > 1) x[1] = 12.0f;
  float *d_x = dfloats("x", x, n), *d_out = dfloats("out", out, n);
  GPU->gelu_forward(d_out, d_x, n);
  CPU->gelu_forward(out, x, n);
  cmp("gelu_forward out", back(d_out, n), out, n, 1e-5);
  /* in place (dx == dout), as the model calls it */
  float *dout = normal(n, 1.0f);
  float *d_d = dfloats("dout/dx", dout, n);
  GPU->gelu_backward(d_d, d_x, d_d, n);
  float *dx = copyf(dout, n);
  CPU->gelu_backward(dx, x, dx, n);
  cmp("gelu_backward dx", back(d_d, n), dx, n, 1e-5);
  case_end("gelu");
}

static void test_xent(shape s) {
  int N = s.B * s.T, V = s.V;
  size_t NV = (size_t)N * V;
  float *logits = normal(NV, 2.0f);
  int32_t *tg = tokens(N, V);
  float *losses = prefill(N), *lse = prefill(N);
  float *d_logits = dfloats("logits", logits, NV), *d_losses = dfloats("losses", losses, N),
        *d_lse = dfloats("lse", lse, N);
  int32_t *d_tg = dints(tg, N);
  GPU->xent_forward(d_losses, d_lse, d_logits, d_tg, N, V);
  CPU->xent_forward(losses, lse, logits, tg, N, V);
  cmp("xent_forward losses", back(d_losses, N), losses, N, 1e-5);
  cmp("xent_forward lse", back(d_lse, N), lse, N, 1e-5);
  float dloss = 1.0f / (float)N;
  float *d_lse2 = dfloats("lse", lse, N);
  GPU->xent_backward(d_logits, d_lse2, d_tg, dloss, N, V);
  CPU->xent_backward(logits, lse, tg, dloss, N, V);
  cmp("xent_backward dlogits", back(d_logits, NV), logits, NV, 1e-4);
  case_end("xent");
}

/* ------------------------------------------------------- memory ops --- */
/* The table's memory members on one device buffer, mirrored by memcpy/memset on a
 * host copy: ranges at offsets, odd byte counts, zero-byte calls with NULL. */
static void test_memory(void) {
  snprintf(cfgname, sizeof cfgname, "memory");
  size_t n = 1000;
  float *a = normal(n, 1.0f), *b = normal(n, 1.0f);
  float *d_a = dfloats("a", a, n), *d_b = dfloats("b", b, n);
  float *src = normal(13, 1.0f);
  GPU->to_device(d_a + 7, src, 13 * sizeof(float));
  memcpy(a + 7, src, 13 * sizeof(float));
  GPU->copy(d_a + 500, d_b + 100, 301 * sizeof(float));
  memcpy(a + 500, b + 100, 301 * sizeof(float));
  GPU->zero(d_a + 200, 99 * sizeof(float));
  memset(a + 200, 0, 99 * sizeof(float));
  GPU->zero(d_a + 900, 6); /* one float and half of the next */
  memset(a + 900, 0, 6);
  GPU->copy((char *)(d_a + 950) + 1, d_b, 9); /* unaligned, odd length */
  memcpy((char *)(a + 950) + 1, b, 9);
  GPU->zero(NULL, 0);
  GPU->copy(NULL, NULL, 0);
  GPU->to_device(NULL, NULL, 0);
  GPU->to_host(NULL, NULL, 0);
  float *h = back(d_a, n);
  if (memcmp(h, a, n * sizeof(float)) != 0) {
    fprintf(stderr, "FAIL memory ops: the device buffer differs from the host mirror\n");
    check_failures++;
  }
  float *part = prefill(20), *want = copyf(part, 20);
  GPU->to_host(part + 3, d_a + 500, 5 * sizeof(float));
  memcpy(want + 3, a + 500, 5 * sizeof(float));
  if (memcmp(part, want, 20 * sizeof(float)) != 0) {
    fprintf(stderr, "FAIL memory ops: to_host of a range wrote outside it or wrong values\n");
    check_failures++;
  }
  int32_t *tok = tokens(77, 50304), *tok_back = hmalloc(77 * sizeof(int32_t));
  int32_t *d_tok = dints(tok, 77);
  GPU->to_host(tok_back, d_tok, 77 * sizeof(int32_t));
  if (memcmp(tok, tok_back, 77 * sizeof(int32_t)) != 0) {
    fprintf(stderr, "FAIL memory ops: token round trip\n");
    check_failures++;
  }
  stat_for("memory ops (bytes)", 0.0)->count++;
  case_end("memory");
}

/* --------------------------------------------------------- optimizer --- */
/* The CPU's formulas with every operation rounded on its own (this file is compiled
 * with -ffp-contract=off: tests/gpu/CMakeLists.txt). */
static void ref_adamw(float *p, const float *g, float *m, float *v, size_t n, const atoll_adamw_span *a) {
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * a->grad_scale;
    float mi = a->beta1 * m[i] + (1.0f - a->beta1) * gi;
    float vi = a->beta2 * v[i] + (1.0f - a->beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / a->bc2_sqrt + a->eps;
    p[i] = p[i] * a->decay_factor - (a->lr / a->bc1) * mi / denom;
  }
}

static void ref_sgd(float *p, const float *g, size_t n, float decay, float step) {
  for (size_t i = 0; i < n; i++) p[i] = p[i] * decay - step * g[i];
}

/* AdamW as atoll_adamw_update calls it: a flat buffer cut into two tensors (the first
 * with weight decay), three steps; p, m and v against the reference (exact) and the CPU
 * table (1e-6). */
static void test_adamw(size_t n, float grad_scale) {
  snprintf(cfgname, sizeof cfgname, "adamw n=%zu grad_scale=%g", n, (double)grad_scale);
  float *p = normal(n, 0.05f), *g = normal(n, 0.01f), *m = normal(n, 0.001f), *v = normal(n, 1e-4f);
  for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
  float *d_p = dfloats("p", p, n), *d_g = dfloats("g", g, n), *d_m = dfloats("m", m, n), *d_v = dfloats("v", v, n);
  float *rp = copyf(p, n), *rm = copyf(m, n), *rv = copyf(v, n);
  float *cp = copyf(p, n), *cm = copyf(m, n), *cv = copyf(v, n);
  size_t k = n / 3;
  for (int t = 1; t <= 3; t++) {
    atoll_adamw_span a = {.lr = 3e-3f * (float)t, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = grad_scale};
    a.bc1 = 1.0f - powf(a.beta1, (float)t);
    a.bc2_sqrt = sqrtf(1.0f - powf(a.beta2, (float)t));
    atoll_adamw_span nodecay = a;
    a.decay_factor = 1.0f - a.lr * 0.1f;
    nodecay.decay_factor = 1.0f;
    GPU->adamw(d_p, d_g, d_m, d_v, k, &a);
    GPU->adamw(d_p + k, d_g + k, d_m + k, d_v + k, n - k, &nodecay);
    ref_adamw(rp, g, rm, rv, k, &a);
    ref_adamw(rp + k, g + k, rm + k, rv + k, n - k, &nodecay);
    CPU->adamw(cp, g, cm, cv, k, &a);
    CPU->adamw(cp + k, g + k, cm + k, cv + k, n - k, &nodecay);
  }
  float *gp = back(d_p, n), *gm = back(d_m, n), *gv = back(d_v, n);
  cmp("adamw p (vs unfused reference)", gp, rp, n, 0.0);
  cmp("adamw m (vs unfused reference)", gm, rm, n, 0.0);
  cmp("adamw v (vs unfused reference)", gv, rv, n, 0.0);
  cmp("adamw p (vs CPU table)", gp, cp, n, 1e-6);
  cmp("adamw m (vs CPU table)", gm, cm, n, 1e-6);
  cmp("adamw v (vs CPU table)", gv, cv, n, 1e-6);
  case_end("adamw");
}

static void test_sgd(size_t n) {
  snprintf(cfgname, sizeof cfgname, "sgd n=%zu", n);
  float *p = normal(n, 0.05f), *g = normal(n, 0.01f);
  float *d_p = dfloats("p", p, n), *d_g = dfloats("g", g, n);
  float *rp = copyf(p, n), *cp = copyf(p, n);
  size_t k = n / 3;
  for (int t = 1; t <= 3; t++) {
    float lr = 0.02f * (float)t, decay = 1.0f - lr * 0.1f, step = lr * 0.37f;
    GPU->sgd(d_p, d_g, k, decay, step);
    GPU->sgd(d_p + k, d_g + k, n - k, 1.0f, step);
    ref_sgd(rp, g, k, decay, step);
    ref_sgd(rp + k, g + k, n - k, 1.0f, step);
    CPU->sgd(cp, g, k, decay, step);
    CPU->sgd(cp + k, g + k, n - k, 1.0f, step);
  }
  float *gp = back(d_p, n);
  cmp("sgd p (vs unfused reference)", gp, rp, n, 0.0);
  cmp("sgd p (vs CPU table)", gp, cp, n, 1e-6);
  case_end("sgd");
}

/* The sum of squares at an offset into a buffer (as dp.c calls it per tensor) against
 * the CPU's, and twice on the GPU: the same bits. */
static void test_sumsq(size_t n, float scale) {
  snprintf(cfgname, sizeof cfgname, "sumsq n=%zu scale=%g", n, (double)scale);
  float *g = normal(n + 3, scale);
  float *d_g = dfloats("g", g, n + 3);
  double gpu = GPU->sumsq(d_g + 3, n), again = GPU->sumsq(d_g + 3, n), cpu = atoll_sumsq_cpu(g + 3, n);
  double err = cpu > 0 ? fabs(gpu - cpu) / cpu : fabs(gpu);
  stat *st = stat_for("sumsq (relative)", 1e-12);
  if (st) {
    if (err > st->worst) st->worst = err;
    st->count++;
    st->exact &= gpu == cpu;
  }
  if (!(err <= 1e-12)) {
    fprintf(stderr, "FAIL sumsq [%s]: gpu %.17g, cpu %.17g (relative %.3g > 1e-12)\n", cfgname, gpu, cpu, err);
    check_failures++;
  }
  if (memcmp(&gpu, &again, sizeof gpu) != 0) {
    fprintf(stderr, "FAIL sumsq [%s]: two GPU runs differ (%.17g, %.17g)\n", cfgname, gpu, again);
    check_failures++;
  }
  case_end("sumsq");
}

static void test_optim(int quick) {
  static const size_t lengths[] = {1, 255, 256, 257, 4099, 100003, ((size_t)1 << 20) + 3};
  int count = quick ? 4 : (int)(sizeof lengths / sizeof lengths[0]);
  for (int i = 0; i < count; i++) {
    test_adamw(lengths[i], 1.0f);
    test_adamw(lengths[i], 0.37f);
    test_sgd(lengths[i]);
    test_sumsq(lengths[i], 1.0f);
  }
  test_sumsq(0, 1.0f);
  test_sumsq(4099, 1e-20f); /* squares below float's range: summed in double */
  if (!quick) test_sumsq(((size_t)1 << 22) + 1, 3.0f);
}

/* ---------------------------------------------------------------- gqa --- */
/* Decoding attention (src/model/decode.c): T new rows after Tk - T cached keys. */
static void test_gqa_case(int B, int T, int Tk, int NH, int NKV, int hs) {
  snprintf(cfgname, sizeof cfgname, "gqa B=%d T=%d Tk=%d NH=%d NKV=%d hs=%d", B, T, Tk, NH, NKV, hs);
  size_t nq = (size_t)B * T * NH * hs, nk = (size_t)B * Tk * NKV * hs, nl = (size_t)B * NH * T;
  float *q = normal(nq, 1.0f), *k = normal(nk, 1.0f), *v = normal(nk, 1.0f), *out = prefill(nq), *lse = prefill(nl);
  float *d_out = dfloats("out", out, nq), *d_lse = dfloats("lse", lse, nl);
  GPU->gqa_forward(d_out, d_lse, dfloats("q", q, nq), dfloats("k", k, nk), dfloats("v", v, nk), B, T, Tk, NH, NKV,
                   hs);
  CPU->gqa_forward(out, lse, q, k, v, B, T, Tk, NH, NKV, hs);
  cmp("gqa_forward out", back(d_out, nq), out, nq, 1e-4);
  cmp("gqa_forward lse", back(d_lse, nl), lse, nl, 1e-4);
  case_end("gqa");
}

static void test_gqa(void) {
  test_gqa_case(1, 1, 1, 2, 2, 4);     /* the first token */
  test_gqa_case(1, 1, 77, 12, 12, 64); /* one token after 76 cached (GPT-2 decoding) */
  test_gqa_case(1, 7, 40, 4, 4, 48);   /* a prompt after a cache */
  test_gqa_case(2, 33, 33, 8, 2, 32);  /* grouped key/value heads */
  test_gqa_case(1, 5, 9, 2, 1, 256);   /* the largest head */
}

/* ------------------------------------------------------------------ bench --- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Milliseconds per call of `body` over `reps` calls after 2 warm-ups. */
#define TIME_OP(label, flops, body)                                                       \
  do {                                                                                    \
    for (int w_ = 0; w_ < 2; w_++) { body; }                                              \
    atoll_cuda_synchronize();                                                             \
    double t0_ = now();                                                                   \
    for (int r_ = 0; r_ < reps; r_++) { body; }                                           \
    atoll_cuda_synchronize();                                                             \
    double ms_ = (now() - t0_) * 1e3 / reps;                                              \
    total_ms += ms_;                                                                      \
    printf("  %-34s %9.3f ms  %8.1f TFLOP/s\n", label, ms_, (flops) / (ms_ * 1e-3) / 1e12); \
  } while (0)

static int bench(void) {
  const int B = 8, T = 1024, C = 768, NH = 12, V = 50304, reps = 10;
  size_t N = (size_t)B * T;
  float *p[16];
  size_t sizes[16] = {N * C, N * C, N * 3 * C, N * 3 * C, N * 4 * C, N * 4 * C, (size_t)V * C,
                      (size_t)T * C, (size_t)4 * C * C, N * (size_t)V, (size_t)B * NH * T, N, N, N,
                      (size_t)4 * C, N};
  for (int i = 0; i < 16; i++) p[i] = GPU->alloc(sizes[i] * sizeof(float));
  float *x = p[0], *y = p[1], *qkv = p[2], *dqkv = p[3], *h4 = p[4], *dh4 = p[5], *wte = p[6],
        *wpe = p[7], *w = p[8], *logits = p[9], *lse = p[10], *mean = p[11], *rstd = p[12],
        *losses = p[13], *bias = p[14], *xlse = p[15];
  int32_t *tok = GPU->alloc(N * sizeof(int32_t));
  /* small random values so that nothing overflows */
  float *hq = malloc(N * 3 * C * sizeof(float));
  for (size_t i = 0; i < N * 3 * C; i++) hq[i] = 0.5f * atoll_rng_normal(&rng);
  atoll_cuda_copy_to_device(qkv, hq, N * 3 * C * sizeof(float));
  atoll_cuda_copy_to_device(h4, hq, N * 3 * C * sizeof(float));
  atoll_cuda_copy_to_device(x, hq, N * C * sizeof(float));
  atoll_cuda_copy_to_device(w, hq, (size_t)4 * C * C * sizeof(float)); /* 4C^2 < 3NC */
  free(hq);
  int32_t *ht = malloc(N * sizeof(int32_t)); /* random tokens: embedding backward's real load */
  for (size_t i = 0; i < N; i++) ht[i] = (int32_t)(atoll_rng_next(&rng) % (uint64_t)V);
  atoll_cuda_copy_to_device(tok, ht, N * sizeof(int32_t));
  free(ht);
  double total_ms = 0.0;
  double mm = 2.0 * N * C * 4 * C; /* one MLP matmul */
  /* causal attention: QK^T and PV over the lower triangle, 2 flops per multiply-add */
  double att = 4.0 * B * NH * ((double)T * (T + 1) / 2) * (C / NH);
  printf("bench: GPT-2 124M shapes, B %d T %d C %d heads %d V %d (ms per call, %d calls)\n", B, T,
         C, NH, V, reps);
  TIME_OP("embed_forward", 0, GPU->embed_forward(x, tok, wte, wpe, B, T, C));
  TIME_OP("embed_backward", 0, GPU->embed_backward(wte, wpe, x, tok, B, T, C));
  TIME_OP("layernorm_forward", 0, GPU->layernorm_forward(y, mean, rstd, x, bias, bias, (int)N, C));
  TIME_OP("layernorm_backward", 0,
          GPU->layernorm_backward(dh4, bias, bias, y, x, bias, mean, rstd, (int)N, C));
  TIME_OP("matmul_forward fc (fp32)", mm, GPU->matmul_forward(h4, x, w, bias, (int)N, C, 4 * C, 0));
  TIME_OP("matmul_backward fc (fp32)", 2 * mm,
          GPU->matmul_backward(dh4, w, bias, h4, x, w, (int)N, C, 4 * C, 0));
  atoll_cuda_set_matmul_precision(ATOLL_CUDA_MATMUL_TF32);
  TIME_OP("matmul_forward fc (tf32)", mm, GPU->matmul_forward(h4, x, w, bias, (int)N, C, 4 * C, 0));
  atoll_cuda_set_matmul_precision(ATOLL_CUDA_MATMUL_BF16);
  TIME_OP("matmul_forward fc (bf16 compute)", mm,
          GPU->matmul_forward(h4, x, w, bias, (int)N, C, 4 * C, 0));
  atoll_cuda_set_matmul_precision(ATOLL_CUDA_MATMUL_FP32);
  TIME_OP("matmul_forward lm head (fp32)", 2.0 * N * C * V,
          GPU->matmul_forward(logits, x, wte, NULL, (int)N, C, V, 0));
  TIME_OP("attention_forward", att, GPU->attention_forward(y, lse, qkv, B, T, C, NH));
  TIME_OP("attention_backward", 2.5 * att,
          GPU->attention_backward(dqkv, x, qkv, y, lse, B, T, C, NH));
  TIME_OP("gelu_forward", 0, GPU->gelu_forward(dh4, h4, N * 4 * C));
  TIME_OP("gelu_backward", 0, GPU->gelu_backward(dh4, h4, dh4, N * 4 * C));
  TIME_OP("xent_forward", 0, GPU->xent_forward(losses, xlse, logits, tok, (int)N, V));
  TIME_OP("xent_backward", 0, GPU->xent_backward(logits, xlse, tok, 1.0f / N, (int)N, V));
  /* the optimizer over GPT-2 124M's parameters (zeros: the time, not the values) */
  const size_t P = 124475904;
  float *pp = GPU->alloc(P * sizeof(float)), *pg = GPU->alloc(P * sizeof(float)),
        *pm = GPU->alloc(P * sizeof(float)), *pv = GPU->alloc(P * sizeof(float));
  atoll_adamw_span a = {.lr = 1e-3f, .decay_factor = 1.0f, .beta1 = 0.9f, .beta2 = 0.95f, .bc1 = 0.1f,
                        .bc2_sqrt = 0.2f, .eps = 1e-8f, .grad_scale = 1.0f};
  TIME_OP("adamw (124M parameters)", 0, GPU->adamw(pp, pg, pm, pv, P, &a));
  TIME_OP("sumsq (124M parameters)", 0, (void)GPU->sumsq(pg, P));
  GPU->free(pp);
  GPU->free(pg);
  GPU->free(pm);
  GPU->free(pv);
  printf("bench: total of the rows above %.3f ms (not a training step: a row per op kind)\n",
         total_ms);
  for (int i = 0; i < 16; i++) GPU->free(p[i]);
  GPU->free(tok);
  return 0;
}

/* ------------------------------------------------------------------- main --- */

int main(int argc, char **argv) {
  int ndev = atoll_cuda_device_count();
  if (ndev <= 0) {
    printf("test_cuda_ops: no CUDA device (cudaGetDeviceCount failed or returned 0): skipped\n");
    return 77;
  }
  char name[256];
  atoll_cuda_device_name(0, name, sizeof name);
  printf("test_cuda_ops: device 0 of %d: %s\n", ndev, name);
  int bench_mode = 0, quick = 0, sync = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--bench") == 0) bench_mode = 1;
    else if (strcmp(argv[i], "--quick") == 0) quick = 1; /* first 3 shapes (sanitizer runs) */
    else if (strcmp(argv[i], "--sync") == 0) sync = 1;
    else {
      fprintf(stderr, "test_cuda_ops: unknown option %s (--bench, --quick, --sync)\n", argv[i]);
      return 2;
    }
  }
  CPU = atoll_ops_cpu();
  GPU = atoll_ops_cuda(sync);
  atoll_rng_seed(&rng, 20240606);
  if (bench_mode) return bench();

  static const shape shapes[] = {
      {1, 1, 8, 2, 5},        /* T = 1, head size 4 */
      {2, 37, 48, 4, 50},     /* T not a multiple of the tile, head size 12 */
      {3, 64, 64, 1, 257},    /* T a multiple of the tile, head size 64 */
      {2, 100, 128, 2, 1000}, /* head size 64, ragged last tile */
      {1, 129, 256, 2, 300},  /* head size 128, one row in the last tile */
      {1, 70, 256, 1, 64},    /* head size 256 */
      {2, 33, 96, 2, 50304},  /* head size 48; GPT-2's padded vocabulary */
      {2, 256, 768, 12, 2048} /* GPT-2's width and heads */
  };
  int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  if (quick) nshapes = 3;
  /* the members --device cuda added: memory, optimizer, decoding attention */
  test_memory();
  test_optim(quick);
  test_gqa();
  printf("  memory, optimizer and gqa checks done (%d failures so far)\n", check_failures);
  fflush(stdout);
  for (int i = 0; i < nshapes; i++) {
    shape s = shapes[i];
    snprintf(cfgname, sizeof cfgname, "B=%d T=%d C=%d NH=%d V=%d", s.B, s.T, s.C, s.NH, s.V);
    test_embedding(s);
    test_layernorm(s);
    test_matmul(s);
    test_attention(s);
    test_gelu(s);
    test_xent(s);
    if (i == 1 || i == nshapes - 1) test_bf16(s);
    printf("  shape %-40s done (%d failures so far)\n", cfgname, check_failures);
    fflush(stdout);
  }

  printf("\n%-36s %10s %10s %6s %s\n", "check", "worst", "tol", "cases", "bit-identical to CPU");
  for (int i = 0; i < nstats; i++)
    printf("%-36s %10.3g %10.3g %6d %s\n", stats[i].label, stats[i].worst, stats[i].tol,
           stats[i].count, stats[i].exact ? "yes" : "no");
  printf("test_cuda_ops: %s\n", check_failures ? "FAILED" : "all ops match the CPU table");
  CHECK_DONE();
}

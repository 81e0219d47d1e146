/* The bf16 kernels added for speed (src/ops/attention_bf16.c, src/ops/gemm_cpu.c):
 *  - atoll_gemm_bf16_batch and _bits on bf16 inputs equal a double-precision product of
 *    the same bf16 values to fp32 accumulation error: batched, every transpose, beta 0
 *    and 1, alpha, bias, strided C;
 *  - two threads running bf16 products at once get the bits of one thread running them
 *    in turn (no lock around execution any more);
 *  - bf16 attention forward (out, lse) and backward (dqkv) against the fp32 kernels
 *    within bf16 tolerance and not equal to them, at T not a multiple of anything, and
 *    with more heads than one group (several batched products per call); repeatable.
 * Exits 77 where bf16 cannot run. */
#include "check.h"
#include "core/rng.h"
#include "ops/gemm_cpu.h"
#include "ops/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_rng rng;

static float *randn(size_t n, float scale) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = atoll_rng_normal(&rng) * scale;
  return p;
}

static uint16_t *to_bits(const float *x, size_t n) {
  uint16_t *b = malloc(n * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) b[i] = atoll_bf16_from_f32(x[i]);
  return b;
}

static double rel_err(const float *x, const float *y, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)x[i] - y[i]);
    num = d > num ? d : num;
    den = fabs(y[i]) > den ? fabs(y[i]) : den;
  }
  return den > 0 ? num / den : num;
}

/* batch x (C = alpha op(A) op(B) + bias + beta C) in double, on bf16 bits */
static void ref_batch(int batch, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                      long long sa, const uint16_t *B, int ldb, long long sb, float beta, float *C, int ldc,
                      long long sc, const float *bias) {
  for (int q = 0; q < batch; q++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = 0;
        for (int k = 0; k < K; k++) {
          float a = atoll_bf16_to_f32(ta ? A[q * sa + (size_t)k * lda + i] : A[q * sa + (size_t)i * lda + k]);
          float b = atoll_bf16_to_f32(tb ? B[q * sb + (size_t)j * ldb + k] : B[q * sb + (size_t)k * ldb + j]);
          s += (double)a * b;
        }
        float *c = C + q * sc + (size_t)i * ldc + j;
        *c = (float)(alpha * s + (bias ? bias[j] : 0.0) + beta * *c);
      }
}

static void test_batch(void) {
  int shapes[][4] = {{1, 37, 29, 61}, {3, 64, 50, 64}, {2, 5, 300, 17}}; /* batch M N K */
  for (int s = 0; s < 3; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int beta = 0; beta < 2; beta++) {
          int bt = shapes[s][0], M = shapes[s][1], N = shapes[s][2], K = shapes[s][3], ldc = N + 2 * (s == 0);
          int lda = ta ? M : K, ldb = tb ? K : N, with_bias = (s + ta + beta) % 2;
          long long sa = (long long)M * K, sb = (long long)K * N, sc = (long long)M * ldc;
          float alpha = s == 1 ? 0.125f : 1.0f;
          float *A = randn((size_t)bt * sa, 1.0f), *B = randn((size_t)bt * sb, 1.0f);
          float *C = randn((size_t)bt * sc, 1.0f), *R = malloc((size_t)bt * sc * sizeof(float));
          float *bias = with_bias ? randn((size_t)N, 1.0f) : NULL;
          uint16_t *a = to_bits(A, (size_t)bt * sa), *b = to_bits(B, (size_t)bt * sb);
          memcpy(R, C, (size_t)bt * sc * sizeof(float));
          ref_batch(bt, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, (float)beta, R, ldc, sc, bias);
          if (bt == 1)
            atoll_gemm_bf16_bits(ta, tb, M, N, K, alpha, a, lda, b, ldb, (float)beta, C, ldc, bias);
          else
            atoll_gemm_bf16_batch(bt, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, (float)beta, C, ldc, sc, bias);
          double e = rel_err(C, R, (size_t)bt * sc);
          if (!(e <= 1e-5))
            fprintf(stderr, "batch %d M=%d N=%d K=%d ta=%d tb=%d beta=%d bias=%d: error %.3g\n", bt, M, N, K, ta, tb,
                    beta, with_bias, e);
          CHECK(e <= 1e-5);
          free(A), free(B), free(C), free(R), free(bias), free(a), free(b);
        }
}

/* two threads, each running the same list of products into its own outputs */
typedef struct {
  const float *A, *B;
  float *C[4];
} job;

static void products(job *j) {
  int shapes[4][3] = {{256, 384, 384}, {128, 1152, 384}, {256, 256, 64}, {64, 96, 700}};
  for (int rep = 0; rep < 5; rep++)
    for (int s = 0; s < 4; s++)
      atoll_gemm_bf16(0, 1, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, j->A, shapes[s][2], j->B, shapes[s][2],
                      0.0f, j->C[s], shapes[s][1]);
}

static void *thread_main(void *arg) {
  products(arg);
  return NULL;
}

static void test_threads(void) {
  size_t n = (size_t)1152 * 700;
  float *A = randn(n, 1.0f), *B = randn(n, 1.0f);
  job ref = {A, B, {0}}, j1 = {A, B, {0}}, j2 = {A, B, {0}};
  for (int s = 0; s < 4; s++) {
    ref.C[s] = calloc(n, sizeof(float));
    j1.C[s] = calloc(n, sizeof(float));
    j2.C[s] = calloc(n, sizeof(float));
  }
  products(&ref);
  pthread_t t1, t2;
  CHECK(pthread_create(&t1, NULL, thread_main, &j1) == 0);
  CHECK(pthread_create(&t2, NULL, thread_main, &j2) == 0);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  int same = 1;
  for (int s = 0; s < 4; s++)
    same &= !memcmp(ref.C[s], j1.C[s], n * sizeof(float)) && !memcmp(ref.C[s], j2.C[s], n * sizeof(float));
  CHECK(same);
  for (int s = 0; s < 4; s++) free(ref.C[s]), free(j1.C[s]), free(j2.C[s]);
  free(A), free(B);
}

static void test_attention(int B, int T, int C, int NH) {
  const atoll_ops *f = atoll_ops_cpu(), *h = atoll_ops_cpu_bf16();
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
  float *qkv = randn(nq, 1.0f), *dout = randn(no, 1.0f);
  float *o32 = calloc(no, 4), *o16 = calloc(no, 4), *l32 = calloc(nl, 4), *l16 = calloc(nl, 4);
  float *d32 = calloc(nq, 4), *d16 = calloc(nq, 4), *again = calloc(nq, 4);
  f->attention_forward(o32, l32, qkv, B, T, C, NH);
  h->attention_forward(o16, l16, qkv, B, T, C, NH);
  /* backward of each from the same (fp32) forward results: the backward's own error */
  f->attention_backward(d32, dout, qkv, o32, l32, B, T, C, NH);
  h->attention_backward(d16, dout, qkv, o32, l32, B, T, C, NH);
  h->attention_backward(again, dout, qkv, o32, l32, B, T, C, NH);
  double eo = rel_err(o16, o32, no), el = rel_err(l16, l32, nl);
  /* dq, dk, dv parts separately, their scales differ; but at T = 1 the true dq and dk
     are zero (one key: the softmax is constant), so there the scale is dv's */
  double eq = 0, ek = 0, ev = 0, all = 0;
  for (size_t i = 0; i < nq; i++) all = fabs(d32[i]) > all ? fabs(d32[i]) : all;
  for (int part = 0; part < 3; part++) {
    double num = 0, den = 0;
    for (size_t r = 0; r < (size_t)B * T; r++)
      for (int c = 0; c < C; c++) {
        size_t i = r * 3 * C + (size_t)part * C + c;
        double d = fabs((double)d16[i] - d32[i]);
        num = d > num ? d : num;
        den = fabs(d32[i]) > den ? fabs(d32[i]) : den;
      }
    if (T == 1) den = all;
    *(part == 0 ? &eq : part == 1 ? &ek : &ev) = num / den;
  }
  printf("attention B=%d T=%d C=%d NH=%d bf16 vs fp32: out %.3g, lse %.3g, dq %.3g, dk %.3g, dv %.3g\n", B, T, C, NH,
         eo, el, eq, ek, ev);
  CHECK(eo < 2e-2 && el < 2e-2 && eq < 3e-2 && ek < 3e-2 && ev < 3e-2);
  CHECK(eo > 1e-6 && eq > 1e-6 && ev > 1e-6); /* bf16 really ran */
  CHECK(!memcmp(d16, again, nq * sizeof(float)));
  int finite = 1;
  for (size_t i = 0; i < nq; i++) finite &= isfinite(d16[i]);
  CHECK(finite);
  free(qkv), free(dout), free(o32), free(o16), free(l32), free(l16), free(d32), free(d16), free(again);
}

int main(void) {
  atoll_rng_seed(&rng, 20261201);
  atoll_err err;
  if (atoll_gemm_bf16_check(&err)) {
    printf("bf16 skipped: %s\n", err.msg);
    return 77;
  }
  test_batch();
  test_threads();
  test_attention(2, 70, 96, 3);   /* T not a multiple of 16 or 64 */
  test_attention(3, 512, 256, 4); /* 12 heads of 512^2 scores: more than one group */
  test_attention(1, 1, 32, 2);    /* a single position */
  CHECK_DONE();
}

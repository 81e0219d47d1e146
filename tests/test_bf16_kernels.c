/* The bf16 kernels added for speed (src/ops/gemm_cpu.c, src/ops/ops_cpu.c):
 *  - atoll_gemm_bf16_batch and _bits on bf16 inputs equal a double-precision product of
 *    the same bf16 values to fp32 accumulation error: batched, every transpose, beta 0
 *    and 1, alpha, bias, strided C;
 *  - two threads running bf16 products at once get the bits of one thread running them
 *    in turn (no lock around execution any more);
 *  - the bf16 table's matmul (inputs rounded once, bias fused into the product, dout
 *    rounded in the pass that sums dbias) equals the same products done one by one
 *    through atoll_gemm_bf16 plus an fp32 bias, to fp32 rounding: with and without bias,
 *    accumulating or not, and a shape whose sizes are not multiples of anything.
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

/* the bf16 table's matmul against atoll_gemm_bf16 product by product (the path of the
   previous implementation): only the order of fp32 additions may differ */
static void test_matmul_bf16(void) {
  const atoll_ops *h = atoll_ops_cpu_bf16();
  int shapes[][3] = {{256, 384, 1152}, {77, 45, 130}}; /* N C OC */
  for (int s = 0; s < 2; s++)
    for (int variant = 0; variant < 4; variant++) {
      int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2], with_bias = variant & 1, acc = variant >> 1;
      float *x = randn((size_t)N * C, 1.0f), *w = randn((size_t)OC * C, 0.05f), *b = randn(OC, 0.5f);
      float *dout = randn((size_t)N * OC, 1.0f);
      float *o = randn((size_t)N * OC, 1.0f), *r = malloc((size_t)N * OC * sizeof(float));
      memcpy(r, o, (size_t)N * OC * sizeof(float));
      h->matmul_forward(o, x, w, with_bias ? b : NULL, N, C, OC, acc);
      atoll_gemm_bf16(0, 1, N, OC, C, 1.0f, x, C, w, C, acc ? 1.0f : 0.0f, r, OC);
      if (with_bias)
        for (int i = 0; i < N; i++)
          for (int j = 0; j < OC; j++) r[(size_t)i * OC + j] += b[j];
      double ef = rel_err(o, r, (size_t)N * OC);
      float *dx = randn((size_t)N * C, 1.0f), *dw = randn((size_t)OC * C, 1.0f), *db = randn(OC, 1.0f);
      float *rdx = malloc((size_t)N * C * 4), *rdw = malloc((size_t)OC * C * 4), *rdb = malloc((size_t)OC * 4);
      memcpy(rdx, dx, (size_t)N * C * 4), memcpy(rdw, dw, (size_t)OC * C * 4), memcpy(rdb, db, (size_t)OC * 4);
      h->matmul_backward(dx, dw, with_bias ? db : NULL, dout, x, w, N, C, OC, acc);
      atoll_gemm_bf16(0, 0, N, C, OC, 1.0f, dout, OC, w, C, acc ? 1.0f : 0.0f, rdx, C);
      atoll_gemm_bf16(1, 0, OC, C, N, 1.0f, dout, OC, x, C, 1.0f, rdw, C);
      int same_db = 1;
      if (with_bias) /* a plain fp32 column sum in row order, as at fp32 */
        for (int j = 0; j < OC; j++) {
          float acc_j = 0.0f;
          for (int i = 0; i < N; i++) acc_j += dout[(size_t)i * OC + j];
          same_db &= db[j] == rdb[j] + acc_j;
        }
      else
        same_db = !memcmp(db, rdb, (size_t)OC * 4); /* untouched */
      double edx = rel_err(dx, rdx, (size_t)N * C), edw = rel_err(dw, rdw, (size_t)OC * C);
      if (!(ef < 1e-6 && edx < 1e-6 && edw < 1e-6 && same_db))
        fprintf(stderr, "matmul N=%d C=%d OC=%d bias=%d acc=%d: forward %.3g dx %.3g dW %.3g dbias same %d\n", N,
                C, OC, with_bias, acc, ef, edx, edw, same_db);
      CHECK(ef < 1e-6 && edx < 1e-6 && edw < 1e-6 && same_db);
      free(x), free(w), free(b), free(dout), free(o), free(r), free(dx), free(dw), free(db), free(rdx), free(rdw);
      free(rdb);
    }
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
  test_matmul_bf16();
  CHECK_DONE();
}

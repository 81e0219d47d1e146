/* bf16 mixed precision and the CPU matrix engine (src/ops/gemm_cpu.c):
 *  - bf16 rounding: round to nearest even, ties, NaN, infinities, overflow;
 *  - atoll_gemm_bf16 equals a double-precision product of the bf16-rounded inputs to
 *    fp32 accumulation error (so the engine really rounds the inputs and nothing else),
 *    for every transpose, beta 0 and 1, alpha != 1 and a strided C; bit-identical when
 *    repeated;
 *  - the fp32 engines (OpenBLAS and oneDNN sgemm) agree to fp32 error;
 *  - the bf16 ops table: matmul forward/backward within bf16 tolerance of the fp32
 *    table (and not equal to it: bf16 is really used), every other kernel the fp32 one;
 *  - a whole model's loss and gradients at bf16 against fp32;
 *  - the choices for other processors (atoll_cpu_override): bf16 refused in one line
 *    without AVX512_BF16/AMX, OPENBLAS_CORETYPE SkylakeX / Haswell / none.
 * Where bf16 cannot run (no oneDNN, or no AVX512_BF16/AMX) the bf16 parts are skipped
 * (exit 77 after the fp32 checks). */
#include "check.h"
#include "core/rng.h"
#include "model/model.h"
#include "ops/cpu_features.h"
#include "ops/gemm_cpu.h"
#include "ops/attention_bf16.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_rng rng;

static float *randn(size_t n, float scale) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = atoll_rng_normal(&rng) * scale;
  return p;
}

static float bf16_round(float x) { return atoll_bf16_to_f32(atoll_bf16_from_f32(x)); }

static void test_rounding(void) {
  /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1) */
  CHECK(bf16_round(1.0f + 0x1p-8f) == 1.0f);
  CHECK(bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f); /* halfway, odd below: up */
  CHECK(bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f); /* above halfway: up */
  CHECK(bf16_round(-2.5f) == -2.5f);
  CHECK(bf16_round(INFINITY) == INFINITY && bf16_round(-INFINITY) == -INFINITY);
  CHECK(isnan(bf16_round(NAN)));
  CHECK(isinf(bf16_round(3.4e38f))); /* above bf16's largest finite value: rounds to inf */
  int worse = 0; /* 8 significant bits, round to nearest: relative error at most 2^-8 */
  for (int i = 0; i < 1000; i++) {
    float x = atoll_rng_normal(&rng) * 100.0f;
    worse += !(fabsf(bf16_round(x) - x) <= fabsf(x) * 0x1p-8f);
  }
  CHECK(worse == 0);
}

/* C = alpha op(A) op(B) + beta C in double, on bf16-rounded A and B when round */
static void ref_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc, int round) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) {
        float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
        float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
        if (round) a = bf16_round(a), b = bf16_round(b);
        s += (double)a * b;
      }
      C[(size_t)i * ldc + j] = (float)(alpha * s + beta * C[(size_t)i * ldc + j]);
    }
}

/* max |x - y| / max |y| */
static double rel_err(const float *x, const float *y, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)x[i] - y[i]);
    num = d > num ? d : num;
    den = fabs(y[i]) > den ? fabs(y[i]) : den;
  }
  return den > 0 ? num / den : num;
}

typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                        int);

/* every transpose, beta 0/1, alpha, a C row stride wider than N */
static void test_gemm(const char *what, gemm_fn gemm, int round, double tol) {
  int shapes[][3] = {{37, 29, 61}, {128, 96, 384}, {5, 300, 17}};
  for (int s = 0; s < 3; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int beta = 0; beta < 2; beta++) {
          int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ldc = N + 3 * (s == 1);
          int lda = ta ? M : K, ldb = tb ? K : N;
          float alpha = s == 2 ? 0.37f : 1.0f;
          float *A = randn((size_t)M * K, 1.0f), *B = randn((size_t)K * N, 1.0f);
          float *C = randn((size_t)M * ldc, 1.0f), *R = malloc((size_t)M * ldc * sizeof(float));
          float *C2 = malloc((size_t)M * ldc * sizeof(float));
          memcpy(R, C, (size_t)M * ldc * sizeof(float));
          memcpy(C2, C, (size_t)M * ldc * sizeof(float));
          ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, (float)beta, R, ldc, round);
          gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, (float)beta, C, ldc);
          gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, (float)beta, C2, ldc);
          double e = rel_err(C, R, (size_t)M * ldc);
          if (!(e <= tol))
            fprintf(stderr, "%s: M=%d N=%d K=%d ta=%d tb=%d beta=%d: error %.3g > %.3g\n", what, M, N, K, ta, tb,
                    beta, e, tol);
          CHECK(e <= tol);
          CHECK(memcmp(C, C2, (size_t)M * ldc * sizeof(float)) == 0); /* deterministic */
          free(A), free(B), free(C), free(R), free(C2);
        }
}

/* an empty sum (K = 0): C = beta C, for every engine (oneDNN 2.6's sgemm alone left C) */
static void test_gemm_empty(const char *what, gemm_fn gemm) {
  for (int beta = 0; beta < 3; beta++) {
    float A[1] = {1.0f}, B[1] = {1.0f}, C[6], R[6];
    for (int i = 0; i < 6; i++) C[i] = R[i] = (float)(i + 1);
    for (int i = 0; i < 6; i++) R[i] = beta ? (float)beta * R[i] : 0.0f;
    gemm(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, (float)beta, C, 3);
    if (memcmp(C, R, sizeof C) != 0) fprintf(stderr, "%s: K = 0, beta %d: C is not beta C\n", what, beta);
    CHECK(memcmp(C, R, sizeof C) == 0);
  }
}

/* the bf16 table's products against the fp32 table's */
static void test_ops_tables(void) {
  const atoll_ops *f = atoll_ops_cpu(), *h = atoll_ops_cpu_bf16();
  CHECK(h->matmul_forward != f->matmul_forward && h->matmul_backward != f->matmul_backward);
  /* attention has its own bf16 kernels where the processor has usable AMX-BF16 (test_bf16_attention) */
  CHECK((h->attention_forward == f->attention_forward) == !atoll_attention_bf16_available() &&
        (h->attention_backward == f->attention_backward) == !atoll_attention_bf16_available());
  CHECK(h->layernorm_forward == f->layernorm_forward && h->gelu_forward == f->gelu_forward &&
        h->xent_forward == f->xent_forward && h->embed_forward == f->embed_forward && h->alloc == f->alloc);
  int N = 256, C = 384, OC = 1152;
  float *x = randn((size_t)N * C, 1.0f), *w = randn((size_t)OC * C, 0.02f), *b = randn(OC, 0.1f);
  float *dout = randn((size_t)N * OC, 1.0f);
  float *o32 = calloc((size_t)N * OC, 4), *o16 = calloc((size_t)N * OC, 4);
  f->matmul_forward(o32, x, w, b, N, C, OC, 0);
  h->matmul_forward(o16, x, w, b, N, C, OC, 0);
  double ef = rel_err(o16, o32, (size_t)N * OC);
  float *dx32 = calloc((size_t)N * C, 4), *dx16 = calloc((size_t)N * C, 4);
  float *dw32 = calloc((size_t)OC * C, 4), *dw16 = calloc((size_t)OC * C, 4);
  float *db32 = calloc(OC, 4), *db16 = calloc(OC, 4);
  f->matmul_backward(dx32, dw32, db32, dout, x, w, N, C, OC, 0);
  h->matmul_backward(dx16, dw16, db16, dout, x, w, N, C, OC, 0);
  double edx = rel_err(dx16, dx32, (size_t)N * C), edw = rel_err(dw16, dw32, (size_t)OC * C);
  printf("bf16 vs fp32 table: forward %.3g, dx %.3g, dW %.3g, dbias %.3g (relative to the largest value)\n", ef, edx,
         edw, rel_err(db16, db32, OC));
  /* products of K terms with inputs rounded to 8 significant bits: errors ~ 2^-8 of a term,
     growing like sqrt(K) in a sum of random signs; well under 2% of the largest output */
  CHECK(ef < 2e-2 && edx < 2e-2 && edw < 2e-2);
  CHECK(ef > 1e-6 && edx > 1e-6 && edw > 1e-6); /* bf16 really ran */
  CHECK(memcmp(db16, db32, OC * sizeof(float)) == 0); /* the bias gradient is a plain fp32 sum */
  free(x), free(w), free(b), free(dout), free(o32), free(o16), free(dx32), free(dx16), free(dw32), free(dw16);
  free(db32), free(db16);
}

/* one model, fp32 then bf16 on the same weights and batch */
static void test_model(void) {
  atoll_shape s = {.layers = 2, .heads = 4, .dim = 128, .context = 64, .vocab = 256};
  atoll_model *m;
  atoll_err err;
  int B = 4, T = 64;
  CHECK_OK(atoll_model_create(&m, &s, B, T, &err), &err);
  CHECK_OK(atoll_model_init_weights(m, 7), &err);
  int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
  for (int i = 0; i < B * T; i++) in[i] = (int32_t)(atoll_rng_next(&rng) % 256), tg[i] = (int32_t)(atoll_rng_next(&rng) % 256);
  size_t P = atoll_model_layout(m)->nparams;
  float *g32 = malloc(P * sizeof(float));
  atoll_model_zero_grads(m);
  float l32 = atoll_model_forward(m, in, tg, B, T);
  atoll_model_backward(m, 1.0f);
  memcpy(g32, atoll_model_grads(m), P * sizeof(float));
  atoll_model_set_ops(m, atoll_ops_cpu_bf16());
  atoll_model_zero_grads(m);
  float l16 = atoll_model_forward(m, in, tg, B, T);
  atoll_model_backward(m, 1.0f);
  const float *g16 = atoll_model_grads(m);
  double dot = 0, n32 = 0, n16 = 0;
  for (size_t i = 0; i < P; i++) dot += (double)g32[i] * g16[i], n32 += (double)g32[i] * g32[i], n16 += (double)g16[i] * g16[i];
  double cosine = dot / sqrt(n32 * n16), ratio = sqrt(n16 / n32);
  printf("model: loss fp32 %.6f bf16 %.6f; gradient cosine %.6f, norm ratio %.4f\n", l32, l16, cosine, ratio);
  CHECK(fabsf(l16 - l32) < 2e-3f * l32);
  CHECK(cosine > 0.999 && fabs(ratio - 1) < 0.01);
  free(in), free(tg), free(g32);
  atoll_model_destroy(m);
}

/* choices for processors this one is not: the refusal, the OpenBLAS core type */
static void test_other_cpus(void) {
  atoll_cpu_features none = {.model = "Test CPU without bf16", .avx2 = 1, .fma = 1, .avx512 = 1};
  atoll_cpu_override(&none);
  atoll_err err = {{0}};
  CHECK(atoll_gemm_bf16_check(&err) != 0);
  CHECK(strstr(err.msg, "--precision bf16") && strstr(err.msg, "Test CPU without bf16") && !strchr(err.msg, '\n'));
  printf("refusal: %s\n", err.msg);
  CHECK(atoll_openblas_better_core_for("Prescott") && !strcmp(atoll_openblas_better_core_for("Prescott"), "SkylakeX"));
  CHECK(atoll_openblas_better_core_for("SkylakeX") == NULL);
  atoll_cpu_features avx2 = {.model = "AVX2 only", .avx2 = 1, .fma = 1};
  atoll_cpu_override(&avx2);
  CHECK(atoll_openblas_better_core_for("Nehalem") && !strcmp(atoll_openblas_better_core_for("Nehalem"), "Haswell"));
  CHECK(atoll_openblas_better_core_for("Haswell") == NULL);
  atoll_cpu_features old = {.model = "SSE only"};
  atoll_cpu_override(&old);
  CHECK(atoll_openblas_better_core_for("Prescott") == NULL); /* generic is right there */
  CHECK(atoll_gemm_bf16_check(NULL) != 0);
  atoll_cpu_override(NULL);
}

int main(void) {
  atoll_rng_seed(&rng, 20261201);
  const atoll_cpu_features *f = atoll_cpu();
  char feats[96];
  atoll_cpu_feature_list(f, feats, sizeof feats);
  printf("CPU %s: %s; OpenBLAS kernels %s; fp32 engine %s\n", f->model, feats, atoll_openblas_core(),
         atoll_gemm_engine_name(atoll_gemm_engine()));
  test_rounding();
  test_other_cpus();
  atoll_engine def = atoll_gemm_engine();
  CHECK(atoll_gemm_set_engine(ATOLL_ENGINE_OPENBLAS, NULL) == 0);
  test_gemm("OpenBLAS sgemm", atoll_gemm_f32, 0, 1e-5);
  test_gemm_empty("OpenBLAS sgemm", atoll_gemm_f32);
  if (atoll_gemm_set_engine(ATOLL_ENGINE_ONEDNN, NULL) == 0) {
    test_gemm("oneDNN sgemm", atoll_gemm_f32, 0, 1e-5);
    test_gemm_empty("oneDNN sgemm", atoll_gemm_f32);
  }
  atoll_gemm_set_engine(def, NULL);
  atoll_err err;
  if (atoll_gemm_bf16_check(&err)) {
    printf("bf16 skipped: %s\n", err.msg);
    if (check_failures) CHECK_DONE();
    return 77;
  }
  /* against the rounded inputs: only fp32 accumulation error remains */
  test_gemm("bf16 gemm vs rounded inputs", atoll_gemm_bf16, 1, 1e-5);
  test_ops_tables();
  test_model();
  CHECK_DONE();
}

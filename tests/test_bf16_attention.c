/* bf16 attention (src/ops/attention_bf16.c) at shapes that are not multiples of its
 * blocks (T = 1, 17, 100, 131, 200; head sizes 7, 16, 40, 64, 128):
 *  - forward against a double-precision reference that rounds the same values to bf16
 *    (Q times the scale, K, V, the probabilities): outputs within 3e-3 of the largest,
 *    log-sum-exp within 1e-4;
 *  - backward against the same reference (dO, V, K, Q, P and dS rounded where the
 *    kernel rounds them): dQ, dK, dV within 5e-3 of the largest;
 *  - both against the fp32 kernels: within bf16 error (3e-2, 5e-2) and not equal to
 *    them (the products really ran in bf16);
 *  - the same bits at 1 and 2 threads, every element of dqkv written;
 *  - the same for grouped-query attention (Llama): groups of 1 and 3 query heads per
 *    key/value head, and forward with more keys than query rows (decoding);
 *  - the bf16 ops table uses these kernels.
 * Exits 77 on a processor without usable AMX-BF16. */
#include "check.h"
#include "core/rng.h"
#include "ops/attention_bf16.h"
#include "ops/gemm_cpu.h"
#include "ops/ops.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_rng rng;

static float *randn(size_t n, float scale) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = atoll_rng_normal(&rng) * scale;
  return p;
}

static double bf(double x) { return atoll_bf16_to_f32(atoll_bf16_from_f32((float)x)); }

/* largest |x - y| over the largest |y|, over n values at stride 1 */
static double rel_err(const float *x, const double *y, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(x[i] - y[i]);
    num = d > num ? d : num;
    den = fabs(y[i]) > den ? fabs(y[i]) : den;
  }
  return den > 0 ? num / den : num;
}

static double rel_err_f(const float *x, const float *y, size_t n) {
  double *yd = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) yd[i] = y[i];
  double e = rel_err(x, yd, n);
  free(yd);
  return e;
}

/* The reference for one query head and its key/value head, in double, rounding to
 * bf16 exactly the values the kernel rounds: T query rows at positions Tk - T + t, Tk
 * keys; q, dq at stride ldq, out (the kernel's output, which feeds D = dO . O as in
 * the kernel), dout and ro at ldo, k, v, dk, dv at ldk. Writes ro, rlse; adds into
 * dq, dk, dv (when dout is not NULL: backward, Tk = T). */
static void ref_head(int T, int Tk, int hs, const float *q, int ldq, const float *k, const float *v, int ldk,
                     const float *out, const float *dout, int ldo, double *ro, double *rlse, double *dq, double *dk,
                     double *dv) {
  int p0 = Tk - T;
  double scale = 1.0 / sqrt((double)hs);
  float fscale = 1.0f / sqrtf((float)hs);
  double *P = calloc((size_t)T * Tk, sizeof(double)), *dS = calloc((size_t)T * Tk, sizeof(double));
  for (int i = 0; i < T; i++) {
    int n = p0 + i + 1;
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) {
      double a = 0;
      for (int c = 0; c < hs; c++) a += bf(q[(size_t)i * ldq + c] * fscale) * bf(k[(size_t)j * ldk + c]);
      P[(size_t)i * Tk + j] = a;
      mx = a > mx ? a : mx;
    }
    for (int j = 0; j < n; j++) sum += exp(P[(size_t)i * Tk + j] - mx);
    rlse[i] = mx + log(sum);
    for (int j = 0; j < n; j++) P[(size_t)i * Tk + j] = exp(P[(size_t)i * Tk + j] - rlse[i]);
    for (int c = 0; c < hs; c++) {
      double a = 0;
      for (int j = 0; j < n; j++) a += bf(P[(size_t)i * Tk + j]) * bf(v[(size_t)j * ldk + c]);
      ro[(size_t)i * ldo + c] = a;
    }
    if (!dout) continue;
    const float *o = out + (size_t)i * ldo, *g = dout + (size_t)i * ldo;
    double D = 0;
    for (int c = 0; c < hs; c++) D += (double)o[c] * g[c];
    for (int j = 0; j < n; j++) {
      double dp = 0;
      for (int c = 0; c < hs; c++) dp += bf(g[c]) * bf(v[(size_t)j * ldk + c]);
      dS[(size_t)i * Tk + j] = P[(size_t)i * Tk + j] * (dp - D) * scale;
    }
  }
  if (dout)
    for (int i = 0; i < T; i++)
      for (int c = 0; c < hs; c++) {
        double aq = 0, ak = 0, av = 0;
        for (int j = 0; j <= i; j++) aq += bf(dS[(size_t)i * Tk + j]) * bf(k[(size_t)j * ldk + c]);
        for (int r = i; r < T; r++) { /* i as a key: every query r >= i */
          ak += bf(dS[(size_t)r * Tk + i]) * bf(q[(size_t)r * ldq + c]);
          av += bf(P[(size_t)r * Tk + i]) * bf(dout[(size_t)r * ldo + c]);
        }
        dq[(size_t)i * ldq + c] += aq, dk[(size_t)i * ldk + c] += ak, dv[(size_t)i * ldk + c] += av;
      }
  free(P), free(dS);
}

typedef struct {
  int B, T, C, NH;
} shape;

/* GPT-2 heads: qkv [B,T,3C], out [B,T,C] */
static void reference(const shape *s, const float *qkv, const float *out, const float *dout, double *ro,
                      double *rlse, double *rdqkv) {
  int T = s->T, C = s->C, NH = s->NH, hs = C / NH, ld = 3 * C;
  memset(rdqkv, 0, sizeof(double) * (size_t)s->B * T * ld);
  for (int b = 0; b < s->B; b++)
    for (int h = 0; h < NH; h++) {
      size_t at = (size_t)b * T * ld + (size_t)h * hs, ao = (size_t)b * T * C + (size_t)h * hs;
      ref_head(T, T, hs, qkv + at, ld, qkv + at + C, qkv + at + 2 * C, ld, out + ao, dout + ao, C, ro + ao,
               rlse + ((size_t)b * NH + h) * T, rdqkv + at, rdqkv + at + C, rdqkv + at + 2 * C);
    }
}

static void run(const atoll_ops *ops, const shape *s, const float *qkv, const float *dout, float *out, float *lse,
                float *dqkv) {
  size_t nq = (size_t)s->B * s->T * 3 * s->C;
  for (size_t i = 0; i < nq; i++) dqkv[i] = NAN; /* every element must be written */
  ops->attention_forward(out, lse, qkv, s->B, s->T, s->C, s->NH);
  ops->attention_backward(dqkv, dout, qkv, out, lse, s->B, s->T, s->C, s->NH);
}

static void test_shape(const shape *s) {
  int B = s->B, T = s->T, C = s->C, NH = s->NH;
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
  float *qkv = randn(nq, 1.0f), *dout = randn(no, 1.0f);
  float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4);
  float *out32 = malloc(no * 4), *lse32 = malloc(nl * 4), *dqkv32 = malloc(nq * 4);
  float *out1 = malloc(no * 4), *lse1 = malloc(nl * 4), *dqkv1 = malloc(nq * 4);
  double *ro = malloc(no * 8), *rlse = malloc(nl * 8), *rdqkv = malloc(nq * 8);

  omp_set_num_threads(2);
  run(atoll_ops_cpu_bf16(), s, qkv, dout, out, lse, dqkv);
  omp_set_num_threads(1);
  run(atoll_ops_cpu_bf16(), s, qkv, dout, out1, lse1, dqkv1);
  omp_set_num_threads(2);
  run(atoll_ops_cpu(), s, qkv, dout, out32, lse32, dqkv32);
  reference(s, qkv, out, dout, ro, rlse, rdqkv);

  int finite = 1;
  for (size_t i = 0; i < nq; i++) finite &= isfinite(dqkv[i]) != 0;
  CHECK(finite);
  CHECK(memcmp(out, out1, no * 4) == 0 && memcmp(lse, lse1, nl * 4) == 0 && memcmp(dqkv, dqkv1, nq * 4) == 0);

  double eo = rel_err(out, ro, no), el = 0;
  for (size_t i = 0; i < nl; i++) el = fmax(el, fabs(lse[i] - rlse[i]));
  /* dq, dk, dv separately (their sizes differ): gather each third */
  double ed[3] = {0, 0, 0}, e32d[3] = {0, 0, 0};
  for (int part = 0; part < 3; part++) {
    size_t n = (size_t)B * T * C;
    float *x = malloc(n * 4), *x32 = malloc(n * 4);
    double *r = malloc(n * 8);
    for (size_t row = 0; row < (size_t)B * T; row++)
      for (int c = 0; c < C; c++) {
        size_t src = row * 3 * C + (size_t)part * C + c;
        x[row * C + c] = dqkv[src], x32[row * C + c] = dqkv32[src], r[row * C + c] = rdqkv[src];
      }
    ed[part] = rel_err(x, r, n);
    e32d[part] = rel_err_f(x, x32, n);
    free(x), free(x32), free(r);
  }
  double e32o = rel_err_f(out, out32, no);
  printf("B%d T%d C%d NH%d: vs reference out %.2g lse %.2g dq %.2g dk %.2g dv %.2g; vs fp32 out %.2g dq %.2g dk "
         "%.2g dv %.2g\n",
         B, T, C, NH, eo, el, ed[0], ed[1], ed[2], e32o, e32d[0], e32d[1], e32d[2]);
  CHECK(eo < 3e-3 && el < 1e-4);
  CHECK(ed[0] < 5e-3 && ed[1] < 5e-3 && ed[2] < 5e-3);
  CHECK(e32o < 3e-2 && e32d[2] < 5e-2);
  /* at T = 1 the exact dQ and dK are 0 (dP = D); bf16 leaves rounding noise there */
  if (T > 1) CHECK(e32d[0] < 5e-2 && e32d[1] < 5e-2);
  if (T > 1) CHECK(e32o > 1e-6 && e32d[0] > 1e-6); /* bf16 really ran */
  free(qkv), free(dout), free(out), free(lse), free(dqkv), free(out32), free(lse32), free(dqkv32);
  free(out1), free(lse1), free(dqkv1), free(ro), free(rlse), free(rdqkv);
}

/* Grouped-query attention: B, T query rows, Tk keys, NH query heads over NKV
 * key/value heads of size hs; backward only where Tk = T (the table's contract). */
static void test_gqa(int B, int T, int Tk, int NH, int NKV, int hs) {
  int ldq = NH * hs, ldk = NKV * hs, group = NH / NKV;
  size_t nq = (size_t)B * T * ldq, nk = (size_t)B * Tk * ldk, nl = (size_t)B * NH * T;
  float *q = randn(nq, 1.0f), *k = randn(nk, 1.0f), *v = randn(nk, 1.0f), *g = randn(nq, 1.0f);
  float *o[3], *l[3], *dq[3], *dk[3], *dv[3]; /* bf16 at 2 threads, bf16 at 1, fp32 */
  for (int r = 0; r < 3; r++) {
    o[r] = malloc(nq * 4), l[r] = malloc(nl * 4), dq[r] = malloc(nq * 4), dk[r] = malloc(nk * 4), dv[r] = malloc(nk * 4);
    for (size_t i = 0; i < nk; i++) dk[r][i] = dv[r][i] = NAN; /* must be written whole */
    const atoll_ops *ops = r == 2 ? atoll_ops_cpu() : atoll_ops_cpu_bf16();
    omp_set_num_threads(r == 1 ? 1 : 2);
    ops->gqa_forward(o[r], l[r], q, k, v, B, T, Tk, NH, NKV, hs);
    if (Tk == T) ops->gqa_backward(dq[r], dk[r], dv[r], g, q, k, v, o[r], l[r], B, T, NH, NKV, hs);
  }
  omp_set_num_threads(2);
  double *ro = malloc(nq * 8), *rl = malloc(nl * 8), *rq = calloc(nq, 8), *rk = calloc(nk, 8), *rv = calloc(nk, 8);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      size_t aq = (size_t)b * T * ldq + (size_t)h * hs, ak = (size_t)b * Tk * ldk + (size_t)(h / group) * hs;
      ref_head(T, Tk, hs, q + aq, ldq, k + ak, v + ak, ldk, o[0] + aq, Tk == T ? g + aq : NULL, ldq, ro + aq,
               rl + ((size_t)b * NH + h) * T, rq + aq, rk + ak, rv + ak);
    }
  double eo = rel_err(o[0], ro, nq), el = 0;
  for (size_t i = 0; i < nl; i++) el = fmax(el, fabs(l[0][i] - rl[i]));
  int same = memcmp(o[0], o[1], nq * 4) == 0 && memcmp(l[0], l[1], nl * 4) == 0;
  printf("gqa B%d T%d Tk%d NH%d NKV%d hs%d: vs reference out %.2g lse %.2g; vs fp32 out %.2g", B, T, Tk, NH, NKV, hs,
         eo, el, rel_err_f(o[0], o[2], nq));
  CHECK(eo < 3e-3 && el < 1e-4 && rel_err_f(o[0], o[2], nq) < 3e-2);
  if (Tk == T) {
    double eq = rel_err(dq[0], rq, nq), ek = rel_err(dk[0], rk, nk), ev = rel_err(dv[0], rv, nk);
    printf("; dq %.2g dk %.2g dv %.2g vs reference, %.2g %.2g %.2g vs fp32", eq, ek, ev, rel_err_f(dq[0], dq[2], nq),
           rel_err_f(dk[0], dk[2], nk), rel_err_f(dv[0], dv[2], nk));
    CHECK(eq < 5e-3 && ek < 5e-3 && ev < 5e-3);
    CHECK(rel_err_f(dv[0], dv[2], nk) < 5e-2);
    /* at T = 1 the exact dQ and dK are 0 (dP = D), and both kernels leave rounding noise */
    if (T > 1) CHECK(rel_err_f(dq[0], dq[2], nq) < 5e-2 && rel_err_f(dk[0], dk[2], nk) < 5e-2);
    same &= memcmp(dq[0], dq[1], nq * 4) == 0 && memcmp(dk[0], dk[1], nk * 4) == 0 && memcmp(dv[0], dv[1], nk * 4) == 0;
  }
  printf("\n");
  CHECK(same);
  for (int r = 0; r < 3; r++) free(o[r]), free(l[r]), free(dq[r]), free(dk[r]), free(dv[r]);
  free(q), free(k), free(v), free(g), free(ro), free(rl), free(rq), free(rk), free(rv);
}

int main(void) {
  atoll_rng_seed(&rng, 20261201);
  if (!atoll_attention_bf16_available()) {
    printf("bf16 attention skipped: this processor has no usable AMX-BF16\n");
    return 77;
  }
  const atoll_ops *h = atoll_ops_cpu_bf16();
  CHECK(h->attention_forward == atoll_attention_forward_bf16 && h->attention_backward == atoll_attention_backward_bf16);
  shape shapes[] = {{2, 100, 80, 2}, {1, 64, 64, 1}, {2, 131, 21, 3}, {1, 200, 256, 2},
                    {1, 1, 32, 2},   {3, 17, 48, 3}, {1, 256, 384, 6}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) test_shape(&shapes[i]);
  CHECK(h->gqa_forward == atoll_gqa_forward_bf16 && h->gqa_backward == atoll_gqa_backward_bf16);
  test_gqa(2, 100, 100, 6, 2, 40); /* 3 query heads per key/value head */
  test_gqa(1, 131, 131, 4, 4, 7);  /* no grouping, odd head size */
  test_gqa(2, 256, 256, 6, 2, 64); /* the Llama benchmark's heads */
  test_gqa(1, 5, 70, 4, 1, 32);    /* decoding: 5 new rows after 65 cached keys */
  test_gqa(1, 1, 1, 2, 1, 16);
  CHECK_DONE();
}

/* The Llama kernels of the CPU ops table (RMSNorm, RoPE, SwiGLU, grouped-query attention)
 * against double-precision references written here.
 *
 *  forward   float kernel vs double reference on the same inputs: max |got - ref| / max |ref|.
 *  backward  loss = sum(out * R) for a fixed random R; every input's gradient by central
 *            finite differences (eps 1e-6) of the DOUBLE reference, against the float
 *            backward kernel given dout = R.
 *  contract  RMSNorm's dx and dw must ADD (buffers prefilled, compared as got - prefill);
 *            attention's dq, dk, dv and SwiGLU's gradients must OVERWRITE (prefilled with
 *            garbage, compared directly).
 *  threads   each kernel run with 1 and 3 threads gives the same bits.
 *  family    GPT-2's multi-head attention and grouped-query attention with groups of one
 *            give the same bits (one kernel serves both).
 * Tolerances: forward 1e-5, backward 1e-4 (as test_ops.c). A wrong rotation direction,
 * pairing (interleaved instead of half split), theta, eps, or group mapping of the key/value
 * heads gives errors of 1e-2 and more. */
#include "check.h"
#include "core/rng.h"
#include "ops/ops.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static const atoll_ops *K;
static atoll_rng rng;
static double worst_fwd, worst_bwd;

static float *randf(size_t n, float scale) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) p[i] = scale * atoll_rng_normal(&rng);
  return p;
}
static double *tod(const float *x, size_t n) {
  double *d = malloc(sizeof(double) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static double maxabs(const double *x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
  return m > 0 ? m : 1;
}
/* max |got - ref| / max |ref| */
static double relerr_f(const float *got, const double *ref, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) e = fabs(got[i] - ref[i]) > e ? fabs(got[i] - ref[i]) : e;
  return e / maxabs(ref, n);
}
static void check_err(const char *what, double e, double tol, int bwd) {
  if (bwd) worst_bwd = e > worst_bwd ? e : worst_bwd;
  else worst_fwd = e > worst_fwd ? e : worst_fwd;
  if (!(e <= tol)) {
    fprintf(stderr, "%s: error %.3g above %.1g\n", what, e, tol);
    check_failures++;
  }
}

/* A double reference: out = f(inputs); the loss is sum(out * R). */
typedef struct {
  double *in[3];
  size_t n_in[3];
  int nin;
  size_t n_out;
  void (*f)(const void *ctx, double *const *in, double *out);
  const void *ctx;
  const double *R;
} ref_fn;

static double ref_loss(const ref_fn *r, double *out) {
  r->f(r->ctx, r->in, out);
  double s = 0;
  for (size_t i = 0; i < r->n_out; i++) s += out[i] * r->R[i];
  return s;
}
/* Finite-difference gradient of input k. */
static double *fd_grad(const ref_fn *r, int k) {
  double *g = malloc(sizeof(double) * r->n_in[k]), *out = malloc(sizeof(double) * r->n_out);
  for (size_t i = 0; i < r->n_in[k]; i++) {
    double x0 = r->in[k][i], h = 1e-6;
    r->in[k][i] = x0 + h;
    double lp = ref_loss(r, out);
    r->in[k][i] = x0 - h;
    double lm = ref_loss(r, out);
    r->in[k][i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  free(out);
  return g;
}

/* ------------------------------------------------------------------ RMSNorm --- */

typedef struct { int N, C; double eps; } rms_ctx;
static void rms_ref(const void *vc, double *const *in, double *out) {
  const rms_ctx *c = vc;
  for (int n = 0; n < c->N; n++) {
    const double *x = in[0] + (size_t)n * c->C;
    double ss = 0;
    for (int j = 0; j < c->C; j++) ss += x[j] * x[j];
    double r = 1 / sqrt(ss / c->C + c->eps);
    for (int j = 0; j < c->C; j++) out[(size_t)n * c->C + j] = x[j] * r * in[1][j];
  }
}

static void test_rmsnorm(int N, int C, float eps) {
  size_t NC = (size_t)N * C;
  float *x = randf(NC, 2.0f), *w = randf(C, 1.0f), *R = randf(NC, 1.0f);
  for (int j = 0; j < C; j++) w[j] += 1.0f;
  float *out = malloc(sizeof(float) * NC), *rstd = malloc(sizeof(float) * N);
  rms_ctx c = {N, C, eps};
  double *dR = tod(R, NC), *ref = malloc(sizeof(double) * NC);
  ref_fn r = {{tod(x, NC), tod(w, C)}, {NC, (size_t)C}, 2, NC, rms_ref, &c, dR};
  rms_ref(&c, r.in, ref);
  K->rmsnorm_forward(out, rstd, x, w, N, C, eps);
  check_err("rmsnorm forward", relerr_f(out, ref, NC), 1e-5, 0);
  float *dx = malloc(sizeof(float) * NC), *dw = malloc(sizeof(float) * C);
  for (size_t i = 0; i < NC; i++) dx[i] = 0.5f;
  for (int j = 0; j < C; j++) dw[j] = -0.25f;
  K->rmsnorm_backward(dx, dw, R, x, w, rstd, N, C);
  for (size_t i = 0; i < NC; i++) dx[i] -= 0.5f;
  for (int j = 0; j < C; j++) dw[j] += 0.25f;
  double *gx = fd_grad(&r, 0), *gw = fd_grad(&r, 1);
  check_err("rmsnorm dx (added)", relerr_f(dx, gx, NC), 1e-4, 1);
  check_err("rmsnorm dw (added)", relerr_f(dw, gw, C), 1e-4, 1);
  /* threads: the same bits */
  float *o1 = malloc(sizeof(float) * NC), *d1 = calloc(NC, sizeof(float)), *d3 = calloc(NC, sizeof(float));
  float *w1 = calloc(C, sizeof(float)), *w3 = calloc(C, sizeof(float));
  omp_set_num_threads(1);
  K->rmsnorm_forward(o1, rstd, x, w, N, C, eps);
  K->rmsnorm_backward(d1, w1, R, x, w, rstd, N, C);
  omp_set_num_threads(3);
  K->rmsnorm_forward(out, rstd, x, w, N, C, eps);
  K->rmsnorm_backward(d3, w3, R, x, w, rstd, N, C);
  CHECK(memcmp(o1, out, sizeof(float) * NC) == 0 && memcmp(d1, d3, sizeof(float) * NC) == 0 &&
        memcmp(w1, w3, sizeof(float) * C) == 0);
  free(x), free(w), free(R), free(out), free(rstd), free(dR), free(ref), free(r.in[0]), free(r.in[1]);
  free(dx), free(dw), free(gx), free(gw), free(o1), free(d1), free(d3), free(w1), free(w3);
}

/* --------------------------------------------------------------------- RoPE --- */

typedef struct { int B, T, H, hs, pos0; double theta; } rope_ctx;
/* Hugging Face: inv_freq_i = theta^(-2i/hs); out = x cos + rotate_half(x) sin,
 * rotate_half([x1, x2]) = [-x2, x1]. */
static void rope_ref(const void *vc, double *const *in, double *out) {
  const rope_ctx *c = vc;
  int half = c->hs / 2;
  for (int b = 0; b < c->B; b++)
    for (int t = 0; t < c->T; t++)
      for (int h = 0; h < c->H; h++) {
        size_t at = (((size_t)b * c->T + t) * c->H + h) * c->hs;
        for (int j = 0; j < c->hs; j++) {
          int i = j % half;
          double a = (c->pos0 + t) * pow(c->theta, -2.0 * i / c->hs);
          double rot = j < half ? -in[0][at + j + half] : in[0][at + j - half];
          out[at + j] = in[0][at + j] * cos(a) + rot * sin(a);
        }
      }
}

static void test_rope(int B, int T, int H, int hs, float theta, int pos0) {
  double freq[64]; /* the op's table, without scaling (scaled ones: tests/cli/test_hf_llama.sh) */
  for (int i = 0; i < hs / 2; i++) freq[i] = pow((double)theta, -2.0 * i / hs);
  size_t n = (size_t)B * T * H * hs;
  float *x = randf(n, 1.0f), *R = randf(n, 1.0f), *y = malloc(sizeof(float) * n);
  memcpy(y, x, sizeof(float) * n);
  rope_ctx c = {B, T, H, hs, pos0, theta};
  double *dR = tod(R, n), *ref = malloc(sizeof(double) * n);
  ref_fn r = {{tod(x, n)}, {n}, 1, n, rope_ref, &c, dR};
  rope_ref(&c, r.in, ref);
  K->rope(y, B, T, H, hs, freq, pos0, 0);
  check_err("rope forward", relerr_f(y, ref, n), 1e-5, 0);
  float *g = malloc(sizeof(float) * n);
  memcpy(g, R, sizeof(float) * n);
  K->rope(g, B, T, H, hs, freq, pos0, 1);
  double *gx = fd_grad(&r, 0);
  check_err("rope backward (inverse rotation)", relerr_f(g, gx, n), 1e-4, 1);
  K->rope(y, B, T, H, hs, freq, pos0, 1); /* back to x */
  double e = 0;
  for (size_t i = 0; i < n; i++) e = fabs(y[i] - x[i]) > e ? fabs(y[i] - x[i]) : e;
  check_err("rope inverse(forward(x)) = x", e, 1e-5, 0);
  free(x), free(R), free(y), free(dR), free(ref), free(r.in[0]), free(g), free(gx);
}

/* ------------------------------------------------------------------- SwiGLU --- */

static void swiglu_ref(const void *vc, double *const *in, double *out) {
  size_t n = *(const size_t *)vc;
  for (size_t i = 0; i < n; i++) out[i] = in[0][i] / (1 + exp(-in[0][i])) * in[1][i];
}

static void test_swiglu(size_t n) {
  float *g = randf(n, 3.0f), *u = randf(n, 1.0f), *R = randf(n, 1.0f), *out = malloc(sizeof(float) * n);
  double *dR = tod(R, n), *ref = malloc(sizeof(double) * n);
  ref_fn r = {{tod(g, n), tod(u, n)}, {n, n}, 2, n, swiglu_ref, &n, dR};
  swiglu_ref(&n, r.in, ref);
  K->swiglu_forward(out, g, u, n);
  check_err("swiglu forward", relerr_f(out, ref, n), 1e-5, 0);
  float *dg = malloc(sizeof(float) * n), *du = malloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) dg[i] = du[i] = 9.0f; /* overwritten */
  K->swiglu_backward(dg, du, R, g, u, n);
  double *fg = fd_grad(&r, 0), *fu = fd_grad(&r, 1);
  check_err("swiglu dgate", relerr_f(dg, fg, n), 1e-4, 1);
  check_err("swiglu dup", relerr_f(du, fu, n), 1e-4, 1);
  memcpy(dg, R, sizeof(float) * n); /* dgate may be dout itself */
  K->swiglu_backward(dg, du, dg, g, u, n);
  check_err("swiglu dgate in place", relerr_f(dg, fg, n), 1e-4, 1);
  free(g), free(u), free(R), free(out), free(dR), free(ref), free(r.in[0]), free(r.in[1]);
  free(dg), free(du), free(fg), free(fu);
}

/* ---------------------------------------------------- grouped-query attention --- */

typedef struct { int B, T, Tk, NH, NKV, hs; } gqa_ctx;
static void gqa_ref(const void *vc, double *const *in, double *out) {
  const gqa_ctx *c = vc;
  int ldq = c->NH * c->hs, ldk = c->NKV * c->hs, group = c->NH / c->NKV;
  double *p = malloc(sizeof(double) * c->Tk);
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->NH; h++)
      for (int t = 0; t < c->T; t++) {
        const double *q = in[0] + ((size_t)b * c->T + t) * ldq + (size_t)h * c->hs;
        int n = c->Tk - c->T + t + 1;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
          const double *k = in[1] + ((size_t)b * c->Tk + j) * ldk + (size_t)(h / group) * c->hs;
          double s = 0;
          for (int d = 0; d < c->hs; d++) s += q[d] * k[d];
          p[j] = s / sqrt((double)c->hs);
          mx = p[j] > mx ? p[j] : mx;
        }
        for (int j = 0; j < n; j++) sum += (p[j] = exp(p[j] - mx));
        double *o = out + ((size_t)b * c->T + t) * ldq + (size_t)h * c->hs;
        for (int d = 0; d < c->hs; d++) {
          double a = 0;
          for (int j = 0; j < n; j++) a += p[j] / sum * in[2][((size_t)b * c->Tk + j) * ldk + (size_t)(h / group) * c->hs + d];
          o[d] = a;
        }
      }
  free(p);
}

static void test_gqa(int B, int T, int Tk, int NH, int NKV, int hs, int backward) {
  size_t nq = (size_t)B * T * NH * hs, nk = (size_t)B * Tk * NKV * hs;
  float *q = randf(nq, 1.0f), *k = randf(nk, 1.0f), *v = randf(nk, 1.0f), *R = randf(nq, 1.0f);
  float *out = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * (size_t)B * NH * T);
  gqa_ctx c = {B, T, Tk, NH, NKV, hs};
  double *dR = tod(R, nq), *ref = malloc(sizeof(double) * nq);
  ref_fn r = {{tod(q, nq), tod(k, nk), tod(v, nk)}, {nq, nk, nk}, 3, nq, gqa_ref, &c, dR};
  gqa_ref(&c, r.in, ref);
  K->gqa_forward(out, lse, q, k, v, B, T, Tk, NH, NKV, hs);
  check_err("gqa forward", relerr_f(out, ref, nq), 1e-5, 0);
  if (backward) {
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    for (size_t i = 0; i < nq; i++) dq[i] = 3.0f;
    for (size_t i = 0; i < nk; i++) dk[i] = dv[i] = -3.0f;
    K->gqa_backward(dq, dk, dv, R, q, k, v, out, lse, B, T, NH, NKV, hs);
    double *fq = fd_grad(&r, 0), *fk = fd_grad(&r, 1), *fv = fd_grad(&r, 2);
    check_err("gqa dq", relerr_f(dq, fq, nq), 1e-4, 1);
    check_err("gqa dk", relerr_f(dk, fk, nk), 1e-4, 1);
    check_err("gqa dv", relerr_f(dv, fv, nk), 1e-4, 1);
    /* threads */
    float *dq1 = malloc(sizeof(float) * nq), *dk1 = malloc(sizeof(float) * nk), *dv1 = malloc(sizeof(float) * nk);
    omp_set_num_threads(1);
    K->gqa_backward(dq1, dk1, dv1, R, q, k, v, out, lse, B, T, NH, NKV, hs);
    omp_set_num_threads(3);
    K->gqa_backward(dq, dk, dv, R, q, k, v, out, lse, B, T, NH, NKV, hs);
    CHECK(memcmp(dq, dq1, sizeof(float) * nq) == 0 && memcmp(dk, dk1, sizeof(float) * nk) == 0 &&
          memcmp(dv, dv1, sizeof(float) * nk) == 0);
    free(dq), free(dk), free(dv), free(fq), free(fk), free(fv), free(dq1), free(dk1), free(dv1);
  }
  free(q), free(k), free(v), free(R), free(out), free(lse), free(dR), free(ref);
  for (int i = 0; i < 3; i++) free(r.in[i]);
}

/* The key/value cache's use: the last rows' queries against all keys equal the same rows
 * of a full causal pass. */
static void test_gqa_suffix(void) {
  int B = 1, T = 9, NH = 4, NKV = 2, hs = 6, tail = 3;
  size_t nq = (size_t)T * NH * hs, nk = (size_t)T * NKV * hs;
  float *q = randf(nq, 1.0f), *k = randf(nk, 1.0f), *v = randf(nk, 1.0f);
  float *full = malloc(sizeof(float) * nq), *part = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * NH * T);
  K->gqa_forward(full, lse, q, k, v, B, T, T, NH, NKV, hs);
  size_t skip = (size_t)(T - tail) * NH * hs;
  K->gqa_forward(part, lse, q + skip, k, v, B, tail, T, NH, NKV, hs);
  double e = 0;
  for (size_t i = 0; i < (size_t)tail * NH * hs; i++) e = fabs(part[i] - full[skip + i]) > e ? fabs(part[i] - full[skip + i]) : e;
  check_err("gqa suffix rows vs full pass", e, 1e-6, 0);
  free(q), free(k), free(v), free(full), free(part), free(lse);
}

/* One kernel family: GPT-2's multi-head entry on packed qkv rows gives the same bits as
 * the grouped-query entry with groups of one on the same numbers split into q, k and v
 * (forward and backward; T = 70 spans two blocks of query rows). */
static void test_mha_is_gqa(void) {
  int B = 2, T = 70, NH = 3, hs = 16, C = NH * hs;
  size_t N = (size_t)B * T, nq = N * C;
  float *qkv = randf(3 * nq, 1.0f), *R = randf(nq, 1.0f), *part[3];
  for (int p = 0; p < 3; p++) {
    part[p] = malloc(sizeof(float) * nq);
    for (size_t n = 0; n < N; n++) memcpy(part[p] + n * C, qkv + n * 3 * C + (size_t)p * C, sizeof(float) * C);
  }
  float *o1 = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq), *l1 = malloc(sizeof(float) * N * NH),
        *l2 = malloc(sizeof(float) * N * NH), *dqkv = malloc(sizeof(float) * 3 * nq), *d[3];
  for (int p = 0; p < 3; p++) d[p] = malloc(sizeof(float) * nq);
  K->attention_forward(o1, l1, qkv, B, T, C, NH);
  K->gqa_forward(o2, l2, part[0], part[1], part[2], B, T, T, NH, NH, hs);
  CHECK(memcmp(o1, o2, sizeof(float) * nq) == 0 && memcmp(l1, l2, sizeof(float) * N * NH) == 0);
  K->attention_backward(dqkv, R, qkv, o1, l1, B, T, C, NH);
  K->gqa_backward(d[0], d[1], d[2], R, part[0], part[1], part[2], o2, l2, B, T, NH, NH, hs);
  int same = 1;
  for (int p = 0; p < 3; p++)
    for (size_t n = 0; n < N; n++) same &= memcmp(d[p] + n * C, dqkv + n * 3 * C + (size_t)p * C, sizeof(float) * C) == 0;
  CHECK(same);
  for (int p = 0; p < 3; p++) free(part[p]), free(d[p]);
  free(qkv), free(R), free(o1), free(o2), free(l1), free(l2), free(dqkv);
}

int main(void) {
  K = atoll_ops_cpu();
  atoll_rng_seed(&rng, 7);
  test_rmsnorm(5, 24, 1e-5f);
  test_rmsnorm(3, 130, 1e-6f);
  test_rope(2, 5, 3, 8, 10000.0f, 0);
  test_rope(1, 4, 2, 6, 500000.0f, 37);
  test_swiglu(1000);
  test_swiglu(5000); /* more than one threaded block */
  test_gqa(2, 5, 5, 4, 2, 4, 1);   /* groups of 2 */
  test_gqa(1, 4, 4, 3, 3, 6, 1);   /* plain multi-head */
  test_gqa(1, 6, 6, 4, 1, 4, 1);   /* one key/value head */
  test_gqa(1, 67, 67, 2, 1, 4, 1); /* more than one block of query rows */
  test_gqa(2, 3, 8, 4, 2, 4, 0);   /* queries at the end of longer keys */
  test_gqa_suffix();
  test_mha_is_gqa();
  printf("test_llama_ops: worst forward error %.2g, worst backward error %.2g\n", worst_fwd, worst_bwd);
  CHECK_DONE();
}

/* Every kernel of the CPU ops table (src/ops/ops.h) against a naive double-precision
 * reference written here. (Over 1000 lines on purpose: one file per ops table, so
 * that every kernel shares the same reference helpers and finite-difference driver.)
 *
 *  forward   the float kernel and the double reference on the same random inputs;
 *            error = max |got - ref| / max |ref| (norm-wise, max-abs scaled).
 *  backward  scalar loss = sum(out * R) for a fixed random R; the gradient of every
 *            input and parameter by central finite differences of the DOUBLE
 *            reference (eps 1e-6, so truncation ~1e-12 and cancellation ~1e-10
 *            relative), against the float backward kernel given dout = R. (For
 *            gelu, xent and attention the difference is taken of only the terms of
 *            the loss that depend on the element - the others cancel exactly - so the
 *            check stays linear in the size instead of quadratic.)
 *  contract  gradient buffers are pre-filled with known nonzero values: kernels that
 *            must ADD are compared as (got - prefill) against the reference, kernels
 *            that must OVERWRITE are compared directly (a kernel that added would be
 *            off by the prefill, which is of the size of the gradients).
 *  bounds    every buffer a kernel writes has guard zones on both sides.
 *  threads   every op runs twice with 1, 2 and 3 OpenMP threads: bit-identical on
 *            rerun, and within 1e-6 (max-abs scaled) across thread counts.
 *
 * Tolerances (u = 2^-24 ~ 6e-8, the float unit roundoff):
 *  embed fwd        1e-6  one float add per element: <= u relative
 *  layernorm fwd    1e-5  sums over C <= 48: worst-case ~C*u = 3e-6, typically sqrt(C)*u
 *  matmul fwd       1e-5  dot products of length C <= 48: same bound
 *  attention fwd    1e-5  softmax over <= 130 keys, dots of length hs <= 12: < 1e-6 expected
 *  gelu fwd         1e-5  a few flops and one tanh per element: a few u
 *  xent fwd         1e-5  sums over V <= 64 of exp: ~V*u worst case
 *  all backward     1e-4  float kernels with the same reductions as forward, against a
 *                         double finite difference (error ~1e-10).
 *  sweeps                 exp(z - lse) (via xent_backward) on a dense grid of
 *                         [-87, 0], elementwise 1e-6; GELU and its derivative on a
 *                         dense grid of [-12, 12], see test_gelu_sweep.
 * Observed worst errors (printed in the summary at the end): forward <= 5.3e-7,
 * backward <= 1.1e-6 except xent dlogits 2.5e-6 (rows shifted by +-100, where z - lse
 * loses ~100u); threads 2 and 3 vs 1: identical. A wrong formula (a missing term, a wrong
 * sign or scale, LayerNorm eps 1e-6 instead of 1e-5, a non-causal mask, a gradient
 * overwritten instead of added) gives errors of 1e-3 to 1e3 - each of those was tried
 * on an out-of-tree copy of the CPU kernels (now ops_cpu.c and ops_cpu_elem.c) and
 * fails this test.
 * Note: with the pthread build of OpenBLAS, omp_set_num_threads changes the threads of
 * the OpenMP loops only, not those of sgemm; with the OpenMP build it sets both. */
#include "atoll/atoll.h"
#include "check.h"
#include "core/rng.h"
#include "ops/ops.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const atoll_ops *K;
static atoll_rng rng;

/* ------------------------------------------------------------ allocation --- */
/* Every buffer of one test case is released together by case_end(); float buffers
 * that kernels write carry guard zones that case_end() checks. */

#define MAXALLOC 256
#define GUARD 16
static void *allocs[MAXALLOC];
static int nallocs;
static struct {
  float *base;
  size_t n;
  const char *name;
} guards[MAXALLOC];
static int nguards;
static const float SENTINEL = -7.25e7f;

static void *tmalloc(size_t bytes) {
  if (nallocs == MAXALLOC) {
    fprintf(stderr, "test_ops: too many allocations\n");
    abort();
  }
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) abort();
  allocs[nallocs++] = p;
  return p;
}
static float *falloc(size_t n) { return tmalloc(n * sizeof(float)); }
static double *dalloc(size_t n) { return tmalloc(n * sizeof(double)); }

static float *galloc(const char *name, size_t n) {
  float *b = tmalloc((n + 2 * GUARD) * sizeof(float));
  for (int i = 0; i < GUARD; i++) b[i] = b[GUARD + n + i] = SENTINEL;
  guards[nguards].base = b;
  guards[nguards].n = n;
  guards[nguards].name = name;
  nguards++;
  return b + GUARD;
}

static char cfgname[128];

static void case_end(const char *op) {
  for (int g = 0; g < nguards; g++) {
    const float *b = guards[g].base;
    size_t n = guards[g].n;
    for (int i = 0; i < GUARD; i++) {
      if (b[i] != SENTINEL || b[GUARD + n + i] != SENTINEL) {
        fprintf(stderr, "FAIL %s [%s]: write outside buffer %s (%zu floats): guard %s[%d]\n", op,
                cfgname, guards[g].name, n, b[i] != SENTINEL ? "before" : "after",
                b[i] != SENTINEL ? i - GUARD : i);
        check_failures++;
        break;
      }
    }
  }
  for (int i = 0; i < nallocs; i++) free(allocs[i]);
  nallocs = nguards = 0;
}

/* ---------------------------------------------------------------- random --- */

static void fill_normal(float *x, size_t n, float mean, float std) {
  for (size_t i = 0; i < n; i++) x[i] = mean + std * atoll_rng_normal(&rng);
}
/* nonzero values of magnitude in [0.5, 1.5], random sign: gradient prefills */
static void fill_prefill(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float u = atoll_rng_uniform(&rng);
    x[i] = (atoll_rng_uniform(&rng) < 0.5f ? -1.0f : 1.0f) * (0.5f + u);
  }
}
static double *to_double(const float *x, size_t n) {
  double *d = dalloc(n);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static int32_t *tokens(size_t n, int V) {
  int32_t *t = tmalloc(n * sizeof(int32_t));
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(atoll_rng_next(&rng) % (uint64_t)V);
  return t;
}

/* ------------------------------------------------------------ comparison --- */

typedef struct {
  char label[48];
  double worst, tol;
  int count;
} stat;
static stat stats[64];
static int nstats;

static void record(const char *label, double err, double tol) {
  int i = 0;
  while (i < nstats && strcmp(stats[i].label, label) != 0) i++;
  if (i == nstats) {
    if (nstats == 64) return;
    snprintf(stats[i].label, sizeof stats[i].label, "%s", label);
    stats[i].worst = 0;
    nstats++;
  }
  if (!(err <= stats[i].worst)) stats[i].worst = err;
  stats[i].tol = tol;
  stats[i].count++;
}

/* (got - base) (base may be NULL) against ref: max |diff| / max |ref| (the scale is 1
 * when ref is all zero, making it an absolute error). NaN and Inf count as infinite
 * error. Returns the error; records a failure above tol, naming the worst element. */
static double cmp(const char *label, const float *got, const float *base, const double *ref,
                  size_t n, double tol) {
  double scale = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  if (scale == 0.0) scale = 1.0;
  double worst = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(((double)got[i] - (base ? (double)base[i] : 0.0)) - ref[i]);
    if (isnan(d)) d = INFINITY;
    if (d > worst) {
      worst = d;
      wi = i;
    }
  }
  double err = worst / scale;
  record(label, err, tol);
  if (!(err <= tol)) {
    fprintf(stderr,
            "FAIL %s [%s]: max error %.3g > tol %.3g at element %zu of %zu: got %.9g%s, "
            "expected %.9g (scale %.4g)\n",
            label, cfgname, err, tol, wi, n,
            (double)got[wi] - (base ? (double)base[wi] : 0.0), base ? " (after the prefill)" : "",
            ref[wi], scale);
    check_failures++;
  }
  return err;
}

/* Elementwise relative error with a floor: max |got - ref| / max(|ref|, floor). */
static double cmp_elem(const char *label, const float *got, const double *ref, size_t n,
                       double floor_, double tol) {
  double err = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]) / fmax(fabs(ref[i]), floor_);
    if (isnan(d)) d = INFINITY;
    if (d > err) {
      err = d;
      wi = i;
    }
  }
  record(label, err, tol);
  if (!(err <= tol)) {
    fprintf(stderr, "FAIL %s [%s]: max error %.3g > tol %.3g at element %zu: got %.9g, expected %.9g\n",
            label, cfgname, err, tol, wi, (double)got[wi], ref[wi]);
    check_failures++;
  }
  return err;
}

/* --------------------------------------------------- finite differences --- */

typedef double (*loss_fn)(void *ctx);

/* g[i] = d loss / d p[i] by central differences of a double-precision loss */
static void fd_grad(double *g, double *p, size_t n, loss_fn f, void *ctx) {
  const double eps = 1e-6;
  for (size_t i = 0; i < n; i++) {
    double save = p[i];
    p[i] = save + eps;
    double lp = f(ctx);
    p[i] = save - eps;
    double lm = f(ctx);
    p[i] = save;
    g[i] = (lp - lm) / (2.0 * eps);
  }
}

static double dot_d(const double *a, const double *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* ------------------------------------------------- threads, determinism --- */

typedef struct {
  int n;
  const char *name[12];
  float *buf[12];
  size_t len[12];
} outset;

static void out_add(outset *o, const char *name, float *buf, size_t len) {
  o->name[o->n] = name;
  o->buf[o->n] = buf;
  o->len[o->n] = len;
  o->n++;
}

/* run() must redo the whole forward + backward of one case from its inputs and
 * prefills. Bit-identical on rerun with the same thread count; within 1e-6 across
 * thread counts 1, 2, 3 (kernels may only differ in summation order). */
static void check_threads(const char *op, void (*run)(void *), void *c, const outset *o) {
  enum { NT = 3 };
  int saved = omp_get_max_threads();
  size_t total = 0;
  for (int k = 0; k < o->n; k++) total += o->len[k];
  float *snap[NT][2];
  for (int t = 0; t < NT; t++) {
    omp_set_num_threads(t + 1);
    for (int r = 0; r < 2; r++) {
      run(c);
      snap[t][r] = falloc(total);
      size_t off = 0;
      for (int k = 0; k < o->n; k++) {
        memcpy(snap[t][r] + off, o->buf[k], o->len[k] * sizeof(float));
        off += o->len[k];
      }
    }
  }
  omp_set_num_threads(saved);
  char label[64];
  for (int t = 0; t < NT; t++) {
    size_t off = 0;
    for (int k = 0; k < o->n; k++) {
      if (memcmp(snap[t][0] + off, snap[t][1] + off, o->len[k] * sizeof(float)) != 0) {
        fprintf(stderr, "FAIL %s [%s]: %s not bit-identical on a rerun with %d thread(s)\n", op,
                cfgname, o->name[k], t + 1);
        check_failures++;
      }
      if (t > 0) {
        double *ref = dalloc(o->len[k]);
        for (size_t i = 0; i < o->len[k]; i++) ref[i] = snap[0][0][off + i];
        snprintf(label, sizeof label, "%s threads %d vs 1", op, t + 1);
        cmp(label, snap[t][0] + off, NULL, ref, o->len[k], 1e-6);
      }
      off += o->len[k];
    }
  }
}

/* -------------------------------------------------------------- configs --- */

typedef struct {
  int B, T, C, NH, V;
} cfg;

static const cfg configs[] = {
    {2, 1, 8, 2, 11},   /* T = 1 */
    {2, 5, 12, 3, 13},  /* head size 4 */
    {2, 8, 16, 2, 32},  /* T a multiple of 8 */
    {1, 9, 24, 4, 17},  /* B = 1, head size 6 */
    {2, 13, 32, 4, 40}, /* T odd, head size 8 */
    {2, 17, 48, 4, 64}, /* T = 17, head size 12 */
    {3, 16, 20, 2, 23}, /* head size 10 */
    /* the CPU attention works in blocks of 64 query rows: */
    {2, 64, 8, 2, 11},  /* exactly one block */
    {2, 65, 12, 3, 13}, /* one row into a second block */
    {1, 130, 8, 2, 11}, /* three blocks, the last partial */
};

/* ================================================================ embed === */

static void ref_embed(double *out, const int32_t *tok, const double *wte, const double *wpe,
                      int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        out[((size_t)b * T + t) * C + c] =
            wte[(size_t)tok[b * T + t] * C + c] + wpe[(size_t)t * C + c];
}

typedef struct {
  int B, T, C, V, P; /* P rows of wpe (> T: rows past T must get no gradient) */
  int32_t *tok;
  float *wte, *wpe, *R, *pre_dwte, *pre_dwpe;
  float *out, *dwte, *dwpe;
  double *wte_d, *wpe_d, *R_d, *scratch;
} embed_case;

static void embed_run(void *p) {
  embed_case *c = p;
  K->embed_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
  memcpy(c->dwte, c->pre_dwte, sizeof(float) * (size_t)c->V * c->C);
  memcpy(c->dwpe, c->pre_dwpe, sizeof(float) * (size_t)c->P * c->C);
  K->embed_backward(c->dwte, c->dwpe, c->R, c->tok, c->B, c->T, c->C);
}

static double embed_loss(void *p) {
  embed_case *c = p;
  ref_embed(c->scratch, c->tok, c->wte_d, c->wpe_d, c->B, c->T, c->C);
  return dot_d(c->scratch, c->R_d, (size_t)c->B * c->T * c->C);
}

static void test_embed(const cfg *g) {
  embed_case c = {.B = g->B, .T = g->T, .C = g->C, .V = g->V, .P = g->T + 2};
  size_t N = (size_t)c.B * c.T, C = c.C;
  c.tok = tokens(N, c.V);
  c.wte = falloc(c.V * C);
  c.wpe = falloc(c.P * C);
  c.R = falloc(N * C);
  c.pre_dwte = falloc(c.V * C);
  c.pre_dwpe = falloc(c.P * C);
  fill_normal(c.wte, c.V * C, 0, 1);
  fill_normal(c.wpe, c.P * C, 0, 1);
  fill_normal(c.R, N * C, 0, 1);
  fill_prefill(c.pre_dwte, c.V * C);
  fill_prefill(c.pre_dwpe, c.P * C);
  c.out = galloc("out", N * C);
  c.dwte = galloc("dwte", c.V * C);
  c.dwpe = galloc("dwpe", c.P * C);
  c.wte_d = to_double(c.wte, c.V * C);
  c.wpe_d = to_double(c.wpe, c.P * C);
  c.R_d = to_double(c.R, N * C);
  c.scratch = dalloc(N * C);

  embed_run(&c);
  double *ref = dalloc(N * C);
  ref_embed(ref, c.tok, c.wte_d, c.wpe_d, c.B, c.T, c.C);
  cmp("embed fwd", c.out, NULL, ref, N * C, 1e-6);

  double *g_wte = dalloc(c.V * C), *g_wpe = dalloc(c.P * C);
  fd_grad(g_wte, c.wte_d, c.V * C, embed_loss, &c);
  fd_grad(g_wpe, c.wpe_d, c.P * C, embed_loss, &c);
  cmp("embed bwd dwte (+=)", c.dwte, c.pre_dwte, g_wte, c.V * C, 1e-4);
  cmp("embed bwd dwpe (+=)", c.dwpe, c.pre_dwpe, g_wpe, c.P * C, 1e-4);

  outset o = {0};
  out_add(&o, "out", c.out, N * C);
  out_add(&o, "dwte", c.dwte, c.V * C);
  out_add(&o, "dwpe", c.dwpe, c.P * C);
  check_threads("embed", embed_run, &c, &o);
  case_end("embed");
}

/* ============================================================ layernorm === */

#define LN_EPS 1e-5 /* GPT-2's LayerNorm epsilon */

static void ref_layernorm(double *out, double *mean, double *rstd, const double *x,
                          const double *w, const double *b, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *xr = x + (size_t)n * C;
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
    v /= C;
    double r = 1.0 / sqrt(v + LN_EPS);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xr[c] - m) * r * w[c] + b[c];
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = r;
  }
}

typedef struct {
  int N, C;
  float *x, *w, *b, *R, *pre_dx, *pre_dw, *pre_db;
  float *out, *mean, *rstd, *dx, *dw, *db;
  double *x_d, *w_d, *b_d, *R_d, *scratch;
} ln_case;

static void ln_run(void *p) {
  ln_case *c = p;
  size_t N = c->N, C = c->C;
  K->layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C);
  memcpy(c->dx, c->pre_dx, sizeof(float) * N * C);
  memcpy(c->dw, c->pre_dw, sizeof(float) * C);
  memcpy(c->db, c->pre_db, sizeof(float) * C);
  K->layernorm_backward(c->dx, c->dw, c->db, c->R, c->x, c->w, c->mean, c->rstd, c->N, c->C);
}

static double ln_loss(void *p) {
  ln_case *c = p;
  ref_layernorm(c->scratch, NULL, NULL, c->x_d, c->w_d, c->b_d, c->N, c->C);
  return dot_d(c->scratch, c->R_d, (size_t)c->N * c->C);
}

static void test_layernorm(const cfg *g) {
  ln_case c = {.N = g->B * g->T, .C = g->C};
  size_t N = c.N, C = c.C;
  c.x = falloc(N * C);
  c.w = falloc(C);
  c.b = falloc(C);
  c.R = falloc(N * C);
  c.pre_dx = falloc(N * C);
  c.pre_dw = falloc(C);
  c.pre_db = falloc(C);
  fill_normal(c.x, N * C, 0.5f, 1.0f);
  /* the last row has variance 0.0025, where eps = 1e-5 changes rstd by 0.2% */
  fill_normal(c.x + (N - 1) * C, C, 0.0f, 0.05f);
  fill_normal(c.w, C, 1.0f, 0.3f);
  fill_normal(c.b, C, 0.0f, 0.3f);
  fill_normal(c.R, N * C, 0, 1);
  fill_prefill(c.pre_dx, N * C);
  fill_prefill(c.pre_dw, C);
  fill_prefill(c.pre_db, C);
  c.out = galloc("out", N * C);
  c.mean = galloc("mean", N);
  c.rstd = galloc("rstd", N);
  c.dx = galloc("dx", N * C);
  c.dw = galloc("dw", C);
  c.db = galloc("db", C);
  c.x_d = to_double(c.x, N * C);
  c.w_d = to_double(c.w, C);
  c.b_d = to_double(c.b, C);
  c.R_d = to_double(c.R, N * C);
  c.scratch = dalloc(N * C);

  ln_run(&c);
  double *ref = dalloc(N * C), *rm = dalloc(N), *rr = dalloc(N);
  ref_layernorm(ref, rm, rr, c.x_d, c.w_d, c.b_d, c.N, c.C);
  cmp("layernorm fwd out", c.out, NULL, ref, N * C, 1e-5);
  cmp_elem("layernorm fwd mean", c.mean, rm, N, 1.0, 1e-5);
  cmp_elem("layernorm fwd rstd", c.rstd, rr, N, 0.0, 1e-5);

  double *gx = dalloc(N * C), *gw = dalloc(C), *gb = dalloc(C);
  fd_grad(gx, c.x_d, N * C, ln_loss, &c);
  fd_grad(gw, c.w_d, C, ln_loss, &c);
  fd_grad(gb, c.b_d, C, ln_loss, &c);
  cmp("layernorm bwd dx (+=)", c.dx, c.pre_dx, gx, N * C, 1e-4);
  cmp("layernorm bwd dw (+=)", c.dw, c.pre_dw, gw, C, 1e-4);
  cmp("layernorm bwd db (+=)", c.db, c.pre_db, gb, C, 1e-4);

  outset o = {0};
  out_add(&o, "out", c.out, N * C);
  out_add(&o, "mean", c.mean, N);
  out_add(&o, "rstd", c.rstd, N);
  out_add(&o, "dx", c.dx, N * C);
  out_add(&o, "dw", c.dw, C);
  out_add(&o, "db", c.db, C);
  check_threads("layernorm", ln_run, &c, &o);
  case_end("layernorm");
}

/* =============================================================== matmul === */

static void ref_matmul(double *out, const double *x, const double *w, const double *bias, int N,
                       int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int j = 0; j < OC; j++) {
      double s = bias ? bias[j] : 0.0;
      for (int c = 0; c < C; c++) s += x[(size_t)n * C + c] * w[(size_t)j * C + c];
      out[(size_t)n * OC + j] = s;
    }
}

typedef struct {
  int N, C, OC, use_bias, acc; /* acc: forward accumulate and backward accumulate_dx */
  float *x, *w, *bias, *R, *pre_out, *pre_dx, *pre_dw, *pre_db;
  float *out, *dx, *dw, *db;
  double *x_d, *w_d, *b_d, *R_d, *scratch;
} mm_case;

static void mm_run(void *p) {
  mm_case *c = p;
  size_t N = c->N, C = c->C, OC = c->OC;
  memcpy(c->out, c->pre_out, sizeof(float) * N * OC);
  K->matmul_forward(c->out, c->x, c->w, c->use_bias ? c->bias : NULL, c->N, c->C, c->OC, c->acc);
  memcpy(c->dx, c->pre_dx, sizeof(float) * N * C);
  memcpy(c->dw, c->pre_dw, sizeof(float) * OC * C);
  memcpy(c->db, c->pre_db, sizeof(float) * OC);
  K->matmul_backward(c->dx, c->dw, c->use_bias ? c->db : NULL, c->R, c->x, c->w, c->N, c->C,
                     c->OC, c->acc);
}

static double mm_loss(void *p) {
  mm_case *c = p;
  ref_matmul(c->scratch, c->x_d, c->w_d, c->use_bias ? c->b_d : NULL, c->N, c->C, c->OC);
  return dot_d(c->scratch, c->R_d, (size_t)c->N * c->OC);
}

static void test_matmul(const cfg *g, int use_bias, int acc) {
  /* OC is odd and unrelated to C, so a transposed weight cannot go unnoticed */
  mm_case c = {.N = g->B * g->T, .C = g->C, .OC = g->C / 2 + 3, .use_bias = use_bias, .acc = acc};
  size_t N = c.N, C = c.C, OC = c.OC;
  c.x = falloc(N * C);
  c.w = falloc(OC * C);
  c.bias = falloc(OC);
  c.R = falloc(N * OC);
  c.pre_out = falloc(N * OC);
  c.pre_dx = falloc(N * C);
  c.pre_dw = falloc(OC * C);
  c.pre_db = falloc(OC);
  fill_normal(c.x, N * C, 0, 1);
  fill_normal(c.w, OC * C, 0, 1);
  fill_normal(c.bias, OC, 0, 1);
  fill_normal(c.R, N * OC, 0, 1);
  fill_prefill(c.pre_out, N * OC);
  fill_prefill(c.pre_dx, N * C);
  fill_prefill(c.pre_dw, OC * C);
  fill_prefill(c.pre_db, OC);
  c.out = galloc("out", N * OC);
  c.dx = galloc("dx", N * C);
  c.dw = galloc("dw", OC * C);
  c.db = galloc("dbias", OC);
  c.x_d = to_double(c.x, N * C);
  c.w_d = to_double(c.w, OC * C);
  c.b_d = to_double(c.bias, OC);
  c.R_d = to_double(c.R, N * OC);
  c.scratch = dalloc(N * OC);

  char label[64];
  const char *mode = acc ? "accumulate" : "overwrite";
  const char *bname = use_bias ? "bias" : "no bias";
  mm_run(&c);
  double *ref = dalloc(N * OC);
  ref_matmul(ref, c.x_d, c.w_d, use_bias ? c.b_d : NULL, c.N, c.C, c.OC);
  snprintf(label, sizeof label, "matmul fwd (%s, %s)", bname, mode);
  cmp(label, c.out, acc ? c.pre_out : NULL, ref, N * OC, 1e-5);

  double *gx = dalloc(N * C), *gw = dalloc(OC * C), *gb = dalloc(OC);
  fd_grad(gx, c.x_d, N * C, mm_loss, &c);
  fd_grad(gw, c.w_d, OC * C, mm_loss, &c);
  snprintf(label, sizeof label, "matmul bwd dx (%s)", acc ? "+=" : "=");
  cmp(label, c.dx, acc ? c.pre_dx : NULL, gx, N * C, 1e-4);
  snprintf(label, sizeof label, "matmul bwd dw (+=, %s)", bname);
  cmp(label, c.dw, c.pre_dw, gw, OC * C, 1e-4);
  if (use_bias) {
    fd_grad(gb, c.b_d, OC, mm_loss, &c);
    cmp("matmul bwd dbias (+=)", c.db, c.pre_db, gb, OC, 1e-4);
  } else {
    /* dbias = NULL: the buffer must be left alone */
    CHECK(memcmp(c.db, c.pre_db, sizeof(float) * OC) == 0);
  }

  outset o = {0};
  out_add(&o, "out", c.out, N * OC);
  out_add(&o, "dx", c.dx, N * C);
  out_add(&o, "dw", c.dw, OC * C);
  if (use_bias) out_add(&o, "dbias", c.db, OC);
  check_threads("matmul", mm_run, &c, &o);
  case_end("matmul");
}

/* ============================================================ attention === */

/* Outputs of sequences [b0, b1), heads [h0, h1), query rows [i0, i1) only. */
static void ref_attention_part(double *out, double *lse, const double *qkv, int T, int C, int NH,
                               int b0, int b1, int h0, int h1, int i0, int i1) {
  int hs = C / NH;
  size_t C3 = 3 * (size_t)C;
  double scale = 1.0 / sqrt((double)hs);
  double *s = malloc(sizeof(double) * (size_t)T);
  for (int b = b0; b < b1; b++)
    for (int h = h0; h < h1; h++)
      for (int i = i0; i < i1; i++) {
        const double *q = qkv + ((size_t)b * T + i) * C3 + (size_t)h * hs;
        double mx = -INFINITY;
        for (int j = 0; j <= i; j++) {
          const double *k = qkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hs;
          double d = 0.0;
          for (int e = 0; e < hs; e++) d += q[e] * k[e];
          s[j] = d * scale;
          if (s[j] > mx) mx = s[j];
        }
        double sum = 0.0;
        for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
        double l = mx + log(sum);
        double *o = out + ((size_t)b * T + i) * C + (size_t)h * hs;
        for (int e = 0; e < hs; e++) o[e] = 0.0;
        for (int j = 0; j <= i; j++) {
          const double *v = qkv + ((size_t)b * T + j) * C3 + 2 * (size_t)C + (size_t)h * hs;
          double pj = exp(s[j] - l);
          for (int e = 0; e < hs; e++) o[e] += pj * v[e];
        }
        if (lse) lse[((size_t)b * NH + h) * T + i] = l;
      }
  free(s);
}

static void ref_attention(double *out, double *lse, const double *qkv, int B, int T, int C,
                          int NH) {
  ref_attention_part(out, lse, qkv, T, C, NH, 0, B, 0, NH, 0, T);
}

typedef struct {
  int B, T, C, NH;
  float *qkv, *R;
  float *out, *lse, *dqkv;
  double *qkv_d, *R_d, *scratch;
  int fb, fh, fi0; /* the loss terms that depend on the element being differenced */
} attn_case;

static void attn_run(void *p) {
  attn_case *c = p;
  size_t N = (size_t)c->B * c->T;
  K->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH);
  /* garbage first: dqkv must be overwritten */
  for (size_t i = 0; i < N * 3 * c->C; i++) c->dqkv[i] = 999.0f;
  K->attention_backward(c->dqkv, c->R, c->qkv, c->out, c->lse, c->B, c->T, c->C, c->NH);
}

/* sum(out * R) over sequence fb, head fh, rows fi0.. T-1: by causality of the
 * reference (query row i reads keys and values j <= i only), every other term of
 * sum(out * R) is constant in q, k and v of sequence fb, head fh, token fi0 (q: only row
 * fi0 depends on it, but taking all later rows too costs little). */
static double attn_loss(void *p) {
  attn_case *c = p;
  int hs = c->C / c->NH;
  ref_attention_part(c->scratch, NULL, c->qkv_d, c->T, c->C, c->NH, c->fb, c->fb + 1, c->fh,
                     c->fh + 1, c->fi0, c->T);
  double sum = 0.0;
  for (int i = c->fi0; i < c->T; i++)
    for (int e = 0; e < hs; e++) {
      size_t at = ((size_t)c->fb * c->T + i) * c->C + (size_t)c->fh * hs + e;
      sum += c->scratch[at] * c->R_d[at];
    }
  return sum;
}

static void test_attention(const cfg *g) {
  attn_case c = {.B = g->B, .T = g->T, .C = g->C, .NH = g->NH};
  size_t N = (size_t)c.B * c.T, C = c.C, C3 = 3 * C, NL = (size_t)c.B * c.NH * c.T;
  c.qkv = falloc(N * C3);
  c.R = falloc(N * C);
  fill_normal(c.qkv, N * C3, 0, 1.2f);
  fill_normal(c.R, N * C, 0, 1);
  c.out = galloc("out", N * C);
  c.lse = galloc("lse", NL);
  c.dqkv = galloc("dqkv", N * C3);
  c.qkv_d = to_double(c.qkv, N * C3);
  c.R_d = to_double(c.R, N * C);
  c.scratch = dalloc(N * C);

  attn_run(&c);
  double *ref = dalloc(N * C), *rl = dalloc(NL);
  ref_attention(ref, rl, c.qkv_d, c.B, c.T, c.C, c.NH);
  cmp("attention fwd out", c.out, NULL, ref, N * C, 1e-5);
  cmp_elem("attention fwd lse", c.lse, rl, NL, 1.0, 1e-5);

  double *gq = dalloc(N * C3);
  int hs = c.C / c.NH;
  for (size_t at = 0; at < N * C3; at++) {
    size_t row = at / C3, col = at % C3;
    c.fb = (int)(row / c.T);
    c.fi0 = (int)(row % c.T);
    c.fh = (int)((col % C) / hs);
    fd_grad(gq + at, c.qkv_d + at, 1, attn_loss, &c);
  }
  /* q, k and v parts separately, so that each is held to its own scale */
  for (int part = 0; part < 3; part++) {
    float *got = falloc(N * C);
    double *want = dalloc(N * C);
    for (size_t n = 0; n < N; n++)
      for (size_t e = 0; e < C; e++) {
        got[n * C + e] = c.dqkv[n * C3 + part * C + e];
        want[n * C + e] = gq[n * C3 + part * C + e];
      }
    static const char *names[3] = {"attention bwd dq (=)", "attention bwd dk (=)",
                                   "attention bwd dv (=)"};
    /* dq and dk are exactly zero at T = 1 (a single key); the scale is then absolute */
    cmp(names[part], got, NULL, want, N * C, 1e-4);
  }

  /* causality, forward: changing tokens after t0 leaves outputs up to t0 bit-identical */
  if (c.T > 1) {
    int t0 = (c.T - 1) / 2;
    float *qkv2 = falloc(N * C3), *out2 = galloc("out (perturbed)", N * C),
          *lse2 = galloc("lse (perturbed)", NL);
    memcpy(qkv2, c.qkv, sizeof(float) * N * C3);
    for (int b = 0; b < c.B; b++)
      fill_normal(qkv2 + ((size_t)b * c.T + t0 + 1) * C3, (size_t)(c.T - t0 - 1) * C3, 0, 3.0f);
    K->attention_forward(out2, lse2, qkv2, c.B, c.T, c.C, c.NH);
    int same = 1, differs = 0;
    for (int b = 0; b < c.B; b++) {
      size_t row = (size_t)b * c.T;
      same &= memcmp(out2 + row * C, c.out + row * C, sizeof(float) * (t0 + 1) * C) == 0;
      differs |= memcmp(out2 + (row + t0 + 1) * C, c.out + (row + t0 + 1) * C,
                        sizeof(float) * (c.T - t0 - 1) * C) != 0;
      for (int h = 0; h < c.NH; h++)
        same &= memcmp(lse2 + ((size_t)b * c.NH + h) * c.T, c.lse + ((size_t)b * c.NH + h) * c.T,
                       sizeof(float) * (t0 + 1)) == 0;
    }
    if (!same) {
      fprintf(stderr, "FAIL attention causality [%s]: outputs up to t=%d depend on later tokens\n",
              cfgname, t0);
      check_failures++;
    }
    CHECK(differs); /* the perturbation did reach the later outputs */

    /* causality, backward: a loss on outputs up to t0 gives tokens after t0 zero
     * gradient in q, k and v, exactly */
    float *Rm = falloc(N * C), *dq2 = galloc("dqkv (masked)", N * C3);
    memcpy(Rm, c.R, sizeof(float) * N * C);
    for (int b = 0; b < c.B; b++)
      memset(Rm + ((size_t)b * c.T + t0 + 1) * C, 0, sizeof(float) * (c.T - t0 - 1) * C);
    for (size_t i = 0; i < N * C3; i++) dq2[i] = 999.0f;
    K->attention_backward(dq2, Rm, c.qkv, c.out, c.lse, c.B, c.T, c.C, c.NH);
    int nonzero = 0, anyearly = 0;
    for (int b = 0; b < c.B; b++)
      for (int t = 0; t < c.T; t++)
        for (size_t e = 0; e < C3; e++) {
          float v = dq2[((size_t)b * c.T + t) * C3 + e];
          if (t > t0 && v != 0.0f) nonzero++;
          if (t <= t0 && v != 0.0f) anyearly = 1;
        }
    if (nonzero) {
      fprintf(stderr,
              "FAIL attention causality [%s]: %d gradient entries of tokens after t=%d are nonzero "
              "for a loss on outputs up to t=%d\n",
              cfgname, nonzero, t0, t0);
      check_failures++;
    }
    CHECK(anyearly);
  }

  outset o = {0};
  out_add(&o, "out", c.out, N * C);
  out_add(&o, "lse", c.lse, NL);
  out_add(&o, "dqkv", c.dqkv, N * C3);
  check_threads("attention", attn_run, &c, &o);
  case_end("attention");
}

/* ================================================================= gelu === */

static double ref_gelu1(double x) {
  const double k = sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

typedef struct {
  size_t n;
  float *x, *R;
  float *out, *dx, *dx_inplace;
  double *x_d, *R_d;
  size_t fi; /* the element being differenced */
} gelu_case;

static void gelu_run(void *p) {
  gelu_case *c = p;
  K->gelu_forward(c->out, c->x, c->n);
  for (size_t i = 0; i < c->n; i++) c->dx[i] = 999.0f; /* must be overwritten */
  K->gelu_backward(c->dx, c->x, c->R, c->n);
  /* in place, dx == dout, as the model calls it */
  memcpy(c->dx_inplace, c->R, sizeof(float) * c->n);
  K->gelu_backward(c->dx_inplace, c->x, c->dx_inplace, c->n);
}

/* the one term of sum(gelu(x) * R) that depends on x[fi] (elementwise op) */
static double gelu_loss(void *p) {
  gelu_case *c = p;
  return ref_gelu1(c->x_d[c->fi]) * c->R_d[c->fi];
}

static void test_gelu(const cfg *g) {
  gelu_case c = {.n = (size_t)g->B * g->T * 4 * g->C + 3};
  size_t n = c.n;
  c.x = falloc(n);
  c.R = falloc(n);
  fill_normal(c.x, n, 0, 2.5f);
  /* zero, the tanh saturation on both sides, and a very negative input */
  c.x[0] = 0.0f;
  c.x[1] = -9.0f;
  c.x[2] = 9.0f;
  c.x[3] = -30.0f;
  fill_normal(c.R, n, 0, 1);
  c.out = galloc("out", n);
  c.dx = galloc("dx", n);
  c.dx_inplace = galloc("dx (in place)", n);
  c.x_d = to_double(c.x, n);
  c.R_d = to_double(c.R, n);

  gelu_run(&c);
  double *ref = dalloc(n);
  for (size_t i = 0; i < n; i++) ref[i] = ref_gelu1(c.x_d[i]);
  cmp("gelu fwd", c.out, NULL, ref, n, 1e-5);
  /* elementwise too, floor 0.1: the small negative tail is held to its own size */
  cmp_elem("gelu fwd (elementwise, floor 0.1)", c.out, ref, n, 0.1, 1e-5);

  double *gx = dalloc(n);
  for (c.fi = 0; c.fi < n; c.fi++) fd_grad(gx + c.fi, c.x_d + c.fi, 1, gelu_loss, &c);
  cmp("gelu bwd dx (=)", c.dx, NULL, gx, n, 1e-4);
  cmp("gelu bwd dx (=, in place)", c.dx_inplace, NULL, gx, n, 1e-4);

  outset o = {0};
  out_add(&o, "out", c.out, n);
  out_add(&o, "dx", c.dx, n);
  out_add(&o, "dx in place", c.dx_inplace, n);
  check_threads("gelu", gelu_run, &c, &o);
  case_end("gelu");
}

/* ========================================================= cross-entropy === */

static void ref_xent(double *losses, double *lse, const double *z, const int32_t *tgt, int N,
                     int V) {
  for (int n = 0; n < N; n++) {
    const double *r = z + (size_t)n * V;
    double mx = -INFINITY, s = 0.0;
    for (int v = 0; v < V; v++) mx = r[v] > mx ? r[v] : mx;
    for (int v = 0; v < V; v++) s += exp(r[v] - mx);
    double l = mx + log(s);
    if (lse) lse[n] = l;
    losses[n] = l - r[tgt[n]];
  }
}

typedef struct {
  int N, V;
  float dloss;
  int32_t *tgt;
  float *logits;
  float *losses, *lse, *dlogits;
  double *z_d, *scratch;
  int fn; /* the row being differenced */
} xent_case;

static void xent_run(void *p) {
  xent_case *c = p;
  K->xent_forward(c->losses, c->lse, c->logits, c->tgt, c->N, c->V);
  memcpy(c->dlogits, c->logits, sizeof(float) * (size_t)c->N * c->V);
  K->xent_backward(c->dlogits, c->lse, c->tgt, c->dloss, c->N, c->V);
}

/* scalar loss: dloss * sum_n losses[n] */
/* the one term of dloss * sum_n losses[n] that depends on row fn of the logits */
static double xent_loss(void *p) {
  xent_case *c = p;
  ref_xent(c->scratch, NULL, c->z_d + (size_t)c->fn * c->V, c->tgt + c->fn, 1, c->V);
  return (double)c->dloss * c->scratch[0];
}

static void test_xent(const cfg *g, float dloss) {
  xent_case c = {.N = g->B * g->T, .V = g->V, .dloss = dloss};
  size_t N = c.N, V = c.V;
  c.tgt = tokens(N, c.V);
  c.logits = falloc(N * V);
  fill_normal(c.logits, N * V, 0, 3.0f);
  /* rows far from zero: expf(z) overflows float without the max subtraction */
  for (size_t v = 0; v < V; v++) c.logits[v] += 100.0f;
  if (N > 1)
    for (size_t v = 0; v < V; v++) c.logits[(N - 1) * V + v] -= 100.0f;
  c.losses = galloc("losses", N);
  c.lse = galloc("lse", N);
  c.dlogits = galloc("dlogits", N * V);
  c.z_d = to_double(c.logits, N * V);
  c.scratch = dalloc(N);

  xent_run(&c);
  double *rl = dalloc(N), *rlse = dalloc(N);
  ref_xent(rl, rlse, c.z_d, c.tgt, c.N, c.V);
  cmp("xent fwd losses", c.losses, NULL, rl, N, 1e-5);
  cmp_elem("xent fwd lse", c.lse, rlse, N, 1.0, 1e-5);

  double *gz = dalloc(N * V);
  for (c.fn = 0; c.fn < c.N; c.fn++)
    fd_grad(gz + (size_t)c.fn * V, c.z_d + (size_t)c.fn * V, V, xent_loss, &c);
  cmp("xent bwd dlogits (in place)", c.dlogits, NULL, gz, N * V, 1e-4);

  outset o = {0};
  out_add(&o, "losses", c.losses, N);
  out_add(&o, "lse", c.lse, N);
  out_add(&o, "dlogits", c.dlogits, N * V);
  check_threads("xent", xent_run, &c, &o);
  case_end("xent");
}

/* ====================================================== dense sweeps === */

/* exp(z - lse) as xent_backward computes it, elementwise over the whole range a
 * probability takes: z - lse from -87 (probabilities below ~1.6e-38 do not matter)
 * to 0, on a dense grid. Relative tolerance 1e-6 (~16 ulp): an exp good to a few ulp
 * passes, a polynomial or range reduction off by 1e-6 does not. Below -87 the result
 * must still be negligible (<= 2e-38), not garbage. */
static void test_softmax_exp_sweep(void) {
  snprintf(cfgname, sizeof cfgname, "sweep z - lse in [-87, 0]");
  const int V = 1025, N = 88; /* row r covers [-(r+1), -r] */
  float *z = galloc("dlogits", (size_t)N * V), *lse = falloc(N);
  int32_t *tgt = tmalloc(sizeof(int32_t) * N);
  double *ref = dalloc((size_t)N * V);
  for (int r = 0; r < N; r++) {
    lse[r] = 3.0f; /* so that z = arg + 3 exercises the subtraction too */
    tgt[r] = 0;
    for (int v = 0; v < V; v++) {
      float arg = (float)(-(double)(r + 1) + (double)v / (V - 1));
      if (arg < -87.0f) arg = -87.0f;
      z[(size_t)r * V + v] = arg + 3.0f;
      /* the reference uses the argument the kernel really sees, z - lse in float */
      ref[(size_t)r * V + v] = exp((double)(z[(size_t)r * V + v] - 3.0f));
    }
  }
  /* the target is column 0, where dloss is subtracted; columns 1.. are plain exp */
  K->xent_backward(z, lse, tgt, 1.0f, N, V);
  size_t m = 0;
  for (int r = 0; r < N; r++)
    for (int v = 1; v < V; v++, m++) {
      z[m] = z[(size_t)r * V + v]; /* pack in place: m < r * V + v */
      ref[m] = ref[(size_t)r * V + v];
    }
  cmp_elem("softmax exp(z - lse) sweep (elementwise)", z, ref, m, 1e-30, 1e-6);

  float tail[4] = {-88.0f, -100.0f, -200.0f, -1e30f}, tl = 0.0f;
  int32_t t0 = 0;
  float row[5] = {0.0f, tail[0], tail[1], tail[2], tail[3]};
  K->xent_backward(row, &tl, &t0, 1.0f, 1, 5);
  for (int i = 1; i < 5; i++) {
    if (!(row[i] >= 0.0f && row[i] <= 2e-38f)) {
      fprintf(stderr, "FAIL softmax tail: exp(%g) gave %g, expected <= 2e-38\n", tail[i - 1], row[i]);
      check_failures++;
    }
  }
  case_end("softmax sweep");
}

/* GELU and its derivative on a dense grid over [-12, 12] against the double formula
 * (the derivative analytically). Forward: for x >= 0 there is no cancellation, relative
 * 1e-6; for x < 0, 1 + tanh(u) cancels, so the error is held to 1e-5 of
 * max(|ref|, 0.1). Backward: 1e-5 norm-wise, and 1e-5 of max(|ref|, 0.1) for x >= 0.
 * (In the negative tail the tanh approximation saturates to exactly -1 for u < ~-8.3,
 * so the derivative is flushed to 0 for x < ~-4.9 where it is really ~-2e-6: an
 * absolute error of 2e-6, inside the norm-wise tolerance; libm tanhf gave 5e-7.) */
static void test_gelu_sweep(void) {
  snprintf(cfgname, sizeof cfgname, "sweep x in [-12, 12]");
  const size_t n = 24001;
  float *x = falloc(n), *out = galloc("out", n), *one = falloc(n), *dx = galloc("dx", n);
  double *ref = dalloc(n), *dref = dalloc(n);
  const double k = sqrt(2.0 / M_PI);
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)(-12.0 + 24.0 * (double)i / (double)(n - 1));
    one[i] = 1.0f;
    double v = x[i], t = tanh(k * (v + 0.044715 * v * v * v));
    ref[i] = 0.5 * v * (1.0 + t);
    dref[i] = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v);
  }
  K->gelu_forward(out, x, n);
  K->gelu_backward(dx, x, one, n);
  size_t half = n / 2; /* x[half] = 0 */
  cmp_elem("gelu sweep fwd x<0 (floor 0.1)", out, ref, half, 0.1, 1e-5);
  cmp_elem("gelu sweep fwd x>=0 (relative)", out + half, ref + half, n - half, 1e-30, 1e-6);
  cmp("gelu sweep bwd (norm-wise)", dx, NULL, dref, n, 1e-5);
  cmp_elem("gelu sweep bwd x>=0 (floor 0.1)", dx + half, dref + half, n - half, 0.1, 1e-5);
  case_end("gelu sweep");
}

/* ========================================================== ops table === */

static void test_table(void) {
  CHECK(K != NULL);
  CHECK(K->name != NULL && strcmp(K->name, "cpu") == 0);
  CHECK(K->alloc && K->free);
  CHECK(K->embed_forward && K->embed_backward);
  CHECK(K->layernorm_forward && K->layernorm_backward);
  CHECK(K->matmul_forward && K->matmul_backward);
  CHECK(K->attention_forward && K->attention_backward);
  CHECK(K->gelu_forward && K->gelu_backward);
  CHECK(K->xent_forward && K->xent_backward);
  /* alloc returns zeroed memory, also for sizes that are not a multiple of anything */
  size_t sizes[3] = {4, 4 * 37, 4096 + 12};
  for (int s = 0; s < 3; s++) {
    /* dirty the heap first so that zeroing is not a coincidence */
    unsigned char *d = malloc(sizes[s]);
    memset(d, 0xAB, sizes[s]);
    free(d);
    unsigned char *p = K->alloc(sizes[s]);
    CHECK(p != NULL);
    if (!p) continue;
    int zero = 1;
    for (size_t i = 0; i < sizes[s]; i++) zero &= p[i] == 0;
    CHECK(zero);
    K->free(p);
  }
}

int main(void) {
  K = atoll_ops_cpu();
  atoll_rng_seed(&rng, 20240601);
  test_table();
  test_softmax_exp_sweep();
  test_gelu_sweep();
  int ncfg = (int)(sizeof configs / sizeof configs[0]);
  for (int i = 0; i < ncfg; i++) {
    const cfg *g = &configs[i];
    snprintf(cfgname, sizeof cfgname, "B=%d T=%d C=%d NH=%d V=%d", g->B, g->T, g->C, g->NH, g->V);
    test_embed(g);
    test_layernorm(g);
    for (int bias = 0; bias < 2; bias++)
      for (int acc = 0; acc < 2; acc++) test_matmul(g, bias, acc);
    test_attention(g);
    test_gelu(g);
    test_xent(g, i % 2 ? -1.25f : 0.37f);
  }
  printf("%-44s %10s %10s %6s\n", "check (all configs)", "worst err", "tolerance", "count");
  for (int i = 0; i < nstats; i++)
    printf("%-44s %10.3g %10.3g %6d\n", stats[i].label, stats[i].worst, stats[i].tol,
           stats[i].count);
  CHECK_DONE();
}

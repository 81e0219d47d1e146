/* The CPU matrix engine (gemm_cpu.h): OpenBLAS sgemm, oneDNN sgemm and oneDNN's bf16
 * matmul behind one row-major call. oneDNN is optional at build time (ATOLL_HAVE_DNNL,
 * libdnnl-dev); without it fp32 runs on OpenBLAS and bf16 is refused. */
#include "ops/gemm_cpu.h"

#include "core/fatal.h"
#include "ops/cpu_features.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef ATOLL_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

char *openblas_get_corename(void); /* OpenBLAS's own API, not part of CBLAS */

/* ------------------------------------------------------------ engine choice --- */

static atoll_engine fp32_engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

/* The default by measurement (bench/README.md, "Matrix engines"): on processors with
 * AVX-512 oneDNN's sgemm was faster than OpenBLAS at the model's shapes; elsewhere
 * OpenBLAS stays (not measured yet on AVX2-only machines). */
static void choose_engine(void) {
  fp32_engine = ATOLL_ENGINE_OPENBLAS;
#ifdef ATOLL_HAVE_DNNL
  if (atoll_cpu()->avx512) fp32_engine = ATOLL_ENGINE_ONEDNN;
#endif
}

atoll_engine atoll_gemm_engine(void) {
  pthread_once(&engine_once, choose_engine);
  return fp32_engine;
}

int atoll_gemm_set_engine(atoll_engine e, atoll_err *err) {
  pthread_once(&engine_once, choose_engine);
  (void)err;
#ifndef ATOLL_HAVE_DNNL
  if (e == ATOLL_ENGINE_ONEDNN) return atoll_fail(err, "oneDNN: not in this build (install libdnnl-dev and rebuild)");
#endif
  fp32_engine = e;
  return 0;
}

const char *atoll_gemm_engine_name(atoll_engine e) { return e == ATOLL_ENGINE_ONEDNN ? "oneDNN" : "OpenBLAS"; }

/* ------------------------------------------------------------------ OpenBLAS --- */

const char *atoll_openblas_core(void) {
  const char *s = openblas_get_corename();
  return s ? s : "unknown";
}

/* OpenBLAS's kernel families without AVX2 (its generic fall-backs on CPUs it does not
 * recognise, such as a virtual machine's renamed processor). */
static int generic_core(const char *name) {
  static const char *generic[] = {"Prescott", "Nehalem", "Core2", "Penryn", "Dunnington", "Atom",
                                  "Katmai", "Coppermine", "Northwood", "Banias", "Opteron", "Barcelona",
                                  "Bobcat", "Sandybridge", "Bulldozer", "Piledriver", "Steamroller",
                                  "Excavator", "unknown"};
  for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
    if (strcasecmp(name, generic[i]) == 0) return 1;
  return 0;
}

const char *atoll_openblas_better_core(void) { return atoll_openblas_better_core_for(atoll_openblas_core()); }

const char *atoll_openblas_better_core_for(const char *core) {
  const atoll_cpu_features *f = atoll_cpu();
  if (!generic_core(core)) return NULL;
  if (f->avx512) return "SkylakeX";
  if (f->avx2) return "Haswell";
  return NULL;
}

/* --------------------------------------------------------------------- oneDNN --- */

#ifdef ATOLL_HAVE_DNNL
static dnnl_engine_t dnnl_eng;
static dnnl_stream_t dnnl_strm;
static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static int dnnl_ok;

static void dnnl_start(void) {
  dnnl_ok = dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) == dnnl_success &&
            dnnl_stream_create(&dnnl_strm, dnnl_eng, dnnl_stream_default_flags) == dnnl_success;
}

/* A bf16 matmul primitive per product shape, made at the first call of that shape (a
 * few hundred microseconds) and kept: a model has a handful of shapes. */
typedef struct {
  int ta, tb, M, N, K, ldc, beta_kind; /* beta_kind: 0 (C =), 1 (C +=) */
  float alpha;
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c;
} bf16_plan;

#define MAX_PLANS 64
static bf16_plan plans[MAX_PLANS];
static int nplans;
static pthread_mutex_t bf16_lock = PTHREAD_MUTEX_INITIALIZER;
static uint16_t *conv_a, *conv_b; /* bf16 copies of A and B, grown as needed */
static size_t cap_a, cap_b;

#define DNNL_CHECK(call)                                                                  \
  do {                                                                                    \
    dnnl_status_t st_ = (call);                                                           \
    if (st_ != dnnl_success) atoll_fatal("oneDNN: %s failed (status %d)", #call, (int)st_); \
  } while (0)

static bf16_plan *plan_for(int ta, int tb, int M, int N, int K, int ldc, float alpha, float beta) {
  int beta_kind = beta != 0.0f;
  if (beta != 0.0f && beta != 1.0f) atoll_fatal("bf16 gemm: beta must be 0 or 1, got %g", beta);
  for (int i = 0; i < nplans; i++) {
    bf16_plan *p = &plans[i];
    if (p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->ldc == ldc &&
        p->beta_kind == beta_kind && p->alpha == alpha)
      return p;
  }
  if (nplans == MAX_PLANS) { /* more shapes than a model has: start over */
    for (int i = 0; i < nplans; i++) {
      dnnl_primitive_destroy(plans[i].prim);
      dnnl_memory_destroy(plans[i].a);
      dnnl_memory_destroy(plans[i].b);
      dnnl_memory_destroy(plans[i].c);
    }
    nplans = 0;
  }
  bf16_plan *p = &plans[nplans];
  *p = (bf16_plan){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .ldc = ldc, .beta_kind = beta_kind, .alpha = alpha};
  /* A and B are dense bf16 copies in their stored orientation; C keeps its stride */
  dnnl_memory_desc_t da, db, dc;
  dnnl_dims_t dims_a = {M, K}, dims_b = {K, N}, dims_c = {M, N};
  dnnl_dims_t str_a = {ta ? 1 : K, ta ? M : 1}, str_b = {tb ? 1 : N, tb ? K : 1}, str_c = {ldc, 1};
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&da, 2, dims_a, dnnl_bf16, str_a));
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&db, 2, dims_b, dnnl_bf16, str_b));
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&dc, 2, dims_c, dnnl_f32, str_c));
  dnnl_matmul_desc_t md;
  DNNL_CHECK(dnnl_matmul_desc_init(&md, &da, &db, NULL, &dc));
  dnnl_primitive_attr_t attr;
  DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  if (alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
  if (beta_kind) {
    dnnl_post_ops_t po;
    DNNL_CHECK(dnnl_post_ops_create(&po));
    DNNL_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
    DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd;
  DNNL_CHECK(dnnl_primitive_desc_create(&pd, &md, attr, dnnl_eng, NULL));
  dnnl_primitive_attr_destroy(attr);
  DNNL_CHECK(dnnl_primitive_create(&p->prim, pd));
  dnnl_primitive_desc_destroy(pd);
  DNNL_CHECK(dnnl_memory_create(&p->a, &da, dnnl_eng, DNNL_MEMORY_NONE));
  DNNL_CHECK(dnnl_memory_create(&p->b, &db, dnnl_eng, DNNL_MEMORY_NONE));
  DNNL_CHECK(dnnl_memory_create(&p->c, &dc, dnnl_eng, DNNL_MEMORY_NONE));
  nplans++;
  return p;
}

/* rows x cols of X (row stride ld) into a dense bf16 buffer */
static uint16_t *to_bf16(uint16_t **buf, size_t *cap, const float *X, int rows, int cols, int ld) {
  size_t need = (size_t)rows * cols;
  if (need > *cap) {
    free(*buf);
    *buf = malloc(need * sizeof(uint16_t));
    if (!*buf) atoll_fatal("bf16 gemm: out of memory for %zu bytes of bf16 copies", need * sizeof(uint16_t));
    *cap = need;
  }
  uint16_t *out = *buf;
#pragma omp parallel for schedule(static) if (need > 16384)
  for (int r = 0; r < rows; r++) {
    const float *x = X + (size_t)r * ld;
    uint16_t *o = out + (size_t)r * cols;
#pragma omp simd
    for (int c = 0; c < cols; c++) o[c] = atoll_bf16_from_f32(x[c]);
  }
  return out;
}
#endif

/* ---------------------------------------------------------------- the products --- */

void atoll_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc) {
#ifdef ATOLL_HAVE_DNNL
  if (atoll_gemm_engine() == ATOLL_ENGINE_ONEDNN && !omp_in_parallel()) {
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) atoll_fatal("oneDNN: sgemm %dx%dx%d failed (status %d)", M, N, K, (int)st);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
              lda, B, ldb, beta, C, ldc);
}

void atoll_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
#ifdef ATOLL_HAVE_DNNL
  if (M == 0 || N == 0) return;
  if (K == 0) { /* an empty sum: C = beta C */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    return;
  }
  pthread_once(&dnnl_once, dnnl_start);
  if (!dnnl_ok) atoll_fatal("oneDNN: no CPU engine");
  pthread_mutex_lock(&bf16_lock);
  bf16_plan *p = plan_for(ta, tb, M, N, K, ldc, alpha, beta);
  uint16_t *a = to_bf16(&conv_a, &cap_a, A, ta ? K : M, ta ? M : K, lda);
  uint16_t *b = to_bf16(&conv_b, &cap_b, B, tb ? N : K, tb ? K : N, ldb);
  DNNL_CHECK(dnnl_memory_set_data_handle(p->a, a));
  DNNL_CHECK(dnnl_memory_set_data_handle(p->b, b));
  DNNL_CHECK(dnnl_memory_set_data_handle(p->c, C));
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
  DNNL_CHECK(dnnl_primitive_execute(p->prim, dnnl_strm, 3, args));
  DNNL_CHECK(dnnl_stream_wait(dnnl_strm));
  pthread_mutex_unlock(&bf16_lock);
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
  (void)C, (void)ldc;
  atoll_fatal("bf16 gemm: this build has no oneDNN");
#endif
}

int atoll_gemm_bf16_check(atoll_err *err) {
#ifndef ATOLL_HAVE_DNNL
  return atoll_fail(err, "--precision bf16: this build has no oneDNN (install libdnnl-dev and rebuild); use --precision fp32");
#else
  const atoll_cpu_features *f = atoll_cpu();
  if (!f->avx512_bf16 && !f->amx_bf16)
    return atoll_fail(err, "--precision bf16: this CPU (%s) has neither AVX512_BF16 nor AMX-BF16 instructions; "
                      "use --precision fp32", f->model);
  pthread_once(&dnnl_once, dnnl_start);
  if (!dnnl_ok) return atoll_fail(err, "--precision bf16: oneDNN could not create a CPU engine");
  return 0;
#endif
}

void atoll_gemm_describe(char *buf, size_t n, int precision_bf16, int threads) {
  const atoll_cpu_features *f = atoll_cpu();
  char feats[96];
  atoll_cpu_feature_list(f, feats, sizeof feats);
  atoll_engine e = atoll_gemm_engine();
  int len = snprintf(buf, n, "CPU %s (%s), %d thread%s; fp32 products: %s", f->model, feats, threads,
                     threads == 1 ? "" : "s", atoll_gemm_engine_name(e));
  if (e == ATOLL_ENGINE_OPENBLAS && len > 0 && (size_t)len < n)
    len += snprintf(buf + len, n - (size_t)len, " (%s kernels)", atoll_openblas_core());
  if (precision_bf16 && len > 0 && (size_t)len < n)
    len += snprintf(buf + len, n - (size_t)len, "; bf16 products: oneDNN matmul on %s, fp32 accumulation",
                    f->amx_bf16 ? "AMX-BF16 tiles" : "AVX512_BF16");
  if (len > 0 && (size_t)len < n)
    snprintf(buf + len, n - (size_t)len, "; attention: OpenBLAS (%s kernels)", atoll_openblas_core());
}

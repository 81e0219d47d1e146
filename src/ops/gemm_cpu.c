/* The CPU matrix engine (gemm_cpu.h): OpenBLAS sgemm, oneDNN sgemm and oneDNN's bf16
 * matmul behind one row-major call. oneDNN is optional at build time (ATOLL_HAVE_DNNL,
 * libdnnl-dev); without it fp32 runs on OpenBLAS and bf16 is refused. */
#include "ops/gemm_cpu.h"

#include "core/fatal.h"
#include "ops/attention_bf16.h"
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

/* The default by measurement (bench/README.md, "Matrix engines"): oneDNN's sgemm was
 * faster than OpenBLAS at the model's shapes with AVX-512, and on the AVX2 code paths
 * of the same Xeon (ATOLL_MAX_ISA=avx2; no AVX2-only processor was at hand); OpenBLAS
 * below AVX2. */
static void choose_engine(void) {
  fp32_engine = ATOLL_ENGINE_OPENBLAS;
#ifdef ATOLL_HAVE_DNNL
  if (atoll_cpu()->avx512 || atoll_cpu()->avx2) fp32_engine = ATOLL_ENGINE_ONEDNN;
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

/* OpenBLAS's kernel families that use AVX-512 */
static int avx512_core(const char *name) {
  return strcasecmp(name, "SkylakeX") == 0 || strcasecmp(name, "Cooperlake") == 0 ||
         strcasecmp(name, "SapphireRapids") == 0;
}

int atoll_openblas_generic(const char *core) { return generic_core(core); }

const char *atoll_openblas_better_core_for(const char *core) {
  const atoll_cpu_features *f = atoll_cpu();
  if (generic_core(core)) return f->avx512 ? "SkylakeX" : f->avx2 ? "Haswell" : NULL;
  if (!f->avx512 && avx512_core(core) && f->avx2) return "Haswell"; /* ATOLL_MAX_ISA below avx512 */
  return NULL;
}

/* --------------------------------------------------------------------- oneDNN --- */

#ifdef ATOLL_HAVE_DNNL
static dnnl_engine_t dnnl_eng;
static dnnl_stream_t dnnl_strm;
static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static int dnnl_ok;

/* ATOLL_MAX_ISA (cpu_features.h) as oneDNN's own cap, before its first call; it wins
 * over a ONEDNN_MAX_CPU_ISA in the environment. "amx" caps nothing: such a variable
 * then stays in force, and the header and the bf16 check ask oneDNN what it runs. */
static pthread_once_t dnnl_cap_once = PTHREAD_ONCE_INIT;
static void dnnl_cap(void) {
  const char *cap = atoll_cpu()->cap;
  if (!*cap || strcmp(cap, "amx") == 0) return;
  dnnl_cpu_isa_t isa = strcmp(cap, "avx2") == 0 ? dnnl_cpu_isa_avx2
                       : strcmp(cap, "avx512") == 0 ? dnnl_cpu_isa_avx512_core
                                                    : dnnl_cpu_isa_avx512_core_bf16;
  if (dnnl_set_max_cpu_isa(isa) != dnnl_success) atoll_fatal("ATOLL_MAX_ISA=%s: oneDNN refused the cap", cap);
}

static void dnnl_start(void) {
  pthread_once(&dnnl_cap_once, dnnl_cap);
  dnnl_ok = dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) == dnnl_success &&
            dnnl_stream_create(&dnnl_strm, dnnl_eng, dnnl_stream_default_flags) == dnnl_success;
}

/* A bf16 matmul primitive per product layout (batch, transposes, sizes, leading
 * dimensions and batch strides, alpha, beta, bias), made at the first call of that
 * layout (a few hundred microseconds) and kept for the life of the process: a model has
 * a handful of layouts. The lock guards only the table; primitives are never destroyed,
 * so several threads may execute them at once: memory objects are made per call, each
 * thread has its own stream, and each thread its own scratchpad. oneDNN's own
 * ("library") scratchpad is one buffer for all primitives in builds without
 * DNNL_ENABLE_CONCURRENT_EXEC, such as Debian's: two threads running products at once
 * wrote into each other's partial sums (test_bf16_kernels' thread check failed 11 runs
 * in 60). */
typedef struct {
  int batch, ta, tb, M, N, K, lda, ldb, ldc, beta_kind, has_bias; /* beta_kind: 0 (C =), 1 (C +=) */
  long long sa, sb, sc;                                            /* batch strides, in elements */
  float alpha;
} plan_key;

typedef struct {
  plan_key key;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t da, db, dc, dbias, dscratch; /* dscratch: zero size when none is needed */
} bf16_plan;

#define MAX_PLANS 256
static bf16_plan plans[MAX_PLANS];
static int nplans;
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local dnnl_stream_t thread_strm; /* a stream is not to be shared by threads */
static _Thread_local struct {
  void *p;
  size_t cap;
} thread_scratchpad; /* grown as needed and kept, like the bf16 copies below */

#define DNNL_CHECK(call)                                                                  \
  do {                                                                                    \
    dnnl_status_t st_ = (call);                                                           \
    if (st_ != dnnl_success) atoll_fatal("oneDNN: %s failed (status %d)", #call, (int)st_); \
  } while (0)

/* Row-major [rows, cols] with row stride ld (cols stride 1), or its transpose view when
 * trans: the stored matrix is [cols, rows]. With batch > 1 a leading batch dimension. */
static void desc_2d(dnnl_memory_desc_t *d, int batch, long long sbatch, int rows, int cols, int ld, int trans,
                    dnnl_data_type_t dt) {
  if (batch == 1) {
    dnnl_dims_t dims = {rows, cols}, str = {trans ? 1 : ld, trans ? ld : 1};
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(d, 2, dims, dt, str));
  } else {
    dnnl_dims_t dims = {batch, rows, cols}, str = {sbatch, trans ? 1 : ld, trans ? ld : 1};
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(d, 3, dims, dt, str));
  }
}

static void make_plan(bf16_plan *p, const plan_key *k) {
  memset(p, 0, sizeof *p);
  p->key = *k;
  desc_2d(&p->da, k->batch, k->sa, k->M, k->K, k->lda, k->ta, dnnl_bf16);
  desc_2d(&p->db, k->batch, k->sb, k->K, k->N, k->ldb, k->tb, dnnl_bf16);
  desc_2d(&p->dc, k->batch, k->sc, k->M, k->N, k->ldc, 0, dnnl_f32);
  if (k->has_bias) {
    if (k->batch == 1) {
      dnnl_dims_t dims = {1, k->N}, str = {k->N, 1};
      DNNL_CHECK(dnnl_memory_desc_init_by_strides(&p->dbias, 2, dims, dnnl_f32, str));
    } else {
      dnnl_dims_t dims = {1, 1, k->N}, str = {k->N, k->N, 1};
      DNNL_CHECK(dnnl_memory_desc_init_by_strides(&p->dbias, 3, dims, dnnl_f32, str));
    }
  }
  dnnl_matmul_desc_t md;
  DNNL_CHECK(dnnl_matmul_desc_init(&md, &p->da, &p->db, k->has_bias ? &p->dbias : NULL, &p->dc));
  dnnl_primitive_attr_t attr;
  DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  if (k->alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha));
  if (k->beta_kind) {
    dnnl_post_ops_t po;
    DNNL_CHECK(dnnl_post_ops_create(&po));
    DNNL_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
    DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd;
  DNNL_CHECK(dnnl_primitive_desc_create(&pd, &md, attr, dnnl_eng, NULL));
  dnnl_primitive_attr_destroy(attr);
  const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (scratch) p->dscratch = *scratch;
  DNNL_CHECK(dnnl_primitive_create(&p->prim, pd));
  dnnl_primitive_desc_destroy(pd);
}

/* The plan for k; *tmp is filled and returned (the caller destroys its primitive) when
 * the table is full: more layouts than any model has, so slow but still right. */
static const bf16_plan *plan_for(const plan_key *k, bf16_plan *tmp) {
  if (k->beta_kind < 0) atoll_fatal("bf16 gemm: beta must be 0 or 1");
  pthread_mutex_lock(&plan_lock);
  for (int i = 0; i < nplans; i++)
    if (memcmp(&plans[i].key, k, sizeof *k) == 0) {
      pthread_mutex_unlock(&plan_lock);
      return &plans[i];
    }
  const bf16_plan *p = tmp;
  if (nplans < MAX_PLANS) {
    make_plan(&plans[nplans], k);
    p = &plans[nplans++];
  } else {
    make_plan(tmp, k);
  }
  pthread_mutex_unlock(&plan_lock);
  return p;
}

static void run_plan(const bf16_plan *p, const void *A, const void *B, float *C, const float *bias) {
  if (!thread_strm) DNNL_CHECK(dnnl_stream_create(&thread_strm, dnnl_eng, dnnl_stream_default_flags));
  dnnl_memory_t ma, mb, mc, mbias = NULL, mscratch = NULL;
  DNNL_CHECK(dnnl_memory_create(&ma, &p->da, dnnl_eng, (void *)A));
  DNNL_CHECK(dnnl_memory_create(&mb, &p->db, dnnl_eng, (void *)B));
  DNNL_CHECK(dnnl_memory_create(&mc, &p->dc, dnnl_eng, C));
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  int nargs = 3;
  if (p->key.has_bias) {
    DNNL_CHECK(dnnl_memory_create(&mbias, &p->dbias, dnnl_eng, (void *)bias));
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mbias};
  }
  size_t need = dnnl_memory_desc_get_size(&p->dscratch);
  if (need) {
    if (need > thread_scratchpad.cap) {
      free(thread_scratchpad.p);
      thread_scratchpad.p = aligned_alloc(64, (need + 63) / 64 * 64);
      if (!thread_scratchpad.p) atoll_fatal("oneDNN: out of memory for a %zu-byte scratchpad", need);
      thread_scratchpad.cap = need;
    }
    DNNL_CHECK(dnnl_memory_create(&mscratch, &p->dscratch, dnnl_eng, thread_scratchpad.p));
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mscratch};
  }
  DNNL_CHECK(dnnl_primitive_execute(p->prim, thread_strm, nargs, args));
  DNNL_CHECK(dnnl_stream_wait(thread_strm));
  dnnl_memory_destroy(ma);
  dnnl_memory_destroy(mb);
  dnnl_memory_destroy(mc);
  if (mbias) dnnl_memory_destroy(mbias);
  if (mscratch) dnnl_memory_destroy(mscratch);
}

static void bf16_product(const plan_key *k, const void *A, const void *B, float *C, const float *bias) {
  pthread_once(&dnnl_once, dnnl_start);
  if (!dnnl_ok) atoll_fatal("oneDNN: no CPU engine");
  bf16_plan tmp;
  const bf16_plan *p = plan_for(k, &tmp);
  run_plan(p, A, B, C, bias);
  if (p == &tmp) dnnl_primitive_destroy(tmp.prim);
}

static int beta_kind_of(float beta) {
  if (beta != 0.0f && beta != 1.0f) atoll_fatal("bf16 gemm: beta must be 0 or 1, got %g", beta);
  return beta != 0.0f;
}
#endif

/* ------------------------------------------------------- bf16 copies of inputs --- */

/* Per-thread buffers, grown as needed and kept: no lock, and nothing to free per call. */
static _Thread_local struct {
  uint16_t *p;
  size_t cap;
} scratch[ATOLL_BF16_SLOTS];

uint16_t *atoll_bf16_scratch(int slot, size_t n) {
  if (slot < 0 || slot >= ATOLL_BF16_SLOTS) atoll_fatal("bf16 scratch: slot %d out of range", slot);
  if (n > scratch[slot].cap) {
    free(scratch[slot].p);
    scratch[slot].p = malloc((n ? n : 1) * sizeof(uint16_t));
    if (!scratch[slot].p) atoll_fatal("bf16: out of memory for %zu bytes of bf16 copies", n * sizeof(uint16_t));
    scratch[slot].cap = n;
  }
  return scratch[slot].p;
}

void atoll_bf16_convert(uint16_t *out, const float *X, int rows, int cols, int ld) {
  size_t need = (size_t)rows * cols;
#pragma omp parallel for schedule(static) if (need > 16384 && !omp_in_parallel())
  for (int r = 0; r < rows; r++) {
    const float *x = X + (size_t)r * ld;
    uint16_t *o = out + (size_t)r * cols;
#pragma omp simd
    for (int c = 0; c < cols; c++) o[c] = atoll_bf16_from_f32(x[c]);
  }
}

/* rows x cols of X (row stride ld) into a dense bf16 buffer of this thread */
static uint16_t *to_bf16(int slot, const float *X, int rows, int cols, int ld) {
  uint16_t *out = atoll_bf16_scratch(slot, (size_t)rows * cols);
  atoll_bf16_convert(out, X, rows, cols, ld);
  return out;
}

/* ---------------------------------------------------------------- the products --- */

void atoll_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc) {
#ifdef ATOLL_HAVE_DNNL
  if (atoll_gemm_engine() == ATOLL_ENGINE_ONEDNN && M > 0 && N > 0 && K == 0) {
    /* an empty sum: C = beta C, as cblas_sgemm (oneDNN 2.6's sgemm leaves C as it is) */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    return;
  }
  /* also inside atoll's own parallel loops (attention's per-head products): oneDNN then
   * runs the product on the calling thread, 1.03x OpenBLAS's small kernels over a whole
   * fp32 step (bench/README.md, "Where the remaining targets stand") */
  if (atoll_gemm_engine() == ATOLL_ENGINE_ONEDNN) {
    pthread_once(&dnnl_cap_once, dnnl_cap);
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
  if (M == 0 || N == 0) return;
  if (K == 0) { /* an empty sum: C = beta C */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    return;
  }
  const uint16_t *a = to_bf16(0, A, ta ? K : M, ta ? M : K, lda);
  const uint16_t *b = to_bf16(1, B, tb ? N : K, tb ? K : N, ldb);
  atoll_gemm_bf16_bits(ta, tb, M, N, K, alpha, a, ta ? M : K, b, tb ? K : N, beta, C, ldc, NULL);
}

void atoll_gemm_bf16_bits(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float beta, float *C, int ldc, const float *bias) {
  atoll_gemm_bf16_batch(1, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, bias);
}

void atoll_gemm_bf16_batch(int batch, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                           long long sa, const uint16_t *B, int ldb, long long sb, float beta, float *C, int ldc,
                           long long sc, const float *bias) {
#ifdef ATOLL_HAVE_DNNL
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) { /* an empty sum: C = beta C (+ bias) */
    for (int q = 0; q < batch; q++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          float *c = C + q * sc + (size_t)i * ldc + j;
          *c = (beta == 0.0f ? 0.0f : beta * *c) + (bias ? bias[j] : 0.0f);
        }
    return;
  }
  plan_key k;
  memset(&k, 0, sizeof k); /* padding too: keys are compared with memcmp */
  k.batch = batch, k.ta = ta, k.tb = tb, k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
  /* oneDNN scales the bias with alpha: with alpha != 1 the bias is added afterwards */
  int fused_bias = bias && alpha == 1.0f;
  k.beta_kind = beta_kind_of(beta), k.has_bias = fused_bias, k.alpha = alpha;
  if (batch > 1) k.sa = sa, k.sb = sb, k.sc = sc;
  bf16_product(&k, A, B, C, fused_bias ? bias : NULL);
  if (bias && !fused_bias)
    for (int q = 0; q < batch; q++)
#pragma omp parallel for schedule(static) if ((size_t)M * N > 16384 && !omp_in_parallel())
      for (int i = 0; i < M; i++) {
        float *c = C + q * sc + (size_t)i * ldc;
#pragma omp simd
        for (int j = 0; j < N; j++) c[j] += bias[j];
      }
#else
  (void)batch, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)sa, (void)B;
  (void)ldb, (void)sb, (void)beta, (void)C, (void)ldc, (void)sc, (void)bias;
  atoll_fatal("bf16 gemm: this build has no oneDNN");
#endif
}

#ifdef ATOLL_HAVE_DNNL
/* oneDNN's instruction set as it will run (after ATOLL_MAX_ISA or its own variable) has
 * all the bits of isa */
static int dnnl_runs(dnnl_cpu_isa_t isa) {
  pthread_once(&dnnl_cap_once, dnnl_cap);
  return ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)isa) == (unsigned)isa;
}
#endif

int atoll_gemm_bf16_on_amx(void) {
#ifdef ATOLL_HAVE_DNNL
  return dnnl_runs(dnnl_cpu_isa_avx512_core_amx);
#else
  return 0;
#endif
}

const char *atoll_gemm_bf16_units(void) {
#ifdef ATOLL_HAVE_DNNL
  if (dnnl_runs(dnnl_cpu_isa_avx512_core_amx)) return "AMX-BF16 tiles";
  if (dnnl_runs(dnnl_cpu_isa_avx512_core_bf16)) return "AVX512_BF16";
  return "AVX-512 without bf16 instructions (ONEDNN_MAX_CPU_ISA is below AVX512_CORE_BF16: oneDNN emulates them)";
#else
  return "nothing (this build has no oneDNN)";
#endif
}

int atoll_gemm_bf16_check(atoll_err *err) {
#ifndef ATOLL_HAVE_DNNL
  return atoll_fail(err, "--precision bf16: this build has no oneDNN (install libdnnl-dev and rebuild); use --precision fp32");
#else
  const atoll_cpu_features *f = atoll_cpu();
  if (f->capped_bf16)
    return atoll_fail(err, "--precision bf16: ATOLL_MAX_ISA=%s leaves neither AVX512_BF16 nor AMX-BF16 instructions; "
                      "use --precision fp32 or a higher ATOLL_MAX_ISA", f->cap);
  if (!f->avx512_bf16 && !f->amx_bf16)
    return atoll_fail(err, "--precision bf16: this CPU (%s) has neither AVX512_BF16 nor AMX-BF16 instructions; "
                      "use --precision fp32", f->model);
  pthread_once(&dnnl_once, dnnl_start);
  if (!dnnl_ok) return atoll_fail(err, "--precision bf16: oneDNN could not create a CPU engine");
  /* oneDNN may be capped below bf16 by its own variable: ask for a product */
  dnnl_memory_desc_t a, b, c;
  dnnl_dims_t da = {16, 32}, db = {32, 16}, dc = {16, 16};
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  int ok = dnnl_memory_desc_init_by_tag(&a, 2, da, dnnl_bf16, dnnl_ab) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_bf16, dnnl_ab) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab) == dnnl_success &&
           dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success &&
           dnnl_primitive_desc_create(&pd, &md, NULL, dnnl_eng, NULL) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (!ok)
    return atoll_fail(err, "--precision bf16: oneDNN offers no bf16 product here (is ONEDNN_MAX_CPU_ISA set below "
                      "AVX512_CORE?); use --precision fp32");
  return 0;
#endif
}

void atoll_gemm_describe(char *buf, size_t n, int precision_bf16, int threads) {
  const atoll_cpu_features *f = atoll_cpu();
  char feats[96];
  atoll_cpu_feature_list(f, feats, sizeof feats);
  atoll_engine e = atoll_gemm_engine();
  int len = snprintf(buf, n, "CPU %s (%s%s%s), %d thread%s; fp32 products: %s", f->model, feats,
                     f->capped ? "; capped by ATOLL_MAX_ISA=" : "", f->capped ? f->cap : "", threads,
                     threads == 1 ? "" : "s", atoll_gemm_engine_name(e));
  if (e == ATOLL_ENGINE_OPENBLAS && len > 0 && (size_t)len < n)
    len += snprintf(buf + len, n - (size_t)len, " (%s kernels)", atoll_openblas_core());
  if (precision_bf16 && len > 0 && (size_t)len < n)
    len += snprintf(buf + len, n - (size_t)len, "; bf16 products: oneDNN matmul on %s, fp32 accumulation",
                    atoll_gemm_bf16_units());
  if (len <= 0 || (size_t)len >= n) return;
  if (precision_bf16 && atoll_attention_bf16_available())
    snprintf(buf + len, n - (size_t)len, "; attention: bf16 on AMX-BF16 tiles (src/ops/attention_bf16.c)");
  else
    snprintf(buf + len, n - (size_t)len, "; attention: OpenBLAS (%s kernels)", atoll_openblas_core());
}

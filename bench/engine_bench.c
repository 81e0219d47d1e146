/* bench_engines: the matrix engines atoll can use, measured on one machine in one run
 * on the products of one training step (bench/README.md, "Matrix engines").
 *
 *   bench_engines [--threads N] [--rounds R] [--rows N] [--dim C] [--vocab V] [--blis PATH]
 *
 * Engines: OpenBLAS sgemm (as linked: kernel family openblas_get_corename), oneDNN
 * sgemm, BLIS sgemm (dlopen'ed from PATH, default Debian's libblis-openmp; skipped when
 * absent), and atoll's bf16 product (oneDNN matmul, bf16 inputs, fp32 accumulation) twice:
 * "onednn_bf16" rounds its fp32 inputs in every call (atoll_gemm_bf16), "onednn_bf16_rounded"
 * takes inputs already in bf16 (atoll_gemm_bf16_bits), as the model's products do.
 * Products, for every weight W [O, I] of a GPT block (qkv 3C x C, proj C x C, fc 4C x C,
 * mlp proj C x 4C) and the LM head (V x C), N rows:
 *   fwd  y[N,O] = x[N,I] W^T;  dx  dx[N,I] = dy[N,O] W;  dW  dW[O,I] += dy^T x
 * plus a square 2048^3 product. "best_gflops" is an engine's fastest product of all
 * these: at bf16 a square product is slower than most of the model's own (0.94 against
 * up to 1.46 TFLOP/s on a 2-core Xeon with AMX), so the square alone understates the
 * peak. Rounds are interleaved: each round times every engine once on every product, so
 * a loaded machine slows all engines alike; figures are medians over rounds. Prints one
 * JSON object on stdout. */
#define _POSIX_C_SOURCE 200809L
#include "atoll/atoll.h"
#include "ops/cpu_features.h"
#include "ops/gemm_cpu.h"

#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int n);

typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                               float *, int);
static cblas_sgemm_fn blis_sgemm;

enum { E_OPENBLAS, E_ONEDNN, E_BLIS, E_BF16, E_BF16_ROUNDED, NENGINES };
static const char *engine_names[NENGINES] = {"openblas", "onednn", "blis", "onednn_bf16", "onednn_bf16_rounded"};
static uint16_t *Ab, *Bb; /* A and B rounded to bf16 once, for E_BF16_ROUNDED */

typedef struct {
  char name[32];
  int ta, tb, M, N, K;
  float beta;
} gemm_case;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *fill(size_t n, unsigned seed) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p) exit(1);
  unsigned s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = ((float)(s >> 8) / (float)(1u << 24) - 0.5f) * 0.1f;
  }
  return p;
}

static void run(int engine, const gemm_case *g, const float *A, const float *B, float *C) {
  int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
  if (engine == E_BF16_ROUNDED) {
    atoll_gemm_bf16_bits(g->ta, g->tb, g->M, g->N, g->K, 1.0f, Ab, lda, Bb, ldb, g->beta, C, g->N, NULL);
  } else if (engine == E_BF16) {
    atoll_gemm_bf16(g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, g->beta, C, g->N);
  } else if (engine == E_BLIS) {
    blis_sgemm(101, g->ta ? 112 : 111, g->tb ? 112 : 111, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, g->beta, C, g->N);
  } else {
    atoll_gemm_set_engine(engine == E_ONEDNN ? ATOLL_ENGINE_ONEDNN : ATOLL_ENGINE_OPENBLAS, NULL);
    atoll_gemm_f32(g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, g->beta, C, g->N);
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int threads = omp_get_max_threads(), rounds = 7, rows = 2048, dim = 384, vocab = 256;
  const char *blis_path = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rows")) rows = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dim")) dim = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--vocab")) vocab = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--blis")) blis_path = argv[i + 1];
    else {
      fprintf(stderr, "bench_engines: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1 || rounds < 1 || rows < 1 || dim < 1 || vocab < 1) {
    fprintf(stderr, "bench_engines: threads, rounds, rows, dim, vocab must be positive\n");
    return 2;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  void *blis = dlopen(blis_path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (blis) {
    blis_sgemm = (cblas_sgemm_fn)dlsym(blis, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(blis, "bli_thread_set_num_threads");
    if (set_threads) set_threads(threads);
  }
  int bf16 = atoll_gemm_bf16_check(NULL) == 0;
  int have[NENGINES] = {1, atoll_gemm_set_engine(ATOLL_ENGINE_ONEDNN, NULL) == 0, blis_sgemm != NULL, bf16, bf16};

  int outs[5] = {3 * dim, dim, 4 * dim, dim, vocab}, ins[5] = {dim, dim, dim, 4 * dim, dim};
  const char *wn[5] = {"qkv", "attn_proj", "fc", "mlp_proj", "lm_head"};
  gemm_case cases[16];
  int nc = 0;
  for (int w = 0; w < 5; w++) {
    int O = outs[w], I = ins[w];
    gemm_case f = {"", 0, 1, rows, O, I, 0.0f}, dx = {"", 0, 0, rows, I, O, 0.0f}, dw = {"", 1, 0, O, I, rows, 1.0f};
    snprintf(f.name, sizeof f.name, "%s_fwd", wn[w]);
    snprintf(dx.name, sizeof dx.name, "%s_dx", wn[w]);
    snprintf(dw.name, sizeof dw.name, "%s_dW", wn[w]);
    cases[nc++] = f, cases[nc++] = dx, cases[nc++] = dw;
  }
  gemm_case peak = {"square_2048", 0, 0, 2048, 2048, 2048, 0.0f};
  cases[nc++] = peak;

  /* the largest operand: a square, the activations [rows, 4 dim] or [rows, vocab], or
   * the LM head [vocab, dim] */
  size_t need = (size_t)2048 * 2048, sizes[3] = {(size_t)rows * 4 * dim, (size_t)rows * vocab, (size_t)vocab * dim};
  for (int i = 0; i < 3; i++) need = sizes[i] > need ? sizes[i] : need;
  float *A = fill(need, 1), *B = fill(need, 2), *C = fill(need, 3);
  Ab = malloc(need * sizeof(uint16_t)), Bb = malloc(need * sizeof(uint16_t));
  if (!Ab || !Bb) return 1;
  for (size_t i = 0; i < need; i++) Ab[i] = atoll_bf16_from_f32(A[i]), Bb[i] = atoll_bf16_from_f32(B[i]);
  double *t = calloc((size_t)NENGINES * nc * rounds, sizeof(double));
  for (int e = 0; e < NENGINES; e++) /* warm-up: plans, thread pools, pages */
    if (have[e])
      for (int c = 0; c < nc; c++) run(e, &cases[c], A, B, C);
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < nc; c++)
      for (int e = 0; e < NENGINES; e++) {
        if (!have[e]) continue;
        double t0 = now();
        run(e, &cases[c], A, B, C);
        t[((size_t)e * nc + c) * rounds + r] = now() - t0;
      }
  const atoll_cpu_features *f = atoll_cpu();
  char feats[96];
  atoll_cpu_feature_list(f, feats, sizeof feats);
  printf("{\"cpu_model\": \"%s\", \"features\": \"%s\", \"threads\": %d, \"rounds\": %d, \"openblas_core\": \"%s\",\n",
         f->model, feats, threads, rounds, atoll_openblas_core());
  printf(" \"rows\": %d, \"dim\": %d, \"vocab\": %d, \"engines\": {", rows, dim, vocab);
  int first = 1;
  for (int e = 0; e < NENGINES; e++) {
    if (!have[e]) continue;
    printf("%s\n  \"%s\": {", first ? "" : ",", engine_names[e]);
    first = 0;
    double step_flops = 0, step_s = 0, best = 0;
    for (int c = 0; c < nc; c++) {
      double *tc = t + ((size_t)e * nc + c) * rounds;
      qsort(tc, (size_t)rounds, sizeof(double), cmp_double);
      double med = tc[rounds / 2], flops = 2.0 * cases[c].M * cases[c].N * cases[c].K;
      printf("\"%s\": %.1f, ", cases[c].name, flops / med * 1e-9);
      if (flops / med > best) best = flops / med;
      if (c < nc - 1) step_flops += flops, step_s += med;
    }
    printf("\"model_shapes_gflops\": %.1f, \"best_gflops\": %.1f}", step_flops / step_s * 1e-9, best * 1e-9);
  }
  printf("\n}}\n");
  return 0;
}

/* bench_sgemm: this machine's single-precision GEMM throughput through OpenBLAS, the
 * yardstick bench/run.sh divides model FLOP/s by.
 *
 *   bench_sgemm [--threads N] [--reps R] [--batch B --seq T --dim C --vocab V --layers L]
 *
 * Measures cblas_sgemm GFLOP/s
 *   (a) on a square 2048 x 2048 x 2048 product: "the sgemm peak" in bench/README.md;
 *   (b) on the matrix products of one training step of atoll's GPT (defaults: B=8, T=256,
 *       so N = B*T = 2048 rows, C=384, V=256), for every weight W [O, I]:
 *         forward   y[N,O]  = x[N,I] @ W^T
 *         backward  dx[N,I] = dy[N,O] @ W
 *                   dW[O,I] = dy^T[O,N] @ x[N,I]
 *       with W = qkv [3C,C], attn.proj [C,C], mlp.fc [4C,C], mlp.proj [C,4C] and the tied
 *       LM head wte [V,C]. model_shapes_gflops is their aggregate: the FLOPs of one step's
 *       products over the time they take (each block product counted L times, default
 *       L=6, the LM head's once), i.e. what a step's weight products would run at.
 * Each figure is the median over R timed repetitions after one untimed warm-up call.
 * Prints one JSON object on stdout; progress and nothing else on stderr. */
#define _POSIX_C_SOURCE 200809L
#include "atoll/atoll.h"
#include "core/clock.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* OpenBLAS's own API, not part of CBLAS. */
void openblas_set_num_threads(int n);
char *openblas_get_config(void);
char *openblas_get_corename(void);

static float *alloc_fill(size_t n, unsigned seed) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  float *p = aligned_alloc(64, bytes);
  if (!p) {
    fprintf(stderr, "bench_sgemm: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  unsigned s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = ((float)(s >> 8) / (float)(1u << 24) - 0.5f) * 0.1f;
  }
  return p;
}

/* One product C[M,N] = op(A) op(B), row-major, with its operands' transposes. */
typedef struct {
  const char *name;
  enum CBLAS_TRANSPOSE ta, tb;
  int M, N, K;
} gemm_case;

/* Median seconds of one call over reps timed calls (after one warm-up call). */
static double time_case(const gemm_case *g, int reps) {
  size_t a_n = (size_t)g->M * g->K, b_n = (size_t)g->K * g->N, c_n = (size_t)g->M * g->N;
  float *A = alloc_fill(a_n, 1), *B = alloc_fill(b_n, 2), *C = alloc_fill(c_n, 3);
  int lda = g->ta == CblasNoTrans ? g->K : g->M;
  int ldb = g->tb == CblasNoTrans ? g->N : g->K;
  double *t = malloc(sizeof(double) * reps);
  cblas_sgemm(CblasRowMajor, g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, 0.0f, C, g->N);
  for (int r = 0; r < reps; r++) {
    double t0 = atoll_seconds();
    cblas_sgemm(CblasRowMajor, g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, 0.0f, C,
                g->N);
    t[r] = atoll_seconds() - t0;
  }
  double med = atoll_median(t, (size_t)reps);
  free(t);
  free(A);
  free(B);
  free(C);
  return med;
}

static void json_string(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_sgemm [--threads N] [--reps R] [--batch B] [--seq T] [--dim C] [--vocab V] [--layers L]\n"
          "  --threads N  OpenBLAS/OpenMP threads (default: all online cores)\n"
          "  --reps R     timed repetitions per product, median reported (default 9)\n"
          "  model shape defaults: --batch 8 --seq 256 --dim 384 --vocab 256 --layers 6\n");
}

static int parse_int(const char *flag, const char *v, int min) {
  char *end = NULL;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || x < min || x > 1 << 20) {
    fprintf(stderr, "bench_sgemm: %s expects an integer >= %d, got '%s'\n", flag, min, v ? v : "");
    exit(2);
  }
  return (int)x;
}

int main(int argc, char **argv) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = ncpu > 0 ? (int)ncpu : 1, reps = 9;
  int Bsz = 8, T = 256, Cdim = 384, V = 256, L = 6;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--threads")) {
      int n = parse_int(a, v, 0);
      if (n > 0) threads = n;
      i++;
    } else if (!strcmp(a, "--reps")) {
      reps = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--batch")) {
      Bsz = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--seq")) {
      T = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--dim")) {
      Cdim = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--layers")) {
      L = parse_int(a, v, 1), i++;
    } else if (!strcmp(a, "--vocab")) {
      V = parse_int(a, v, 1), i++;
    } else {
      fprintf(stderr, "bench_sgemm: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  const int S = 2048;
  gemm_case square = {"square 2048", CblasNoTrans, CblasNoTrans, S, S, S};
  fprintf(stderr, "bench_sgemm: %d threads, %d reps; square %d...\n", threads, reps, S);
  double sq_s = time_case(&square, reps);
  double sq_gflops = 2.0 * S * S * S / sq_s * 1e-9;

  int N = Bsz * T, C = Cdim;
  struct {
    const char *name;
    int rows_out, cols_in, count; /* W [rows_out, cols_in]; count: how many times one step runs this product */
  } W[] = {{"attn.qkv", 3 * C, C, L}, {"attn.proj", C, C, L}, {"mlp.fc", 4 * C, C, L},
           {"mlp.proj", C, 4 * C, L}, {"lm_head", V, C, 1}};
  int nw = (int)(sizeof W / sizeof W[0]);
  double total_flops = 0, total_s = 0;
  struct {
    char name[64];
    int M, N, K;
    double gflops;
  } res[16];
  int nres = 0;
  for (int w = 0; w < nw; w++) {
    int O = W[w].rows_out, In = W[w].cols_in; /* (I is <complex.h>'s macro) */
    gemm_case cases[3] = {
        {"fwd y=x@W^T", CblasNoTrans, CblasTrans, N, O, In},
        {"bwd dx=dy@W", CblasNoTrans, CblasNoTrans, N, In, O},
        {"bwd dW=dy^T@x", CblasTrans, CblasNoTrans, O, In, N},
    };
    for (int k = 0; k < 3; k++) {
      fprintf(stderr, "bench_sgemm: %s %s [%d x %d x %d]\n", W[w].name, cases[k].name, cases[k].M,
              cases[k].N, cases[k].K);
      double s = time_case(&cases[k], reps);
      double fl = 2.0 * cases[k].M * cases[k].N * cases[k].K;
      total_flops += fl * W[w].count;
      total_s += s * W[w].count;
      snprintf(res[nres].name, sizeof res[nres].name, "%s %s", W[w].name, cases[k].name);
      res[nres].M = cases[k].M;
      res[nres].N = cases[k].N;
      res[nres].K = cases[k].K;
      res[nres].gflops = fl / s * 1e-9;
      nres++;
    }
  }

  char *cfg = openblas_get_config(), *core = openblas_get_corename();
  printf("{\n  \"threads\": %d,\n  \"reps\": %d,\n", threads, reps);
  printf("  \"square_gflops\": %.3f,\n", sq_gflops);
  printf("  \"model_shapes_gflops\": %.3f,\n", total_flops / total_s * 1e-9);
  printf("  \"sgemm_peak_gflops\": %.3f,\n", sq_gflops);
  printf("  \"sgemm_peak_definition\": \"median cblas_sgemm GFLOP/s on square 2048x2048x2048 "
         "(row-major, no transposes) at the given thread count\",\n");
  printf("  \"model_shapes_definition\": \"FLOPs / time over the forward and backward products "
         "(y=x@W^T, dx=dy@W, dW=dy^T@x) of W = qkv, attn.proj, mlp.fc, mlp.proj, lm_head with "
         "N=B*T rows, block products weighted by L; attention's batched products not "
         "included\",\n");
  printf("  \"shape\": {\"batch\": %d, \"seq\": %d, \"rows\": %d, \"dim\": %d, \"vocab\": %d, "
         "\"layers\": %d},\n", Bsz, T, N, C, V, L);
  printf("  \"openblas_config\": ");
  json_string(cfg);
  printf(",\n  \"openblas_core\": ");
  json_string(core);
  printf(",\n  \"shapes\": [\n");
  for (int i = 0; i < nres; i++)
    printf("    {\"name\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.3f}%s\n",
           res[i].name, res[i].M, res[i].N, res[i].K, res[i].gflops, i + 1 < nres ? "," : "");
  printf("  ]\n}\n");
  return 0;
}

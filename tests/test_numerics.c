/* Edge cases of the numeric helpers: outer-gradient quantization of tiny and
 * non-finite blocks, and a gradient sum of squares that does not depend on the thread
 * count. */
#include "atoll/atoll.h"
#include "check.h"
#include "model/model.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "core/quant.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 100 /* three full blocks and a partial one */

static const atoll_qtype BLOCKED[2] = {ATOLL_Q_INT8, ATOLL_Q_FP4};

/* A block whose largest magnitude is near FLT_MIN would overflow 1 / scale; it must
 * encode without undefined behaviour and decode to finite values close to the input. */
static void tiny_blocks(void) {
  float x[N], y[N];
  uint8_t buf[256];
  const float mags[3] = {1e-38f, 1e-40f, FLT_TRUE_MIN};
  for (int q = 0; q < 2; q++)
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < N; i++) x[i] = (i % 3 - 1) * mags[k];
      CHECK(atoll_q_encode_checked(BLOCKED[q], x, N, buf, NULL) == 0);
      atoll_q_decode(BLOCKED[q], buf, N, y);
      int ok = 1;
      for (int i = 0; i < N; i++) ok &= isfinite(y[i]) && fabsf(y[i] - x[i]) <= mags[k];
      CHECK(ok);
    }
}

/* NaN or Inf anywhere is reported (with its index) by the checked encoder, and the
 * unchecked one still encodes it safely: its block decodes to NaN, never to a number. */
static void non_finite_blocks(void) {
  const atoll_qtype all[4] = {ATOLL_Q_FP32, ATOLL_Q_BF16, ATOLL_Q_INT8, ATOLL_Q_FP4};
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  float x[N], y[N];
  uint8_t buf[512];
  for (int q = 0; q < 4; q++)
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < N; i++) x[i] = 0.01f * (float)(i - 50);
      x[70] = bad[k];
      size_t where = 0;
      CHECK(atoll_q_encode_checked(all[q], x, N, buf, &where) == -1);
      CHECK(where == 70);
      atoll_q_encode(all[q], x, N, buf);
      atoll_q_decode(all[q], buf, N, y);
      CHECK(!isfinite(y[70]));
      CHECK(y[10] == y[10] && y[99] == y[99]); /* other blocks untouched */
    }
}

static double sumsq_at(int threads, const float *g, size_t n) {
  omp_set_num_threads(threads);
  return atoll_sumsq(g, 0, n);
}

/* The global gradient norm must be the same bits whatever the thread count. */
static void sumsq_threads(void) {
  size_t n = 1000003;
  float *g = malloc(n * sizeof *g);
  if (!g) {
    CHECK(!"out of memory");
    return;
  }
  uint64_t s = 12345;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    g[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * (i % 7 ? 1.0f : 1e3f);
  }
  double ref = sumsq_at(1, g, n);
  for (int t = 2; t <= 4; t++)
    for (int rep = 0; rep < 3; rep++) CHECK(memcmp(&(double){sumsq_at(t, g, n)}, &ref, 8) == 0);
  CHECK_NEAR(sumsq_at(3, g, 3), (double)g[0] * g[0] + (double)g[1] * g[1] + (double)g[2] * g[2],
             1e-15);
  CHECK(sumsq_at(3, g, 0) == 0.0);
  free(g);
}

/* batch x seq above 2^31 - 1 would overflow the micro-batch's int row count: refused
 * at creation, before any allocation, with a message naming both. */
static void tokens_per_micro_batch(void) {
  atoll_shape s = {.layers = 1, .heads = 1, .dim = 4, .context = 65536, .vocab = 256};
  atoll_model *m = NULL;
  atoll_err e = {0};
  CHECK(atoll_model_create(&m, &s, 65536, 65536, &e) == -1 && m == NULL);
  CHECK(strstr(e.msg, "batch x seq") != NULL);
  CHECK_OK(atoll_model_create(&m, &s, 2, 8, &e), &e);
  atoll_model_destroy(m);
}

/* Attention's scratch is allocated outside the OpenMP region: when it cannot be had,
 * the process ends with a message (status 1), not a write through NULL. The child
 * limits its address space to what it uses plus 64 MiB; the scratch needs 256 MiB. */
static void attention_out_of_memory(void) {
#ifdef __SANITIZE_ADDRESS__
  return; /* ASan's shadow memory does not fit under an address-space limit */
#endif
  const atoll_ops *o = atoll_ops_cpu();
  int T = 1 << 20;
  float *qkv = calloc((size_t)3 * T, sizeof *qkv), *out = calloc((size_t)T, sizeof *out);
  float *lse = calloc((size_t)T, sizeof *lse);
  pid_t pid = qkv && out && lse ? fork() : -1;
  CHECK(pid >= 0);
  if (pid == 0) {
    o->attention_forward(out, lse, qkv, 1, 64, 1, 1); /* threads and BLAS started */
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
    fclose(f);
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)64 << 20);
    struct rlimit rl = {cap, cap};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    fclose(stderr); /* the expected fatal message is not a test failure */
    o->attention_forward(out, lse, qkv, 1, T, 1, 1);
    _exit(0);
  }
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 1);
  free(qkv);
  free(out);
  free(lse);
}

int main(void) {
  attention_out_of_memory();
  tokens_per_micro_batch();
  tiny_blocks();
  non_finite_blocks();
  sumsq_threads();
  CHECK_DONE();
}

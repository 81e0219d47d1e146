/* The stop signals' handler (src/core/stop_signal.c) under a storm of SIGHUPs while
 * oneDNN's fp32 gemm runs with K above its stack capacity, the case in which that
 * kernel points rsp into a malloc'd buffer:
 *  - every product stays right (against a double-precision reference) and glibc's heap
 *    checks never fire: without the alternate stack the signal frames land in the heap
 *    and this test aborts (glibc: "free(): invalid next size", at the latest when it
 *    frees its buffers; ATOLL_TEST_PLAIN_HANDLER=1 installs the old handler to see it);
 *  - the flag is set;
 *  - OpenMP's workers have the stop signals blocked, the calling thread does not.
 * Skipped (77) where the fp32 engine is not oneDNN. */
#include "check.h"
#include "core/rng.h"
#include "core/stop_signal.h"
#include "ops/gemm_cpu.h"

#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t flag;
static volatile int storm_on = 1;
static pthread_t main_thread;
static atoll_rng rng;

static void plain_handler(int sig) {
  (void)sig;
  flag = 1;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* SIGHUP every 20 us, to the main thread and to the process in turn */
static void *storm(void *arg) {
  (void)arg;
  struct timespec d = {0, 20000};
  for (long i = 0; storm_on; i++) {
    if (i & 1)
      pthread_kill(main_thread, SIGHUP);
    else
      kill(getpid(), SIGHUP);
    nanosleep(&d, NULL);
  }
  return NULL;
}

/* the products of a training step (dim 32, 4 x 32 tokens, 2 layers) whose K is above
 * the kernel's stack capacity, as dnnl_sgemm saw them: ta, tb, M, N, K, beta */
static const int shapes[][6] = {{0, 0, 128, 32, 128, 0}, {0, 0, 128, 32, 256, 0}, {0, 1, 128, 32, 128, 1},
                                {1, 0, 128, 32, 128, 1}, {1, 0, 256, 32, 128, 1}, {1, 0, 32, 128, 128, 1},
                                {1, 0, 32, 32, 128, 1}};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static int products(double seconds) {
  int bad = 0, n = 0;
  double end = now() + seconds;
  while (now() < end && bad < 5) {
    const int *s = shapes[n % NSHAPES];
    int ta = s[0], tb = s[1], M = s[2], N = s[3], K = s[4];
    float beta = (float)s[5];
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * M * N), *C0 = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) A[i] = atoll_rng_normal(&rng);
    for (int i = 0; i < K * N; i++) B[i] = atoll_rng_normal(&rng);
    for (int i = 0; i < M * N; i++) C[i] = C0[i] = atoll_rng_normal(&rng);
    atoll_gemm_f32(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, N);
    for (int i = 0; i < M; i += 7)
      for (int j = 0; j < N; j += 5) {
        double r = beta * C0[i * N + j];
        for (int k = 0; k < K; k++) r += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
        if (!(fabs(C[i * N + j] - r) <= 1e-4 * K)) bad++;
      }
    free(C0);
    free(C);
    free(B);
    free(A);
    n++;
  }
  fprintf(stderr, "%d products, %d wrong entries\n", n, bad);
  return bad;
}

int main(void) {
  if (atoll_gemm_engine() != ATOLL_ENGINE_ONEDNN) {
    fprintf(stderr, "skipped: the fp32 engine is %s, not oneDNN\n", atoll_gemm_engine_name(atoll_gemm_engine()));
    return 77;
  }
  atoll_rng_seed(&rng, 7);
  main_thread = pthread_self();
  omp_set_num_threads(2);
  atoll_err err;
  if (getenv("ATOLL_TEST_PLAIN_HANDLER")) { /* the set-up before the fix, to see this test fail */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = plain_handler;
    sigaction(SIGHUP, &sa, NULL);
  } else {
    CHECK_OK(atoll_stop_signals_install(&flag, &err), &err);
  }

  /* workers blocked, this thread not */
  int workers = 0, workers_blocked = 0;
#pragma omp parallel reduction(+ : workers, workers_blocked)
  {
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    if (omp_get_thread_num() != 0) {
      workers++;
      workers_blocked += sigismember(&cur, SIGHUP) && sigismember(&cur, SIGINT) && sigismember(&cur, SIGTERM);
    }
  }
  if (!getenv("ATOLL_TEST_PLAIN_HANDLER")) CHECK(workers_blocked == workers);
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, NULL, &cur);
  CHECK(!sigismember(&cur, SIGHUP));

  raise(SIGHUP); /* one signal: 1 (an island then leaves gracefully, train.c) */
  CHECK(flag == 1);

  omp_set_num_threads(1); /* as in the runs that crashed (--threads 1) */
  pthread_t t;
  pthread_create(&t, NULL, storm, NULL);
  int bad = products(1.5);
  storm_on = 0;
  pthread_join(t, NULL);
  CHECK(bad == 0);
  /* atoll's handler: 1 on the first signal, 2 on any later one (the storm sent many) */
  CHECK(flag == (getenv("ATOLL_TEST_PLAIN_HANDLER") ? 1 : 2));
  CHECK_DONE();
}

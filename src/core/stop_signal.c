/* Why the stop handler needs its own stack (measured, tests/test_stop_signal.c and
 * tests/cli/test_signal_stop.sh):
 * oneDNN's AVX-512 fp32 gemm kernel (jit_avx512_common_gemm_f32, behind dnnl_sgemm;
 * Debian 12's libdnnl 2.6.3, and still so in oneDNN's current source) moves the stack
 * pointer into a malloc'd work buffer when K is above its stack capacity (84 with 4 KiB
 * pages): `mov rsp, ARG_WS`, and its data grows upwards from there. A signal handled
 * on that thread meanwhile has the kernel write its frame (about 7.7 KB with AVX-512
 * state) below rsp: over the heap chunk header in front of the work buffer and the
 * chunk before it. glibc then aborts
 * ("corrupted size vs. prev_size while consolidating", in a later free()) or, worse, a
 * neighbouring buffer is silently damaged. With SA_ONSTACK and an alternate stack the
 * kernel writes the frame there instead, whatever rsp holds. The alternate stack is per
 * thread, so OpenMP's workers, which run the same kernel in parallel products, get the
 * stop signals blocked; MPI's and PMIx's helper threads never run it. */
#include "core/stop_signal.h"

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Room for the largest signal frame (AVX-512 plus AMX tile data is about 11 KB) with
 * a wide margin; static, so it never lies in the heap either. */
static char alt_stack[256 * 1024];
static volatile sig_atomic_t *stop_flag;

/* 1 on the first stop signal, 2 on any later one (an island leaving gracefully stops
 * at once on the second); the handler masks the stop signals, so it never nests. */
static void on_stop(int sig) {
  (void)sig;
  if (stop_flag && *stop_flag < 2) *stop_flag = *stop_flag + 1;
}

static void stop_set(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
}

int atoll_stop_signals_install(volatile sig_atomic_t *flag, atoll_err *err) {
  sigset_t set, old;
  stop_set(&set);
  /* Workers that the region below starts inherit the block from this thread; workers
   * that already exist block the signals themselves. */
  pthread_sigmask(SIG_BLOCK, &set, &old);
#pragma omp parallel
  {
    if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, &set, NULL);
  }
  stop_flag = flag;
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sa.sa_flags = SA_ONSTACK;
  stop_set(&sa.sa_mask);
  int bad = sigaltstack(&ss, NULL) != 0;
  for (int i = 0; !bad && i < 3; i++)
    bad = sigaction(i == 0 ? SIGINT : i == 1 ? SIGTERM : SIGHUP, &sa, NULL) != 0;
  int e = errno;
  /* this thread takes the signals again (those that arrived meanwhile now) */
  sigdelset(&old, SIGINT);
  sigdelset(&old, SIGTERM);
  sigdelset(&old, SIGHUP);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (bad) return atoll_fail(err, "stop signals: cannot install the handler: %s", strerror(e));
  return 0;
}

/* The communication layer (src/comm: comm.c, ring.c), as an MPI program: run it under mpirun
 * with any number of ranks (ctest runs 2 and 4).
 *
 *   test_comm              every check below; exit status = failed checks on this rank
 *   test_comm --watchdog   rank 1 never joins an all-reduce that rank 0 waits on with a
 *                          2 s timeout: the job must end with the watchdog's message
 *                          (tests/mpi/watchdog.sh checks the message and the status)
 *
 * Each rank's data is a pure function of (seed, rank, index), so every rank can
 * compute every other rank's contribution and check results locally: against a
 * double-precision sum (within float tolerance), against the documented ring order
 * of additions (bit for bit), and across ranks (a hash gathered with plain MPI). */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "comm/comm.h"

#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/rng.h"

static int R, N; /* this rank and the world size */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Rank `rank`'s value at index i: a float in [-1, 1) with 23 random bits. */
static float val(uint64_t seed, int rank, size_t i) {
  uint64_t h = atoll_hash64(seed, (uint64_t)rank, (uint64_t)i, 0x636f6d6d);
  return (float)((double)(h >> 41) / (double)(1u << 22) - 1.0);
}

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* 1 if every rank of MPI_COMM_WORLD passed the same h (plain MPI, not atoll's). */
static int same_everywhere(uint64_t h) {
  uint64_t *all = malloc((size_t)N * sizeof *all);
  MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  int same = 1;
  for (int i = 0; i < N; i++) same &= all[i] == h;
  free(all);
  return same;
}

/* Members: ranks of `c` listed by their world ranks. */
typedef struct {
  int n;
  int world[16];
} members;

/* The sum of slice element i over the ranks of a communicator in the documented ring
 * order: slice c starts at rank c+1 and ends at rank c, each rank computing
 * own + received. `wr` maps communicator ranks to the world ranks that seed data. */
static float ring_sum(uint64_t seed, const int *wr, int n, int slice, size_t i) {
  float acc = val(seed, wr[(slice + 1) % n], i);
  for (int j = 2; j <= n; j++) acc = val(seed, wr[(slice + j) % n], i) + acc;
  return acc;
}

static double ref_sum(uint64_t seed, const int *wr, int n, size_t i, double *abs_sum) {
  double s = 0.0, a = 0.0;
  for (int j = 0; j < n; j++) {
    double v = val(seed, wr[j], i);
    s += v;
    a += fabs(v);
  }
  *abs_sum = a;
  return s;
}

static void world_members(int *wr) {
  for (int i = 0; i < N; i++) wr[i] = i;
}

/* Checks slice c of buf (as a sum over the communicator's ranks): bit-exact ring order
 * and within float tolerance of the double sum. Returns the number of bad elements. */
static size_t bad_sums(const float *buf, uint64_t seed, const int *wr, int n, int slice,
                       size_t off, size_t cnt) {
  size_t bad = 0;
  for (size_t i = off; i < off + cnt; i++) {
    double a, ref = ref_sum(seed, wr, n, i, &a);
    float exact = ring_sum(seed, wr, n, slice, i);
    if (memcmp(&exact, &buf[i], sizeof exact) != 0) bad++;
    else if (fabs((double)buf[i] - ref) > 2.0 * n * 1.2e-7 * a + 1e-30) bad++;
  }
  return bad;
}

static int expect_op_only(const atoll_comm_stats *st, atoll_op op) {
  for (int o = 0; o < ATOLL_OP_COUNT; o++) {
    if (o == (int)op) continue;
    if (st->calls[o] != 0 || st->bytes_sent[o] != 0) return 0;
  }
  return 1;
}

/* ---------------------------------------------------------------- slices --- */

static void test_slices(void) {
  size_t cnt[4], dsp[4];
  atoll_slices(10, 4, NULL, cnt, dsp);
  CHECK(cnt[0] == 3 && cnt[1] == 3 && cnt[2] == 2 && cnt[3] == 2);
  CHECK(dsp[0] == 0 && dsp[1] == 3 && dsp[2] == 6 && dsp[3] == 8);
  atoll_slices(2, 4, NULL, cnt, dsp);
  CHECK(cnt[0] == 1 && cnt[1] == 1 && cnt[2] == 0 && cnt[3] == 0);
  CHECK(dsp[2] == 2 && dsp[3] == 2);
  const size_t given[4] = {0, 5, 0, 2};
  atoll_slices(7, 4, given, cnt, dsp);
  CHECK(dsp[0] == 0 && dsp[1] == 0 && dsp[2] == 5 && dsp[3] == 5);
  CHECK(cnt[1] == 5 && cnt[3] == 2);
  atoll_slices(0, 3, NULL, cnt, dsp);
  CHECK(cnt[0] == 0 && cnt[2] == 0 && dsp[2] == 0);
}

/* ------------------------------------------------------------ all-reduce --- */

/* counts NULL: the blocking call (even split); else the non-blocking one. */
static void check_allreduce(atoll_comm *w, size_t count, const size_t *counts, uint64_t seed) {
  int wr[64];
  world_members(wr);
  float *buf = malloc((count ? count : 1) * sizeof *buf);
  for (size_t i = 0; i < count; i++) buf[i] = val(seed, R, i);
  atoll_comm_reset_stats(w);
  if (!counts) {
    atoll_allreduce(w, buf, count);
  } else {
    atoll_req *q = atoll_iallreduce(w, buf, count, counts);
    atoll_req_wait(q);
  }
  size_t cnt[64], dsp[64];
  atoll_slices(count, N, counts, cnt, dsp);
  size_t bad = 0;
  for (int c = 0; c < N; c++) bad += bad_sums(buf, seed, wr, N, c, dsp[c], cnt[c]);
  if (bad) fprintf(stderr, "rank %d: all-reduce of %zu floats: %zu wrong\n", R, count, bad);
  CHECK(bad == 0);
  CHECK(same_everywhere(fnv1a(buf, count * sizeof *buf)));
  atoll_comm_stats st = atoll_comm_get_stats(w);
  uint64_t expect = N > 1 ? 4 * (count - cnt[R]) + 4 * (count - cnt[(R + 1) % N]) : 0;
  if (st.bytes_sent[ATOLL_OP_ALLREDUCE] != expect)
    fprintf(stderr, "rank %d: all-reduce of %zu floats sent %llu bytes, expected %llu\n", R,
            count, (unsigned long long)st.bytes_sent[ATOLL_OP_ALLREDUCE],
            (unsigned long long)expect);
  CHECK(st.bytes_sent[ATOLL_OP_ALLREDUCE] == expect);
  CHECK(st.calls[ATOLL_OP_ALLREDUCE] == 1);
  CHECK(expect_op_only(&st, ATOLL_OP_ALLREDUCE));
  free(buf);
}

static void test_allreduce(atoll_comm *w) {
  const size_t sizes[] = {0, 1, (size_t)N - 1, 1000, 3 * 65536 + 5, (1u << 20) + 7};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    check_allreduce(w, sizes[k], NULL, 100 + k);
  size_t counts[64];
  /* explicit even counts */
  for (int i = 0; i < N; i++) counts[i] = 5000;
  check_allreduce(w, 5000 * (size_t)N, counts, 200);
  /* uneven, with zero slices (every even rank's) */
  size_t total = 0;
  for (int i = 0; i < N; i++) total += counts[i] = i % 2 == 0 ? 0 : 1000 + 37 * (size_t)i;
  check_allreduce(w, total, counts, 201);
  /* uneven, several segments per step, the last slice empty */
  total = 0;
  for (int i = 0; i < N; i++) total += counts[i] = i == N - 1 ? 0 : 150000 + 12345 * (size_t)i;
  check_allreduce(w, total, counts, 202);
  /* every slice empty but one */
  for (int i = 0; i < N; i++) counts[i] = i == 1 % N ? 777 : 0;
  check_allreduce(w, 777, counts, 203);
  /* all slices empty */
  for (int i = 0; i < N; i++) counts[i] = 0;
  check_allreduce(w, 0, counts, 204);
}

/* --------------------------------------------- reduce-scatter, all-gather --- */

static void check_reduce_scatter(atoll_comm *w, size_t count, const size_t *counts,
                                 uint64_t seed) {
  int wr[64];
  world_members(wr);
  float *buf = malloc((count ? count : 1) * sizeof *buf);
  for (size_t i = 0; i < count; i++) buf[i] = val(seed, R, i);
  atoll_comm_reset_stats(w);
  atoll_reduce_scatter(w, buf, count, counts);
  size_t cnt[64], dsp[64];
  atoll_slices(count, N, counts, cnt, dsp);
  size_t bad = bad_sums(buf, seed, wr, N, R, dsp[R], cnt[R]);
  if (bad) fprintf(stderr, "rank %d: reduce-scatter of %zu floats: %zu wrong\n", R, count, bad);
  CHECK(bad == 0);
  atoll_comm_stats st = atoll_comm_get_stats(w);
  uint64_t expect = N > 1 ? 4 * (count - cnt[R]) : 0;
  CHECK(st.bytes_sent[ATOLL_OP_REDUCE_SCATTER] == expect);
  CHECK(st.calls[ATOLL_OP_REDUCE_SCATTER] == 1);
  CHECK(expect_op_only(&st, ATOLL_OP_REDUCE_SCATTER));
  free(buf);
}

static void check_allgather(atoll_comm *w, size_t count, const size_t *counts, uint64_t seed) {
  float *buf = malloc((count ? count : 1) * sizeof *buf);
  size_t cnt[64], dsp[64];
  atoll_slices(count, N, counts, cnt, dsp);
  for (size_t i = 0; i < count; i++) buf[i] = NAN;
  for (size_t i = dsp[R]; i < dsp[R] + cnt[R]; i++) buf[i] = val(seed, R, i);
  atoll_comm_reset_stats(w);
  atoll_req *q = atoll_iallgather(w, buf, count, counts);
  atoll_req_wait(q);
  size_t bad = 0;
  for (int c = 0; c < N; c++)
    for (size_t i = dsp[c]; i < dsp[c] + cnt[c]; i++) {
      float e = val(seed, c, i);
      bad += memcmp(&e, &buf[i], sizeof e) != 0;
    }
  if (bad) fprintf(stderr, "rank %d: all-gather of %zu floats: %zu wrong\n", R, count, bad);
  CHECK(bad == 0);
  atoll_comm_stats st = atoll_comm_get_stats(w);
  uint64_t expect = N > 1 ? 4 * (count - cnt[(R + 1) % N]) : 0;
  CHECK(st.bytes_sent[ATOLL_OP_ALLGATHER] == expect);
  CHECK(st.calls[ATOLL_OP_ALLGATHER] == 1);
  CHECK(expect_op_only(&st, ATOLL_OP_ALLGATHER));
  free(buf);
}

static void test_scatter_gather(atoll_comm *w) {
  const size_t sizes[] = {0, 1, 1000, (1u << 20) + 7};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    check_reduce_scatter(w, sizes[k], NULL, 300 + k);
    check_allgather(w, sizes[k], NULL, 310 + k);
  }
  size_t counts[64], total = 0;
  for (int i = 0; i < N; i++) total += counts[i] = i % 2 == 1 ? 0 : 70000 + 1000 * (size_t)i;
  check_reduce_scatter(w, total, counts, 320);
  check_allgather(w, total, counts, 321);
}

/* ------------------------------------------------------------ bf16 wire --- */

/* bfloat16 rounding computed another way than ring.c's bit trick: 8 significant bits
 * by frexp/ldexp and rint (the default rounding mode: nearest, ties to even). Finite,
 * normal inputs only (the test's values are multiples of 2^-22 below 64). */
static float ref_bf16(float x) {
  if (x == 0.0f) return x;
  int e;
  double m = frexp((double)x, &e);
  return (float)ldexp(rint(ldexp(m, 8)), e - 8);
}

/* The documented bf16 ring: acc = x[c+1]; acc = x[c+j] + bf16(acc), j = 2..n; bf16(acc). */
static float ring_sum_bf16(uint64_t seed, const int *wr, int n, int slice, size_t i) {
  float acc = val(seed, wr[(slice + 1) % n], i);
  for (int j = 2; j <= n; j++) acc = val(seed, wr[(slice + j) % n], i) + ref_bf16(acc);
  return n > 1 ? ref_bf16(acc) : acc;
}

static size_t bad_sums_bf16(const float *buf, uint64_t seed, const int *wr, int n, int slice,
                            size_t off, size_t cnt) {
  size_t bad = 0;
  for (size_t i = off; i < off + cnt; i++) {
    double a, ref = ref_sum(seed, wr, n, i, &a);
    float exact = ring_sum_bf16(seed, wr, n, slice, i);
    if (memcmp(&exact, &buf[i], sizeof exact) != 0) bad++;
    else if (fabs((double)buf[i] - ref) > n * 0.0079 * a + 1e-30) bad++; /* 2^-7 per rounding */
  }
  return bad;
}

/* all-reduce (reduce_scatter 0) or reduce-scatter on a bf16 wire: the documented
 * order and roundings bit for bit, identical on every rank, half the fp32 bytes. */
static void check_bf16(atoll_comm *w, int reduce_scatter, size_t count, const size_t *counts, uint64_t seed) {
  int wr[64];
  world_members(wr);
  float *buf = malloc((count ? count : 1) * sizeof *buf);
  for (size_t i = 0; i < count; i++) buf[i] = val(seed, R, i);
  atoll_comm_reset_stats(w);
  atoll_op op = reduce_scatter ? ATOLL_OP_REDUCE_SCATTER : ATOLL_OP_ALLREDUCE;
  atoll_req *q = reduce_scatter ? atoll_ireduce_scatter_wire(w, buf, count, counts, ATOLL_WIRE_BF16)
                                : atoll_iallreduce_wire(w, buf, count, counts, ATOLL_WIRE_BF16);
  atoll_req_wait(q);
  size_t cnt[64], dsp[64];
  atoll_slices(count, N, counts, cnt, dsp);
  size_t bad = 0;
  for (int c = 0; c < N; c++)
    if (!reduce_scatter || c == R) bad += bad_sums_bf16(buf, seed, wr, N, c, dsp[c], cnt[c]);
  if (bad) fprintf(stderr, "rank %d: bf16 %s of %zu floats: %zu wrong\n", R, atoll_op_name(op), count, bad);
  CHECK(bad == 0);
  if (!reduce_scatter) CHECK(same_everywhere(fnv1a(buf, count * sizeof *buf)));
  atoll_comm_stats st = atoll_comm_get_stats(w);
  uint64_t expect = N == 1 ? 0 : 2 * (count - cnt[R]) + (reduce_scatter ? 0 : 2 * (count - cnt[(R + 1) % N]));
  if (st.bytes_sent[op] != expect)
    fprintf(stderr, "rank %d: bf16 %s of %zu floats sent %llu bytes, expected %llu\n", R, atoll_op_name(op), count,
            (unsigned long long)st.bytes_sent[op], (unsigned long long)expect);
  CHECK(st.bytes_sent[op] == expect);
  CHECK(st.calls[op] == 1);
  CHECK(expect_op_only(&st, op));
  free(buf);
}

static void test_bf16_wire(atoll_comm *w) {
  CHECK(ref_bf16(1.0f + 0x1p-8f) == 1.0f);                 /* a tie rounds to even */
  CHECK(ref_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);   /* a tie rounds up to even */
  const size_t sizes[] = {0, 1, (size_t)N - 1, 1000, 3 * 65536 + 5, (1u << 20) + 7};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    check_bf16(w, 0, sizes[k], NULL, 500 + k);
    check_bf16(w, 1, sizes[k], NULL, 520 + k);
  }
  size_t counts[64], total = 0;
  for (int i = 0; i < N; i++) total += counts[i] = i % 2 == 0 ? 0 : 1000 + 37 * (size_t)i;
  check_bf16(w, 0, total, counts, 540);
  check_bf16(w, 1, total, counts, 541);
  total = 0;
  for (int i = 0; i < N; i++) total += counts[i] = i == N - 1 ? 0 : 150000 + 12345 * (size_t)i;
  check_bf16(w, 0, total, counts, 542);
  check_bf16(w, 1, total, counts, 543);
  /* a NaN or an Inf on one rank reaches every rank as such (never a finite value) */
  float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (R == N - 1) v[2] = NAN;
  if (R == 0) v[5] = INFINITY;
  atoll_req_wait(atoll_iallreduce_wire(w, v, 8, NULL, ATOLL_WIRE_BF16));
  CHECK(isnan(v[2]));
  CHECK(N == 1 || (isinf(v[5]) && v[5] > 0));
  CHECK(v[0] == (float)N);
}

/* ------------------------------------------------- requests in flight --- */

static void test_inflight(atoll_comm *w) {
  enum { NQ = 6 };
  const atoll_op ops[NQ] = {ATOLL_OP_ALLREDUCE, ATOLL_OP_REDUCE_SCATTER, ATOLL_OP_ALLGATHER,
                            ATOLL_OP_ALLREDUCE, ATOLL_OP_ALLREDUCE, ATOLL_OP_ALLGATHER};
  const size_t sizes[NQ] = {(1u << 18) + 3, 100003, 50000, 17, 400000, 0};
  float *bufs[NQ];
  atoll_req *reqs[NQ];
  int wr[64];
  world_members(wr);
  atoll_comm_reset_stats(w);
  uint64_t expect[ATOLL_OP_COUNT] = {0};
  for (int q = 0; q < NQ; q++) {
    size_t n = sizes[q], cnt[64], dsp[64];
    atoll_slices(n, N, NULL, cnt, dsp);
    bufs[q] = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) bufs[q][i] = val(400 + q, R, i);
    if (N > 1) {
      if (ops[q] != ATOLL_OP_ALLGATHER) expect[ops[q]] += 4 * (n - cnt[R]);
      if (ops[q] != ATOLL_OP_REDUCE_SCATTER) expect[ops[q]] += 4 * (n - cnt[(R + 1) % N]);
    }
    if (ops[q] == ATOLL_OP_ALLREDUCE) reqs[q] = atoll_iallreduce(w, bufs[q], n, NULL);
    else if (ops[q] == ATOLL_OP_REDUCE_SCATTER) reqs[q] = atoll_ireduce_scatter(w, bufs[q], n, NULL);
    else reqs[q] = atoll_iallgather(w, bufs[q], n, NULL);
  }
  /* Complete them by polling the last one first. */
  for (int q = NQ - 1; q >= 0; q--) {
    double t0 = now();
    while (!atoll_req_test(reqs[q]) && now() - t0 < 60) sched_yield();
    CHECK(atoll_req_test(reqs[q]) == 1);
  }
  for (int q = 0; q < NQ; q++) atoll_req_wait(reqs[q]);
  for (int q = 0; q < NQ; q++) {
    size_t n = sizes[q], cnt[64], dsp[64], bad = 0;
    atoll_slices(n, N, NULL, cnt, dsp);
    for (int c = 0; c < N; c++) {
      if (ops[q] == ATOLL_OP_REDUCE_SCATTER && c != R) continue;
      if (ops[q] == ATOLL_OP_ALLGATHER) {
        for (size_t i = dsp[c]; i < dsp[c] + cnt[c]; i++) bad += bufs[q][i] != val(400 + q, c, i);
      } else {
        bad += bad_sums(bufs[q], 400 + q, wr, N, c, dsp[c], cnt[c]);
      }
    }
    if (bad) fprintf(stderr, "rank %d: request %d in flight: %zu wrong\n", R, q, bad);
    CHECK(bad == 0);
    free(bufs[q]);
  }
  atoll_comm_stats st = atoll_comm_get_stats(w);
  CHECK(st.calls[ATOLL_OP_ALLREDUCE] == 3);
  CHECK(st.calls[ATOLL_OP_REDUCE_SCATTER] == 1);
  CHECK(st.calls[ATOLL_OP_ALLGATHER] == 2);
  for (int o = 0; o < ATOLL_OP_COUNT; o++) CHECK(st.bytes_sent[o] == expect[o]);

  /* Round-robin polling of many small requests at once (tags kept apart). */
  enum { NS = 40 };
  float small[NS][33];
  atoll_req *sq[NS];
  for (int q = 0; q < NS; q++) {
    for (int i = 0; i < 33; i++) small[q][i] = val(500 + q, R, (size_t)i);
    sq[q] = atoll_iallreduce(w, small[q], 33, NULL);
  }
  int left = NS;
  double t0 = now();
  int done[NS] = {0};
  while (left > 0 && now() - t0 < 60)
    for (int q = (R * 7) % NS, k = 0; k < NS; k++, q = (q + 1) % NS)
      if (!done[q] && atoll_req_test(sq[q])) done[q] = 1, left--;
  CHECK(left == 0);
  size_t bad = 0, cnt[64], dsp[64];
  atoll_slices(33, N, NULL, cnt, dsp);
  for (int q = 0; q < NS; q++) {
    atoll_req_wait(sq[q]);
    for (int c = 0; c < N; c++) bad += bad_sums(small[q], 500 + q, wr, N, c, dsp[c], cnt[c]);
  }
  CHECK(bad == 0);
}

/* ------------------------------------------------------- wait accounting --- */

static void test_wait_seconds(atoll_comm *w) {
  if (N < 2) return;
  float buf[64];
  for (int i = 0; i < 64; i++) buf[i] = 1.0f;
  /* Rank 0 arrives 1 s late: the others block for about that long. The sleeps are long
     and the bounds half of them, so a rank descheduled on a loaded machine still passes. */
  MPI_Barrier(MPI_COMM_WORLD);
  atoll_comm_reset_stats(w);
  if (R == 0) sleep_s(1.0);
  atoll_allreduce(w, buf, 64);
  atoll_comm_stats st = atoll_comm_get_stats(w);
  if (R != 0) CHECK(st.wait_seconds > 0.5);
  CHECK(buf[5] == (float)N);
  /* Time between polls is not waiting: every rank starts, sleeps 1 s, then waits. */
  MPI_Barrier(MPI_COMM_WORLD);
  atoll_comm_reset_stats(w);
  double t0 = now();
  atoll_req *q = atoll_iallreduce(w, buf, 64, NULL);
  sleep_s(1.0);
  atoll_req_wait(q);
  double wall = now() - t0;
  st = atoll_comm_get_stats(w);
  CHECK(wall >= 1.0);
  if (!(st.wait_seconds < 0.5))
    fprintf(stderr, "rank %d: wait_seconds %.3f for a request completed after a 1 s sleep\n", R,
            st.wait_seconds);
  CHECK(st.wait_seconds < 0.5);
  CHECK(buf[5] == (float)(N * N));
  /* The barrier waits too. */
  MPI_Barrier(MPI_COMM_WORLD);
  atoll_comm_reset_stats(w);
  if (R == N - 1) sleep_s(1.0);
  atoll_barrier(w);
  st = atoll_comm_get_stats(w);
  if (R != N - 1) CHECK(st.wait_seconds > 0.5);
  CHECK(st.calls[ATOLL_OP_OTHER] == 1 && st.bytes_sent[ATOLL_OP_OTHER] == 0);
}

/* -------------------------------------------------------- control paths --- */

static void test_control(atoll_comm *w) {
  /* broadcast from the last rank, odd size; and of nothing */
  int root = N - 1;
  size_t nb = (1u << 20) + 3;
  unsigned char *b = malloc(nb);
  for (size_t i = 0; i < nb; i++) b[i] = R == root ? (unsigned char)(i * 7 + 1) : 0;
  atoll_comm_reset_stats(w);
  atoll_broadcast(w, b, nb, root);
  atoll_broadcast(w, b, 0, root);
  size_t bad = 0;
  for (size_t i = 0; i < nb; i++) bad += b[i] != (unsigned char)(i * 7 + 1);
  CHECK(bad == 0);
  atoll_comm_stats st = atoll_comm_get_stats(w);
  CHECK(st.calls[ATOLL_OP_BROADCAST] == 2);
  CHECK(st.bytes_sent[ATOLL_OP_BROADCAST] == (R == root && N > 1 ? nb : 0));
  CHECK(expect_op_only(&st, ATOLL_OP_BROADCAST));
  free(b);

  /* allgather_bytes: a struct per rank, then in place */
  typedef struct {
    int rank;
    double x;
  } rec;
  rec mine = {R, 1.5 * R}, *all = malloc((size_t)N * sizeof *all);
  memset(all, 0, (size_t)N * sizeof *all);
  atoll_comm_reset_stats(w);
  atoll_allgather_bytes(w, &mine, all, sizeof mine);
  bad = 0;
  for (int i = 0; i < N; i++) bad += all[i].rank != i || all[i].x != 1.5 * i;
  CHECK(bad == 0);
  for (int i = 0; i < N; i++) all[i].rank = i == R ? 100 + R : -1;
  atoll_allgather_bytes(w, &all[R], all, sizeof mine);
  bad = 0;
  for (int i = 0; i < N; i++) bad += all[i].rank != 100 + i;
  CHECK(bad == 0);
  st = atoll_comm_get_stats(w);
  CHECK(st.calls[ATOLL_OP_OTHER] == 2);
  CHECK(st.bytes_sent[ATOLL_OP_OTHER] == (N > 1 ? 2 * sizeof mine : 0));
  free(all);

  /* allreduce_sum_double: in rank order, bit-identical everywhere */
  double x = (R % 2 ? 1e16 : 1.0) / (R + 3.0);
  atoll_comm_reset_stats(w);
  double s = atoll_allreduce_sum_double(w, x);
  double e = 0.0;
  for (int i = 0; i < N; i++) e += (i % 2 ? 1e16 : 1.0) / (i + 3.0);
  CHECK(memcmp(&s, &e, sizeof s) == 0);
  uint64_t bits;
  memcpy(&bits, &s, sizeof bits);
  CHECK(same_everywhere(bits));
  st = atoll_comm_get_stats(w);
  CHECK(st.calls[ATOLL_OP_OTHER] == 1);
  CHECK(st.bytes_sent[ATOLL_OP_OTHER] == (N > 1 ? 8u : 0u));

  /* gather_to_root: uneven slices (one empty) to rank 1 % N */
  size_t counts[64], cnt[64], dsp[64], total = 0;
  for (int i = 0; i < N; i++) total += counts[i] = i == 0 && N > 1 ? 0 : 999 + 2 * (size_t)i;
  atoll_slices(total, N, counts, cnt, dsp);
  float *g = malloc(total * sizeof *g);
  for (size_t i = 0; i < total; i++) g[i] = NAN;
  for (size_t i = dsp[R]; i < dsp[R] + cnt[R]; i++) g[i] = val(600, R, i);
  int groot = 1 % N;
  atoll_comm_reset_stats(w);
  atoll_gather_to_root(w, g, total, counts, groot);
  if (R == groot) {
    bad = 0;
    for (int c = 0; c < N; c++)
      for (size_t i = dsp[c]; i < dsp[c] + cnt[c]; i++) bad += g[i] != val(600, c, i);
    CHECK(bad == 0);
  }
  st = atoll_comm_get_stats(w);
  CHECK(st.calls[ATOLL_OP_OTHER] == 1);
  CHECK(st.bytes_sent[ATOLL_OP_OTHER] == (R == groot ? 0 : 4 * cnt[R]));
  free(g);
}

/* ------------------------------------------------------ block exchanges --- */

static void test_exchange(atoll_comm *w) {
  /* all-to-all: block i of rank r's send buffer holds (r, i); rank r must receive
   * (i, r) from every rank i. Blocks of an odd size. */
  size_t block = 1003;
  unsigned char *send = malloc((size_t)N * block), *recv = malloc((size_t)N * block);
  for (int i = 0; i < N; i++)
    for (size_t j = 0; j < block; j++)
      send[(size_t)i * block + j] = (unsigned char)(R * 31 + i * 7 + j);
  memset(recv, 0xee, (size_t)N * block);
  atoll_comm_reset_stats(w);
  atoll_alltoall_bytes(w, send, recv, block);
  size_t bad = 0;
  for (int i = 0; i < N; i++)
    for (size_t j = 0; j < block; j++)
      bad += recv[(size_t)i * block + j] != (unsigned char)(i * 31 + R * 7 + j);
  CHECK(bad == 0);
  atoll_comm_stats st = atoll_comm_get_stats(w);
  CHECK(st.calls[ATOLL_OP_EXCHANGE] == 1);
  CHECK(st.bytes_sent[ATOLL_OP_EXCHANGE] == (uint64_t)(N - 1) * block);
  CHECK(expect_op_only(&st, ATOLL_OP_EXCHANGE));
  /* block all-gather: one block per rank, (r, j) */
  unsigned char *mine = malloc(block);
  for (size_t j = 0; j < block; j++) mine[j] = (unsigned char)(R * 13 + j * 3);
  memset(recv, 0xee, (size_t)N * block);
  atoll_comm_reset_stats(w);
  atoll_allgather_blocks(w, mine, recv, block);
  bad = 0;
  for (int i = 0; i < N; i++)
    for (size_t j = 0; j < block; j++)
      bad += recv[(size_t)i * block + j] != (unsigned char)(i * 13 + j * 3);
  CHECK(bad == 0);
  st = atoll_comm_get_stats(w);
  CHECK(st.calls[ATOLL_OP_EXCHANGE] == 1);
  CHECK(st.bytes_sent[ATOLL_OP_EXCHANGE] == (uint64_t)(N - 1) * block);
  free(mine);
  free(send);
  free(recv);
}

/* ----------------------------------------------------------------- split --- */

/* An all-reduce on sub-communicator c whose ranks have world ranks wr[]. */
static atoll_req *start_sub_allreduce(atoll_comm *c, float *buf, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) buf[i] = val(seed, R, i);
  return atoll_iallreduce(c, buf, n, NULL);
}

static size_t bad_sub_allreduce(atoll_comm *c, const float *buf, size_t n, uint64_t seed,
                                const int *wr) {
  int m = atoll_comm_size(c);
  size_t cnt[64], dsp[64], bad = 0;
  atoll_slices(n, m, NULL, cnt, dsp);
  for (int k = 0; k < m; k++) bad += bad_sums(buf, seed, wr, m, k, dsp[k], cnt[k]);
  return bad;
}

static void test_split(atoll_comm *w) {
  atoll_err err = {{0}};
  /* Every rank alone: collectives on a communicator of one are no-ops that count. */
  atoll_comm *solo = NULL;
  CHECK_OK(atoll_comm_split(w, R, 0, "solo", &solo, &err), &err);
  CHECK(solo && atoll_comm_size(solo) == 1 && atoll_comm_rank(solo) == 0);
  if (solo) {
    CHECK(strcmp(atoll_comm_name(solo), "solo") == 0);
    CHECK(atoll_comm_world_rank(solo) == R);
    float v[5] = {1, 2, 3, 4, 5};
    atoll_allreduce(solo, v, 5);
    atoll_reduce_scatter(solo, v, 5, NULL);
    atoll_allgather(solo, v, 5, NULL);
    atoll_req_wait(atoll_iallreduce(solo, v, 5, NULL));
    atoll_broadcast(solo, v, sizeof v, 0);
    atoll_barrier(solo);
    CHECK(atoll_allreduce_sum_double(solo, 2.5) == 2.5);
    float out[5];
    atoll_allgather_bytes(solo, v, out, sizeof v);
    atoll_gather_to_root(solo, v, 5, NULL, 0);
    CHECK(v[0] == 1 && v[4] == 5 && out[2] == 3);
    atoll_comm_stats st = atoll_comm_get_stats(solo);
    CHECK(st.calls[ATOLL_OP_ALLREDUCE] == 2 && st.calls[ATOLL_OP_REDUCE_SCATTER] == 1);
    CHECK(st.calls[ATOLL_OP_ALLGATHER] == 1 && st.calls[ATOLL_OP_BROADCAST] == 1);
    CHECK(st.calls[ATOLL_OP_OTHER] == 4);
    uint64_t bytes = 0;
    for (int o = 0; o < ATOLL_OP_COUNT; o++) bytes += st.bytes_sent[o];
    CHECK(bytes == 0);
    atoll_comm_free(solo);
  }
  /* A negative color: this rank is in no sub-communicator. */
  atoll_comm *none = (atoll_comm *)1;
  CHECK_OK(atoll_comm_split(w, R == 0 ? -1 : 0, 0, "rest", &none, &err), &err);
  CHECK((R == 0) == (none == NULL));
  if (none) {
    CHECK(atoll_comm_size(none) == N - 1 && atoll_comm_rank(none) == R - 1);
    atoll_comm_free(none);
  }
  if (N != 4) return;

  /* 2 x 2: rows {0,1} {2,3} (key = world rank) and columns {0,2} {1,3} (key = -rank:
   * reversed order). */
  atoll_comm *row = NULL, *col = NULL;
  CHECK_OK(atoll_comm_split(w, R / 2, R, "row", &row, &err), &err);
  CHECK_OK(atoll_comm_split(w, R % 2, -R, "col", &col, &err), &err);
  if (!row || !col) {
    CHECK(0);
    return;
  }
  int row_wr[2] = {2 * (R / 2), 2 * (R / 2) + 1}, col_wr[2] = {R % 2 + 2, R % 2};
  CHECK(atoll_comm_size(row) == 2 && atoll_comm_rank(row) == R % 2);
  CHECK(atoll_comm_size(col) == 2 && atoll_comm_rank(col) == (R < 2 ? 1 : 0));
  CHECK(atoll_comm_world_rank(row) == R && strcmp(atoll_comm_name(col), "col") == 0);
  int got[2] = {-1, -1};
  atoll_allgather_bytes(row, &R, got, sizeof R);
  CHECK(got[0] == row_wr[0] && got[1] == row_wr[1]);
  atoll_allgather_bytes(col, &R, got, sizeof R);
  CHECK(got[0] == col_wr[0] && got[1] == col_wr[1]);

  /* Collectives on both at once, independent of each other and of the world. */
  atoll_comm_reset_stats(w);
  atoll_comm_reset_stats(row);
  atoll_comm_reset_stats(col);
  size_t n = 300001;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  atoll_req *qa = start_sub_allreduce(row, a, n, 700);
  atoll_req *qb = start_sub_allreduce(col, b, n, 701);
  if (R % 2) {
    atoll_req_wait(qb);
    atoll_req_wait(qa);
  } else {
    atoll_req_wait(qa);
    atoll_req_wait(qb);
  }
  CHECK(bad_sub_allreduce(row, a, n, 700, row_wr) == 0);
  CHECK(bad_sub_allreduce(col, b, n, 701, col_wr) == 0);
  size_t cnt[2], dsp[2];
  atoll_slices(n, 2, NULL, cnt, dsp);
  int rr = atoll_comm_rank(row), cr = atoll_comm_rank(col);
  atoll_comm_stats sr = atoll_comm_get_stats(row), sc = atoll_comm_get_stats(col),
                   sw = atoll_comm_get_stats(w);
  CHECK(sr.calls[ATOLL_OP_ALLREDUCE] == 1 && sc.calls[ATOLL_OP_ALLREDUCE] == 1);
  CHECK(sr.bytes_sent[ATOLL_OP_ALLREDUCE] == 4 * (n - cnt[rr]) + 4 * (n - cnt[(rr + 1) % 2]));
  CHECK(sc.bytes_sent[ATOLL_OP_ALLREDUCE] == 4 * (n - cnt[cr]) + 4 * (n - cnt[(cr + 1) % 2]));
  CHECK(sw.calls[ATOLL_OP_ALLREDUCE] == 0 && sw.bytes_sent[ATOLL_OP_ALLREDUCE] == 0);
  /* Both members of a row hold the same bytes; the two rows differ. */
  uint64_t h = fnv1a(a, n * 4), hs[4];
  MPI_Allgather(&h, 1, MPI_UINT64_T, hs, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  CHECK(hs[0] == hs[1] && hs[2] == hs[3] && hs[0] != hs[2]);
  free(a);
  free(b);
  atoll_comm_free(col);
  atoll_comm_free(row);
}

/* --------------------------------------------------------------- watchdog --- */

static int run_watchdog(atoll_comm *w) {
  atoll_comm_set_timeout(w, 2.0);
  if (N < 2) {
    fprintf(stderr, "test_comm --watchdog needs at least 2 ranks\n");
    return 2;
  }
  if (R == 1) {
    sleep_s(120.0); /* never joins; the job is ended from rank 0 */
    return 0;
  }
  size_t n = 1u << 20;
  float *buf = calloc(n, sizeof *buf);
  atoll_allreduce(w, buf, n);
  fprintf(stderr, "rank %d: the all-reduce finished although rank 1 never joined\n", R);
  return 3;
}

int main(int argc, char **argv) {
  atoll_comm *w = NULL;
  atoll_err err = {{0}};
  if (atoll_comm_init(&w, &argc, &argv, &err) != 0) {
    fprintf(stderr, "test_comm: %s\n", err.msg);
    return 1;
  }
  R = atoll_comm_rank(w);
  N = atoll_comm_size(w);
  if (argc > 1 && strcmp(argv[1], "--watchdog") == 0) return run_watchdog(w);
  if (N > 64) {
    fprintf(stderr, "test_comm: at most 64 ranks\n");
    atoll_comm_abort(w, 1);
  }
  atoll_comm_set_timeout(w, 120.0);
  CHECK(strcmp(atoll_comm_name(w), "world") == 0);
  CHECK(atoll_comm_world_rank(w) == R);
  CHECK(strcmp(atoll_op_name(ATOLL_OP_REDUCE_SCATTER), "reduce_scatter") == 0);
  CHECK(strcmp(atoll_op_name(ATOLL_OP_ALLREDUCE), "allreduce") == 0);
  CHECK(strcmp(atoll_op_name(ATOLL_OP_EXCHANGE), "exchange") == 0);

  double t0 = now();
  test_slices();
  test_allreduce(w);
  test_scatter_gather(w);
  test_bf16_wire(w);
  test_inflight(w);
  test_wait_seconds(w);
  test_control(w);
  test_exchange(w);
  test_split(w);

  /* The same rings cut into many small segments (many units per step, windows below
   * and above the segment count), on communicators split while the world had that
   * tuning (they inherit it): same ranks as the world. */
  const struct {
    size_t segment;
    int window;
  } tunes[] = {{1000, 3}, {3001, 16}, {777, 1}};
  for (int t = 0; t < 3; t++) {
    atoll_comm_set_tuning(w, tunes[t].segment, tunes[t].window);
    atoll_comm *seg = NULL;
    CHECK_OK(atoll_comm_split(w, 0, R, "segmented", &seg, &err), &err);
    atoll_comm_set_tuning(w, 0, 0); /* the world back to the defaults */
    if (!seg) continue;
    atoll_comm_set_timeout(seg, 120.0);
    test_allreduce(seg);
    test_bf16_wire(seg);
    if (t == 0) {
      test_scatter_gather(seg);
      test_inflight(seg);
    }
    atoll_comm_free(seg);
  }

  int mine = check_failures, total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (R == 0)
    printf("test_comm: %d ranks: %s (%.1f s)\n", N,
           total ? "FAILED" : "all checks passed", now() - t0);
  atoll_comm_free(w);
  if (check_failures) fprintf(stderr, "rank %d: %d check(s) failed\n", R, check_failures);
  return check_failures ? 1 : 0;
}

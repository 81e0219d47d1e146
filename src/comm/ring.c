/* The ring collectives of the communication layer (comm/comm.h): all-reduce,
 * reduce-scatter and all-gather as state machines over MPI point-to-point messages,
 * advanced by polling (atoll_req_test) or waited on (atoll_req_wait, which also
 * completes point-to-point requests). Communicators, control operations and the
 * watchdog are in comm.c.
 *
 * ---------------------------------------------------------------- schedule ---
 * N ranks, slice c = [displs[c], displs[c] + counts[c]) floats of the range (see
 * atoll_slices), indices mod N. Rank r sends to r+1 and receives from r-1.
 *
 *   reduce-scatter step s = 0 .. N-2: rank r sends slice (r-s-1) and receives
 *     slice (r-s-2), which it adds into its own copy: buf[c] = buf[c] + recv.
 *     Slice c thus starts at rank c+1 and is summed along the ring, in the fixed
 *     order x[c+1], x[c+2], ..., x[c]; after N-1 steps rank r holds the sum of
 *     slice r (reduce-scatter ends here).
 *   all-gather step s = 0 .. N-2: rank r sends slice (r-s) and receives slice
 *     (r-s-1) straight into place. Every copy of slice c is rank c's bytes, so all
 *     ranks end with bit-identical results.
 *   all-reduce: the reduce-scatter steps, then the all-gather steps.
 *
 * The slice a rank sends at any step is the one it received at the step before.
 * This lets a ring run as a pipeline: every step is cut into K segments (the same cut
 * of a slice on every rank, each at most ATOLL_SEG_FLOATS floats), a "unit" (step s,
 * segment k) is one send and one receive, units run in order u = s*K + k, and up to
 * W <= K units are in flight at once (posted in order, retired in order; a unit
 * retires when its send and its receive are done). Unit u needs unit u-K (the same
 * segment one step earlier) retired and, if it was a reduce-step, added; with W <= K
 * that is always so, except for u-K itself when W = K. So on retiring unit u, the
 * request first posts the units that do not need u's addition (the peer copies them
 * while this rank adds), then adds u's segment, then posts the rest. A reduce-step
 * receives into one of W+1 segment-sized scratch slots (slot = u mod (W+1): the
 * units in flight and the one being added). Segment sizes are known on every rank,
 * so empty segments (slices of 0 floats, count 0) are skipped on both sides. The
 * order of additions per element is the one above, whatever K and W. Defaults below;
 * atoll_comm_set_tuning overrides them for experiments and tests (rank 0's values
 * hold; communicators split later inherit them).
 *
 * -------------------------------------------------------------- bytes sent ---
 * Each unit counts the floats it hands to MPI_Isend (4 bytes each; with N = 1 a ring
 * is a no-op and counts 0):
 *
 *   all-reduce       4 * (count - counts[r]) + 4 * (count - counts[(r+1) mod N])
 *                    (reduce-scatter phase: every slice but r; all-gather phase:
 *                    every slice but r+1). Even split: about 2 (N-1)/N of the range.
 *   reduce-scatter   4 * (count - counts[r])
 *   all-gather       4 * (count - counts[(r+1) mod N])
 *
 * ---------------------------------------------------------------- bf16 wire ---
 * With ATOLL_WIRE_BF16 (all-reduce and reduce-scatter only) the schedule and the
 * order of additions are the same; what changes is the message: a unit's send
 * segment is rounded to bfloat16 (round to nearest even) into a send slot, a receive
 * lands in a bf16 slot and is widened on retiring (reduce-step: buf[c] = buf[c] +
 * widen(recv); gather-step: buf[c] = widen(recv)). On retiring the last reduce-step
 * (the slice this rank owns, now summed) the rank rounds that segment to bf16 in
 * place, so it holds exactly what it will send and what a reduce-scatter leaves. Per
 * element of slice c: acc = x[c+1]; acc = x[c+j] + widen(bf16(acc)) for j = 2..N;
 * result = widen(bf16(acc)). The formulas above hold with 2 bytes in place of 4. */
#include "comm/comm_internal.h"
#include "core/clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* float -> bfloat16, round to nearest even; a NaN stays a (quiet) NaN, Inf stays Inf. */
static inline uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t quiet = (x >> 16) | 0x40u; /* a NaN: keep sign and payload top, make it quiet */
  /* a select, not a branch, so that the loops over segments vectorize */
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

static inline float from_bf16(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

void atoll_slices(size_t count, int size, const size_t *counts, size_t *counts_out,
                  size_t *displs_out) {
  size_t base = size > 0 ? count / (size_t)size : 0, rem = size > 0 ? count % (size_t)size : 0;
  size_t off = 0;
  for (int r = 0; r < size; r++) {
    size_t n = counts ? counts[r] : base + ((size_t)r < rem ? 1 : 0);
    if (counts_out) counts_out[r] = n;
    if (displs_out) displs_out[r] = off;
    off += n;
  }
}

/* ------------------------------------------------------------------ rings --- */

/* Segment k (of K) of slice c: an even split, the first counts[c] % K one longer. */
static void segment(const atoll_req *q, int slice, size_t k, size_t *off, size_t *n) {
  size_t cnt = q->counts[slice], K = q->nseg;
  size_t base = cnt / K, rem = cnt % K;
  *n = base + (k < rem ? 1 : 0);
  *off = q->displs[slice] + k * base + (k < rem ? k : rem);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Posts unit u: the receive first, then the send. */
static void post_unit(atoll_req *q, size_t u) {
  atoll_comm *c = q->c;
  int N = q->n, r = c->rank;
  int step = q->first_step + (int)(u / q->nseg); /* global: < N-1 reduce, else gather */
  size_t k = u % q->nseg;
  int reduce = step < N - 1;
  int s = reduce ? step : step - (N - 1);
  int send_slice = reduce ? mod(r - s - 1, N) : mod(r - s, N);
  int recv_slice = reduce ? mod(r - s - 2, N) : mod(r - s - 1, N);
  atoll_unit *un = &q->units[u % (size_t)q->window];
  un->send = MPI_REQUEST_NULL;
  un->recv = MPI_REQUEST_NULL;
  un->slot = -1;
  un->reduce = reduce;
  un->last = reduce && step == N - 2;
  size_t off, n;
  segment(q, recv_slice, k, &off, &n);
  un->off = off;
  un->n = n;
  int left = mod(r - 1, N), right = mod(r + 1, N);
  if (n > 0 && q->bf16) {
    un->slot = (int)(u % (size_t)(q->window + 1));
    MPI_Irecv(q->wire_recv + (size_t)un->slot * q->seg_cap, (int)n, MPI_UINT16_T, left, q->tag, c->comm,
              &un->recv);
  } else if (n > 0) {
    float *dst = q->buf + off;
    if (reduce) {
      un->slot = (int)(u % (size_t)(q->window + 1));
      dst = q->scratch + (size_t)un->slot * q->seg_cap;
    }
    MPI_Irecv(dst, (int)n, MPI_FLOAT, left, q->tag, c->comm, &un->recv);
  }
  segment(q, send_slice, k, &off, &n);
  if (n > 0 && q->bf16) {
    uint16_t *w = q->wire_send + (u % (size_t)q->window) * q->seg_cap;
    const float *src = q->buf + off;
    for (size_t i = 0; i < n; i++) w[i] = to_bf16(src[i]);
    MPI_Isend(w, (int)n, MPI_UINT16_T, right, q->tag, c->comm, &un->send);
    c->stats.bytes_sent[q->op] += (uint64_t)n * sizeof(uint16_t);
  } else if (n > 0) {
    MPI_Isend(q->buf + off, (int)n, MPI_FLOAT, right, q->tag, c->comm, &un->send);
    c->stats.bytes_sent[q->op] += (uint64_t)n * sizeof(float);
  }
}

static void add_into(float *restrict dst, const float *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dst[i] + src[i];
}

/* A retired unit's received segment, on a bf16 wire: widened and added (reduce-step),
 * rounded in place when it completes the slice this rank owns, or widened into place
 * (gather-step). */
static void land_bf16(atoll_req *q, const atoll_unit *un) {
  const uint16_t *src = q->wire_recv + (size_t)un->slot * q->seg_cap;
  float *restrict dst = q->buf + un->off;
  size_t n = un->n;
  if (!un->reduce) {
    for (size_t i = 0; i < n; i++) dst[i] = from_bf16(src[i]);
    return;
  }
  for (size_t i = 0; i < n; i++) dst[i] = dst[i] + from_bf16(src[i]);
  if (un->last)
    for (size_t i = 0; i < n; i++) dst[i] = from_bf16(to_bf16(dst[i]));
}

static void req_free(atoll_req *q) {
  if (!q) return;
  free(q->wire_recv);
  free(q->wire_send);
  free(q->scratch);
  free(q->counts);
  free(q);
}

/* Posts units while the window has room and each one's dependency (the same segment
 * one step earlier, K units back) is finished; `pending` is a unit retired but whose
 * received segment is not yet added, or SIZE_MAX. */
static void post_ready(atoll_req *q, size_t pending) {
  while (q->next < q->nunits && q->next - q->oldest < (size_t)q->window) {
    if (pending != SIZE_MAX && q->next >= q->nseg && q->next - q->nseg == pending) break;
    post_unit(q, q->next++);
  }
}

static atoll_req *ring_start(atoll_comm *c, atoll_op op, float *buf, size_t count,
                             const size_t *counts, atoll_wire wire) {
  int N = c->size;
  c->stats.calls[op]++;
  atoll_req *q = calloc(1, sizeof *q);
  size_t *cd = malloc(2 * (size_t)N * sizeof *cd);
  if (!q || !cd) atoll_comm_usage_fail(c, atoll_op_name(op), "out of memory");
  q->c = c;
  q->op = op;
  q->buf = buf;
  q->count = count;
  q->n = N;
  q->counts = cd;
  q->displs = cd + N;
  q->tag = atoll_comm_next_tag(c);
  q->bf16 = wire == ATOLL_WIRE_BF16;
  if (counts) {
    size_t sum = 0;
    for (int i = 0; i < N; i++) sum += counts[i];
    if (sum != count) {
      char why[128];
      snprintf(why, sizeof why, "slice counts add up to %zu, not the range's %zu floats", sum,
               count);
      atoll_comm_usage_fail(c, atoll_op_name(op), why);
    }
  }
  atoll_slices(count, N, counts, q->counts, q->displs);
  if (N == 1 || count == 0) {
    q->done = 1;
    return q;
  }
  size_t maxc = 0;
  for (int i = 0; i < N; i++)
    if (q->counts[i] > maxc) maxc = q->counts[i];
  q->nseg = (maxc + c->seg_floats - 1) / c->seg_floats;
  if (q->nseg == 0) q->nseg = 1;
  q->seg_cap = (maxc + q->nseg - 1) / q->nseg;
  q->window = q->nseg < (size_t)c->window ? (int)q->nseg : c->window;
  q->first_step = op == ATOLL_OP_ALLGATHER ? N - 1 : 0;
  q->nsteps = op == ATOLL_OP_ALLREDUCE ? 2 * (N - 1) : N - 1;
  q->nunits = (size_t)q->nsteps * q->nseg;
  if (q->bf16) {
    q->wire_recv = malloc((size_t)(q->window + 1) * q->seg_cap * sizeof(uint16_t));
    q->wire_send = malloc((size_t)q->window * q->seg_cap * sizeof(uint16_t));
    if (!q->wire_recv || !q->wire_send)
      atoll_comm_usage_fail(c, atoll_op_name(op), "out of memory for the bf16 wire buffers");
  } else if (op != ATOLL_OP_ALLGATHER) {
    q->scratch = malloc((size_t)(q->window + 1) * q->seg_cap * sizeof(float));
    if (!q->scratch)
      atoll_comm_usage_fail(c, atoll_op_name(op), "out of memory for the receive buffer");
  }
  post_ready(q, SIZE_MAX);
  return q;
}

int atoll_req_test(atoll_req *q) {
  if (!q) return 1;
  if (q->p2p && !q->done) {
    int flag = 0;
    MPI_Test(&q->preq, &flag, MPI_STATUS_IGNORE);
    if (flag) q->done = 1;
    return flag;
  }
  while (!q->done) {
    size_t u = q->oldest;
    atoll_unit *un = &q->units[u % (size_t)q->window];
    MPI_Request rs[2] = {un->recv, un->send};
    MPI_Status st[2];
    int flag = 0;
    MPI_Testall(2, rs, &flag, st);
    un->recv = rs[0];
    un->send = rs[1];
    if (!flag) return 0;
    atoll_unit done = *un;
    q->oldest++;
    /* Hand the peer its next messages before adding, so that its copy overlaps our
     * addition; the unit that needs this very segment waits for the add. */
    post_ready(q, u);
    if (done.slot >= 0 && q->bf16)
      land_bf16(q, &done);
    else if (done.slot >= 0)
      add_into(q->buf + done.off, q->scratch + (size_t)done.slot * q->seg_cap, done.n);
    post_ready(q, SIZE_MAX);
    if (q->oldest == q->nunits) q->done = 1;
  }
  return 1;
}

void atoll_req_wait(atoll_req *q) {
  if (!q) return;
  if (!q->done) {
    atoll_comm *c = q->c;
    double t0 = atoll_seconds();
    while (!atoll_req_test(q)) {
      double waited = atoll_seconds() - t0;
      if (waited > c->timeout)
        atoll_comm_watchdog_fire(c, atoll_op_name(q->op), q->count * sizeof(float));
      atoll_comm_spin_pause(c, waited);
    }
    c->stats.wait_seconds += atoll_seconds() - t0;
  }
  req_free(q);
}

atoll_req *atoll_iallreduce(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  return ring_start(c, ATOLL_OP_ALLREDUCE, buf, count, counts, ATOLL_WIRE_FP32);
}

atoll_req *atoll_ireduce_scatter(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  return ring_start(c, ATOLL_OP_REDUCE_SCATTER, buf, count, counts, ATOLL_WIRE_FP32);
}

atoll_req *atoll_iallgather(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  return ring_start(c, ATOLL_OP_ALLGATHER, buf, count, counts, ATOLL_WIRE_FP32);
}

atoll_req *atoll_iallreduce_wire(atoll_comm *c, float *buf, size_t count, const size_t *counts,
                                 atoll_wire wire) {
  return ring_start(c, ATOLL_OP_ALLREDUCE, buf, count, counts, wire);
}

atoll_req *atoll_ireduce_scatter_wire(atoll_comm *c, float *buf, size_t count, const size_t *counts,
                                      atoll_wire wire) {
  return ring_start(c, ATOLL_OP_REDUCE_SCATTER, buf, count, counts, wire);
}

void atoll_allreduce(atoll_comm *c, float *buf, size_t count) {
  atoll_req_wait(atoll_iallreduce(c, buf, count, NULL));
}

void atoll_reduce_scatter(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  atoll_req_wait(atoll_ireduce_scatter(c, buf, count, counts));
}

void atoll_allgather(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  atoll_req_wait(atoll_iallgather(c, buf, count, counts));
}


/* The communication layer on MPI: ring collectives over point-to-point messages,
 * small control operations over MPI's non-blocking collectives, counters, a watchdog.
 *
 * ---------------------------------------------------------------- schedule ---
 * N ranks, chunk c = [displs[c], displs[c] + counts[c]) floats of the range (see
 * atoll_chunks), indices mod N. Rank r sends to r+1 and receives from r-1.
 *
 *   reduce-scatter step s = 0 .. N-2: rank r sends chunk (r-s-1) and receives
 *     chunk (r-s-2), which it adds into its own copy: buf[c] = buf[c] + recv.
 *     Chunk c thus starts at rank c+1 and is summed along the ring, in the fixed
 *     order x[c+1], x[c+2], ..., x[c]; after N-1 steps rank r holds the sum of
 *     chunk r (reduce-scatter ends here).
 *   all-gather step s = 0 .. N-2: rank r sends chunk (r-s) and receives chunk
 *     (r-s-1) straight into place. Every copy of chunk c is rank c's bytes, so all
 *     ranks end with bit-identical results.
 *   all-reduce: the reduce-scatter steps, then the all-gather steps.
 *
 * The chunk a rank sends at any step is the one it received at the step before.
 * This lets a ring run as a pipeline: every step is cut into K segments (the same cut
 * of a chunk on every rank, each at most ATOLL_SEG_FLOATS floats), a "unit" (step s,
 * segment k) is one send and one receive, units run in order u = s*K + k, and up to
 * W <= K units are in flight at once (posted in order, retired in order; a unit
 * retires when its send and its receive are done). Unit u needs unit u-K (the same
 * segment one step earlier) retired and, if it was a reduce-step, added; with W <= K
 * that is always so, except for u-K itself when W = K. So on retiring unit u, the
 * request first posts the units that do not need u's addition (the peer copies them
 * while this rank adds), then adds u's segment, then posts the rest. A reduce-step
 * receives into one of W+1 segment-sized scratch slots (slot = u mod (W+1): the
 * units in flight and the one being added). Segment sizes are known on every rank,
 * so empty segments (chunks of 0 floats, count 0) are skipped on both sides. The
 * order of additions per element is the one above, whatever K and W. Defaults below;
 * the variables ATOLL_COMM_SEGMENT (floats) and ATOLL_COMM_WINDOW override them for
 * experiments and tests (rank 0's values hold, read when a communicator is made).
 *
 * -------------------------------------------------------------- bytes sent ---
 * bytes_sent counts exactly the bytes this rank hands to MPI to send (floats are 4
 * bytes; with N = 1 every operation is a no-op and counts 0):
 *
 *   all-reduce       4 * (count - counts[r]) + 4 * (count - counts[(r+1) mod N])
 *                    (reduce-scatter phase: every chunk but r; all-gather phase:
 *                    every chunk but r+1). Even split: about 2 (N-1)/N of the range.
 *   reduce-scatter   4 * (count - counts[r])
 *   all-gather       4 * (count - counts[(r+1) mod N])
 *   broadcast        `bytes` on the root, 0 on the other ranks (the payload handed
 *                    to MPI_Ibcast; what MPI forwards internally is not seen)
 *   other:
 *     barrier                0
 *     allgather_bytes        `bytes` (this rank's contribution)
 *     allreduce_sum_double   8 (one double, gathered by every rank)
 *     gather_to_root         4 * counts[r] on every rank but the root, 0 on it
 *
 * calls counts one per operation started (a blocking one or an atoll_i* request),
 * on every rank, N = 1 included. wait_seconds is the time spent inside blocking
 * waits: atoll_req_wait and the blocking calls, not the time between polls.
 *
 * ---------------------------------------------------------------- watchdog ---
 * A blocking wait spins on MPI_Test* (with sched_yield, no sleep) and gives up once
 * it has blocked longer than the communicator's timeout: one line on stderr,
 *   atoll: error: rank R: OP of SIZE on communicator 'NAME' (N ranks) did not
 *   finish within T s; a peer has stopped or died
 * (R is the rank in the world), then MPI_Abort(MPI_COMM_WORLD, 1). A timeout of 0 or
 * less turns it off. Polling (atoll_req_test) is never timed: the caller may overlap a
 * request with as much work as it likes.
 *
 * Tags: every point-to-point operation (ring request, gather_to_root) takes the
 * communicator's next tag (a counter mod 32767, the least MPI_TAG_UB that MPI
 * allows). All ranks start operations on a communicator in the same order, so the
 * tags match, and requests in flight at once never see each other's messages. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include "comm/comm.h"

#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ATOLL_TAG_RANGE 32767
/* Largest segment of a ring step (floats: 4 MiB), and the most units in flight.
 * Measured at 2 ranks over shared memory (bench_comm): one message per step is as
 * fast as MPI_Allreduce up to 16 MiB; cutting large chunks into 4 MiB segments keeps
 * that and doubles the speed at 32-64 MiB (each segment is added while the peer
 * copies the next); 256 KiB segments lost 5-30% below 16 MiB to per-message
 * handshakes. */
#define ATOLL_SEG_FLOATS ((size_t)1 << 20)
#define ATOLL_WINDOW 2
#define ATOLL_MAX_WINDOW 16
/* A blocking wait spins this long before it starts to yield the core, unless this
 * node has more ranks than cores (then it yields from the start). */
#define ATOLL_SPIN_SECONDS 0.05
/* Largest piece handed to one MPI call on the control paths (fits an int count). */
#define ATOLL_PIECE_BYTES ((size_t)1 << 30)

struct atoll_comm {
  MPI_Comm comm;
  int rank, size, world_rank;
  int is_world, owns_mpi;
  unsigned tag_counter;
  double timeout;
  double spin_seconds; /* a wait yields the core once it has lasted this long */
  size_t seg_floats;   /* ring segment size and window (same on every rank) */
  int window;
  char name[64];
  atoll_comm_stats stats;
};

typedef struct {
  MPI_Request send, recv;
  int slot; /* scratch slot of a reduce receive, -1 otherwise */
  size_t off, n; /* received segment: buf[off, off + n) */
} atoll_unit;

struct atoll_req {
  atoll_comm *c;
  atoll_op op;
  float *buf;
  size_t count;
  int n;            /* ranks */
  int first_step;   /* 0 for reduce-scatter and all-reduce, N-1 for all-gather */
  int nsteps;       /* steps of this op; global step = first_step + local step */
  int tag;
  size_t *counts, *displs;
  size_t nseg;      /* K */
  size_t nunits, next, oldest; /* units posted: [oldest, next) */
  int window;
  atoll_unit units[ATOLL_MAX_WINDOW];
  float *scratch;   /* window * seg_cap floats */
  size_t seg_cap;
  int done;
  int p2p;          /* a single message (atoll_isend / atoll_irecv): preq */
  MPI_Request preq;
};

/* ------------------------------------------------------------ utilities --- */

const char *atoll_op_name(atoll_op op) {
  switch (op) {
    case ATOLL_OP_ALLREDUCE: return "allreduce";
    case ATOLL_OP_REDUCE_SCATTER: return "reduce_scatter";
    case ATOLL_OP_ALLGATHER: return "allgather";
    case ATOLL_OP_BROADCAST: return "broadcast";
    case ATOLL_OP_EXCHANGE: return "exchange";
    case ATOLL_OP_P2P: return "p2p";
    case ATOLL_OP_OTHER: return "other";
    default: return "unknown";
  }
}

/* One turn of a waiting spin. On a busy machine sched_yield hands the core to another
 * process for a whole time slice, milliseconds that a collective then loses (measured
 * on a shared 2-core machine: yielding after 1 ms, 4 MiB all-reduces often took 5-8x
 * as long as MPI_Allreduce, which never yields; spinning 50 ms first, they match it).
 * So a wait spins hot, as MPI does, and yields only once a peer is clearly late; where
 * ranks share cores (more ranks on the node than cores), the peer may need this very
 * core, and a wait yields from the start. */
static void spin_pause(const atoll_comm *c, double waited) {
  if (waited >= c->spin_seconds) sched_yield();
}

static void human_size(size_t bytes, char *out, size_t cap) {
  if (bytes < 1024) {
    snprintf(out, cap, "%zu B", bytes);
  } else if (bytes < ((size_t)1 << 20)) {
    snprintf(out, cap, "%.1f KiB", (double)bytes / 1024.0);
  } else if (bytes < ((size_t)1 << 30)) {
    snprintf(out, cap, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
  } else {
    snprintf(out, cap, "%.2f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
  }
}

/* The watchdog's verdict: one line, then the whole job ends. */
static void watchdog_fire(const atoll_comm *c, const char *what, size_t bytes) {
  char sz[32];
  human_size(bytes, sz, sizeof sz);
  fprintf(stderr,
          "atoll: error: rank %d: %s of %s on communicator '%s' (%d ranks) did not finish "
          "within %g s; a peer has stopped or died\n",
          c->world_rank, what, sz, c->name, c->size, c->timeout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1); /* not reached */
}

/* A programming error in the caller (inconsistent counts): ends the job. */
static void usage_fail(const atoll_comm *c, const char *what, const char *why) {
  fprintf(stderr, "atoll: error: rank %d: %s on communicator '%s': %s\n", c->world_rank, what,
          c->name, why);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Waits for MPI requests under the watchdog, adding the time to wait_seconds. (One
 * MPI_Test at a time rather than MPI_Testall with MPI_STATUSES_IGNORE, which gcc flags
 * as an overflow against MPICH's prototypes.) */
static void watched_waitall(atoll_comm *c, int n, MPI_Request *reqs, const char *what,
                            size_t bytes) {
  double t0 = atoll_seconds();
  int first = 0; /* requests before it are done */
  while (first < n) {
    int flag = 0;
    MPI_Test(&reqs[first], &flag, MPI_STATUS_IGNORE);
    if (flag) {
      first++;
      continue;
    }
    double waited = atoll_seconds() - t0;
    if (waited > c->timeout) watchdog_fire(c, what, bytes);
    spin_pause(c, waited);
  }
  c->stats.wait_seconds += atoll_seconds() - t0;
}

static int next_tag(atoll_comm *c) {
  int tag = (int)(c->tag_counter % ATOLL_TAG_RANGE);
  c->tag_counter++;
  return tag;
}

void atoll_chunks(size_t count, int size, const size_t *counts, size_t *counts_out,
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

/* ---------------------------------------------------------- communicators --- */

static atoll_comm *comm_wrap(MPI_Comm mc, const char *name, double timeout,
                             double spin_seconds) {
  atoll_comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->comm = mc;
  MPI_Comm_rank(mc, &c->rank);
  MPI_Comm_size(mc, &c->size);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
  c->timeout = timeout;
  c->spin_seconds = spin_seconds;
  snprintf(c->name, sizeof c->name, "%s", name && name[0] ? name : "unnamed");
  /* Ring segment and window: the defaults, or ATOLL_COMM_SEGMENT (floats) and
   * ATOLL_COMM_WINDOW for experiments and tests. Rank 0's choice holds for all, since
   * every rank must cut chunks alike. */
  unsigned long long tune[2] = {ATOLL_SEG_FLOATS, ATOLL_WINDOW};
  const char *e = getenv("ATOLL_COMM_SEGMENT");
  if (e && strtoull(e, NULL, 10) > 0) tune[0] = strtoull(e, NULL, 10);
  e = getenv("ATOLL_COMM_WINDOW");
  if (e && strtoull(e, NULL, 10) > 0) tune[1] = strtoull(e, NULL, 10);
  if (tune[0] > ((size_t)1 << 28)) tune[0] = (size_t)1 << 28; /* an int count */
  if (tune[1] > ATOLL_MAX_WINDOW) tune[1] = ATOLL_MAX_WINDOW;
  MPI_Bcast(tune, 2, MPI_UNSIGNED_LONG_LONG, 0, mc);
  c->seg_floats = (size_t)tune[0];
  c->window = (int)tune[1];
  return c;
}

int atoll_comm_init(atoll_comm **world, int *argc, char ***argv, atoll_err *err) {
  *world = NULL;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return atoll_fail(err, "comm: MPI was already finalized; it cannot restart");
  int owns = 0;
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return atoll_fail(err, "comm: MPI_Init_thread failed");
    owns = 1;
  }
  MPI_Comm dup;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS)
    return atoll_fail(err, "comm: MPI_Comm_dup of MPI_COMM_WORLD failed");
  /* More ranks on this node than cores: waits yield at once (as Open MPI's do then). */
  MPI_Comm node;
  int local = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double spin = cores > 0 && local > cores ? 0.0 : ATOLL_SPIN_SECONDS;
  atoll_comm *c = comm_wrap(dup, "world", 300.0, spin);
  if (!c) {
    MPI_Comm_free(&dup);
    return atoll_fail(err, "comm: out of memory");
  }
  c->is_world = 1;
  c->owns_mpi = owns;
  *world = c;
  return 0;
}

void atoll_comm_free(atoll_comm *c) {
  if (!c) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    MPI_Comm_free(&c->comm);
    if (c->is_world && c->owns_mpi) MPI_Finalize();
  }
  free(c);
}

void atoll_comm_abort(atoll_comm *c, int code) {
  (void)c;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  fflush(stdout);
  fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

int atoll_comm_rank(const atoll_comm *c) { return c->rank; }
int atoll_comm_size(const atoll_comm *c) { return c->size; }
int atoll_comm_world_rank(const atoll_comm *c) { return c->world_rank; }
const char *atoll_comm_name(const atoll_comm *c) { return c->name; }
/* A timeout of 0 or less (or NaN) turns the watchdog off for this communicator. */
void atoll_comm_set_timeout(atoll_comm *c, double seconds) {
  c->timeout = seconds > 0 ? seconds : HUGE_VAL;
}
atoll_comm_stats atoll_comm_get_stats(const atoll_comm *c) { return c->stats; }
void atoll_comm_reset_stats(atoll_comm *c) { memset(&c->stats, 0, sizeof c->stats); }

int atoll_comm_split(atoll_comm *c, int color, int key, const char *name, atoll_comm **out,
                     atoll_err *err) {
  *out = NULL;
  MPI_Comm mc;
  if (MPI_Comm_split(c->comm, color < 0 ? MPI_UNDEFINED : color, key, &mc) != MPI_SUCCESS)
    return atoll_fail(err, "comm: splitting communicator '%s' failed", c->name);
  if (mc == MPI_COMM_NULL) return 0; /* negative color: in no sub-communicator */
  atoll_comm *s = comm_wrap(mc, name, c->timeout, c->spin_seconds);
  if (!s) {
    MPI_Comm_free(&mc);
    return atoll_fail(err, "comm: out of memory");
  }
  *out = s;
  return 0;
}

/* ------------------------------------------------------------------ rings --- */

/* Segment k (of K) of chunk c: an even split, the first counts[c] % K one longer. */
static void segment(const atoll_req *q, int chunk, size_t k, size_t *off, size_t *n) {
  size_t cnt = q->counts[chunk], K = q->nseg;
  size_t base = cnt / K, rem = cnt % K;
  *n = base + (k < rem ? 1 : 0);
  *off = q->displs[chunk] + k * base + (k < rem ? k : rem);
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
  int send_chunk = reduce ? mod(r - s - 1, N) : mod(r - s, N);
  int recv_chunk = reduce ? mod(r - s - 2, N) : mod(r - s - 1, N);
  atoll_unit *un = &q->units[u % (size_t)q->window];
  un->send = MPI_REQUEST_NULL;
  un->recv = MPI_REQUEST_NULL;
  un->slot = -1;
  size_t off, n;
  segment(q, recv_chunk, k, &off, &n);
  un->off = off;
  un->n = n;
  int left = mod(r - 1, N), right = mod(r + 1, N);
  if (n > 0) {
    float *dst = q->buf + off;
    if (reduce) {
      un->slot = (int)(u % (size_t)(q->window + 1));
      dst = q->scratch + (size_t)un->slot * q->seg_cap;
    }
    MPI_Irecv(dst, (int)n, MPI_FLOAT, left, q->tag, c->comm, &un->recv);
  }
  segment(q, send_chunk, k, &off, &n);
  if (n > 0) {
    MPI_Isend(q->buf + off, (int)n, MPI_FLOAT, right, q->tag, c->comm, &un->send);
    c->stats.bytes_sent[q->op] += (uint64_t)n * sizeof(float);
  }
}

static void add_into(float *restrict dst, const float *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dst[i] + src[i];
}

static void req_free(atoll_req *q) {
  if (!q) return;
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
                             const size_t *counts) {
  int N = c->size;
  c->stats.calls[op]++;
  atoll_req *q = calloc(1, sizeof *q);
  size_t *cd = malloc(2 * (size_t)N * sizeof *cd);
  if (!q || !cd) usage_fail(c, atoll_op_name(op), "out of memory");
  q->c = c;
  q->op = op;
  q->buf = buf;
  q->count = count;
  q->n = N;
  q->counts = cd;
  q->displs = cd + N;
  q->tag = next_tag(c);
  if (counts) {
    size_t sum = 0;
    for (int i = 0; i < N; i++) sum += counts[i];
    if (sum != count) {
      char why[128];
      snprintf(why, sizeof why, "chunk counts add up to %zu, not the range's %zu floats", sum,
               count);
      usage_fail(c, atoll_op_name(op), why);
    }
  }
  atoll_chunks(count, N, counts, q->counts, q->displs);
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
  if (op != ATOLL_OP_ALLGATHER) {
    q->scratch = malloc((size_t)(q->window + 1) * q->seg_cap * sizeof(float));
    if (!q->scratch) usage_fail(c, atoll_op_name(op), "out of memory for the receive buffer");
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
    if (done.slot >= 0)
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
      if (waited > c->timeout) watchdog_fire(c, atoll_op_name(q->op), q->count * sizeof(float));
      spin_pause(c, waited);
    }
    c->stats.wait_seconds += atoll_seconds() - t0;
  }
  req_free(q);
}

atoll_req *atoll_iallreduce(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  return ring_start(c, ATOLL_OP_ALLREDUCE, buf, count, counts);
}

atoll_req *atoll_ireduce_scatter(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  return ring_start(c, ATOLL_OP_REDUCE_SCATTER, buf, count, counts);
}

atoll_req *atoll_iallgather(atoll_comm *c, float *buf, size_t count, const size_t *counts) {
  return ring_start(c, ATOLL_OP_ALLGATHER, buf, count, counts);
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

/* ------------------------------------------------------- point to point --- */

static atoll_req *p2p_start(atoll_comm *c, void *buf, size_t bytes, int peer, int tag, int send) {
  const char *what = send ? "isend" : "irecv";
  if (bytes > (size_t)INT_MAX) usage_fail(c, what, "message larger than 2 GiB");
  if (peer < 0 || peer >= c->size || peer == c->rank) usage_fail(c, what, "peer is not another rank");
  atoll_req *q = calloc(1, sizeof *q);
  if (!q) usage_fail(c, what, "out of memory");
  q->c = c;
  q->op = ATOLL_OP_P2P;
  q->count = bytes / sizeof(float);
  q->p2p = 1;
  c->stats.calls[ATOLL_OP_P2P]++;
  tag %= ATOLL_TAG_RANGE;
  if (send) {
    c->stats.bytes_sent[ATOLL_OP_P2P] += bytes;
    MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, c->comm, &q->preq);
  } else {
    MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, c->comm, &q->preq);
  }
  return q;
}

atoll_req *atoll_isend(atoll_comm *c, const void *buf, size_t bytes, int peer, int tag) {
  return p2p_start(c, (void *)buf, bytes, peer, tag, 1);
}

atoll_req *atoll_irecv(atoll_comm *c, void *buf, size_t bytes, int peer, int tag) {
  return p2p_start(c, buf, bytes, peer, tag, 0);
}

/* --------------------------------------------------------- control paths --- */

void atoll_broadcast(atoll_comm *c, void *buf, size_t bytes, int root) {
  c->stats.calls[ATOLL_OP_BROADCAST]++;
  if (c->size == 1 || bytes == 0) return;
  if (c->rank == root) c->stats.bytes_sent[ATOLL_OP_BROADCAST] += bytes;
  size_t npieces = (bytes + ATOLL_PIECE_BYTES - 1) / ATOLL_PIECE_BYTES;
  MPI_Request *reqs = malloc(npieces * sizeof *reqs);
  if (!reqs) usage_fail(c, "broadcast", "out of memory");
  for (size_t i = 0; i < npieces; i++) {
    size_t off = i * ATOLL_PIECE_BYTES;
    size_t n = bytes - off < ATOLL_PIECE_BYTES ? bytes - off : ATOLL_PIECE_BYTES;
    MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, c->comm, &reqs[i]);
  }
  watched_waitall(c, (int)npieces, reqs, "broadcast", bytes);
  free(reqs);
}

void atoll_barrier(atoll_comm *c) {
  c->stats.calls[ATOLL_OP_OTHER]++;
  if (c->size == 1) return;
  MPI_Request req;
  MPI_Ibarrier(c->comm, &req);
  watched_waitall(c, 1, &req, "barrier", 0);
}

void atoll_allgather_bytes(atoll_comm *c, const void *mine, void *out, size_t bytes) {
  c->stats.calls[ATOLL_OP_OTHER]++;
  char *dst = out;
  const char *src = mine;
  int in_place = src == dst + (size_t)c->rank * bytes;
  if (c->size == 1 || bytes == 0) {
    if (!in_place && bytes) memmove(dst, src, bytes);
    return;
  }
  c->stats.bytes_sent[ATOLL_OP_OTHER] += bytes;
  size_t npieces = (bytes + ATOLL_PIECE_BYTES - 1) / ATOLL_PIECE_BYTES;
  MPI_Request *reqs = malloc(npieces * sizeof *reqs);
  if (!reqs) usage_fail(c, "allgather_bytes", "out of memory");
  for (size_t i = 0; i < npieces; i++) {
    size_t off = i * ATOLL_PIECE_BYTES;
    size_t n = bytes - off < ATOLL_PIECE_BYTES ? bytes - off : ATOLL_PIECE_BYTES;
    /* Piece i of every rank's block: n bytes at off, blocks `bytes` apart. */
    MPI_Datatype piece, block;
    MPI_Type_contiguous((int)n, MPI_BYTE, &piece);
    MPI_Type_create_resized(piece, 0, (MPI_Aint)bytes, &block);
    MPI_Type_commit(&block);
    MPI_Iallgather(in_place ? MPI_IN_PLACE : src + off, (int)n, MPI_BYTE, dst + off, 1, block,
                   c->comm, &reqs[i]);
    MPI_Type_free(&block);
    MPI_Type_free(&piece);
  }
  watched_waitall(c, (int)npieces, reqs, "allgather_bytes", bytes);
  free(reqs);
}

double atoll_allreduce_sum_double(atoll_comm *c, double x) {
  c->stats.calls[ATOLL_OP_OTHER]++;
  if (c->size == 1) return x;
  double stack[64];
  double *all = c->size <= 64 ? stack : malloc((size_t)c->size * sizeof *all);
  if (!all) usage_fail(c, "allreduce_sum_double", "out of memory");
  c->stats.bytes_sent[ATOLL_OP_OTHER] += sizeof(double);
  MPI_Request req;
  MPI_Iallgather(&x, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, c->comm, &req);
  watched_waitall(c, 1, &req, "allreduce_sum_double", sizeof(double));
  double sum = 0.0;
  for (int i = 0; i < c->size; i++) sum += all[i];
  if (all != stack) free(all);
  return sum;
}

/* Point-to-point rather than MPI_Igatherv: its int displacements would cap the
 * range at 2^31 floats. Chunks go in pieces of at most 2^28 floats (an int count). */
void atoll_gather_to_root(atoll_comm *c, float *buf, size_t count, const size_t *counts,
                          int root) {
  c->stats.calls[ATOLL_OP_OTHER]++;
  int N = c->size;
  int tag = next_tag(c);
  if (N == 1 || count == 0) return;
  size_t *cd = malloc(2 * (size_t)N * sizeof *cd);
  if (!cd) usage_fail(c, "gather_to_root", "out of memory");
  size_t *cnt = cd, *dsp = cd + N;
  if (counts) {
    size_t sum = 0;
    for (int i = 0; i < N; i++) sum += counts[i];
    if (sum != count) usage_fail(c, "gather_to_root", "chunk counts do not add up to the range");
  }
  atoll_chunks(count, N, counts, cnt, dsp);
  const size_t piece = ATOLL_PIECE_BYTES / sizeof(float);
  size_t nreq = 0;
  for (int i = 0; i < N; i++)
    if (c->rank == root ? i != root : i == c->rank) nreq += (cnt[i] + piece - 1) / piece;
  MPI_Request *reqs = malloc((nreq ? nreq : 1) * sizeof *reqs);
  if (!reqs) usage_fail(c, "gather_to_root", "out of memory");
  size_t k = 0;
  for (int i = 0; i < N; i++) {
    if (c->rank == root ? i == root : i != c->rank) continue;
    for (size_t off = 0; off < cnt[i]; off += piece) {
      size_t n = cnt[i] - off < piece ? cnt[i] - off : piece;
      float *p = buf + dsp[i] + off;
      if (c->rank == root) {
        MPI_Irecv(p, (int)n, MPI_FLOAT, i, tag, c->comm, &reqs[k++]);
      } else {
        MPI_Isend(p, (int)n, MPI_FLOAT, root, tag, c->comm, &reqs[k++]);
        c->stats.bytes_sent[ATOLL_OP_OTHER] += (uint64_t)n * sizeof(float);
      }
    }
  }
  watched_waitall(c, (int)nreq, reqs, "gather_to_root", count * sizeof(float));
  free(reqs);
  free(cd);
}

/* ------------------------------------------------------- block exchanges --- */

/* send_of(i): the block for rank i. Pairs of Isend/Irecv with every other rank,
 * waited on under the watchdog; the own block is copied. */
static void exchange_blocks(atoll_comm *c, const char *send, int same_block, char *recv,
                            size_t block, const char *what) {
  c->stats.calls[ATOLL_OP_EXCHANGE]++;
  const char *own = same_block ? send : send + (size_t)c->rank * block;
  memmove(recv + (size_t)c->rank * block, own, block);
  if (c->size == 1 || block == 0) return;
  if (block > (size_t)INT_MAX) usage_fail(c, what, "block larger than 2 GiB");
  MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)c->size);
  if (!reqs) usage_fail(c, what, "out of memory");
  int n = 0, tag = next_tag(c);
  for (int i = 0; i < c->size; i++) {
    if (i == c->rank) continue;
    MPI_Irecv(recv + (size_t)i * block, (int)block, MPI_BYTE, i, tag, c->comm, &reqs[n++]);
  }
  for (int i = 0; i < c->size; i++) {
    if (i == c->rank) continue;
    const char *src = same_block ? send : send + (size_t)i * block;
    MPI_Isend(src, (int)block, MPI_BYTE, i, tag, c->comm, &reqs[n++]);
    c->stats.bytes_sent[ATOLL_OP_EXCHANGE] += block;
  }
  watched_waitall(c, n, reqs, what, block * (size_t)(c->size - 1));
  free(reqs);
}

void atoll_alltoall_bytes(atoll_comm *c, const void *send, void *recv, size_t block) {
  exchange_blocks(c, send, 0, recv, block, "alltoall");
}

void atoll_allgather_blocks(atoll_comm *c, const void *mine, void *recv, size_t block) {
  exchange_blocks(c, mine, 1, recv, block, "allgather_blocks");
}

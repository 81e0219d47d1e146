/* The communication layer on MPI (comm/comm.h), less the ring collectives (ring.c):
 * communicators, the ring tuning, point-to-point messages, small control operations
 * over MPI's non-blocking collectives, block exchanges, counters, the watchdog and the
 * fatal handler that ends the job.
 *
 * -------------------------------------------------------------- bytes sent ---
 * bytes_sent counts exactly the bytes this rank hands to MPI to send (with N = 1
 * every operation is a no-op and counts 0); the rings' formulas are in ring.c:
 *
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
 * (R is the rank in the world), then atoll_fatal, whose handler (installed by
 * atoll_comm_init) ends the job: MPI_Abort(MPI_COMM_WORLD, 1). A timeout of 0 or
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
#include "comm/comm_internal.h"
#include "core/clock.h"
#include "core/fatal.h"

#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
void atoll_comm_spin_pause(const atoll_comm *c, double waited) {
  if (c->background) { /* beside the training thread's compute: give the core back */
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  } else if (waited >= c->spin_seconds) {
    sched_yield();
  }
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

/* Ends every rank of the job with exit status `code`: the fatal handler installed by
 * atoll_comm_init (core/fatal.h), and atoll_comm_abort. Without MPI running (not yet
 * started, or finalized) only this process exits. */
static void end_job(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  fflush(stdout);
  fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

/* The watchdog's verdict: one line naming the operation, size, communicator and rank,
 * then the whole job ends through the one fatal path. */
void atoll_comm_watchdog_fire(const atoll_comm *c, const char *what, size_t bytes) {
  char sz[32];
  human_size(bytes, sz, sizeof sz);
  atoll_fatal("rank %d: %s of %s on communicator '%s' (%d ranks) did not finish within %g s; a peer has stopped or died",
              c->world_rank, what, sz, c->name, c->size, c->timeout);
}

void atoll_comm_usage_fail(const atoll_comm *c, const char *what, const char *why) {
  atoll_fatal("rank %d: %s on communicator '%s': %s", c->world_rank, what, c->name, why);
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
    if (waited > c->timeout) atoll_comm_watchdog_fire(c, what, bytes);
    atoll_comm_spin_pause(c, waited);
  }
  c->stats.wait_seconds += atoll_seconds() - t0;
}

int atoll_comm_next_tag(atoll_comm *c) {
  int tag = (int)(c->tag_counter % ATOLL_TAG_RANGE);
  c->tag_counter++;
  return tag;
}

/* ---------------------------------------------------------- communicators --- */

/* A communicator over mc with the settings of `parent` (timeout, spin, ring tuning),
 * or the defaults for the world (parent NULL). */
static atoll_comm *comm_wrap(MPI_Comm mc, const char *name, const atoll_comm *parent) {
  atoll_comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->comm = mc;
  MPI_Comm_rank(mc, &c->rank);
  MPI_Comm_size(mc, &c->size);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
  c->timeout = parent ? parent->timeout : 300.0;
  c->spin_seconds = parent ? parent->spin_seconds : ATOLL_SPIN_SECONDS;
  c->seg_floats = parent ? parent->seg_floats : ATOLL_SEG_FLOATS;
  c->window = parent ? parent->window : ATOLL_WINDOW;
  snprintf(c->name, sizeof c->name, "%s", name && name[0] ? name : "unnamed");
  return c;
}

void atoll_comm_set_tuning(atoll_comm *c, size_t segment_floats, int window) {
  unsigned long long tune[2] = {segment_floats ? segment_floats : ATOLL_SEG_FLOATS,
                                window > 0 ? (unsigned long long)window : ATOLL_WINDOW};
  if (tune[0] > ((size_t)1 << 28)) tune[0] = (size_t)1 << 28; /* an int count */
  if (tune[1] > ATOLL_MAX_WINDOW) tune[1] = ATOLL_MAX_WINDOW;
  /* Rank 0's choice holds for all: every rank must cut segments alike. */
  MPI_Bcast(tune, 2, MPI_UNSIGNED_LONG_LONG, 0, c->comm);
  c->seg_floats = (size_t)tune[0];
  c->window = (int)tune[1];
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
    /* MULTIPLE: DiLoCo's outer exchange may run on a thread of its own (--overlap) */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
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
  atoll_comm *c = comm_wrap(dup, "world", NULL);
  if (!c) {
    MPI_Comm_free(&dup);
    return atoll_fail(err, "comm: out of memory");
  }
  if (cores > 0 && local > cores) c->spin_seconds = 0.0;
  c->is_world = 1;
  c->owns_mpi = owns;
  /* From here a fatal error anywhere (atoll_fatal) ends every rank, not just this one. */
  atoll_set_fatal_handler(end_job);
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
  end_job(code);
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
void atoll_comm_count(atoll_comm *c, atoll_op op, uint64_t bytes) {
  c->stats.bytes_sent[op] += bytes;
  c->stats.calls[op]++;
}

int atoll_comm_split(atoll_comm *c, int color, int key, const char *name, atoll_comm **out,
                     atoll_err *err) {
  *out = NULL;
  MPI_Comm mc;
  if (MPI_Comm_split(c->comm, color < 0 ? MPI_UNDEFINED : color, key, &mc) != MPI_SUCCESS)
    return atoll_fail(err, "comm: splitting communicator '%s' failed", c->name);
  if (mc == MPI_COMM_NULL) return 0; /* negative color: in no sub-communicator */
  atoll_comm *s = comm_wrap(mc, name, c);
  if (!s) {
    MPI_Comm_free(&mc);
    return atoll_fail(err, "comm: out of memory");
  }
  *out = s;
  return 0;
}

int atoll_comm_dup_background(atoll_comm *c, const char *name, atoll_comm **out, atoll_err *err) {
  *out = NULL;
  MPI_Comm mc;
  if (MPI_Comm_dup(c->comm, &mc) != MPI_SUCCESS)
    return atoll_fail(err, "comm: duplicating communicator '%s' failed", c->name);
  atoll_comm *s = comm_wrap(mc, name, c);
  if (!s) {
    MPI_Comm_free(&mc);
    return atoll_fail(err, "comm: out of memory");
  }
  s->background = 1;
  *out = s;
  return 0;
}

int atoll_comm_threads_ok(void) {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_MULTIPLE;
}

/* ------------------------------------------------------- point to point --- */

static atoll_req *p2p_start(atoll_comm *c, void *buf, size_t bytes, int peer, int tag, int send) {
  const char *what = send ? "isend" : "irecv";
  if (bytes > (size_t)INT_MAX) atoll_comm_usage_fail(c, what, "message larger than 2 GiB");
  if (peer < 0 || peer >= c->size || peer == c->rank)
    atoll_comm_usage_fail(c, what, "peer is not another rank");
  if (tag < 0 || tag >= ATOLL_TAG_RANGE) atoll_comm_usage_fail(c, what, "tag outside [0, 32767)");
  atoll_req *q = calloc(1, sizeof *q);
  if (!q) atoll_comm_usage_fail(c, what, "out of memory");
  q->c = c;
  q->op = ATOLL_OP_P2P;
  q->count = bytes / sizeof(float);
  q->p2p = 1;
  c->stats.calls[ATOLL_OP_P2P]++;
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
  if (!reqs) atoll_comm_usage_fail(c, "broadcast", "out of memory");
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
  if (!reqs) atoll_comm_usage_fail(c, "allgather_bytes", "out of memory");
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
  if (!all) atoll_comm_usage_fail(c, "allreduce_sum_double", "out of memory");
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
 * range at 2^31 floats. Slices go in pieces of at most 2^28 floats (an int count). */
void atoll_gather_to_root(atoll_comm *c, float *buf, size_t count, const size_t *counts,
                          int root) {
  c->stats.calls[ATOLL_OP_OTHER]++;
  int N = c->size;
  int tag = atoll_comm_next_tag(c);
  if (N == 1 || count == 0) return;
  size_t *cd = malloc(2 * (size_t)N * sizeof *cd);
  if (!cd) atoll_comm_usage_fail(c, "gather_to_root", "out of memory");
  size_t *cnt = cd, *dsp = cd + N;
  if (counts) {
    size_t sum = 0;
    for (int i = 0; i < N; i++) sum += counts[i];
    if (sum != count)
      atoll_comm_usage_fail(c, "gather_to_root", "slice counts do not add up to the range");
  }
  atoll_slices(count, N, counts, cnt, dsp);
  const size_t piece = ATOLL_PIECE_BYTES / sizeof(float);
  size_t nreq = 0;
  for (int i = 0; i < N; i++)
    if (c->rank == root ? i != root : i == c->rank) nreq += (cnt[i] + piece - 1) / piece;
  MPI_Request *reqs = malloc((nreq ? nreq : 1) * sizeof *reqs);
  if (!reqs) atoll_comm_usage_fail(c, "gather_to_root", "out of memory");
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
  if (block > (size_t)INT_MAX) atoll_comm_usage_fail(c, what, "block larger than 2 GiB");
  MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)c->size);
  if (!reqs) atoll_comm_usage_fail(c, what, "out of memory");
  int n = 0, tag = atoll_comm_next_tag(c);
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


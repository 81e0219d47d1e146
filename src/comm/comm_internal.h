/* Internal to the communication layer (src/comm/comm.c: communicators, control
 * operations, point to point, the watchdog; src/comm/ring.c: the ring collectives):
 * the structures both share and the helpers comm.c lends the rings. Not for other
 * modules: everything else goes through comm/comm.h. */
#ifndef ATOLL_COMM_INTERNAL_H
#define ATOLL_COMM_INTERNAL_H

#include "comm/comm.h"

#include <mpi.h>

/* Largest segment of a ring step (floats: 4 MiB), and the most units in flight.
 * Measured at 2 ranks over shared memory (bench_comm): one message per step is as
 * fast as MPI_Allreduce up to 16 MiB; cutting large slices into 4 MiB segments keeps
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
  int background;      /* a background thread's: waits sleep (atoll_comm_dup_background) */
  size_t seg_floats;   /* ring segment size and window (same on every rank) */
  int window;
  char name[64];
  atoll_comm_stats stats;
};

typedef struct {
  MPI_Request send, recv;
  int slot; /* scratch slot of a reduce receive (any receive on a bf16 wire), -1 otherwise */
  int reduce, last; /* a reduce-step's receive; the last one (the slice this rank owns) */
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
  float *scratch;   /* (window + 1) * seg_cap floats (fp32 wire, reduce steps) */
  size_t seg_cap;
  int bf16;         /* ATOLL_WIRE_BF16: every message is bf16 */
  uint16_t *wire_recv; /* bf16: (window + 1) * seg_cap receive slots, every step */
  uint16_t *wire_send; /* bf16: window * seg_cap send slots (slot = unit mod window) */
  int done;
  int p2p;          /* a single message (atoll_isend / atoll_irecv): preq */
  MPI_Request preq;
};

/* The communicator's next tag (a counter mod ATOLL_TAG_RANGE; see comm.c). */
int atoll_comm_next_tag(atoll_comm *c);
/* One turn of a blocking wait that has lasted `waited` seconds (spin, then yield). */
void atoll_comm_spin_pause(const atoll_comm *c, double waited);
/* The watchdog's verdict on an operation of `bytes` bytes: one line, then the job ends. */
_Noreturn void atoll_comm_watchdog_fire(const atoll_comm *c, const char *what, size_t bytes);
/* A programming error in the caller (inconsistent counts, out of memory): ends the job. */
_Noreturn void atoll_comm_usage_fail(const atoll_comm *c, const char *what, const char *why);

#endif

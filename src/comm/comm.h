/* The communication layer: collectives over ranges of flat float buffers, on MPI.
 *
 * The collectives are rings written over MPI point-to-point messages (not MPI's own
 * collectives) for three reasons: the byte counters count what was really handed to
 * MPI; the reduction order is fixed (every element is summed in ring order on one
 * rank and then copied), so all ranks end with bit-identical results; and a ring is a
 * state machine that the caller can advance by polling (atoll_req_test) from inside
 * the backward pass, since Open MPI makes no progress on its own.
 *
 * Slices. A collective on a range of `count` floats splits it into `size` slices,
 * slice r = [displs[r], displs[r] + counts[r]) relative to the range start, one per
 * rank, contiguous and in rank order (counts may be uneven or zero). NULL counts
 * means an even split: slice r gets count/size floats, the first count%size slices
 * one more.
 *
 *   all-reduce (sum):  in place; every rank ends with the full sum.
 *   reduce-scatter:    in place; rank r ends with the sum of slice r (at its place in
 *                      the buffer); the rest of the buffer is left as scratch.
 *   all-gather:        in place; rank r contributes slice r (at its place), every rank
 *                      ends with all slices.
 *   broadcast:         from root, the whole range.
 *
 * Bytes sent by one rank (the counters; exact formulas in ring.c and comm.c): each ring step
 * sends one slice, so an all-reduce sends about 2 (N-1)/N of the range, a
 * reduce-scatter or an all-gather about (N-1)/N; a broadcast counts its bytes on the
 * root only (MPI_Ibcast forwards them as it likes).
 *
 * Watchdog: every wait (blocking call, atoll_req_wait) gives up after the
 * communicator's timeout and ends the whole job with a message naming the operation,
 * its size, the communicator and the rank: never a silent hang.
 *
 * Fatal errors: atoll_comm_init installs the handler of the one fatal path
 * (core/fatal.h) that ends every rank (MPI_Abort); the watchdog, and misuse that no
 * caller can recover from (inconsistent counts, out of memory in a collective), end
 * the job through it. */
#ifndef ATOLL_COMM_H
#define ATOLL_COMM_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
  ATOLL_OP_ALLREDUCE,
  ATOLL_OP_REDUCE_SCATTER,
  ATOLL_OP_ALLGATHER,
  ATOLL_OP_BROADCAST,
  ATOLL_OP_EXCHANGE, /* point-to-point block exchanges (all-to-all, block all-gather) */
  ATOLL_OP_P2P,      /* pipeline messages between two ranks (atoll_isend) */
  ATOLL_OP_OTHER, /* small control messages: scalars, hashes, barrier */
  ATOLL_OP_COUNT
} atoll_op;

/* Name of an op for messages and JSON: "allreduce", "reduce_scatter", ... */
const char *atoll_op_name(atoll_op op);

typedef struct {
  uint64_t bytes_sent[ATOLL_OP_COUNT];
  uint64_t calls[ATOLL_OP_COUNT];
  double wait_seconds; /* time spent blocked in waits (not overlapped) */
} atoll_comm_stats;

/* atoll_comm, atoll_comm_init and atoll_comm_free are public (atoll/atoll.h): init starts
 * MPI (if not yet started) and returns the world communicator, named "world" (a world
 * of one without a launcher); free on the world also finalizes MPI if init started it.
 * Free sub-communicators first. */
/* Ends the whole job at once with exit status `code` (MPI_Abort; exit() without MPI). */
void atoll_comm_abort(atoll_comm *c, int code);

int atoll_comm_rank(const atoll_comm *c);
int atoll_comm_size(const atoll_comm *c);
int atoll_comm_world_rank(const atoll_comm *c);
const char *atoll_comm_name(const atoll_comm *c);
/* Seconds a wait may block before the watchdog ends the job (default 300). */
void atoll_comm_set_timeout(atoll_comm *c, double seconds);
/* Ring tuning (ring.c): the largest segment of a ring step, in floats (default 2^20,
 * at most 2^28), and the most segments in flight (default 2, at most 16); 0 keeps a
 * default. Collective over c: rank 0's values hold on every rank, since all ranks must
 * cut segments alike. Communicators split from c afterwards inherit them, so set the
 * world's before the mesh splits it. For experiments and tests (the CLI passes
 * ATOLL_COMM_SEGMENT and ATOLL_COMM_WINDOW from the test hooks). */
void atoll_comm_set_tuning(atoll_comm *c, size_t segment_floats, int window);
atoll_comm_stats atoll_comm_get_stats(const atoll_comm *c);
void atoll_comm_reset_stats(atoll_comm *c);
/* Counts one collective over c's ranks that another engine ran (NCCL on device
 * buffers: src/comm/nccl_coll.c), with the bytes this rank sent, so that reports
 * include it. */
void atoll_comm_count(atoll_comm *c, atoll_op op, uint64_t bytes);

/* Splits c into sub-communicators: ranks with the same color share one, ordered by
 * key (collective over c). A negative color joins none (*out = NULL). The mesh module
 * decides colors; nothing else should. */
int atoll_comm_split(atoll_comm *c, int color, int key, const char *name, atoll_comm **out,
                     atoll_err *err);
/* A communicator of the same ranks as c, whose operations never meet c's (collective
 * over c): for a second thread (DiLoCo's outer exchange in the background), which may
 * run collectives while the training thread runs its own on c. Its waits sleep rather
 * than spin, since they stand beside compute; the rest of c's settings carry over. */
int atoll_comm_dup_background(atoll_comm *c, const char *name, atoll_comm **out, atoll_err *err);
/* Whether MPI lets two threads call it at once (MPI_THREAD_MULTIPLE), which
 * atoll_comm_init asks for; a program that started MPI itself may not have it. */
int atoll_comm_threads_ok(void);

/* ----------------------------------------------------------- non-blocking --- */

typedef struct atoll_req atoll_req;

/* What a reducing ring puts on the wire (ring.c). fp32: the floats as they are.
 * bf16 (--grad-dtype bf16): every hop sends the sender's fp32 partial sum rounded to
 * bfloat16 (round to nearest even; NaN stays NaN), the receiver widens it and adds in
 * fp32; the rank that owns a slice rounds its final sum to bf16 in place, so the
 * all-gather half of an all-reduce carries those bf16 values exactly and every rank
 * ends with bit-identical, bf16-valued floats in its fp32 buffer; a reduce-scatter
 * leaves the same bf16-valued sum on its owner. Half the bytes of fp32 on the wire. */
typedef enum { ATOLL_WIRE_FP32, ATOLL_WIRE_BF16 } atoll_wire;

/* Each starts a ring over buf[0, count) and returns a request; counts/displs as above
 * (may be NULL for an even split; they are copied). */
atoll_req *atoll_iallreduce(atoll_comm *c, float *buf, size_t count, const size_t *counts);
atoll_req *atoll_ireduce_scatter(atoll_comm *c, float *buf, size_t count, const size_t *counts);
atoll_req *atoll_iallgather(atoll_comm *c, float *buf, size_t count, const size_t *counts);
/* The reducing rings with a chosen wire type (the ones above are ATOLL_WIRE_FP32). */
atoll_req *atoll_iallreduce_wire(atoll_comm *c, float *buf, size_t count, const size_t *counts,
                                 atoll_wire wire);
atoll_req *atoll_ireduce_scatter_wire(atoll_comm *c, float *buf, size_t count, const size_t *counts,
                                      atoll_wire wire);
/* Advances the request as far as it can without blocking; returns 1 when done (the
 * request is still freed by atoll_req_wait, which then returns at once). */
int atoll_req_test(atoll_req *r);
/* Blocks until done (watchdog applies), then frees the request. */
void atoll_req_wait(atoll_req *r);

/* --------------------------------------------------------------- blocking --- */

void atoll_allreduce(atoll_comm *c, float *buf, size_t count);
void atoll_reduce_scatter(atoll_comm *c, float *buf, size_t count, const size_t *counts);
void atoll_allgather(atoll_comm *c, float *buf, size_t count, const size_t *counts);
void atoll_broadcast(atoll_comm *c, void *buf, size_t bytes, int root);
void atoll_barrier(atoll_comm *c);
/* Every rank's `bytes` bytes gathered into out[size * bytes] in rank order. */
void atoll_allgather_bytes(atoll_comm *c, const void *mine, void *out, size_t bytes);
/* Sum of one double per rank, added in rank order (identical on every rank). */
double atoll_allreduce_sum_double(atoll_comm *c, double x);
/* Block exchanges sent point to point, so that the counters hold exactly what
 * crossed: each rank sends (size - 1) x block bytes. all-to-all: send block i of
 * `send` to rank i, receive rank i's block for me into block i of `recv`.
 * block all-gather: send the one block `mine` to every rank; recv block i = rank i's. */
void atoll_alltoall_bytes(atoll_comm *c, const void *send, void *recv, size_t block);
void atoll_allgather_blocks(atoll_comm *c, const void *mine, void *recv, size_t block);

/* ------------------------------------------------------- point to point --- */

/* Tags run over 0 .. ATOLL_TAG_RANGE - 1: 32767 is the least MPI_TAG_UB that MPI
 * allows, so every MPI library takes them. */
#define ATOLL_TAG_RANGE 32767

/* One message between two ranks (pipeline activations and their gradients), waited
 * on with atoll_req_test / atoll_req_wait (watchdog included). The caller picks the
 * tag in [0, ATOLL_TAG_RANGE) (others end the job: wrapping them silently would let
 * unrelated messages match); use a communicator that carries nothing else, since collectives
 * draw their tags from a counter these would collide with. Bytes count on the sender
 * (op "p2p"). At most 2 GiB per message. */
atoll_req *atoll_isend(atoll_comm *c, const void *buf, size_t bytes, int peer, int tag);
atoll_req *atoll_irecv(atoll_comm *c, void *buf, size_t bytes, int peer, int tag);

/* Gathers slice r of buf (counts as above) from every rank to root's buf. */
void atoll_gather_to_root(atoll_comm *c, float *buf, size_t count, const size_t *counts, int root);

/* Slice boundaries of a range: fills displs[size] from counts (or an even split of
 * count when counts is NULL, then also fills counts_out). */
void atoll_slices(size_t count, int size, const size_t *counts, size_t *counts_out,
                  size_t *displs_out);

#endif

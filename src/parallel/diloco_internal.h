/* DiLoCo's internals (diloco.h), shared by its two files: diloco.c (the schedule of
 * syncs and merges, the strategy entries) and diloco_exchange.c (the outer exchange of
 * one step, in the training thread or on a thread of its own). diloco.c calls into
 * diloco_exchange.c, not the other way. Not part of the library's API. */
#ifndef ATOLL_DILOCO_INTERNAL_H
#define ATOLL_DILOCO_INTERNAL_H

#include "parallel/diloco.h"

#include <pthread.h>
#include <stdatomic.h>

/* The communicators an exchange runs its collectives on: the mesh's own in the
 * training thread, or duplicates of them on the exchange thread, so that its
 * collectives never meet the training thread's (MPI orders collectives per
 * communicator, not per thread). */
typedef struct {
  atoll_comm *world, *cross, *dp, *tp, *tie;
} diloco_comms;

/* An exchange on its own thread (--overlap T > 0): the syncs of one step. The thread
 * owns delta, global, momentum, the scratch and the link until it is joined; the
 * training thread meanwhile reads and writes only the island's weights. */
typedef struct {
  pthread_t thread;
  int running;         /* started and not yet joined */
  int threaded;        /* on a thread (else it ran in place: pthread_create failed) */
  atomic_int joining;  /* the training thread waits for it (test hook overlap_proof) */
  atomic_int done;     /* the exchange has returned (--outer-mode async merges then) */
  int step;            /* the sync's step */
  int *frags, nfrags;  /* the fragments it syncs */
  int rc;              /* 0, -1 (err), 2 (the island joined instead) */
  atoll_err err;
  atoll_diloco_stats counted; /* on the thread; added to the object's at the join */
  diloco_comms comms;  /* the duplicates (made at create when T > 0) */
} diloco_job;

struct atoll_diloco {
  atoll_strategy base;
  atoll_diloco_config cfg;
  atoll_mesh *mesh;
  const atoll_layout *lay;
  float *params;        /* the weights the outer steps read and write: host memory */
  float *device_params; /* with a device: the model's own weights there, else NULL */
  size_t slice_begin, slice_end; /* this rank's slice of the flat buffer */
  float *global, *momentum;                  /* [slice_end - slice_begin] */
  size_t *frag_begin, *frag_end;             /* fragment ranges of the flat buffer */
  int *merge_due;                            /* per fragment: step of a pending merge, or 0 */
  int first_step;                            /* the step the run began at (--init-step 1: not 0) */
  int contributed_to;                        /* the last step counted in stats.contributed_steps */
  double *pending_wan, *pending_clock;       /* per fragment: modelled link time, compute clock at its sync */
  double compute_clock;                      /* inner compute seconds so far */
  atoll_diloco_stats stats;
  diloco_comms own;                          /* the mesh's communicators */
  diloco_job job;
  atomic_int steps_done;                     /* test hook overlap_proof: the training thread's step */
  int failed;                                /* a join outside after_step failed: err_late holds why */
  int ended;                                 /* an ATOLL_OUTER_* end: no exchange comes (end_err says why) */
  atoll_err end_err;
  atoll_err err_late;
  /* scratch */
  float *delta, *sum, *decoded;
  /* with a link: a contribution that came too late for its exchange (diloco_exchange.c,
   * "Late contributions"): its outer gradient on fragment f's range and its weight in
   * tokens, already discounted for staleness (0: none) */
  float *late;
  double *late_tokens;
  uint8_t *send, *recv;
  size_t *counts;
  uint64_t *hashes;          /* [islands] */
  size_t bad_at;             /* first non-finite outer gradient value this sync (flat index), or SIZE_MAX */
  int64_t *verdicts;         /* [world size][3]: every rank's view of the sync */
  float *tie_global, *tie_momentum; /* [wte] with an embedding tie */
  int jump_to;               /* with a link: the step this island joined at, for the loop */
  int joins, join_exchange;  /* joins so far, and the step of the exchange that ended in the last one */
  /* an island's phase in tokens or seconds (train/phase.h): the steps it skipped since
   * its last sync, and at the sync in flight (its outer gradient's tokens leave them out) */
  int phase_skipped, sync_skipped;
  /* --outer-mode async: the global weights at the sync of the exchange in flight (what an
   * evaluation meanwhile sees), and the buffer an evaluation's swap took (NULL: none) */
  float *snapshot, *swapped;
};

/* diloco_exchange.c. The syncs of step `step` for fragments frags[0, nfrags), whose
 * outer gradients (global - weights) are in d->delta: the mean over the islands, the
 * outer step on global and momentum, and the islands' agreement on the result; the
 * link's commit. Counts into *st. Returns 0, -1 (err), or 2: the island was behind and
 * adopted the committed global weights and momentum instead (the caller adopts them
 * into the weights: it may touch them, the exchange may not). */
int atoll_diloco_exchange(atoll_diloco *d, const diloco_comms *k, int step, const int *frags, int nfrags,
                          atoll_diloco_stats *st, atoll_err *err);
/* The same on the job's thread (d->job set up by the caller); join with
 * atoll_diloco_job_join, which returns the exchange's rc and fills err. */
void atoll_diloco_job_start(atoll_diloco *d);
int atoll_diloco_job_join(atoll_diloco *d, atoll_err *err);
/* This rank's range of fragment f: [*b, *e) of the flat buffer. */
void atoll_diloco_fragment_range(const atoll_diloco *d, int f, size_t *b, size_t *e);
/* The step offset of fragment f's syncs: it syncs after steps s with s mod H = offset. */
int atoll_diloco_fragment_offset(const atoll_diloco *d, int f);

#endif

/* Data parallel's device collectives on NCCL (comm/device_coll.h).
 *
 * STATUS: compiled only; NOT YET RUN on a GPU (no device was available when it was
 * written). tests/gpu/run_device.sh runs it at world size 1 (the device machine has
 * one GPU, and NCCL refuses two ranks on one GPU).
 *
 * One communicator per group from atoll_nccl_init (non-blocking), operations on the
 * legacy default stream, the stream every CUDA op of atoll's table uses, so a bucket's
 * all-reduce runs after the kernels that wrote its gradients. NCCL's ring gives every
 * member the same bits (its own summation order, not the CPU ring's). NCCL is loaded on
 * first use (src/comm/nccl_load.c), so the executable links it without paying for it. */
#define _POSIX_C_SOURCE 200809L

#include "comm/device_coll.h"
#include "comm/nccl.h"
#include "comm/nccl_load.h"
#include "core/fatal.h"

#include <stdio.h>
#include <stdlib.h>

#define NCCL_OP_TIMEOUT 600.0 /* seconds a queued operation may stay in progress */

typedef struct {
  atoll_device_coll base; /* first: the struct is cast both ways */
  ncclComm_t comm;
  atoll_comm *group_comm; /* the same ranks: the bytes are counted in its statistics */
  const char *group;
} nccl_coll;

static void check(nccl_coll *n, ncclResult_t r, const char *what) {
  atoll_err err = {{0}};
  /* a non-blocking communicator returns ncclInProgress while it enqueues */
  if (r != ncclSuccess && r != ncclInProgress) {
    atoll_fatal("nccl: %s on %s failed: %s", what, n->group, atoll_nccl()->GetErrorString(r));
  }
  if (atoll_nccl_wait(&n->comm, NCCL_OP_TIMEOUT, what, &err)) atoll_fatal("%s", err.msg);
}

static void nccl_allreduce(atoll_device_coll *d, float *buf, size_t count) {
  nccl_coll *n = (nccl_coll *)d;
  if (count == 0) return;
  check(n, atoll_nccl()->AllReduce(buf, buf, count, ncclFloat, ncclSum, n->comm, 0), "ncclAllReduce");
  /* what a ring all-reduce sends per rank, 2 (p - 1) / p of the buffer (the count the
   * host path's ring reports too); NCCL may pick a tree, which sends about as much */
  size_t p = (size_t)atoll_comm_size(n->group_comm);
  atoll_comm_count(n->group_comm, ATOLL_OP_ALLREDUCE, 2 * (p - 1) * count / p * sizeof(float));
}

/* Every queued all-reduce has been issued without error. Its results are ordered before
 * every kernel queued later on the same stream, and the host reads device memory only
 * through synchronous copies (to_host), so no stream synchronization is needed here. */
static void nccl_wait(atoll_device_coll *d) { check((nccl_coll *)d, ncclSuccess, "the queued collectives"); }

static void nccl_destroy(atoll_device_coll *d) {
  nccl_coll *n = (nccl_coll *)d;
  if (!n) return;
  atoll_err err = {{0}};
  if (n->comm && atoll_nccl_destroy(&n->comm, 60.0, &err)) fprintf(stderr, "atoll: warning: %s\n", err.msg);
  free(n);
}

int atoll_nccl_coll_open(atoll_comm *c, atoll_device_coll **out, atoll_err *err) {
  *out = NULL;
  nccl_coll *n = calloc(1, sizeof *n);
  if (!n) return atoll_fail(err, "out of memory");
  n->group_comm = c;
  n->group = atoll_comm_name(c);
  if (atoll_nccl_init(c, &n->comm, err)) {
    free(n);
    return -1;
  }
  n->base.name = "nccl";
  n->base.allreduce = nccl_allreduce;
  n->base.wait = nccl_wait;
  n->base.destroy = nccl_destroy;
  *out = &n->base;
  return 0;
}

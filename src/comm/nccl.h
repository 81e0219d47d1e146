/* NCCL communicators for the communication layer (src/comm/comm.h): the unique id is
 * made by rank 0 and sent to every rank over atoll's MPI communicator, then every rank
 * joins a non-blocking NCCL communicator and polls it until it is ready, with a
 * timeout that aborts it.
 *
 * STATUS: atoll_nccl_exchange_id is tested on CPU machines (tests/gpu/test_nccl_id.c,
 * 2 MPI ranks; ncclGetUniqueId needs no GPU). atoll_nccl_init, atoll_nccl_wait and
 * atoll_nccl_destroy compile but have NOT YET RUN: they need one GPU per rank
 * (NCCL refuses two ranks on one GPU). tests/gpu/run_device.sh runs them at world
 * size 1 on a device.
 *
 * Include as "comm/nccl.h"; this header includes NCCL's own <nccl.h>. */
#ifndef ATOLL_COMM_NCCL_H
#define ATOLL_COMM_NCCL_H

#include "atoll/atoll.h"
#include "comm/comm.h"

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds atoll_nccl_init waits for the communicator before it aborts it. */
#define ATOLL_NCCL_INIT_TIMEOUT 300.0

/* Collective over c: rank 0 calls ncclGetUniqueId and broadcasts the id
 * (NCCL_UNIQUE_ID_BYTES = 128 bytes) with atoll_broadcast; every rank returns with
 * rank 0's id in *id. If rank 0 cannot make an id, every rank returns -1 with rank 0's
 * NCCL error (the failure travels with the id, so no rank is left waiting). Needs no
 * GPU. */
int atoll_nccl_exchange_id(atoll_comm *c, ncclUniqueId *id, atoll_err *err);

/* Collective over c: exchanges an id, then every rank calls ncclCommInitRankConfig
 * (rank and size of c) with a non-blocking config and polls ncclCommGetAsyncError
 * until the communicator is ready. After ATOLL_NCCL_INIT_TIMEOUT seconds it calls
 * ncclCommAbort and fails with a message naming the rank, the size and the time waited.
 * The caller selects this rank's GPU (cudaSetDevice) first: one GPU per rank.
 * The communicator stays non-blocking: NCCL calls on it may return ncclInProgress,
 * and atoll_nccl_wait completes them. */
int atoll_nccl_init(atoll_comm *c, ncclComm_t *out, atoll_err *err);
/* The same with an explicit timeout in seconds. */
int atoll_nccl_init_timeout(atoll_comm *c, ncclComm_t *out, double timeout_s, atoll_err *err);

/* Polls ncclCommGetAsyncError until the communicator's pending NCCL calls have been
 * issued (ncclSuccess). On an error, or after timeout_s seconds, it aborts the
 * communicator (ncclCommAbort: *comm becomes NULL) and fails naming `what`. This waits
 * for NCCL to enqueue work on the stream, not for the stream: synchronize the stream
 * for the results. */
int atoll_nccl_wait(ncclComm_t *comm, double timeout_s, const char *what, atoll_err *err);

/* ncclCommFinalize (flushes pending work, waited for with atoll_nccl_wait) then
 * ncclCommDestroy. *comm becomes NULL. NULL is a no-op. */
int atoll_nccl_destroy(ncclComm_t *comm, double timeout_s, atoll_err *err);

/* Data parallel's device collectives over group c (comm/device_coll.h; src/comm/nccl_coll.c):
 * an NCCL communicator of c's ranks; collective over c. NOT YET RUN on a GPU. */
struct atoll_device_coll;
int atoll_nccl_coll_open(atoll_comm *c, struct atoll_device_coll **out, atoll_err *err);

#ifdef __cplusplus
}
#endif

#endif

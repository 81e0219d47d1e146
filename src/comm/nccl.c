/* NCCL communicators over atoll's MPI communicator (see comm/nccl.h).
 *
 * NCCL itself is loaded on first use (src/comm/nccl_load.c).
 *
 * STATUS: the id exchange runs in the CPU test suite; the communicator functions have
 * only been compiled (no GPU was available when they were written). */
#define _POSIX_C_SOURCE 200809L

#include "comm/nccl.h"
#include "comm/nccl_load.h"
#include "core/clock.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>


static void nap(void) {
  struct timespec ts = {0, 1000000}; /* 1 ms */
  nanosleep(&ts, NULL);
}

/* What rank 0 broadcasts: its ncclGetUniqueId status, then the id. */
typedef struct {
  int32_t status; /* ncclResult_t of ncclGetUniqueId on rank 0 */
  int32_t pad;
  ncclUniqueId id;
} id_message;

int atoll_nccl_exchange_id(atoll_comm *c, ncclUniqueId *id, atoll_err *err) {
  id_message msg;
  memset(&msg, 0, sizeof msg);
  /* every rank loads NCCL and still joins the broadcast, so a rank without it leaves
   * none of the others waiting */
  atoll_err load_err;
  int loaded = atoll_nccl_load(&load_err) == 0;
  if (atoll_comm_rank(c) == 0) msg.status = loaded ? (int32_t)atoll_nccl()->GetUniqueId(&msg.id) : -1;
  atoll_broadcast(c, &msg, sizeof msg, 0);
  if (!loaded) return atoll_fail(err, "%s", load_err.msg);
  if (msg.status == -1) return atoll_fail(err, "nccl: rank 0 of communicator %s could not load NCCL", atoll_comm_name(c));
  if (msg.status != (int32_t)ncclSuccess)
    return atoll_fail(err, "nccl: ncclGetUniqueId failed on rank 0 of communicator %s: %s",
                      atoll_comm_name(c), atoll_nccl()->GetErrorString((ncclResult_t)msg.status));
  *id = msg.id;
  return 0;
}

int atoll_nccl_wait(ncclComm_t *comm, double timeout_s, const char *what, atoll_err *err) {
  if (!comm || !*comm) return atoll_fail(err, "nccl: %s: no communicator", what);
  double t0 = atoll_seconds();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = atoll_nccl()->CommGetAsyncError(*comm, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return 0;
#if ATOLL_NCCL_NONBLOCKING
    if (state != ncclInProgress) {
#else
    {
#endif
      const char *last = atoll_nccl()->GetLastError(*comm);
      atoll_nccl()->CommAbort(*comm);
      *comm = NULL;
      return atoll_fail(err, "nccl: %s failed: %s%s%s", what, atoll_nccl()->GetErrorString(state),
                        last && *last ? ": " : "", last ? last : "");
    }
    double waited = atoll_seconds() - t0;
    if (waited > timeout_s) {
      atoll_nccl()->CommAbort(*comm);
      *comm = NULL;
      return atoll_fail(err, "nccl: %s still in progress after %.0f s: communicator aborted",
                        what, waited);
    }
    nap();
  }
}

int atoll_nccl_init_timeout(atoll_comm *c, ncclComm_t *out, double timeout_s, atoll_err *err) {
  *out = NULL;
  ncclUniqueId id;
  if (atoll_nccl_exchange_id(c, &id, err) != 0) return -1;
  int rank = atoll_comm_rank(c), size = atoll_comm_size(c);
  ncclComm_t comm = NULL;
#if ATOLL_NCCL_NONBLOCKING
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = atoll_nccl()->CommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    const char *last = atoll_nccl()->GetLastError(NULL);
    if (comm) atoll_nccl()->CommAbort(comm);
    return atoll_fail(err, "nccl: ncclCommInitRankConfig (rank %d of %d, communicator %s) failed: %s%s%s",
                      rank, size, atoll_comm_name(c), atoll_nccl()->GetErrorString(r),
                      last && *last ? ": " : "", last ? last : "");
  }
  char what[160];
  snprintf(what, sizeof what, "ncclCommInitRankConfig (rank %d of %d, communicator %s)", rank, size,
           atoll_comm_name(c));
  if (atoll_nccl_wait(&comm, timeout_s, what, err) != 0) return -1;
#else
  (void)timeout_s;
  ncclResult_t r = atoll_nccl()->CommInitRank(&comm, size, id, rank);
  if (r != ncclSuccess)
    return atoll_fail(err, "nccl: ncclCommInitRank (rank %d of %d, communicator %s) failed: %s",
                      rank, size, atoll_comm_name(c), atoll_nccl()->GetErrorString(r));
#endif
  *out = comm;
  return 0;
}

int atoll_nccl_init(atoll_comm *c, ncclComm_t *out, atoll_err *err) {
  return atoll_nccl_init_timeout(c, out, ATOLL_NCCL_INIT_TIMEOUT, err);
}

int atoll_nccl_destroy(ncclComm_t *comm, double timeout_s, atoll_err *err) {
  if (!comm || !*comm) return 0;
  ncclResult_t r = atoll_nccl()->CommFinalize(*comm);
#if ATOLL_NCCL_NONBLOCKING
  if (r == ncclInProgress) r = ncclSuccess;
#endif
  if (r != ncclSuccess) {
    atoll_nccl()->CommAbort(*comm);
    *comm = NULL;
    return atoll_fail(err, "nccl: ncclCommFinalize failed: %s", atoll_nccl()->GetErrorString(r));
  }
  if (atoll_nccl_wait(comm, timeout_s, "ncclCommFinalize", err) != 0) return -1;
  r = atoll_nccl()->CommDestroy(*comm);
  *comm = NULL;
  if (r != ncclSuccess)
    return atoll_fail(err, "nccl: ncclCommDestroy failed: %s", atoll_nccl()->GetErrorString(r));
  return 0;
}

/* NCCL's entry points, loaded on first use (src/comm/nccl_load.c). Call atoll_nccl_load
 * before atoll_nccl(); src/comm/nccl.c does, in atoll_nccl_exchange_id, the first NCCL
 * call of every path. */
#ifndef ATOLL_COMM_NCCL_LOAD_H
#define ATOLL_COMM_NCCL_LOAD_H

#include "atoll/atoll.h"

#include <nccl.h>

/* Non-blocking communicators (ncclConfig_t.blocking, ncclCommInitRankConfig,
 * ncclInProgress) exist from NCCL 2.14; older NCCL gets a blocking init. */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define ATOLL_NCCL_NONBLOCKING 1
#else
#define ATOLL_NCCL_NONBLOCKING 0
#endif

typedef struct {
  __typeof__(ncclGetUniqueId) *GetUniqueId;
  __typeof__(ncclCommInitRank) *CommInitRank;
#if ATOLL_NCCL_NONBLOCKING
  __typeof__(ncclCommInitRankConfig) *CommInitRankConfig;
#endif
  __typeof__(ncclCommGetAsyncError) *CommGetAsyncError;
  __typeof__(ncclGetErrorString) *GetErrorString;
  __typeof__(ncclGetLastError) *GetLastError;
  __typeof__(ncclCommAbort) *CommAbort;
  __typeof__(ncclCommFinalize) *CommFinalize;
  __typeof__(ncclCommDestroy) *CommDestroy;
  __typeof__(ncclAllReduce) *AllReduce;
} atoll_nccl_api;

/* dlopen libnccl.so.<major> once; fails with one line naming what is missing. */
int atoll_nccl_load(atoll_err *err);
const atoll_nccl_api *atoll_nccl(void);

#endif

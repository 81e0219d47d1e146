/* NCCL over atoll's MPI communicator (src/comm/nccl.c). An MPI program:
 *
 *   mpirun -np 2 test_nccl_id          the unique-id exchange (no GPU needed): rank 0's
 *                                      ncclGetUniqueId, broadcast with atoll_broadcast;
 *                                      every rank must hold the same 128 bytes as rank
 *                                      0 (checked by gathering every rank's id on every
 *                                      rank), the id must not be all zero, and a second
 *                                      exchange must give a new id.
 *   mpirun -np 1 test_nccl_id --init   the communicator (needs one GPU per rank):
 *                                      atoll_nccl_init (non-blocking config, polled),
 *                                      one ncclAllReduce through it, atoll_nccl_destroy.
 *                                      Exits 77 (skipped) without a GPU, or with fewer
 *                                      GPUs than ranks (NCCL refuses two ranks on one).
 *
 * STATUS: the exchange runs in the CPU test suite (ncclGetUniqueId works without a GPU:
 * it only picks a network interface and opens a socket). The --init mode has NOT YET
 * RUN: tests/gpu/run_device.sh runs it on a device. All ranks agree on the exit status. */
#include "atoll/atoll.h"
#include "comm/comm.h"
#include "comm/nccl.h"

#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);   \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      failures++;                                                           \
    }                                                                       \
  } while (0)

static void hex8(const ncclUniqueId *id, char *out) {
  for (int i = 0; i < 8; i++) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static int test_exchange(atoll_comm *world) {
  int rank = atoll_comm_rank(world), size = atoll_comm_size(world);
  atoll_err err;
  EXPECT(sizeof(ncclUniqueId) == 128, "ncclUniqueId is %zu bytes, not 128", sizeof(ncclUniqueId));
  ncclUniqueId id[2];
  for (int round = 0; round < 2; round++) {
    memset(&id[round], 0xa5, sizeof id[round]); /* anything but the right bytes */
    if (atoll_nccl_exchange_id(world, &id[round], &err) != 0) {
      EXPECT(0, "atoll_nccl_exchange_id: %s", err.msg);
      return 1;
    }
    /* every rank's copy, gathered on every rank: all equal to rank 0's */
    ncclUniqueId *all = malloc(sizeof(ncclUniqueId) * (size_t)size);
    atoll_allgather_bytes(world, &id[round], all, sizeof(ncclUniqueId));
    for (int r = 0; r < size; r++)
      EXPECT(memcmp(&all[r], &all[0], sizeof(ncclUniqueId)) == 0,
             "round %d: rank %d's id differs from rank 0's", round, r);
    free(all);
    int nonzero = 0;
    for (size_t i = 0; i < sizeof(ncclUniqueId); i++) nonzero |= id[round].internal[i] != 0;
    EXPECT(nonzero, "round %d: the id is all zero", round);
  }
  EXPECT(memcmp(&id[0], &id[1], sizeof(ncclUniqueId)) != 0, "two exchanges gave the same id");
  char h[17];
  hex8(&id[0], h);
  printf("rank %d of %d: id %s... (128 bytes) equal to rank 0's on every rank: %s\n", rank, size,
         h, failures ? "no" : "yes");
  return 0;
}

/* 0 pass, 1 fail, 77 skipped */
static int test_init(atoll_comm *world) {
  int rank = atoll_comm_rank(world), size = atoll_comm_size(world);
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev <= 0) {
    printf("rank %d: no CUDA device (%s): --init skipped\n", rank,
           ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    return 77;
  }
  if (ndev < size) {
    printf("rank %d: %d ranks but %d GPU(s); NCCL needs one GPU per rank: --init skipped\n", rank,
           size, ndev);
    return 77;
  }
  if (cudaSetDevice(rank) != cudaSuccess) {
    EXPECT(0, "cudaSetDevice(%d) failed", rank);
    return 1;
  }
  int version = 0;
  ncclGetVersion(&version);
  atoll_err err;
  ncclComm_t comm = NULL;
  if (atoll_nccl_init_timeout(world, &comm, 120.0, &err) != 0) {
    EXPECT(0, "atoll_nccl_init: %s", err.msg);
    return 1;
  }
  int nranks = -1, crank = -1;
  ncclCommCount(comm, &nranks);
  ncclCommUserRank(comm, &crank);
  EXPECT(nranks == size && crank == rank, "communicator has rank %d of %d, expected %d of %d",
         crank, nranks, rank, size);

  enum { n = 4096 };
  float host[n];
  for (int i = 0; i < n; i++) host[i] = (float)(rank + 1) + (float)i;
  float *dev = NULL;
  cudaStream_t stream;
  if (cudaMalloc((void **)&dev, sizeof host) != cudaSuccess ||
      cudaStreamCreate(&stream) != cudaSuccess) {
    EXPECT(0, "cudaMalloc or cudaStreamCreate failed");
    return 1;
  }
  cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
  ncclResult_t r = ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, comm, stream);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "ncclAllReduce: %s", ncclGetErrorString(r));
  if (atoll_nccl_wait(&comm, 120.0, "ncclAllReduce", &err) != 0) {
    EXPECT(0, "%s", err.msg);
    return 1;
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize failed");
  cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    float want = (float)(size * (size + 1) / 2) + (float)size * (float)i;
    if (host[i] != want) bad++;
  }
  EXPECT(bad == 0, "ncclAllReduce: %d of %d elements wrong", bad, n);
  if (atoll_nccl_destroy(&comm, 120.0, &err) != 0) EXPECT(0, "atoll_nccl_destroy: %s", err.msg);
  cudaFree(dev);
  cudaStreamDestroy(stream);
  printf("rank %d of %d: NCCL %d communicator (non-blocking init) and an all-reduce of %d floats: %s\n",
         rank, size, version, n, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  atoll_err err;
  atoll_comm *world = NULL;
  if (atoll_comm_init(&world, &argc, &argv, &err) != 0) {
    fprintf(stderr, "test_nccl_id: %s\n", err.msg);
    return 1;
  }
  atoll_comm_set_timeout(world, 60.0);
  int rank = atoll_comm_rank(world);
  int init_mode = argc > 1 && strcmp(argv[1], "--init") == 0;
  int rc = init_mode ? test_init(world) : test_exchange(world);
  /* one verdict for all: any failure fails everyone; skipped only if nobody failed */
  double fails = atoll_allreduce_sum_double(world, (rc == 1 || failures) ? 1.0 : 0.0);
  double skips = atoll_allreduce_sum_double(world, rc == 77 ? 1.0 : 0.0);
  atoll_comm_free(world);
  if (fails > 0) {
    if (rank == 0) fprintf(stderr, "test_nccl_id: FAILED on %.0f rank(s)\n", fails);
    return 1;
  }
  if (skips > 0) return 77;
  if (rank == 0) printf("test_nccl_id%s: passed\n", init_mode ? " --init" : "");
  return 0;
}

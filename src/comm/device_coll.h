/* Collectives on device memory, for data parallel whose model lives on a device
 * (--device cuda --dp-comm nccl). Without one, data parallel stages its collectives
 * through host memory (src/parallel/dp.c).
 *
 * Calls queue in stream order with the model's kernels: a gradient bucket is summed
 * after the backward ops that produced it and before any op queued later. A failure
 * ends the process with one line (atoll_fatal), like a collective of src/comm/comm.h
 * whose watchdog expires. */
#ifndef ATOLL_COMM_DEVICE_COLL_H
#define ATOLL_COMM_DEVICE_COLL_H

#include "atoll/atoll.h"
#include "comm/comm.h"

#include <stddef.h>

typedef struct atoll_device_coll atoll_device_coll;
struct atoll_device_coll {
  const char *name;
  /* buf[0, n) (device memory) becomes the sum over the group, in place; the same bits
   * on every member */
  void (*allreduce)(atoll_device_coll *d, float *buf, size_t n);
  /* everything queued is done (errors surface here at the latest) */
  void (*wait)(atoll_device_coll *d);
  void (*destroy)(atoll_device_coll *d);
};

/* Makes the collectives of group c (collective over c; each rank's device selected
 * already). The NCCL build provides one (src/comm/nccl_coll.c) and the atoll
 * executable registers it (atoll_device_set_nccl, src/train/device.h). */
typedef int (*atoll_device_coll_opener)(atoll_comm *c, atoll_device_coll **out, atoll_err *err);

#endif

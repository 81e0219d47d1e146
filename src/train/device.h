/* --device: the kernel table, and with it the memory, a run's model lives in
 * (src/ops/ops.h). cpu: host memory, the CPU kernels (bf16 ones with --precision bf16);
 * cuda: one GPU (src/ops/cuda/, when atoll was built with CUDA); shadow: the CPU
 * kernels behind device addresses the host may not touch, a test of the device path
 * on any machine (src/ops/ops_shadow.c). */
#ifndef ATOLL_TRAIN_DEVICE_H
#define ATOLL_TRAIN_DEVICE_H

#include "atoll/atoll.h"
#include "comm/device_coll.h"
#include "ops/device_select.h" /* the kernel table: atoll_device_select */
#include "ops/ops.h"

/* The table for --device and --precision, checked against what the device path runs
 * so far (data parallel with ZeRO 0 or 1, its collectives staged through host memory;
 * DiLoCo islands, their outer steps on a host copy of the weights; no tensor/pipeline
 * parallelism; no Llama on CUDA; --dp-comm checked here
 * too, before anything is allocated). A process uses GPU number = its local rank on the
 * machine modulo the GPUs it sees (one visible GPU: that one). desc: a line for the run's header ("" for cpu). */
int atoll_device_open(const atoll_config *c, const atoll_ops **out, char *desc, size_t desc_len, atoll_err *err);
/* Everything atoll_device_open refuses without opening a device (settings the device
 * path does not run, a build without CUDA): checked before the default corpus is
 * prepared, so a run refused for these writes nothing. (A missing GPU shows only when
 * the run opens it.) */
int atoll_device_check(const atoll_config *c, atoll_err *err);

/* The NCCL build's collectives (atoll_nccl_coll_open), registered like the CUDA opener. */
void atoll_device_set_nccl(atoll_device_coll_opener open);
/* --dp-comm: NULL in *out for "host" (data parallel stages through host memory); for
 * "nccl" the group's device collectives (atoll_device_open checked the settings).
 * Collective over dp_comm. */
int atoll_device_open_coll(const atoll_config *c, atoll_comm *dp_comm, atoll_device_coll **out, atoll_err *err);

/* The datasheet's dense peak of a GPU named in desc (atoll_cuda_device_name's line) at
 * the precision of the matrix products, in TFLOP/s; 0 when the GPU is not in the table. */
double atoll_device_peak_tflops(const char *desc, int bf16);

#endif

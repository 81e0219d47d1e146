/* The CUDA backend of the kernel seam (src/ops/ops.h): an atoll_ops table whose
 * kernels take DEVICE pointers (from its alloc, i.e. cudaMalloc) and follow exactly
 * the semantics of the CPU table (src/ops/ops_cpu.c): same layouts, same
 * accumulate-versus-overwrite contract, fp32 throughout.
 *
 * STATUS: compiled only. None of this has run on a GPU yet (the session that wrote it
 * had no device); tests/gpu/test_cuda_ops.c compares every op against the CPU table
 * and is ready to run with tests/gpu/run_device.sh. docs/gpu.md lists what is verified
 * and what is not.
 *
 * Usage rules:
 *  - One host thread drives the backend. It keeps process-wide state in statics that
 *    are created on first use and never freed: the cuBLAS handle, the matmul
 *    precision, and a few scratch buffers that grow as needed (reductions, attention
 *    backward). Select the device (cudaSetDevice) before the first call.
 *  - Every op is queued on the legacy default stream (stream 0), cuBLAS included, so
 *    ops run in call order and host code sees their results after
 *    atoll_cuda_synchronize() or a copy to the host.
 *  - Every CUDA and cuBLAS call is checked: a failure ends the process through the one
 *    fatal path (atoll_fatal, core/fatal.h) with one line naming the call, the
 *    file:line and the CUDA/cuBLAS error (under MPI, comm's handler ends the job).
 *    Ops have no error return in the seam, and a CUDA error usually leaves the context
 *    unusable anyway. Kernel errors are asynchronous: atoll_ops_cuda(1) synchronizes
 *    after every kernel so that a failing kernel is named.
 *  - Reductions are deterministic (no floating-point atomics): the same inputs give
 *    bit-identical outputs on every run. */
#ifndef ATOLL_OPS_CUDA_H
#define ATOLL_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ops/ops.h"

/* The table (kernels in src/ops/cuda/, one file per family). sync_each_op: 1 to
 * synchronize after every kernel (the test hooks' cuda_sync, ATOLL_CUDA_SYNC), 0 not
 * to; a process-wide setting, the last call's holds. */
const atoll_ops *atoll_ops_cuda(int sync_each_op);

/* --device cuda (src/ops/device_select.h, atoll_cuda_opener; registered by src/cli/main.c):
 * selects GPU `ordinal` (cudaSetDevice) and starts its context, sets the matmul precision
 * (bf16: ATOLL_CUDA_MATMUL_BF16, else FP32), writes the GPU in words into desc and returns
 * atoll_ops_cuda(s) with s from atoll_cuda_open_set_sync. Without a driver or device, or
 * with the ordinal out of range, it returns NULL with one line in why (never exits).
 * Not yet run on a GPU. */
const atoll_ops *atoll_cuda_open(int ordinal, int bf16, char *desc, size_t desc_len, char *why, size_t why_len);
/* What atoll_cuda_open passes to atoll_ops_cuda: 1 synchronises after every kernel. The
 * CLI sets it from the test hook ATOLL_CUDA_SYNC (src/core/hooks.h; library code reads
 * no environment). Default 0. */
void atoll_cuda_open_set_sync(int sync_each_op);

/* Number of usable CUDA devices; 0 when there is no device or no driver (never exits). */
int atoll_cuda_device_count(void);
/* One line describing device `dev` ("NVIDIA H200, sm_90, 132 SMs, 139.8 GiB") into buf. */
void atoll_cuda_device_name(int dev, char *buf, size_t len);

/* Host <-> device copies (cudaMemcpy, synchronous; exit on failure like every call). */
void atoll_cuda_copy_to_device(void *dst_device, const void *src_host, size_t bytes);
void atoll_cuda_copy_to_host(void *dst_host, const void *src_device, size_t bytes);
/* Device-to-device copy on the default stream (asynchronous with respect to the host). */
void atoll_cuda_copy_device(void *dst_device, const void *src_device, size_t bytes);
/* Waits for every queued op; exits with a message if one of them failed. */
void atoll_cuda_synchronize(void);

/* Precision of the matrix products of the table (matmul_forward/backward). The
 * buffers stay fp32 in every mode; only cuBLAS's internal compute changes:
 *   FP32  plain fp32 (CUBLAS_COMPUTE_32F); the default, and the mode the tests
 *         compare against the CPU at 1e-4.
 *   TF32  CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores with 10-bit mantissa inputs.
 *   BF16  CUBLAS_COMPUTE_32F_FAST_16BF: cuBLAS rounds the fp32 inputs to bf16 and
 *         accumulates in fp32 on tensor cores (fp32 storage, bf16 arithmetic).
 * Not thread-safe; set it between ops. */
typedef enum {
  ATOLL_CUDA_MATMUL_FP32 = 0,
  ATOLL_CUDA_MATMUL_TF32 = 1,
  ATOLL_CUDA_MATMUL_BF16 = 2
} atoll_cuda_matmul_precision;
void atoll_cuda_set_matmul_precision(atoll_cuda_matmul_precision p);
atoll_cuda_matmul_precision atoll_cuda_get_matmul_precision(void);

/* bf16 storage (the building blocks of mixed precision; not used by the table yet).
 * bf16 buffers are device arrays of uint16_t (the top half of an fp32, round to
 * nearest even). */
void atoll_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void atoll_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
/* out[N,OC] (=|+=) x[N,C] @ w[OC,C]^T (+ bias[OC], fp32, may be NULL) with x and w in
 * bf16, out in fp32, accumulated in fp32 (cublasGemmEx, CUDA_R_16BF inputs,
 * CUBLAS_COMPUTE_32F). Same layout as matmul_forward. */
void atoll_cuda_matmul_forward_bf16(float *out, const uint16_t *x, const uint16_t *w,
                                    const float *bias, int N, int C, int OC, int accumulate);

#ifdef __cplusplus
}
#endif

#endif

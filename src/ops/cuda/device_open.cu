/* The CUDA build's opener for --device cuda (src/ops/device_select.h: atoll_cuda_opener),
 * registered by the atoll executable (src/cli/main.c). NOT YET RUN ON A GPU: on a
 * machine without a driver or device it returns NULL with the reason (checked by
 * tests/cli/test_bad_input.sh); the rest waits for tests/gpu/run_device.sh. */
#include "ops/cuda/common.cuh"

#include <stdio.h>

static int open_sync; /* atoll_cuda_open_set_sync: the test hook ATOLL_CUDA_SYNC */

extern "C" void atoll_cuda_open_set_sync(int sync_each_op) { open_sync = sync_each_op != 0; }

/* A failed query is an answer here, not a fatal error: clear it and say why. */
static const atoll_ops *refuse(char *why, size_t why_len, const char *what, cudaError_t e) {
  (void)cudaGetLastError();
  snprintf(why, why_len, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return NULL;
}

extern "C" const atoll_ops *atoll_cuda_open(int ordinal, int bf16, char *desc, size_t desc_len, char *why,
                                            size_t why_len) {
  if (desc_len) desc[0] = '\0';
  if (why_len) why[0] = '\0';
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return refuse(why, why_len, "no CUDA device: cudaGetDeviceCount failed", e);
  if (count <= 0) {
    snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount found none");
    return NULL;
  }
  if (ordinal < 0) {
    snprintf(why, why_len, "GPU %d does not exist", ordinal);
    return NULL;
  }
  /* the caller's number is the process's local rank: with one GPU visible per process
   * (Slurm --gpus-per-task, CUDA_VISIBLE_DEVICES set per rank) every rank takes its only
   * GPU; with all of a node's GPUs visible, rank r takes GPU r (r mod count) */
  ordinal %= count;
  if ((e = cudaSetDevice(ordinal)) != cudaSuccess) return refuse(why, why_len, "cannot select the GPU: cudaSetDevice failed", e);
  /* create the context now, so that a device that cannot be used (busy, out of
   * memory) is refused here in one line and not by the first allocation's fatal path */
  if ((e = cudaFree(0)) != cudaSuccess) return refuse(why, why_len, "cannot use the GPU: creating its context failed", e);
  /* cuBLAS now, so that a machine without it is refused here rather than at the first
   * matrix product */
  if (atoll_cuda_cublas_load(why, why_len)) return NULL;
  atoll_cuda_device_name(ordinal, desc, desc_len);
  atoll_cuda_set_matmul_precision(bf16 ? ATOLL_CUDA_MATMUL_BF16 : ATOLL_CUDA_MATMUL_FP32);
  return atoll_ops_cuda(open_sync);
}

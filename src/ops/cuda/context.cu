/* The CUDA backend's process state and plumbing: error checks, the
 * synchronise-after-every-kernel setting, the cuBLAS handle, the matmul precision,
 * scratch buffers, device memory, copies and device queries (see common.cuh). */
#include "ops/cuda/common.cuh"

#include <stdio.h>

/* ------------------------------------------------------------ error checks --- */

extern "C" void atoll_cuda_fail(cudaError_t e, const char *what, const char *file, int line) {
  atoll_fatal("cuda: %s failed at %s:%d: %s (%s)", what, file, line, cudaGetErrorString(e),
              cudaGetErrorName(e));
}

extern "C" void atoll_cuda_fail_cublas(cublasStatus_t s, const char *what, const char *file,
                                       int line) {
  atoll_fatal("cuda: %s failed at %s:%d: cuBLAS status %d (%s)", what, file, line, (int)s,
              atoll_cuda_cublas_api()->status_string(s));
}

/* ------------------------------------------------------------- process state --- */

static int sync_each_op; /* atoll_ops_cuda's argument (the test hooks' cuda_sync) */
static cublasHandle_t cublas_handle; /* created on first use, never destroyed */
static atoll_cuda_matmul_precision matmul_precision = ATOLL_CUDA_MATMUL_FP32;
static void *scratch_ptr[ATOLL_CUDA_SCRATCH_SLOTS];
static size_t scratch_cap[ATOLL_CUDA_SCRATCH_SLOTS];

extern "C" void atoll_cuda_set_sync(int on) { sync_each_op = on != 0; }

extern "C" void atoll_cuda_launched(const char *kernel, const char *file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) atoll_cuda_fail(e, kernel, file, line);
  if (sync_each_op) {
    e = cudaDeviceSynchronize();
    if (e != cudaSuccess) atoll_cuda_fail(e, kernel, file, line);
  }
}

extern "C" cublasHandle_t atoll_cuda_cublas(void) {
  if (!cublas_handle) {
    const atoll_cublas_api *cublas = atoll_cuda_cublas_api();
    CUBLAS_CHECK(cublas->create(&cublas_handle));
    CUBLAS_CHECK(cublas->set_stream(cublas_handle, 0));
    /* no TF32 unless asked for through the compute type */
    CUBLAS_CHECK(cublas->set_math_mode(cublas_handle, CUBLAS_DEFAULT_MATH));
  }
  return cublas_handle;
}

extern "C" void *atoll_cuda_scratch(int slot, size_t bytes) {
  if (bytes > scratch_cap[slot]) {
    if (scratch_ptr[slot]) CUDA_CHECK(cudaFree(scratch_ptr[slot]));
    size_t cap = bytes < 4096 ? 4096 : bytes + bytes / 4;
    CUDA_CHECK(cudaMalloc(&scratch_ptr[slot], cap));
    scratch_cap[slot] = cap;
  }
  return scratch_ptr[slot];
}

extern "C" void atoll_cuda_set_matmul_precision(atoll_cuda_matmul_precision p) {
  matmul_precision = p;
}

extern "C" atoll_cuda_matmul_precision atoll_cuda_get_matmul_precision(void) {
  return matmul_precision;
}

/* ------------------------------------------------------------- memory, misc --- */

extern "C" void *atoll_cuda_alloc(size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 1;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

extern "C" void atoll_cuda_free(void *p) {
  if (p) CUDA_CHECK(cudaFree(p));
}

extern "C" int atoll_cuda_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* clear: no device or no driver is an answer, not a failure */
    return 0;
  }
  return n;
}

extern "C" void atoll_cuda_device_name(int dev, char *buf, size_t len) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(buf, len, "device %d: %s", dev, cudaGetErrorString(e));
    return;
  }
  snprintf(buf, len, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
           p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
}

extern "C" void atoll_cuda_copy_to_device(void *dst_device, const void *src_host, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst_device, src_host, bytes, cudaMemcpyHostToDevice));
}

extern "C" void atoll_cuda_copy_to_host(void *dst_host, const void *src_device, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst_host, src_device, bytes, cudaMemcpyDeviceToHost));
}

extern "C" void atoll_cuda_copy_device(void *dst_device, const void *src_device, size_t bytes) {
  if (bytes)
    CUDA_CHECK(cudaMemcpyAsync(dst_device, src_device, bytes, cudaMemcpyDeviceToDevice, 0));
}

extern "C" void atoll_cuda_synchronize(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

extern "C" void atoll_cuda_zero(void *dst, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, 0));
}

/* --device's kernel table (src/ops/device_select.c): "cpu", "cuda" or "shadow", for a
 * model of a given shape. Training (src/train/device.h) adds the checks of a run's
 * layout; sampling (src/infer/sample.c) uses this alone. */
#ifndef ATOLL_OPS_DEVICE_SELECT_H
#define ATOLL_OPS_DEVICE_SELECT_H

#include "atoll/atoll.h"
#include "ops/ops.h"

#include <stddef.h>

/* The CUDA build's opener (src/ops/cuda/device_open.cu): selects GPU `ordinal`, sets the
 * matmul precision (bf16: bf16 products with fp32 accumulation), and returns its table,
 * or NULL with one line in why (no driver, no device, ordinal out of range). desc: the
 * GPU in words. */
typedef const atoll_ops *(*atoll_cuda_opener)(int ordinal, int bf16, char *desc, size_t desc_len, char *why,
                                              size_t why_len);
/* The atoll executable registers the opener when it was built with CUDA (src/cli/main.c);
 * without it --device cuda is refused with "built without CUDA". */
void atoll_device_set_cuda(atoll_cuda_opener open);

/* What can be refused without opening the device: an unknown name, a build without
 * it, what its kernels do not cover (no CUDA kernels for --arch llama yet, nor for heads
 * over 256 wide). bf16: bf16 matrix products. */
int atoll_device_check_kernels(const char *device, int bf16, const atoll_shape *shape, atoll_err *err);

/* The table for device "cpu", "cuda" or "shadow" (bf16: bf16 matrix products) and the
 * model's shape, checked as atoll_device_check_kernels does; ordinal: which GPU; desc:
 * the device in words, "" for cpu. */
int atoll_device_select(const char *device, int bf16, const atoll_shape *shape, int ordinal, const atoll_ops **out,
                        char *desc, size_t desc_len, atoll_err *err);

#endif

/* --device's kernel table (src/ops/device_select.h). */
#include "ops/device_select.h"

#include <stdio.h>
#include <string.h>

static atoll_cuda_opener cuda_opener;

void atoll_device_set_cuda(atoll_cuda_opener open) { cuda_opener = open; }

/* For every "no CUDA here" refusal: a resumed run takes the device its checkpoint
 * recorded, so the user may never have typed --device. */
#define CPU_HINT "; --device cpu trains on the CPU (a resumed run keeps its checkpoint's --device unless given)"

int atoll_device_check_kernels(const char *device, int bf16, const atoll_shape *shape, atoll_err *err) {
  if (strcmp(device, "cpu") == 0) return 0;
  if (strcmp(device, "shadow") == 0)
    return bf16 ? atoll_fail(err, "--device shadow: a test device of the fp32 CPU kernels (--precision fp32)") : 0;
  if (strcmp(device, "cuda") != 0)
    return atoll_fail(err, "--device: unknown '%s' (known: cpu, cuda; shadow, a test device)", device);
  if (!cuda_opener)
    return atoll_fail(err, "--device cuda: this atoll was built without CUDA (nvcc was not found at build time; "
                      "docs/gpu.md)" CPU_HINT);
  if (strcmp(shape->arch, "llama") == 0)
    return atoll_fail(err, "--device cuda: --arch llama needs CUDA kernels for RMSNorm, RoPE, SwiGLU and grouped-query "
                      "attention, not written yet (gpt2 runs)");
  /* the attention kernels keep a head's row in registers (src/ops/cuda/attention.cu) */
  if (shape->heads > 0 && shape->dim / shape->heads > 256)
    return atoll_fail(err, "--device cuda: attention runs head sizes up to 256 on CUDA; this model's is %d (dim %d / heads %d)",
                      shape->dim / shape->heads, shape->dim, shape->heads);
  return 0;
}

int atoll_device_select(const char *device, int bf16, const atoll_shape *shape, int ordinal, const atoll_ops **out,
                        char *desc, size_t desc_len, atoll_err *err) {
  *out = NULL;
  desc[0] = '\0';
  if (atoll_device_check_kernels(device, bf16, shape, err)) return -1;
  if (strcmp(device, "cpu") == 0) {
    *out = bf16 ? atoll_ops_cpu_bf16() : atoll_ops_cpu();
    return 0;
  }
  if (strcmp(device, "shadow") == 0) {
    *out = atoll_ops_shadow();
    snprintf(desc, desc_len, "shadow (the CPU's fp32 kernels behind addresses the host may not touch; a test device)");
    return 0;
  }
  char why[256] = "";
  *out = cuda_opener(ordinal, bf16, desc, desc_len, why, sizeof why);
  if (!*out) return atoll_fail(err, "--device cuda: %s" CPU_HINT, why);
  return 0;
}

/* --device (src/train/device.h). */
#include "train/device.h"

#include <stdio.h>
#include <string.h>

static atoll_cuda_opener cuda_opener;

void atoll_device_set_cuda(atoll_cuda_opener open) { cuda_opener = open; }

/* What the device path does not run yet; refused before anything is allocated. */
static int check_layout(const atoll_config *c, int world_size, atoll_err *err) {
  const char *d = c->device;
  if (world_size > 1)
    return atoll_fail(err, "--device %s: runs on one process so far (this job has %d ranks; NCCL for the "
                      "strategies is not built yet)", d, world_size);
  if (c->tp > 1 || c->pp > 1) return atoll_fail(err, "--device %s: --tp and --pp run on the CPU only so far", d);
  if (c->islands > 1 || c->join[0]) return atoll_fail(err, "--device %s: DiLoCo islands run on the CPU only so far", d);
  if (c->zero_stage > 0) return atoll_fail(err, "--device %s: --zero runs on the CPU only so far", d);
  return 0;
}

int atoll_device_select(const char *device, int bf16, const char *arch, const atoll_ops **out, char *desc,
                        size_t desc_len, atoll_err *err) {
  *out = NULL;
  desc[0] = '\0';
  if (strcmp(device, "cpu") == 0) {
    *out = bf16 ? atoll_ops_cpu_bf16() : atoll_ops_cpu();
    return 0;
  }
  if (strcmp(device, "shadow") == 0) {
    if (bf16) return atoll_fail(err, "--device shadow: a test device of the fp32 CPU kernels (--precision fp32)");
    *out = atoll_ops_shadow();
    snprintf(desc, desc_len, "shadow (the CPU's fp32 kernels behind addresses the host may not touch; a test device)");
    return 0;
  }
  if (strcmp(device, "cuda") != 0) return atoll_fail(err, "--device: unknown '%s' (known: cpu, cuda)", device);
  if (!cuda_opener)
    return atoll_fail(err, "--device cuda: this atoll was built without CUDA (nvcc was not found at build time; "
                      "docs/gpu.md)");
  if (strcmp(arch, "llama") == 0)
    return atoll_fail(err, "--device cuda: --arch llama needs CUDA kernels for RMSNorm, RoPE, SwiGLU and grouped-query "
                      "attention, not written yet (gpt2 runs)");
  char why[256] = "";
  *out = cuda_opener(0, bf16, desc, desc_len, why, sizeof why);
  if (!*out) return atoll_fail(err, "--device cuda: %s", why);
  return 0;
}

int atoll_device_open(const atoll_config *c, int world_size, const atoll_ops **out, char *desc, size_t desc_len,
                      atoll_err *err) {
  *out = NULL;
  desc[0] = '\0';
  if (strcmp(c->device, "cpu") != 0 && check_layout(c, world_size, err)) return -1;
  return atoll_device_select(c->device, strcmp(c->precision, "bf16") == 0, c->model.arch, out, desc, desc_len, err);
}

/* --device for a run (src/train/device.h); the kernel table itself: src/ops/device_select.c. */
#include "train/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_device_coll_opener nccl_opener;

void atoll_device_set_nccl(atoll_device_coll_opener open) { nccl_opener = open; }

/* What the device path does not run yet; refused before anything is allocated. */
static int check_layout(const atoll_config *c, atoll_err *err) {
  const char *d = c->device.type;
  if (c->parallel.tp > 1 || c->parallel.pp > 1) return atoll_fail(err, "--device %s: --tp and --pp run on the CPU only so far", d);
  if (c->parallel.zero_stage > 1)
    return atoll_fail(err, "--device %s: --zero %d hands memory pages back, which runs on the CPU only (0 and 1 run)", d,
                      c->parallel.zero_stage);
  return 0;
}

static int check_dp_comm(const atoll_config *c, atoll_err *err) {
  if (strcmp(c->parallel.dp_comm, "host") == 0) return 0;
  if (strcmp(c->device.type, "cuda") != 0)
    return atoll_fail(err, "--dp-comm nccl: needs --device cuda (this run's device is %s)", c->device.type);
  if (c->parallel.zero_stage != 0)
    return atoll_fail(err, "--dp-comm nccl: runs ZeRO stage 0 only so far (--zero %d)", c->parallel.zero_stage);
  if (strcmp(c->parallel.grad_dtype, "fp32") != 0) return atoll_fail(err, "--dp-comm nccl: sends fp32 gradients (--grad-dtype fp32)");
  if (!nccl_opener)
    return atoll_fail(err, "--dp-comm nccl: this atoll was built without NCCL (docs/gpu.md); --dp-comm host sums on "
                      "the host (a resumed run keeps its checkpoint's --dp-comm unless given)");
  return 0;
}

/* This process's index among the job's processes on its machine (one GPU each), from the
 * launcher's environment (Open MPI, MPICH/Hydra, Slurm); 0 without one. */
static int local_rank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}

int atoll_device_check(const atoll_config *c, atoll_err *err) {
  /* the device first: its refusal is the one to fix first */
  if (atoll_device_check_kernels(c->device.type, strcmp(c->device.precision, "bf16") == 0, &c->model, err)) return -1;
  return (strcmp(c->device.type, "cpu") != 0 && check_layout(c, err)) || check_dp_comm(c, err) ? -1 : 0;
}

int atoll_device_open(const atoll_config *c, const atoll_ops **out, char *desc, size_t desc_len, atoll_err *err) {
  *out = NULL;
  desc[0] = '\0';
  if (atoll_device_check(c, err)) return -1;
  return atoll_device_select(c->device.type, strcmp(c->device.precision, "bf16") == 0, &c->model, local_rank(), out, desc,
                             desc_len, err);
}

int atoll_device_open_coll(const atoll_config *c, atoll_comm *dp_comm, atoll_device_coll **out, atoll_err *err) {
  *out = NULL;
  if (strcmp(c->parallel.dp_comm, "host") == 0) return 0;
  if (check_dp_comm(c, err)) return -1;
  return nccl_opener(dp_comm, out, err);
}

/* Dense peaks from the vendors' datasheets, in TFLOP/s: bf16 on tensor cores, and fp32
 * on CUDA cores (cuBLAS's CUBLAS_COMPUTE_32F, the fp32 mode, uses no tensor cores).
 * SXM parts unless the name says PCIe. First match wins, so longer names come first. */
static const struct {
  const char *name;
  double bf16, fp32;
} PEAKS[] = {
    {"H100 PCIe", 756.0, 51.2}, {"H100 NVL", 835.5, 60.0}, {"H200 NVL", 835.5, 60.0},
    {"H800 PCIe", 756.0, 51.2}, {"H100", 989.4, 66.9},     {"H200", 989.4, 66.9}, /* GH200 too */
    {"H800", 989.4, 66.9},      {"B200", 2250.0, 80.0},    {"A100", 312.0, 19.5}, {"L40S", 362.1, 91.6},
};

double atoll_device_peak_tflops(const char *desc, int bf16) {
  for (size_t i = 0; i < sizeof PEAKS / sizeof *PEAKS; i++)
    if (strstr(desc, PEAKS[i].name)) return bf16 ? PEAKS[i].bf16 : PEAKS[i].fp32;
  return 0.0;
}

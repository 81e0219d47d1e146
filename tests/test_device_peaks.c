/* The GPU peak table behind MFU (src/train/device.c): names as atoll_cuda_device_name
 * writes them, at both precisions; PCIe and NVL parts before SXM; unknown devices give 0. */
#include "check.h"
#include "train/device.h"

int main(void) {
  CHECK(atoll_device_peak_tflops("NVIDIA H200, sm_90, 132 SMs, 139.8 GiB", 1) == 989.4);
  CHECK(atoll_device_peak_tflops("NVIDIA H200, sm_90, 132 SMs, 139.8 GiB", 0) == 66.9);
  CHECK(atoll_device_peak_tflops("NVIDIA H100 80GB HBM3, sm_90", 1) == 989.4);
  CHECK(atoll_device_peak_tflops("NVIDIA H100 PCIe, sm_90", 1) == 756.0);
  CHECK(atoll_device_peak_tflops("NVIDIA A100-SXM4-80GB, sm_80", 0) == 19.5);
  CHECK(atoll_device_peak_tflops("NVIDIA H100 NVL, sm_90", 1) == 835.5); /* not the SXM part's */
  CHECK(atoll_device_peak_tflops("NVIDIA H200 NVL, sm_90", 0) == 60.0);
  CHECK(atoll_device_peak_tflops("NVIDIA H800 PCIe, sm_90", 1) == 756.0);
  CHECK(atoll_device_peak_tflops("NVIDIA GH200 480GB", 1) == 989.4);
  CHECK(atoll_device_peak_tflops("NVIDIA GeForce RTX 4090", 1) == 0.0);
  CHECK(atoll_device_peak_tflops("", 0) == 0.0);
  CHECK_DONE();
}

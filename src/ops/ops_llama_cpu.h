/* CPU kernels of the Llama block (src/ops/ops_llama_cpu.c), entries of the CPU ops table
 * (src/ops/ops_cpu.c); their contracts are the table's fields in src/ops/ops.h. */
#ifndef ATOLL_OPS_LLAMA_CPU_H
#define ATOLL_OPS_LLAMA_CPU_H

#include <stddef.h>
#include <stdint.h>

void atoll_llama_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
void atoll_llama_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C,
                                      float eps);
void atoll_llama_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                                  const float *rstd, int N, int C);
void atoll_llama_rope(float *x, int B, int T, int H, int hs, const double *freq, int pos0, int inverse);
void atoll_llama_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void atoll_llama_swiglu_forward_bf16(uint16_t *out, const float *gate, const float *up, size_t n);
void atoll_llama_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                 size_t n);
void atoll_llama_swiglu_backward_bf16(uint16_t *dgate, uint16_t *dup, const float *dout, const float *gate,
                                      const float *up, size_t n);

#endif

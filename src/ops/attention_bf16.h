/* Causal multi-head attention with bf16 matrix products and an fp32 softmax: the
 * attention kernels of the bf16 ops table (contract: attention_forward/backward in
 * src/ops/ops.h). Needs atoll_gemm_bf16_check (src/ops/gemm_cpu.h) to have succeeded. */
#ifndef ATOLL_OPS_ATTENTION_BF16_H
#define ATOLL_OPS_ATTENTION_BF16_H

void atoll_attention_bf16_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void atoll_attention_bf16_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH);

#endif

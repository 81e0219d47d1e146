/* Causal attention with bf16 products for `--precision bf16` (src/ops/attention_bf16.c).
 * Same contract as the ops table's attention_forward / attention_backward (ops.h):
 * qkv [B,T,3C], out [B,T,C], lse [B,NH,T] (each row's log-sum-exp of its scaled
 * scores), dqkv written whole. Every product (Q K^T, P V, dO V^T, dS K, dS^T Q,
 * P^T dO) takes bf16 inputs (round to nearest even) and sums in fp32; the softmax, the
 * log-sum-exp and dS = P (dP - D) stay fp32. Results are deterministic and do not
 * depend on the thread count (one thread computes each (batch, head) pair).
 *
 * Needs AMX-BF16 (usable: the OS saves tile data and granted this process the
 * permission; src/ops/cpu_features.h): check atoll_attention_bf16_available first. */
#ifndef ATOLL_OPS_ATTENTION_BF16_H
#define ATOLL_OPS_ATTENTION_BF16_H

/* 1 when this processor has usable AMX-BF16 (and this build the kernels), else 0. */
int atoll_attention_bf16_available(void);

void atoll_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void atoll_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH);

/* Grouped-query attention (Llama) with the same bf16 products; the contract of the ops
 * table's gqa_forward / gqa_backward (ops.h): forward takes Tk >= T keys. */
void atoll_gqa_forward_bf16(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                            int Tk, int NH, int NKV, int hs);
void atoll_gqa_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int hs);

#endif

/* Causal attention in fp32 on the CPU (src/ops/attention_cpu.c): one kernel family for
 * GPT-2's multi-head attention and Llama's grouped-query attention, entries of the CPU
 * ops table (src/ops/ops_cpu.c); their contracts are the table's fields in src/ops/ops.h. */
#ifndef ATOLL_ATTENTION_CPU_H
#define ATOLL_ATTENTION_CPU_H

#include <stddef.h>

/* GPT-2: qkv [B,T,3C] (q | k | v), out and dout [B,T,C], lse [B,NH,T] */
void atoll_attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void atoll_attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *lse, int B, int T, int C, int NH);

/* Grouped-query: q and out [B,T,NH*hs], k and v [B,Tk,NKV*hs]; forward takes Tk >= T
 * keys (the last T are the rows' own), backward Tk = T */
void atoll_gqa_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                           int Tk, int NH, int NKV, int hs);
void atoll_gqa_backward_cpu(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int hs);

/* Attention scratch, shared with the bf16 kernels (attention_bf16.c): per_thread floats
 * for each of *threads threads, fewer threads when memory is short; fatal when even one
 * thread's cannot be had (the ops interface has no error path). */
float *atoll_att_scratch(size_t per_thread, int *threads);

#endif

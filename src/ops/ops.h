/* The kernel seam: every operation of the model as a plain function over flat float
 * buffers. The model code calls kernels only through an atoll_ops table, so a CUDA
 * backend can provide its own table (and device buffers) next to the CPU one without
 * touching src/model/.
 *
 * Conventions: N = rows (B*T), C = channels; matrices are row-major; weights are
 * [out, in] like torch.nn.Linear. Backward kernels ADD into parameter gradients
 * (so micro-batches accumulate) and, where noted, into input gradients. */
#ifndef ATOLL_OPS_H
#define ATOLL_OPS_H

#include <stddef.h>
#include <stdint.h>

/* One AdamW step over a span of one tensor (src/optim/adamw.c computes these; the CPU
 * kernel is src/ops/optim_cpu.c). */
typedef struct {
  float lr, decay_factor; /* decay_factor: 1 - lr * weight_decay, or 1 for tensors without decay */
  float beta1, beta2, bc1, bc2_sqrt, eps;
  float grad_scale; /* gradient clipping: gradients are multiplied by it */
} atoll_adamw_span;

typedef struct atoll_ops {
  const char *name;
  /* 0: buffers from alloc are host memory the caller may read and write; 1: device
   * memory, touched only through the ops below (host code never dereferences it). */
  int device;
  void *(*alloc)(size_t bytes); /* zeroed */
  void (*free)(void *p);

  /* Memory of this backend: host <-> buffer copies (synchronous: on return the host
   * data may be reused or read), copies between buffers and zeroing (queued in op
   * order). */
  void (*to_device)(void *dst, const void *src_host, size_t bytes);
  void (*to_host)(void *dst_host, const void *src, size_t bytes);
  void (*copy)(void *dst, const void *src, size_t bytes);
  void (*zero)(void *dst, size_t bytes);

  /* The optimizer's kernels, over buffers of this backend. sumsq: sum of g[i]^2 over
   * [0, n) in double (the CPU adds fixed parts in order: the same bits at any thread
   * count); adamw: one AdamW step of p, m, v over [0, n); sgd: p = p * decay - step * g. */
  double (*sumsq)(const float *g, size_t n);
  void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, const atoll_adamw_span *a);
  void (*sgd)(float *p, const float *g, size_t n, float decay, float step);

  /* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] (wpe NULL: no position term; llama).
   * tok lives in this backend's memory like every other buffer. */
  void (*embed_forward)(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                        int T, int C);
  /* dwte[tok] += dout, dwpe[t] += dout (dwpe may be NULL) */
  void (*embed_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                         int T, int C);

  /* out = (x - mean) * rstd * w + b per row; saves mean and rstd [N] */
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *x, const float *w,
                            const float *b, int N, int C);
  /* dx += ..., dw += ..., db += ... */
  void (*layernorm_backward)(float *dx, float *dw, float *db, const float *dout, const float *x,
                             const float *w, const float *mean, const float *rstd, int N, int C);

  /* out[N,OC] (=|+=) x[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL). */
  void (*matmul_forward)(float *out, const float *x, const float *w, const float *bias, int N,
                         int C, int OC, int accumulate);
  /* dx[N,C] (=|+= by accumulate_dx) dout @ w; dw += dout^T @ x; dbias += sum_rows(dout). */
  void (*matmul_backward)(float *dx, float *dw, float *dbias, const float *dout, const float *x,
                          const float *w, int N, int C, int OC, int accumulate_dx);

  /* Products on bf16 inputs kept by the caller: the bf16 CPU table has them, every other
   * table leaves them NULL. A producer writes its output rounded to bf16 once (round to
   * nearest even), and the product's forward and backward both read that copy instead of
   * rounding x and w at every call: the same bits as matmul_forward/backward of the bf16
   * table on the fp32 values. x [N,C] and w [OC,C] hold bf16 bits; dout is fp32. */
  void (*round_bf16)(uint16_t *dst, const float *src, size_t n);
  void (*layernorm_forward_bf16)(uint16_t *out, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int N, int C);
  void (*gelu_forward_bf16)(uint16_t *out, const float *x, size_t n);
  void (*rmsnorm_forward_bf16)(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
  void (*swiglu_forward_bf16)(uint16_t *out, const float *gate, const float *up, size_t n);
  void (*matmul_forward_bf16)(float *out, const uint16_t *x, const uint16_t *w, const float *bias, int N, int C,
                              int OC, int accumulate);
  void (*matmul_backward_bf16)(float *dx, float *dw, float *dbias, const float *dout, const uint16_t *x,
                               const uint16_t *w, int N, int C, int OC, int accumulate_dx);
  /* GELU's backward [N,C] written as the next product's rounded dout, with that product's
   * bias gradient (dbias +=) summed in the same pass; swiglu_backward's dgate and dup
   * written rounded as the gate and up products' douts (no biases); and the backward
   * of a product on such a rounded dout */
  void (*gelu_backward_bf16)(uint16_t *dx, float *dbias, const float *x, const float *dout, int N, int C);
  /* xent_backward's dlogits [N,V] written rounded as the LM head's dout (logits kept) */
  void (*xent_backward_bf16)(uint16_t *dlogits, const float *logits, const float *lse, const int32_t *targets,
                             float dloss, int N, int V);
  void (*swiglu_backward_bf16)(uint16_t *dgate, uint16_t *dup, const float *dout, const float *gate,
                               const float *up, size_t n);
  void (*matmul_backward_rounded)(float *dx, float *dw, const uint16_t *dout, const uint16_t *x, const uint16_t *w,
                                  int N, int C, int OC, int accumulate_dx);

  /* Causal multi-head attention from qkv [B,T,3C] (q | k | v, heads of size C/NH).
   * out [B,T,C]; lse [B,NH,T] is the softmax log-normaliser saved for backward. */
  void (*attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
  /* dqkv [B,T,3C] is overwritten. */
  void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int T, int C, int NH);

  /* tanh-approximated GELU */
  void (*gelu_forward)(float *out, const float *x, size_t n);
  void (*gelu_backward)(float *dx, const float *x, const float *dout, size_t n); /* dx = */

  /* Softmax cross-entropy over logits [N,V]: losses[n] and lse[n]. */
  void (*xent_forward)(float *losses, float *lse, const float *logits, const int32_t *targets,
                       int N, int V);
  /* logits are overwritten by dlogits = dloss * (softmax - onehot(target)). */
  void (*xent_backward)(float *logits, const float *lse, const int32_t *targets, float dloss,
                        int N, int V);

  /* --arch llama (src/ops/ops_llama_cpu.c) */
  /* out = x * rstd * w per row, rstd = 1 / sqrt(mean(x^2) + eps); saves rstd [N] */
  void (*rmsnorm_forward)(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
  /* dx += ..., dw += ... */
  void (*rmsnorm_backward)(float *dx, float *dw, const float *dout, const float *x, const float *w,
                           const float *rstd, int N, int C);
  /* Rotary embedding in place on x [B,T,H*hs] at positions pos0 .. pos0+T-1 (Hugging Face's
   * half split: pairs (i, i + hs/2) of each head; pair i turns by pos freq[i], freq a host
   * table of hs/2 from atoll_shape_rope_freqs: theta^(-2i/hs), or scaled). inverse = 1
   * rotates back: the backward pass on a gradient. */
  void (*rope)(float *x, int B, int T, int H, int hs, const double *freq, int pos0, int inverse);
  /* out = silu(gate) * up */
  void (*swiglu_forward)(float *out, const float *gate, const float *up, size_t n);
  /* dgate, dup = (overwritten); dgate may be dout itself */
  void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                          size_t n);
  /* Causal attention with grouped key/value heads: q [B,T,NH*hs], k and v [B,Tk,NKV*hs]
   * (Tk >= T keys; query row t sits at position Tk - T + t); query head h reads key/value
   * head h / (NH/NKV). out [B,T,NH*hs]; lse [B,NH,T] saved for backward. */
  void (*gqa_forward)(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                      int Tk, int NH, int NKV, int hs);
  /* Backward with Tk = T: dq, dk, dv are overwritten. */
  void (*gqa_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                       const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int hs);
} atoll_ops;

const atoll_ops *atoll_ops_cpu(void);
/* The CPU kernels behind "device" buffers the host may not touch: alloc returns
 * addresses that fault when dereferenced, and every op translates them back. A test
 * backend: a run on it that matches the CPU bit for bit shows that no host code reads
 * or writes device memory (--device shadow; what --device cuda relies on). */
const atoll_ops *atoll_ops_shadow(void);
/* The same kernels with bf16 matrix products (fp32 accumulation and outputs); check
 * atoll_gemm_bf16_check (src/ops/gemm_cpu.h) before using it. */
const atoll_ops *atoll_ops_cpu_bf16(void);

#endif

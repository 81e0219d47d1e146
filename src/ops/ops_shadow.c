/* The shadow device: the CPU kernels behind buffers that host code may not touch.
 *
 * Why: a GPU run keeps its weights, gradients, optimizer state and activations in device
 * memory, and any host code that reads or writes them directly is a bug that only a
 * GPU would show. This table makes such a bug fail here, on any CPU: alloc returns the
 * address of a host allocation moved by SHIFT, which is not a canonical x86-64 (or
 * AArch64) address, so dereferencing it faults at once. Pointer arithmetic on it still
 * works (offsets into the flat buffers), and every op moves its pointers back before
 * calling the CPU kernel. A run on this table (--device shadow) must match a CPU run bit
 * for bit: tests/test_device_shadow.sh. */
#include "ops/ops.h"

#include <stdint.h>

#define SHIFT ((uintptr_t)1 << 62)

static const atoll_ops *cpu(void) { return atoll_ops_cpu(); }

/* Device address -> host address (NULL stays NULL: optional buffers). */
#define H(p) ((p) ? (void *)((uintptr_t)(p) - SHIFT) : NULL)

static void *shadow_alloc(size_t bytes) {
  void *p = cpu()->alloc(bytes);
  return p ? (void *)((uintptr_t)p + SHIFT) : NULL;
}

static void shadow_free(void *p) { cpu()->free(H(p)); }
static void to_device(void *dst, const void *src, size_t bytes) { cpu()->copy(H(dst), src, bytes); }
static void to_host(void *dst, const void *src, size_t bytes) { cpu()->copy(dst, H(src), bytes); }
static void copy(void *dst, const void *src, size_t bytes) { cpu()->copy(H(dst), H(src), bytes); }
static void zero(void *dst, size_t bytes) { cpu()->zero(H(dst), bytes); }
static double sumsq(const float *g, size_t n) { return cpu()->sumsq(H(g), n); }

static void adamw(float *p, const float *g, float *m, float *v, size_t n, const atoll_adamw_span *a) {
  cpu()->adamw(H(p), H(g), H(m), H(v), n, a);
}

static void sgd(float *p, const float *g, size_t n, float decay, float step) { cpu()->sgd(H(p), H(g), n, decay, step); }

static void embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C) {
  cpu()->embed_forward(H(out), H(tok), H(wte), H(wpe), B, T, C);
}

static void embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C) {
  cpu()->embed_backward(H(dwte), H(dwpe), H(dout), H(tok), B, T, C);
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                              int N, int C) {
  cpu()->layernorm_forward(H(out), H(mean), H(rstd), H(x), H(w), H(b), N, C);
}

static void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                               const float *mean, const float *rstd, int N, int C) {
  cpu()->layernorm_backward(H(dx), H(dw), H(db), H(dout), H(x), H(w), H(mean), H(rstd), N, C);
}

static void matmul_forward(float *out, const float *x, const float *w, const float *bias, int N, int C, int OC,
                           int accumulate) {
  cpu()->matmul_forward(H(out), H(x), H(w), H(bias), N, C, OC, accumulate);
}

static void matmul_backward(float *dx, float *dw, float *dbias, const float *dout, const float *x, const float *w,
                            int N, int C, int OC, int accumulate_dx) {
  cpu()->matmul_backward(H(dx), H(dw), H(dbias), H(dout), H(x), H(w), N, C, OC, accumulate_dx);
}

static void attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  cpu()->attention_forward(H(out), H(lse), H(qkv), B, T, C, NH);
}

static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                               int B, int T, int C, int NH) {
  cpu()->attention_backward(H(dqkv), H(dout), H(qkv), H(out), H(lse), B, T, C, NH);
}

static void gelu_forward(float *out, const float *x, size_t n) { cpu()->gelu_forward(H(out), H(x), n); }

static void gelu_backward(float *dx, const float *x, const float *dout, size_t n) {
  cpu()->gelu_backward(H(dx), H(x), H(dout), n);
}

static void xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets, int N, int V) {
  cpu()->xent_forward(H(losses), H(lse), H(logits), H(targets), N, V);
}

static void xent_backward(float *logits, const float *lse, const int32_t *targets, float dloss, int N, int V) {
  cpu()->xent_backward(H(logits), H(lse), H(targets), dloss, N, V);
}

static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
  cpu()->rmsnorm_forward(H(out), H(rstd), H(x), H(w), N, C, eps);
}

static void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                             const float *rstd, int N, int C) {
  cpu()->rmsnorm_backward(H(dx), H(dw), H(dout), H(x), H(w), H(rstd), N, C);
}

static void rope(float *x, int B, int T, int NH, int hs, const double *freq, int pos0, int inverse) {
  cpu()->rope(H(x), B, T, NH, hs, freq, pos0, inverse);
}

static void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
  cpu()->swiglu_forward(H(out), H(gate), H(up), n);
}

static void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
  cpu()->swiglu_backward(H(dgate), H(dup), H(dout), H(gate), H(up), n);
}

static void gqa_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int Tk,
                        int NH, int NKV, int hs) {
  cpu()->gqa_forward(H(out), H(lse), H(q), H(k), H(v), B, T, Tk, NH, NKV, hs);
}

static void gqa_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                         const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int hs) {
  cpu()->gqa_backward(H(dq), H(dk), H(dv), H(dout), H(q), H(k), H(v), H(out), H(lse), B, T, NH, NKV, hs);
}

static const atoll_ops shadow_ops = {
    .name = "shadow",
    .device = 1,
    .alloc = shadow_alloc,
    .free = shadow_free,
    .to_device = to_device,
    .to_host = to_host,
    .copy = copy,
    .zero = zero,
    .sumsq = sumsq,
    .adamw = adamw,
    .sgd = sgd,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .xent_forward = xent_forward,
    .xent_backward = xent_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .rope = rope,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .gqa_forward = gqa_forward,
    .gqa_backward = gqa_backward,
};

const atoll_ops *atoll_ops_shadow(void) { return &shadow_ops; }

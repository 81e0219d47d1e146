/* The CPU table's elementwise and normalisation kernels (src/ops/ops_cpu_elem.c): entries
 * of the CPU ops table (src/ops/ops_cpu.c), whose contracts are the table's fields in
 * src/ops/ops.h; and how both files split a reduction over rows among threads. */
#ifndef ATOLL_OPS_CPU_ELEM_H
#define ATOLL_OPS_CPU_ELEM_H

#include <omp.h>
#include <stddef.h>
#include <stdint.h>

/* Channels per task when threads split a reduction over rows by channel. */
#define CHUNK 64

/* Channels per task of a column sum that also rounds every element: a span of up to
 * WIDE_CHUNK channels read row after row (long contiguous runs the prefetcher follows;
 * 64-channel chunks read 256 bytes per row and were bound by memory latency), about
 * one span per thread. Each channel's sum still runs over the rows in order, so the
 * bits do not depend on the span (bf16_convert_colsum in ops_cpu.c,
 * atoll_gelu_backward_bf16_cpu). */
#define WIDE_CHUNK 1024
static inline int wide_chunk(int cols) {
  int nt = omp_get_max_threads(), ch = (cols + nt - 1) / nt;
  ch = (ch + 15) / 16 * 16;
  return ch > WIDE_CHUNK ? WIDE_CHUNK : ch < 16 ? 16 : ch;
}

/* The kernels (contracts: the fields of the same names in ops.h) */
void atoll_embed_forward_cpu(float *out, const int32_t *tok, const float *wte, const float *wpe,
                             int B, int T, int C);
void atoll_embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                              int T, int C);
void atoll_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int N, int C);
void atoll_layernorm_forward_bf16_cpu(uint16_t *out, float *mean, float *rstd, const float *x, const float *w,
                                      const float *b, int N, int C);
void atoll_layernorm_backward_cpu(float *dx, float *dw, float *db, const float *dout, const float *x,
                                  const float *w, const float *mean, const float *rstd, int N,
                                  int C);
void atoll_gelu_forward_cpu(float *out, const float *x, size_t n);
void atoll_gelu_forward_bf16_cpu(uint16_t *out, const float *x, size_t n);
void atoll_round_bf16_cpu(uint16_t *dst, const float *src, size_t n);
void atoll_gelu_backward_cpu(float *dx, const float *x, const float *dout, size_t n);
void atoll_gelu_backward_bf16_cpu(uint16_t *dx, float *dbias, const float *x, const float *dout, int N, int C);
void atoll_xent_forward_cpu(float *losses, float *lse, const float *logits, const int32_t *targets,
                            int N, int V);
void atoll_xent_backward_cpu(float *logits, const float *lse, const int32_t *targets, float dloss,
                             int N, int V);
void atoll_xent_backward_bf16_cpu(uint16_t *dlogits, const float *logits, const float *lse, const int32_t *targets,
                                  float dloss, int N, int V);

#endif

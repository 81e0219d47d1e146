/* Causal attention with bf16 matrix products (fp32 accumulation) and an fp32 softmax,
 * for the bf16 ops table (atoll_ops_cpu_bf16). Same contract as the fp32 kernels in
 * ops_cpu.c (src/ops/ops.h): out and the log-sum-exp forward, dqkv overwritten backward.
 *
 * The fp32 kernels spread heads over threads and run small products on each; the bf16
 * engine (oneDNN's matmul on AMX tiles) is fastest on large products called from one
 * thread, so here every (batch, head) pair of a group runs in one batched product: Q, K,
 * V are first copied to bf16, dense per head [B*NH, T, hs], then the scores of a group
 * of heads are a full T x T square (the masked upper triangle is computed and then
 * zeroed: twice the products of a causal-only schedule, still faster than fp32 at these
 * sizes). Groups are sized so the square scratch stays near GROUP_ELEMS floats. */
#include "ops/attention_bf16.h"

#include "core/fatal.h"
#include "ops/exp_approx.h"
#include "ops/gemm_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_ELEMS ((size_t)1 << 21)

/* bf16 scratch slots of gemm_cpu.h used here (0-4 belong to the matmuls) */
enum { SLOT_Q = 5, SLOT_K = 6, SLOT_V = 7 };

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) atoll_fatal("bf16 attention: out of memory for %zu bytes of scratch", bytes);
  return p;
}

/* Heads of x [B,T,ld] (head h at column off + h*hs) into bf16 [B*NH, T, hs]. */
static void split_heads(uint16_t *dst, const float *x, int ld, int off, int B, int T, int NH, int hs) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *row = x + ((size_t)b * T + t) * ld + off;
      for (int h = 0; h < NH; h++) {
        uint16_t *o = dst + (((size_t)b * NH + h) * T + t) * hs;
        const float *in = row + (size_t)h * hs;
#pragma omp simd
        for (int c = 0; c < hs; c++) o[c] = atoll_bf16_from_f32(in[c]);
      }
    }
}

/* Heads [nbh, T, hs] of pairs bh0 .. bh0+nbh-1 back into x [B,T,ld] at column off. */
static void merge_heads(float *x, int ld, int off, const float *src, int bh0, int nbh, int T, int NH, int hs) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int q = 0; q < nbh; q++)
    for (int t = 0; t < T; t++) {
      int b = (bh0 + q) / NH, h = (bh0 + q) % NH;
      memcpy(x + ((size_t)b * T + t) * ld + off + (size_t)h * hs, src + ((size_t)q * T + t) * hs,
             sizeof(float) * (size_t)hs);
    }
}

static int group_size(int BH, int T) {
  size_t g = GROUP_ELEMS / ((size_t)T * T);
  if (g < 1) g = 1;
  return g > (size_t)BH ? BH : (int)g;
}

void atoll_attention_bf16_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH, BH = B * NH, G = group_size(BH, T);
  size_t TT = (size_t)T * T, Ths = (size_t)T * hs;
  float scale = 1.0f / sqrtf((float)hs);
  uint16_t *q = atoll_bf16_scratch(SLOT_Q, (size_t)BH * Ths), *k = atoll_bf16_scratch(SLOT_K, (size_t)BH * Ths);
  uint16_t *v = atoll_bf16_scratch(SLOT_V, (size_t)BH * Ths);
  split_heads(q, qkv, 3 * C, 0, B, T, NH, hs);
  split_heads(k, qkv, 3 * C, C, B, T, NH, hs);
  split_heads(v, qkv, 3 * C, 2 * C, B, T, NH, hs);
  float *S = xmalloc(sizeof(float) * G * TT), *O = xmalloc(sizeof(float) * G * Ths);
  uint16_t *P = xmalloc(sizeof(uint16_t) * G * TT);
  for (int bh0 = 0; bh0 < BH; bh0 += G) {
    int n = BH - bh0 < G ? BH - bh0 : G;
    /* S = scale Q K^T */
    atoll_gemm_bf16_batch(n, 0, 1, T, T, hs, scale, q + bh0 * Ths, hs, (long long)Ths, k + bh0 * Ths, hs,
                          (long long)Ths, 0.0f, S, T, (long long)TT, NULL);
    /* softmax over the keys each row may see, in fp32; P in bf16, zero beyond */
#pragma omp parallel for collapse(2) schedule(static)
    for (int g = 0; g < n; g++)
      for (int i = 0; i < T; i++) {
        float *row = S + g * TT + (size_t)i * T;
        uint16_t *p = P + g * TT + (size_t)i * T;
        int cnt = i + 1;
        float mx = -INFINITY;
        for (int j = 0; j < cnt; j++) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < cnt; j++) {
          row[j] = exp_approx(row[j] - mx);
          sum += row[j];
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j < cnt; j++) p[j] = atoll_bf16_from_f32(row[j] * inv);
        for (int j = cnt; j < T; j++) p[j] = 0;
        lse[(size_t)(bh0 + g) * T + i] = mx + logf(sum);
      }
    /* O = P V */
    atoll_gemm_bf16_batch(n, 0, 0, T, hs, T, 1.0f, P, T, (long long)TT, v + bh0 * Ths, hs, (long long)Ths, 0.0f, O,
                          hs, (long long)Ths, NULL);
    merge_heads(out, C, 0, O, bh0, n, T, NH, hs);
  }
  free(S);
  free(O);
  free(P);
}

void atoll_attention_bf16_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH) {
  (void)out; /* D comes from the products below */
  int hs = C / NH, BH = B * NH, G = group_size(BH, T);
  size_t TT = (size_t)T * T, Ths = (size_t)T * hs;
  float scale = 1.0f / sqrtf((float)hs);
  uint16_t *q = atoll_bf16_scratch(SLOT_Q, (size_t)BH * Ths), *k = atoll_bf16_scratch(SLOT_K, (size_t)BH * Ths);
  uint16_t *v = atoll_bf16_scratch(SLOT_V, (size_t)BH * Ths);
  uint16_t *dO = xmalloc(sizeof(uint16_t) * (size_t)BH * Ths);
  split_heads(q, qkv, 3 * C, 0, B, T, NH, hs);
  split_heads(k, qkv, 3 * C, C, B, T, NH, hs);
  split_heads(v, qkv, 3 * C, 2 * C, B, T, NH, hs);
  split_heads(dO, dout, C, 0, B, T, NH, hs);
  float *S = xmalloc(sizeof(float) * G * TT), *dP = xmalloc(sizeof(float) * G * TT);
  uint16_t *P = xmalloc(sizeof(uint16_t) * G * TT), *dS = xmalloc(sizeof(uint16_t) * G * TT);
  float *dQ = xmalloc(sizeof(float) * G * Ths), *dK = xmalloc(sizeof(float) * G * Ths);
  float *dV = xmalloc(sizeof(float) * G * Ths);
  for (int bh0 = 0; bh0 < BH; bh0 += G) {
    int n = BH - bh0 < G ? BH - bh0 : G;
    const uint16_t *qg = q + bh0 * Ths, *kg = k + bh0 * Ths, *vg = v + bh0 * Ths, *dOg = dO + bh0 * Ths;
    /* S = scale Q K^T (P recomputed from it and lse), dP = dO V^T */
    atoll_gemm_bf16_batch(n, 0, 1, T, T, hs, scale, qg, hs, (long long)Ths, kg, hs, (long long)Ths, 0.0f, S, T,
                          (long long)TT, NULL);
    atoll_gemm_bf16_batch(n, 0, 1, T, T, hs, 1.0f, dOg, hs, (long long)Ths, vg, hs, (long long)Ths, 0.0f, dP, T,
                          (long long)TT, NULL);
    /* P = exp(S - lse); D = sum_j P dP, the softmax backward's row term, taken from the
       same products (not from out . dout in fp32): then every row of dS sums to zero
       as it should (the scores' shift invariance), which bf16 inputs would otherwise
       spoil. dS = P (dP - D) scale; P and dS to bf16, zero beyond the diagonal. */
#pragma omp parallel for collapse(2) schedule(static)
    for (int g = 0; g < n; g++)
      for (int i = 0; i < T; i++) {
        float *s = S + g * TT + (size_t)i * T;
        const float *dp = dP + g * TT + (size_t)i * T;
        uint16_t *p = P + g * TT + (size_t)i * T, *ds = dS + g * TT + (size_t)i * T;
        float l = lse[(size_t)(bh0 + g) * T + i], d = 0.0f;
        int cnt = i + 1;
#pragma omp simd reduction(+ : d)
        for (int j = 0; j < cnt; j++) {
          s[j] = exp_approx(s[j] - l);
          d += s[j] * dp[j];
        }
#pragma omp simd
        for (int j = 0; j < cnt; j++) {
          p[j] = atoll_bf16_from_f32(s[j]);
          ds[j] = atoll_bf16_from_f32(s[j] * (dp[j] - d) * scale);
        }
        for (int j = cnt; j < T; j++) p[j] = 0, ds[j] = 0;
      }
    /* dQ = dS K;  dK = dS^T Q;  dV = P^T dO */
    atoll_gemm_bf16_batch(n, 0, 0, T, hs, T, 1.0f, dS, T, (long long)TT, kg, hs, (long long)Ths, 0.0f, dQ, hs,
                          (long long)Ths, NULL);
    atoll_gemm_bf16_batch(n, 1, 0, T, hs, T, 1.0f, dS, T, (long long)TT, qg, hs, (long long)Ths, 0.0f, dK, hs,
                          (long long)Ths, NULL);
    atoll_gemm_bf16_batch(n, 1, 0, T, hs, T, 1.0f, P, T, (long long)TT, dOg, hs, (long long)Ths, 0.0f, dV, hs,
                          (long long)Ths, NULL);
    merge_heads(dqkv, 3 * C, 0, dQ, bh0, n, T, NH, hs);
    merge_heads(dqkv, 3 * C, C, dK, bh0, n, T, NH, hs);
    merge_heads(dqkv, 3 * C, 2 * C, dV, bh0, n, T, NH, hs);
  }
  free(dO);
  free(S);
  free(dP);
  free(P);
  free(dS);
  free(dQ);
  free(dK);
  free(dV);
}

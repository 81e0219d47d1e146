/* Causal attention in fp32 (src/ops/attention_cpu.h): one kernel for GPT-2's multi-head
 * attention and Llama's grouped-query attention, multi-head being the case of groups of
 * one query head per key/value head, read in place from GPT-2's packed qkv rows.
 *
 * Query rows go in blocks of ATT_BLOCK. Each block's scores against the keys it may see
 * are a small product (atoll_gemm_f32) into per-thread scratch, softmaxed in place, then
 * multiplied by V. Only each row's log-sum-exp is kept for backward, so memory is O(T)
 * per head instead of an O(T^2) attention matrix per layer; backward recomputes the
 * probabilities block by block. Blocking also skips most of the masked upper triangle:
 * the products cost about (1 + 1/nblocks)/2 of the full square.
 *
 * Forward spreads (batch, query head) pairs over the threads; backward spreads (batch,
 * key/value head) pairs, the thread summing its group's query heads into dk and dv
 * alone, so every output float is written by one thread and results are bit-identical
 * for a given thread count. An sgemm called inside a parallel region runs on the calling
 * thread alone (OpenBLAS's OpenMP build, and oneDNN), so heads, not products, are what
 * is spread over the threads. */
#include "ops/attention_cpu.h"

#include "core/fatal.h"
#include "ops/exp_approx.h"
#include "ops/gemm_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BLOCK 64

/* Every head of one call. Row strides: ldq for q and dq, ldk for k, v, dk and dv, ldo
 * for out and dout; batch strides bq, bk, bo likewise (in floats). */
typedef struct {
  const float *q, *k, *v, *dout;
  float *out, *lse, *dq, *dk, *dv;
  int ldq, ldk, ldo;
  size_t bq, bk, bo;
  int B, T, Tk, NH, NKV, hs;
} heads;

/* One query head h of batch b, with its key/value head. */
typedef struct {
  const float *q, *k, *v, *g; /* g: dout */
  float *o, *lse, *dq, *dk, *dv;
  float scale;
} head_io;

static head_io head_at(const heads *a, int b, int h) {
  size_t at_q = (size_t)b * a->bq + (size_t)h * a->hs, at_o = (size_t)b * a->bo + (size_t)h * a->hs;
  size_t at_k = (size_t)b * a->bk + (size_t)(h / (a->NH / a->NKV)) * a->hs;
  head_io io = {.q = a->q + at_q, .k = a->k + at_k, .v = a->v + at_k, .o = a->out + at_o,
                .lse = a->lse + ((size_t)b * a->NH + h) * a->T, .scale = 1.0f / sqrtf((float)a->hs)};
  if (a->dout) io.g = a->dout + at_o, io.dq = a->dq + at_q, io.dk = a->dk + at_k, io.dv = a->dv + at_k;
  return io;
}

/* Scratch of per_thread floats for each of *threads threads, allocated before the
 * parallel region (a failed malloc inside it had nowhere to go). Short of memory for
 * every thread, fewer threads run: the same bits, since one thread computes each head
 * alone. The ops interface has no error path, so running out even for one thread is
 * fatal, with a message rather than a crash. */
float *atoll_att_scratch(size_t per_thread, int *threads) {
  for (int nt = omp_get_max_threads(); nt >= 1; nt /= 2) {
    float *s = malloc(sizeof(float) * per_thread * (size_t)nt);
    if (s) {
      *threads = nt;
      return s;
    }
  }
  atoll_fatal("attention: out of memory for %zu bytes of scratch", sizeof(float) * per_thread);
}

/* Softmax in place of one row of scores over its first n keys; the rest (future keys)
 * become 0. Returns the log-sum-exp. */
static float softmax_row(float *row, int n, int cols) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; j++) {
    row[j] = atoll_exp_approx(row[j] - mx);
    sum += row[j];
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j < n; j++) row[j] *= inv;
  for (int j = n; j < cols; j++) row[j] = 0.0f;
  return mx + logf(sum);
}

/* Forward of one head; S: ATT_BLOCK x Tk scratch. Query row i sees keys [0, Tk - T + i]. */
static void forward_head(float *S, const heads *a, const head_io *io) {
  int T = a->T, p0 = a->Tk - T, hs = a->hs;
  for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
    int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, cols = p0 + r1;
    atoll_gemm_f32(0, 1, r1 - r0, cols, hs, io->scale, io->q + (size_t)r0 * a->ldq, a->ldq, io->k, a->ldk, 0.0f, S,
                   cols);
    for (int i = r0; i < r1; i++) io->lse[i] = softmax_row(S + (size_t)(i - r0) * cols, p0 + i + 1, cols);
    /* out[rows] = P V */
    atoll_gemm_f32(0, 0, r1 - r0, hs, cols, 1.0f, S, cols, io->v, a->ldk, 0.0f, io->o + (size_t)r0 * a->ldo, a->ldo);
  }
}

/* Backward of one head (Tk = T), adding into its key/value head's dk and dv; P and dS:
 * ATT_BLOCK x T scratch each. */
static void backward_head(float *P, float *dS, const heads *a, const head_io *io) {
  int T = a->T, hs = a->hs, ldq = a->ldq, ldk = a->ldk, ldo = a->ldo;
  float D[ATT_BLOCK];
  for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
    int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
    /* P = exp(S - lse), recomputed; D = rowsum(dO * O) */
    atoll_gemm_f32(0, 1, rows, r1, hs, io->scale, io->q + (size_t)r0 * ldq, ldq, io->k, ldk, 0.0f, P, r1);
    for (int i = r0; i < r1; i++) {
      float *row = P + (size_t)(i - r0) * r1;
      float l = io->lse[i];
      int n = i + 1;
#pragma omp simd
      for (int j = 0; j < n; j++) row[j] = atoll_exp_approx(row[j] - l);
      for (int j = n; j < r1; j++) row[j] = 0.0f;
      const float *o = io->o + (size_t)i * ldo, *g = io->g + (size_t)i * ldo;
      float d = 0.0f;
#pragma omp simd reduction(+ : d)
      for (int c = 0; c < hs; c++) d += o[c] * g[c];
      D[i - r0] = d;
    }
    /* dP = dO V^T, then dS = P (dP - D) * scale, in place */
    atoll_gemm_f32(0, 1, rows, r1, hs, 1.0f, io->g + (size_t)r0 * ldo, ldo, io->v, ldk, 0.0f, dS, r1);
    for (int i = 0; i < rows; i++) {
      float *ds = dS + (size_t)i * r1;
      const float *p = P + (size_t)i * r1;
      float d = D[i];
#pragma omp simd
      for (int j = 0; j < r1; j++) ds[j] = p[j] * (ds[j] - d) * io->scale;
    }
    /* dQ[rows] = dS K;  dK += dS^T Q[rows];  dV += P^T dO[rows] */
    atoll_gemm_f32(0, 0, rows, hs, r1, 1.0f, dS, r1, io->k, ldk, 0.0f, io->dq + (size_t)r0 * ldq, ldq);
    atoll_gemm_f32(1, 0, r1, hs, rows, 1.0f, dS, r1, io->q + (size_t)r0 * ldq, ldq, 1.0f, io->dk, ldk);
    atoll_gemm_f32(1, 0, r1, hs, rows, 1.0f, P, r1, io->g + (size_t)r0 * ldo, ldo, 1.0f, io->dv, ldk);
  }
}

static void run_forward(const heads *a) {
  size_t per_thread = (size_t)ATT_BLOCK * a->Tk;
  int nt;
  float *scratch = atoll_att_scratch(per_thread, &nt);
#pragma omp parallel num_threads(nt)
  {
    float *S = scratch + (size_t)omp_get_thread_num() * per_thread;
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < a->B; b++)
      for (int h = 0; h < a->NH; h++) {
        head_io io = head_at(a, b, h);
        forward_head(S, a, &io);
      }
  }
  free(scratch);
}

static void run_backward(const heads *a) {
  size_t per_thread = 2 * (size_t)ATT_BLOCK * a->T;
  int nt, group = a->NH / a->NKV;
  float *scratch = atoll_att_scratch(per_thread, &nt);
#pragma omp parallel num_threads(nt)
  {
    float *P = scratch + (size_t)omp_get_thread_num() * per_thread;
    float *dS = P + (size_t)ATT_BLOCK * a->T;
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < a->B; b++)
      for (int kvh = 0; kvh < a->NKV; kvh++) {
        head_io io = head_at(a, b, kvh * group);
        for (int t = 0; t < a->T; t++) {
          memset(io.dk + (size_t)t * a->ldk, 0, sizeof(float) * (size_t)a->hs);
          memset(io.dv + (size_t)t * a->ldk, 0, sizeof(float) * (size_t)a->hs);
        }
        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
          io = head_at(a, b, h);
          backward_head(P, dS, a, &io);
        }
      }
  }
  free(scratch);
}

/* GPT-2's packed rows: groups of one, q, k and v at offsets 0, C and 2C of each row */
static heads gpt2_heads(const float *qkv, float *out, float *lse, int B, int T, int C, int NH) {
  heads a = {.q = qkv, .k = qkv + C, .v = qkv + 2 * C, .out = out, .lse = lse, .ldq = 3 * C, .ldk = 3 * C,
             .ldo = C, .bq = (size_t)T * 3 * C, .bk = (size_t)T * 3 * C, .bo = (size_t)T * C,
             .B = B, .T = T, .Tk = T, .NH = NH, .NKV = NH, .hs = C / NH};
  return a;
}

void atoll_attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  heads a = gpt2_heads(qkv, out, lse, B, T, C, NH);
  run_forward(&a);
}

void atoll_attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *lse, int B, int T, int C, int NH) {
  heads a = gpt2_heads(qkv, (float *)out, (float *)lse, B, T, C, NH);
  a.dout = dout, a.dq = dqkv, a.dk = dqkv + C, a.dv = dqkv + 2 * C;
  run_backward(&a);
}

static heads gqa_heads(const float *q, const float *k, const float *v, float *out, float *lse, int B, int T, int Tk,
                       int NH, int NKV, int hs) {
  heads a = {.q = q, .k = k, .v = v, .out = out, .lse = lse, .ldq = NH * hs, .ldk = NKV * hs, .ldo = NH * hs,
             .bq = (size_t)T * NH * hs, .bk = (size_t)Tk * NKV * hs, .bo = (size_t)T * NH * hs,
             .B = B, .T = T, .Tk = Tk, .NH = NH, .NKV = NKV, .hs = hs};
  return a;
}

void atoll_gqa_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                           int Tk, int NH, int NKV, int hs) {
  heads a = gqa_heads(q, k, v, out, lse, B, T, Tk, NH, NKV, hs);
  run_forward(&a);
}

void atoll_gqa_backward_cpu(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int hs) {
  heads a = gqa_heads(q, k, v, (float *)out, (float *)lse, B, T, T, NH, NKV, hs);
  a.dout = dout, a.dq = dq, a.dk = dk, a.dv = dv;
  run_backward(&a);
}

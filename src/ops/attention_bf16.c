/* Causal attention with bf16 products, GPT-2's and grouped-query (src/ops/attention_bf16.h).
 *
 * The order of work is the fp32 kernel's (attention_cpu.c): one (batch, head) pair per
 * OpenMP task, query rows in blocks of ATT_BLOCK, each block's scores against the keys
 * it may see kept in per-thread scratch, backward recomputing the probabilities from
 * the log-sum-exp. What differs is the products: AMX tiles (TDPBF16PS: a 16 x 32 bf16
 * tile times a 32 x 16 one, added into 16 x 16 fp32). A product C = A B reads
 *   A as "bf16 rows": row-major bf16, rows padded with zeros to a multiple of 32;
 *   B in "pair layout": rows of 32-bit words, word (u, n) holding B[2u][n] in its low
 *     half and B[2u+1][n] in its high half (zero past K or N), rows padded to a
 *     multiple of 16 words and their count to a multiple of 16 (AMX's VNNI layout).
 * Each head's Q, K, V (and dO) are rounded into these layouts once; the earlier oneDNN
 * attempt (full T x T products through memory) could not do that cheaply
 * (bench/README.md, "Where a bf16 step's time goes"). Rounding is to nearest even, as
 * in atoll_bf16_from_f32; the tiles treat bf16 denormals as zero.
 *
 * On the Xeon of bench/README.md this makes attention about 1.1-1.2x faster than the
 * fp32 kernels at one thread: the products are now a sixth of its time, the rest is
 * softmax, rounding and reading Q, K, V from memory. Processors with AVX512_BF16 but no
 * AMX keep the fp32 attention (vdpbf16ps does no more work per cycle than two fp32
 * FMAs; a version on it measured slower than fp32 here). */
#include "ops/attention_bf16.h"

#include "core/fatal.h"
#include "ops/cpu_features.h"
#include "ops/exp_approx.h"
#include "ops/gemm_cpu.h"
#include "ops/attention_cpu.h" /* atoll_att_scratch */

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define HAVE_KERNEL 1
#include <immintrin.h>
#define TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))
#else
#define HAVE_KERNEL 0
#endif

#define ATT_BLOCK 64

int atoll_attention_bf16_available(void) { return HAVE_KERNEL && atoll_cpu()->amx_bf16; }

#if HAVE_KERNEL

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* ------------------------------------------------------------------ layouts --- */

/* rows x cols of X (row stride ldx) times scale, as bf16 rows of stride lda (even) */
static void rows_bf16(uint16_t *A, int lda, const float *X, int ldx, int rows, int cols, float scale) {
  for (int r = 0; r < rows; r++) {
    const float *x = X + (size_t)r * ldx;
    uint16_t *a = A + (size_t)r * lda;
#pragma omp simd
    for (int c = 0; c < cols; c++) a[c] = atoll_bf16_from_f32(x[c] * scale);
    for (int c = cols; c < lda; c++) a[c] = 0;
  }
}

/* the transpose of rows x cols of X as bf16 rows: cols rows of stride lda (even, >= rows) */
static void rows_bf16_transposed(uint16_t *A, int lda, const float *X, int ldx, int rows, int cols) {
  for (int c = 0; c < cols; c++) {
    uint16_t *a = A + (size_t)c * lda;
    for (int r = 0; r < rows; r++) a[r] = atoll_bf16_from_f32(X[(size_t)r * ldx + c]);
    for (int r = rows; r < lda; r++) a[r] = 0;
  }
}

static inline uint32_t pair(float lo, float hi) {
  return (uint32_t)atoll_bf16_from_f32(lo) | (uint32_t)atoll_bf16_from_f32(hi) << 16;
}

/* zero pair rows [from, round_up(K, 32) / 2): the products read B in chunks of 16 */
static void zero_pad_rows(uint32_t *Bp, int ldb, int from, int K) {
  for (int u = from; u < round_up(K, 32) / 2; u++) memset(Bp + (size_t)u * ldb, 0, sizeof(uint32_t) * (size_t)ldb);
}

/* B = X (K x N; X's row k at X + k ldx) in pair layout, rows of ldb words */
static void pairs_of_rows(uint32_t *Bp, int ldb, const float *X, int ldx, int K, int N) {
  for (int u = 0; u < (K + 1) / 2; u++) {
    const float *lo = X + (size_t)(2 * u) * ldx, *hi = lo + ldx;
    uint32_t *b = Bp + (size_t)u * ldb;
    if (2 * u + 1 < K) {
#pragma omp simd
      for (int n = 0; n < N; n++) b[n] = pair(lo[n], hi[n]);
    } else {
      for (int n = 0; n < N; n++) b[n] = pair(lo[n], 0.0f);
    }
    for (int n = N; n < ldb; n++) b[n] = 0;
  }
  zero_pad_rows(Bp, ldb, (K + 1) / 2, K);
}

/* B = X^T (X is N x K; X's row n at X + n ldx) in pair layout, rows of ldb words.
 * A pair (X[n][2u], X[n][2u+1]) is word u of row n in bf16, so this rounds 16 rows at a
 * time into a small block (contiguous, vectorized) and writes the block transposed. */
static void pairs_of_cols(uint32_t *Bp, int ldb, const float *X, int ldx, int K, int N) {
  enum { WORDS = 64 };
  uint16_t w[16][2 * WORDS]; /* 16 rows of bf16, read back a word (2 of them) at a time */
  int U = (K + 1) / 2;
  for (int n0 = 0; n0 < ldb; n0 += 16)
    for (int u0 = 0; u0 < U; u0 += WORDS) {
      int uu = U - u0 < WORDS ? U - u0 : WORDS, k0 = 2 * u0, kk = K - k0 < 2 * uu ? K - k0 : 2 * uu;
      for (int r = 0; r < 16; r++) {
        uint16_t *h = w[r];
        if (n0 + r < N) {
          const float *x = X + (size_t)(n0 + r) * ldx + k0;
#pragma omp simd
          for (int k = 0; k < kk; k++) h[k] = atoll_bf16_from_f32(x[k]);
          for (int k = kk; k < 2 * uu; k++) h[k] = 0;
        } else {
          memset(h, 0, sizeof(uint16_t) * 2 * (size_t)uu);
        }
      }
      for (int t = 0; t < uu; t++) {
        uint32_t *b = Bp + (size_t)(u0 + t) * ldb + n0;
        for (int r = 0; r < 16; r++) memcpy(&b[r], &w[r][2 * t], sizeof(uint32_t));
      }
    }
  zero_pad_rows(Bp, ldb, U, K);
}

/* ------------------------------------------------------------------ product --- */

/* AMX: eight tile registers of 16 rows x 64 bytes, all configured so: tiles 0-3
 * accumulate 16 x 16 fp32, tiles 4-5 hold 16 rows x 32 bf16 of A, tiles 6-7 16 pair
 * rows x 16 words of B. Each thread loads the configuration before its products and
 * releases it after. */
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

TARGET static void tiles_on(void) {
  tile_config c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 8; i++) c.colsb[i] = 64, c.rows[i] = 16;
  /* gcc 12 without -march=native dropped the stores above (it does not count
   * ldtilecfg as reading c), and the first tile instruction then faulted: the empty
   * asm takes c's address and clobbers memory, so the stores must happen first */
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

TARGET static void tiles_off(void) { _tile_release(); }

/* One 16 x 16 tile of C at c (rows mr <= 16, columns nr <= 16 of it inside C) from A's
 * 16 rows at a and B's 16 columns at b. A whole tile goes straight to C, an edge tile
 * through a local one, so nothing outside C is written. */
TARGET static void one_tile(int chunks, const uint16_t *a, int lda, const uint32_t *b, int ldb, float *c, int ldc,
                            int mr, int nr, int accumulate) {
  int whole = mr == 16 && nr == 16;
  if (whole && accumulate)
    _tile_loadd(0, c, (long)ldc * 4);
  else
    _tile_zero(0);
  for (int k = 0; k < chunks; k++) {
    _tile_loadd(4, a + (size_t)k * 32, (long)lda * 2);
    _tile_loadd(6, b + (size_t)k * 16 * ldb, (long)ldb * 4);
    _tile_dpbf16ps(0, 4, 6);
  }
  if (whole) {
    _tile_stored(0, c, (long)ldc * 4);
    return;
  }
  float edge[16 * 16] __attribute__((aligned(64)));
  _tile_stored(0, edge, 64);
  for (int r = 0; r < mr; r++)
    for (int j = 0; j < nr; j++) c[(size_t)r * ldc + j] = (accumulate ? c[(size_t)r * ldc + j] : 0.0f) + edge[r * 16 + j];
}

/* Four whole tiles of C, 32 x 32 at c: each A and B tile is loaded once for two
 * products (one_tile loads both for every product, and the loads, not the products,
 * bound these short sums). Each tile sums its chunks in the same order as one_tile. */
TARGET static void four_tiles(int chunks, const uint16_t *a, int lda, const uint32_t *b, int ldb, float *c, int ldc,
                              int accumulate) {
  float *c1 = c + 16, *c2 = c + (size_t)16 * ldc, *c3 = c2 + 16;
  if (accumulate) {
    _tile_loadd(0, c, (long)ldc * 4);
    _tile_loadd(1, c1, (long)ldc * 4);
    _tile_loadd(2, c2, (long)ldc * 4);
    _tile_loadd(3, c3, (long)ldc * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int k = 0; k < chunks; k++) {
    _tile_loadd(4, a + (size_t)k * 32, (long)lda * 2);
    _tile_loadd(5, a + (size_t)16 * lda + (size_t)k * 32, (long)lda * 2);
    _tile_loadd(6, b + (size_t)k * 16 * ldb, (long)ldb * 4);
    _tile_loadd(7, b + (size_t)k * 16 * ldb + 16, (long)ldb * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, (long)ldc * 4);
  _tile_stored(1, c1, (long)ldc * 4);
  _tile_stored(2, c2, (long)ldc * 4);
  _tile_stored(3, c3, (long)ldc * 4);
}

/* C (M x N, row stride ldc) = A B, or += when accumulate. A: bf16 rows of stride lda,
 * readable for round_up(M, 16) rows and 32 round_up(Kh, 16) columns, zero in columns
 * [2 Kh, ...). B: pair layout, rows of ldb words (a multiple of 16, >= N), round_up(Kh,
 * 16) rows, zero past Kh. C in blocks of 32 x 32: whole ones by four_tiles, the rest
 * tile by tile. */
TARGET static void gemm_pairs(int M, int N, int Kh, const uint16_t *A, int lda, const uint32_t *Bp, int ldb, float *C,
                              int ldc, int accumulate) {
  int chunks = (Kh + 15) / 16;
  for (int m0 = 0; m0 < M; m0 += 32)
    for (int n0 = 0; n0 < N; n0 += 32) {
      if (m0 + 32 <= M && n0 + 32 <= N) {
        four_tiles(chunks, A + (size_t)m0 * lda, lda, Bp + n0, ldb, C + (size_t)m0 * ldc + n0, ldc, accumulate);
        continue;
      }
      for (int m1 = m0; m1 < M && m1 < m0 + 32; m1 += 16)
        for (int n1 = n0; n1 < N && n1 < n0 + 32; n1 += 16)
          one_tile(chunks, A + (size_t)m1 * lda, lda, Bp + n1, ldb, C + (size_t)m1 * ldc + n1, ldc,
                   M - m1 < 16 ? M - m1 : 16, N - n1 < 16 ? N - n1 : 16, accumulate);
    }
}

/* ------------------------------------------------------------------ scratch --- */

/* A thread's buffers, carved from one float array at 64-byte boundaries. */
typedef struct {
  uint16_t *qa, *da;   /* Q (scaled) and dO as bf16 rows: tq x hsp */
  uint32_t *kc, *vc;   /* K^T and V^T in pair layout: hsp/2 x tk */
  uint32_t *vr, *kr;   /* V and K in pair layout: tk32/2 x hs16 */
  float *s, *dp;       /* a block's scores / probabilities and dP / dS: ATT_BLOCK x tk */
  uint16_t *pa;        /* a block's P or dS as bf16 rows: ATT_BLOCK x tk32 */
  uint16_t *pt;        /* their transpose: tk x ATT_BLOCK */
  uint32_t *qr, *dr;   /* a block's Q and dO in pair layout: ATT_BLOCK/2 x hs16 */
} buffers;

typedef struct {
  int T, Tk, hs; /* query rows, keys (query row t sits at position Tk - T + t), head size */
  int hsp;       /* hs rounded up to 32: a bf16 row of Q or dO is whole AMX chunks */
  int tq, tk;    /* T and Tk rounded up to 16: rows and columns of whole tiles */
  int tk32;      /* Tk rounded up to 32 */
  int hs16;      /* hs rounded up to 16 */
} dims;

static dims dims_of(int T, int Tk, int hs) {
  dims d = {.T = T, .Tk = Tk, .hs = hs};
  d.hsp = round_up(hs, 32);
  d.tq = round_up(T, 16);
  d.tk = round_up(Tk, 16);
  d.tk32 = round_up(Tk, 32);
  d.hs16 = round_up(hs, 16);
  return d;
}

/* bytes of each buffer, in the order of the struct (forward: 0 for backward's own) */
static void buffer_sizes(const dims *d, int backward, size_t sz[12]) {
  size_t tq = (size_t)d->tq, tk = (size_t)d->tk, tk32 = (size_t)d->tk32, hs16 = (size_t)d->hs16;
  size_t b = backward ? 1 : 0, i = 0;
  sz[i++] = tq * d->hsp * 2;                 /* qa */
  sz[i++] = b * tq * d->hsp * 2;             /* da */
  sz[i++] = (size_t)d->hsp / 2 * tk * 4;     /* kc */
  sz[i++] = b * (size_t)d->hsp / 2 * tk * 4; /* vc */
  sz[i++] = tk32 / 2 * hs16 * 4;             /* vr */
  sz[i++] = b * tk32 / 2 * hs16 * 4;         /* kr */
  sz[i++] = ATT_BLOCK * tk * 4;              /* s */
  sz[i++] = b * ATT_BLOCK * tk * 4;          /* dp */
  sz[i++] = ATT_BLOCK * tk32 * 2;            /* pa */
  sz[i++] = b * tk * ATT_BLOCK * 2;          /* pt */
  sz[i++] = b * ATT_BLOCK / 2 * hs16 * 4;    /* qr */
  sz[i++] = b * ATT_BLOCK / 2 * hs16 * 4;    /* dr */
}

static size_t per_thread_floats(const dims *d, int backward) {
  size_t sz[12], total = 0;
  buffer_sizes(d, backward, sz);
  for (int i = 0; i < 12; i++) total += (sz[i] + 63) / 64 * 64;
  return total / sizeof(float) + 16; /* + room to align the start */
}

static buffers carve(float *base, const dims *d, int backward) {
  size_t sz[12];
  buffer_sizes(d, backward, sz);
  char *p = (char *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
  void *ptr[12];
  for (int i = 0; i < 12; i++) {
    ptr[i] = p;
    p += (sz[i] + 63) / 64 * 64;
  }
  buffers b = {ptr[0], ptr[1], ptr[2], ptr[3], ptr[4], ptr[5], ptr[6], ptr[7], ptr[8], ptr[9], ptr[10], ptr[11]};
  return b;
}

/* One key/value head and one of the query heads that read it (GPT-2: the same head;
 * grouped-query attention: one of its group). Row strides: ldq for q and dq, ldo for
 * out and dout, ldk for k, v, dk and dv. */
typedef struct {
  const float *q, *k, *v, *out, *dout;
  float *lse;     /* this query head's T log-sum-exps (written forward, read backward) */
  const float *D; /* backward: its T dot products dO . O (row by row) */
  float *dq, *dk, *dv;
  int ldq, ldo, ldk;
} head_io;

/* ------------------------------------------------------------------ forward --- */

/* The softmax loops run over whole groups of LANES columns: the rows' lengths change by
 * one from row to row, and a scalar remainder loop (up to 15 exponentials per row) had
 * cost about as much as the vector loop. Columns past a row's end, up to the next
 * multiple of LANES, lie inside its stride and take part as zeros. */
#define LANES 16

/* Softmax of each scaled score row of a block's query rows r0..r1 (row i sees keys
 * 0..p0+i; scores at stride ld, a multiple of LANES), written as bf16 rows of stride lda
 * (>= the row's length rounded up to LANES) into P (zero past the diagonal, up to lda);
 * each row's log-sum-exp in lse. */
static void block_softmax(uint16_t *P, int lda, float *S, int ld, int r0, int r1, int p0, float *lse) {
  for (int i = r0; i < r1; i++) {
    float *row = S + (size_t)(i - r0) * ld;
    uint16_t *p = P + (size_t)(i - r0) * lda;
    int n = p0 + i + 1, nl = round_up(n, LANES);
    for (int j = n; j < nl; j++) row[j] = -INFINITY;
    float mx[LANES], acc[LANES];
    for (int l = 0; l < LANES; l++) mx[l] = -INFINITY, acc[l] = 0.0f;
    for (int j0 = 0; j0 < nl; j0 += LANES)
#pragma omp simd
      for (int l = 0; l < LANES; l++) mx[l] = row[j0 + l] > mx[l] ? row[j0 + l] : mx[l];
    float m = mx[0];
    for (int l = 1; l < LANES; l++) m = mx[l] > m ? mx[l] : m;
    for (int j0 = 0; j0 < nl; j0 += LANES)
#pragma omp simd
      for (int l = 0; l < LANES; l++) {
        float e = j0 + l < n ? atoll_exp_approx(row[j0 + l] - m) : 0.0f;
        row[j0 + l] = e;
        acc[l] += e;
      }
    float sum = 0.0f;
    for (int l = 0; l < LANES; l++) sum += acc[l];
    float inv = 1.0f / sum;
    for (int j0 = 0; j0 < nl; j0 += LANES)
#pragma omp simd
      for (int l = 0; l < LANES; l++) p[j0 + l] = atoll_bf16_from_f32(row[j0 + l] * inv);
    for (int j = nl; j < lda; j++) p[j] = 0;
    lse[i] = m + logf(sum);
  }
}

/* K^T and V of a key/value head in the forward's layouts */
static void pack_forward_kv(const buffers *w, const dims *d, const head_io *io) {
  pairs_of_cols(w->kc, d->tk, io->k, io->ldk, d->hs, d->Tk);
  pairs_of_rows(w->vr, d->hs16, io->v, io->ldk, d->Tk, d->hs);
}

/* one query head, its key/value head packed by pack_forward_kv */
TARGET static void forward_head(const buffers *w, const dims *d, const head_io *io) {
  int T = d->T, hs = d->hs, hsp = d->hsp, p0 = d->Tk - d->T;
  rows_bf16(w->qa, hsp, io->q, io->ldq, T, hs, 1.0f / sqrtf((float)hs));
  for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
    int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0, cols = p0 + r1, colsp = round_up(cols, 32);
    gemm_pairs(rows, cols, hsp / 2, w->qa + (size_t)r0 * hsp, hsp, w->kc, d->tk, w->s, d->tk, 0);
    block_softmax(w->pa, colsp, w->s, d->tk, r0, r1, p0, io->lse);
    gemm_pairs(rows, hs, colsp / 2, w->pa, colsp, w->vr, d->hs16, (float *)io->out + (size_t)r0 * io->ldo, io->ldo, 0);
  }
}

/* ----------------------------------------------------------------- backward --- */

/* dX[0..r1) of one block (dK or dV: keys by hs, row stride ld) from A (r1 keys x
 * rowsp, bf16 rows) and B (the block's rows in pair layout). With fresh set, rows
 * [0, r0) add to what earlier blocks wrote and rows [r0, r1) are written (no block
 * wrote them yet); without, every row adds (a later query head of the group). */
TARGET static void keys_product(int r0, int r1, int hs, int rowsp, const uint16_t *A, const uint32_t *B, int ldb,
                                float *dX, int ld, int fresh) {
  if (!fresh) {
    gemm_pairs(r1, hs, rowsp / 2, A, rowsp, B, ldb, dX, ld, 1);
    return;
  }
  if (r0 > 0) gemm_pairs(r0, hs, rowsp / 2, A, rowsp, B, ldb, dX, ld, 1);
  gemm_pairs(r1 - r0, hs, rowsp / 2, A + (size_t)r0 * rowsp, rowsp, B, ldb, dX + (size_t)r0 * ld, ld, 0);
}

/* K^T, V^T and K of a key/value head in the backward's layouts */
static void pack_backward_kv(const buffers *w, const dims *d, const head_io *io) {
  pairs_of_cols(w->kc, d->tk, io->k, io->ldk, d->hs, d->T);
  pairs_of_cols(w->vc, d->tk, io->v, io->ldk, d->hs, d->T);
  pairs_of_rows(w->kr, d->hs16, io->k, io->ldk, d->T, d->hs);
}

/* One query head (Tk = T), its key/value head packed by pack_backward_kv: writes dq,
 * and writes (first of its group) or adds to dk and dv. */
TARGET static void backward_head(const buffers *w, const dims *d, const head_io *io, int first) {
  int T = d->T, hs = d->hs, hsp = d->hsp, tk = d->tk, hs16 = d->hs16, ldq = io->ldq, ldo = io->ldo;
  float scale = 1.0f / sqrtf((float)hs);
  rows_bf16(w->qa, hsp, io->q, ldq, T, hs, scale);
  rows_bf16(w->da, hsp, io->dout, ldo, T, hs, 1.0f);
  for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
    int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
    int r1p = round_up(r1, 32), rowsp = round_up(rows, 32);
    const float *D = io->D + r0;
    /* P = exp(S - lse), recomputed from the same bf16 inputs as forward */
    gemm_pairs(rows, r1, hsp / 2, w->qa + (size_t)r0 * hsp, hsp, w->kc, tk, w->s, tk, 0);
    for (int i = r0; i < r1; i++) {
      float *row = w->s + (size_t)(i - r0) * tk, l = io->lse[i];
      int n = i + 1;
      int rl = round_up(r1, LANES);
      for (int j = r1; j < rl; j++) row[j] = 0.0f; /* not written by the product: read below */
      for (int j0 = 0; j0 < rl; j0 += LANES) /* zero past the diagonal */
#pragma omp simd
        for (int c = 0; c < LANES; c++) row[j0 + c] = j0 + c < n ? atoll_exp_approx(row[j0 + c] - l) : 0.0f;
    }
    /* dP = dO V^T, then dS = P (dP - D) * scale in place, and as bf16 rows */
    gemm_pairs(rows, r1, hsp / 2, w->da + (size_t)r0 * hsp, hsp, w->vc, tk, w->dp, tk, 0);
    for (int i = 0; i < rows; i++) {
      float *ds = w->dp + (size_t)i * tk;
      const float *p = w->s + (size_t)i * tk;
      uint16_t *a = w->pa + (size_t)i * r1p;
      float di = D[i];
#pragma omp simd
      for (int j = 0; j < r1; j++) {
        ds[j] = p[j] * (ds[j] - di) * scale;
        a[j] = atoll_bf16_from_f32(ds[j]);
      }
      for (int j = r1; j < r1p; j++) a[j] = 0;
    }
    /* dQ[rows] = dS K */
    gemm_pairs(rows, hs, r1p / 2, w->pa, r1p, w->kr, hs16, io->dq + (size_t)r0 * ldq, ldq, 0);
    /* dK[0..r1) += dS^T Q[rows], dV[0..r1) += P^T dO[rows] */
    rows_bf16_transposed(w->pt, rowsp, w->dp, tk, rows, r1);
    pairs_of_rows(w->qr, hs16, io->q + (size_t)r0 * ldq, ldq, rows, hs);
    keys_product(r0, r1, hs, rowsp, w->pt, w->qr, hs16, io->dk, io->ldk, first);
    rows_bf16_transposed(w->pt, rowsp, w->s, tk, rows, r1);
    pairs_of_rows(w->dr, hs16, io->dout + (size_t)r0 * ldo, ldo, rows, hs);
    keys_product(r0, r1, hs, rowsp, w->pt, w->dr, hs16, io->dv, io->ldk, first);
  }
}

/* ------------------------------------------------------------- entry points --- */

/* Where a layer's heads live: pointers at batch 0, head 0 (dout and the gradients NULL
 * forward), row strides, batch strides (bq for q and dq, bo for out and dout, bk for
 * k, v, dk, dv), and the counts. GPT-2 is the case NKV = NH. */
typedef struct {
  const float *q, *k, *v, *out, *dout;
  float *lse, *dq, *dk, *dv;
  float *D; /* backward: [B, NH, T] dO . O per row, filled by run_heads */
  int ldq, ldo, ldk;
  size_t bq, bo, bk;
  int B, T, Tk, NH, NKV, hs;
} heads;

static head_io head_at(const heads *a, int b, int h) {
  size_t aq = b * a->bq + (size_t)h * a->hs, ao = b * a->bo + (size_t)h * a->hs;
  size_t ak = b * a->bk + (size_t)(h / (a->NH / a->NKV)) * a->hs;
  size_t rows = ((size_t)b * a->NH + h) * a->T; /* this head's place in lse and D */
  head_io io = {.q = a->q + aq, .k = a->k + ak, .v = a->v + ak, .out = a->out + ao,
                .lse = a->lse + rows, .ldq = a->ldq, .ldo = a->ldo, .ldk = a->ldk};
  if (a->dout)
    io.dout = a->dout + ao, io.dq = a->dq + aq, io.dk = a->dk + ak, io.dv = a->dv + ak, io.D = a->D + rows;
  return io;
}

/* Backward's D = dO . O of every row and query head, in one pass over whole rows of O
 * and dO: a head's own rows are short pieces at a long stride, and reading them head by
 * head inside the backward had cost a sixth of its time in cache misses. */
static void row_dots(heads *a) {
  int rows = a->B * a->T;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < rows; n++) {
    int b = n / a->T, t = n % a->T;
    const float *o = a->out + b * a->bo + (size_t)t * a->ldo, *g = a->dout + b * a->bo + (size_t)t * a->ldo;
    for (int h = 0; h < a->NH; h++) {
      const float *oh = o + (size_t)h * a->hs, *gh = g + (size_t)h * a->hs;
      float dd = 0.0f;
#pragma omp simd reduction(+ : dd)
      for (int c = 0; c < a->hs; c++) dd += oh[c] * gh[c];
      a->D[((size_t)b * a->NH + h) * a->T + t] = dd;
    }
  }
}

/* Every head, forward or (with dout) backward: (batch, key/value head) pairs spread
 * over the threads; the query heads of a group run one after another on the thread
 * that packed their key/value head, so no two threads write the same dk or dv. */
static void run_heads(heads *a) {
  dims d = dims_of(a->T, a->Tk, a->hs);
  int nt, group = a->NH / a->NKV;
  if (a->dout) {
    a->D = malloc(sizeof(float) * (size_t)a->B * a->NH * a->T);
    if (!a->D) atoll_fatal("bf16 attention: out of memory");
    row_dots(a);
  }
  size_t per_thread = per_thread_floats(&d, a->dout != NULL);
  float *scratch = atoll_att_scratch(per_thread, &nt);
#pragma omp parallel num_threads(nt)
  {
    buffers w = carve(scratch + (size_t)omp_get_thread_num() * per_thread, &d, a->dout != NULL);
    tiles_on();
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < a->B; b++)
      for (int kvh = 0; kvh < a->NKV; kvh++)
        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
          head_io io = head_at(a, b, h);
          int first = h == kvh * group;
          if (!a->dout) {
            if (first) pack_forward_kv(&w, &d, &io);
            forward_head(&w, &d, &io);
          } else {
            if (first) pack_backward_kv(&w, &d, &io);
            backward_head(&w, &d, &io, first);
          }
        }
    tiles_off();
  }
  free(scratch);
  free(a->D);
}

/* GPT-2: qkv [B,T,3C] (q | k | v), out [B,T,C] */
static heads gpt2_heads(const float *qkv, const float *out, float *lse, int B, int T, int C, int NH) {
  heads a = {.q = qkv, .k = qkv + C, .v = qkv + 2 * C, .out = out, .lse = lse, .ldq = 3 * C, .ldo = C,
             .ldk = 3 * C, .bq = (size_t)T * 3 * C, .bo = (size_t)T * C, .bk = (size_t)T * 3 * C,
             .B = B, .T = T, .Tk = T, .NH = NH, .NKV = NH, .hs = C / NH};
  return a;
}

void atoll_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  heads a = gpt2_heads(qkv, out, lse, B, T, C, NH);
  run_heads(&a);
}

void atoll_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH) {
  heads a = gpt2_heads(qkv, out, (float *)lse, B, T, C, NH);
  a.dout = dout, a.dq = dqkv, a.dk = dqkv + C, a.dv = dqkv + 2 * C;
  run_heads(&a);
}

/* Grouped-query attention: q and out [B,T,NH*hs], k and v [B,Tk,NKV*hs] */
static heads gqa_heads(const float *q, const float *k, const float *v, const float *out, float *lse, int B, int T,
                       int Tk, int NH, int NKV, int hs) {
  heads a = {.q = q, .k = k, .v = v, .out = out, .lse = lse, .ldq = NH * hs, .ldo = NH * hs, .ldk = NKV * hs,
             .bq = (size_t)T * NH * hs, .bo = (size_t)T * NH * hs, .bk = (size_t)Tk * NKV * hs,
             .B = B, .T = T, .Tk = Tk, .NH = NH, .NKV = NKV, .hs = hs};
  return a;
}

void atoll_gqa_forward_bf16(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                            int Tk, int NH, int NKV, int hs) {
  heads a = gqa_heads(q, k, v, out, lse, B, T, Tk, NH, NKV, hs);
  run_heads(&a);
}

void atoll_gqa_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int hs) {
  heads a = gqa_heads(q, k, v, out, (float *)lse, B, T, T, NH, NKV, hs);
  a.dout = dout, a.dq = dq, a.dk = dk, a.dv = dv;
  run_heads(&a);
}

#else /* no kernel in this build: atoll_attention_bf16_available() is 0 */

void atoll_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)C, (void)NH;
  atoll_fatal("bf16 attention: not built for this compiler or processor");
}
void atoll_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH) {
  (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)B, (void)T, (void)C, (void)NH;
  atoll_fatal("bf16 attention: not built for this compiler or processor");
}

void atoll_gqa_forward_bf16(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                            int Tk, int NH, int NKV, int hs) {
  (void)out, (void)lse, (void)q, (void)k, (void)v, (void)B, (void)T, (void)Tk, (void)NH, (void)NKV, (void)hs;
  atoll_fatal("bf16 attention: not built for this compiler or processor");
}
void atoll_gqa_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int hs) {
  (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse, (void)B, (void)T;
  (void)NH, (void)NKV, (void)hs;
  atoll_fatal("bf16 attention: not built for this compiler or processor");
}

#endif

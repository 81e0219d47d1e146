/* Deterministic column sums over the rows of [N, C] matrices: the bias gradient
 * (matmul.cu) and the LayerNorm weight and bias gradients (layernorm.cu). */
#include "ops/cuda/common.cuh"

/* Sums over the rows of [N, C] matrices, in two fixed-order stages: colsum_partial
 * gives each block COLSUM_COLS columns x a range of COLSUM_ROWS_PER_PART rows and
 * writes one partial sum per (part, column); colsum_final adds the parts in order into
 * the (accumulated) result. Mode 0 sums d[n,c] (bias gradient); mode 1 also sums
 * (x[n,c] - mean[n]) * rstd[n] * d[n,c] (LayerNorm weight gradient). */
#define COLSUM_COLS 32
#define COLSUM_ROWLANES 8
#define COLSUM_ROWS_PER_PART 256
#define COLSUM_MAX_PARTS 4096

static __global__ void colsum_partial(float *part_a, float *part_b, const float *d, const float *x,
                               const float *mean, const float *rstd, int N, int C, int rows_per_part,
                               int mode) {
  __shared__ float sa[COLSUM_ROWLANES][COLSUM_COLS];
  __shared__ float sb[COLSUM_ROWLANES][COLSUM_COLS];
  int tx = threadIdx.x, ty = threadIdx.y;
  int c = blockIdx.x * COLSUM_COLS + tx;
  int part = blockIdx.y;
  int n0 = part * rows_per_part, n1 = min(N, n0 + rows_per_part);
  float a = 0.0f, b = 0.0f;
  if (c < C) {
    for (int n = n0 + ty; n < n1; n += COLSUM_ROWLANES) {
      float dv = d[(size_t)n * C + c];
      a += dv;
      if (mode == 1) b += (x[(size_t)n * C + c] - mean[n]) * rstd[n] * dv;
    }
  }
  sa[ty][tx] = a;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < C) {
    for (int r = 1; r < COLSUM_ROWLANES; r++) {
      a += sa[r][tx];
      b += sb[r][tx];
    }
    part_a[(size_t)part * C + c] = a;
    if (mode == 1) part_b[(size_t)part * C + c] = b;
  }
}

static __global__ void colsum_final(float *out_a, float *out_b, const float *part_a, const float *part_b,
                             int parts, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float a = 0.0f, b = 0.0f;
  for (int p = 0; p < parts; p++) {
    a += part_a[(size_t)p * C + c];
    if (out_b) b += part_b[(size_t)p * C + c];
  }
  out_a[c] += a;
  if (out_b) out_b[c] += b;
}

/* sum_a[c] += sum_n d[n,c]; if sum_b: sum_b[c] += sum_n (x - mean) * rstd * d. */
extern "C" void atoll_cuda_column_sums(float *sum_a, float *sum_b, const float *d, const float *x,
                                       const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  int rows = COLSUM_ROWS_PER_PART;
  int parts = (N + rows - 1) / rows;
  if (parts > COLSUM_MAX_PARTS) {
    parts = COLSUM_MAX_PARTS;
    rows = (N + parts - 1) / parts;
    parts = (N + rows - 1) / rows;
  }
  float *part_a = (float *)atoll_cuda_scratch(ATOLL_CUDA_SCRATCH_COLSUM,
                                              sizeof(float) * (size_t)parts * C * 2);
  float *part_b = part_a + (size_t)parts * C;
  dim3 grid((C + COLSUM_COLS - 1) / COLSUM_COLS, parts), block(COLSUM_COLS, COLSUM_ROWLANES);
  colsum_partial<<<grid, block>>>(part_a, part_b, d, x, mean, rstd, N, C, rows, sum_b ? 1 : 0);
  LAUNCHED("colsum_partial");
  colsum_final<<<(C + 255) / 256, 256>>>(sum_a, sum_b, part_a, sum_b ? part_b : NULL, parts, C);
  LAUNCHED("colsum_final");
}

/* Time of a matrix product from its shape (M, N, K) on one accelerator.
 *
 * A GPU computes C[M x N] in output tiles, one tile per SM at a time (CUTLASS and
 * cuBLAS kernels; NVIDIA's "Matrix Multiplication Background" guide describes both
 * losses modelled here):
 *   - tile quantization: the last row and column of tiles are partly padding;
 *   - wave quantization: tiles run in waves of `sms`; a partial last wave idles SMs;
 *   - a fixed cost per tile (pipeline fill and epilogue, `mm_k_over` elements of K),
 *     which matters when K is small;
 *   - the ceiling: a large square product reaches eta_mm of the dense peak in
 *     isolation (public cuBLAS microbenchmarks, catalog.c), and a training step
 *     sustains clock_eff of that clock under its power cap (fitted, docs/plan.md);
 *   - the HBM roofline: a product can take no less than its bytes / bandwidth.
 * The library picks the tile shape that is fastest for the shape (cuBLAS heuristics):
 * the best of the candidates below. Smaller tiles reuse each loaded operand less,
 * so their rate is lower (the `rate` column, an assumption documented in docs/plan.md).
 * On a CPU (sms 0) only the ceiling and the roofline apply. */
#include "atoll/plan.h"

#include <math.h>

static const struct {
  double m, n, rate;
} TILES[] = {
    {256, 128, 1.00}, /* the large-product tiles of Hopper/Ampere bf16 kernels */
    {128, 256, 1.00},
    {128, 128, 0.90}, /* half the reuse of one operand */
    {64, 128, 0.70},
    {64, 64, 0.45},
};

double atoll_plan_gemm_shape_eff(const atoll_plan_accel *x, double M, double N, double K, double batch) {
  if (x->sms <= 0 || M <= 0 || N <= 0 || K <= 0) return 1.0;
  double best = 0;
  for (size_t i = 0; i < sizeof TILES / sizeof TILES[0]; i++) {
    double tm = ceil(M / TILES[i].m), tn = ceil(N / TILES[i].n);
    double tile_util = M * N / (tm * TILES[i].m * tn * TILES[i].n);
    double tiles = tm * tn * (batch > 1 ? batch : 1);
    double waves = ceil(tiles / x->sms);
    double wave_util = tiles / (waves * x->sms);
    double e = TILES[i].rate * tile_util * wave_util;
    if (e > best) best = e;
  }
  return best * K / (K + x->mm_k_over);
}

double atoll_plan_gemm_seconds(const atoll_plan_accel *x, double M, double N, double K, double batch, double elem) {
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0;
  double clock = x->sms > 0 && x->clock_eff > 0 ? x->clock_eff : 1.0;
  double rate = x->peak_flops * x->eta_mm * clock * atoll_plan_gemm_shape_eff(x, M, N, K, batch);
  double t_compute = 2.0 * M * N * K * batch / rate;
  double t_memory = elem * (M * K + K * N + M * N) * batch / x->hbm_bw;
  return t_compute > t_memory ? t_compute : t_memory;
}

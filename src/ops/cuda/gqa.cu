/* Causal attention with grouped key/value heads, forward only (the ops.h member
 * gqa_forward): what atoll sample's key/value cache runs for GPT-2 (src/model/decode.c,
 * NKV = NH, Tk >= T). NOT YET RUN ON A GPU; tests/gpu/test_cuda_ops.c compares it with
 * the CPU kernel (src/ops/ops_llama_cpu.c).
 *
 * One warp per query row (b, h, t): each lane holds head dimensions lane, lane + 32, ...
 * (head size up to GQA_HSMAX), and the warp walks the row's keys 0 .. Tk - T + t in
 * order with an online softmax (one warp sum per key). Written for decoding, where T is
 * a handful of rows; training uses attention.cu. */
#include "ops/cuda/common.cuh"

#define GQA_HSMAX 256
#define GQA_WARPS 4

static __global__ void __launch_bounds__(GQA_WARPS * 32)
    gqa_forward_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int Tk,
                       int NH, int NKV, int hs, float scale) {
  const int lane = threadIdx.x & 31;
  size_t row = (size_t)blockIdx.x * GQA_WARPS + (threadIdx.x >> 5); /* ((b NH) + h) T + t */
  if (row >= (size_t)B * NH * T) return;
  int t = (int)(row % (size_t)T), h = (int)(row / (size_t)T % (size_t)NH), b = (int)(row / ((size_t)T * NH));
  int ldq = NH * hs, ldk = NKV * hs, kvh = h / (NH / NKV), keys = Tk - T + t + 1;
  const float *qr = q + ((size_t)b * T + t) * ldq + (size_t)h * hs;
  const float *kb = k + (size_t)b * Tk * ldk + (size_t)kvh * hs;
  const float *vb = v + (size_t)b * Tk * ldk + (size_t)kvh * hs;
  float qv[GQA_HSMAX / 32], acc[GQA_HSMAX / 32];
#pragma unroll
  for (int r = 0; r < GQA_HSMAX / 32; r++) {
    int d = lane + 32 * r;
    qv[r] = d < hs ? qr[d] : 0.0f;
    acc[r] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j < keys; j++) {
    const float *kj = kb + (size_t)j * ldk, *vj = vb + (size_t)j * ldk;
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < GQA_HSMAX / 32; r++) {
      int d = lane + 32 * r;
      if (d < hs) s += qv[r] * kj[d];
    }
    s = warp_sum(s) * scale;
    float m_new = fmaxf(m, s), c = expf(m - m_new), p = expf(s - m_new);
    l = l * c + p;
#pragma unroll
    for (int r = 0; r < GQA_HSMAX / 32; r++) {
      int d = lane + 32 * r;
      if (d < hs) acc[r] = acc[r] * c + p * vj[d];
    }
    m = m_new;
  }
  float *orow = out + ((size_t)b * T + t) * ldq + (size_t)h * hs;
#pragma unroll
  for (int r = 0; r < GQA_HSMAX / 32; r++) {
    int d = lane + 32 * r;
    if (d < hs) orow[d] = acc[r] / l;
  }
  if (lane == 0) lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

extern "C" void atoll_cuda_gqa_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                       int B, int T, int Tk, int NH, int NKV, int hs) {
  size_t rows = (size_t)B * NH * T;
  if (!rows) return;
  if (hs > GQA_HSMAX || hs < 1 || NKV < 1 || NH % NKV != 0 || Tk < T)
    atoll_fatal("cuda: gqa_forward: head size %d (at most %d), heads %d / %d, keys %d < rows %d: not supported",
                hs, GQA_HSMAX, NH, NKV, Tk, T);
  size_t blocks = (rows + GQA_WARPS - 1) / GQA_WARPS;
  if (blocks > 0x7fffffffu) atoll_fatal("cuda: gqa_forward: %zu query rows are too many", rows);
  gqa_forward_kernel<<<(unsigned)blocks, GQA_WARPS * 32>>>(out, lse, q, k, v, B, T, Tk, NH, NKV, hs,
                                                           1.0f / sqrtf((float)hs));
  LAUNCHED("gqa_forward");
}

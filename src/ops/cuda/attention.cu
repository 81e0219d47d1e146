/* Flash-style causal attention: forward, and backward in two deterministic kernels. */
#include "ops/cuda/common.cuh"

/* ---------------------------------------------------------------- attention --- */

/* Flash-style causal attention. A block of ATT_THREADS threads takes ATT_BR query rows
 * (forward, dQ) or ATT_BC key rows (dK/dV) of one (batch, head), ATT_TPR threads per
 * row. Tiles of the other side stream through shared memory; scores never leave the
 * block. Rows of a tile in shared memory are padded to hs + 1 floats so that threads on
 * different rows hit different banks. HSMAX (a template argument: 32, 64, 128 or 256,
 * the smallest >= hs) sizes the per-thread accumulators, which stay in registers
 * because every loop over them is unrolled with a guard d < hs.
 *
 * Forward keeps a running max m and sum l per row (online softmax), rescaling the
 * output accumulator when the max grows; it saves lse = m + log(l) like the CPU.
 * Backward (FlashAttention-2's equations with the saved lse): P = exp(S - lse),
 * dV = P^T dO, dP = dO V^T, dS = P (dP - D) scale with D = rowsum(dO * O), dQ = dS K,
 * dK = dS^T Q. dK/dV and dQ are separate kernels so that nothing is accumulated
 * across blocks (deterministic, no atomics) at the price of computing S and dP twice. */
#define ATT_BR 32
#define ATT_BC 32
#define ATT_TPR 4
#define ATT_THREADS (ATT_BR * ATT_TPR)

static_assert(ATT_BR == ATT_BC, "the kernels assume square tiles (one row per thread group)");
static_assert(ATT_TPR == 4, "the lane reductions below assume 4 threads per row");

/* Loads rows [r0, r0 + ATT_BR) of one head (row stride ld floats in global memory,
 * hs floats per row) into a padded tile, zeros past row T. */
__device__ __forceinline__ void load_tile(float *tile, const float *src, int r0, int T, int hs,
                                          size_t ld) {
  int pad = hs + 1;
  for (int i = threadIdx.x; i < ATT_BR * hs; i += ATT_THREADS) {
    int r = i / hs, d = i - r * hs;
    tile[r * pad + d] = r0 + r < T ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
  }
}

__device__ __forceinline__ float dot_rows(const float *a, const float *b, int hs) {
  float s = 0.0f;
  for (int k = 0; k < hs; k++) s += a[k] * b[k];
  return s;
}

/* reductions over the ATT_TPR = 4 consecutive lanes of one row */
__device__ __forceinline__ float row_sum4(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
__device__ __forceinline__ float row_max4(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

template <int HSMAX>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH) {
  extern __shared__ float smem[];
  const int hs = C / NH, pad = hs + 1;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * ATT_BR;
  const int r = threadIdx.x / ATT_TPR, lane4 = threadIdx.x % ATT_TPR;
  const int qi = q0 + r;
  const size_t ld = (size_t)3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  float *Qs = smem, *Ks = Qs + ATT_BR * pad, *Vs = Ks + ATT_BC * pad, *Ps = Vs + ATT_BC * pad;

  load_tile(Qs, base, q0, T, hs, ld);
  float o[HSMAX / ATT_TPR];
#pragma unroll
  for (int k = 0; k < HSMAX / ATT_TPR; k++) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int kv_end = min(T, q0 + ATT_BR);

  for (int k0 = 0; k0 < kv_end; k0 += ATT_BC) {
    __syncthreads(); /* everyone is done with the previous K/V tile (and Q is loaded) */
    load_tile(Ks, base + C, k0, T, hs, ld);
    load_tile(Vs, base + 2 * C, k0, T, hs, ld);
    __syncthreads();
    float s[ATT_BC / ATT_TPR];
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < ATT_BC / ATT_TPR; j++) {
      int c = lane4 + ATT_TPR * j, kj = k0 + c;
      s[j] = (kj <= qi && kj < T) ? dot_rows(Qs + r * pad, Ks + c * pad, hs) * scale : -INFINITY;
      mt = fmaxf(mt, s[j]);
    }
    mt = row_max4(mt);
    float m_new = fmaxf(m, mt);
    /* key 0 is in the first tile and visible to every row, so m_new is finite */
    float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
    float psum = 0.0f;
#pragma unroll
    for (int j = 0; j < ATT_BC / ATT_TPR; j++) {
      float p = s[j] == -INFINITY ? 0.0f : expf(s[j] - m_new);
      Ps[r * (ATT_BC + 1) + lane4 + ATT_TPR * j] = p;
      psum += p;
    }
    l = l * corr + row_sum4(psum);
    m = m_new;
    __syncwarp(); /* a row's 4 threads are in one warp */
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        float acc = o[k] * corr;
        for (int c = 0; c < ATT_BC; c++) acc += Ps[r * (ATT_BC + 1) + c] * Vs[c * pad + d];
        o[k] = acc;
      }
    }
    __syncwarp();
  }
  if (qi < T) {
    float inv = 1.0f / l;
    float *orow = out + ((size_t)b * T + qi) * C + (size_t)h * hs;
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) orow[d] = o[k] * inv;
    }
    if (lane4 == 0) lse[((size_t)b * NH + h) * T + qi] = m + logf(l);
  }
}

/* D[b,h,t] = sum_d out[b,t,h,d] * dout[b,t,h,d]: one warp per (b, t, h). */
static __global__ void attention_rowdot_kernel(float *D, const float *out, const float *dout, int B,
                                        int T, int C, int NH) {
  size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  size_t total = (size_t)B * T * NH;
  if (w >= total) return; /* whole warp */
  int h = (int)(w % NH);
  size_t n = w / NH; /* b * T + t */
  int t = (int)(n % T), b = (int)(n / T);
  int hs = C / NH;
  const float *o = out + n * C + (size_t)h * hs, *g = dout + n * C + (size_t)h * hs;
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) s += o[d] * g[d];
  s = warp_sum(s);
  if (lane == 0) D[((size_t)b * NH + h) * T + t] = s;
}

/* dQ for ATT_BR query rows: streams the key tiles up to the diagonal. */
template <int HSMAX>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(float *dqkv, const float *dout, const float *qkv,
                                 const float *lse, const float *Dv, int T, int C, int NH) {
  extern __shared__ float smem[];
  const int hs = C / NH, pad = hs + 1;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * ATT_BR;
  const int r = threadIdx.x / ATT_TPR, lane4 = threadIdx.x % ATT_TPR;
  const int qi = q0 + r;
  const size_t ld = (size_t)3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  const float *dobase = dout + (size_t)b * T * C + (size_t)h * hs;
  float *Qs = smem, *dOs = Qs + ATT_BR * pad, *Ks = dOs + ATT_BR * pad, *Vs = Ks + ATT_BC * pad;
  float *dSs = Vs + ATT_BC * pad;

  load_tile(Qs, base, q0, T, hs, ld);
  load_tile(dOs, dobase, q0, T, hs, (size_t)C);
  const size_t row = ((size_t)b * NH + h) * T;
  const float l_i = qi < T ? lse[row + qi] : 0.0f, D_i = qi < T ? Dv[row + qi] : 0.0f;
  float dq[HSMAX / ATT_TPR];
#pragma unroll
  for (int k = 0; k < HSMAX / ATT_TPR; k++) dq[k] = 0.0f;
  const int kv_end = min(T, q0 + ATT_BR);

  for (int k0 = 0; k0 < kv_end; k0 += ATT_BC) {
    __syncthreads();
    load_tile(Ks, base + C, k0, T, hs, ld);
    load_tile(Vs, base + 2 * C, k0, T, hs, ld);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < ATT_BC / ATT_TPR; j++) {
      int c = lane4 + ATT_TPR * j, kj = k0 + c;
      float ds = 0.0f;
      if (kj <= qi && kj < T && qi < T) {
        float p = expf(dot_rows(Qs + r * pad, Ks + c * pad, hs) * scale - l_i);
        float dp = dot_rows(dOs + r * pad, Vs + c * pad, hs);
        ds = p * (dp - D_i) * scale;
      }
      dSs[r * (ATT_BC + 1) + c] = ds;
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        float acc = dq[k];
        for (int c = 0; c < ATT_BC; c++) acc += dSs[r * (ATT_BC + 1) + c] * Ks[c * pad + d];
        dq[k] = acc;
      }
    }
    __syncwarp();
  }
  if (qi < T) {
    float *dqrow = dqkv + ((size_t)b * T + qi) * ld + (size_t)h * hs;
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) dqrow[d] = dq[k];
    }
  }
}

/* dK and dV for ATT_BC key rows: streams the query tiles from the diagonal to T. */
template <int HSMAX>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
                                  const float *lse, const float *Dv, int T, int C, int NH) {
  extern __shared__ float smem[];
  const int hs = C / NH, pad = hs + 1;
  const int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * ATT_BC;
  const int c = threadIdx.x / ATT_TPR, lane4 = threadIdx.x % ATT_TPR;
  const int kj = k0 + c;
  const size_t ld = (size_t)3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  const float *dobase = dout + (size_t)b * T * C + (size_t)h * hs;
  float *Ks = smem, *Vs = Ks + ATT_BC * pad, *Qs = Vs + ATT_BC * pad, *dOs = Qs + ATT_BR * pad;
  float *Ps = dOs + ATT_BR * pad, *dSs = Ps + ATT_BC * (ATT_BR + 1);
  float *Ls = dSs + ATT_BC * (ATT_BR + 1), *Ds = Ls + ATT_BR;
  const size_t row = ((size_t)b * NH + h) * T;

  load_tile(Ks, base + C, k0, T, hs, ld);
  load_tile(Vs, base + 2 * C, k0, T, hs, ld);
  float dk[HSMAX / ATT_TPR], dv[HSMAX / ATT_TPR];
#pragma unroll
  for (int k = 0; k < HSMAX / ATT_TPR; k++) dk[k] = dv[k] = 0.0f;

  /* query rows i < k0 see none of these keys */
  for (int i0 = k0; i0 < T; i0 += ATT_BR) {
    __syncthreads();
    load_tile(Qs, base, i0, T, hs, ld);
    load_tile(dOs, dobase, i0, T, hs, (size_t)C);
    for (int i = threadIdx.x; i < ATT_BR; i += ATT_THREADS) {
      Ls[i] = i0 + i < T ? lse[row + i0 + i] : 0.0f;
      Ds[i] = i0 + i < T ? Dv[row + i0 + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < ATT_BR / ATT_TPR; j++) {
      int rr = lane4 + ATT_TPR * j, qi = i0 + rr;
      float p = 0.0f, ds = 0.0f;
      if (kj <= qi && qi < T && kj < T) {
        p = expf(dot_rows(Ks + c * pad, Qs + rr * pad, hs) * scale - Ls[rr]);
        float dp = dot_rows(Vs + c * pad, dOs + rr * pad, hs);
        ds = p * (dp - Ds[rr]) * scale;
      }
      Ps[c * (ATT_BR + 1) + rr] = p;
      dSs[c * (ATT_BR + 1) + rr] = ds;
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        float av = dv[k], ak = dk[k];
        for (int rr = 0; rr < ATT_BR; rr++) {
          av += Ps[c * (ATT_BR + 1) + rr] * dOs[rr * pad + d];
          ak += dSs[c * (ATT_BR + 1) + rr] * Qs[rr * pad + d];
        }
        dv[k] = av;
        dk[k] = ak;
      }
    }
    __syncwarp();
  }
  if (kj < T) {
    float *dkrow = dqkv + ((size_t)b * T + kj) * ld + C + (size_t)h * hs;
    float *dvrow = dkrow + C;
#pragma unroll
    for (int k = 0; k < HSMAX / ATT_TPR; k++) {
      int d = lane4 + ATT_TPR * k;
      if (d < hs) {
        dkrow[d] = dk[k];
        dvrow[d] = dv[k];
      }
    }
  }
}

static size_t att_fwd_smem(int hs) {
  return sizeof(float) * ((size_t)(ATT_BR + 2 * ATT_BC) * (hs + 1) + (size_t)ATT_BR * (ATT_BC + 1));
}
static size_t att_dq_smem(int hs) {
  return sizeof(float) * ((size_t)(2 * ATT_BR + 2 * ATT_BC) * (hs + 1) + (size_t)ATT_BR * (ATT_BC + 1));
}
static size_t att_dkv_smem(int hs) {
  return sizeof(float) * ((size_t)(2 * ATT_BR + 2 * ATT_BC) * (hs + 1) +
                          2 * (size_t)ATT_BC * (ATT_BR + 1) + 2 * ATT_BR);
}

static void att_check_shape(int C, int NH) {
  if (NH <= 0 || C % NH != 0 || C / NH > 256)
    atoll_fatal("cuda: attention supports head sizes up to 256 (C %% NH == 0); got C=%d NH=%d", C,
                NH);
}

/* Launches kernel<HSMAX> with `smem` bytes of dynamic shared memory, raising the
 * kernel's limit above the 48 KiB default when needed (Hopper allows 227 KiB). */
template <typename K>
static void att_prepare(K kernel, size_t smem) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

template <int HSMAX>
static void att_forward_launch(float *out, float *lse, const float *qkv, int B, int T, int C,
                               int NH) {
  size_t smem = att_fwd_smem(C / NH);
  att_prepare(attention_forward_kernel<HSMAX>, smem);
  dim3 grid((T + ATT_BR - 1) / ATT_BR, NH, B);
  attention_forward_kernel<HSMAX><<<grid, ATT_THREADS, smem>>>(out, lse, qkv, T, C, NH);
  LAUNCHED("attention_forward");
}

template <int HSMAX>
static void att_backward_launch(float *dqkv, const float *dout, const float *qkv,
                                const float *lse, const float *D, int B, int T, int C, int NH) {
  dim3 grid((T + ATT_BR - 1) / ATT_BR, NH, B);
  size_t smem = att_dq_smem(C / NH);
  att_prepare(attention_backward_dq_kernel<HSMAX>, smem);
  attention_backward_dq_kernel<HSMAX><<<grid, ATT_THREADS, smem>>>(dqkv, dout, qkv, lse, D, T, C, NH);
  LAUNCHED("attention_backward_dq");
  smem = att_dkv_smem(C / NH);
  att_prepare(attention_backward_dkv_kernel<HSMAX>, smem);
  attention_backward_dkv_kernel<HSMAX><<<grid, ATT_THREADS, smem>>>(dqkv, dout, qkv, lse, D, T, C, NH);
  LAUNCHED("attention_backward_dkv");
}

extern "C" void atoll_cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
                                             int C, int NH) {
  if (B <= 0 || T <= 0) return;
  att_check_shape(C, NH);
  int hs = C / NH;
  if (hs <= 32) att_forward_launch<32>(out, lse, qkv, B, T, C, NH);
  else if (hs <= 64) att_forward_launch<64>(out, lse, qkv, B, T, C, NH);
  else if (hs <= 128) att_forward_launch<128>(out, lse, qkv, B, T, C, NH);
  else att_forward_launch<256>(out, lse, qkv, B, T, C, NH);
}

extern "C" void atoll_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                              const float *out, const float *lse, int B, int T,
                                              int C, int NH) {
  if (B <= 0 || T <= 0) return;
  att_check_shape(C, NH);
  size_t rows = (size_t)B * T * NH;
  float *D = (float *)atoll_cuda_scratch(ATOLL_CUDA_SCRATCH_ATT_D, sizeof(float) * rows);
  attention_rowdot_kernel<<<(unsigned)((rows * 32 + 255) / 256), 256>>>(D, out, dout, B, T, C, NH);
  LAUNCHED("attention_rowdot");
  int hs = C / NH;
  if (hs <= 32) att_backward_launch<32>(dqkv, dout, qkv, lse, D, B, T, C, NH);
  else if (hs <= 64) att_backward_launch<64>(dqkv, dout, qkv, lse, D, B, T, C, NH);
  else if (hs <= 128) att_backward_launch<128>(dqkv, dout, qkv, lse, D, B, T, C, NH);
  else att_backward_launch<256>(dqkv, dout, qkv, lse, D, B, T, C, NH);
}

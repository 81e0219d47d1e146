/* Token and position embeddings (forward, backward) and the cross-entropy at the
 * other end of the model (forward, backward). */
#include "ops/cuda/common.cuh"

/* ---------------------------------------------------------------- embedding --- */

/* dwte: thread (c, slice) owns every row v of dwte with v % EMB_SLICES == slice at
 * column c, and walks the tokens in order: the same additions in the same order as
 * the CPU loop, with no two threads writing one float. Token ids go through shared
 * memory EMB_TILE at a time. */
#define EMB_THREADS 128
#define EMB_SLICES 32
#define EMB_TILE 1024

static __global__ void embed_forward_kernel(float *out, const int32_t *tok, const float *wte,
                                     const float *wpe, int T, int C, size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / (size_t)C;
    int c = (int)(i - n * (size_t)C);
    int t = (int)(n % (size_t)T);
    float e = wte[(size_t)tok[n] * C + c];
    out[i] = wpe ? e + wpe[(size_t)t * C + c] : e; /* no wpe (llama): a copy, as the CPU's memcpy */
  }
}

static __global__ void embed_backward_wpe(float *dwpe, const float *dout, int B, int T, int C) {
  size_t total = (size_t)T * C;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * total + i];
    dwpe[i] = acc;
  }
}

static __global__ void embed_backward_wte(float *dwte, const float *dout, const int32_t *tok, int N,
                                   int C) {
  __shared__ int32_t st[EMB_TILE];
  int c = blockIdx.x * EMB_THREADS + threadIdx.x;
  unsigned slice = blockIdx.y;
  for (int n0 = 0; n0 < N; n0 += EMB_TILE) {
    int cnt = min(EMB_TILE, N - n0);
    __syncthreads();
    for (int i = threadIdx.x; i < cnt; i += EMB_THREADS) st[i] = tok[n0 + i];
    __syncthreads();
    if (c < C) {
      for (int i = 0; i < cnt; i++) {
        unsigned v = (unsigned)st[i];
        if (v % EMB_SLICES != slice) continue;
        dwte[(size_t)v * C + c] += dout[(size_t)(n0 + i) * C + c];
      }
    }
  }
}

extern "C" void atoll_cuda_embed_forward(float *out, const int32_t *tok, const float *wte,
                                         const float *wpe, int B, int T, int C) {
  size_t total = (size_t)B * T * C;
  if (!total) return;
  embed_forward_kernel<<<grid_for(total, 256), 256>>>(out, tok, wte, wpe, T, C, total);
  LAUNCHED("embed_forward");
}

extern "C" void atoll_cuda_embed_backward(float *dwte, float *dwpe, const float *dout,
                                          const int32_t *tok, int B, int T, int C) {
  if ((size_t)B * T * C == 0) return;
  if (dwpe) { /* NULL: no position table (llama) */
    embed_backward_wpe<<<grid_for((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    LAUNCHED("embed_backward_wpe");
  }
  dim3 grid((C + EMB_THREADS - 1) / EMB_THREADS, EMB_SLICES);
  embed_backward_wte<<<grid, EMB_THREADS>>>(dwte, dout, tok, B * T, C);
  LAUNCHED("embed_backward_wte");
}


/* ------------------------------------------------------------ cross-entropy --- */

#define XENT_THREADS 512

/* One block per row: max, then sum of exp(z - max), in a fixed order. */
static __global__ void xent_forward_kernel(float *losses, float *lse, const float *logits,
                                    const int32_t *targets, int V) {
  __shared__ float sh[32];
  int n = blockIdx.x;
  const float *z = logits + (size_t)n * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_max(mx, sh);
  float s = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(z[v] - mx);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    float l = mx + logf(s);
    lse[n] = l;
    losses[n] = l - z[targets[n]];
  }
}

static __global__ void xent_backward_kernel(float *logits, const float *lse, const int32_t *targets,
                                     float dloss, int V, size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / (size_t)V;
    int v = (int)(i - n * (size_t)V);
    float g = expf(logits[i] - lse[n]) * dloss;
    if (v == targets[n]) g -= dloss;
    logits[i] = g;
  }
}

extern "C" void atoll_cuda_xent_forward(float *losses, float *lse, const float *logits,
                                        const int32_t *targets, int N, int V) {
  if (N <= 0) return;
  xent_forward_kernel<<<N, XENT_THREADS>>>(losses, lse, logits, targets, V);
  LAUNCHED("xent_forward");
}

extern "C" void atoll_cuda_xent_backward(float *logits, const float *lse, const int32_t *targets,
                                         float dloss, int N, int V) {
  size_t total = (size_t)N * V;
  if (!total) return;
  xent_backward_kernel<<<grid_for(total, 256), 256>>>(logits, lse, targets, dloss, V, total);
  LAUNCHED("xent_backward");
}

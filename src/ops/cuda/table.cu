/* The CUDA op table: one atoll_ops (src/ops/ops.h) over the kernel families of this
 * folder. gqa_forward (forward only) is there for GPT-2's key/value-cache decoding
 * (atoll sample); the other Llama members (rmsnorm, rope, swiglu, gqa_backward) are
 * NULL: --device cuda refuses --arch llama before any is called (src/train/device.c). */
#include "ops/cuda/common.cuh"

#include <string.h>

static atoll_ops make_table(void) {
  atoll_ops o;
  memset(&o, 0, sizeof o);
  o.name = "cuda";
  o.device = 1; /* buffers are device memory: host code reaches them through the ops below */
  o.alloc = atoll_cuda_alloc;
  o.free = atoll_cuda_free;
  o.to_device = atoll_cuda_copy_to_device; /* cudaMemcpy: synchronous */
  o.to_host = atoll_cuda_copy_to_host;
  o.copy = atoll_cuda_copy_device; /* cudaMemcpyAsync on stream 0 */
  o.zero = atoll_cuda_zero;        /* cudaMemsetAsync on stream 0 */
  o.sumsq = atoll_cuda_sumsq;
  o.adamw = atoll_cuda_adamw;
  o.sgd = atoll_cuda_sgd;
  o.embed_forward = atoll_cuda_embed_forward;
  o.embed_backward = atoll_cuda_embed_backward;
  o.layernorm_forward = atoll_cuda_layernorm_forward;
  o.layernorm_backward = atoll_cuda_layernorm_backward;
  o.matmul_forward = atoll_cuda_matmul_forward;
  o.matmul_backward = atoll_cuda_matmul_backward;
  o.attention_forward = atoll_cuda_attention_forward;
  o.attention_backward = atoll_cuda_attention_backward;
  o.gelu_forward = atoll_cuda_gelu_forward;
  o.gelu_backward = atoll_cuda_gelu_backward;
  o.xent_forward = atoll_cuda_xent_forward;
  o.xent_backward = atoll_cuda_xent_backward;
  o.gqa_forward = atoll_cuda_gqa_forward;
  return o;
}

static const atoll_ops cuda_table = make_table();

extern "C" const atoll_ops *atoll_ops_cuda(int sync_each_op) {
  atoll_cuda_set_sync(sync_each_op);
  return &cuda_table;
}

/* The CUDA op table: one atoll_ops (src/ops/ops.h) over the kernel families of this
 * folder. */
#include "ops/cuda/common.cuh"

#include <string.h>

static atoll_ops make_table(void) {
  atoll_ops o;
  memset(&o, 0, sizeof o);
  o.name = "cuda";
  o.alloc = atoll_cuda_alloc;
  o.free = atoll_cuda_free;
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
  return o;
}

static const atoll_ops cuda_table = make_table();

extern "C" const atoll_ops *atoll_ops_cuda(int sync_each_op) {
  atoll_cuda_set_sync(sync_each_op);
  return &cuda_table;
}

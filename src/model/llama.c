/* The Llama block's forward and backward passes (--arch llama), over the same flat
 * buffer, slots and tensor-/sequence-parallel seams as the GPT-2 block of src/model/gpt.c:
 *
 *   x1 = x  + o(attn(rope(q(n1)), rope(k(n1)), v(n1))),  n1 = rmsnorm_1(x)
 *   x2 = x1 + down(silu(gate(n2)) * up(n2)),              n2 = rmsnorm_2(x1)
 *
 * without biases (but q, k and v's with --qkv-bias 1, Qwen2's attention: added to the
 * products before the rotary embedding); attention groups the query heads over kv_heads key/value heads, each
 * head hs = head_dim wide (dim / heads unless --head-dim; q and the attention output are
 * heads x hs wide, o maps them back to dim). Under
 * tensor parallelism q, k, v, gate and up are column-parallel (a rank holds heads/tp
 * query heads and the kv_heads/tp key/value heads they read, hidden/tp of the SwiGLU
 * width), o and down row-parallel, exactly like qkv/fc and the projections of GPT-2.
 * The rotary embedding is applied in place to q and k after their products; its backward
 * rotates their gradients back. Layout and names: src/model/layout.c. */
#include "model/model_internal.h"

#include <string.h>

typedef struct {
  float *n1, *wq, *wk, *wv, *bq, *bk, *bv, *wo, *n2, *wg, *wu, *wd; /* b*: NULL without --qkv-bias */
} llama_params;

/* The 9 tensors of block l (12 with the q, k, v biases), in layout order. */
static llama_params view(atoll_model *m, float *base, int l) {
  const atoll_tensor *t = &m->lay.tensors[m->lay.t_block0 + m->lay.per_block * m->lay.block_of[l]];
  llama_params p = {0};
  float **plain[9] = {&p.n1, &p.wq, &p.wk, &p.wv, &p.wo, &p.n2, &p.wg, &p.wu, &p.wd};
  float **biased[12] = {&p.n1, &p.wq, &p.wk, &p.wv, &p.bq, &p.bk, &p.bv, &p.wo, &p.n2, &p.wg, &p.wu, &p.wd};
  float ***slots = m->lay.per_block == 12 ? biased : plain;
  for (int i = 0; i < m->lay.per_block; i++) *slots[i] = base + t[i].offset;
  return p;
}

void atoll_llama_block_forward(atoll_model *m, block_acts *a, int l, int B, int T) {
  const atoll_ops *o = m->ops;
  int C = m->s.dim, QW = m->QWl, KW = m->KVl * m->hs, Hl = m->Hl;
  int N = B * T;
  llama_params p = view(m, m->params, l);
  atoll_model_norm_forward(m, a->ln1, a->ln1_bf16, NULL, a->ln1_rstd, a->res_in, p.n1, NULL, N);
  atoll_model_product_forward(m, a->q, a->ln1, a->ln1_bf16, p.wq, p.bq, N, C, QW, 0);
  atoll_model_product_forward(m, a->k, a->ln1, a->ln1_bf16, p.wk, p.bk, N, C, KW, 0);
  atoll_model_product_forward(m, a->v, a->ln1, a->ln1_bf16, p.wv, p.bv, N, C, KW, 0);
  o->rope(a->q, B, T, m->NHl, m->hs, m->rope_freq, 0, 0);
  o->rope(a->k, B, T, m->KVl, m->hs, m->rope_freq, 0, 0);
  o->gqa_forward(a->atty, a->lse, a->q, a->k, a->v, B, T, T, m->NHl, m->KVl, m->hs);
  if (m->kept) o->round_bf16(a->atty_bf16, a->atty, (size_t)N * QW);
  atoll_model_block_out(m, a->res_mid, a->res_in, a->atty, a->atty_bf16, p.wo, NULL, N, QW);
  atoll_model_norm_forward(m, a->ln2, a->ln2_bf16, NULL, a->ln2_rstd, a->res_mid, p.n2, NULL, N);
  atoll_model_product_forward(m, a->fch, a->ln2, a->ln2_bf16, p.wg, NULL, N, C, Hl, 0);
  atoll_model_product_forward(m, a->up, a->ln2, a->ln2_bf16, p.wu, NULL, N, C, Hl, 0);
  if (m->kept)
    o->swiglu_forward_bf16(a->fch_gelu_bf16, a->fch, a->up, (size_t)N * Hl);
  else
    o->swiglu_forward(a->fch_gelu, a->fch, a->up, (size_t)N * Hl);
  atoll_model_block_out(m, a->res_out, a->res_mid, a->fch_gelu, a->fch_gelu_bf16, p.wd, NULL, N, Hl);
}

/* m->dres holds the gradient of the block's output rows on entry and of its input rows
 * on return (the residual passes it through; the norms' backward adds their part). */
void atoll_llama_block_backward(atoll_model *m, block_acts *a, int l, int B, int T) {
  const atoll_ops *o = m->ops;
  int C = m->s.dim, QW = m->QWl, KW = m->KVl * m->hs, Hl = m->Hl;
  int N = B * T, Nl = atoll_model_local_rows(m, N);
  llama_params p = view(m, m->params, l), g = view(m, m->grads, l);
  size_t NH = (size_t)N * Hl;
  float *dgate = m->d4C, *dup = m->d4C + NH;
  /* MLP half */
  atoll_model_product_backward(m, dgate, g.wd, NULL, atoll_model_full_dout(m, m->dres, N), a->fch_gelu,
                               a->fch_gelu_bf16, p.wd, N, Hl, C, 0);
  atoll_model_poll(m);
  if (m->kept) { /* SwiGLU's backward writes the gate and up products' rounded douts */
    uint16_t *dgateb = m->d4C_bf16, *dupb = m->d4C_bf16 + NH;
    o->swiglu_backward_bf16(dgateb, dupb, dgate, a->fch, a->up, NH);
    atoll_model_product_backward_rounded(m, m->dC, g.wg, dgateb, a->ln2_bf16, p.wg, N, C, Hl, 0);
    atoll_model_product_backward_rounded(m, m->dC, g.wu, dupb, a->ln2_bf16, p.wu, N, C, Hl, 1);
  } else {
    o->swiglu_backward(dgate, dup, dgate, a->fch, a->up, NH);
    atoll_model_product_backward(m, m->dC, g.wg, NULL, dgate, a->ln2, NULL, p.wg, N, C, Hl, 0);
    atoll_model_product_backward(m, m->dC, g.wu, NULL, dup, a->ln2, NULL, p.wu, N, C, Hl, 1);
  }
  const float *dn2 = atoll_model_sum_input_grad(m, N);
  atoll_model_poll(m);
  o->rmsnorm_backward(m->dres, g.n2, dn2, a->res_mid, p.n2, a->ln2_rstd, Nl, C);
  /* attention half: dC = gradient of the attention output */
  atoll_model_product_backward(m, m->dC, g.wo, NULL, atoll_model_full_dout(m, m->dres, N), a->atty, a->atty_bf16,
                               p.wo, N, QW, C, 0);
  atoll_model_poll(m);
  float *dq = m->d3C, *dk = dq + (size_t)N * QW, *dv = dk + (size_t)N * KW;
  o->gqa_backward(dq, dk, dv, m->dC, a->q, a->k, a->v, a->atty, a->lse, B, T, m->NHl, m->KVl, m->hs);
  atoll_model_poll(m);
  o->rope(dq, B, T, m->NHl, m->hs, m->rope_freq, 0, 1);
  o->rope(dk, B, T, m->KVl, m->hs, m->rope_freq, 0, 1);
  atoll_model_product_backward(m, m->dC, g.wq, g.bq, dq, a->ln1, a->ln1_bf16, p.wq, N, C, QW, 0);
  atoll_model_product_backward(m, m->dC, g.wk, g.bk, dk, a->ln1, a->ln1_bf16, p.wk, N, C, KW, 1);
  atoll_model_product_backward(m, m->dC, g.wv, g.bv, dv, a->ln1, a->ln1_bf16, p.wv, N, C, KW, 1);
  const float *dn1 = atoll_model_sum_input_grad(m, N);
  atoll_model_poll(m);
  o->rmsnorm_backward(m->dres, g.n1, dn1, a->res_in, p.n1, a->ln1_rstd, Nl, C);
}

/* bf16 inputs kept by the passes (ops.h, model_internal.h: m->kept): the products'
 * inputs are rounded once, by their producers, and read again by backward.
 *  - the kept kernels of the bf16 table give the bits of the kernels they replace:
 *    LayerNorm, GELU, RMSNorm and SwiGLU written in bf16 = the fp32 kernel's output
 *    rounded; a product on
 *    rounded x and w = the bf16 table's product on the fp32 ones (forward at beta 0 and 1,
 *    with and without bias; backward's dx, dw and dbias), including empty sizes; GELU's
 *    backward written as the next product's rounded dout with its bias gradient = GELU's
 *    fp32 backward followed by the bf16 product; the cross-entropy's backward written as
 *    the LM head's rounded dout = xent_backward's dlogits rounded;
 *  - a whole model created on the bf16 table (kept inputs and weights; and with
 *    atoll_model_keep_weights 0, as under ZeRO-3) against the same model switched to it
 *    after creation (every product rounds its own inputs): the same loss and gradients
 *    bit for bit over two accumulated micro-batches, for GPT-2 and Llama;
 *  - atoll_model_bytes counts the kept weight copy apart from the activations.
 * Skipped (exit 77) where bf16 cannot run. */
#include "check.h"
#include "core/rng.h"
#include "model/layout.h"
#include "model/model.h"
#include "ops/gemm_cpu.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_rng rng;

static float *randn(size_t n, float scale) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = atoll_rng_normal(&rng) * scale;
  return p;
}

static uint16_t *rounded(const float *x, size_t n) {
  uint16_t *b = malloc((n ? n : 1) * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) b[i] = atoll_bf16_from_f32(x[i]);
  return b;
}

/* the fp32 values of o rounded, against the kept kernel's bf16 output */
static int same_rounding(const float *o, const uint16_t *ob, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (atoll_bf16_from_f32(o[i]) != ob[i]) return 0;
  return 1;
}

static void test_producers(const atoll_ops *h) {
  int N = 37, C = 96;
  float *x = randn((size_t)N * C, 2.0f), *w = randn(C, 1.0f), *b = randn(C, 0.5f);
  float *o = malloc(sizeof(float) * N * C), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
  float *mean2 = malloc(sizeof(float) * N), *rstd2 = malloc(sizeof(float) * N);
  uint16_t *ob = malloc(sizeof(uint16_t) * N * C);
  h->layernorm_forward(o, mean, rstd, x, w, b, N, C);
  h->layernorm_forward_bf16(ob, mean2, rstd2, x, w, b, N, C);
  CHECK(same_rounding(o, ob, (size_t)N * C));
  CHECK(memcmp(mean, mean2, sizeof(float) * N) == 0 && memcmp(rstd, rstd2, sizeof(float) * N) == 0);
  size_t n = (size_t)N * C - 5; /* not a whole number of vector blocks */
  h->gelu_forward(o, x, n);
  h->gelu_forward_bf16(ob, x, n);
  CHECK(same_rounding(o, ob, n));
  h->round_bf16(ob, x, n);
  CHECK(same_rounding(x, ob, n));
  h->rmsnorm_forward(o, rstd, x, w, N, C, 1e-5f);
  h->rmsnorm_forward_bf16(ob, rstd2, x, w, N, C, 1e-5f);
  CHECK(same_rounding(o, ob, (size_t)N * C) && memcmp(rstd, rstd2, sizeof(float) * N) == 0);
  float *up = x + 3; /* any second input */
  h->swiglu_forward(o, x, up, n - 3);
  h->swiglu_forward_bf16(ob, x, up, n - 3);
  CHECK(same_rounding(o, ob, n - 3));
  free(x), free(w), free(b), free(o), free(mean), free(rstd), free(mean2), free(rstd2), free(ob);
}

/* the kept product against the bf16 table's product, at one size */
static void check_product(const atoll_ops *h, int N, int C, int OC) {
  size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
  float *x = randn(NC, 1.0f), *w = randn(OCC, 0.3f), *bias = randn(OC, 0.5f), *dout = randn(NO, 1.0f);
  uint16_t *xb = rounded(x, NC), *wb = rounded(w, OCC);
  float *base = randn(NO, 1.0f), *o1 = malloc(sizeof(float) * (NO + 1)), *o2 = malloc(sizeof(float) * (NO + 1));
  for (int acc = 0; acc < 2; acc++)
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      memcpy(o1, base, sizeof(float) * NO), memcpy(o2, base, sizeof(float) * NO);
      h->matmul_forward(o1, x, w, with_bias ? bias : NULL, N, C, OC, acc);
      h->matmul_forward_bf16(o2, xb, wb, with_bias ? bias : NULL, N, C, OC, acc);
      CHECK(memcmp(o1, o2, sizeof(float) * NO) == 0);
    }
  float *dx0 = randn(NC, 1.0f), *dw0 = randn(OCC, 1.0f), *db0 = randn(OC, 1.0f);
  float *dx1 = malloc(sizeof(float) * (NC + 1)), *dw1 = malloc(sizeof(float) * (OCC + 1)), *db1 = malloc(sizeof(float) * (OC + 1));
  float *dx2 = malloc(sizeof(float) * (NC + 1)), *dw2 = malloc(sizeof(float) * (OCC + 1)), *db2 = malloc(sizeof(float) * (OC + 1));
  for (int acc = 0; acc < 2; acc++) {
    memcpy(dx1, dx0, sizeof(float) * NC), memcpy(dw1, dw0, sizeof(float) * OCC), memcpy(db1, db0, sizeof(float) * OC);
    memcpy(dx2, dx0, sizeof(float) * NC), memcpy(dw2, dw0, sizeof(float) * OCC), memcpy(db2, db0, sizeof(float) * OC);
    h->matmul_backward(dx1, dw1, acc ? db1 : NULL, dout, x, w, N, C, OC, acc);
    h->matmul_backward_bf16(dx2, dw2, acc ? db2 : NULL, dout, xb, wb, N, C, OC, acc);
    CHECK(memcmp(dx1, dx2, sizeof(float) * NC) == 0);
    CHECK(memcmp(dw1, dw2, sizeof(float) * OCC) == 0);
    CHECK(memcmp(db1, db2, sizeof(float) * OC) == 0);
  }
  free(x), free(w), free(bias), free(dout), free(xb), free(wb), free(base), free(o1), free(o2);
  free(dx0), free(dw0), free(db0), free(dx1), free(dw1), free(db1), free(dx2), free(dw2), free(db2);
}

/* GELU's backward writing fc's rounded dout with its bias gradient, then the product on
 * it, against gelu_backward and the bf16 table's product on the fp32 dout */
static void test_gelu_into_product(const atoll_ops *h) {
  int N = 33, C = 48, OC = 200; /* OC: not a whole number of channel chunks */
  size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
  float *pre = randn(NO, 1.5f), *dout = randn(NO, 1.0f), *x = randn(NC, 1.0f), *w = randn(OCC, 0.3f);
  float *g = malloc(sizeof(float) * NO), *db1 = randn(OC, 1.0f), *db2 = malloc(sizeof(float) * OC);
  float *dx1 = malloc(sizeof(float) * NC), *dx2 = malloc(sizeof(float) * NC);
  float *dw1 = randn(OCC, 1.0f), *dw2 = malloc(sizeof(float) * OCC);
  uint16_t *gb = malloc(sizeof(uint16_t) * NO), *xb = rounded(x, NC), *wb = rounded(w, OCC);
  memcpy(db2, db1, sizeof(float) * OC), memcpy(dw2, dw1, sizeof(float) * OCC);
  h->gelu_backward(g, pre, dout, NO);
  h->matmul_backward(dx1, dw1, db1, g, x, w, N, C, OC, 0);
  h->gelu_backward_bf16(gb, db2, pre, dout, N, OC);
  CHECK(same_rounding(g, gb, NO));
  h->matmul_backward_rounded(dx2, dw2, gb, xb, wb, N, C, OC, 0);
  CHECK(memcmp(db1, db2, sizeof(float) * OC) == 0);
  CHECK(memcmp(dx1, dx2, sizeof(float) * NC) == 0 && memcmp(dw1, dw2, sizeof(float) * OCC) == 0);
  free(pre), free(dout), free(x), free(w), free(g), free(db1), free(db2), free(dx1), free(dx2), free(dw1), free(dw2);
  free(gb), free(xb), free(wb);
}

/* the cross-entropy's backward written as the LM head's rounded dout, against
 * xent_backward's fp32 dlogits rounded; the logits stay as they were */
static void test_xent_into_product(const atoll_ops *h) {
  int N = 7, V = 1000; /* V: not a whole number of vectors */
  size_t NV = (size_t)N * V;
  float *z = randn(NV, 3.0f), *z0 = malloc(sizeof(float) * NV), *losses = malloc(sizeof(float) * N);
  float *lse = malloc(sizeof(float) * N);
  int32_t targets[7] = {0, 999, 500, 1, 998, 17, 500};
  uint16_t *db = malloc(sizeof(uint16_t) * NV);
  memcpy(z0, z, sizeof(float) * NV);
  h->xent_forward(losses, lse, z, targets, N, V);
  h->xent_backward_bf16(db, z, lse, targets, 0.125f, N, V);
  CHECK(memcmp(z, z0, sizeof(float) * NV) == 0);
  h->xent_backward(z, lse, targets, 0.125f, N, V);
  CHECK(same_rounding(z, db, NV));
  free(z), free(z0), free(losses), free(lse), free(db);
}

static void test_products(const atoll_ops *h) {
  check_product(h, 37, 96, 80);
  check_product(h, 64, 128, 384);
  check_product(h, 5, 0, 7); /* empty sums: zeros, or C as it was */
  check_product(h, 5, 7, 0);
  check_product(h, 0, 7, 5);
}

/* GPT-2 or Llama: kept inputs (weights kept, and rounded again in backward as under
 * ZeRO-3) against rounding at every product, two micro-batches accumulated */
static void test_model(const atoll_shape *s) {
  atoll_err err;
  int B = 2, T = 32;
  atoll_part whole = atoll_part_whole();
  atoll_model *ms[3]; /* kept, kept without weights, per product */
  for (int k = 0; k < 2; k++)
    CHECK_OK(atoll_model_create_on(&ms[k], s, &whole, B, T, 1, atoll_ops_cpu_bf16(), &err), &err);
  atoll_model_keep_weights(ms[1], 0);
  CHECK_OK(atoll_model_create(&ms[2], s, B, T, &err), &err);
  atoll_model_set_ops(ms[2], atoll_ops_cpu_bf16()); /* buffers made for fp32: no kept inputs */
  size_t P = atoll_model_layout(ms[0])->nparams;
  int32_t *tok = malloc(sizeof(int32_t) * (B * T + 1) * 2);
  for (int i = 0; i < (B * T + 1) * 2; i++) tok[i] = (int32_t)(atoll_rng_next(&rng) % (uint64_t)s->vocab);
  float loss[3][2];
  for (int k = 0; k < 3; k++) {
    CHECK_OK(atoll_model_init_weights(ms[k], 11), &err);
    atoll_model_zero_grads(ms[k]);
    for (int micro = 0; micro < 2; micro++) {
      const int32_t *in = tok + micro * (B * T + 1);
      loss[k][micro] = atoll_model_forward(ms[k], in, in + 1, B, T);
      atoll_model_backward(ms[k], 0.5f);
    }
  }
  printf("%s: losses kept %.7f %.7f, weights not kept %.7f %.7f, per product %.7f %.7f\n", s->arch, loss[0][0],
         loss[0][1], loss[1][0], loss[1][1], loss[2][0], loss[2][1]);
  for (int k = 1; k < 3; k++) {
    CHECK(memcmp(loss[0], loss[k], sizeof loss[0]) == 0);
    CHECK(memcmp(atoll_model_grads(ms[0]), atoll_model_grads(ms[k]), P * sizeof(float)) == 0);
  }
  double norm = 0;
  for (size_t i = 0; i < P; i++) norm += (double)atoll_model_grads(ms[0])[i] * atoll_model_grads(ms[0])[i];
  CHECK(norm > 0); /* gradients really flowed */
  free(tok);
  for (int k = 0; k < 3; k++) atoll_model_destroy(ms[k]);
}

/* the start-up memory estimate counts the kept copies: 2 bytes a parameter of weights, and
 * fewer activation bytes than at fp32 (bf16 copies instead of fp32 ln_1, ln_2, GELU),
 * at 16 sequences of 32: the kept model also counts buffers that do not grow with the
 * batch (a weight's rounding scratch) and the LM head's rounded output gradient (N x V
 * bf16), which at 4 sequences made Llama's even */
static void test_bytes(const atoll_shape *s) {
  atoll_err err;
  atoll_part whole = atoll_part_whole();
  atoll_model_mem f, h;
  CHECK_OK(atoll_model_bytes(s, &whole, 16, 32, 1, NULL, &f, &err), &err);
  CHECK_OK(atoll_model_bytes(s, &whole, 16, 32, 1, atoll_ops_cpu_bf16(), &h, &err), &err);
  size_t P = f.weights / sizeof(float);
  CHECK(f.weights_bf16 == 0 && h.weights_bf16 >= 2 * P && h.weights_bf16 <= 2 * P + 4);
  printf("%s: activation bytes %zu kept, %zu at fp32\n", s->arch, (size_t)h.acts, (size_t)f.acts);
  CHECK(h.weights == f.weights && h.grads == f.grads && h.acts < f.acts);
}

int main(void) {
  atoll_rng_seed(&rng, 20261202);
  if (atoll_gemm_bf16_check(NULL) != 0) {
    printf("bf16 cannot run here: skipped\n");
    return 77;
  }
  const atoll_ops *h = atoll_ops_cpu_bf16();
  CHECK(h->round_bf16 && h->layernorm_forward_bf16 && h->gelu_forward_bf16 && h->rmsnorm_forward_bf16 &&
        h->swiglu_forward_bf16 && h->matmul_forward_bf16 && h->matmul_backward_bf16 && h->gelu_backward_bf16 &&
        h->matmul_backward_rounded && h->xent_backward_bf16);
  CHECK(!atoll_ops_cpu()->matmul_forward_bf16); /* the fp32 table rounds nothing */
  test_producers(h);
  test_products(h);
  test_gelu_into_product(h);
  test_xent_into_product(h);
  atoll_shape gpt2 = {.layers = 2, .heads = 4, .dim = 64, .context = 32, .vocab = 96, .arch = "gpt2"};
  atoll_shape llama = {.layers = 2, .heads = 4, .dim = 64, .context = 32, .vocab = 96, .arch = "llama",
                       .kv_heads = 2, .multiple_of = 32};
  test_model(&gpt2);
  test_model(&llama);
  test_bytes(&gpt2);
  test_bytes(&llama);
  CHECK_DONE();
}

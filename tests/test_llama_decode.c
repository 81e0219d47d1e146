/* Generation with the key/value cache (src/model/decode.c) equals the full forward pass
 * over the window (what atoll sample did without a cache), for both archs: at every
 * step (Llama also with Qwen2's q/k/v biases, and with heads wider than dim / heads) of 40 tokens with a 16-token context (so the window slides and the cache is
 * refilled, as src/infer/sample.c does), the last position's logits agree within 1e-4
 * of their largest magnitude, and the greedy (temperature 0) tokens are the same. The
 * weights are the initial ones scaled up 4x, so the logits are far from ties. */
#include "check.h"
#include "model/decode.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int argmax(const float *z, int V) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (z[v] > z[best]) best = v;
  return best;
}

static void check_arch(const atoll_shape *s) {
  atoll_err err;
  atoll_model *m = NULL;
  CHECK_OK(atoll_model_create(&m, s, 1, s->context, &err), &err);
  if (!m) return;
  atoll_model_init_weights(m, 5);
  float *p = atoll_model_params(m);
  const atoll_layout *lay = atoll_model_layout(m);
  for (size_t i = 0; i < lay->nparams; i++) p[i] *= 4.0f;
  for (int i = 0; i < lay->ntensors; i++) /* biases (zero at first) away from zero */
    if (strstr(lay->tensors[i].name, ".bias"))
      for (size_t k = 0; k < lay->tensors[i].numel; k++) p[lay->tensors[i].offset + k] = 0.5f * sinf((float)k + 1.0f);
  atoll_decoder *d = NULL;
  CHECK_OK(atoll_decoder_create(&d, m, &err), &err);
  if (!d) return;
  enum { TOKENS = 40, PROMPT = 3 };
  int32_t seq[PROMPT + TOKENS] = {1, 2, 3}; /* ids inside the vocabulary */
  int n = PROMPT, V = s->vocab, C = s->context, same_tokens = 1;
  double worst = 0;
  for (int k = 0; k < TOKENS; k++) {
    int win = n < C ? n : C;
    atoll_model_forward(m, seq + (n - win), NULL, 1, win);
    const float *full = atoll_model_logits(m) + (size_t)(win - 1) * V;
    if (n > C) atoll_decoder_reset(d);
    int cached = atoll_decoder_pos(d);
    const float *fast = atoll_decoder_step(d, seq + (n - win) + cached, win - cached);
    CHECK(fast != NULL);
    if (!fast) break;
    double mx = 0, e = 0;
    for (int v = 0; v < V; v++) {
      mx = fabs(full[v]) > mx ? fabs(full[v]) : mx;
      e = fabs(full[v] - fast[v]) > e ? fabs(full[v] - fast[v]) : e;
    }
    worst = e / mx > worst ? e / mx : worst;
    int t = argmax(full, V);
    same_tokens &= t == argmax(fast, V);
    seq[n++] = t;
  }
  printf("%s%s%s: 40 tokens, worst logits error %.2g, greedy tokens %s\n", s->arch, s->qkv_bias ? " (qkv biases)" : "",
         s->head_dim ? " (head-dim 12)" : "", worst, same_tokens ? "equal" : "DIFFER");
  CHECK(worst <= 1e-4);
  CHECK(same_tokens);
  /* a step past the context is refused, not written out of bounds */
  atoll_decoder_reset(d);
  CHECK(atoll_decoder_step(d, seq, C + 1 <= PROMPT + TOKENS ? C + 1 : 1) == NULL);
  atoll_decoder_destroy(d);
  atoll_model_destroy(m);
}

int main(void) {
  atoll_shape gpt2 = {.layers = 2, .heads = 4, .dim = 32, .context = 16, .vocab = 64, .arch = "gpt2"};
  atoll_shape llama = {.layers = 2, .heads = 4, .dim = 32, .context = 16, .vocab = 64, .arch = "llama",
                       .kv_heads = 2, .multiple_of = 16, .rope_theta = 500.0f};
  atoll_shape llama_tied = llama;
  llama_tied.tie = 1;
  llama_tied.kv_heads = 1;
  check_arch(&gpt2);
  check_arch(&llama);
  check_arch(&llama_tied);
  atoll_shape qwen2 = llama; /* Qwen2's attention: q, k and v products with biases */
  qwen2.qkv_bias = 1;
  check_arch(&qwen2);
  atoll_shape wide = llama; /* heads 12 wide, not dim / heads = 8: q and the attention output 48 wide */
  wide.head_dim = 12;
  check_arch(&wide);
  CHECK_DONE();
}

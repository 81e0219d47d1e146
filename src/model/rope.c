/* The rotary embedding's frequencies of a Llama shape (src/model/layout.h), read by the
 * rope op (src/ops/ops.h) as a table: one per pair (i, i + hs/2) of a head.
 *
 * Without scaling, pair i turns by w_i = theta^(-2i/hs) per position. Llama 3.1's
 * scaling ("llama3") stretches the slow pairs so that a model trained at a context of
 * L = rope_orig_context tokens reaches farther: with the pair's wavelength
 * lambda_i = 2 pi / w_i,
 *   lambda_i < L / high_freq:  w_i is kept (it turns many times within L)
 *   lambda_i > L / low_freq:   w_i / factor
 *   otherwise:                 (1 - s) w_i / factor + s w_i, s = (L / lambda_i - low_freq) / (high_freq - low_freq)
 * (docs/formats.md, "Import from Hugging Face"). */
#include "model/layout.h"

#include <math.h>
#include <string.h>

int atoll_shape_rope_llama3(const atoll_shape *s) { return strcmp(s->rope_scaling, "llama3") == 0; }

int atoll_shape_rope_check(const atoll_shape *s, atoll_err *err) {
  if (s->rope_scaling[0] && strcmp(s->rope_scaling, "none") != 0 && !atoll_shape_rope_llama3(s))
    return atoll_fail(err, "rope-scaling: unknown '%.8s' (known: none, llama3)", s->rope_scaling);
  if (!atoll_shape_rope_llama3(s)) return 0;
  if (!(s->rope_factor >= 1.0f) || !(s->rope_low_freq > 0.0f) || !(s->rope_high_freq > s->rope_low_freq) ||
      s->rope_orig_context < 1)
    return atoll_fail(err, "rope-scaling llama3: needs rope-factor >= 1, 0 < rope-low-freq-factor < "
                      "rope-high-freq-factor and rope-original-context >= 1 (got %g, %g, %g, %d)",
                      s->rope_factor, s->rope_low_freq, s->rope_high_freq, s->rope_orig_context);
  return 0;
}

int atoll_shape_rope_same(const atoll_shape *a, const atoll_shape *b) {
  if (atoll_shape_rope_theta(a) != atoll_shape_rope_theta(b)) return 0;
  if (atoll_shape_rope_llama3(a) != atoll_shape_rope_llama3(b)) return 0;
  return !atoll_shape_rope_llama3(a) ||
         (a->rope_factor == b->rope_factor && a->rope_low_freq == b->rope_low_freq &&
          a->rope_high_freq == b->rope_high_freq && a->rope_orig_context == b->rope_orig_context);
}

void atoll_shape_rope_freqs(const atoll_shape *s, double *freq) {
  int hs = atoll_shape_head_dim(s), half = hs / 2;
  double theta = atoll_shape_rope_theta(s);
  double L = s->rope_orig_context, lo = s->rope_low_freq, hi = s->rope_high_freq, f = s->rope_factor;
  for (int i = 0; i < half; i++) {
    double w = pow(theta, -2.0 * i / hs);
    if (atoll_shape_rope_llama3(s)) {
      double lambda = 2.0 * M_PI / w;
      if (lambda > L / lo)
        w /= f;
      else if (lambda >= L / hi) {
        double sm = (L / lambda - lo) / (hi - lo);
        w = (1.0 - sm) * w / f + sm * w;
      }
    }
    freq[i] = w;
  }
}

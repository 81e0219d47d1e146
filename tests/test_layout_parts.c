/* Model parts (tensor x pipeline cuts of the parameter layout): the owned runs of all
 * parts cover the whole model exactly once, every element of every part maps to the
 * whole model's element of the same value, units tile each part (interleaved parts
 * hold several chunks), and bad cuts fail naming the flag. */
#include "atoll/atoll.h"
#include "check.h"
#include "model/layout.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const atoll_layout *part;
  int *covered;       /* per whole-model element: times an owned run covered it */
  size_t part_floats; /* floats mapped */
  const float *whole_values;
  float *part_values;
} cover_ctx;

static void cover(void *ctx, const atoll_tensor *t, size_t part_off, size_t whole_off, size_t n) {
  cover_ctx *c = ctx;
  c->part_floats += n;
  memcpy(c->part_values + part_off, c->whole_values + whole_off, n * sizeof(float));
  if (atoll_layout_owns(c->part, t))
    for (size_t i = 0; i < n; i++) c->covered[whole_off + i]++;
}

static void check_cuts(const atoll_shape *s, int tp, int pp, int v) {
  atoll_err err;
  atoll_layout whole;
  CHECK_OK(atoll_layout_init(&whole, s, &err), &err);
  int *covered = calloc(whole.nparams, sizeof(int));
  float *values = malloc(whole.nparams * sizeof(float));
  for (size_t i = 0; i < whole.nparams; i++) values[i] = (float)i;
  for (int st = 0; st < pp; st++)
    for (int r = 0; r < tp; r++) {
      atoll_part part = {tp, r, st, pp, v, 0};
      atoll_layout lay;
      CHECK_OK(atoll_layout_init_part(&lay, s, &part, &err), &err);
      float *pv = malloc(lay.nparams * sizeof(float));
      cover_ctx c = {&lay, covered, 0, values, pv};
      atoll_layout_runs(&lay, &whole, cover, &c);
      CHECK(c.part_floats == lay.nparams); /* every element of the part maps somewhere */
      /* a qkv weight row of the part is the whole's row of the same head: rank r's
       * first q row is whole row r C/tp, its first k row C + r C/tp */
      const atoll_tensor *q = atoll_layout_find(&lay, "h.0.attn.qkv.weight");
      const atoll_tensor *wq = atoll_layout_find(&whole, "h.0.attn.qkv.weight");
      if (q && wq) {
        size_t C = (size_t)s->dim, rows = C / tp;
        CHECK(pv[q->offset] == values[wq->offset + r * rows * C]);
        CHECK(pv[q->offset + rows * C] == values[wq->offset + (C + r * rows) * C]);
      }
      /* row-parallel: rank r holds columns [r C/tp, (r+1) C/tp) of every row */
      const atoll_tensor *pr = atoll_layout_find(&lay, "h.0.attn.proj.weight");
      const atoll_tensor *wpr = atoll_layout_find(&whole, "h.0.attn.proj.weight");
      if (pr && wpr) {
        size_t C = (size_t)s->dim, cols = C / tp;
        CHECK(pv[pr->offset + cols] == values[wpr->offset + C + r * cols]); /* row 1, first column */
      }
      /* units tile the part in order -1, 0, ..., layers */
      size_t at = 0;
      for (int u = -1; u <= s->layers; u++) {
        size_t b, e;
        atoll_layout_unit(&lay, u, &b, &e);
        CHECK(b == at && e >= b);
        int held = u < 0 ? (lay.first_stage || lay.last_stage) : u == s->layers;
        if (u == s->layers) held = lay.last_stage;
        for (int c = 0; c < v && u >= 0 && u < s->layers; c++) {
          int b0, e0; /* chunk c of stage st: virtual stage c pp + st */
          atoll_part_chunk_range(s->layers, c * pp + st, pp * v, &b0, &e0);
          if (u >= b0 && u < e0) held = 1;
        }
        CHECK((e > b) == held);
        at = e;
      }
      CHECK(at == lay.nparams);
      free(pv);
      atoll_layout_free(&lay);
    }
  for (size_t i = 0; i < whole.nparams; i++)
    if (covered[i] != 1) {
      fprintf(stderr, "tp %d pp %d v %d: whole element %zu owned %d times\n", tp, pp, v, i, covered[i]);
      CHECK(covered[i] == 1);
      break;
    }
  free(covered);
  free(values);
  atoll_layout_free(&whole);
}

int main(void) {
  atoll_shape s = {.layers = 6, .heads = 4, .dim = 16, .context = 8, .vocab = 32};
  /* tp, pp, chunks per stage (interleaved) */
  int cuts[][3] = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {1, 2, 1}, {1, 4, 1}, {2, 2, 1},
                   {4, 3, 1}, {1, 6, 1}, {1, 2, 3}, {2, 3, 2}, {1, 4, 1}};
  for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) check_cuts(&s, cuts[i][0], cuts[i][1], cuts[i][2]);

  atoll_err err;
  atoll_layout lay;
  atoll_part bad_tp = {3, 0, 0, 1, 1, 0};
  CHECK(atoll_layout_init_part(&lay, &s, &bad_tp, &err) != 0 && strstr(err.msg, "--tp 3"));
  atoll_shape odd = s;
  odd.vocab = 33;
  atoll_part tp2 = {2, 0, 0, 1, 1, 0};
  CHECK(atoll_layout_init_part(&lay, &odd, &tp2, &err) != 0 && strstr(err.msg, "vocab"));
  atoll_part empty = {1, 0, 0, 4, 2, 0}; /* 8 chunks of 6 layers */
  CHECK(atoll_layout_init_part(&lay, &s, &empty, &err) != 0 && strstr(err.msg, "--virtual-stages"));
  CHECK_DONE();
}

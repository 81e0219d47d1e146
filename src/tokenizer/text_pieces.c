#include "tokenizer/text_pieces.h"

#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* Hands t->p[0, n) to fn and drops it. */
static int hand_on(atoll_text_pieces *t, size_t n, atoll_piece_fn fn, void *ctx) {
  if (n == 0) return 0;
  if (fn(ctx, t->p, n) != 0) return -1;
  memmove(t->p, t->p + n, t->n - n);
  t->n -= n;
  t->scanned = 0;
  return 0;
}

int atoll_text_pieces_add(atoll_text_pieces *t, const uint8_t *p, size_t n, atoll_piece_fn fn, void *ctx) {
  if (t->cap - t->n < n) {
    size_t cap = t->cap ? t->cap : t->piece;
    while (cap - t->n < n) cap *= 2;
    uint8_t *grown = realloc(t->p, cap);
    if (!grown) return -2;
    t->p = grown;
    t->cap = cap;
  }
  memcpy(t->p + t->n, p, n);
  t->n += n;
  while (t->n > t->piece) {
    size_t from = t->scanned > t->piece ? t->scanned : t->piece;
    size_t cut = t->tok ? atoll_tokenizer_cut(t->tok, t->p, t->n, from) : atoll_tokenizer_safe_cut(t->p, t->n, from);
    if (cut >= t->n) {
      t->scanned = t->n;
      break;
    }
    if (hand_on(t, cut, fn, ctx) != 0) return -1;
  }
  return 0;
}

int atoll_text_pieces_end(atoll_text_pieces *t, atoll_piece_fn fn, void *ctx) { return hand_on(t, t->n, fn, ctx); }

void atoll_text_pieces_free(atoll_text_pieces *t) {
  free(t->p);
  memset(t, 0, sizeof *t);
}

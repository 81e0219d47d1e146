/* Text held until it can be cut where encoding it in pieces gives the tokens of encoding
 * it whole (atoll_tokenizer_safe_cut: no pre-token crosses the cut). prepare encodes, and
 * tokenizer train counts words, in pieces of a little over `piece` bytes, whatever sizes
 * the text arrives in; text without a safe cut is held until one comes or the text ends. */
#ifndef ATOLL_TEXT_PIECES_H
#define ATOLL_TEXT_PIECES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint8_t *p;
  size_t n, cap;
  size_t scanned; /* p[0, scanned) holds no safe cut at or past piece */
  size_t piece;   /* set by the caller */
  const struct atoll_tokenizer *tok; /* whose cuts (atoll_tokenizer_cut); NULL: GPT-2's (atoll_tokenizer_safe_cut) */
} atoll_text_pieces;

/* Where a piece goes: 0, or -1 (the callee's error). */
typedef int (*atoll_piece_fn)(void *ctx, const uint8_t *text, size_t n);

/* Appends p[0, n) and hands every head that can be cut to fn, dropping it: 0, -1 when fn
 * failed, -2 out of memory. */
int atoll_text_pieces_add(atoll_text_pieces *t, const uint8_t *p, size_t n, atoll_piece_fn fn, void *ctx);

/* The text ends: all that is held goes to fn (nothing when nothing is held). */
int atoll_text_pieces_end(atoll_text_pieces *t, atoll_piece_fn fn, void *ctx);

void atoll_text_pieces_free(atoll_text_pieces *t);

#endif

/* Unicode classes for the GPT-2 pre-tokenizer: letter (\p{L}), number (\p{N}),
 * whitespace (\s), anything else. The table is generated (scripts/gen_unicode_table.py). */
#ifndef ATOLL_TOKENIZER_UNICODE_H
#define ATOLL_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { ATOLL_UC_OTHER = 0, ATOLL_UC_LETTER = 1, ATOLL_UC_NUMBER = 2, ATOLL_UC_SPACE = 3 };

typedef struct {
  uint32_t lo, hi; /* inclusive */
  uint8_t klass;
} atoll_unicode_range;

extern const atoll_unicode_range atoll_unicode_ranges[];
extern const int atoll_unicode_nranges;

/* The class of code point cp. */
int atoll_unicode_class(uint32_t cp);

/* Decodes one UTF-8 character at s[0..n) (n >= 1): returns its length in bytes and sets
 * *cp. An invalid or truncated sequence (overlong, surrogate, > U+10FFFF, stray
 * continuation byte) counts as one byte of class "other": *cp = 0xFFFFFFFF. */
int atoll_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);

#endif

#include "atoll/atoll.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shortest a word is cut to, "..." included. */
#define MIN_WORD 24

/* Copies text into out (cap bytes) whole when it fits. A longer text (a message with a
 * long path) has its longest words (runs without a space: paths) cut in the middle to
 * "head...tail", longest first, until it fits, so that the reason after a path always
 * shows; a text that is still too long loses the middle of the whole (its end is
 * kept: messages end with the reason). */
static void fit_message(char *out, size_t cap, char *text) {
  size_t len = strlen(text);
  while (len >= cap) {
    size_t best = 0, best_len = 0;
    for (size_t i = 0; i < len;) {
      size_t j = i;
      while (j < len && text[j] != ' ') j++;
      if (j - i > best_len) best = i, best_len = j - i;
      i = j + 1;
    }
    if (best_len <= MIN_WORD) break;
    size_t excess = len - (cap - 1);
    /* the bytes of the word kept around "...": enough cut to fit, or down to MIN_WORD */
    size_t keep = excess + MIN_WORD <= best_len ? best_len - excess - 3 : MIN_WORD - 3;
    size_t head = keep / 2, tail = keep - head;
    char *w = text + best;
    memcpy(w + head, "...", 3);
    memmove(w + head + 3, w + best_len - tail, len - (best + best_len - tail) + 1);
    len = strlen(text);
  }
  if (len < cap) {
    memcpy(out, text, len + 1);
    return;
  }
  /* still too long (many long words): the middle of the whole text goes, its end stays */
  size_t head = (cap - 4) / 2, tail = cap - 4 - head;
  memcpy(out, text, head);
  memcpy(out + head, "...", 3);
  memcpy(out + head + 3, text + len - tail, tail + 1);
}

int atoll_fail(atoll_err *err, const char *fmt, ...) {
  if (!err) return -1;
  char small[2048], *text = small;
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof small) { /* formatted again, whole, to be shortened */
    char *big = malloc((size_t)n + 1);
    if (big && vsnprintf(big, (size_t)n + 1, fmt, again) >= 0) text = big;
    else free(big);
  }
  va_end(again);
  if (n < 0) small[0] = 0;
  fit_message(err->msg, sizeof err->msg, text); /* text may have been err->msg itself: formatted apart first */
  if (text != small) free(text);
  return -1;
}

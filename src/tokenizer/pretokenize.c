/* GPT-2's pre-tokenization, written out by hand instead of a regex engine:
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * The alternatives are tried in order at each position, each greedy, as the regex
 * engine would. Bytes that are not valid UTF-8 count as one character each of class
 * "other" (Hugging Face only takes valid UTF-8, so it has no rule for them). */
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

/* ASCII classes, the common case */
static const uint8_t ascii_class[128] = {
    ['\t'] = ATOLL_UC_SPACE, ['\n'] = ATOLL_UC_SPACE, ['\v'] = ATOLL_UC_SPACE,
    ['\f'] = ATOLL_UC_SPACE, ['\r'] = ATOLL_UC_SPACE, [' '] = ATOLL_UC_SPACE,
    ['0'] = 2, ['1'] = 2, ['2'] = 2, ['3'] = 2, ['4'] = 2, ['5'] = 2, ['6'] = 2, ['7'] = 2, ['8'] = 2, ['9'] = 2,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

int atoll_unicode_class(uint32_t cp) {
  if (cp < 128) return ascii_class[cp];
  if (cp > 0x10FFFF) return ATOLL_UC_OTHER;
  int lo = 0, hi = atoll_unicode_nranges - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < atoll_unicode_ranges[mid].lo) hi = mid - 1;
    else if (cp > atoll_unicode_ranges[mid].hi) lo = mid + 1;
    else return atoll_unicode_ranges[mid].klass;
  }
  return ATOLL_UC_OTHER;
}

int atoll_utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
  uint8_t b = s[0];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  int len;
  uint32_t c, min;
  if (b >= 0xC2 && b <= 0xDF) len = 2, c = b & 0x1F, min = 0x80;
  else if (b >= 0xE0 && b <= 0xEF) len = 3, c = b & 0x0F, min = 0x800;
  else if (b >= 0xF0 && b <= 0xF4) len = 4, c = b & 0x07, min = 0x10000;
  else goto invalid;
  if ((size_t)len > n) goto invalid;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) goto invalid;
    c = (c << 6) | (s[i] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) goto invalid;
  *cp = c;
  return len;
invalid:
  *cp = 0xFFFFFFFFu;
  return 1;
}

/* Class and length of the character at text[pos]. */
static inline int char_at(const uint8_t *text, size_t n, size_t pos, int *len) {
  uint8_t b = text[pos];
  if (b < 128) {
    *len = 1;
    return ascii_class[b];
  }
  uint32_t cp;
  *len = atoll_utf8_next(text + pos, n - pos, &cp);
  return atoll_unicode_class(cp);
}

/* End of the run of characters of class k starting at pos (k == OTHER: any class
 * but letter, number and whitespace). */
static size_t run_end(const uint8_t *text, size_t n, size_t pos, int k) {
  while (pos < n) {
    int len, c = char_at(text, n, pos, &len);
    if (c != k) break;
    pos += (size_t)len;
  }
  return pos;
}

static size_t contraction(const uint8_t *t, size_t n, size_t pos) {
  size_t left = n - pos - 1; /* bytes after the apostrophe */
  if (left >= 1 && (t[pos + 1] == 's' || t[pos + 1] == 't' || t[pos + 1] == 'm' || t[pos + 1] == 'd'))
    return pos + 2;
  if (left >= 2 && ((t[pos + 1] == 'r' && t[pos + 2] == 'e') || (t[pos + 1] == 'v' && t[pos + 2] == 'e') ||
                    (t[pos + 1] == 'l' && t[pos + 2] == 'l')))
    return pos + 3;
  return 0;
}

size_t atoll_pretoken_end(const uint8_t *text, size_t n, size_t pos) {
  if (text[pos] == '\'') {
    size_t e = contraction(text, n, pos);
    if (e) return e;
  }
  int len, k = char_at(text, n, pos, &len);
  size_t start = pos;
  if (text[pos] == ' ' && pos + 1 < n) { /* " ?X+": the optional space */
    int len2, k2 = char_at(text, n, pos + 1, &len2);
    if (k2 != ATOLL_UC_SPACE) return run_end(text, n, pos + 1 + (size_t)len2, k2);
  }
  if (k != ATOLL_UC_SPACE) return run_end(text, n, start + (size_t)len, k);
  /* \s+(?!\S): the whitespace run, less its last character when a non-space follows
   * (and the run is longer than one character); else \s+ alone */
  size_t end = start + (size_t)len, last = start;
  while (end < n) {
    int l2, c = char_at(text, n, end, &l2);
    if (c != ATOLL_UC_SPACE) break;
    last = end;
    end += (size_t)l2;
  }
  if (end == n || last == start) return end;
  return last;
}

/* A newline preceded by a printable, non-space ASCII byte starts a pre-token, and the
 * pre-token before it ends the same with or without what follows (it holds no
 * whitespace, so no look-ahead decides its end). */
size_t atoll_tokenizer_safe_cut(const uint8_t *text, size_t n, size_t want) {
  if (want == 0) want = 1;
  for (size_t p = want; p < n; p++)
    if (text[p] == '\n' && text[p - 1] > 0x20 && text[p - 1] < 0x7F) return p;
  return n;
}

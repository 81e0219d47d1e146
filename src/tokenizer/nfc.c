/* Unicode NFC for tokenizer.json's NFC normalizer (Qwen2), through ICU. tokenizers
 * normalizes with Rust's unicode-normalization; both follow the Unicode standard (ICU
 * 72: Unicode 15), so only characters newer than ICU's tables could differ. */
#include "tokenizer/pipeline.h"
#include "tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

static int grow(void **buf, size_t *cap, size_t need, size_t unit) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  void *b = realloc(*buf, c * unit);
  if (!b) return -1;
  *buf = b;
  *cap = c;
  return 0;
}

/* One valid UTF-8 run s[0, n), normalized, appended to *dst at *len. */
static int nfc_run(const UNormalizer2 *nfc, const uint8_t *s, size_t n, uint8_t **dst, size_t *cap, size_t *len) {
  if (n > (size_t)INT32_MAX / 4) return -1;
  UChar *a = malloc((n + 1) * sizeof *a), *b = NULL;
  UErrorCode st = U_ZERO_ERROR;
  int32_t la = 0, lb = 0, l8 = 0;
  int rc = -1;
  if (!a) return -1;
  u_strFromUTF8(a, (int32_t)n + 1, &la, (const char *)s, (int32_t)n, &st);
  if (U_FAILURE(st)) goto done;
  if (unorm2_quickCheck(nfc, a, la, &st) == UNORM_YES && U_SUCCESS(st)) { /* already NFC: as it is */
    if (grow((void **)dst, cap, *len + n + 1, 1)) goto done;
    memcpy(*dst + *len, s, n);
    *len += n;
    rc = 0;
    goto done;
  }
  st = U_ZERO_ERROR;
  b = malloc(((size_t)la * 3 + 16) * sizeof *b);
  if (!b) goto done;
  lb = unorm2_normalize(nfc, a, la, b, la * 3 + 16, &st);
  if (U_FAILURE(st)) goto done;
  if (grow((void **)dst, cap, *len + (size_t)lb * 3 + 1, 1)) goto done;
  u_strToUTF8((char *)*dst + *len, (int32_t)(*cap - *len), &l8, b, lb, &st);
  if (U_FAILURE(st)) goto done;
  *len += (size_t)l8;
  rc = 0;
done:
  free(a);
  free(b);
  return rc;
}

int atoll_nfc(const uint8_t *src, size_t n, uint8_t **dst, size_t *cap, size_t *len) {
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2 *nfc = unorm2_getNFCInstance(&st);
  if (U_FAILURE(st) || grow((void **)dst, cap, n + 1, 1)) return -1;
  *len = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i, ascii = 1;
    while (j < n) { /* the valid run from i */
      uint32_t cp;
      if (src[j] < 0x80) {
        j++;
        continue;
      }
      int l = atoll_utf8_next(src + j, n - j, &cp);
      if (cp == 0xFFFFFFFFu) break;
      ascii = 0;
      j += (size_t)l;
    }
    if (ascii) { /* ASCII is NFC */
      if (grow((void **)dst, cap, *len + (j - i) + 1, 1)) return -1;
      memcpy(*dst + *len, src + i, j - i);
      *len += j - i;
    } else if (nfc_run(nfc, src + i, j - i, dst, cap, len)) {
      return -1;
    }
    if (j < n) { /* an invalid byte, kept */
      if (grow((void **)dst, cap, *len + 2, 1)) return -1;
      (*dst)[(*len)++] = src[j++];
    }
    i = j;
  }
  return 0;
}

/* A pipeline tokenizer's vocabulary once read (pipeline.h): the encoder keeps the map of
 * the model's strings; with a vocabulary of characters (SentencePiece's, byte
 * fallback), the <0xNN> tokens are found and each token's bytes become what the
 * decoder makes of it: its Replace steps applied, a <0xNN> token its byte. Fuse only
 * joins, and Strip is applied to a whole decoded text (tokenizer.c). Tokens no merge
 * names are marked: without a pre-tokenizer a passage is one word, merged in parts
 * between them (Llama 2's newline, a <0xNN> token, cuts it) with the ids of the whole. */
#include "tokenizer/tokenizer_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The byte of a <0xNN> token (upper-case hex digits, as tokenizers spells them), or -1. */
static int fallback_byte(const uint8_t *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
  const char *hi = memchr(hex, s[3], 16), *lo = memchr(hex, s[4], 16);
  return hi && lo && s[3] && s[4] ? (int)((hi - hex) * 16 + (lo - hex)) : -1;
}

/* Token s[0, n) decoded into out (room for 4n + 1); returns its length. */
static size_t decode_token(const atoll_pipeline *p, const uint8_t *s, size_t n, uint8_t *a, uint8_t *b) {
  memcpy(a, s, n);
  size_t len = n;
  for (int k = 0; k < p->ndec; k++) {
    const atoll_pipe_edit *e = &p->dec[k];
    if (!e->from) { /* ByteFallback */
      int byte = fallback_byte(a, len);
      if (byte >= 0) a[0] = (uint8_t)byte, len = 1;
      continue;
    }
    size_t j = 0;
    for (size_t i = 0; i < len;)
      if (i + e->nfrom <= len && memcmp(a + i, e->from, e->nfrom) == 0) memcpy(b + j, e->to, e->nto), j += e->nto, i += e->nfrom;
      else b[j++] = a[i++];
    memcpy(a, b, j);
    len = j;
  }
  return len;
}

static int decoded_table(atoll_tokenizer *t, const char *name, atoll_err *err) {
  const atoll_pipeline *p = t->pipe;
  size_t longest = 0, total = 0, grow = 1;
  for (int k = 0; k < p->ndec; k++)
    if (p->dec[k].from && p->dec[k].nto > p->dec[k].nfrom) grow *= p->dec[k].nto; /* a bound: each step at most this */
  if (grow > 64) return atoll_fail(err, "%s: decoder: a Replace makes tokens too long", name);
  for (int i = 0; i < t->vocab; i++) {
    size_t l = t->tok_off[i + 1] - t->tok_off[i];
    if (l > longest) longest = l;
    total += l * grow;
  }
  uint32_t *off = malloc(((size_t)t->vocab + 1) * sizeof *off);
  uint8_t *bytes = malloc(total + 1), *a = malloc(longest * grow + 8), *b = malloc(longest * grow + 8);
  if (!off || !bytes || !a || !b || total > UINT32_MAX) {
    free(off), free(bytes), free(a), free(b);
    return atoll_fail(err, "%s: out of memory", name);
  }
  off[0] = 0;
  for (int i = 0; i < t->vocab; i++) {
    size_t l = decode_token(p, t->tok_bytes + t->tok_off[i], t->tok_off[i + 1] - t->tok_off[i], a, b);
    memcpy(bytes + off[i], a, l);
    off[i + 1] = off[i] + (uint32_t)l;
  }
  free(a), free(b);
  free(t->tok_off), free(t->tok_bytes);
  t->tok_off = off;
  t->tok_bytes = bytes;
  return 0;
}

/* pipeline.h's space_cut, from the model's strings (before decoded_table replaces them):
 * "▁" is a token, the vocabulary is merged without ignore_merges, and no merge's left
 * token ends other than in "▁" while its right one starts with "▁". */
static int space_cut(const atoll_tokenizer *t, const atoll_bytemap *map) {
  static const uint8_t sp[3] = {0xE2, 0x96, 0x81};
  if (t->pipe->ignore_merges || atoll_bytemap_find(map, sp, 3, atoll_bytes_hash(sp, 3)) < 0) return 0;
  for (int r = 0; r < t->nmerges; r++) {
    const uint8_t *l = t->tok_bytes + t->tok_off[t->merge_left[r]], *rt = t->tok_bytes + t->tok_off[t->merge_right[r]];
    size_t nl = t->tok_off[t->merge_left[r] + 1] - t->tok_off[t->merge_left[r]];
    size_t nr = t->tok_off[t->merge_right[r] + 1] - t->tok_off[t->merge_right[r]];
    if (nr >= 3 && memcmp(rt, sp, 3) == 0 && !(nl >= 3 && memcmp(l + nl - 3, sp, 3) == 0)) return 0;
  }
  return 1;
}

int atoll_pipe_vocab(atoll_tokenizer *t, atoll_bytemap *map, const void *root_json, size_t len, const char *name,
                     atoll_err *err) {
  atoll_pipeline *p = t->pipe;
  /* what is written back: the file as cJSON read it (bytes cJSON skips, such as NULs
   * between tokens, are not kept) */
  t->json = cJSON_PrintBuffered((const cJSON *)root_json, (int)(len < (1u << 30) ? len + 64 : 1u << 30), 1);
  if (!t->json) return atoll_fail(err, "%s: out of memory", name);
  t->json_len = strlen(t->json);
  if (!p->byte_level) {
    for (int b = 0; b < 256; b++) {
      char s[8];
      snprintf(s, sizeof s, "<0x%02X>", b);
      int64_t e = atoll_bytemap_find(map, (const uint8_t *)s, 6, atoll_bytes_hash((const uint8_t *)s, 6));
      if (e < 0 || map->val[e] >= t->model_vocab)
        return atoll_fail(err, "%s: model.vocab: byte_fallback needs the token %s (all 256 <0xNN>)", name, s);
      p->fallback[b] = (int32_t)map->val[e];
    }
    uint64_t h = p->hash; /* the model's strings, which the decoded table does not keep apart */
    for (int i = 0; i < t->vocab; i++) {
      uint64_t pair[2] = {h, atoll_bytes_hash(t->tok_bytes + t->tok_off[i], t->tok_off[i + 1] - t->tok_off[i])};
      h = atoll_bytes_hash((const uint8_t *)pair, sizeof pair);
    }
    p->hash = h;
    p->space_cut = space_cut(t, map);
    if (decoded_table(t, name, err)) return -1;
    for (int c = 0; c < 128; c++) {
      uint8_t ch = (uint8_t)c;
      int64_t e = atoll_bytemap_find(map, &ch, 1, atoll_bytes_hash(&ch, 1));
      p->ascii[c] = e >= 0 ? (int32_t)map->val[e] : -1;
    }
    p->unmerged = malloc((size_t)t->vocab);
    if (!p->unmerged) return atoll_fail(err, "%s: out of memory", name);
    memset(p->unmerged, 1, (size_t)t->vocab);
    for (int r = 0; r < t->nmerges; r++) p->unmerged[t->merge_left[r]] = p->unmerged[t->merge_right[r]] = 0;
  }
  t->vocab_map = *map;
  memset(map, 0, sizeof *map);
  return 0;
}

/* The encoder: pre-tokens (pretokenize.c), each split into its bytes' tokens and
 * merged by rank as Hugging Face's BPE model does: the lowest-ranked merge present
 * first, the leftmost of equal ones, until none applies. A min-heap on (rank,
 * position) over a linked list of symbols makes a word of n bytes cost O(n log n).
 * Words of up to CACHE_WORD bytes are remembered (word -> ids), so frequent words
 * are merged once. */
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_WORD 64
#define CACHE_MAX_WORDS (1u << 20)
#define SMALL 128 /* words this long use stack buffers */
#define SHORT 24  /* words this long merge by scanning: cheaper than the heap */

typedef struct {
  int32_t rank;
  int32_t pos;
} heap_item;

static inline int before(heap_item a, heap_item b) {
  return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(heap_item *h, size_t *n, heap_item x) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(x, h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
  heap_item top = h[0], x = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && before(h[c + 1], h[c])) c++;
    if (!before(h[c], x)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = x;
  return top;
}

static int reserve(atoll_tokens *out, size_t more, atoll_err *err) {
  if (out->n + more <= out->cap) return 0;
  size_t cap = out->cap ? out->cap : 1024;
  while (cap < out->n + more) cap *= 2;
  int32_t *ids = realloc(out->ids, cap * sizeof *ids);
  if (!ids) return atoll_fail(err, "encode: out of memory");
  out->ids = ids;
  out->cap = cap;
  return 0;
}

/* Merges the n symbols ids[0..n) in place; returns the count. Scratch: next, prev
 * (n each) and heap (n). */
static size_t merge_word(const atoll_tokenizer *t, int32_t *ids, size_t n, int32_t *next, int32_t *prev,
                         heap_item *heap) {
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    prev[i] = (int32_t)i - 1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    int32_t r = atoll_pair_rank(t, ids[i], ids[i + 1]);
    if (r >= 0) heap_push(heap, &hn, (heap_item){r, (int32_t)i});
  }
  while (hn > 0) {
    heap_item top = heap_pop(heap, &hn);
    int32_t pos = top.pos, nx;
    if (ids[pos] < 0 || (nx = next[pos]) < 0) continue; /* merged away, or now last */
    if (atoll_pair_rank(t, ids[pos], ids[nx]) != top.rank) continue; /* pair changed */
    ids[pos] = t->merge_result[top.rank];
    ids[nx] = -1;
    next[pos] = next[nx];
    if (next[nx] >= 0) prev[next[nx]] = pos;
    int32_t r;
    if (prev[pos] >= 0 && (r = atoll_pair_rank(t, ids[prev[pos]], ids[pos])) >= 0)
      heap_push(heap, &hn, (heap_item){r, prev[pos]});
    if (next[pos] >= 0 && (r = atoll_pair_rank(t, ids[pos], ids[next[pos]])) >= 0)
      heap_push(heap, &hn, (heap_item){r, pos});
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) ids[k++] = ids[i];
  return k;
}

/* merge_word for short words: the lowest-ranked pair found by a scan each time. */
static size_t merge_short(const atoll_tokenizer *t, int32_t *ids, size_t n) {
  int32_t rank[SHORT];
  for (size_t i = 0; i + 1 < n; i++) rank[i] = atoll_pair_rank(t, ids[i], ids[i + 1]);
  while (n > 1) {
    size_t at = 0;
    int32_t best = -1;
    for (size_t i = 0; i + 1 < n; i++)
      if (rank[i] >= 0 && (best < 0 || rank[i] < best)) best = rank[i], at = i;
    if (best < 0) break;
    ids[at] = t->merge_result[best];
    for (size_t i = at + 1; i + 1 < n; i++) ids[i] = ids[i + 1], rank[i] = rank[i + 1];
    n--;
    if (at > 0) rank[at - 1] = atoll_pair_rank(t, ids[at - 1], ids[at]);
    if (at + 1 < n) rank[at] = atoll_pair_rank(t, ids[at], ids[at + 1]);
  }
  return n;
}

/* Puts word w (hash h) and its k ids into the cache; a full cache starts over. */
static int remember(atoll_tokenizer *t, const uint8_t *w, size_t n, uint64_t h, const int32_t *ids, size_t k) {
  if (n > CACHE_WORD || t->nmerges == 0) return 0;
  if (t->cache.n >= CACHE_MAX_WORDS) {
    atoll_bytemap_clear(&t->cache);
    t->cache_n = 0;
  }
  if (t->cache_n + k + 1 > t->cache_cap) {
    size_t cap = t->cache_cap ? 2 * t->cache_cap : 65536;
    int32_t *c = realloc(t->cache_ids, cap * sizeof *c);
    if (!c) return 0; /* the cache is an optimization */
    t->cache_ids = c;
    t->cache_cap = cap;
  }
  int64_t e = atoll_bytemap_put(&t->cache, w, n, h, (int64_t)t->cache_n, NULL);
  if (e < 0) return 0;
  t->cache_ids[t->cache_n] = (int32_t)k;
  memcpy(t->cache_ids + t->cache_n + 1, ids, k * sizeof *ids);
  t->cache_n += k + 1;
  return 0;
}

/* The first symbols of word w[0..n) into ids (room for n); returns their count. Bytes
 * with a byte-level model; else characters, those not in the vocabulary (and bytes
 * that are not UTF-8) as their bytes' <0xNN> tokens (byte fallback). */
static size_t symbols_of(const atoll_tokenizer *t, const uint8_t *w, size_t n, int32_t *ids) {
  if (!t->pipe || t->pipe->byte_level) {
    for (size_t i = 0; i < n; i++) ids[i] = t->byte_id[w[i]];
    return n;
  }
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    if (w[i] < 0x80) { /* ASCII from a table */
      int32_t id = t->pipe->ascii[w[i]];
      ids[k++] = id >= 0 ? id : t->pipe->fallback[w[i]];
      i++;
      continue;
    }
    uint32_t cp;
    size_t l = (size_t)atoll_utf8_next(w + i, n - i, &cp);
    int64_t e = cp == 0xFFFFFFFFu ? -1 : atoll_bytemap_find(&t->vocab_map, w + i, l, atoll_bytes_hash(w + i, l));
    if (e >= 0) ids[k++] = (int32_t)t->vocab_map.val[e];
    else
      for (size_t j = 0; j < l; j++) ids[k++] = t->pipe->fallback[w[i + j]];
    i += l;
  }
  return k;
}

static int bpe_word(atoll_tokenizer *t, const uint8_t *w, size_t n, atoll_tokens *out, atoll_err *err);

/* U+2581 at w[i] after another character. A byte 0xE2 cannot continue a
 * character, so i is a character boundary of the whole word too. */
static int space_after_other(const uint8_t *w, size_t n, size_t i) {
  static const uint8_t sp[3] = {0xE2, 0x96, 0x81};
  return i > 0 && i + 3 <= n && memcmp(w + i, sp, 3) == 0 && !(i >= 3 && memcmp(w + i - 3, sp, 3) == 0);
}

/* With pipe->space_cut (SentencePiece's vocabularies, one word per passage): no merge can
 * join the parts cut before each U+2581 that follows another character, so merging them
 * apart gives the whole word's ids, and the word cache sees each part. */
int atoll_bpe_word(atoll_tokenizer *t, const uint8_t *w, size_t n, atoll_tokens *out, atoll_err *err) {
  if (!t->pipe || !t->pipe->space_cut) return bpe_word(t, w, n, out, err);
  size_t from = 0;
  for (size_t i = 1; i + 3 <= n; i++)
    if (w[i] == 0xE2 && space_after_other(w, n, i)) {
      if (bpe_word(t, w + from, i - from, out, err)) return -1;
      from = i;
    }
  return bpe_word(t, w + from, n - from, out, err);
}

static int bpe_word(atoll_tokenizer *t, const uint8_t *w, size_t n, atoll_tokens *out, atoll_err *err) {
  if (n == 0) return 0;
  if (reserve(out, n, err) != 0) return -1;
  if (t->pipe && t->pipe->ignore_merges) { /* a vocabulary entry as a whole */
    int64_t e = atoll_bytemap_find(&t->vocab_map, w, n, atoll_bytes_hash(w, n));
    if (e >= 0) {
      out->ids[out->n++] = (int32_t)t->vocab_map.val[e];
      return 0;
    }
  }
  if (n == 1 && (!t->pipe || t->pipe->byte_level)) {
    out->ids[out->n++] = t->byte_id[w[0]];
    return 0;
  }
  uint64_t h = 0;
  if (n <= CACHE_WORD && t->nmerges > 0) {
    h = atoll_bytes_hash(w, n);
    int64_t e = atoll_bytemap_find(&t->cache, w, n, h);
    if (e >= 0) {
      const int32_t *c = t->cache_ids + t->cache.val[e];
      memcpy(out->ids + out->n, c + 1, (size_t)c[0] * sizeof *c);
      out->n += (size_t)c[0];
      return 0;
    }
  }
  int32_t *ids = out->ids + out->n;
  size_t ns = symbols_of(t, w, n, ids);
  if (ns <= SHORT) {
    size_t k = merge_short(t, ids, ns);
    out->n += k;
    return remember(t, w, n, h, ids, k);
  }
  int32_t snext[SMALL], sprev[SMALL];
  heap_item sheap[SMALL];
  int32_t *next = snext, *prev = sprev;
  heap_item *heap = sheap;
  if (ns > SMALL) {
    next = malloc(ns * sizeof *next);
    prev = malloc(ns * sizeof *prev);
    heap = malloc(ns * sizeof *heap);
    if (!next || !prev || !heap) {
      free(next);
      free(prev);
      free(heap);
      return atoll_fail(err, "encode: out of memory");
    }
  }
  size_t k = 0;
  if (t->pipe && t->pipe->unmerged) { /* parts between symbols no merge names, merged apart */
    for (size_t a = 0; a < ns;) {
      size_t b = a;
      while (b < ns && !t->pipe->unmerged[ids[b]]) b++;
      if (b < ns) b++; /* the unmerged symbol ends its part */
      size_t m = b - a <= SHORT ? merge_short(t, ids + a, b - a) : merge_word(t, ids + a, b - a, next, prev, heap);
      memmove(ids + k, ids + a, m * sizeof *ids);
      k += m;
      a = b;
    }
  } else {
    k = merge_word(t, ids, ns, next, prev, heap);
  }
  out->n += k;
  if (ns > SMALL) {
    free(next);
    free(prev);
    free(heap);
  }
  return remember(t, w, n, h, ids, k);
}

/* Pre-tokens, each merged: the text between added tokens. */
int atoll_gpt2_plain(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, atoll_err *err) {
  for (size_t pos = 0; pos < n;) {
    size_t end = atoll_pretoken_end(text, n, pos);
    if (atoll_bpe_word(t, text + pos, end - pos, out, err) != 0) return -1;
    pos = end;
  }
  return 0;
}

int atoll_tokenizer_encode(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out,
                           atoll_err *err) {
  if (t->pipe) return atoll_pipe_encode(t, text, n, out, err);
  if (t->nadded > 0) return atoll_added_encode(t, text, n, out, atoll_gpt2_plain, err);
  if (t->is_bytes) {
    if (reserve(out, n, err) != 0) return -1;
    for (size_t i = 0; i < n; i++) out->ids[out->n + i] = text[i];
    out->n += n;
    return 0;
  }
  for (size_t pos = 0; pos < n;) {
    size_t end = atoll_pretoken_end(text, n, pos);
    if (atoll_bpe_word(t, text + pos, end - pos, out, err) != 0) return -1;
    pos = end;
  }
  return 0;
}

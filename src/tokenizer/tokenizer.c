/* The tokenizer object: the byte tokenizer, the merge table, decoding, the hash. */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* Hugging Face's ByteLevel alphabet: bytes that are printable and not a space stand
 * for themselves ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF); the other 68 bytes take
 * U+0100, U+0101, ... in byte order. */
static int printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t atoll_byte_symbol(uint8_t b) {
  if (printable(b)) return b;
  uint32_t k = 0;
  for (unsigned i = 0; i < b; i++) k += !printable(i);
  return 0x100 + k;
}

int atoll_symbol_byte(uint32_t cp) {
  if (cp < 0x100) return printable(cp) ? (int)cp : -1;
  if (cp >= 0x100 + 68) return -1;
  uint32_t k = 0;
  for (unsigned b = 0; b < 256; b++)
    if (!printable(b) && k++ == cp - 0x100) return (int)b;
  return -1;
}

void atoll_tokens_free(atoll_tokens *t) {
  free(t->ids);
  memset(t, 0, sizeof *t);
}

void atoll_tokenizer_free(atoll_tokenizer *t) {
  if (!t) return;
  free(t->tok_off);
  free(t->tok_bytes);
  free(t->merge_left);
  free(t->merge_right);
  free(t->merge_result);
  free(t->pair_keys);
  free(t->pair_rank);
  free(t->added);
  free(t->added_bytes);
  free(t->special);
  atoll_bytemap_free(&t->cache);
  free(t->cache_ids);
  atoll_pipeline_free(t->pipe);
  atoll_bytemap_free(&t->vocab_map);
  free(t->json);
  free(t->norm_buf);
  free(t->meta_buf);
  free(t);
}

int atoll_tokenizer_bytes(atoll_tokenizer **out, atoll_err *err) {
  *out = NULL;
  atoll_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return atoll_fail(err, "tokenizer: out of memory");
  t->vocab = 256;
  t->tok_off = malloc(257 * sizeof *t->tok_off);
  t->tok_bytes = malloc(256);
  if (!t->tok_off || !t->tok_bytes) {
    atoll_tokenizer_free(t);
    return atoll_fail(err, "tokenizer: out of memory");
  }
  for (int b = 0; b < 256; b++) {
    t->tok_off[b] = (uint32_t)b;
    t->tok_bytes[b] = (uint8_t)b;
  }
  t->tok_off[256] = 256;
  if (atoll_tokenizer_finish(t, "bytes", err) != 0) {
    atoll_tokenizer_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

static uint64_t compute_hash(const atoll_tokenizer *t) {
  uint64_t h = atoll_bytes_hash((const uint8_t *)"atoll-tokenizer", 15);
  h = atoll_bytes_hash((const uint8_t *)&h, 8) ^ (uint64_t)t->vocab;
  for (int i = 0; i < t->vocab; i++) {
    uint64_t th = atoll_bytes_hash(t->tok_bytes + t->tok_off[i], t->tok_off[i + 1] - t->tok_off[i]);
    uint64_t pair[2] = {h, th};
    h = atoll_bytes_hash((const uint8_t *)pair, sizeof pair);
  }
  for (int r = 0; r < t->nmerges; r++) {
    uint64_t item[2] = {h, ((uint64_t)(uint32_t)t->merge_left[r] << 32) | (uint32_t)t->merge_right[r]};
    h = atoll_bytes_hash((const uint8_t *)item, sizeof item);
  }
  /* added tokens (none: the hash tokenizers without them always had) */
  for (int k = 0; k < t->nadded; k++) {
    const atoll_added_token *a = &t->added[k];
    uint64_t item[3] = {h, atoll_bytes_hash(t->added_bytes + a->off, a->len),
                        ((uint64_t)(uint32_t)a->id << 8) | (uint64_t)(a->special | a->normalized << 1)};
    h = atoll_bytes_hash((const uint8_t *)item, sizeof item);
  }
  return h;
}

int atoll_tokenizer_finish(atoll_tokenizer *t, const char *name, atoll_err *err) {
  if (t->model_vocab == 0) t->model_vocab = t->vocab; /* no added tokens */
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  for (int i = 0; i < t->model_vocab; i++)
    if (t->tok_off[i + 1] - t->tok_off[i] == 1) t->byte_id[t->tok_bytes[t->tok_off[i]]] = i;
  for (int b = 0; b < 256 && (!t->pipe || t->pipe->byte_level); b++)
    if (t->byte_id[b] < 0)
      return atoll_fail(err, "%s: the vocabulary lacks the token of byte 0x%02X (byte-level BPE needs all 256)", name, b);
  free(t->pair_keys);
  free(t->pair_rank);
  t->pair_keys = NULL;
  t->pair_rank = NULL;
  if (t->nmerges > 0) {
    size_t slots = 16;
    while (slots < 2 * (size_t)t->nmerges) slots *= 2;
    t->pair_keys = malloc(slots * sizeof *t->pair_keys);
    t->pair_rank = malloc(slots * sizeof *t->pair_rank);
    if (!t->pair_keys || !t->pair_rank) return atoll_fail(err, "%s: out of memory", name);
    memset(t->pair_keys, 0xFF, slots * sizeof *t->pair_keys);
    t->pair_mask = slots - 1;
    for (int r = 0; r < t->nmerges; r++) {
      uint64_t key = ((uint64_t)(uint32_t)t->merge_left[r] << 32) | (uint32_t)t->merge_right[r];
      size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->pair_mask;
      while (t->pair_keys[i] != ATOLL_PAIR_EMPTY && t->pair_keys[i] != key) i = (i + 1) & t->pair_mask;
      if (t->pair_keys[i] == key) /* Hugging Face keeps the later rank; atoll refuses */
        return atoll_fail(err, "%s: merge %d repeats merge %d", name, r, t->pair_rank[i]);
      t->pair_keys[i] = key;
      t->pair_rank[i] = r;
    }
  }
  t->is_bytes = t->vocab == 256 && t->nmerges == 0 && t->nadded == 0 && !t->pipe;
  for (int b = 0; t->is_bytes && b < 256; b++) t->is_bytes = t->byte_id[b] == b;
  t->hash = compute_hash(t);
  if (t->pipe) { /* (GPT-2's pipeline keeps the hash it always had) */
    uint64_t pair[2] = {t->hash, t->pipe->hash};
    t->hash = atoll_bytes_hash((const uint8_t *)pair, sizeof pair);
  }
  return 0;
}

const uint8_t *atoll_tokenizer_token(const atoll_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->vocab) return NULL;
  *len = t->tok_off[id + 1] - t->tok_off[id];
  return t->tok_bytes + t->tok_off[id];
}

static int decode(const atoll_tokenizer *t, const int32_t *ids, size_t n, int skip_special, uint8_t **buf,
                  size_t *len, atoll_err *err) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->vocab)
      return atoll_fail(err, "decode: token %d at index %zu is outside the vocabulary (0..%d)", ids[i], i,
                        t->vocab - 1);
    total += t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
  }
  uint8_t *b = realloc(*buf, total ? total : 1);
  if (!b) return atoll_fail(err, "decode: out of memory");
  *buf = b;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (skip_special && atoll_tokenizer_is_special(t, ids[i])) continue;
    size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
    memcpy(b + at, t->tok_bytes + t->tok_off[ids[i]], l);
    at += l;
  }
  size_t strip = 0; /* the decoder's Strip: leading spaces of the whole text */
  while (t->pipe && strip < (size_t)t->pipe->strip && strip < at && b[strip] == ' ') strip++;
  if (strip) memmove(b, b + strip, at - strip);
  *len = at - strip;
  return 0;
}

int atoll_tokenizer_decode(const atoll_tokenizer *t, const int32_t *ids, size_t n, uint8_t **buf,
                           size_t *len, atoll_err *err) {
  return decode(t, ids, n, 0, buf, len, err);
}

int atoll_tokenizer_decode_text(const atoll_tokenizer *t, const int32_t *ids, size_t n, uint8_t **buf,
                                size_t *len, atoll_err *err) {
  return decode(t, ids, n, 1, buf, len, err);
}

int atoll_tokenizer_is_special(const atoll_tokenizer *t, int32_t id) {
  return t->special && id >= 0 && id < t->vocab && t->special[id];
}

int atoll_tokenizer_added(const atoll_tokenizer *t) { return t->nadded; }

int atoll_tokenizer_prefix(const atoll_tokenizer *t, const int32_t **ids) {
  *ids = t->pipe ? t->pipe->prefix : NULL;
  return t->pipe ? t->pipe->nprefix : 0;
}

int atoll_tokenizer_suffix(const atoll_tokenizer *t, const int32_t **ids) {
  *ids = t->pipe ? t->pipe->suffix : NULL;
  return t->pipe ? t->pipe->nsuffix : 0;
}

int atoll_tokenizer_round_trips(const atoll_tokenizer *t) {
  return !t->pipe || (t->pipe->byte_level && t->pipe->nnorm == 0);
}

size_t atoll_tokenizer_cut(const atoll_tokenizer *t, const uint8_t *text, size_t n, size_t want) {
  const atoll_pipeline *p = t->pipe;
  if (!p || (p->gpt2_split && p->nnorm == 0)) return atoll_tokenizer_safe_cut(text, n, want);
  /* NFC neither composes an ASCII letter with what precedes it nor a newline with anything */
  int nfc_only = p->nnorm == 0 || (p->nnorm == 1 && p->norm[0].nfc);
  if (!p->newline_cut || !nfc_only) return n; /* no cut known to be safe */
  if (want == 0) want = 1;
  for (size_t q = want; q < n; q++) {
    uint8_t c = text[q] | 0x20;
    if (text[q - 1] == '\n' && c >= 'a' && c <= 'z') return q;
  }
  return n;
}

int atoll_tokenizer_vocab(const atoll_tokenizer *t) { return t->vocab; }
int atoll_tokenizer_merges(const atoll_tokenizer *t) { return t->nmerges; }
const char *atoll_tokenizer_kind(const atoll_tokenizer *t) { return t->is_bytes ? "bytes" : "bpe"; }
uint64_t atoll_tokenizer_hash(const atoll_tokenizer *t) { return t->hash; }

void atoll_tokenizer_hash_hex(const atoll_tokenizer *t, char hex[17]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) hex[i] = digits[(t->hash >> (60 - 4 * i)) & 15];
  hex[16] = 0;
}

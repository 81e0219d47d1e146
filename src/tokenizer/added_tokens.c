/* Added tokens (tokenizer.json "added_tokens", e.g. GPT-2's <|endoftext|>), as Hugging
 * Face tokenizers treats them: each is matched in the raw text before pre-tokenization,
 * first those with normalized false over the whole text, then those with normalized
 * true over the pieces between, normalized (pipeline.h) when there are normalizers;
 * within a pass the leftmost match wins, the longest of those starting there. The
 * text between matches is encoded by the BPE model as usual.
 *
 * Ids: tokenizers ignores the file's ids and gives each token, in the file's order, the
 * model's id when its text is a vocabulary entry, else the next id past the vocabulary;
 * atoll requires the file to say the same, so that both give the same ids. Refused:
 * single_word, lstrip or rstrip true, a text with a newline (long texts are cut at
 * newlines, atoll_tokenizer_safe_cut), and a text written only in ByteLevel's symbols
 * that stand for other bytes ("élan": tokenizers decodes it as byte 0xE9 and "lan",
 * and as a vocabulary entry it would be those bytes' token). */
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int flag(const cJSON *o, const char *key, int *v) {
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsBool(b)) return -1;
  *v = cJSON_IsTrue(b);
  return 0;
}

/* Appends the new id's text to the token table (ids past the model's). */
static int table_add(atoll_tokenizer *t, const uint8_t *b, size_t len) {
  uint32_t *off = realloc(t->tok_off, ((size_t)t->vocab + 2) * sizeof *off);
  if (!off) return -1;
  t->tok_off = off;
  uint8_t *bytes = realloc(t->tok_bytes, (size_t)off[t->vocab] + len + 1);
  if (!bytes) return -1;
  t->tok_bytes = bytes;
  memcpy(bytes + off[t->vocab], b, len);
  off[t->vocab + 1] = off[t->vocab] + (uint32_t)len;
  t->vocab++;
  return 0;
}

/* One entry, checked and added; k is its index (for messages). */
static int read_one(atoll_tokenizer *t, const cJSON *e, int k, const atoll_bytemap *map, atoll_bytemap *seen,
                    uint8_t *buf, const char *name, atoll_err *err) {
  char q[200];
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
  int single, lstrip, rstrip, normalized, special;
  if (!cJSON_IsObject(e) || !cJSON_IsNumber(id) || !cJSON_IsString(content) || flag(e, "single_word", &single) ||
      flag(e, "lstrip", &lstrip) || flag(e, "rstrip", &rstrip) || flag(e, "normalized", &normalized) ||
      flag(e, "special", &special))
    return atoll_fail(err, "%s: added_tokens: entry %d must be an object with id (a number), content (a string) and "
                      "single_word, lstrip, rstrip, normalized, special (true or false)", name, k);
  const char *text = content->valuestring;
  size_t len = strlen(text);
  if (len == 0) return atoll_fail(err, "%s: added_tokens: entry %d has an empty content", name, k);
  if (len > 4096) return atoll_fail(err, "%s: added_tokens: entry %d is longer than 4096 bytes", name, k);
  if (single || lstrip || rstrip)
    return atoll_fail(err, "%s: added_tokens: \"%s\": single_word, lstrip and rstrip must be false (not supported)",
                      name, atoll_tok_quote(text, q));
  if (memchr(text, '\n', len))
    return atoll_fail(err, "%s: added_tokens: \"%s\" holds a newline (not supported: atoll cuts long texts at newlines)",
                      name, atoll_tok_quote(text, q));
  for (size_t i = 0; i < len;) { /* tokenizers reads JSON strings as UTF-8 only */
    uint32_t cp;
    i += (size_t)atoll_utf8_next((const uint8_t *)text + i, len - i, &cp);
    if (cp == 0xFFFFFFFFu)
      return atoll_fail(err, "%s: added_tokens: entry %d is not valid UTF-8", name, k);
  }
  int fresh; /* a map, not a scan of those before: a file may list a million */
  if (atoll_bytemap_put(seen, (const uint8_t *)text, len, atoll_bytes_hash((const uint8_t *)text, len), k, &fresh) < 0)
    return atoll_fail(err, "%s: out of memory", name);
  if (!fresh) return atoll_fail(err, "%s: added_tokens: \"%s\" is listed twice", name, atoll_tok_quote(text, q));
  /* Written only in ByteLevel's symbols, the text would be decoded by tokenizers as
   * the bytes they stand for, not as itself (and be a vocabulary entry of those bytes) */
  int chars = t->pipe && !t->pipe->byte_level; /* a vocabulary of characters: entries are spelled as they are */
  long nb = chars ? (long)len : atoll_symbols_to_bytes(text, buf);
  if (chars) memcpy(buf, text, len);
  if (!chars && nb > 0 && ((size_t)nb != len || memcmp(buf, text, len) != 0))
    return atoll_fail(err, "%s: added_tokens: \"%s\" is spelled in byte-level symbols that stand for other bytes "
                      "(tokenizers would decode it as those; not supported)", name, atoll_tok_quote(text, q));
  /* tokenizers' id: the vocabulary entry spelled as the content, else the next new id */
  int32_t want = t->vocab;
  int64_t m = nb > 0 ? atoll_bytemap_find(map, buf, (size_t)nb, atoll_bytes_hash(buf, (size_t)nb)) : -1;
  if (m >= 0) want = (int32_t)map->val[m];
  if (id->valuedouble != (double)want)
    return atoll_fail(err, "%s: added_tokens: \"%s\" has id %.17g, but tokenizers would give it %d (%s)", name,
                      atoll_tok_quote(text, q), id->valuedouble, want,
                      m >= 0 ? "its vocabulary id" : "the next id past the vocabulary and the added tokens before it");
  if (m < 0 && t->vocab >= ATOLL_TOKENIZER_MAX_VOCAB)
    return atoll_fail(err, "%s: added_tokens: more than %d ids in all", name, ATOLL_TOKENIZER_MAX_VOCAB);
  size_t used = t->nadded ? t->added[t->nadded - 1].off + t->added[t->nadded - 1].len : 0;
  uint8_t *ab = realloc(t->added_bytes, used + len);
  if (!ab || (m < 0 && table_add(t, (const uint8_t *)text, len) != 0)) {
    if (ab) t->added_bytes = ab;
    return atoll_fail(err, "%s: out of memory", name);
  }
  t->added_bytes = ab;
  memcpy(ab + used, text, len);
  t->added[t->nadded++] = (atoll_added_token){want, (uint32_t)used, (uint32_t)len, (uint8_t)special, (uint8_t)normalized};
  t->added_first[(uint8_t)text[0]] |= (uint8_t)(normalized ? 2 : 1);
  return 0;
}

int atoll_added_tokens_read(atoll_tokenizer *t, const void *root_json, const atoll_bytemap *map,
                            const char *name, atoll_err *err) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive((const cJSON *)root_json, "added_tokens");
  if (!arr || cJSON_IsNull(arr)) return 0;
  if (!cJSON_IsArray(arr)) return atoll_fail(err, "%s: added_tokens: not an array", name);
  int n = cJSON_GetArraySize(arr);
  if (n == 0) return 0;
  t->added = calloc((size_t)n, sizeof *t->added);
  uint8_t *buf = malloc(4096 + 1);
  if (!t->added || !buf) {
    free(buf);
    return atoll_fail(err, "%s: out of memory", name);
  }
  atoll_bytemap seen = {0};
  int k = 0, rc = 0;
  for (const cJSON *e = arr->child; e && rc == 0; e = e->next, k++) rc = read_one(t, e, k, map, &seen, buf, name, err);
  atoll_bytemap_free(&seen);
  free(buf);
  if (rc != 0) return -1;
  t->special = calloc((size_t)t->vocab, 1);
  if (!t->special) return atoll_fail(err, "%s: out of memory", name);
  for (int j = 0; j < t->nadded; j++) t->special[t->added[j].id] |= t->added[j].special;
  return 0;
}

/* The added token of the pass (normalized 0 or 1) that matches longest at text[pos]; -1: none. */
static int match_at(const atoll_tokenizer *t, const uint8_t *text, size_t n, size_t pos, int normalized) {
  int best = -1;
  uint32_t best_len = 0;
  for (int k = 0; k < t->nadded; k++) {
    const atoll_added_token *a = &t->added[k];
    if (a->normalized != normalized || a->len <= best_len || a->len > n - pos) continue;
    if (memcmp(text + pos, t->added_bytes + a->off, a->len) == 0) best = k, best_len = a->len;
  }
  return best;
}

static int pass(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, int normalized,
                atoll_plain_encode plain, atoll_err *err);

/* A piece between added tokens of normalized false: normalized (the pipeline's
 * normalizers), then the pass of those of normalized true. */
static int between(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, atoll_plain_encode plain,
                   atoll_err *err) {
  if (!t->pipe || t->pipe->nnorm == 0 || n == 0) return pass(t, text, n, out, 1, plain, err);
  size_t len;
  if (atoll_pipeline_normalize(t->pipe, text, n, &t->norm_buf, &t->norm_cap, &len))
    return atoll_fail(err, "encode: out of memory");
  return pass(t, t->norm_buf, len, out, 1, plain, err);
}

/* One pass: the pass's matches go out as ids, the pieces between through next. */
static int pass(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, int normalized,
                atoll_plain_encode plain, atoll_err *err) {
  uint8_t bit = (uint8_t)(normalized ? 2 : 1);
  size_t from = 0;
  for (size_t pos = 0; pos < n; pos++) {
    if (!(t->added_first[text[pos]] & bit)) continue;
    int k = match_at(t, text, n, pos, normalized);
    if (k < 0) continue;
    int rc = normalized ? plain(t, text + from, pos - from, out, err) : between(t, text + from, pos - from, out, plain, err);
    if (rc != 0) return -1;
    t->at_start = 0;
    if (out->n == out->cap) {
      size_t cap = out->cap ? 2 * out->cap : 1024;
      int32_t *ids = realloc(out->ids, cap * sizeof *ids);
      if (!ids) return atoll_fail(err, "encode: out of memory");
      out->ids = ids;
      out->cap = cap;
    }
    out->ids[out->n++] = t->added[k].id;
    pos += t->added[k].len - 1;
    from = pos + 1;
  }
  return normalized ? plain(t, text + from, n - from, out, err) : between(t, text + from, n - from, out, plain, err);
}

int atoll_added_encode(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out,
                       atoll_plain_encode plain, atoll_err *err) {
  return pass(t, text, n, out, 0, plain, err);
}

/* Encoding with a pipeline other than GPT-2's (pipeline.h), as Hugging Face's tokenizers
 * does: added tokens with normalized false are found in the raw text; each piece
 * between them is normalized, then added tokens with normalized true are found in it;
 * what lies between those is pre-tokenized (Splits, or Metaspace) and each pre-token
 * merged by the BPE model (bpe_encode.c).
 *
 * Text that is not UTF-8 (tokenizers takes only strings, so it has no rule for it):
 * the Split patterns run with PCRE2_MATCH_INVALID_UTF, where an invalid byte matches
 * nothing, so each run of such bytes between matches is a pre-token of its own (with
 * Isolated); with byte fallback each such byte is its <0xNN> token. Decoding gives the
 * bytes back. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer_internal.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* Split number k (behaviour Isolated): each match and each stretch between matches is a
 * piece, split by the next Split or, after the last, merged. */
static int split_at(atoll_tokenizer *t, int k, const uint8_t *text, size_t n, atoll_tokens *out, atoll_err *err) {
  const atoll_pipeline *p = t->pipe;
  if (k == p->nsplit) return atoll_bpe_word(t, text, n, out, err);
  pcre2_code *re = p->re[k];
  pcre2_match_data *md = p->md[k];
  size_t prev = 0, start = 0;
  while (start < n) {
    int rc = p->jit[k] ? pcre2_jit_match(re, text, n, start, 0, md, NULL) : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re, text, n, start, 0, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return atoll_fail(err, "encode: the Split pattern failed on this text (PCRE2 error %d)", rc);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* an empty match: no piece; the search goes on past one character */
      start = ms + 1;
      while (start < n && (text[start] & 0xC0) == 0x80) start++;
      continue;
    }
    if (ms > prev && split_at(t, k + 1, text + prev, ms - prev, out, err)) return -1;
    if (split_at(t, k + 1, text + ms, me - ms, out, err)) return -1;
    prev = start = me;
  }
  return prev < n ? split_at(t, k + 1, text + prev, n - prev, out, err) : 0;
}

/* Metaspace: spaces become the replacement, which goes in front per prepend_scheme
 * unless there already; with split, each replacement starts a pre-token. */
static int metaspace(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, atoll_err *err) {
  const atoll_pipeline *p = t->pipe;
  size_t spaces = 0;
  for (size_t i = 0; i < n; i++) spaces += text[i] == ' ';
  if (atoll_pipe_grow(&t->meta_buf, &t->meta_cap, n + (spaces + 1) * p->nmeta + 1)) return atoll_fail(err, "encode: out of memory");
  uint8_t *b = t->meta_buf;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (text[i] == ' ') memcpy(b + k, p->meta, p->nmeta), k += p->nmeta;
    else b[k++] = text[i];
  int has = k >= p->nmeta && memcmp(b, p->meta, p->nmeta) == 0;
  if (!has && (p->meta_prepend == 2 || (p->meta_prepend == 1 && t->at_start))) {
    memmove(b + p->nmeta, b, k);
    memcpy(b, p->meta, p->nmeta);
    k += p->nmeta;
  }
  if (!p->meta_split) return atoll_bpe_word(t, b, k, out, err);
  size_t from = 0;
  for (size_t i = 1; i + p->nmeta <= k; i++)
    if (memcmp(b + i, p->meta, p->nmeta) == 0) {
      if (atoll_bpe_word(t, b + from, i - from, out, err)) return -1;
      from = i;
    }
  return atoll_bpe_word(t, b + from, k - from, out, err);
}

/* Normalized text between added tokens: pre-tokenized and merged. */
static int plain(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, atoll_err *err) {
  if (n == 0) return 0;
  const atoll_pipeline *p = t->pipe;
  int rc;
  if (p->metaspace) rc = metaspace(t, text, n, out, err);
  else if (p->nsplit) rc = split_at(t, 0, text, n, out, err);
  else if (p->gpt2_split) rc = atoll_gpt2_plain(t, text, n, out, err);
  else rc = atoll_bpe_word(t, text, n, out, err); /* no pre-tokenizer: one word */
  t->at_start = 0;
  return rc;
}

int atoll_pipe_encode(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, atoll_err *err) {
  t->at_start = 1;
  if (t->nadded > 0) return atoll_added_encode(t, text, n, out, plain, err);
  if (t->pipe->nnorm == 0) return plain(t, text, n, out, err);
  size_t len;
  if (atoll_pipeline_normalize(t->pipe, text, n, &t->norm_buf, &t->norm_cap, &len))
    return atoll_fail(err, "encode: out of memory");
  return plain(t, t->norm_buf, len, out, err);
}

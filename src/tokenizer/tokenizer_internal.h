/* The tokenizer's representation, shared by the files of src/tokenizer only. */
#ifndef ATOLL_TOKENIZER_INTERNAL_H
#define ATOLL_TOKENIZER_INTERNAL_H

#include "tokenizer/bytemap.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

/* An added token (tokenizer.json "added_tokens"): matched in the raw text before
 * pre-tokenization, longest first among those starting at the leftmost place. */
typedef struct {
  int32_t id;
  uint32_t off, len; /* its text: added_bytes[off, off + len) */
  uint8_t special, normalized;
} atoll_added_token;

struct atoll_tokenizer {
  int vocab;       /* ids [0, vocab): the model's, then added tokens outside it */
  int model_vocab; /* the BPE model's ids [0, model_vocab) */
  uint32_t *tok_off;  /* vocab + 1 offsets into tok_bytes */
  uint8_t *tok_bytes;
  int32_t byte_id[256]; /* the id of each single-byte token */
  int nmerges;
  int32_t *merge_left, *merge_right, *merge_result; /* merge r: (left, right) -> result */
  /* (left, right) -> rank: open addressing on key (left << 32 | right) */
  uint64_t *pair_keys;
  int32_t *pair_rank;
  size_t pair_mask;
  int is_bytes;
  int nadded;                /* added tokens, in the file's order */
  atoll_added_token *added;
  uint8_t *added_bytes;
  uint8_t added_first[256];  /* bit 0: a non-normalized added token starts with this byte; bit 1: a normalized one */
  uint8_t *special;          /* vocab flags (NULL without added tokens): 1 for a special token's id */
  uint64_t hash;
  /* a pipeline other than GPT-2's (pipeline.h), NULL for GPT-2's */
  atoll_pipeline *pipe;
  atoll_bytemap vocab_map; /* with pipe: the model's token strings (bytes with ByteLevel) -> id */
  char *json;              /* with pipe: the file's JSON (cJSON's print), written back */
  size_t json_len;
  uint8_t *norm_buf, *meta_buf; /* scratch of the normalizers and Metaspace */
  size_t norm_cap, meta_cap;
  int at_start;            /* encoding: no added token or text encoded yet (Metaspace "first") */
  /* encoder's word cache: word bytes -> offset in cache_ids (count, then ids) */
  atoll_bytemap cache;
  int32_t *cache_ids;
  size_t cache_n, cache_cap;
};

#define ATOLL_PAIR_EMPTY UINT64_MAX

/* Builds the pair table, byte_id, is_bytes and hash from vocab/tokens/merges. */
int atoll_tokenizer_finish(atoll_tokenizer *t, const char *name, atoll_err *err);
/* Rank of merge (left, right), -1 when none. */
static inline int32_t atoll_pair_rank(const atoll_tokenizer *t, int32_t left, int32_t right) {
  if (!t->pair_keys) return -1;
  uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
  size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->pair_mask;
  for (;; i = (i + 1) & t->pair_mask) {
    if (t->pair_keys[i] == key) return t->pair_rank[i];
    if (t->pair_keys[i] == ATOLL_PAIR_EMPTY) return -1;
  }
}

/* A ByteLevel symbol string to bytes (out: room for strlen(s)); -1 when a character
 * is not a byte's symbol. */
long atoll_symbols_to_bytes(const char *s, uint8_t *out);
/* s for a one-line message: at most 40 bytes, control bytes as \xNN. */
const char *atoll_tok_quote(const char *s, char out[200]);

/* Reads root's "added_tokens" into t (model vocabulary, tokens and merges read;
 * map: model token bytes -> id) with Hugging Face's ids, or fails naming name. */
int atoll_added_tokens_read(atoll_tokenizer *t, const void *root_json, const atoll_bytemap *map,
                            const char *name, atoll_err *err);
/* Encodes text[0..n) splitting it at added tokens; plain(t, piece) encodes what lies
 * between them. */
typedef int (*atoll_plain_encode)(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out,
                                  atoll_err *err);
int atoll_added_encode(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out,
                       atoll_plain_encode plain, atoll_err *err);

/* With a pipeline: keeps map (emptied) and the file's JSON as cJSON prints it, makes the decoded token table
 * of a vocabulary of characters (pipe_vocab.c). */
int atoll_pipe_vocab(atoll_tokenizer *t, atoll_bytemap *map, const void *root_json, size_t len, const char *name,
                     atoll_err *err);
/* With a pipeline (pipe_encode.c): the whole of encode. */
int atoll_pipe_encode(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, atoll_err *err);
/* The text between added tokens with GPT-2's pipeline. */
int atoll_gpt2_plain(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out, atoll_err *err);
/* One pre-token, merged, its ids appended to out. */
int atoll_bpe_word(atoll_tokenizer *t, const uint8_t *w, size_t n, atoll_tokens *out, atoll_err *err);

/* The end of the pre-token that starts at text[pos] (pos < n): GPT-2's rules. */
size_t atoll_pretoken_end(const uint8_t *text, size_t n, size_t pos);

/* Byte b's symbol in byte-level vocabularies (Hugging Face's ByteLevel), and back:
 * a code point's byte, or -1 when it is no byte's symbol. */
uint32_t atoll_byte_symbol(uint8_t b);
int atoll_symbol_byte(uint32_t cp);

#endif

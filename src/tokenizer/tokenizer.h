/* Tokenizers: the built-in byte tokenizer ("bytes": id = byte value, vocabulary 256)
 * and BPE as stored in Hugging Face's tokenizer.json: byte-level with GPT-2's
 * pre-tokenization (written by atoll too), with Split regexes (Llama 3, Qwen2), or
 * SentencePiece's converted (Llama 2; docs/formats.md, "Tokenizers"). A loaded tokenizer is immutable
 * except for its encoder's word cache, so one tokenizer must not encode on two
 * threads at once. */
#ifndef ATOLL_TOKENIZER_H
#define ATOLL_TOKENIZER_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

#define ATOLL_TOKENIZER_MAX_VOCAB (1 << 24)

typedef struct atoll_tokenizer atoll_tokenizer;

/* A growable array of token ids (encode appends to it). */
typedef struct {
  int32_t *ids;
  size_t n, cap;
} atoll_tokens;

void atoll_tokens_free(atoll_tokens *t);

/* The byte tokenizer. */
int atoll_tokenizer_bytes(atoll_tokenizer **out, atoll_err *err);
/* Reads a tokenizer.json; anything atoll cannot encode exactly as Hugging Face does is
 * refused with one line naming the file and the problem. */
int atoll_tokenizer_load(atoll_tokenizer **out, const char *path, atoll_err *err);
/* The same from text already in memory (name is used in messages). */
int atoll_tokenizer_parse(atoll_tokenizer **out, const char *text, size_t len, const char *name,
                          atoll_err *err);
void atoll_tokenizer_free(atoll_tokenizer *t);

/* Appends the ids of text[0..n) (any bytes, invalid UTF-8 included) to out; added
 * tokens (special or not) are found in the text as Hugging Face's tokenizers finds them. */
int atoll_tokenizer_encode(atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out,
                           atoll_err *err);
/* A point >= want (or n) where text[0..n) may be cut and its two sides encoded
 * apart with the same ids as the whole: lets long texts be encoded in pieces. */
size_t atoll_tokenizer_safe_cut(const uint8_t *text, size_t n, size_t want);
/* The cut of atoll_tokenizer_safe_cut for tokenizer t: its pipeline's (docs/formats.md,
 * "Tokenizers"); n when no cut is known to be safe (the text is then encoded whole). */
size_t atoll_tokenizer_cut(const atoll_tokenizer *t, const uint8_t *text, size_t n, size_t want);
/* The ids tokenizer.json's post_processor (TemplateProcessing) puts before a text, BOS:
 * *ids gets them, the count is returned (0: none). encode does not add them. */
int atoll_tokenizer_prefix(const atoll_tokenizer *t, const int32_t **ids);
/* The same after a text (EOS, where the template has one). */
int atoll_tokenizer_suffix(const atoll_tokenizer *t, const int32_t **ids);
/* Whether decode(encode(x)) == x for every x (no normalizer, byte-level symbols). */
int atoll_tokenizer_round_trips(const atoll_tokenizer *t);
/* The bytes of token id (NULL for an id outside the vocabulary) and their count. */
const uint8_t *atoll_tokenizer_token(const atoll_tokenizer *t, int32_t id, size_t *len);
/* Writes the bytes of ids[0..n) to buf (grown with realloc; *len set), special added
 * tokens included as their text, so that decode(encode(x)) == x. */
int atoll_tokenizer_decode(const atoll_tokenizer *t, const int32_t *ids, size_t n, uint8_t **buf,
                           size_t *len, atoll_err *err);
/* The same without special tokens: what Hugging Face's decode gives by default
 * (skip_special_tokens=True). */
int atoll_tokenizer_decode_text(const atoll_tokenizer *t, const int32_t *ids, size_t n, uint8_t **buf,
                                size_t *len, atoll_err *err);
/* Whether id is a special added token (tokenizer.json added_tokens, "special": true). */
int atoll_tokenizer_is_special(const atoll_tokenizer *t, int32_t id);
/* The number of added tokens (inside the model's vocabulary or past it). */
int atoll_tokenizer_added(const atoll_tokenizer *t);

/* All ids: the model's and added tokens past it. */
int atoll_tokenizer_vocab(const atoll_tokenizer *t);
int atoll_tokenizer_merges(const atoll_tokenizer *t);
/* "bytes" or "bpe". */
const char *atoll_tokenizer_kind(const atoll_tokenizer *t);
/* 64-bit hash of the vocabulary and merges (what encoding depends on), as recorded in
 * manifests and checkpoints; hex gets 16 lowercase hex digits and a NUL. */
uint64_t atoll_tokenizer_hash(const atoll_tokenizer *t);
void atoll_tokenizer_hash_hex(const atoll_tokenizer *t, char hex[17]);

/* The tokenizer as Hugging Face tokenizer.json text (caller frees with free()). */
char *atoll_tokenizer_to_json(const atoll_tokenizer *t);
/* Writes it to path atomically. */
int atoll_tokenizer_write_json(const atoll_tokenizer *t, const char *path, atoll_err *err);

/* Trains byte-level BPE on the text of files[0..nfiles) (read as atoll prepare reads
 * it, see atoll_bpe_train_inputs) up to vocab_size tokens (256 bytes + merges). Ties
 * between equally frequent pairs go to the smaller (left id, right id). */
typedef struct {
  double read_s, count_s, merge_s; /* seconds spent reading, counting words, merging */
  uint64_t bytes, words;           /* bytes of text read, distinct pre-token words */
} atoll_bpe_train_stats;
int atoll_bpe_train(atoll_tokenizer **out, const char *const *files, int nfiles, int vocab_size,
                    atoll_bpe_train_stats *stats, atoll_err *err);
/* The same, the files read exactly as atoll prepare reads them (src/text/text_input.h:
 * gzip decompressed, JSON Lines reduced to jsonl_field's text, NULL: "text"), every file
 * checked before any is counted; input without any text is an error. atoll_bpe_train
 * is this with jsonl_field NULL. */
int atoll_bpe_train_inputs(atoll_tokenizer **out, const char *const *files, int nfiles, const char *jsonl_field,
                           int vocab_size, atoll_bpe_train_stats *stats, atoll_err *err);

#endif

/* The parts of a tokenizer.json around the BPE model that atoll reads besides GPT-2's
 * (docs/formats.md, "Tokenizers"): normalizers, Split pre-tokenizers (PCRE2), Metaspace,
 * SentencePiece's byte fallback, their decoders and TemplateProcessing. A tokenizer with
 * GPT-2's pipeline has none (t->pipe NULL) and runs the hand-written path alone. */
#ifndef ATOLL_TOKENIZER_PIPELINE_H
#define ATOLL_TOKENIZER_PIPELINE_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

#define ATOLL_PIPE_MAX 8 /* steps of each kind */

typedef struct {
  uint8_t *from, *to; /* from[0, nfrom) -> to[0, nto) */
  size_t nfrom, nto;
  int prepend; /* a Prepend normalizer: to goes before a non-empty piece */
  int nfc;     /* the NFC normalizer (nfc.c) */
} atoll_pipe_edit;

typedef struct atoll_pipeline {
  int byte_level;  /* ByteLevel pre-tokenizer: the model's symbols are bytes; else characters with byte fallback */
  int gpt2_split;  /* ByteLevel with use_regex true: GPT-2's split (pretokenize.c) */
  int nsplit;      /* Split pre-tokenizers, applied in turn, behaviour Isolated */
  void *re[ATOLL_PIPE_MAX];    /* pcre2_code_8 * */
  void *md[ATOLL_PIPE_MAX];    /* pcre2_match_data_8 * */
  int jit[ATOLL_PIPE_MAX];
  int newline_cut;  /* the patterns are known ones for which a cut between '\n' and an ASCII letter is safe */
  int nnorm;        /* normalizers, in order */
  atoll_pipe_edit norm[ATOLL_PIPE_MAX];
  int metaspace;       /* Metaspace pre-tokenizer */
  int meta_prepend;    /* 0 never, 1 first, 2 always */
  int meta_split;
  uint8_t meta[8];     /* its replacement character, UTF-8 */
  size_t nmeta;
  int ignore_merges;   /* a word that is a vocabulary entry is that token */
  int32_t fallback[256]; /* byte fallback: the id of <0xNN> */
  int32_t ascii[128];   /* characters: the id of each ASCII character's token, -1 when none */
  uint8_t *unmerged;   /* characters: per id, 1 when no merge names it (a long word is merged in parts between them) */
  int space_cut;       /* characters: "▁" is a token and no merge joins a token ending in another character
                          to one starting with "▁" (SentencePiece's vocabularies): a word is merged in parts
                          cut before each "▁" that follows another character (bpe_encode.c) */
  int ndec;            /* decoder steps before Fuse: Replace edits, ByteFallback (from NULL) */
  atoll_pipe_edit dec[ATOLL_PIPE_MAX];
  int strip;           /* Strip after Fuse: leading spaces removed from a decoded text */
  int32_t prefix[4], suffix[4]; /* TemplateProcessing's single: ids before and after the text */
  int nprefix, nsuffix;
  uint64_t hash;       /* of the pipeline's JSON and (characters) the model's strings */
} atoll_pipeline;

struct atoll_tokenizer;

/* Reads normalizer, pre_tokenizer, decoder and the model's options of root into
 * t->pipe (left NULL for GPT-2's pipeline), or fails with one line naming name. */
int atoll_pipeline_read(struct atoll_tokenizer *t, const void *root_json, const char *name, atoll_err *err);
/* post_processor (after the vocabulary and added tokens are read). */
int atoll_pipeline_post(struct atoll_tokenizer *t, const void *root_json, const char *name, atoll_err *err);
void atoll_pipeline_free(atoll_pipeline *p);

/* Unicode NFC of src[0, n) into *dst (ICU); runs of bytes that are not UTF-8 are kept
 * as they are, each valid run normalized apart. -1 when out of memory. */
int atoll_nfc(const uint8_t *src, size_t n, uint8_t **dst, size_t *cap, size_t *len);
/* *buf holds at least `need` bytes (its capacity *cap doubled as needed); -1: out of memory. */
int atoll_pipe_grow(uint8_t **buf, size_t *cap, size_t need);

/* Applies the normalizers to text[0, n): *out (grown with realloc) gets the result. */
int atoll_pipeline_normalize(const atoll_pipeline *p, const uint8_t *text, size_t n, uint8_t **out, size_t *cap,
                             size_t *len);

#endif

/* Which tokenizer made a prepared data directory (src/data/data_tokenizer.c): the
 * manifest's "tokenizer" (kind), "tokenizer_hash" and "vocab", and DIR/tokenizer.json,
 * the copy prepare keeps. Training records it in checkpoints; sampling decodes with it. */
#ifndef ATOLL_DATA_TOKENIZER_H
#define ATOLL_DATA_TOKENIZER_H

#include "atoll/atoll.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>

typedef struct {
  char kind[16];  /* "bytes" or "bpe" */
  char hash[17];  /* atoll_tokenizer_hash_hex */
  int vocab;
} atoll_tokenizer_record;

/* The byte tokenizer's record. */
void atoll_tokenizer_record_bytes(atoll_tokenizer_record *rec);
/* t's record. */
void atoll_tokenizer_record_of(const atoll_tokenizer *t, atoll_tokenizer_record *rec);
/* DIR/manifest.json's record: a directory without a manifest, or a manifest without
 * "tokenizer_hash" (written before BPE), holds bytes. */
int atoll_data_tokenizer(const char *dir, atoll_tokenizer_record *rec, atoll_err *err);
/* Loads file (a tokenizer.json) and checks it is the one rec describes; what names the
 * record's owner in the message ("DIR/manifest.json", "CKPT/state.json"). */
int atoll_tokenizer_load_checked(const char *file, const atoll_tokenizer_record *rec, const char *what,
                                 atoll_tokenizer **t, atoll_err *err);
/* 0 when weights trained on model's ids may train on data_dir's (the same tokenizer);
 * else "LEAD tokenizer KIND HASH (vocabulary V), but --data DIR holds ids of tokenizer
 * KIND HASH (vocabulary V); FIX", LEAD naming where the weights come from ("--resume CK:
 * the checkpoint was trained on"). */
int atoll_tokenizer_same_ids(const atoll_tokenizer_record *model, const atoll_tokenizer_record *data,
                             const char *data_dir, const char *lead, const char *fix, atoll_err *err);
/* The record as a JSON object {"kind", "hash", "vocab"} (NULL when out of memory), and
 * back (absent: bytes). */
cJSON *atoll_tokenizer_record_json(const atoll_tokenizer_record *rec);
int atoll_tokenizer_record_from_json(const cJSON *o, const char *what, atoll_tokenizer_record *rec,
                                     atoll_err *err);

#endif

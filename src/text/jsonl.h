/* JSON Lines for atoll prepare (src/text/jsonl.c): a streaming parser that takes a
 * JSON Lines file's bytes in pieces of any size and emits, for each line, the string
 * value of one field of its object: the document text. Memory is the size of this
 * struct whatever the line lengths. Every line is checked against JSON's grammar
 * (RFC 8259); a line that is not one JSON object, lacks the field, holds it twice or
 * holds a non-string there is an error naming PATH:LINE. The rules are in
 * docs/formats.md ("What prepare reads"). */
#ifndef ATOLL_TEXT_JSONL_H
#define ATOLL_TEXT_JSONL_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

#define ATOLL_JSONL_MAX_DEPTH 128 /* nesting of objects and arrays on one line */
#define ATOLL_JSONL_MAX_FIELD 256 /* bytes of the field name */
/* Output room atoll_jsonl_feed keeps free: one input byte emits at most this many. */
#define ATOLL_JSONL_SLACK 8

typedef struct {
  const char *name; /* file name for messages */
  char field[ATOLL_JSONL_MAX_FIELD + 1];
  size_t field_len;
  uint64_t line;      /* 1-based line of the next byte */
  uint64_t documents; /* lines that gave a document so far */
  /* parser state */
  int state, resume;  /* resume: state after a number or literal ends */
  int depth;
  uint8_t stack[ATOLL_JSONL_MAX_DEPTH / 8]; /* bit set: object; clear: array */
  int is_key;         /* the string being read is an object key */
  int key_at_top;     /* ... of the line's own object */
  size_t key_pos;     /* key bytes seen */
  int key_match;      /* key so far equals field's prefix */
  int value_is_field; /* the next value is the field's */
  int emitting;       /* the string being read is the field's value */
  int found;          /* the field was seen on this line */
  const char *literal; /* the literal being matched (true, false, null) */
  int lit_pos;
  int field_literal;  /* the literal is the field's value (an error once read) */
  int hex_left;       /* hex digits left in a \u escape */
  uint32_t code;      /* code unit being read */
  uint32_t high;      /* a pending high surrogate, 0 when none */
  uint8_t last;       /* last byte emitted for this document */
  uint64_t doc_bytes; /* bytes emitted for this document */
  /* set by the caller: atoll_jsonl_feed returns just after a document that added text
   * ends, with doc_ended set (the caller clears it) */
  int stop_at_doc;
  int doc_ended;
} atoll_jsonl;

/* field: the object key holding the text (at most ATOLL_JSONL_MAX_FIELD bytes). */
int atoll_jsonl_init(atoll_jsonl *p, const char *name, const char *field, atoll_err *err);

/* Parses in[0, n) and appends the text it yields to out[*out_len, cap). Stops early
 * when fewer than ATOLL_JSONL_SLACK bytes of room are left; *used says how many input
 * bytes were taken; with stop_at_doc, also just after a document's end. -1 with err
 * set ("PATH:LINE: ...") on bad input. */
int atoll_jsonl_feed(atoll_jsonl *p, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                     size_t cap, size_t *out_len, atoll_err *err);

/* At the end of the input: completes a last line that has no '\n' (needs
 * ATOLL_JSONL_SLACK bytes of room in out), or fails if the input ends inside one. */
int atoll_jsonl_finish(atoll_jsonl *p, uint8_t *out, size_t cap, size_t *out_len, atoll_err *err);

#endif

/* Internal interface of the token file module (src/data/token_file.c).
 * Internal: library users prepare data with atoll_prepare (atoll/atoll.h). */
#ifndef ATOLL_DATA_TOKEN_FILE_H
#define ATOLL_DATA_TOKEN_FILE_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

/* Token file, see src/data/token_file.c for the byte layout. */
typedef struct {
  char path[1024];
  uint32_t vocab;
  uint32_t width;   /* bytes per token: 1, 2 or 4 */
  uint64_t ntokens;
  void *map;        /* whole file, memory-mapped */
  size_t map_size;
  const uint8_t *tokens;
  uint32_t max_token; /* largest token (0 when empty) */
  uint64_t hash;      /* atoll_token_file_hash of the tokens, as in manifest.json */
} atoll_token_file;

int atoll_token_file_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab,
                           atoll_err *err);
int atoll_token_file_open(atoll_token_file *sh, const char *path, atoll_err *err);
void atoll_token_file_close(atoll_token_file *sh);
int32_t atoll_token_file_token(const atoll_token_file *sh, uint64_t i);
/* Installs the process-wide SIGBUS handler that turns a read past the end of a mapped
 * token file cut short meanwhile into one line naming the file and exit status 1.
 * For programs (src/cli/main.c calls it first thing); the library never installs it,
 * so a program that does not call it keeps its own SIGBUS handling. Idempotent. */
int atoll_token_file_guard_install(atoll_err *err);

/* ATOLL_TOKEN_FILE_MAGIC, the 8 bytes a token file starts with, is defined in
 * src/text/text_input.h: the text readers below this layer refuse such a file. */
#include "text/text_input.h"
#define ATOLL_TOKEN_FILE_VERSION 1u
#define ATOLL_TOKEN_FILE_HEADER 32u
#define ATOLL_TOKEN_FILE_MAX_VOCAB 2147483648u /* 2^31: every token fits an int32 */

/* Validates a whole token file held in memory (header, sizes, every token) and on success
 * fills sh to point into buf (sh->map stays NULL; buf must outlive sh). name is the
 * path used in error messages. Never reads outside [buf, buf + size). */
int atoll_token_file_parse(atoll_token_file *sh, const char *name, const void *buf, size_t size,
                           atoll_err *err);

/* 64-bit hash of n bytes of encoded tokens, recorded per file in manifest.json (as 16
 * hex digits) and checked at open. Not cryptographic: it catches a damaged, replaced
 * or half-rewritten file, not a forger. */
uint64_t atoll_token_file_hash(const uint8_t *p, uint64_t n);

/* DIR/<split>_NNN.bin, the name of token file n of a split. */
int atoll_token_file_path(char *buf, size_t cap, const char *dir, const char *split, int n,
                          atoll_err *err);


/* Smallest token width in bytes (1, 2 or 4) that holds vocab - 1. */
uint32_t atoll_token_file_width_for(uint32_t vocab);

/* Decodes tokens [start, start + n) into out. The range must lie inside the token file. */
void atoll_token_file_read(const atoll_token_file *sh, uint64_t start, uint64_t n, int32_t *out);

/* Streaming writer: tokens are appended in any number of calls, the header is
 * completed at finish, and the file appears under its name only then (written to
 * path.tmp, fsynced, renamed). After any error the writer is already aborted. */
typedef struct {
  int fd;
  char path[1024];
  char tmp[1040];
  uint32_t vocab;
  uint32_t width;
  uint64_t ntokens;
  uint8_t *buf; /* encoded tokens not yet written */
  size_t used;
} atoll_token_file_writer;

int atoll_token_file_writer_open(atoll_token_file_writer *w, const char *path, uint32_t vocab,
                                 atoll_err *err);
int atoll_token_file_writer_put(atoll_token_file_writer *w, const int32_t *tokens, size_t n,
                                atoll_err *err);
int atoll_token_file_writer_finish(atoll_token_file_writer *w, atoll_err *err);
/* Removes path.tmp and frees the writer; safe to call on a finished writer. */
void atoll_token_file_writer_abort(atoll_token_file_writer *w);

#endif

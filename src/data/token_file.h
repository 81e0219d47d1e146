/* Internal interface of the token file module (src/data/token_file.c).
 * The public half (atoll_token_file_write, _open, _close, _token) is in atoll/atoll.h. */
#ifndef ATOLL_DATA_TOKEN_FILE_H
#define ATOLL_DATA_TOKEN_FILE_H

#include "atoll/atoll.h"

#define ATOLL_TOKEN_FILE_MAGIC "ATOLLTOK"
#define ATOLL_TOKEN_FILE_VERSION 1u
#define ATOLL_TOKEN_FILE_HEADER 32u
#define ATOLL_TOKEN_FILE_MAX_VOCAB 2147483648u /* 2^31: every token fits an int32 */

/* Validates a whole token file held in memory (header, sizes, every token) and on success
 * fills sh to point into buf (sh->map stays NULL; buf must outlive sh). name is the
 * path used in error messages. Never reads outside [buf, buf + size). */
int atoll_token_file_parse(atoll_token_file *sh, const char *name, const void *buf, size_t size,
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

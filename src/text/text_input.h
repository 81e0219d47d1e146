/* What atoll prepare reads (src/text/text_input.c): the list of sources that FILE_OR_DIR
 * arguments stand for, and a streaming reader that yields each source's text in
 * pieces of bounded size, whatever the source's size: plain text as it is, gzip
 * decompressed (zlib, streamed; concatenated members too), JSON Lines reduced to one
 * field's text per line (src/text/jsonl.h), and JSON Lines inside gzip. The rules are
 * in docs/formats.md ("What prepare reads"). */
#ifndef ATOLL_TEXT_TEXT_INPUT_H
#define ATOLL_TEXT_TEXT_INPUT_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>

/* The 8 bytes a token file (prepare's output, src/data/token_file.c) starts with: a text
 * source that starts with them is refused, since it is not text. */
#define ATOLL_TOKEN_FILE_MAGIC "ATOLLTOK"

/* ------------------------------------------------------------- the listing --- */

typedef struct {
  char **paths;
  int n, cap;
} atoll_text_list;

/* Appends the sources args stand for: a file stands for itself, a directory for every
 * regular, non-hidden file below it except fortune's *.dat index files, walked
 * depth-first with each directory's entries in byte order of their names (symbolic
 * links inside a directory are skipped). A directory that is skip, or skip with
 * ".atoll-new" or ".atoll-old" appended (prepare's own output), is not entered; skip
 * may be NULL. A directory with no file in it is an error. */
int atoll_text_list_expand(atoll_text_list *l, const char *const *args, int nargs, const char *skip,
                           atoll_err *err);
void atoll_text_list_free(atoll_text_list *l);

/* ------------------------------------------------------------- the sources --- */

typedef struct {
  const char *path;
  int gzip;               /* starts with gzip's magic bytes (1f 8b) */
  int jsonl;              /* name ends in .jsonl or .jsonl.gz */
  uint64_t stored_bytes;  /* the file's size on disk */
  uint64_t text_bytes;    /* bytes of text it yields */
  uint64_t newline_end;   /* offset just past its text's last '\n'; 0 when none */
  uint64_t documents;     /* JSON Lines: lines that gave a document */
} atoll_text_source;

/* Whether scanning s reads the whole file (gzip or JSON Lines) rather than its ends. */
int atoll_text_source_streamed(const atoll_text_source *s);

/* The first pass over one source: opens it (a FIFO, a directory or a token file is
 * refused), then reads all of a streamed source to count its text and check it
 * (corrupt gzip, bad JSON Lines), or the two ends of a plain file. field: the JSON
 * Lines key holding the text. on_read (may be NULL) is called with the stored bytes
 * read since its last call. */
typedef void (*atoll_text_on_read)(void *ctx, uint64_t stored_bytes);
int atoll_text_scan(atoll_text_source *s, const char *path, const char *field,
                    atoll_text_on_read on_read, void *ctx, atoll_err *err);

/* Stored bytes the two passes will read from path: twice its size for a streamed
 * source, once for a plain one, 0 when it cannot be opened (the scan says why). */
uint64_t atoll_text_work_bytes(const char *path);

/* ------------------------------------------------------------- the reader --- */

typedef struct atoll_text_reader atoll_text_reader;

/* Opens a scanned source for the second pass; buffers of a few hundred KiB. */
int atoll_text_reader_open(atoll_text_reader **r, const atoll_text_source *s, const char *field,
                           atoll_err *err);
/* The next piece of text: *data stays valid until the next call; *n is 0 at the end.
 * A source whose text differs in length from its scan is an error (changed meanwhile). */
int atoll_text_reader_next(atoll_text_reader *r, const uint8_t **data, size_t *n, atoll_err *err);
/* The same, with pieces that also end where a JSON Lines document ends (one that adds
 * text): *doc_end is 1 when this piece ends one. Such a piece may be empty (*n = 0)
 * where the piece before held the document's last byte; the end of the text is *n = 0
 * with *doc_end = 0. A reader is read with one of the two functions only. */
int atoll_text_reader_next_doc(atoll_text_reader *r, const uint8_t **data, size_t *n, int *doc_end,
                               atoll_err *err);
/* Stored bytes read from the file since the last call (for progress). */
uint64_t atoll_text_reader_take_read(atoll_text_reader *r);
void atoll_text_reader_close(atoll_text_reader *r);

/* ----------------------------------------------------------- the progress --- */

/* One line on stderr about bytes read from disk: live on a terminal (at most 5 times
 * a second), else a line every 10 s; silent when off. total: stored bytes both passes
 * will read, for the percentage and ETA. */
typedef struct {
  int on, tty, shown;
  uint64_t total, done;
  uint64_t text;    /* bytes of text written (second pass) */
  double start, last;
  const char *what; /* "checking" (first pass) or "writing" (second) */
} atoll_text_progress;

void atoll_text_progress_start(atoll_text_progress *p, int on, uint64_t total);
void atoll_text_progress_add(void *p, uint64_t bytes); /* an atoll_text_on_read */
void atoll_text_progress_text(atoll_text_progress *p, uint64_t bytes);
/* Ends the live line; with ok, prints the totals. */
void atoll_text_progress_end(atoll_text_progress *p, int ok);

#endif

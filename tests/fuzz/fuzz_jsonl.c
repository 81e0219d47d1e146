/* libFuzzer target: the JSON Lines parser (src/text/jsonl.c) on any bytes. The input is
 * parsed twice, whole into a large output and in pieces of 1 to 16 bytes (sizes drawn
 * from the input) into the smallest output allowed; both must agree on the text, the
 * document count and, on a rejection, the message, which must not be empty. The pieces
 * run also stops at documents' ends (stop_at_doc, as prepare --tokenizer reads): each
 * stop must follow a newline, and there are no more stops than documents. Built by
 * tests/fuzz/run_fuzz.sh. */
#include "text/jsonl.h"

#include <stdlib.h>
#include <string.h>

/* Returns the text length, or -1 with err set; text grows as needed (caller frees). */
static long parse(const uint8_t *in, size_t n, int pieces, uint8_t **text, uint64_t *docs,
                  atoll_err *err) {
  atoll_jsonl p;
  if (atoll_jsonl_init(&p, "fuzz", "text", err) != 0) abort();
  p.stop_at_doc = pieces;
  uint64_t stops = 0;
  size_t cap = pieces ? ATOLL_JSONL_SLACK : 1 << 16, len = 0, pos = 0, k = 0;
  uint8_t *out = malloc(cap);
  *text = malloc(8 * n + 16);
  long rc = 0;
  for (int finished = 0; !finished;) {
    size_t olen = 0, used;
    if (pos == n) {
      finished = 1;
      if (atoll_jsonl_finish(&p, out, cap, &olen, err) != 0) rc = -1;
    } else {
      size_t take = pieces ? 1 + in[k++ % n] % 16 : n - pos;
      if (take > n - pos) take = n - pos;
      if (atoll_jsonl_feed(&p, in + pos, take, &used, out, cap, &olen, err) != 0) rc = -1;
      pos += used;
    }
    if (len + olen > 8 * n + 16) abort(); /* output is bounded by the input */
    memcpy(*text + len, out, olen);
    len += olen;
    if (pieces && p.doc_ended) {
      if (len == 0 || (*text)[len - 1] != '\n') abort(); /* a document ends after its newline */
      stops++;
      p.doc_ended = 0;
    }
    if (rc != 0) break;
  }
  free(out);
  if (stops > p.documents) abort();
  *docs = p.documents;
  return rc ? -1 : (long)len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *a, *b;
  uint64_t da, db;
  atoll_err ea, eb;
  memset(&ea, 0, sizeof ea);
  memset(&eb, 0, sizeof eb);
  long la = parse(data, size, 0, &a, &da, &ea), lb = parse(data, size, 1, &b, &db, &eb);
  if (la != lb) abort();
  if (la < 0 && (ea.msg[0] == 0 || strcmp(ea.msg, eb.msg) != 0)) abort();
  if (la >= 0 && (da != db || memcmp(a, b, (size_t)la) != 0)) abort();
  free(a);
  free(b);
  return 0;
}

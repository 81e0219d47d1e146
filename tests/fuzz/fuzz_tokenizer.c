/* libFuzzer target for the tokenizer.json reader: any byte string must either be
 * refused with a one-line message naming the file, or load as a tokenizer that
 * encodes text (the input itself, as arbitrary bytes) to ids inside its vocabulary
 * whose decoding is the text again (less the special added tokens when asked; where the
 * pipeline round-trips: no normalizer), and that writes a tokenizer.json that reads back
 * with the same hash. Built by tests/fuzz/run_fuzz.sh. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  atoll_tokenizer *t = NULL;
  atoll_err err;
  if (atoll_tokenizer_parse(&t, (const char *)data, size, "fuzz.json", &err) != 0) {
    if (t || err.msg[0] == '\0' || strchr(err.msg, '\n') || !strstr(err.msg, "fuzz.json")) abort();
    return 0;
  }
  atoll_tokens ids = {0};
  if (atoll_tokenizer_encode(t, data, size, &ids, &err) != 0) abort();
  for (size_t i = 0; i < ids.n; i++)
    if (ids.ids[i] < 0 || ids.ids[i] >= atoll_tokenizer_vocab(t)) abort();
  uint8_t *back = NULL;
  size_t len = 0;
  int exact = atoll_tokenizer_round_trips(t); /* normalizers (SentencePiece's) change the text */
  if (atoll_tokenizer_decode(t, ids.ids, ids.n, &back, &len, &err) != 0) abort();
  if (exact && (len != size || (size && memcmp(back, data, size) != 0))) abort();
  /* without specials: the text less exactly the special tokens' bytes */
  size_t specials = 0, tl = 0, len2 = 0;
  for (size_t i = 0; i < ids.n; i++)
    if (atoll_tokenizer_is_special(t, ids.ids[i]) && atoll_tokenizer_token(t, ids.ids[i], &tl)) specials += tl;
  uint8_t *text = NULL;
  if (atoll_tokenizer_decode_text(t, ids.ids, ids.n, &text, &len2, &err) != 0 || (exact && len2 + specials != size))
    abort();
  free(text);
  char *json = atoll_tokenizer_to_json(t);
  if (!json) abort();
  atoll_tokenizer *u = NULL;
  if (atoll_tokenizer_parse(&u, json, strlen(json), "rewritten.json", &err) != 0) abort();
  if (atoll_tokenizer_hash(u) != atoll_tokenizer_hash(t)) abort();
  free(json);
  free(back);
  atoll_tokens_free(&ids);
  atoll_tokenizer_free(u);
  atoll_tokenizer_free(t);
  return 0;
}

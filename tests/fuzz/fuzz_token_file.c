/* libFuzzer target for the token file parser: any byte string must either be
 * rejected with a one-line message or yield a token file whose every token can be read
 * and lies inside the vocabulary. Built by tests/fuzz/run_fuzz.sh. */
#include "atoll/atoll.h"
#include "data/token_file.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  atoll_token_file sh;
  atoll_err err;
  if (atoll_token_file_parse(&sh, "fuzz.bin", data, size, &err) != 0) {
    /* rejected: the message must be a single non-empty line */
    if (err.msg[0] == '\0' || strchr(err.msg, '\n')) abort();
    return 0;
  }
  if (sh.width != 1 && sh.width != 2 && sh.width != 4) abort();
  if (32 + sh.ntokens * sh.width != size) abort();
  for (uint64_t i = 0; i < sh.ntokens; i++) {
    int32_t t = atoll_token_file_token(&sh, i);
    if (t < 0 || (uint32_t)t >= sh.vocab) abort();
  }
  atoll_token_file_close(&sh);
  return 0;
}

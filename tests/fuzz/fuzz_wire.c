/* libFuzzer target: the islands' wire parser (src/net/wire.c). Whatever the bytes, the
 * parser returns (never reads out of bounds); what it accepts re-encodes to the same
 * bytes (the format has one encoding per message). */
#include "net/wire.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static atoll_wire_member members[ATOLL_WIRE_MAX_MEMBERS];
  atoll_wire_msg m;
  char why[256];
  if (atoll_wire_parse(data, size, &m, members, ATOLL_WIRE_MAX_MEMBERS, why, sizeof why)) return 0;
  size_t cap = atoll_wire_size(&m);
  uint8_t *out = malloc(cap);
  if (!out) return 0;
  size_t n = atoll_wire_encode(&m, out, cap);
  if (n != size || memcmp(out, data, size) != 0) abort(); /* accepted bytes must round-trip */
  free(out);
  return 0;
}

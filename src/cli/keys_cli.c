/* atoll keys --out DIR: a CURVE keypair for an island or a coordinator (src/net/keys.h). */
#include "cli/net_cli.h"
#include "net/keys.h"

#include <stdio.h>
#include <string.h>

int atoll_keys_main(int argc, char **argv) {
  const char *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: atoll keys --out DIR\n  writes DIR/key.pub and DIR/key.secret (CURVE, mode 0600) and an empty DIR/allowed/\n");
      return 0;
    }
    if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out = argv[++i];
      continue;
    }
    fprintf(stderr, "atoll: error: %s: unknown flag for keys, or its value is missing (usage: atoll keys --out DIR)\n", argv[i]);
    return 2;
  }
  if (!out) {
    fprintf(stderr, "atoll: error: --out: keys needs a directory (usage: atoll keys --out DIR)\n");
    return 2;
  }
  atoll_err err;
  if (atoll_keys_generate(out, &err)) {
    fprintf(stderr, "atoll: error: %s\n", err.msg);
    return 1;
  }
  printf("%s/key.pub\n", out);
  return 0;
}

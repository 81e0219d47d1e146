/* --eval-data's value (eval_sets.h). */
#include "train/eval_sets.h"

#include <string.h>

static int name_ok(const char *s, size_t n) {
  if (n == 0 || n > ATOLL_EVAL_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return 0;
  }
  return 1;
}

int atoll_eval_sets_parse(const char *spec, atoll_eval_set *sets, int *count, atoll_err *err) {
  *count = 0;
  const char *p = spec;
  while (*p) {
    const char *end = strchr(p, ','), *eq = strchr(p, '=');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (!eq || eq >= p + len)
      return atoll_fail(err, "--eval-data %.*s: expected NAME=DIR (a prepared data directory; its val split is evaluated)", (int)len, p);
    size_t nlen = (size_t)(eq - p), dlen = len - nlen - 1;
    if (!name_ok(p, nlen))
      return atoll_fail(err, "--eval-data %.*s: the name must be 1 to %d letters, digits, '_' or '-'", (int)len, p,
                        ATOLL_EVAL_NAME_MAX);
    if (dlen == 0) return atoll_fail(err, "--eval-data %.*s: the directory is empty", (int)len, p);
    if (dlen >= sizeof sets[0].dir) return atoll_fail(err, "--eval-data %.*s: the directory's path is too long", (int)nlen, p);
    if (*count == ATOLL_MAX_EVAL_SETS)
      return atoll_fail(err, "--eval-data: at most %d sets", ATOLL_MAX_EVAL_SETS);
    for (int i = 0; i < *count; i++)
      if (strlen(sets[i].name) == nlen && memcmp(sets[i].name, p, nlen) == 0)
        return atoll_fail(err, "--eval-data: the name %.*s is given twice", (int)nlen, p);
    atoll_eval_set *s = &sets[(*count)++];
    memcpy(s->name, p, nlen);
    s->name[nlen] = 0;
    memcpy(s->dir, eq + 1, dlen);
    s->dir[dlen] = 0;
    p += len;
    if (*p == ',') {
      p++;
      if (!*p) return atoll_fail(err, "--eval-data %s: ends with a comma", spec);
    }
  }
  return 0;
}

#include "core/json_text.h"

#include "core/fs.h"

#include <stdlib.h>
#include <string.h>

cJSON *atoll_json_parse_whole(const char *text, size_t len, const char *source, atoll_err *err) {
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!j) {
    atoll_fail(err, "%s: invalid JSON near byte %zu", source, end && end >= text ? (size_t)(end - text) : (size_t)0);
    return NULL;
  }
  size_t at = (size_t)(end - text);
  while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) at++;
  if (at < len && !(text[at] == '\0' && at + 1 == len)) {
    cJSON_Delete(j);
    atoll_fail(err, "%s: unexpected content after the JSON object at byte %zu", source, at);
    return NULL;
  }
  return j;
}

cJSON *atoll_json_read_whole(const char *path, size_t max_bytes, atoll_err *err) {
  char *text = NULL;
  size_t len = 0;
  if (atoll_read_file(path, max_bytes, &text, &len, err)) return NULL;
  cJSON *j = atoll_json_parse_whole(text, len, path, err);
  free(text);
  return j;
}

static int by_key(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* 1 with *dup set when object o holds a key twice, 0 when not, -1 when out of memory.
 * Sorted, not compared pairwise: a tokenizer's vocabulary holds a million keys. */
static int twice_in(const cJSON *o, const char **dup) {
  size_t n = 0;
  for (const cJSON *c = o->child; c; c = c->next) n++;
  if (n < 2) return 0;
  const cJSON **v = malloc(n * sizeof *v);
  if (!v) return -1;
  size_t k = 0;
  for (const cJSON *c = o->child; c; c = c->next) v[k++] = c;
  qsort(v, n, sizeof *v, by_key);
  for (k = 1; k < n && !*dup; k++)
    if (strcmp(v[k - 1]->string, v[k]->string) == 0) *dup = v[k]->string;
  free(v);
  return *dup != NULL;
}

/* Depth first; as deep as the text's nesting, which cJSON bounds (CJSON_NESTING_LIMIT). */
static int first_twice(const cJSON *j, const char **dup) {
  int rc = cJSON_IsObject(j) ? twice_in(j, dup) : 0;
  for (const cJSON *c = j->child; c && rc == 0; c = c->next) rc = first_twice(c, dup);
  return rc;
}

int atoll_json_unique_keys(const cJSON *j, const char *source, atoll_err *err) {
  const char *dup = NULL;
  int rc = first_twice(j, &dup);
  if (rc == 0) return 0;
  if (rc < 0) return atoll_fail(err, "%s: out of memory", source);
  char key[48]; /* for one line: at most 40 bytes, control bytes as '?' */
  size_t k = 0;
  for (; dup[k] && k < 40; k++) key[k] = (unsigned char)dup[k] < 0x20 || dup[k] == 0x7F ? '?' : dup[k];
  key[k] = 0;
  return atoll_fail(err, "%s: key '%s%s' appears more than once", source, key, dup[k] ? "..." : "");
}

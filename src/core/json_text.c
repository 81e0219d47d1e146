#include "core/json_text.h"

#include "core/fs.h"

#include <stdlib.h>

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

/* The one strict JSON parse of a whole file's text: atoll's readers of settings,
 * checkpoints and results files take one JSON value and nothing after it. */
#ifndef ATOLL_JSON_TEXT_H
#define ATOLL_JSON_TEXT_H

#include "atoll/atoll.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* The JSON value that is the whole of text (len bytes; white space may follow it, and
 * one NUL at the very end): a new cJSON tree (cJSON_Delete it), or NULL with err set to
 * "SOURCE: invalid JSON near byte N" or "SOURCE: unexpected content after the JSON
 * object at byte N" (a NUL byte inside the text is such content). */
cJSON *atoll_json_parse_whole(const char *text, size_t len, const char *source, atoll_err *err);

/* The same for a whole regular file of at most max_bytes (atoll_read_file). */
cJSON *atoll_json_read_whole(const char *path, size_t max_bytes, atoll_err *err);

/* 0 when no object in j, at any depth, holds a key twice; else -1 with err set to
 * "SOURCE: key 'K' appears more than once" (K cut to 40 bytes). cJSON keeps every
 * copy and finds the first, while Python's json and serde take the last: a reader of
 * files that other tools also read refuses them. */
int atoll_json_unique_keys(const cJSON *j, const char *source, atoll_err *err);

#endif

/* Training configuration as JSON (cJSON objects): the parts of src/train/config.c that
 * the public API (atoll/atoll.h: atoll_config and its functions) does not expose. */
#ifndef ATOLL_CONFIG_H
#define ATOLL_CONFIG_H

#include "atoll/atoll.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* Applies the keys of a JSON object; unknown keys and wrong types are errors that name
 * `source` (a file name or "flag"). */
int atoll_config_apply_json(atoll_config *c, const cJSON *obj, const char *source, atoll_err *err);
/* The full configuration as a JSON object (for state.json and summary.json). */
cJSON *atoll_config_to_json(const atoll_config *c);
/* --island-data's value as a number: iid 0, files 1, blocks 2 (their meaning:
 * src/train/island_data.c); -1 for an unknown name. */
int atoll_island_data_mode(const char *name);

#endif

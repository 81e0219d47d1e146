/* libFuzzer target: a --config file's text (not NUL-terminated) goes through
 * atoll_config_apply_text and, if accepted, atoll_config_check and
 * atoll_config_to_json. Nothing may crash or leak; a rejection must carry a
 * message. Built by tests/fuzz/run_fuzz.sh. */
#include "train/config.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  atoll_config cfg;
  atoll_err err;
  memset(&err, 0, sizeof err);
  atoll_config_defaults(&cfg);
  if (atoll_config_apply_text(&cfg, (const char *)data, size, "fuzz", &err) != 0) {
    if (err.msg[0] == 0) abort();
    return 0;
  }
  memset(&err, 0, sizeof err);
  if (atoll_config_check(&cfg, &err) != 0) {
    if (err.msg[0] == 0) abort();
    return 0;
  }
  cJSON *json = atoll_config_to_json(&cfg);
  char *text = json ? cJSON_PrintUnformatted(json) : NULL;
  cJSON_free(text);
  cJSON_Delete(json);
  return 0;
}

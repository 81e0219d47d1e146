/* atoll's logits for tests/hf/check_hf.py to compare with transformers': loads a
 * checkpoint, runs one forward pass over B x T token ids drawn from a fixed seed and
 * writes into OUT_DIR
 *   tokens.bin  int32 [B, T]
 *   logits.bin  float32 [B, T, vocab]
 * usage: hf_logits CKPT OUT_DIR */
#include "atoll/atoll.h"
#include "ckpt/checkpoint.h"
#include "core/rng.h"
#include "model/model.h"
#include "train/config.h"

#include <stdio.h>
#include <stdlib.h>

static int write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(p, 1, bytes, f) == bytes;
  if (f && fclose(f)) ok = 0;
  if (!ok) fprintf(stderr, "%s: cannot write\n", path);
  return ok ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: hf_logits CKPT OUT_DIR\n");
    return 2;
  }
  atoll_err err;
  char dir[1200];
  cJSON *state = NULL;
  atoll_config cfg;
  atoll_config_defaults(&cfg);
  if (atoll_ckpt_resolve(argv[1], dir, sizeof dir, &err) || atoll_ckpt_read_state(dir, &state, &err) ||
      atoll_config_apply_json(&cfg, cJSON_GetObjectItemCaseSensitive(state, "config"), dir, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  cJSON_Delete(state);
  int B = 2, T = cfg.model.context;
  atoll_model *m;
  if (atoll_model_create(&m, &cfg.model, B, T, &err) ||
      atoll_ckpt_load(dir, atoll_model_layout(m), atoll_model_params(m), NULL, NULL, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(B * T));
  atoll_rng rng;
  atoll_rng_seed(&rng, 7);
  for (int i = 0; i < B * T; i++) tokens[i] = (int32_t)(atoll_rng_next(&rng) % (uint64_t)cfg.model.vocab);
  atoll_model_forward(m, tokens, NULL, B, T);
  int rc = write_raw(argv[2], "tokens.bin", tokens, sizeof(int32_t) * (size_t)(B * T)) ||
           write_raw(argv[2], "logits.bin", atoll_model_logits(m), sizeof(float) * (size_t)B * T * cfg.model.vocab);
  free(tokens);
  atoll_model_destroy(m);
  return rc ? 1 : 0;
}

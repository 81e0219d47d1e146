/* atoll export --ckpt DIR --to hf --out DIR [--dtype fp32|bf16] [--max-shard-size SIZE]:
 * a checkpoint as a Hugging Face model directory (src/ckpt/hf.h; docs/formats.md "Export to Hugging Face"). */
#include "cli/export_cli.h"

#include "atoll/atoll.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "data/data_tokenizer.h"
#include "core/mem.h"
#include "train/config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const atoll_err *err) {
  fprintf(stderr, "atoll: error: %s\n", err->msg);
  return 1;
}

/* The checkpoint's weights (hash-checked) in the whole model's layout. */
static int export_hf(const char *ckpt, const char *out, const atoll_hf_export_opts *opt, atoll_err *err) {
  char dir[PATH_MAX];
  if (atoll_ckpt_resolve(ckpt, dir, sizeof dir, err)) return -1;
  cJSON *state = NULL;
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  atoll_config cfg;
  atoll_config_defaults(&cfg);
  char source[PATH_MAX + 16];
  snprintf(source, sizeof source, "%s/state.json", dir);
  const cJSON *saved = cJSON_GetObjectItemCaseSensitive(state, "config");
  int rc = saved ? atoll_config_apply_json(&cfg, saved, source, err)
                 : atoll_fail(err, "%s: holds no config (the model's shape)", source);
  /* a BPE checkpoint exports its own tokenizer.json (checked against state.json) */
  atoll_tokenizer_record rec;
  atoll_tokenizer *tok = NULL;
  char tok_path[PATH_MAX + 16];
  snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
  if (rc == 0)
    rc = atoll_tokenizer_record_from_json(cJSON_GetObjectItemCaseSensitive(state, "tokenizer"), source, &rec, err);
  if (rc == 0 && strcmp(rec.kind, "bytes") != 0) rc = atoll_tokenizer_load_checked(tok_path, &rec, source, &tok, err);
  cJSON_Delete(state);
  if (rc) return -1;
  atoll_layout lay;
  if (atoll_layout_init(&lay, &cfg.model, err)) {
    atoll_tokenizer_free(tok);
    return -1;
  }
  float *params = atoll_mem_alloc(lay.nparams * sizeof(float));
  if (!params) rc = atoll_fail(err, "out of memory for %zu parameters", lay.nparams);
  if (rc == 0) rc = atoll_ckpt_load(dir, &lay, params, NULL, NULL, err);
  /* a BPE checkpoint's tokenizer.json goes into the directory with the rest (NULL: bytes) */
  char *tok_json = tok ? atoll_tokenizer_to_json(tok) : NULL;
  if (rc == 0 && tok && !tok_json) rc = atoll_fail(err, "out of memory writing %s's tokenizer.json", dir);
  if (rc == 0) rc = atoll_hf_export(out, &lay, params, tok_json, opt, err);
  atoll_tokenizer_free(tok);
  free(tok_json);
  if (rc == 0)
    fprintf(stderr, "atoll export: %s (%s, %zu parameters) -> %s\n", dir, atoll_hf_arch_of(&lay.shape)->model_type,
            lay.nparams, out);
  atoll_mem_free(params);
  atoll_layout_free(&lay);
  return rc;
}

/* --max-shard-size: a whole number of bytes, or of KB, MB or GB (10^3, 10^6, 10^9
 * bytes, as save_pretrained's max_shard_size reads them), at least 1 */
static int parse_size(const char *v, uint64_t *out, atoll_err *err) {
  char *end;
  errno = 0;
  unsigned long long n = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
  uint64_t mult = 0;
  if (n > 0 && errno == 0) {
    mult = strcmp(end, "") == 0 || strcmp(end, "B") == 0 ? 1
           : strcmp(end, "KB") == 0                      ? 1000
           : strcmp(end, "MB") == 0                      ? 1000000
           : strcmp(end, "GB") == 0                      ? 1000000000
                                                         : 0;
  }
  if (!mult || n > UINT64_MAX / mult)
    return atoll_fail(err, "--max-shard-size %s: must be a whole number of bytes, KB, MB or GB, at least 1 (e.g. 5GB)",
                      v);
  *out = (uint64_t)n * mult;
  return 0;
}

int atoll_export_main(int argc, char **argv) {
  atoll_err err = {{0}};
  const char *ckpt = NULL, *to = NULL, *out = NULL, *dtype = "fp32", *shard = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: atoll export --ckpt DIR --to hf --out DIR [--dtype fp32|bf16] [--max-shard-size SIZE]\n"
             "  --ckpt  a checkpoint, a run's checkpoints/ directory or a run directory (its latest)\n"
             "  --to    hf: config.json, model.safetensors and tokenizer.json for Hugging Face transformers\n"
             "          (GPT2LMHeadModel, LlamaForCausalLM or Qwen2ForCausalLM, after the checkpoint's --arch)\n"
             "  --out   a new (or empty) directory, written atomically\n"
             "  --dtype the tensors' type: fp32 (the default) or bf16 (rounded to nearest even)\n"
             "  --max-shard-size  shards of at most SIZE (bytes, or with KB, MB, GB) and\n"
             "          model.safetensors.index.json, when the weights do not fit in one; default: one file\n");
      return 0;
    }
    const char **slot = strcmp(argv[i], "--ckpt") == 0 ? &ckpt
                        : strcmp(argv[i], "--to") == 0 ? &to
                        : strcmp(argv[i], "--out") == 0 ? &out
                        : strcmp(argv[i], "--dtype") == 0 ? &dtype
                        : strcmp(argv[i], "--max-shard-size") == 0 ? &shard
                                                        : NULL;
    if (!slot) {
      atoll_fail(&err, "%s: unknown flag for export (see atoll export --help)", argv[i]);
      return fail(&err);
    }
    if (i + 1 >= argc) {
      atoll_fail(&err, "%s: missing value", argv[i]);
      return fail(&err);
    }
    *slot = argv[++i];
  }
  if (!ckpt || !to || !out) {
    atoll_fail(&err, "%s: export needs --ckpt DIR --to hf --out DIR", !ckpt ? "--ckpt" : !to ? "--to" : "--out");
    return fail(&err);
  }
  if (strcmp(to, "hf") != 0) {
    atoll_fail(&err, "--to %s: unknown export format (known: hf)", to);
    return fail(&err);
  }
  atoll_hf_export_opts opt = {0};
  if (strcmp(dtype, "bf16") != 0 && strcmp(dtype, "fp32") != 0) {
    atoll_fail(&err, "--dtype %s: unknown (known: fp32, bf16)", dtype);
    return fail(&err);
  }
  opt.bf16 = strcmp(dtype, "bf16") == 0;
  if (shard && parse_size(shard, &opt.max_shard_bytes, &err)) return fail(&err);
  return export_hf(ckpt, out, &opt, &err) ? fail(&err) : 0;
}

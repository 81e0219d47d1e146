/* Hugging Face interop: a model directory that transformers loads (config.json,
 * model.safetensors with metadata {"format": "pt"}, tokenizer.json), written by
 * `atoll export --to hf` and read by `atoll train --init-from-hf`. docs/formats.md
 * ("Export to Hugging Face").
 *
 * Each architecture is one table (src/ckpt/hf_names.c) that maps atoll's layout names
 * (src/model/layout.c) to Hugging Face's, says which matrices Hugging Face stores
 * transposed, and writes and checks config.json. hf_export.c writes a directory,
 * hf_import.c reads one. */
#ifndef ATOLL_CKPT_HF_H
#define ATOLL_CKPT_HF_H

#include "atoll/atoll.h"
#include "model/layout.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* One tensor: names with "%d" standing for the block index (none for the others). */
typedef struct {
  const char *atoll;  /* e.g. "h.%d.attn.qkv.weight" */
  const char *hf;     /* e.g. "transformer.h.%d.attn.c_attn.weight" */
  int transpose;      /* 1: stored [in, out] (GPT-2's Conv1D), atoll's [out, in] transposed */
} atoll_hf_name;

typedef struct {
  const char *model_type;      /* config.json's "model_type": "gpt2", "llama", "qwen2" */
  const char *flags;           /* train's flags for it: "--arch llama --qkv-bias 1" */
  const atoll_hf_name *names;
  int nnames;
  const char *tied_head;       /* the LM head a loader may find as a copy of the embedding, or NULL */
  const char *tied_to;         /* the HF name it must equal */
  /* config.json for a model of this shape (NULL when out of memory) */
  cJSON *(*config_json)(const atoll_shape *s);
  /* 0 if config.json (read from `path`) describes a model of shape s, else one line
   * naming the first key that differs and the flag that sets it */
  int (*config_check)(const cJSON *cfg, const atoll_shape *s, const char *path, atoll_err *err);
} atoll_hf_arch;

/* The table for config.json's "model_type", or NULL. */
const atoll_hf_arch *atoll_hf_arch_find(const char *model_type);
/* The known model_type values, for messages ("gpt2, llama"). */
void atoll_hf_known(char *out, size_t outsz);
/* The table of a run's model: "gpt2", "llama" or (--arch llama --qkv-bias 1) "qwen2". */
const atoll_hf_arch *atoll_hf_arch_of(const atoll_shape *s);
/* The Hugging Face name of layout tensor t into out, and whether it is stored
 * transposed; -1 if the table has no entry for it. */
int atoll_hf_name_of(const atoll_hf_arch *a, const atoll_tensor *t, char *out, size_t outsz, int *transpose);
/* Where t comes in transformers' state_dict (the modules' order: the tensors before the
 * blocks, the blocks in turn, each in the table's order, the rest), as a sort key. */
int64_t atoll_hf_order(const atoll_hf_arch *a, const atoll_tensor *t);

/* tokenizer.json of atoll's byte tokenizer: a BPE model without merges whose 256
 * symbols are the bytes in the ByteLevel byte-to-character mapping, id = byte value,
 * with ByteLevel pre-tokenizer and decoder. Caller frees. (A BPE checkpoint exports
 * its own, src/tokenizer/.) */
char *atoll_hf_byte_tokenizer_json(void);

/* How the weights are written: bf16 1 writes BF16 tensors (config.json's torch_dtype
 * bfloat16), else F32; max_shard_bytes > 0 cuts them into shards of at most that many
 * bytes each (a larger tensor alone) with model.safetensors.index.json, as
 * save_pretrained's max_shard_size does, when they do not fit in one. */
typedef struct {
  int bf16;
  uint64_t max_shard_bytes;
} atoll_hf_export_opts;

/* Writes the directory out_dir (which must not exist, or be an empty directory)
 * atomically: everything goes into a hidden sibling first, which is then renamed.
 * tokenizer_json: the text of the checkpoint's tokenizer.json (BPE), or NULL for the
 * byte tokenizer's. */
int atoll_hf_export(const char *out_dir, const atoll_layout *whole, const float *params, const char *tokenizer_json,
                    const atoll_hf_export_opts *opt, atoll_err *err);

/* Reads a directory written by atoll_hf_export or by transformers' save_pretrained
 * (one model.safetensors, or model.safetensors.index.json and the shards it names; F32,
 * F16 or BF16) into the whole model's flat buffer:
 * config.json must describe the layout's shape, every tensor must be there with its
 * shape, and no other (a tied LM head equal to the embedding excepted). */
int atoll_hf_import(const char *dir, const atoll_layout *whole, float *params, atoll_err *err);

/* model.safetensors.index.json (src/ckpt/hf_index.c): the tensor -> shard map of a
 * sharded checkpoint. Names point into json. */
typedef struct {
  cJSON *json;
  int nshards;
  const char **shards; /* distinct shard file names, in the order first named */
  int nnames;
  const char **names;  /* weight_map's tensor names */
  int *shard_of;       /* names[i] is in shards[shard_of[i]] */
} atoll_hf_index;

/* Parses the index's text (len bytes; `path` names it in messages): a JSON object whose
 * weight_map maps each tensor name (unique, 1 to 255 bytes) to a shard: a plain file
 * name ending in .safetensors, with no directory part. One line on failure, *x empty. */
int atoll_hf_index_parse(const char *text, size_t len, const char *path, atoll_hf_index *x, atoll_err *err);
void atoll_hf_index_free(atoll_hf_index *x);
/* The shard number of tensor `name`, or -1 if the index does not name it. */
int atoll_hf_index_find(const atoll_hf_index *x, const char *name);

/* --init-from-hf DIR: the model's shape from DIR/config.json (src/ckpt/hf_shape.c): every
 * key read as transformers reads it, checked as train's flags are and with the keys
 * that are not the shape (config_check); one line naming the key if atoll cannot run it. */
int atoll_hf_shape(const char *dir, atoll_shape *s, atoll_err *err);
/* A Llama config.json's rotary keys into s (rope_theta, rope_scaling): rope_parameters
 * (transformers 5) or rope_theta and rope_scaling (4.x); types default and llama3. */
int atoll_hf_llama_rope(const cJSON *cfg, const char *path, atoll_shape *s, atoll_err *err);
/* The settings that a run's --flags and --config gave: every shape key set to a value no
 * flag takes ("not given") before they are applied. */
void atoll_hf_shape_unset(atoll_shape *s);
/* run = DIR/config.json's shape; a key in `given` (atoll_hf_shape_unset, then the flags)
 * that says otherwise is refused in one line naming the flag and both values. */
int atoll_hf_take_shape(const char *dir, atoll_shape *run, const atoll_shape *given, atoll_err *err);

#endif

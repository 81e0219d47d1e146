#!/usr/bin/env bash
# Builds and runs atoll's libFuzzer targets for a fixed time each.
#
#   usage: run_fuzz.sh SOURCE_DIR WORK_DIR SECONDS
#
# Targets: fuzz_safetensors (atoll_st_parse, and the sharded index's atoll_hf_index_parse), fuzz_config (--config text), fuzz_token_file
# (token file parser), fuzz_plan_config (atoll plan --config text), fuzz_jsonl (prepare's
# JSON Lines parser, whole against in pieces), fuzz_tokenizer (tokenizer.json reader,
# encode/decode round trip), fuzz_wire (the islands' wire parser, src/net/wire.c),
# fuzz_coord_state (the coordinator's state file, src/net/coordinator_state.c). Each is compiled with
# clang's fuzzer, ASan and UBSan (UB is
# fatal), given a seed corpus of valid files made by a small generator that calls
# the project's own writers, and run for SECONDS seconds; the targets run in
# waves of FUZZ_JOBS (default: the CPU count) at once. Exit status: 0 if every target built and found nothing, 1 if one failed
# to build or found a crash (the reproducer is left in WORK_DIR/NAME/), 77 (the
# ctest skip code) if clang or its fuzzer runtime is missing.
set -u

if [ $# -ne 3 ]; then
  echo "usage: run_fuzz.sh SOURCE_DIR WORK_DIR SECONDS" >&2
  exit 2
fi
SRC=$(cd "$1" && pwd) || exit 2
WORK=$2
SECONDS_EACH=$3
CC=${FUZZ_CC:-clang}
FLAGS=(-g -O1 -fsanitize=fuzzer,address,undefined,float-cast-overflow -fno-sanitize-recover=all
       -I"$SRC/include" -I"$SRC/src")

mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd) || exit 2

# --- toolchain probe ------------------------------------------------------------
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "run_fuzz.sh: $CC not found; skipping (install clang)"
  exit 77
fi
cat >"$WORK/probe.c" <<'EOF'
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
EOF
if ! "$CC" "${FLAGS[@]}" "$WORK/probe.c" -o "$WORK/probe" >"$WORK/probe.log" 2>&1; then
  echo "run_fuzz.sh: $CC cannot build a libFuzzer target (fuzzer runtime missing?); skipping"
  sed 's/^/  /' "$WORK/probe.log" | head -5
  exit 77
fi

# --- seed generator ---------------------------------------------------------------
# One C file; -DGEN_ST / -DGEN_TOKEN_FILE / -DGEN_CONFIG / -DGEN_PLAN_CONFIG / -DGEN_JSONL /
# -DGEN_TOKENIZER select what
# it writes into the directory given as its argument.
cat >"$WORK/gen_seeds.c" <<'EOF'
#include "atoll/atoll.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static char dir[4096];
static const char *at(const char *name) {
  static char p[8192];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}
static void die(const char *what, const atoll_err *e) {
  fprintf(stderr, "gen_seeds: %s: %s\n", what, e->msg);
  exit(1);
}
#ifdef GEN_ST
#include "ckpt/safetensors.h"
static void raw(const char *name, const char *header, size_t dsize) {
  FILE *f = fopen(at(name), "wb");
  unsigned long long n = strlen(header);
  for (int i = 0; i < 8; i++) fputc((int)((n >> (8 * i)) & 0xff), f);
  fputs(header, f);
  for (size_t i = 0; i < dsize; i++) fputc((int)(i * 37 & 0xff), f);
  fclose(f);
}
static void gen(void) {
  atoll_tensor t[3] = {{.name = "wte", .ndim = 2, .shape = {3, 2}, .offset = 0, .numel = 6},
                       {.name = "h.0.ln_1.bias", .ndim = 1, .shape = {5}, .offset = 6, .numel = 5},
                       {.name = "ln_f.weight", .ndim = 1, .shape = {1}, .offset = 11, .numel = 1}};
  atoll_layout lay = {.ntensors = 3, .tensors = t, .nparams = 12};
  float a[12], b[12];
  for (int i = 0; i < 12; i++) a[i] = 0.5f * (float)i - 2.0f, b[i] = (float)i;
  atoll_err e;
  if (atoll_st_write(at("plain.safetensors"), &lay, "", a, NULL, &e)) die("atoll_st_write", &e);
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddStringToObject(meta, "format", "atoll");
  cJSON_AddStringToObject(meta, "config", "{\"layers\":1}");
  if (atoll_st_write(at("meta.safetensors"), &lay, "", a, meta, &e)) die("atoll_st_write", &e);
  cJSON_Delete(meta);
  atoll_st_buffer parts[2] = {{"exp_avg.", a}, {"exp_avg_sq.", b}};
  if (atoll_st_write_buffers(at("parts.safetensors"), &lay, parts, 2, NULL, &e)) die("atoll_st_write", &e);
  raw("dtypes.safetensors",
      "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[8,10]},"
      "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[10,18]},"
      "\"i\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[18,26]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[26,29]},"
      "\"z\":{\"dtype\":\"I32\",\"shape\":[0,4],\"data_offsets\":[29,29]}}",
      29);
  raw("empty.safetensors", "{}", 0);
  raw("meta_only.safetensors", "{\"__metadata__\":{\"k\":\"v\\u00e9\\n\"}}", 0);
  /* a sharded checkpoint's model.safetensors.index.json (src/ckpt/hf_index.c) */
  FILE *f = fopen(at("model.safetensors.index.json"), "w");
  fputs("{\"metadata\": {\"total_size\": 66112},\n \"weight_map\": {\"model.embed_tokens.weight\": "
        "\"model-00001-of-00002.safetensors\", \"model.norm.weight\": \"model-00002-of-00002.safetensors\", "
        "\"lm_head.weight\": \"model-00001-of-00002.safetensors\"}}\n", f);
  fclose(f);
}
#endif
#ifdef GEN_TOKEN_FILE
static void gen(void) {
  int32_t tok[300];
  for (int i = 0; i < 300; i++) tok[i] = (i * 7919) % 256;
  atoll_err e;
  if (atoll_token_file_write(at("bytes.bin"), tok, 300, 256, &e)) die("token file", &e);
  for (int i = 0; i < 300; i++) tok[i] = (i * 7919) % 1000;
  if (atoll_token_file_write(at("wide2.bin"), tok, 100, 1000, &e)) die("token file", &e);
  for (int i = 0; i < 300; i++) tok[i] = (i * 104729) % 70000;
  if (atoll_token_file_write(at("wide4.bin"), tok, 50, 70000, &e)) die("token file", &e);
  if (atoll_token_file_write(at("empty.bin"), tok, 0, 256, &e)) die("token file", &e);
}
#endif
#ifdef GEN_CONFIG
#include "train/config.h"
static void gen(void) {
  atoll_config c;
  atoll_config_defaults(&c);
  cJSON *j = atoll_config_to_json(&c);
  char *text = cJSON_Print(j);
  FILE *f = fopen(at("defaults.json"), "w");
  fputs(text, f);
  fclose(f);
  cJSON_free(text);
  cJSON_Delete(j);
  f = fopen(at("empty.json"), "w");
  fputs("{}", f);
  fclose(f);
}
#endif
#ifdef GEN_PLAN_CONFIG
#include "plan/setup.h"
static void text(const char *name, const char *json) {
  FILE *f = fopen(at(name), "w");
  fputs(json, f);
  fclose(f);
}
static void gen(void) {
  for (int i = 0; i < atoll_plan_model_count(); i++) {
    char name[96], json[160];
    snprintf(name, sizeof name, "model_%d.json", i);
    snprintf(json, sizeof json, "{\"model\": \"%s\", \"gpus\": 64}", atoll_plan_model_at(i)->name);
    text(name, json);
  }
  text("cluster.json", "{\"model\": \"llama3-70b\", \"accel\": \"h200\", \"gpus\": 512, \"batch_tokens\": \"8M\",\n"
                       " \"set\": [\"dp_overlap=0.5\", \"eta_mm=0.55\"], \"islands\": 2, \"wan-bw\": \"10Gbps\",\n"
                       " \"wan_latency\": \"30ms\", \"memory\": \"80GiB\", \"inter-bw\": 50, \"explain\": true}");
  text("fixed.json", "{\"model\": \"gpt2\", \"tp\": 2, \"pp\": 2, \"dp\": 2, \"cp\": 1, \"zero\": 3, \"microbatch\": 4,\n"
                     " \"interleave\": 2, \"recompute\": \"selective\", \"island-sync\": \"diloco\", \"tokens\": \"1T\"}");
  text("shape.json", "{\"layers\": 4, \"dim\": 256, \"heads\": 8, \"kv_heads\": 4, \"arch\": \"llama\", \"ffn\": 1024,\n"
                     " \"vocab\": 32000, \"seq\": 2048, \"tied\": 1, \"batch\": 64, \"precision\": \"fp32\"}");
  text("cpu.json", "{\"model\": \"gpt2\", \"accel\": \"cpu\", \"threads\": 2, \"cpu-gflops\": 100}");
}
#endif
#ifdef GEN_JSONL
static void text(const char *name, const char *body) {
  FILE *f = fopen(at(name), "w");
  fputs(body, f);
  fclose(f);
}
static void gen(void) {
  text("plain.jsonl", "{\"text\": \"hello\\nworld\", \"id\": 1}\n{\"id\": 2, \"text\": \"\"}\n");
  text("escapes.jsonl", "{\"text\":\"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\\ud800x\"}\r\n\n");
  text("nested.jsonl", "{\"meta\":{\"text\":\"no\",\"a\":[1,-2.5e+3,0.5E-2,true,false,null,[],{}]},\"text\":\"yes\"}\n");
  text("bad.jsonl", "{\"text\": 5}\n{\"text\":\"a\",\"text\":\"b\"}\n[1]\n{\"text\":\"a\"");
}
#endif
#ifdef GEN_TOKENIZER
#include "tokenizer/tokenizer.h"
#include <cjson/cJSON.h>
static void put_json(const char *name, const cJSON *root) {
  char *text = cJSON_Print(root);
  FILE *f = fopen(at(name), "w");
  if (!text || !f) {
    atoll_err e;
    atoll_fail(&e, "cannot write %s", name);
    die("tokenizer seed", &e);
  }
  fputs(text, f);
  fclose(f);
  cJSON_free(text);
}
/* The merges of json in the array form (["l", "r"]), and the same with a first merge
 * that names a 1000-byte token (the array form's strings have no bound of their own). */
static void array_merges(const char *json) {
  cJSON *root = cJSON_Parse(json), *arr = cJSON_CreateArray();
  cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  for (cJSON *m = merges ? merges->child : NULL; m && arr; m = m->next) {
    char *sp = strchr(m->valuestring, ' ');
    cJSON *pair = cJSON_CreateArray();
    *sp = 0;
    cJSON_AddItemToArray(pair, cJSON_CreateString(m->valuestring));
    cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
    cJSON_AddItemToArray(arr, pair);
  }
  if (!arr || !cJSON_ReplaceItemInObject(model, "merges", arr)) {
    atoll_err e;
    atoll_fail(&e, "cannot build it");
    die("array merges seed", &e);
  }
  put_json("arrays.json", root);
  static char longtok[1001];
  memset(longtok, 'A', 1000);
  cJSON *pair = cJSON_CreateArray();
  cJSON_AddItemToArray(pair, cJSON_CreateString(longtok));
  cJSON_AddItemToArray(pair, cJSON_CreateString("b"));
  cJSON_InsertItemInArray(arr, 0, pair);
  put_json("long_merge.json", root);
  cJSON_Delete(root);
}
static void gen(void) {
  atoll_tokenizer *t = NULL;
  atoll_err e;
  if (atoll_tokenizer_bytes(&t, &e)) die("bytes tokenizer", &e);
  if (atoll_tokenizer_write_json(t, at("bytes.json"), &e)) die("bytes tokenizer", &e);
  atoll_tokenizer_free(t);
  FILE *f = fopen(at("text.txt"), "w");
  fputs("the cat's hat, the cat sat; the hat sat on 42 cats.\n caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", f);
  fclose(f);
  const char *files[] = {at("text.txt")};
  static char path[8192];
  snprintf(path, sizeof path, "%s", files[0]);
  files[0] = path;
  if (atoll_bpe_train(&t, files, 1, 300, NULL, &e)) die("bpe train", &e);
  if (atoll_tokenizer_write_json(t, at("bpe.json"), &e)) die("bpe tokenizer", &e);
  /* the same with added tokens: one in the vocabulary, specials and a normalized one past it */
  char *json = atoll_tokenizer_to_json(t);
  cJSON *root = json ? cJSON_Parse(json) : NULL;
  char list[1024];
  int v = atoll_tokenizer_vocab(t);
  snprintf(list, sizeof list,
           "[{\"id\":33,\"content\":\"!\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
           "{\"id\":%d,\"content\":\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
           "{\"id\":%d,\"content\":\" the cat\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,\"special\":false}]",
           v, v + 1);
  cJSON *added = cJSON_Parse(list);
  if (!root || !added || !cJSON_ReplaceItemInObject(root, "added_tokens", added)) {
    atoll_fail(&e, "cannot build it");
    die("added tokens seed", &e);
  }
  put_json("added.json", root);
  /* Llama 3's pipeline: Split (its regex) then ByteLevel, ignore_merges, BOS template */
  char pipe[2048];
  snprintf(pipe, sizeof pipe,
           "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
           "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*"
           "|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
           "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
           "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},{\"type\":"
           "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|endoftext|>\",\"type_id\":0}},"
           "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<|endoftext|>\":{\"id\":"
           "\"<|endoftext|>\",\"ids\":[%d],\"tokens\":[\"<|endoftext|>\"]}}}]}}", v);
  cJSON *parts = cJSON_Parse(pipe), *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!parts || !model) {
    atoll_fail(&e, "cannot build it");
    die("llama3 seed", &e);
  }
  cJSON_ReplaceItemInObject(root, "pre_tokenizer", cJSON_DetachItemFromObject(parts, "pre_tokenizer"));
  cJSON_ReplaceItemInObject(root, "post_processor", cJSON_DetachItemFromObject(parts, "post_processor"));
  cJSON_ReplaceItemInObject(model, "ignore_merges", cJSON_CreateTrue());
  put_json("llama3.json", root);
  cJSON_Delete(parts);
  cJSON_Delete(root);
  /* Llama 2's: normalizers, no pre-tokenizer, byte fallback, its decoder, BOS */
  static char sp[16384];
  size_t k = (size_t)snprintf(sp, sizeof sp,
      "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\u2581\"},"
      "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}]},\"pre_tokenizer\":null,"
      "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
      "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
      "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\u2581\"},\"content\":\" \"},"
      "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
      "\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
      "{\"id\":1,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],"
      "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,");
  for (int b = 0; b < 256; b++) k += (size_t)snprintf(sp + k, sizeof sp - k, "\"<0x%02X>\":%d,", b, b + 2);
  snprintf(sp + k, sizeof sp - k, "\"\u2581\":258,\"t\":259,\"h\":260,\"e\":261,\"th\":262,\"\u2581th\":263,\"\u2581the\":264},"
           "\"merges\":[\"t h\",\"\u2581 th\",\"\u2581th e\"]}}");
  f = fopen(at("llama2.json"), "w");
  if (!f) {
    atoll_fail(&e, "cannot write llama2.json");
    die("llama2 seed", &e);
  }
  fputs(sp, f);
  fclose(f);
  array_merges(json);
  free(json);
  atoll_tokenizer_free(t);
  remove(path);
}
#endif
#ifdef GEN_WIRE
#include "net/wire.h"
static void put(const char *name, atoll_wire_msg *m) {
  static uint8_t buf[1 << 16];
  size_t n = atoll_wire_encode(m, buf, sizeof buf);
  FILE *f = fopen(at(name), "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
}
static void gen(void) {
  atoll_wire_msg m = {.type = ATOLL_WIRE_HELLO, .session = 42, .seq = 7};
  m.u.hello.island = 3;
  m.u.hello.step = 100;
  m.u.hello.rank = 1;
  m.u.hello.ranks = 2;
  m.u.hello.layout = 0x1234;
  snprintf(m.u.hello.endpoint, sizeof m.u.hello.endpoint, "tcp://10.0.0.1:5555");
  put("hello.bin", &m);
  m.type = ATOLL_WIRE_READY;
  m.u.sync = (atoll_wire_sync){100, 1, 9, {1, 2, 3}};
  put("ready.bin", &m);
  m.type = ATOLL_WIRE_COMMIT;
  put("commit.bin", &m);
  atoll_wire_member mem[3] = {{0, {1}, "tcp://a:1"}, {2, {2}, "tcp://b:2"}, {5, {3}, "tcp://c:3"}};
  m.type = ATOLL_WIRE_QUORUM;
  m.u.quorum = (atoll_wire_quorum){100, 1, 9, 4, {7}, 3, mem};
  put("quorum.bin", &m);
  m.type = ATOLL_WIRE_WAIT;
  snprintf(m.u.text, sizeof m.u.text, "waiting for islands");
  put("wait.bin", &m);
  uint8_t bytes[64];
  for (int i = 0; i < 64; i++) bytes[i] = (uint8_t)(i * 13);
  m.type = ATOLL_WIRE_DATA;
  m.u.data = (atoll_wire_data){100, 1, 4, 2, 1, 3, 64, 256, 64, bytes};
  put("data.bin", &m);
  m.type = ATOLL_WIRE_ABORT;
  m.u.sync = (atoll_wire_sync){100, 1, 4, {0}};
  put("abort.bin", &m);
  m.type = ATOLL_WIRE_ASK;
  m.u.settings = (atoll_wire_settings){1, 0, 0, 0, NULL};
  put("ask.bin", &m);
  const char *run = "{\"islands\": 3, \"sync-every\": 6}";
  m.type = ATOLL_WIRE_SETTINGS;
  m.u.settings = (atoll_wire_settings){0, 2, 1, (uint32_t)strlen(run), run};
  put("settings.bin", &m);
  m.type = ATOLL_WIRE_UNITS;
  m.u.units = (atoll_wire_units){1, 6, 9, 9, 12, 3, 0, 0};
  put("units.bin", &m);
  m.type = ATOLL_WIRE_UNIT;
  m.u.units = (atoll_wire_units){0, 6, 9, 9, 12, 6, 7, 8};
  put("unit.bin", &m);
}
#endif
int main(int argc, char **argv) {
  if (argc != 2) return 2;
  snprintf(dir, sizeof dir, "%s", argv[1]);
  gen();
  return 0;
}
EOF

# --- targets ------------------------------------------------------------------------
# name | -D flag for the generator | sources besides the target | libraries
targets=(
  "safetensors|GEN_ST|src/ckpt/safetensors_read.c src/ckpt/safetensors_write.c src/ckpt/hf_index.c src/core/quant.c src/core/json_text.c src/core/fs.c src/core/err.c|-lcjson -lm"
  "config|GEN_CONFIG|src/train/config.c src/train/eval_sets.c src/parallel/outer_lr.c src/model/layout.c src/model/rope.c src/core/err.c src/core/json_text.c src/core/fs.c|-lcjson -lm"
  "token_file|GEN_TOKEN_FILE|src/data/token_file.c src/core/fs.c src/core/err.c|"
  "jsonl|GEN_JSONL|src/text/jsonl.c src/core/err.c|"
  "tokenizer|GEN_TOKENIZER|src/tokenizer/tokenizer.c src/tokenizer/tokenizer_json.c src/tokenizer/added_tokens.c src/tokenizer/bpe_encode.c src/tokenizer/bpe_train.c src/tokenizer/pretokenize.c src/tokenizer/unicode_table.c src/tokenizer/bytemap.c src/tokenizer/text_pieces.c src/tokenizer/pipeline.c src/tokenizer/pipe_encode.c src/tokenizer/pipe_vocab.c src/tokenizer/nfc.c src/text/text_input.c src/text/jsonl.c src/data/token_file.c src/core/json_text.c src/core/fs.c src/core/clock.c src/core/err.c|-lcjson -lz -lm -lpcre2-8 -licuuc"
  "plan_config|GEN_PLAN_CONFIG|src/plan/options.c src/plan/setup.c src/plan/catalog.c src/plan/assume.c src/plan/evaluate.c src/plan/flops.c src/plan/gemm.c src/plan/comm.c src/plan/time.c src/plan/memory.c src/plan/search.c src/plan/failure.c src/plan/report.c src/core/err.c src/core/json_text.c src/core/fs.c|-lcjson -lm"
  "wire|GEN_WIRE|src/net/wire.c|"
  "coord_state|GEN_JSONL|src/net/coordinator_state.c src/net/units.c src/core/json_text.c src/core/fs.c src/core/err.c src/text/jsonl.c|-lcjson -lm"
)

build_target() { # name gendef sources libs
  local name=$1 gendef=$2 libs=$4 dir="$WORK/$1" src
  local -a sources=()
  for src in $3; do sources+=("$SRC/$src"); done
  rm -rf "$dir/corpus" && mkdir -p "$dir/corpus" "$dir/seeds" || return 1
  # shellcheck disable=SC2086
  "$CC" "${FLAGS[@]}" "$SRC/tests/fuzz/fuzz_$name.c" "${sources[@]}" $libs \
    -o "$dir/fuzz_$name" >"$dir/build.log" 2>&1 || return 1
  # The generator uses the same sources without the fuzzer runtime.
  # shellcheck disable=SC2086
  "$CC" -g -O1 -fsanitize=address,undefined -I"$SRC/include" -I"$SRC/src" -D"$gendef" \
    "$WORK/gen_seeds.c" "${sources[@]}" $libs -o "$dir/gen_seeds" >>"$dir/build.log" 2>&1 &&
    "$dir/gen_seeds" "$dir/seeds" >>"$dir/build.log" 2>&1 || return 1
  cp "$dir/seeds/"* "$dir/corpus/" 2>/dev/null
  return 0
}

write_dicts() {
  cat >"$WORK/safetensors/dict" <<'EOF'
"__metadata__"
"weight_map"
".safetensors"
"dtype"
"shape"
"data_offsets"
"F32"
"F16"
"BF16"
"F64"
"I64"
"U8"
"BOOL"
"\x22:["
"],"
"18446744073709551615"
"9007199254740993"
"1e400"
"-0"
EOF
}

# FUZZ_JOBS (default: the CPU count) targets at once, for the builds and for the runs:
# each fuzzer then has about a core for its SECONDS_EACH (all at once would share the
# cores among every target and cut each one's executions), and the whole takes about
# SECONDS_EACH x targets / FUZZ_JOBS, plus the builds.
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
status=0
entries=()
for entry in "${targets[@]}"; do
  name=${entry%%|*}
  if [ ! -f "$SRC/tests/fuzz/fuzz_$name.c" ]; then
    echo "fuzz_$name: skipped (tests/fuzz/fuzz_$name.c not present)"
    continue
  fi
  entries+=("$entry")
done
ready=()
for ((i = 0; i < ${#entries[@]}; i += JOBS)); do
  declare -A bpids=()
  for entry in "${entries[@]:i:JOBS}"; do
    IFS='|' read -r name gendef sources libs <<<"$entry"
    build_target "$name" "$gendef" "$sources" "$libs" &
    bpids[$name]=$!
  done
  for entry in "${entries[@]:i:JOBS}"; do
    name=${entry%%|*}
    if wait "${bpids[$name]}"; then
      ready+=("$name")
    else
      echo "fuzz_$name: FAILED TO BUILD (log: $WORK/$name/build.log)"
      sed 's/^/  /' "$WORK/$name/build.log" | tail -20
      status=1
    fi
  done
done

# start_target NAME: its fuzzer in the background, for SECONDS_EACH seconds
declare -A pids=()
start_target() {
  local name=$1 extra=()
  if [ "$name" = safetensors ]; then
    write_dicts
    extra+=(-dict="$WORK/safetensors/dict")
  fi
  (cd "$WORK/$name" &&
    ./"fuzz_$name" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$WORK/$name/" "${extra[@]}" corpus \
      >"$WORK/$name/fuzz.log" 2>&1) &
  pids[$name]=$!
}
# finish_target NAME: waits for it; a crash, or no count of executed inputs in its
# final stats (it did not fuzz), fails the run
finish_target() {
  local name=$1 runs
  if wait "${pids[$name]}"; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$WORK/$name/fuzz.log" | grep -o '[0-9]*$')
    if [ -n "$runs" ] && [ "$runs" -gt 0 ]; then
      echo "fuzz_$name: ok ($runs inputs in ${SECONDS_EACH}s, corpus $(ls "$WORK/$name/corpus" | wc -l) files)"
    else
      echo "fuzz_$name: FAILED: no inputs executed (log: $WORK/$name/fuzz.log)"
      tail -5 "$WORK/$name/fuzz.log" | sed 's/^/  /'
      status=1
    fi
  else
    echo "fuzz_$name: FOUND A PROBLEM (log: $WORK/$name/fuzz.log)"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$WORK/$name/fuzz.log" | head -10 | sed 's/^/  /'
    status=1
  fi
}

for ((i = 0; i < ${#ready[@]}; i += JOBS)); do
  for name in "${ready[@]:i:JOBS}"; do start_target "$name"; done
  for name in "${ready[@]:i:JOBS}"; do finish_target "$name"; done
done
echo "fuzz: ${#ready[@]} target(s) of ${SECONDS_EACH} s each, $JOBS at a time: ${SECONDS} s in all"
exit $status

#!/bin/sh
# Hugging Face interop (src/ckpt/hf_*.c, src/cli/export_cli.c, --init-from-hf): an atoll
# checkpoint exported with `atoll export --to hf` loads in transformers with the same
# logits (within 1e-4) and its tokenizer.json in tokenizers; a GPT-2 made and saved by
# transformers comes back unchanged through --init-from-hf and export (its
# model.safetensors byte for byte); bad directories
# and flags are refused with one line.
# usage: test_hf.sh ATOLL SOURCE_DIR HF_LOGITS
ATOLL=$1 SRC=$2 HF_LOGITS=$3
. "$SRC/tests/cli/common.sh"
# the venv with transformers (scripts/venv.sh makes it from PyPI when missing)
use_venv transformers tokenizers safetensors
warm_python
HPY=py_run
CHECK="$HPY $SRC/tests/hf/check_hf.py"
small_data
cd "$TMP"
quiet() { grep -v "Loading weights" "$@"; }

# 1. atoll -> transformers: logits and tokenizer
"$ATOLL" train $TINY --data data --out r1 --steps 4 >/dev/null 2>&1 || fail "train r1"
if "$ATOLL" export --ckpt r1 --to hf --out exp >/dev/null 2>"$TMP/err"; then pass "export"; else fail "export: $(cat "$TMP/err")"; fi
ls -a . | grep -q '^\.tmp-' && fail "export left a temporary directory"
mkdir dump
"$HF_LOGITS" r1 dump || fail "hf_logits r1"
if $CHECK logits exp dump >"$TMP/out" 2>&1; then pass "$(quiet "$TMP/out" | tail -1)"; else fail "logits: $(tail -3 "$TMP/out")"; fi
if $CHECK tokenizer exp >"$TMP/out" 2>&1; then pass "$(tail -1 "$TMP/out")"; else fail "tokenizer: $(tail -3 "$TMP/out")"; fi

# 2. transformers -> atoll -> transformers: unchanged, and the same logits
$CHECK make hfm 2 2 32 32 256 >/dev/null 2>&1 || fail "make a GPT-2 with transformers"
# lr 0: one step leaves the weights as they came in
"$ATOLL" train $TINY --data data --out r2 --steps 1 --lr 0 --init-from-hf hfm >/dev/null 2>"$TMP/err" ||
  fail "--init-from-hf: $(cat "$TMP/err")"
"$ATOLL" export --ckpt r2 --to hf --out exp2 >/dev/null 2>&1 || fail "export r2"
if $CHECK same hfm exp2 >"$TMP/out" 2>&1; then pass "round trip: $(tail -1 "$TMP/out")"; else fail "round trip: $(tail -3 "$TMP/out")"; fi
if $CHECK exact hfm exp2 >"$TMP/out" 2>&1; then pass "round trip: $(tail -1 "$TMP/out")"; else fail "round trip: $(tail -3 "$TMP/out")"; fi
mkdir dump2
"$HF_LOGITS" r2 dump2 || fail "hf_logits r2"
if $CHECK logits hfm dump2 >"$TMP/out" 2>&1; then pass "transformers' model in atoll: $(quiet "$TMP/out" | tail -1)"; else fail "logits of hfm: $(tail -3 "$TMP/out")"; fi
grep -q '"init-from-hf":[[:space:]]*"hfm"' r2/checkpoints/step_00000001/state.json && pass "state.json records --init-from-hf" || fail "state.json does not record --init-from-hf"
# a tied head saved as a copy of wte is accepted; BF16 weights are read as their values
$CHECK edit hfm tied tie >/dev/null 2>&1
"$ATOLL" train $TINY --data data --out r3 --steps 1 --lr 0 --init-from-hf tied >/dev/null 2>&1 && pass "lm_head.weight equal to wte accepted" || fail "tied copy refused"
$CHECK edit hfm b16 bf16 >/dev/null 2>&1
"$ATOLL" train $TINY --data data --out r4 --steps 1 --lr 0 --init-from-hf b16 >/dev/null 2>&1 && "$ATOLL" export --ckpt r4 --to hf --out exp4 >/dev/null 2>&1 || fail "bf16 import"
if $CHECK same_bf16 hfm exp4 >"$TMP/out" 2>&1; then pass "$(tail -1 "$TMP/out")"; else fail "bf16: $(tail -3 "$TMP/out")"; fi

# 3. refusals, one line each
expect_error "unknown --to" "--to onnx: unknown export format" "$ATOLL" export --ckpt r1 --to onnx --out x1
expect_error "export onto a non-empty directory" "exists and is not empty" "$ATOLL" export --ckpt r1 --to hf --out exp
expect_error "export without --out" "--out" "$ATOLL" export --ckpt r1 --to hf
expect_error "export of no checkpoint" "nothere" "$ATOLL" export --ckpt nothere --to hf --out x2
expect_error "hf shape differs" "--dim 64: disagrees with hfm/config.json's n_embd 32" \
  "$ATOLL" train $TINY --dim 64 --data data --out r5 --steps 1 --init-from-hf hfm
$CHECK edit hfm miss drop transformer.h.1.mlp.c_fc.bias >/dev/null 2>&1
expect_error "hf tensor missing" "1 tensor missing: transformer.h.1.mlp.c_fc.bias" \
  "$ATOLL" train $TINY --data data --out r6 --steps 1 --init-from-hf miss
$CHECK edit hfm extra extra transformer.h.0.attn.masked_bias >/dev/null 2>&1
expect_error "hf tensor extra" "does not have: transformer.h.0.attn.masked_bias" \
  "$ATOLL" train $TINY --data data --out r7 --steps 1 --init-from-hf extra
$CHECK edit hfm untied untie >/dev/null 2>&1
expect_error "hf untied head" "lm_head.weight differs from transformer.wte.weight" \
  "$ATOLL" train $TINY --data data --out r8 --steps 1 --init-from-hf untied
$CHECK edit hfm mistral model_type mistral >/dev/null 2>&1
expect_error "hf model_type" "model_type 'mistral' is not one atoll reads (known: gpt2, llama, qwen2)" \
  "$ATOLL" train $TINY --data data --out r9 --steps 1 --init-from-hf mistral
expect_error "gpt2 into a llama run" "--arch llama: disagrees with hfm/config.json's model_type gpt2" \
  "$ATOLL" train $TINY --arch llama --data data --out r12 --steps 1 --init-from-hf hfm
expect_error "hf directory missing" "nothere/config.json" \
  "$ATOLL" train $TINY --data data --out r10 --steps 1 --init-from-hf nothere
expect_error "both starting points" "conflicts with --init-from" \
  "$ATOLL" train $TINY --data data --out r11 --steps 1 --init-from-hf hfm --init-from r1
expect_error "--init-from-hf with --resume" "--init-from-hf: conflicts with --resume" \
  "$ATOLL" train --resume r1 --steps 8 --init-from-hf hfm
# the directory's tokenizer.json must be --data's tokenizer (byte data here): another
# tokenizer's ids, or a file that is no tokenizer, are refused
cp -r exp expbpe && "$ATOLL" tokenizer train --text /usr/share/games/fortunes/art --vocab-size 300 --out expbpe/tokenizer.json >/dev/null 2>&1 \
  || fail "a BPE tokenizer for expbpe"
expect_error "hf tokenizer.json of another tokenizer" "its tokenizer.json is tokenizer bpe" \
  "$ATOLL" train $TINY --data data --out r9 --steps 1 --init-from-hf expbpe
cp -r exp expjunk && echo garbage >expjunk/tokenizer.json
expect_error "hf tokenizer.json that is no tokenizer" "expjunk/tokenizer.json" \
  "$ATOLL" train $TINY --data data --out r10 --steps 1 --init-from-hf expjunk
finish

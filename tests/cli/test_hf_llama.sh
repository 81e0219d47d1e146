#!/bin/sh
# Hugging Face interop for --arch llama (src/ckpt/hf_names.c's llama table, hf_export.c,
# hf_import.c): tiny Llamas (grouped-query attention; untied and tied heads; another
# norm-eps and rope-theta) exported with `atoll export --to hf` load in transformers as
# LlamaForCausalLM with atoll's logits (within 1e-4), while the same weights with q/k
# rows in the interleaved rotary order do not (so no permutation is needed); Llamas made
# and saved by transformers come back unchanged through --init-from-hf and export;
# a BPE checkpoint's tokenizer.json goes with it; config.json keys that differ from
# the run are refused with one line.
# usage: test_hf_llama.sh ATOLL SOURCE_DIR HF_LOGITS
ATOLL=$1 SRC=$2 HF_LOGITS=$3
. "$SRC/tests/cli/common.sh"
use_venv transformers tokenizers safetensors
HPY=$VPY
CHECK="$HPY $SRC/tests/hf/check_hf.py"
small_data
cd "$TMP"
quiet() { grep -v "Loading weights" "$@"; }
# 4 query heads sharing 2 key/value heads, SwiGLU width 96 (multiple-of 32 for dim 32)
LL="--arch llama --layers 2 --heads 4 --kv-heads 2 --dim 32 --multiple-of 32 --context 32 --batch 4 --eval-batches 2 --threads 1"
LT="--arch llama --layers 2 --heads 4 --kv-heads 1 --dim 32 --multiple-of 32 --context 32 --batch 4 --eval-batches 2 --threads 1 --tie 1"

# logits NAME RUN EXPORT: atoll's logits of RUN against transformers' of EXPORT
logits() {
  mkdir "dump_$1"
  "$HF_LOGITS" "$2" "dump_$1" || { fail "hf_logits $2"; return; }
  if $CHECK logits "$3" "dump_$1" >"$TMP/out" 2>&1; then pass "$1: $(quiet "$TMP/out" | tail -1)"; else fail "$1: $(tail -3 "$TMP/out")"; fi
}

# 1. atoll -> transformers. Trained at a high rate so that attention is far from
# uniform and a wrong rotary convention shows in the logits.
"$ATOLL" train $LL --norm-eps 1e-6 --rope-theta 500000 --data data --out u --steps 30 --lr 1e-2 --warmup 2 >/dev/null 2>&1 || fail "train u"
"$ATOLL" train $LT --data data --out t --steps 30 --lr 1e-2 --warmup 2 >/dev/null 2>&1 || fail "train t"
for r in u t; do
  "$ATOLL" export --ckpt $r --to hf --out exp_$r >/dev/null 2>"$TMP/err" || fail "export $r: $(cat "$TMP/err")"
done
grep -q '"rms_norm_eps":[[:space:]]*1e-06,' exp_u/config.json && grep -q '"rope_theta":[[:space:]]*500000,' exp_u/config.json &&
  pass "config.json carries --norm-eps 1e-6 and --rope-theta 500000 as written" || fail "eps/theta in config.json: $(cat exp_u/config.json)"
logits "untied GQA export" u exp_u
logits "tied MQA export" t exp_t
if $CHECK tokenizer exp_u >"$TMP/out" 2>&1; then pass "$(tail -1 "$TMP/out")"; else fail "tokenizer: $(tail -3 "$TMP/out")"; fi
# a Llama trained on BPE tokens (vocabulary 320) exports its tokenizer with the model
"$ATOLL" tokenizer train --text /usr/share/games/fortunes/art --vocab-size 320 --out bpe.json >/dev/null 2>&1 &&
  "$ATOLL" prepare --text /usr/share/games/fortunes/art --tokenizer bpe.json --out bdata >/dev/null 2>&1 &&
  "$ATOLL" train $LL --data bdata --out b --steps 20 --lr 1e-2 --warmup 2 >/dev/null 2>&1 &&
  "$ATOLL" export --ckpt b --to hf --out exp_b >/dev/null 2>&1 || fail "BPE Llama: tokenizer, prepare, train or export"
logits "BPE Llama export" b exp_b
printf 'The art of science: naïve café, 日本語 🙂\n  two  spaces\tand a tab\n' >text.txt
"$ATOLL" tokenizer encode --tokenizer bpe.json --text text.txt >text.ids || fail "atoll tokenizer encode"
if $CHECK tokens exp_b text.txt text.ids >"$TMP/out" 2>&1; then pass "BPE Llama export: $(tail -1 "$TMP/out")"; else fail "BPE tokenizer.json: $(tail -3 "$TMP/out")"; fi

# 2. transformers -> atoll -> transformers, untied and tied
$CHECK make_llama hfu 2 4 2 32 96 32 256 0 1e-5 10000 >/dev/null 2>&1 || fail "make an untied Llama with transformers"
$CHECK make_llama hft 2 4 1 32 96 32 256 1 1e-6 250000 >/dev/null 2>&1 || fail "make a tied Llama with transformers"
"$ATOLL" train $LL --data data --out ru --steps 1 --lr 0 --init-from-hf hfu >/dev/null 2>"$TMP/err" || fail "--init-from-hf hfu: $(cat "$TMP/err")"
"$ATOLL" train $LT --norm-eps 1e-6 --rope-theta 250000 --data data --out rt --steps 1 --lr 0 --init-from-hf hft >/dev/null 2>"$TMP/err" ||
  fail "--init-from-hf hft: $(cat "$TMP/err")"
for r in u t; do
  "$ATOLL" export --ckpt r$r --to hf --out back_$r >/dev/null 2>&1 || fail "export r$r"
  if $CHECK same hf$r back_$r >"$TMP/out" 2>&1; then pass "round trip hf$r: $(tail -1 "$TMP/out")"; else fail "round trip hf$r: $(tail -3 "$TMP/out")"; fi
done
logits "transformers' untied Llama in atoll" ru hfu
logits "transformers' tied Llama in atoll" rt hft
$CHECK edit hft tcopy tie >/dev/null 2>&1
"$ATOLL" train $LT --norm-eps 1e-6 --rope-theta 250000 --data data --out r3 --steps 1 --lr 0 --init-from-hf tcopy >/dev/null 2>&1 &&
  pass "tied: lm_head.weight equal to model.embed_tokens.weight accepted" || fail "tied copy refused"

# 3. refusals, one line each (hfu matches $LL)
expect_error "kv-heads differ" "num_key_value_heads is 2, this run has --kv-heads 4 (pass --kv-heads 2)" \
  "$ATOLL" train $LL --kv-heads 4 --data data --out x1 --steps 1 --init-from-hf hfu
expect_error "norm-eps differs" "rms_norm_eps is 1e-05, this run has --norm-eps 1e-06 (pass --norm-eps 1e-05)" \
  "$ATOLL" train $LL --norm-eps 1e-6 --data data --out x2 --steps 1 --init-from-hf hfu
expect_error "rope-theta differs" "rope_theta is 10000, this run has --rope-theta 500000 (pass --rope-theta 10000)" \
  "$ATOLL" train $LL --rope-theta 500000 --data data --out x3 --steps 1 --init-from-hf hfu
expect_error "tie differs" "tie_word_embeddings is false, this run has --tie 1 (pass --tie 0)" \
  "$ATOLL" train $LL --tie 1 --data data --out x4 --steps 1 --init-from-hf hfu
expect_error "SwiGLU width differs" "intermediate_size is 96, this run's SwiGLU width is 256 (pass --multiple-of 96)" \
  "$ATOLL" train $LL --multiple-of 256 --data data --out x5 --steps 1 --init-from-hf hfu
expect_error "context differs" "max_position_embeddings is 32, this run has --context 64" \
  "$ATOLL" train $LL --context 64 --data data --out x6 --steps 1 --init-from-hf hfu
expect_error "llama into a gpt2 run" "model_type 'llama' is not this run's architecture (--arch gpt2; pass --arch llama)" \
  "$ATOLL" train $TINY --data data --out x7 --steps 1 --init-from-hf hfu
i=10
edit_refused() { # NAME KEYWORD EDIT...: hfu edited, then refused
  name=$1 keyword=$2; shift 2
  i=$((i + 1))
  $CHECK edit hfu e$i "$@" >/dev/null 2>&1 || { fail "$name: edit $*"; return; }
  expect_error "$name" "$keyword" "$ATOLL" train $LL --data data --out x$i --steps 1 --init-from-hf e$i
}
edit_refused "rope scaling" "rope_parameters.rope_type is llama3; atoll's rotary embedding has no scaling" \
  set 'rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0}'
edit_refused "4.x-style rope_theta differs" "rope_theta is 20000, this run has --rope-theta 10000" \
  set 'rope_parameters=null' 'rope_theta=20000.0'
edit_refused "4.x-style rope_scaling" "rope_scaling.rope_type is linear" \
  set 'rope_parameters=null' 'rope_theta=10000.0' 'rope_scaling={"type": "linear", "factor": 2.0}'
$CHECK edit hfu old4 set 'rope_parameters=null' 'rope_theta=10000.0' 'rope_scaling=null' >/dev/null 2>&1
"$ATOLL" train $LL --data data --out r4 --steps 1 --lr 0 --init-from-hf old4 >/dev/null 2>"$TMP/err" &&
  pass "transformers 4.x's config.json (top-level rope_theta, rope_scaling null) accepted" || fail "4.x config: $(cat "$TMP/err")"
edit_refused "attention bias" "attention_bias is true; atoll's Llama has no biases" set 'attention_bias=true'
edit_refused "activation" "hidden_act is gelu; atoll's SwiGLU uses silu" set 'hidden_act="gelu"'
edit_refused "head_dim" "head_dim must be null or hidden_size / num_attention_heads = 8" set 'head_dim=16'
edit_refused "missing q_proj" "1 tensor missing: model.layers.1.self_attn.q_proj.weight" drop model.layers.1.self_attn.q_proj.weight
edit_refused "unknown model_type" "model_type 'mistral' is not one atoll reads (known: gpt2, llama)" model_type mistral
$CHECK edit hft tdiff untie >/dev/null 2>&1
expect_error "tied head differs" "lm_head.weight differs from model.embed_tokens.weight" \
  "$ATOLL" train $LT --norm-eps 1e-6 --rope-theta 250000 --data data --out x30 --steps 1 --init-from-hf tdiff
finish

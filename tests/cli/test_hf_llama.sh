#!/bin/sh
# Hugging Face interop for --arch llama (src/ckpt/hf_names.c's llama table, hf_export.c,
# hf_import.c): tiny Llamas (grouped-query attention; untied and tied heads; another
# norm-eps and rope-theta) exported with `atoll export --to hf` load in transformers as
# LlamaForCausalLM with atoll's logits (within 1e-4), while the same weights with q/k
# rows in the interleaved rotary order do not (so no permutation is needed); Llamas made
# and saved by transformers come back unchanged through --init-from-hf and export;
# a BPE checkpoint's tokenizer.json goes with it; --init-from-hf takes the whole shape
# from config.json, so a Llama 3.1-style model (rope_scaling llama3, in transformers 5's
# rope_parameters and in 4.x's rope_theta + rope_scaling) loads with no shape flag and
# gives transformers' logits (ignoring the scaling gives 0.08 off); a shape flag that
# agrees is accepted, one that differs is refused with one line naming the flag and
# both values, as are config.json keys atoll cannot run (another rope type). Qwen2
# (model_type qwen2: Llama with q/k/v biases, atoll's --qkv-bias 1) made by transformers,
# in one file, sharded (model.safetensors.index.json) in fp32 and sharded in bf16, loads
# with no shape flags, gives transformers' logits (and other logits with the biases
# zeroed), exports back equal tensor by tensor and loads in transformers as
# Qwen2ForCausalLM; `export --dtype bf16 --max-shard-size 20KB` of the bf16 shards (and
# --max-shard-size of the fp32 shards) gives the same tensors in the same dtype bit for
# bit and the weights' files (shards, index) byte for byte, which transformers loads
# with atoll's logits (and the one-file Qwen2 and Llamas byte for byte too); a tensor
# missing from every shard, an index naming a missing shard, a shard holding a tensor
# the index puts elsewhere, sliding-window attention and a --qkv-bias that disagrees are
# each refused in one line, as are export's bad --dtype and --max-shard-size. `atoll
# eval --hf` on the bf16 shards, the llama3-scaled and the tied Llama gives
# transformers' loss on the same windows (within 1e-4 relative), and `atoll eval --ckpt`
# the run's own final validation loss exactly; eval's bad flags get one line. A Llama
# whose head_dim is not hidden_size / num_attention_heads (12 over 32 / 4) made by
# transformers loads with no flag, gives transformers' logits and loss and exports back
# byte for byte (config.json's head_dim 12), atoll's own --head-dim 12 export gives
# transformers' logits, and a --head-dim that disagrees with config.json, a head_dim that
# disagrees with the tensors and an odd one are refused in one line. A Llama (llama3 rope
# scaling, untied) saved by transformers in bf16 shards of 20 KB loads with no shape flag,
# gives transformers' logits and `eval --hf` loss, and `export --dtype bf16
# --max-shard-size 20KB` gives its weights' files byte for byte. Three steps trained from
# models saved by transformers (AdamW on its schedule, twice, one of them the head_dim
# Llama; SGD) equal transformers' own steps in float64 on the same windows, redrawn in
# Python (tests/hf/step_check.py), within 1e-5 norm-wise per tensor.
# usage: test_hf_llama.sh ATOLL SOURCE_DIR HF_LOGITS
ATOLL=$1 SRC=$2 HF_LOGITS=$3
. "$SRC/tests/cli/common.sh"
use_venv transformers tokenizers safetensors
warm_python
HPY=py_run
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
  if $CHECK exact hf$r back_$r >"$TMP/out" 2>&1; then pass "round trip hf$r: $(tail -1 "$TMP/out")"; else fail "round trip hf$r: $(tail -3 "$TMP/out")"; fi
done
logits "transformers' untied Llama in atoll" ru hfu
logits "transformers' tied Llama in atoll" rt hft
$CHECK edit hft tcopy tie >/dev/null 2>&1
"$ATOLL" train $LT --norm-eps 1e-6 --rope-theta 250000 --data data --out r3 --steps 1 --lr 0 --init-from-hf tcopy >/dev/null 2>&1 &&
  pass "tied: lm_head.weight equal to model.embed_tokens.weight accepted" || fail "tied copy refused"

# 3. refusals, one line each (hfu matches $LL)
expect_error "kv-heads differ" "--kv-heads 4: disagrees with hfu/config.json's num_key_value_heads 2" \
  "$ATOLL" train $LL --kv-heads 4 --data data --out x1 --steps 1 --init-from-hf hfu
expect_error "norm-eps differs" "--norm-eps 1e-06: disagrees with hfu/config.json's rms_norm_eps 1e-05" \
  "$ATOLL" train $LL --norm-eps 1e-6 --data data --out x2 --steps 1 --init-from-hf hfu
expect_error "rope-theta differs" "--rope-theta 500000: disagrees with hfu/config.json's rope_theta 10000" \
  "$ATOLL" train $LL --rope-theta 500000 --data data --out x3 --steps 1 --init-from-hf hfu
expect_error "tie differs" "--tie 1: disagrees with hfu/config.json's tie_word_embeddings false" \
  "$ATOLL" train $LL --tie 1 --data data --out x4 --steps 1 --init-from-hf hfu
expect_error "SwiGLU width differs" "--multiple-of 256: disagrees with hfu/config.json's intermediate_size 96" \
  "$ATOLL" train $LL --multiple-of 256 --data data --out x5 --steps 1 --init-from-hf hfu
expect_error "context differs" "--context 64: disagrees with hfu/config.json's max_position_embeddings 32" \
  "$ATOLL" train $LL --context 64 --data data --out x6 --steps 1 --init-from-hf hfu
expect_error "llama into a gpt2 run" "--arch gpt2: disagrees with hfu/config.json's model_type llama" \
  "$ATOLL" train $TINY --arch gpt2 --data data --out x7 --steps 1 --init-from-hf hfu
i=10
edit_refused() { # NAME KEYWORD EDIT...: hfu edited, then refused
  name=$1 keyword=$2; shift 2
  i=$((i + 1))
  $CHECK edit hfu e$i "$@" >/dev/null 2>&1 || { fail "$name: edit $*"; return; }
  expect_error "$name" "$keyword" "$ATOLL" train $LL --data data --out x$i --steps 1 --init-from-hf e$i
}
edit_refused "llama3 without its keys" "rope_parameters.low_freq_factor is missing" \
  set 'rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0}'
edit_refused "another rope type" "rope_parameters.rope_type is yarn; atoll's rotary embedding reads default and llama3" \
  set 'rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0}'
edit_refused "4.x-style rope_scaling" "rope_scaling.rope_type is linear; atoll's rotary embedding reads default and llama3" \
  set 'rope_parameters=null' 'rope_theta=10000.0' 'rope_scaling={"type": "linear", "factor": 2.0}'
$CHECK edit hfu old4 set 'rope_parameters=null' 'rope_theta=10000.0' 'rope_scaling=null' >/dev/null 2>&1
"$ATOLL" train $LL --data data --out r4 --steps 1 --lr 0 --init-from-hf old4 >/dev/null 2>"$TMP/err" &&
  pass "transformers 4.x's config.json (top-level rope_theta, rope_scaling null) accepted" || fail "4.x config: $(cat "$TMP/err")"
edit_refused "attention bias" "attention_bias is true; atoll's Llama has no biases" set 'attention_bias=true'
edit_refused "activation" "hidden_act is gelu; atoll's SwiGLU uses silu" set 'hidden_act="gelu"'
edit_refused "head_dim beside its tensors" "tensor model.layers.0.self_attn.q_proj.weight has 2 dimensions .32, 32., expected .64, 32." \
  set 'head_dim=16'
edit_refused "odd head_dim" "head-dim: rotary embeddings need an even head size, got 7" set 'head_dim=7'
edit_refused "missing q_proj" "1 tensor missing: model.layers.1.self_attn.q_proj.weight" drop model.layers.1.self_attn.q_proj.weight
edit_refused "unknown model_type" "model_type 'mistral' is not one atoll reads (known: gpt2, llama, qwen2)" model_type mistral
i=$((i + 1))
$CHECK edit hfu e$i set 'rope_parameters=null' 'rope_theta=20000.0' >/dev/null 2>&1
expect_error "4.x-style rope_theta differs" "--rope-theta 10000: disagrees with e$i/config.json's rope_theta 20000" \
  "$ATOLL" train $LL --rope-theta 10000 --data data --out x$i --steps 1 --init-from-hf e$i

# 4. the whole shape from config.json: a Llama with Llama 3.1's rope scaling (factor 4,
# original context 16 of 64: the two slowest of a head's four frequencies divided by 4,
# the fastest blended), no shape flag; then the same keys in transformers 4.x's form
$CHECK make_llama l3 2 4 2 32 96 64 256 0 1e-5 10000 4 1 4 16 >/dev/null 2>&1 || fail "make a llama3-scaled Llama with transformers"
NOSHAPE="--data data --batch 2 --eval-batches 1 --threads 1 --steps 1 --lr 0"
"$ATOLL" train $NOSHAPE --out r3a --init-from-hf l3 >/dev/null 2>"$TMP/err" || fail "--init-from-hf l3 without shape flags: $(cat "$TMP/err")"
logits "llama3 rope scaling, rope_parameters, no shape flags" r3a l3
$CHECK edit l3 l3old set 'rope_parameters=null' 'rope_theta=10000.0' \
  'rope_scaling={"type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}' >/dev/null 2>&1
"$ATOLL" train $NOSHAPE --out r3b --init-from-hf l3old >/dev/null 2>"$TMP/err" || fail "--init-from-hf l3old: $(cat "$TMP/err")"
logits "llama3 rope scaling, 4.x's rope_theta + rope_scaling" r3b l3old
"$ATOLL" export --ckpt r3a --to hf --out back_l3 >/dev/null 2>&1 || fail "export r3a"
if $CHECK same l3 back_l3 >"$TMP/out" 2>&1; then pass "round trip l3 (rope scaling kept): $(tail -1 "$TMP/out")"; else fail "round trip l3: $(tail -3 "$TMP/out")"; fi
"$ATOLL" train $NOSHAPE --out r3c --arch llama --layers 2 --kv-heads 2 --context 64 --rope-scaling llama3 --rope-factor 4 \
  --init-from-hf l3 >/dev/null 2>"$TMP/err" && pass "shape flags that agree with config.json accepted" || fail "agreeing flags: $(cat "$TMP/err")"
expect_error "rope-factor differs" "--rope-factor 8: disagrees with l3/config.json's factor 4" \
  "$ATOLL" train $NOSHAPE --out x40 --rope-factor 8 --init-from-hf l3
expect_error "rope-scaling differs" "--rope-scaling none: disagrees with l3/config.json's rope_type llama3" \
  "$ATOLL" train $NOSHAPE --out x41 --rope-scaling none --init-from-hf l3
expect_error "layers differ" "--layers 3: disagrees with l3/config.json's num_hidden_layers 2" \
  "$ATOLL" train $NOSHAPE --out x42 --layers 3 --init-from-hf l3
$CHECK edit hft tdiff untie >/dev/null 2>&1
expect_error "tied head differs" "lm_head.weight differs from model.embed_tokens.weight" \
  "$ATOLL" train $LT --norm-eps 1e-6 --rope-theta 250000 --data data --out x30 --steps 1 --init-from-hf tdiff

# 5. Qwen2: q/k/v biases; one file, sharded fp32, sharded bf16 (tied)
$CHECK make_qwen2 q1 2 4 2 32 96 32 256 0 >/dev/null 2>&1 || fail "make a Qwen2 with transformers"
$CHECK make_qwen2 qs 2 4 2 32 96 32 256 0 shard >/dev/null 2>&1 || fail "make a sharded Qwen2 with transformers"
$CHECK make_qwen2 qb 2 4 1 32 96 32 256 1 bf16 >/dev/null 2>&1 || fail "make a sharded bf16 Qwen2 with transformers"
[ -f qs/model.safetensors.index.json ] && [ ! -f qs/model.safetensors ] && pass "qs is sharded: $(ls qs | grep -c 'of-.*safetensors') shards" ||
  fail "qs is not sharded: $(ls qs)"
for q in q1 qs qb; do
  "$ATOLL" train $NOSHAPE --out r_$q --init-from-hf $q >/dev/null 2>"$TMP/err" || fail "--init-from-hf $q: $(cat "$TMP/err")"
done
logits "transformers' Qwen2 in atoll, no shape flags" r_q1 q1
# the shards' values as read (export writes what was read), then transformers on the export
for q in qs qb; do
  "$ATOLL" export --ckpt r_$q --to hf --out back_$q >/dev/null 2>&1 || fail "export r_$q"
  if $CHECK same $q back_$q >"$TMP/out" 2>&1; then pass "round trip $q: $(tail -1 "$TMP/out")"; else fail "round trip $q: $(tail -3 "$TMP/out")"; fi
done
logits "atoll's Qwen2 (from bf16 shards) exported, in transformers" r_qb back_qb
# export as they came: bf16 shards and fp32 shards (20 KB each, as make_qwen2 saved
# them) give the same tensors in the same dtype bit for bit, and transformers loads them
"$ATOLL" export --ckpt r_qb --to hf --out exp_qb --dtype bf16 --max-shard-size 20KB >/dev/null 2>"$TMP/err" ||
  fail "export --dtype bf16: $(cat "$TMP/err")"
"$ATOLL" export --ckpt r_qs --to hf --out exp_qs --max-shard-size 20KB >/dev/null 2>"$TMP/err" ||
  fail "export --max-shard-size: $(cat "$TMP/err")"
"$ATOLL" export --ckpt r_q1 --to hf --out exp_q1 >/dev/null 2>"$TMP/err" || fail "export r_q1: $(cat "$TMP/err")"
for q in qb qs q1; do
  if $CHECK exact $q exp_$q >"$TMP/out" 2>&1; then pass "round trip $q as saved: $(tail -1 "$TMP/out")"; else fail "exact round trip $q: $(tail -3 "$TMP/out")"; fi
done
grep -q '"torch_dtype":[[:space:]]*"bfloat16"' exp_qb/config.json && pass "bf16 export: config.json's torch_dtype bfloat16" ||
  fail "bf16 export: torch_dtype in $(cat exp_qb/config.json)"
logits "atoll's Qwen2 exported as bf16 shards, in transformers" r_qb exp_qb
expect_error "export --dtype fp16" "--dtype fp16: unknown (known: fp32, bf16)" \
  "$ATOLL" export --ckpt r_qb --to hf --out x70 --dtype fp16
expect_error "export --max-shard-size 20XB" "--max-shard-size 20XB: must be a whole number of bytes, KB, MB or GB" \
  "$ATOLL" export --ckpt r_qb --to hf --out x71 --max-shard-size 20XB
# atoll eval: transformers' loss on eval's windows; a run's final val_loss again
"$ATOLL" eval --hf qb --data data --json --windows-out qb.win >qb.json 2>"$TMP/err" || fail "eval --hf qb: $(cat "$TMP/err")"
if $CHECK loss qb qb.win qb.json >"$TMP/out" 2>&1; then pass "eval --hf (bf16 shards): $(tail -1 "$TMP/out")"; else fail "eval --hf: $(tail -3 "$TMP/out")"; fi
# and on the Llama with llama3 rope scaling and the tied Llama
for m in l3 hft; do
  "$ATOLL" eval --hf $m --data data --json --windows-out $m.win >$m.json 2>"$TMP/err" || fail "eval --hf $m: $(cat "$TMP/err")"
  if $CHECK loss $m $m.win $m.json >"$TMP/out" 2>&1; then pass "eval --hf $m: $(tail -1 "$TMP/out")"; else fail "eval --hf $m: $(tail -3 "$TMP/out")"; fi
done
"$ATOLL" eval --ckpt r_q1 --data data --json >q1.json 2>"$TMP/err" || fail "eval --ckpt r_q1: $(cat "$TMP/err")"
want=$(sed -n 's/.*"final_val_loss":[[:space:]]*\([0-9.e+-]*\).*/\1/p' r_q1/summary.json)
got=$(sed -n 's/.*"val_loss": \([0-9.e+-]*\),.*/\1/p' q1.json)
awk -v a="$got" -v b="$want" 'BEGIN { exit !(a != "" && a + 0 == b + 0) }' &&
  pass "eval --ckpt gives the run's final_val_loss $want: $(cat q1.json)" || fail "eval --ckpt: $got, the run said $want"
expect_error "eval with two models" "--ckpt or --hf: eval needs exactly one model" "$ATOLL" eval --ckpt r_q1 --hf q1 --data data
expect_error "eval --seq too long" "--seq 64: longer than the model's context 32" "$ATOLL" eval --hf q1 --data data --seq 64
i=50
qwen_refused() { # NAME KEYWORD SRC EDIT...
  name=$1 keyword=$2 src=$3; shift 3
  i=$((i + 1))
  $CHECK edit $src e$i "$@" >/dev/null 2>&1 || { fail "$name: edit $*"; return; }
  expect_error "$name" "$keyword" "$ATOLL" train $NOSHAPE --out x$i --init-from-hf e$i
}
qwen_refused "tensor in no shard" "index.json: 1 tensor missing from every shard: model.layers.1.self_attn.k_proj.bias" qs \
  shard_drop model.layers.1.self_attn.k_proj.bias
qwen_refused "shard missing" "index.json: names shard model-" qs shard_lost
qwen_refused "tensor in another shard" "holds tensor model.layers.0.self_attn.v_proj.bias, which the index puts in model-" qs \
  shard_move model.layers.0.self_attn.v_proj.bias
cp -r qs e59 && sed -i 's|"model-00001-of|"../model-00001-of|' e59/model.safetensors.index.json
expect_error "shard outside the directory" "weight_map's model.embed_tokens.weight: the shard must be a file name beside the index" \
  "$ATOLL" train $NOSHAPE --out x59 --init-from-hf e59
qwen_refused "sliding window" "use_sliding_window is true; atoll's attention is over the whole context" q1 set 'use_sliding_window=true'
expect_error "qkv-bias differs" "--qkv-bias 0: disagrees with q1/config.json's model_type qwen2" \
  "$ATOLL" train $NOSHAPE --out x60 --qkv-bias 0 --init-from-hf q1

# 6. head_dim other than hidden_size / num_attention_heads (12, not 32 / 4 = 8: q_proj
# [48, 32], k_proj and v_proj [24, 32], o_proj [32, 48]): made by transformers, loaded with
# no flag, transformers' logits and loss, exported back byte for byte; atoll's own
# --head-dim 12 exported, in transformers
$CHECK make_llama hd 2 4 2 32 96 32 256 0 1e-5 10000 head_dim=12 >/dev/null 2>&1 || fail "make a head_dim 12 Llama with transformers"
"$ATOLL" train $NOSHAPE --out r_hd --init-from-hf hd >/dev/null 2>"$TMP/err" || fail "--init-from-hf hd: $(cat "$TMP/err")"
logits "transformers' head_dim 12 Llama in atoll, no shape flags" r_hd hd
"$ATOLL" export --ckpt r_hd --to hf --out back_hd >/dev/null 2>&1 || fail "export r_hd"
grep -q '"head_dim":[[:space:]]*12,' back_hd/config.json && pass "export: config.json's head_dim 12" || fail "head_dim in $(cat back_hd/config.json)"
for c in same exact; do
  if $CHECK $c hd back_hd >"$TMP/out" 2>&1; then pass "round trip hd: $(tail -1 "$TMP/out")"; else fail "round trip hd: $(tail -3 "$TMP/out")"; fi
done
"$ATOLL" eval --hf hd --data data --json --windows-out hd.win >hd.json 2>"$TMP/err" || fail "eval --hf hd: $(cat "$TMP/err")"
if $CHECK loss hd hd.win hd.json >"$TMP/out" 2>&1; then pass "eval --hf hd: $(tail -1 "$TMP/out")"; else fail "eval --hf hd: $(tail -3 "$TMP/out")"; fi
"$ATOLL" train $NOSHAPE --out r_hd2 --head-dim 12 --init-from-hf hd >/dev/null 2>"$TMP/err" &&
  pass "--head-dim that agrees with config.json accepted" || fail "agreeing --head-dim: $(cat "$TMP/err")"
expect_error "head-dim differs" "--head-dim 8: disagrees with hd/config.json's head_dim 12" \
  "$ATOLL" train $NOSHAPE --out x80 --head-dim 8 --init-from-hf hd
expect_error "head-dim left at dim / heads" "--head-dim 0: disagrees with hd/config.json's head_dim 12" \
  "$ATOLL" train $NOSHAPE --out x81 --head-dim 0 --init-from-hf hd
"$ATOLL" train $LL --head-dim 12 --data data --out uhd --steps 30 --lr 1e-2 --warmup 2 >/dev/null 2>&1 || fail "train --head-dim 12"
"$ATOLL" export --ckpt uhd --to hf --out exp_uhd >/dev/null 2>&1 || fail "export uhd"
logits "atoll's --head-dim 12 export" uhd exp_uhd

# 7. a Llama (llama3 rope scaling, untied) saved by transformers in bf16 shards of 20 KB:
# no shape flag, transformers' logits and loss, exported back byte for byte
$CHECK make_llama lb 2 4 2 32 96 64 256 0 1e-5 10000 4 1 4 16 save=bf16 >/dev/null 2>&1 || fail "make a bf16 sharded Llama with transformers"
[ -f lb/model.safetensors.index.json ] && [ ! -f lb/model.safetensors ] && pass "lb is sharded: $(ls lb | grep -c 'of-.*safetensors') shards" ||
  fail "lb is not sharded: $(ls lb)"
"$ATOLL" train $NOSHAPE --out r_lb --init-from-hf lb >/dev/null 2>"$TMP/err" || fail "--init-from-hf lb: $(cat "$TMP/err")"
logits "transformers' bf16-sharded llama3 Llama in atoll, no shape flags" r_lb lb
"$ATOLL" eval --hf lb --data data --json --windows-out lb.win >lb.json 2>"$TMP/err" || fail "eval --hf lb: $(cat "$TMP/err")"
if $CHECK loss lb lb.win lb.json >"$TMP/out" 2>&1; then pass "eval --hf lb: $(tail -1 "$TMP/out")"; else fail "eval --hf lb: $(tail -3 "$TMP/out")"; fi
"$ATOLL" export --ckpt r_lb --to hf --out exp_lb --dtype bf16 --max-shard-size 20KB >/dev/null 2>"$TMP/err" ||
  fail "export lb --dtype bf16: $(cat "$TMP/err")"
for c in same exact; do
  if $CHECK $c lb exp_lb >"$TMP/out" 2>&1; then pass "round trip lb as saved: $(tail -1 "$TMP/out")"; else fail "round trip lb: $(tail -3 "$TMP/out")"; fi
done
logits "atoll's llama3 Llama exported as bf16 shards, in transformers" r_lb exp_lb

# 8. training from a model saved by transformers: atoll's steps (--init-from-hf, AdamW on
# the schedule and SGD) redone in PyTorch on the same windows (tests/hf/step_check.py)
STEP="--data data --batch 4 --eval-every 0 --eval-batches 1 --threads 1 --steps 3"
step_check() { # ID NAME HF_DIR FLAGS...
  id=$1 name=$2 src=$3; shift 3
  "$ATOLL" train $STEP --out st_$id --init-from-hf $src "$@" >/dev/null 2>"$TMP/err" || { fail "$name: train: $(cat "$TMP/err")"; return; }
  "$ATOLL" export --ckpt st_$id --to hf --out st_exp_$id >/dev/null 2>&1 || { fail "$name: export"; return; }
  if $HPY "$SRC/tests/hf/step_check.py" $src st_$id st_exp_$id >"$TMP/out" 2>&1; then pass "$name: $(tail -1 "$TMP/out")"
  else fail "$name: $(tail -3 "$TMP/out")"; fi
}
# AdamW's first steps move each weight by about lr x g / (|g| + eps): a gradient element
# near zero, where float32's rounding is a large part of it, would move its weight by lr x
# that rounding / eps; --eps 1e-6 (not 1e-8) keeps this below the bound
step_check adamw "AdamW from hfu" hfu --lr 1e-3 --warmup 1 --eps 1e-6
step_check sgd "SGD from hfu" hfu --optimizer sgd --lr 0.5 --warmup 0 --min-lr-ratio 1
step_check hd "AdamW from the head_dim 12 Llama" hd --lr 1e-3 --warmup 1 --eps 1e-6
finish

#!/bin/sh
# atoll sample and special added tokens: a model trained on text made only of one
# special token (<|end|>, id 256 past the byte vocabulary) generates that token at
# temperature 0; sample (which echoes the prompt, <|end|>, as given) leaves the 12
# generated ones out of its output as Hugging Face's decode does, and prints their text
# with --keep-special. A non-special added token is printed either way.
# usage: test_sample_special.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"

# --keep-special is a switch: a value after it is named as a stray argument, wherever it is
expect_error "--keep-special 1 at the end" "1: unexpected argument" "$ATOLL" sample --ckpt "$TMP/none" --keep-special 1
expect_error "--keep-special 1 before a flag" "1: unexpected argument" "$ATOLL" sample --keep-special 1 --ckpt "$TMP/none"

"$ATOLL" tokenizer bytes --out "$TMP/bytes.json" || { echo "FAIL: tokenizer bytes"; exit 1; }
tok() { printf '{"id":256,"content":"%s","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":%s}' "$1" "$2"; }
for kind in special plain; do
  if [ $kind = special ]; then t=$(tok '<|end|>' true); else t=$(tok '<|end|>' false); fi
  sed "s/\"added_tokens\":[[:space:]]*\[\]/\"added_tokens\":[$t]/" "$TMP/bytes.json" >"$TMP/$kind.json"
  grep -q '<|end|>' "$TMP/$kind.json" || { fail "$kind: could not add the token"; continue; }
  mkdir -p "$TMP/text_$kind"
  i=0; : >"$TMP/text_$kind/a.txt"
  while [ $i -lt 400 ]; do printf '<|end|><|end|><|end|><|end|><|end|>' >>"$TMP/text_$kind/a.txt"; i=$((i + 1)); done
  "$ATOLL" prepare --text "$TMP/text_$kind" --tokenizer "$TMP/$kind.json" --out "$TMP/data_$kind" >/dev/null 2>"$TMP/err" \
    || { fail "$kind: prepare: $(tail -1 "$TMP/err")"; continue; }
  "$ATOLL" train --layers 1 --heads 1 --dim 16 --context 16 --batch 4 --steps 40 --lr 1e-2 --warmup 2 --threads 1 \
    --eval-every 0 --save-every 0 --data "$TMP/data_$kind" --out "$TMP/run_$kind" >/dev/null 2>"$TMP/err" \
    || { fail "$kind: train: $(tail -1 "$TMP/err")"; continue; }
  S="--ckpt $TMP/run_$kind --prompt <|end|> --tokens 12 --temperature 0"
  "$ATOLL" sample $S >"$TMP/out_$kind" 2>"$TMP/err" || fail "$kind: sample: $(tail -1 "$TMP/err")"
  "$ATOLL" sample $S --keep-special >"$TMP/keep_$kind" 2>"$TMP/err" || fail "$kind: sample --keep-special: $(tail -1 "$TMP/err")"
  n_out=$(grep -o '<|end|>' "$TMP/out_$kind" | wc -l)
  n_keep=$(grep -o '<|end|>' "$TMP/keep_$kind" | wc -l)
  if [ $kind = special ]; then
    [ "$n_keep" -eq 13 ] && pass "special: --keep-special prints the prompt and all 12 generated <|end|>" \
      || fail "special: --keep-special printed $n_keep of 1 + 12"
    [ "$(cat "$TMP/out_$kind")" = "<|end|>" ] && pass "special: left out by default (the prompt alone)" \
      || fail "special: default output was '$(head -c 80 "$TMP/out_$kind")'"
  else
    [ "$n_out" -eq 13 ] && [ "$n_keep" -eq 13 ] && pass "non-special added token printed either way" \
      || fail "non-special: printed $n_out and $n_keep of 1 + 12"
  fi
done
finish

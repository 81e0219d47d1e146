#!/bin/sh
# --island-data (src/train/island_data.c): which source files each DiLoCo island trains
# on. A corpus of 4 source files, 2 islands: `files` gives island 0 files #0 and #2 and
# island 1 #1 and #3 (round-robin); `blocks` gives island 0 #0-#1 and island 1 #2-#3
# (contiguous). The islands' tokens add up to the split's, with the byte tokenizer and
# with a BPE tokenizer (whose tokens are not the source's bytes: the manifest's
# per-source train_tokens say where each file's tokens lie). A BPE manifest without
# train_tokens (an older atoll's) is refused with one line, not read as bytes.
# usage: test_island_data.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
F=/usr/share/games/fortunes
FILES="$F/art $F/science $F/food $F/goedel"
"$ATOLL" prepare --text $FILES --out "$TMP/d4" >/dev/null 2>&1 || fail "prepare 4 files"
"$ATOLL" tokenizer train --text $FILES --vocab-size 400 --out "$TMP/tok.json" >/dev/null 2>&1 || fail "tokenizer train"
"$ATOLL" prepare --text $FILES --tokenizer "$TMP/tok.json" --out "$TMP/b4" >/dev/null 2>&1 || fail "prepare 4 files, BPE"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --eval-every 0 --eval-batches 2 --save-every 0 --steps 2 --islands 2 --sync-every 2"

# manifest_sum DIR: the split's train_tokens and the sum of the sources' (equal, checked)
manifest_sum() { /usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
s = sum(x["train_tokens"] for x in m["sources"])
assert s == m["train_tokens"], (s, m["train_tokens"])
print(s)' "$1"; }

# run_case NAME DATA MODE WANT0 WANT1: the islands' lines must name these files
run_case() {
  name=$1; data=$2; mode=$3; want0=$4; want1=$5
  $MPIRUN -np 2 $ATOLL train $M --data "$data" --island-data $mode --out "$TMP/$name" >/dev/null 2>"$TMP/$name.err" ||
    { fail "$name: $(tail -1 "$TMP/$name.err")"; return; }
  l0=$(grep "island 0 trains on" "$TMP/$name.err"); l1=$(grep "island 1 trains on" "$TMP/$name.err")
  echo "$l0" | grep -q -- "$want0" && echo "$l1" | grep -q -- "$want1" && pass "$name: $l0 / $l1" ||
    fail "$name: want '$want0' and '$want1', got: $l0 / $l1"
  total=$(manifest_sum "$data") || { fail "$name: manifest sources' train_tokens do not add up"; return; }
  t0=$(echo "$l0" | sed 's/.*; \([0-9]*\) tokens)/\1/'); t1=$(echo "$l1" | sed 's/.*; \([0-9]*\) tokens)/\1/')
  [ $((t0 + t1)) -eq "$total" ] && pass "$name: the islands' tokens add up to the split's ($t0 + $t1 = $total)" ||
    fail "$name: islands' tokens $t0 + $t1, the split's $total"
}
run_case files_bytes "$TMP/d4" files "one in 2, from #0 .*art to #2 .*food" "one in 2, from #1 .*science to #3 .*goedel"
run_case blocks_bytes "$TMP/d4" blocks "#0 .*art .. #1 .*science" "#2 .*food .. #3 .*goedel"
run_case files_bpe "$TMP/b4" files "one in 2, from #0 .*art to #2 .*food" "one in 2, from #1 .*science to #3 .*goedel"
run_case blocks_bpe "$TMP/b4" blocks "#0 .*art .. #1 .*science" "#2 .*food .. #3 .*goedel"

# a BPE manifest without the per-source token counts is refused
cp -r "$TMP/b4" "$TMP/b4old"
/usr/bin/python3 -c '
import json, sys
p = sys.argv[1] + "/manifest.json"; m = json.load(open(p))
for s in m["sources"]: s.pop("train_tokens"); s.pop("val_tokens")
json.dump(m, open(p, "w"))' "$TMP/b4old"
expect_error "BPE manifest without train_tokens" "sources\[0\] has no train_tokens (a manifest of an older atoll with a tokenizer" \
  $MPIRUN -np 2 $ATOLL train $M --data "$TMP/b4old" --island-data blocks --out "$TMP/old"
# hand-edited counts: fractional, and more than the token files hold
for edit in frac:0.5 huge:1e9; do
  cp -r "$TMP/d4" "$TMP/d4_${edit%%:*}"
  /usr/bin/python3 -c '
import json, sys
p = sys.argv[1] + "/manifest.json"; m = json.load(open(p))
m["sources"][1]["train_tokens"] += float(sys.argv[2])
json.dump(m, open(p, "w"))' "$TMP/d4_${edit%%:*}" "${edit#*:}"
done
expect_error "fractional train_tokens" "sources\[1\].train_tokens is not a whole number of tokens" \
  $MPIRUN -np 2 $ATOLL train $M --data "$TMP/d4_frac" --island-data files --out "$TMP/frac"
expect_error "train_tokens past the token files" "sources\[1\].train_tokens is not a whole number of tokens between 0 and the split's" \
  $MPIRUN -np 2 $ATOLL train $M --data "$TMP/d4_huge" --island-data blocks --out "$TMP/huge"
expect_error "unknown --island-data" "--island-data: unknown 'topics' (known: iid, files, blocks)" \
  $ATOLL train $M --data "$TMP/d4" --island-data topics --out "$TMP/unknown"
finish

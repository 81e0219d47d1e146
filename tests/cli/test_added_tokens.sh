#!/bin/sh
# tokenizer.json with added_tokens (src/tokenizer/added_tokens.c) against Hugging Face
# tokenizers: a GPT-2-style file made by tokenizers itself (<|endoftext|> special at
# id 0 inside the vocabulary, specials and non-specials past it, normalized or not, one
# spelled as a vocabulary entry) and a hand-made one whose answer depends on the two
# passes (normalized false first); on a text full of them (doubled, overlapping,
# unfinished): ids equal to tokenizers', decode equal to tokenizers' default (specials
# skipped) and with --keep-special the text itself; atoll's rewrite (prepare's copy)
# loads in tokenizers with the same added_tokens and ids; prepare's token files equal
# tokenizers' ids of each split; what atoll cannot honour is refused with one line.
# usage: test_added_tokens.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"
F=/usr/share/games/fortunes
[ -d "$F" ] || { echo "skipped: the default corpus $F is missing"; exit 77; }
use_venv tokenizers
PYV=$VPY
"$PYV" "$SRC/tests/tokenizer/hf_added.py" "$F" "$TMP" || { echo "FAIL: tokenizers could not make the files"; exit 1; }

for n in gpt2style passes; do
  "$ATOLL" tokenizer encode --tokenizer "$TMP/$n.json" --text "$TMP/text.txt" >"$TMP/$n.ids" 2>"$TMP/err" || fail "$n: encode: $(cat "$TMP/err")"
  "$ATOLL" tokenizer decode --tokenizer "$TMP/$n.json" --ids "$TMP/$n.ids" >"$TMP/$n.dec" 2>"$TMP/err" || fail "$n: decode: $(cat "$TMP/err")"
  "$ATOLL" tokenizer decode --keep-special --tokenizer "$TMP/$n.json" --ids "$TMP/$n.ids" >"$TMP/$n.keep" 2>"$TMP/err" || fail "$n: decode --keep-special"
  "$ATOLL" prepare --text "$TMP/text.txt" --tokenizer "$TMP/$n.json" --val-fraction 0.2 --out "$TMP/data_$n" >/dev/null 2>"$TMP/err" \
    || fail "$n: prepare: $(cat "$TMP/err")"
  if "$PYV" - "$TMP" "$n" <<'PYEOF'
import glob, json, struct, sys
from tokenizers import Tokenizer
tmp, n = sys.argv[1:3]
hf = json.load(open(f"{tmp}/hf.json"))[n]
text = open(f"{tmp}/text.txt", "rb").read()
bad = 0
def check(what, ok, detail=""):
    global bad
    bad += not ok
    print(f"{'ok' if ok else 'FAIL'}: {n}: {what} {detail}")
ids = [int(x) for x in open(f"{tmp}/{n}.ids").read().split()]
added = [a["id"] for a in json.load(open(f"{tmp}/{n}.json"))["added_tokens"]]
check("ids equal tokenizers'", ids == hf["ids"], f"({len(ids)} ids, {sum(i in added for i in ids)} of added tokens)")
check("decode = tokenizers' decode (specials skipped)", open(f"{tmp}/{n}.dec", "rb").read() == hf["decode"].encode())
check("decode --keep-special = the text", open(f"{tmp}/{n}.keep", "rb").read() == text)
check("the test can fail: skipping specials changes the text", hf["decode"].encode() != text)
# atoll's rewrite, as prepare keeps it
orig, back = json.load(open(f"{tmp}/{n}.json")), json.load(open(f"{tmp}/data_{n}/tokenizer.json"))
check("rewrite keeps added_tokens", back["added_tokens"] == orig["added_tokens"])
t2 = Tokenizer.from_file(f"{tmp}/data_{n}/tokenizer.json")
check("tokenizers on the rewrite gives the same ids", t2.encode(text.decode()).ids == hf["ids"])
check("vocabulary size", json.load(open(f"{tmp}/data_{n}/manifest.json"))["vocab"] == hf["vocab"])
def split(name):
    out = []
    for f in sorted(glob.glob(f"{tmp}/data_{n}/{name}_*.bin")):
        b = open(f, "rb").read()
        v, k, width = struct.unpack("<IQI", b[12:28])
        out += struct.unpack(f"<{k}{'BHI'[width // 2]}", b[32:])
    return out
cut = json.load(open(f"{tmp}/data_{n}/manifest.json"))["sources"][0]["train_bytes"]
t = Tokenizer.from_file(f"{tmp}/{n}.json")
check("prepare: each split = tokenizers' ids of its text",
      split("train") == t.encode(text[:cut].decode()).ids and split("val") == t.encode(text[cut:].decode()).ids)
sys.exit(1 if bad else 0)
PYEOF
  then pass "$n: atoll = tokenizers"; else fail "$n: atoll differs from tokenizers (above)"; fi
done
h1=$("$ATOLL" tokenizer info --tokenizer "$TMP/gpt2style.json" 2>&1) || fail "tokenizer info gpt2style.json: $h1"
h2=$("$ATOLL" tokenizer info --tokenizer "$TMP/data_gpt2style/tokenizer.json" 2>&1) || fail "tokenizer info of the rewrite: $h2"
case $h1 in *" hash "*) [ "$h1" = "$h2" ] && pass "rewrite has the same hash: $h1" || fail "rewrite hash: $h1 / $h2" ;;
  *) fail "tokenizer info printed no hash: $h1" ;; esac

# --- refused, one line each: variants of passes.json ---
bad_file() { # NAME PYTHON-EXPRESSION-ON-d
  "$PYV" -c "
import json; d = json.load(open('$TMP/passes.json')); a = d['added_tokens']
$2
json.dump(d, open('$TMP/bad_$1.json', 'w'))" || fail "could not make bad_$1.json (its case below is not tested)"
}
bad_file single "a[0]['single_word'] = True"
bad_file lstrip "a[1]['lstrip'] = True"
bad_file newline "a[0]['content'] = 'x\ny'"
bad_file wrongid "a[2]['id'] = 300"
bad_file vocabid "a.append(dict(a[0], content='q', id=259))"
bad_file symbols "a[0]['content'] = '\u00e9lan'"
bad_file twice "a[2]['content'] = 'xy'"
bad_file missing "del a[1]['normalized']"
bad_file empty "a[0]['content'] = ''"
bad_file notarray "d['added_tokens'] = {}"
expect_error "single_word refused" "single_word, lstrip and rstrip must be false" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_single.json"
expect_error "lstrip refused" "bad_lstrip.json: added_tokens" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_lstrip.json"
expect_error "newline refused" "newline" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_newline.json"
expect_error "an id tokenizers would not give refused" "would give it 258" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_wrongid.json"
expect_error "a vocabulary entry's id must be its vocabulary id" "would give it 80 (its vocabulary id)" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_vocabid.json"
expect_error "byte-level symbols for other bytes refused" "byte-level symbols" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_symbols.json"
expect_error "duplicate refused" "listed twice" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_twice.json"
expect_error "missing field refused" "entry 1 must be an object" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_missing.json"
expect_error "empty content refused" "empty content" "$ATOLL" tokenizer info --tokenizer "$TMP/bad_empty.json"
expect_error "added_tokens not an array refused" "added_tokens: not an array" "$ATOLL" prepare --text "$TMP/text.txt" --tokenizer "$TMP/bad_notarray.json" --out "$TMP/nope"
# what tokenizers itself does with the refused id: it would not keep 300 (so atoll refuses)
"$PYV" -c "
from tokenizers import Tokenizer; import sys
t = Tokenizer.from_file('$TMP/bad_wrongid.json'); sys.exit(0 if t.token_to_id('xyzw') == 258 else 1)" 2>/dev/null \
  && pass "tokenizers gives the refused file's token id 258, not the 300 it says" || fail "tokenizers keeps the file's id 300"
finish

#!/bin/sh
# The tokenizer from the command line: Hugging Face tokenizers (Tokenizer.from_file)
# loads atoll's tokenizer.json and gives exactly atoll's ids on the whole default
# corpus and on a non-ASCII text (accents, CJK, emoji, digits, whitespace runs); the
# byte tokenizer's file too; decode(encode(x)) == x for arbitrary bytes, invalid UTF-8
# included; merges in the array form; corrupt and hostile files (a 100 kB token, raw
# control bytes, a key twice) and bad flags refused with one line. Then the pipelines
# of Llama 3, Qwen2, Llama 2 and Mistral (tests/tokenizer/hf_families.py), invalid
# UTF-8 through them, SentencePiece-like vocabularies merged in parts as they are whole,
# sample's BOS, and components atoll does not read, each refused with one line.
# Needs the venv's tokenizers (scripts/venv.sh, or ATOLL_PYTHON).
# usage: test_tokenizer.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"
CORPUS=/usr/share/games/fortunes

# the venv with tokenizers (scripts/venv.sh makes it from PyPI when missing); without it
# the test fails, it does not skip
use_venv tokenizers
PYV=$VPY
[ -d "$CORPUS" ] || { echo "skipped: the default corpus $CORPUS is missing"; exit 77; }

FILES=$(for f in "$CORPUS"/*; do case $f in *.dat) ;; *) [ -f "$f" ] && [ ! -L "$f" ] && echo "$f";; esac; done)
"$PYV" "$SRC/tests/tokenizer/make_text.py" "$TMP/unicode.txt"

# --- BPE trained on the whole corpus, checked against Hugging Face on all of it ---
if "$ATOLL" tokenizer train --text "$CORPUS" --vocab-size 4000 --out "$TMP/tok.json" 2>"$TMP/train.log"; then
  pass "train on $CORPUS: $(tail -1 "$TMP/train.log")"
else
  fail "train: $(cat "$TMP/train.log")"
fi
# shellcheck disable=SC2086
if "$PYV" "$SRC/tests/tokenizer/hf_compare.py" "$ATOLL" "$TMP/tok.json" $FILES "$TMP/unicode.txt" >"$TMP/cmp.log" 2>&1; then
  pass "Hugging Face = atoll on the corpus and the non-ASCII text: $(tail -1 "$TMP/cmp.log")"
else
  fail "Hugging Face differs: $(tail -5 "$TMP/cmp.log")"
fi

# --- trained with the non-ASCII text, so merges hold multibyte characters ---
"$ATOLL" tokenizer train --text "$TMP/unicode.txt" "$CORPUS/art" --vocab-size 1500 --out "$TMP/uni.json" 2>/dev/null
if "$PYV" "$SRC/tests/tokenizer/hf_compare.py" "$ATOLL" "$TMP/uni.json" "$TMP/unicode.txt" "$CORPUS/art" >"$TMP/cmp2.log" 2>&1; then
  pass "Hugging Face = atoll, tokenizer trained on non-ASCII text: $(tail -1 "$TMP/cmp2.log")"
else
  fail "Hugging Face differs (non-ASCII tokenizer): $(tail -5 "$TMP/cmp2.log")"
fi

# --- the byte tokenizer: ids are the bytes ---
"$ATOLL" tokenizer bytes --out "$TMP/bytes.json"
if "$PYV" - "$TMP/bytes.json" "$TMP/unicode.txt" <<'PYEOF'
import sys
from tokenizers import Tokenizer
raw = open(sys.argv[2], "rb").read()
ids = Tokenizer.from_file(sys.argv[1]).encode(raw.decode("utf-8")).ids
sys.exit(0 if ids == list(raw) else 1)
PYEOF
then pass "bytes tokenizer: Hugging Face gives ids = bytes"; else fail "bytes tokenizer: Hugging Face ids are not the bytes"; fi
info=$("$ATOLL" tokenizer info --tokenizer "$TMP/bytes.json")
case $info in "kind bytes vocab 256 merges 0 hash "*) pass "bytes info: $info";; *) fail "bytes info: $info";; esac

# --- arbitrary bytes, invalid UTF-8 included, through encode and decode ---
"$PYV" -c "
import random, sys
r = random.Random(5)
alphabet = [bytes([b]) for b in range(256)] + [b' the', b'\xc3\xa9', b'\xe6\x97\xa5', b'\xf0\x9f\x99\x82', b'  ', b'\n']
sys.stdout.buffer.write(b''.join(r.choice(alphabet) for _ in range(200000)))" >"$TMP/random.bin" \
  || fail "could not make random.bin"
for tok in tok uni bytes; do
  # (each round's own output: a failed encode or decode must not leave the last round's file to compare)
  rm -f "$TMP/random.ids" "$TMP/random.back"
  if [ -s "$TMP/random.bin" ] &&
     "$ATOLL" tokenizer encode --tokenizer "$TMP/$tok.json" --text "$TMP/random.bin" >"$TMP/random.ids" &&
     "$ATOLL" tokenizer decode --tokenizer "$TMP/$tok.json" --ids "$TMP/random.ids" >"$TMP/random.back" &&
     cmp -s "$TMP/random.bin" "$TMP/random.back"; then
    pass "decode(encode(x)) == x, $tok.json, $(wc -c <"$TMP/random.bin") random bytes -> $(wc -w <"$TMP/random.ids") tokens"
  else
    fail "decode(encode(x)) != x with $tok.json"
  fi
done

# --- a BPE checkpoint exported for Hugging Face carries its tokenizer ---
"$ATOLL" prepare --text "$CORPUS/art" --tokenizer "$TMP/uni.json" --out "$TMP/data" >/dev/null 2>&1 &&
  "$ATOLL" train $TINY --data "$TMP/data" --steps 2 --out "$TMP/run" >/dev/null 2>&1 &&
  "$ATOLL" export --ckpt "$TMP/run" --to hf --out "$TMP/hf" 2>/dev/null
if "$PYV" - "$TMP/hf" "$TMP/uni.json" "$TMP/unicode.txt" <<'PYEOF'
import json, sys
from tokenizers import Tokenizer
hf, mine, text = sys.argv[1], sys.argv[2], open(sys.argv[3], encoding="utf-8").read()
a, b = Tokenizer.from_file(hf + "/tokenizer.json"), Tokenizer.from_file(mine)
ok = a.encode(text).ids == b.encode(text).ids and json.load(open(hf + "/config.json"))["vocab_size"] == b.get_vocab_size()
sys.exit(0 if ok else 1)
PYEOF
then pass "export of a BPE checkpoint: its tokenizer.json gives the tokenizer's ids, config vocab_size matches"
else fail "export of a BPE checkpoint: tokenizer.json or vocab_size wrong"; fi

# --- refused with one line ---
head -c 3000 "$TMP/tok.json" >"$TMP/cut.json"
expect_error "truncated tokenizer.json" "cut.json: invalid JSON near byte" "$ATOLL" tokenizer info --tokenizer "$TMP/cut.json"
sed 's/"add_prefix_space":\tfalse/"add_prefix_space":\ttrue/' "$TMP/tok.json" >"$TMP/prefix.json"
expect_error "add_prefix_space true" "prefix.json: pre_tokenizer: add_prefix_space" "$ATOLL" tokenizer encode --tokenizer "$TMP/prefix.json" --text "$CORPUS/art"
expect_error "missing tokenizer" "nothere.json" "$ATOLL" tokenizer info --tokenizer "$TMP/nothere.json"
expect_error "vocab too small" "--vocab-size" "$ATOLL" tokenizer train --text "$CORPUS/art" --vocab-size 100 --out "$TMP/x.json"
expect_error "train without --out" "--out" "$ATOLL" tokenizer train --text "$CORPUS/art" --vocab-size 300
expect_error "unknown subcommand" "unknown subcommand" "$ATOLL" tokenizer frobnicate
expect_error "decode of an id outside the vocabulary" "not a token id" sh -c "echo 1 2 999999 | '$ATOLL' tokenizer decode --tokenizer '$TMP/bytes.json'"

# --- hostile strings: merges in the array form (["l", "r"]) are the same tokenizer, for
# atoll and Hugging Face; a 100 kB token in the first merge overflowed a buffer; a raw NUL
# in a token cut it short and a raw control byte passed; a key twice read the first ---
"$PYV" - "$TMP/uni.json" "$TMP" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
def put(name, doc):
    with open(sys.argv[2] + "/" + name, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
t["model"]["merges"] = [m.split(" ") for m in t["model"]["merges"]]
put("arrays.json", t)
t["model"]["merges"] = [["A" * 100000, "b"]] + t["model"]["merges"]
put("long.json", t)
raw = open(sys.argv[1], "rb").read()
open(sys.argv[2] + "/nul.json", "wb").write(raw.replace(b'"\xc4\x80":', b'"\xc4\x80\x00x":', 1))
open(sys.argv[2] + "/ctl.json", "wb").write(raw.replace(b'"\xc4\x80":', b'"\xc4\x80\x1f":', 1))
open(sys.argv[2] + "/twice.json", "wb").write(raw.replace(b'"normalizer":', b'"normalizer":\tnull, "normalizer":', 1))
PYEOF
a=$("$ATOLL" tokenizer info --tokenizer "$TMP/uni.json" 2>&1) b=$("$ATOLL" tokenizer info --tokenizer "$TMP/arrays.json" 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "array-form merges: the same tokenizer ($b)" || fail "array-form merges: '$b', string form '$a'"
if "$PYV" "$SRC/tests/tokenizer/hf_compare.py" "$ATOLL" "$TMP/arrays.json" "$TMP/unicode.txt" >"$TMP/cmp3.log" 2>&1; then
  pass "Hugging Face = atoll with array-form merges: $(tail -1 "$TMP/cmp3.log")"
else
  fail "Hugging Face differs (array-form merges): $(tail -5 "$TMP/cmp3.log")"
fi
expect_error "a 100 kB token in an array-form merge" "long.json: model.merges: merge 0 names a token that is not in the vocabulary" \
  "$ATOLL" tokenizer info --tokenizer "$TMP/long.json"
expect_error "a raw NUL in a token" "nul.json: byte [0-9]*: raw control byte 0x00 inside a string" "$ATOLL" tokenizer info --tokenizer "$TMP/nul.json"
expect_error "a raw control byte in a token" "ctl.json: byte [0-9]*: raw control byte 0x1F" "$ATOLL" tokenizer info --tokenizer "$TMP/ctl.json"
expect_error "a key twice" "twice.json: key 'normalizer' appears more than once" "$ATOLL" tokenizer info --tokenizer "$TMP/twice.json"
# --- the pipelines of Llama 3, Qwen2, Llama 2 and Mistral, made by tokenizers with each
# family's tokenizer.json parts (tests/tokenizer/hf_families.py): ids equal to
# tokenizers' encode (BOS included) on prose, source code and mixed Unicode, decode
# equal to tokenizers' and giving the text back ---
if "$PYV" "$SRC/tests/tokenizer/hf_families.py" "$ATOLL" "$CORPUS/fortunes" "$TMP" >"$TMP/fam.log" 2>&1; then
  pass "Hugging Face = atoll on Llama 3, Qwen2, Llama 2 and Mistral pipelines: $(wc -l <"$TMP/fam.log") texts"
else
  fail "Hugging Face differs on a family's pipeline: $(grep -v equal "$TMP/fam.log" | tail -5)"
fi
# invalid UTF-8 (random bytes): a byte matching no Split pattern is a pre-token of its
# own, a byte-fallback vocabulary gives <0xNN>; decoding gives the bytes back
for tok in llama3 llama2 mistral; do
  rm -f "$TMP/random.ids" "$TMP/random.back"
  if "$ATOLL" tokenizer encode --tokenizer "$TMP/$tok.json" --text "$TMP/random.bin" >"$TMP/random.ids" &&
     "$ATOLL" tokenizer decode --tokenizer "$TMP/$tok.json" --ids "$TMP/random.ids" >"$TMP/random.back" &&
     cmp -s "$TMP/random.bin" "$TMP/random.back"; then
    pass "decode(encode(x)) == x with $tok.json, random bytes -> $(wc -w <"$TMP/random.ids") tokens"
  else
    fail "decode(encode(x)) != x with $tok.json"
  fi
done
# SentencePiece-like vocabularies (llama2_sp, mistral) are merged in parts cut before
# each U+2581 after another character: the ids equal those of the same file with one
# more merge, <unk> + U+2581 (which never applies, as <unk> is never a symbol, but
# crosses such a cut, so the word is merged whole), on random bytes and the mixed text
"$PYV" - "$TMP" <<'PYEOF'
import json, sys
d = sys.argv[1]
for name in ("llama2_sp", "mistral"):
    j = json.load(open(f"{d}/{name}.json", encoding="utf-8"))
    m = j["model"]
    m["vocab"]["<unk>\u2581"] = max(m["vocab"].values()) + 1
    m["merges"].append("<unk> \u2581" if isinstance(m["merges"][0], str) else ["<unk>", "\u2581"])
    json.dump(j, open(f"{d}/{name}_whole.json", "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
for tok in llama2_sp mistral; do
  for text in random.bin ${tok}_unicode.txt; do
    a=$("$ATOLL" tokenizer encode --tokenizer "$TMP/$tok.json" --text "$TMP/$text" | cksum)
    b=$("$ATOLL" tokenizer encode --tokenizer "$TMP/${tok}_whole.json" --text "$TMP/$text" | cksum)
    n=$("$ATOLL" tokenizer encode --tokenizer "$TMP/$tok.json" --text "$TMP/$text" | wc -w)
    [ "$n" -gt 1000 ] && [ "$a" = "$b" ] && pass "$tok, $text: merged in parts = merged whole ($n ids)" ||
      fail "$tok, $text: merged in parts differs from merged whole ($n ids)"
  done
done
# sample puts the template's BOS before the prompt, as prepare before each passage:
# Llama 2's TemplateProcessing, and Llama 3's inside a post_processor Sequence
for tk in llama2 llama3; do
  bos=$("$PYV" -c "import json,sys; j=json.load(open(sys.argv[1])); print([a['id'] for a in j['added_tokens'] if a['content'] in ('<s>', '<|begin_of_text|>')][0])" "$TMP/$tk.json")
  "$ATOLL" prepare --text "$CORPUS/art" --tokenizer "$TMP/$tk.json" --out "$TMP/data_$tk" >/dev/null 2>&1 &&
    "$ATOLL" train $TINY --data "$TMP/data_$tk" --steps 2 --out "$TMP/run_$tk" >/dev/null 2>&1 || fail "train on $tk.json data"
  want=$(printf 'The cat' | "$ATOLL" tokenizer encode --tokenizer "$TMP/$tk.json")
  got=$(ATOLL_TEST_PROMPT_IDS=1 "$ATOLL" sample --ckpt "$TMP/run_$tk" --prompt "The cat" --tokens 3 --seed 1 2>&1 >"$TMP/s2.out" |
        sed -n 's/^prompt ids: //p')
  case $want in "$bos "*) ;; *) fail "tokenizer encode of $tk.json gives no BOS $bos: $want";; esac
  [ -n "$got" ] && [ "$got" = "$want" ] && grep -q "^The cat" "$TMP/s2.out" &&
    pass "sample, $tk: prompt ids with BOS $bos as tokenizers' encode ($got)" || fail "sample $tk prompt ids '$got', want '$want'"
done

# --- pipelines refused with one line naming the component ---
"$PYV" - "$TMP" <<'PYEOF'
import json, sys
d = sys.argv[1]
def put(src, name, edit):
    j = json.load(open(f"{d}/{src}.json", encoding="utf-8"))
    edit(j)
    json.dump(j, open(f"{d}/{name}.json", "w", encoding="utf-8"), ensure_ascii=False)
put("qwen2", "nfkc", lambda j: j.update(normalizer={"type": "NFKC"}))
put("llama3", "badre", lambda j: j["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="(?i:'s|\\p{Q}"))
put("llama3", "contig", lambda j: j["pre_tokenizer"]["pretokenizers"][0].update(behavior="Contiguous"))
put("llama3", "white", lambda j: j.update(pre_tokenizer={"type": "Whitespace"}))
put("llama3", "roberta", lambda j: j.update(post_processor={"type": "RobertaProcessing"}))
put("llama2", "wordpiece", lambda j: j["decoder"]["decoders"].append({"type": "WordPiece"}))
put("llama2", "nobyte", lambda j: j["model"]["vocab"].update({"<0x41 >": j["model"]["vocab"].pop("<0x41>")}))
PYEOF
expect_error "NFKC normalizer" 'nfkc.json: normalizer: type "NFKC" is not supported' "$ATOLL" tokenizer info --tokenizer "$TMP/nfkc.json"
expect_error "a regex PCRE2 rejects" "badre.json: pre_tokenizer: Split pattern .*: " "$ATOLL" tokenizer info --tokenizer "$TMP/badre.json"
expect_error "Split behavior Contiguous" 'contig.json: pre_tokenizer: Split behavior "Contiguous" is not supported' "$ATOLL" tokenizer info --tokenizer "$TMP/contig.json"
expect_error "an unknown pre_tokenizer" 'white.json: pre_tokenizer: type "Whitespace" is not supported' "$ATOLL" tokenizer info --tokenizer "$TMP/white.json"
expect_error "an unknown post_processor" 'roberta.json: post_processor: type "RobertaProcessing"' "$ATOLL" tokenizer info --tokenizer "$TMP/roberta.json"
expect_error "an unknown decoder" 'wordpiece.json: decoder: "WordPiece"' "$ATOLL" tokenizer info --tokenizer "$TMP/wordpiece.json"
expect_error "byte fallback without <0x41>" "nobyte.json: model.vocab: byte_fallback needs the token <0x41>" "$ATOLL" tokenizer info --tokenizer "$TMP/nobyte.json"
finish

#!/bin/sh
# BPE end to end from the command line: atoll tokenizer train, atoll prepare
# --tokenizer (token files equal `atoll tokenizer encode` of each split's text, over
# more than one encoding piece), atoll train taking --vocab from the data, the
# checkpoint's tokenizer record and copy, atoll sample decoding through it; and the
# refusals: a smaller --vocab, a resume on another tokenizer's data, sample with
# another --tokenizer, a damaged tokenizer.json in the checkpoint. Byte data still
# trains as before. tokenizer train reads --text as prepare does: gzip decompressed,
# JSON Lines' --jsonl-field, subdirectories walked; a truncated gzip, a line without
# the field and input without text refused. No Python packages needed.
# usage: test_tokenizer_train.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"
F=/usr/share/games/fortunes
[ -d "$F" ] || { echo "skipped: the default corpus $F is missing"; exit 77; }

# one input over 1 MiB, so that prepare encodes it in several pieces
for f in "$F"/*; do case $f in *.dat|*.u8) ;; *) [ -f "$f" ] && [ ! -L "$f" ] && cat "$f";; esac; done >"$TMP/big.txt"
"$ATOLL" tokenizer train --text "$TMP/big.txt" --vocab-size 700 --out "$TMP/tok.json" 2>/dev/null ||
  fail "tokenizer train"
if "$ATOLL" prepare --text "$TMP/big.txt" --tokenizer "$TMP/tok.json" --out "$TMP/data" >/dev/null 2>"$TMP/prep.err"; then
  pass "prepare --tokenizer: $(ls "$TMP/data" | tr '\n' ' ')"
else
  fail "prepare --tokenizer: $(cat "$TMP/prep.err")"
fi
# the token files hold exactly the encoding of each split's bytes
"$PY" - "$ATOLL" "$TMP" <<'PYEOF'
import json, struct, subprocess, sys
atoll, tmp = sys.argv[1], sys.argv[2]
m = json.load(open(f"{tmp}/data/manifest.json"))
raw = open(f"{tmp}/big.txt", "rb").read()
cut = m["sources"][0]["train_bytes"]
ok = m["tokenizer"] == "bpe" and m["vocab"] == 700 and len(m["tokenizer_hash"]) == 16 and len(raw) > (1 << 20)
for split, text in (("train", raw[:cut]), ("val", raw[cut:])):
    b = open(f"{tmp}/data/{split}_000.bin", "rb").read()
    vocab, n, width = struct.unpack("<IQI", b[12:28])
    ids = list(struct.unpack(f"<{n}{'BHI'[width // 2]}", b[32:]))
    open(f"{tmp}/{split}.txt", "wb").write(text)
    want = subprocess.run([atoll, "tokenizer", "encode", "--tokenizer", f"{tmp}/tok.json", "--text", f"{tmp}/{split}.txt"],
                          capture_output=True, check=True).stdout.split()
    ok = ok and vocab == 700 and width == 2 and ids == [int(x) for x in want]
    print(split, n, "tokens", len(text), "bytes")
sys.exit(0 if ok else 1)
PYEOF
[ $? -eq 0 ] && pass "token files = atoll tokenizer encode of each split (width 2, vocab 700)" || fail "token files differ from the encoding"

TRAIN="--layers 2 --heads 2 --dim 32 --context 32 --batch 4 --eval-batches 2 --threads 1 --eval-every 10 --save-every 10"
if "$ATOLL" train $TRAIN --data "$TMP/data" --steps 20 --out "$TMP/run" >/dev/null 2>"$TMP/train.err"; then
  pass "train on BPE data: $(grep -o 'val_loss [0-9.]*' "$TMP/train.err" | tail -1)"
else
  fail "train on BPE data: $(tail -2 "$TMP/train.err")"
fi
CK="$TMP/run/checkpoints/step_00000020"
vocab=$("$PY" -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['config']['vocab'], s['tokenizer']['kind'], s['tokenizer']['vocab'])" "$CK/state.json")
[ "$vocab" = "700 bpe 700" ] && pass "--vocab taken from the data; state.json records the tokenizer" || fail "state.json: vocab/tokenizer: $vocab"
cmp -s "$CK/tokenizer.json" "$TMP/data/tokenizer.json" && pass "the checkpoint keeps tokenizer.json" || fail "checkpoint tokenizer.json missing or different"
if "$ATOLL" sample --ckpt "$TMP/run" --prompt "The cat" --tokens 20 --seed 3 >"$TMP/sample.out" 2>"$TMP/sample.err" &&
   head -c 7 "$TMP/sample.out" | grep -q "The cat" && [ "$(wc -c <"$TMP/sample.out")" -gt 27 ]; then
  pass "sample decodes through the tokenizer: $(head -c 60 "$TMP/sample.out" | tr '\n' ' ')"
else
  fail "sample: $(cat "$TMP/sample.err")"
fi
"$ATOLL" sample --ckpt "$TMP/run" --tokenizer "$TMP/tok.json" --prompt "The cat" --tokens 20 --seed 3 >"$TMP/sample2.out" 2>&1
cmp -s "$TMP/sample.out" "$TMP/sample2.out" && pass "sample --tokenizer with the same tokenizer" || fail "sample --tokenizer same: $(cat "$TMP/sample2.out")"

# refusals, one line each
"$ATOLL" tokenizer train --text $F/art --vocab-size 700 --out "$TMP/other.json" 2>/dev/null
"$ATOLL" prepare --text $F/art --out "$TMP/bytes" >/dev/null 2>&1
expect_error "--vocab smaller than the tokenizer" "--vocab 500: smaller" "$ATOLL" train $TRAIN --data "$TMP/data" --vocab 500 --steps 1 --out "$TMP/small"
expect_error "resume on another tokenizer's data" "trained on tokenizer bpe" "$ATOLL" train --resume "$TMP/run" --data "$TMP/bytes" --steps 30
expect_error "sample with another --tokenizer" "is not the one the checkpoint" "$ATOLL" sample --ckpt "$TMP/run" --tokenizer "$TMP/other.json" --tokens 2
cp -r "$CK" "$TMP/ck"
cp "$TMP/other.json" "$TMP/ck/tokenizer.json"
expect_error "checkpoint with a replaced tokenizer.json" "is not the one the checkpoint" "$ATOLL" sample --ckpt "$TMP/ck" --tokens 2
head -c 500 "$CK/tokenizer.json" >"$TMP/ck/tokenizer.json"
expect_error "checkpoint with a cut tokenizer.json" "invalid JSON near byte" "$ATOLL" sample --ckpt "$TMP/ck" --tokens 2
expect_error "prepare with a missing tokenizer" "nothere.json" "$ATOLL" prepare --text $F/art --tokenizer "$TMP/nothere.json" --out "$TMP/x"
cp -r "$TMP/data" "$TMP/data2"
cp "$TMP/other.json" "$TMP/data2/tokenizer.json"
expect_error "data dir with a replaced tokenizer.json" "is not the one" "$ATOLL" train $TRAIN --data "$TMP/data2" --steps 1 --out "$TMP/x2"

# bytes keep working as before: no tokenizer.json, vocab 256, sample prints bytes
"$ATOLL" train $TRAIN --data "$TMP/bytes" --steps 10 --out "$TMP/brun" >/dev/null 2>&1 &&
  [ ! -e "$TMP/bytes/tokenizer.json" ] && [ ! -e "$TMP/brun/checkpoints/step_00000010/tokenizer.json" ] &&
  "$ATOLL" sample --ckpt "$TMP/brun" --prompt "ab" --tokens 5 >/dev/null 2>&1 &&
  pass "byte data trains and samples as before" || fail "byte-token run"

# --- tokenizer train reads --text as prepare reads it (src/text/text_input.h) ---
T="--vocab-size 600"
cp "$F/art" "$TMP/art.txt"
gzip -c "$F/art" >"$TMP/art.gz"
"$ATOLL" tokenizer train --text "$TMP/art.txt" $T --out "$TMP/t_txt.json" 2>/dev/null || fail "tokenizer train art.txt"
"$ATOLL" tokenizer train --text "$TMP/art.gz" $T --out "$TMP/t_gz.json" 2>/dev/null || fail "tokenizer train art.gz"
cmp -s "$TMP/t_txt.json" "$TMP/t_gz.json" && pass "a .gz trains the tokenizer of its decompressed text" ||
  fail "a .gz trains another tokenizer than its text"
head -c 20000 "$TMP/art.gz" >"$TMP/cut.gz"
expect_error "truncated gzip refused" "cut.gz: truncated gzip data" "$ATOLL" tokenizer train --text "$TMP/cut.gz" $T --out "$TMP/x.json"
# JSON Lines: the field's text, not the JSON; documents end without trailing blanks and
# start without leading ones, so each one's words are those of the joined text
"$PY" - "$F/art" "$TMP" <<'PYEOF'
import json, sys
docs = [d.strip() for d in open(sys.argv[1], "rb").read().decode("latin-1").split("\n%\n")]
docs = [d for d in docs if d]
tmp = sys.argv[2]
with open(f"{tmp}/art.jsonl", "w") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "text": d, "body": d.upper(), "meta": {"text": "x"}}) + "\n")
open(f"{tmp}/text.txt", "w", encoding="utf-8").write("".join(d + "\n" for d in docs))
open(f"{tmp}/body.txt", "w", encoding="utf-8").write("".join(d.upper() + "\n" for d in docs))
with open(f"{tmp}/nofield.jsonl", "w") as f:
    f.write(json.dumps({"text": "one"}) + "\n" + json.dumps({"body": "two"}) + "\n")
PYEOF
"$ATOLL" tokenizer train --text "$TMP/art.jsonl" $T --out "$TMP/t_jl.json" 2>/dev/null || fail "tokenizer train art.jsonl"
"$ATOLL" tokenizer train --text "$TMP/text.txt" $T --out "$TMP/t_jl_ref.json" 2>/dev/null || fail "tokenizer train text.txt"
cmp -s "$TMP/t_jl.json" "$TMP/t_jl_ref.json" && pass "JSON Lines train on the \"text\" field's text" ||
  fail "JSON Lines: not the tokenizer of the \"text\" field's text"
"$ATOLL" tokenizer train --text "$TMP/art.jsonl" --jsonl-field body $T --out "$TMP/t_body.json" 2>/dev/null || fail "tokenizer train --jsonl-field body"
"$ATOLL" tokenizer train --text "$TMP/body.txt" $T --out "$TMP/t_body_ref.json" 2>/dev/null || fail "tokenizer train body.txt"
cmp -s "$TMP/t_body.json" "$TMP/t_body_ref.json" && pass "--jsonl-field body trains on that field's text" ||
  fail "--jsonl-field body: not the tokenizer of that field's text"
expect_error "JSON Lines line without the field refused" "nofield.jsonl:2: no \"text\" field" \
  "$ATOLL" tokenizer train --text "$TMP/nofield.jsonl" $T --out "$TMP/x.json"
# a directory's subdirectories are read, as prepare reads them
mkdir -p "$TMP/nest/sub"
cp "$F/art" "$TMP/nest/a"
cp "$F/food" "$TMP/nest/sub/b"
"$ATOLL" tokenizer train --text "$TMP/nest" $T --out "$TMP/t_nest.json" 2>"$TMP/nest.err" || fail "tokenizer train nest"
"$ATOLL" tokenizer train --text "$TMP/nest/a" "$TMP/nest/sub/b" $T --out "$TMP/t_nest_ref.json" 2>/dev/null || fail "tokenizer train nest/a nest/sub/b"
"$ATOLL" prepare --text "$TMP/nest" --out "$TMP/p_nest" >/dev/null 2>"$TMP/pnest.err" || fail "prepare nest"
grep -q "2 file(s)" "$TMP/nest.err" && grep -q "2 file(s)" "$TMP/pnest.err" && cmp -s "$TMP/t_nest.json" "$TMP/t_nest_ref.json" &&
  pass "a directory's subdirectories are read (2 files, as prepare reads)" || fail "directory with a subdirectory: $(head -1 "$TMP/nest.err")"
# input without text is refused, as prepare refuses it
: >"$TMP/empty.txt"
: | gzip -c >"$TMP/empty.gz"
expect_error "empty input refused" "empty.txt: input is empty" "$ATOLL" tokenizer train --text "$TMP/empty.txt" $T --out "$TMP/x.json"
expect_error "input of empty files refused" "input is empty" "$ATOLL" tokenizer train --text "$TMP/empty.txt" "$TMP/empty.gz" $T --out "$TMP/x.json"
[ ! -e "$TMP/x.json" ] && pass "no tokenizer.json written by a refused train" || fail "a refused train wrote $TMP/x.json"
finish

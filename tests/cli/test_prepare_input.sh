#!/bin/sh
# atoll prepare's input side from the command line (src/text/text_input.c, jsonl.c):
# - the default corpus gives the token files of the rule prepare had before its
#   streaming readers, rebuilt here in Python from the raw files;
# - gzip and JSON Lines inputs: one clear error line (corrupt, truncated, PATH:LINE),
#   --jsonl-field, CRLF lines, empty files, a one-line text too short to split;
# - about 480 MB of gzipped text (one JSON line of 128 MiB among them) prepared under a
#   340 MiB address-space limit, with the live progress line on a terminal.
# usage: test_prepare_input.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"
F=/usr/share/games/fortunes

# --- the default corpus, against the rule written out again in Python ---------------
$ATOLL prepare --text $F --out "$TMP/fortunes" >/dev/null 2>"$TMP/prep.err" || fail "prepare $F: $(cat "$TMP/prep.err")"
$PY - "$F" "$TMP/fortunes" <<'EOF' && pass "default corpus: token files as before (reference rebuilt in Python)" || fail "default corpus: token files differ from the reference"
import glob, os, sys
src, out = sys.argv[1].encode(), sys.argv[2]
names = sorted(n for n in os.listdir(src) if not n.startswith(b".") and not n.endswith(b".dat")
               and os.path.isfile(os.path.join(src, n)) and not os.path.islink(os.path.join(src, n)))
train, val = [], []
for n in names:
    data = open(os.path.join(src, n), "rb").read()
    nval = int(len(data) * 0.05)
    cut = len(data) - nval
    if nval and data[cut - 1] != 0x0A:
        nl = data.find(b"\n", cut)
        cut = nl + 1 if nl >= 0 else cut
    train.append(data[:cut]); val.append(data[cut:])
def split(name):
    return b"".join(open(f, "rb").read()[32:] for f in sorted(glob.glob(f"{out}/{name}_*.bin")))
sys.exit(0 if split("train") == b"".join(train) and split("val") == b"".join(val) else 1)
EOF

# --- gzip, JSON Lines: the same tokens as the plain text, and clear errors ------------
mkdir -p "$TMP/in"
cp $F/art "$TMP/in/art.txt"
gzip -c $F/art >"$TMP/in/art.txt.gz"
$PY - "$F/art" "$TMP/in" <<'EOF'
import json, sys
lines = open(sys.argv[1], "rb").read().decode("latin-1").split("\n")[:-1]
with open(sys.argv[2] + "/art.jsonl", "w", newline="") as lf, open(sys.argv[2] + "/art_crlf.jsonl", "w", newline="") as cf:
    for i, l in enumerate(lines):
        rec = json.dumps({"id": i, "body": l, "meta": {"body": None}})
        lf.write(rec + "\n"); cf.write(rec + "\r\n")
EOF
$ATOLL prepare --text "$TMP/in/art.txt" --out "$TMP/p_txt" >/dev/null 2>&1
$ATOLL prepare --text "$TMP/in/art.txt.gz" --out "$TMP/p_gz" >/dev/null 2>&1
cmp -s "$TMP/p_txt/train_000.bin" "$TMP/p_gz/train_000.bin" && cmp -s "$TMP/p_txt/val_000.bin" "$TMP/p_gz/val_000.bin" \
  && pass "a .gz prepares to the token files of its text" || fail "a .gz prepares differently from its text"
$ATOLL prepare --text "$TMP/in/art.jsonl" --jsonl-field body --out "$TMP/p_lf" >/dev/null 2>&1 || fail "prepare art.jsonl"
$ATOLL prepare --text "$TMP/in/art_crlf.jsonl" --jsonl-field body --out "$TMP/p_crlf" >/dev/null 2>&1 || fail "prepare art_crlf.jsonl"
cmp -s "$TMP/p_lf/train_000.bin" "$TMP/p_crlf/train_000.bin" && cmp -s "$TMP/p_lf/val_000.bin" "$TMP/p_crlf/val_000.bin" \
  && pass "JSON Lines with CRLF line ends prepare as with LF" || fail "CRLF JSON Lines differ from LF"
grep -q '"documents":' "$TMP/p_lf/manifest.json" && pass "manifest: documents of a JSON Lines source" || fail "manifest lacks documents"

head -c 3000 "$TMP/in/art.txt.gz" >"$TMP/in/cut.gz"
expect_error "prepare: truncated gzip" "cut.gz: truncated gzip data" $ATOLL prepare --text "$TMP/in/cut.gz" --out "$TMP/refused/e1"
$PY -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[len(d)//2]^=0xff; open(sys.argv[2],'wb').write(d)" \
  "$TMP/in/art.txt.gz" "$TMP/in/flipped.gz"
expect_error "prepare: corrupt gzip" "flipped.gz: corrupt gzip data" $ATOLL prepare --text "$TMP/in/flipped.gz" --out "$TMP/refused/e2"
printf '{"text": "one"}\n{"text": "two"}\n{"text": tw0}\n' >"$TMP/bad.jsonl"
expect_error "prepare: a JSON Lines line that is not JSON" "bad.jsonl:3: not JSON" $ATOLL prepare --text "$TMP/bad.jsonl" --out "$TMP/refused/e3"
printf '{"text": "one"}\n\n{"body": "two"}\n' | gzip -c >"$TMP/nofield.jsonl.gz"
expect_error "prepare: a JSON Lines line without the field" 'nofield.jsonl.gz:3: no "text" field' $ATOLL prepare --text "$TMP/nofield.jsonl.gz" --out "$TMP/refused/e4"
expect_error "prepare: a non-string field" '"id" holds a number' $ATOLL prepare --text "$TMP/in/art.jsonl" --jsonl-field id --out "$TMP/refused/e5"
expect_error "prepare: --jsonl-field without a value" "--jsonl-field: missing value" $ATOLL prepare --text "$TMP/in/art.jsonl" --jsonl-field
[ -z "$(ls -A "$TMP/refused" 2>/dev/null)" ] && pass "no output left by the refusals" || fail "refusals left $(ls -A "$TMP/refused")"
mkdir -p "$TMP/empties"
: >"$TMP/empties/a.txt"
printf '\n\r\n' >"$TMP/empties/b.jsonl"
expect_error "prepare: only empty files" "input is empty" $ATOLL prepare --text "$TMP/empties" --out "$TMP/refused/e6"
# one line: the validation split starts after a line break, and the only one is the last
# byte, so val_fraction 0.5 (the maximum) cannot help: the message says so (issue 32)
printf 'hello world\n' >"$TMP/one_line.txt"
expect_error "prepare: one line, val_fraction 0.5" "that line break is the last byte" \
  $ATOLL prepare --text "$TMP/one_line.txt" --val-fraction 0.5 --out "$TMP/refused/e7"
grep -q "raise val_fraction" "$TMP/err" && fail "prepare: one line: suggests raising val_fraction: $(cat "$TMP/err")"

# --- the larger corpus (scripts/corpus.sh): Debian's kernel docs, gzipped, as shipped ---
DOCS=/usr/share/doc/linux-doc-6.1/Documentation
if [ -d "$DOCS" ]; then
  bash "$SRC/scripts/corpus.sh" "$TMP/kernel-docs" "$ATOLL" >/dev/null 2>"$TMP/kd.err" || fail "scripts/corpus.sh: $(cat "$TMP/kd.err")"
  $PY - "$TMP/kernel-docs/manifest.json" <<'EOF' && pass "kernel-docs corpus: every file's text, decompressed by Python's gzip, is in the token counts" || fail "kernel-docs corpus: counts differ from Python's gzip"
import gzip, json, sys
m = json.load(open(sys.argv[1]))
src = m["sources"]
ok = len(src) > 4000 and all(s["bytes"] == len(gzip.open(s["path"]).read()) and s["format"] == "gzip" for s in src)
sys.exit(0 if ok and m["train_tokens"] + m["val_tokens"] == sum(s["bytes"] for s in src) > 20e6 else 1)
EOF
else
  echo "skip: kernel-docs corpus ($DOCS missing: scripts/setup.sh installs linux-doc-6.1)"
fi

# --- bounded memory on big input, and the progress line --------------------------------
# AddressSanitizer reserves terabytes of shadow address space, which ulimit -v forbids,
# and would take minutes here: skipped under it (scripts/test_sanitize.sh)
if ldd "$ATOLL" 2>/dev/null | grep -q libasan; then
  echo "skip: big input under ulimit -v (AddressSanitizer)"
  finish
fi
{
  printf '{"text": "'
  yes 'abcdefghijklmnopqrstuvwxyz0123\n' | tr -d '\n' | head -c $((128 << 20))
  printf '"}\n'
  yes '{"id": 7, "text": "a short document with \"quotes\" and caf\u00e9\n"}' | head -n 2000000
} | gzip -1 >"$TMP/big.jsonl.gz"
yes 'plain text, line after line, gzip-compressed for the memory test' | head -c $((256 << 20)) | gzip -1 >"$TMP/big.txt.gz"
# OpenBLAS's threads reserve address space at start-up: one thread, so the limit measures prepare
CMD="export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1; ulimit -v 350000; timeout 300 $ATOLL prepare --text $TMP/big.jsonl.gz $TMP/big.txt.gz --out $TMP/big"
if command -v script >/dev/null 2>&1; then
  script -qec "$CMD" /dev/null >"$TMP/big.log" 2>&1 # a terminal, for the live progress line
else
  sh -c "$CMD" >"$TMP/big.log" 2>&1
fi
rc=$?
tokens=$($PY -c "import json,sys; m=json.load(open(sys.argv[1])); print(m['train_tokens']+m['val_tokens'])" "$TMP/big/manifest.json" 2>/dev/null)
want=$((212023424 + 268435456))
[ $rc -eq 0 ] && [ "$tokens" = "$want" ] && pass "480 MB of text from gzip and a 128 MiB JSON line under ulimit -v 350000 KiB: $tokens tokens" \
  || fail "big input under ulimit -v: status $rc, $tokens tokens (want $want): $(tail -c 400 "$TMP/big.log")"
if command -v script >/dev/null 2>&1; then
  grep -q "MB of text, ETA" "$TMP/big.log" && pass "progress line on a terminal: $(tr '\r' '\n' <"$TMP/big.log" | grep 'MB/s' | tail -1)" \
    || fail "no progress line on a terminal: $(tail -c 300 "$TMP/big.log")"
fi
finish

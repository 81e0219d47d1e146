#!/bin/sh
# val_bpb, bits per byte (src/train/train_report.c from the manifest's val_bytes,
# src/data/prepare.c): on bytes it is val_loss / ln 2 exactly; on a BPE corpus it is
# val_loss x tokens / bytes / ln 2 with the validation split's tokens and bytes counted
# here apart from atoll (the split cut by prepare's rule, encoded by Hugging Face
# tokenizers); in metrics.jsonl, the progress line and summary.json; a manifest
# written before bytes were counted trains without val_bpb and without error; a bad
# val_bytes is refused with one line.
# usage: test_bpb.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"
F=/usr/share/games/fortunes
[ -d "$F" ] || { echo "skipped: the default corpus $F is missing"; exit 77; }
use_venv tokenizers
PYV=$VPY
RUN="--steps 4 --eval-every 2 --save-every 0 --log-every 1"

# --- bytes ---
small_data
# shellcheck disable=SC2086
"$ATOLL" train $TINY $RUN --data "$TMP/data" --out "$TMP/r_bytes" >/dev/null 2>"$TMP/bytes.log" || fail "train on bytes: $(tail -2 "$TMP/bytes.log")"
grep -q "val_bpb" "$TMP/bytes.log" && pass "progress line shows val_bpb" || fail "no val_bpb on the progress line"
if "$PYV" - "$TMP" <<'PYEOF'
import json, math, sys
tmp = sys.argv[1]
m = json.load(open(f"{tmp}/data/manifest.json"))
s = json.load(open(f"{tmp}/r_bytes/summary.json"))
lines = [json.loads(l) for l in open(f"{tmp}/r_bytes/metrics.jsonl")]
ev = [l for l in lines if "val_loss" in l]
ok = (m["val_bytes"] == m["val_tokens"] == sum(x["val_bytes"] for x in m["sources"]) and
      m["train_bytes"] == m["train_tokens"] == sum(x["train_bytes"] for x in m["sources"]) and
      abs(s["final_val_bpb"] - s["final_val_loss"] / math.log(2)) <= 1e-12 * s["final_val_bpb"] and
      len(ev) == 2 and all(abs(l["val_bpb"] - l["val_loss"] / math.log(2)) < 2e-6 for l in ev) and
      not any("val_bpb" in l for l in lines if "val_loss" not in l))
print(s["final_val_loss"], s["final_val_bpb"], m["val_bytes"])
sys.exit(0 if ok else 1)
PYEOF
then pass "bytes: val_bpb = val_loss / ln 2 (summary and metrics), manifest bytes = tokens"; else fail "bytes: val_bpb wrong"; fi

# --- BPE: an independent count of the validation split ---
"$ATOLL" tokenizer train --text "$F/art" --vocab-size 500 --out "$TMP/tok.json" 2>/dev/null || fail "tokenizer train"
"$ATOLL" prepare --text "$F/art" "$F/science" --tokenizer "$TMP/tok.json" --val-fraction 0.1 --out "$TMP/bpe" >/dev/null 2>&1 || fail "prepare --tokenizer"
# shellcheck disable=SC2086
"$ATOLL" train $TINY $RUN --vocab 500 --data "$TMP/bpe" --out "$TMP/r_bpe" >/dev/null 2>"$TMP/bpe.log" || fail "train on BPE: $(tail -2 "$TMP/bpe.log")"
if "$PYV" - "$TMP" "$F/art" "$F/science" <<'PYEOF'
import json, math, sys
from tokenizers import Tokenizer
tmp, files = sys.argv[1], sys.argv[2:]
tok = Tokenizer.from_file(f"{tmp}/tok.json")
vbytes = vtokens = 0
for p in files:  # prepare's rule: the last 10% of bytes, moved to just after the next newline
    b = open(p, "rb").read()
    nominal = len(b) - int(len(b) * 0.1)
    nl = b.find(b"\n", nominal)
    cut = nominal if b[nominal - 1:nominal] == b"\n" or nl < 0 else nl + 1
    vbytes += len(b) - cut
    vtokens += len(tok.encode(b[cut:].decode("utf-8")).ids)
m = json.load(open(f"{tmp}/bpe/manifest.json"))
s = json.load(open(f"{tmp}/r_bpe/summary.json"))
want = s["final_val_loss"] * vtokens / vbytes / math.log(2)
print(f"counted {vtokens} tokens, {vbytes} bytes; val_loss {s['final_val_loss']:.4f} -> bpb {want:.6f}, atoll {s['final_val_bpb']:.6f}")
ok = (m["val_bytes"], m["val_tokens"]) == (vbytes, vtokens) and abs(s["final_val_bpb"] - want) < 1e-9 * want \
     and vtokens < 0.6 * vbytes
sys.exit(0 if ok else 1)
PYEOF
then pass "BPE: val_bpb = val_loss x tokens / bytes / ln 2 with an independent count"; else fail "BPE: val_bpb wrong"; fi

# --- a manifest from before the byte counts: no val_bpb, no error ---
cp -r "$TMP/data" "$TMP/old"
"$PYV" -c "
import json; p = '$TMP/old/manifest.json'; m = json.load(open(p)); del m['train_bytes'], m['val_bytes']; json.dump(m, open(p, 'w'))"
# shellcheck disable=SC2086
if "$ATOLL" train $TINY $RUN --data "$TMP/old" --out "$TMP/r_old" >/dev/null 2>"$TMP/old.log"; then
  # (grep on a missing file would find nothing too: both files must be there)
  if [ ! -s "$TMP/r_old/summary.json" ] || [ ! -s "$TMP/r_old/metrics.jsonl" ]; then fail "old manifest: no summary.json or metrics.jsonl"
  elif grep -q val_bpb "$TMP/r_old/summary.json" "$TMP/r_old/metrics.jsonl" "$TMP/old.log"; then fail "old manifest: val_bpb reported"
  else pass "old manifest: trains, no val_bpb"; fi
else fail "old manifest: $(tail -1 "$TMP/old.log")"; fi
# --- a bad val_bytes ---
"$PYV" -c "
import json; p = '$TMP/old/manifest.json'; m = json.load(open(p)); m['val_bytes'] = -5; json.dump(m, open(p, 'w'))"
# shellcheck disable=SC2086
expect_error "negative val_bytes refused" '"val_bytes" must be a whole number' "$ATOLL" train $TINY $RUN --data "$TMP/old" --out "$TMP/r_bad"
finish

#!/bin/sh
# atoll prepare --tokenizer over the streaming readers (src/data/prepare.c): the reader
# hands text over in pieces of 256 KiB that end anywhere, and the ids must still be
# those of encoding each text whole, checked with Hugging Face tokenizers:
# - JSON Lines (gzipped): every document is a text of its own (the one holding the
#   train/val cut is two), so the ids are the documents' encodings laid end to end;
# - the same text as one plain file: its train part and its val part are one text each.
# The documents include one of 1.5 MiB (several reader pieces and encoding pieces), one
# of CRLF lines (no safe cut at all) and ones starting with blank lines and spaces, so
# that encoding the stream whole would give other ids (checked too). The same for
# tokenizers with Llama 3's, Qwen2's and Llama 2's pipelines (BOS before each passage).
# usage: test_prepare_tokenizer.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"
F=/usr/share/games/fortunes
[ -d "$F" ] || { echo "skipped: the default corpus $F is missing"; exit 77; }
use_venv tokenizers
PYV=$VPY

# the documents, as JSON Lines (gzipped) and as the text prepare reads from them
"$PYV" - "$F" "$TMP" <<'EOF' || { echo "FAIL: cannot build the documents"; exit 1; }
import gzip, json, os, sys
src, tmp = sys.argv[1], sys.argv[2]
docs = []
for n in sorted(os.listdir(src)):
    p = os.path.join(src, n)
    if n.startswith(".") or n.endswith((".dat", ".u8")) or not os.path.isfile(p) or os.path.islink(p):
        continue
    try:
        text = open(p, "rb").read().decode("utf-8")
    except UnicodeDecodeError:
        continue
    docs += [d for d in text.split("\n%\n") if d]
big = "\n".join(docs)
while len(big) < 1536 * 1024:
    big += big
docs.insert(len(docs) // 3, big[:1536 * 1024])                  # spans reader and encoding pieces
docs.insert(len(docs) // 2, "\r\n".join(docs[:2000])[:600000])  # CRLF only: no safe cut
docs += ["\n\n  starts with blank lines", "", "   spaces first\n\n", "\tx", "no newline at the end"]
with gzip.open(f"{tmp}/docs.jsonl.gz", "wt", encoding="utf-8") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "text": d}) + "\n")
texts = [d if d.endswith("\n") else d + "\n" for d in docs if d]  # what prepare reads: newline-ended
open(f"{tmp}/docs.txt", "wb").write("".join(texts).encode("utf-8"))
json.dump(texts, open(f"{tmp}/texts.json", "w"))
EOF
"$ATOLL" tokenizer train --text "$TMP/docs.txt" --vocab-size 600 --out "$TMP/tok.json" 2>/dev/null || fail "tokenizer train"
"$ATOLL" prepare --text "$TMP/docs.jsonl.gz" --out "$TMP/bytes" >/dev/null 2>&1 || fail "prepare (bytes) docs.jsonl.gz"
# the same with the pipelines of Llama 3 (Split regex, cut between a newline and a letter,
# BOS), Qwen2 (NFC, the same cut), Llama 2 (normalizers, byte fallback, BOS, no cut inside a passage)
# and Mistral (Metaspace; a SentencePiece-like vocabulary, merged in parts cut before U+2581) made by
# tokenizers (tests/tokenizer/hf_families.py): each passage's ids are tokenizers' encode
# (JSON Lines only, to keep the test short)
"$PYV" "$SRC/tests/tokenizer/hf_families.py" --make "$F/fortunes" "$TMP" || fail "hf_families.py --make"
for tk in tok llama3 qwen2 llama2 mistral; do
mkdir -p "$TMP/$tk"
inputs="docs.jsonl.gz docs.txt"
[ "$tk" = tok ] || inputs=docs.jsonl.gz
for s in $inputs; do
  "$ATOLL" prepare --text "$TMP/$s" --tokenizer "$TMP/$tk.json" --val-fraction 0.1 --out "$TMP/$tk/out_$s" \
    >/dev/null 2>"$TMP/prep.err" || fail "prepare --tokenizer $tk.json $s: $(cat "$TMP/prep.err")"
done
cp -r "$TMP/bytes" "$TMP/$tk/bytes"
"$PYV" - "$TMP" "$tk" <<'EOF'
import glob, json, struct, sys
from tokenizers import Tokenizer
tmp, tk = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(f"{tmp}/{tk}.json")
tmp = f"{tmp}/{tk}"
texts_path = f"{sys.argv[1]}/texts.json"
enc = lambda b: tok.encode(b.decode("utf-8")).ids if b else []
def split(d, name):
    ids = []
    for f in sorted(glob.glob(f"{tmp}/{d}/{name}_*.bin")):
        b = open(f, "rb").read()
        vocab, n, width = struct.unpack("<IQI", b[12:28])
        ids += struct.unpack(f"<{n}{'BHI'[width // 2]}", b[32:])
    return list(ids)
texts = [t.encode("utf-8") for t in json.load(open(texts_path))]
whole = b"".join(texts)
bad = 0
def check(what, got, want):
    global bad
    ok = got == want
    bad += not ok
    print(f"{'ok' if ok else 'FAIL'}: {what}: {len(got)} ids, expected {len(want)}")
# JSON Lines: each document encoded whole; the one holding the cut as two texts
m = json.load(open(f"{tmp}/out_docs.jsonl.gz/manifest.json"))
cut = m["sources"][0]["train_bytes"]
train, val, pos = [], [], 0
for t in texts:
    a, b = t[:max(0, cut - pos)], t[max(0, cut - pos):]
    train += enc(a)
    val += enc(b)
    pos += len(t)
check("jsonl.gz train = each document encoded whole", split("out_docs.jsonl.gz", "train"), train)
check("jsonl.gz val = each document encoded whole", split("out_docs.jsonl.gz", "val"), val)
streamed = enc(whole[:cut]) + enc(whole[cut:]) if tk == "tok" else None
if tk == "tok":  # (the families: JSON Lines only, to keep the test short; its 1.5 MiB document is cut)
    check("the test can fail: documents encoded apart differ from the stream encoded whole",
          [train + val != streamed], [True])
else:
    sys.exit(1 if bad else 0)
# the same text as a plain file: one text per split, however prepare cut it in pieces
m2 = json.load(open(f"{tmp}/out_docs.txt/manifest.json"))
cut2 = m2["sources"][0]["train_bytes"]
check("plain file train = its train part encoded whole", split("out_docs.txt", "train"), enc(whole[:cut2]))
check("plain file val = its val part encoded whole", split("out_docs.txt", "val"), enc(whole[cut2:]))
check("manifests: bpe, the vocabulary, same cut", [m["tokenizer"], m["vocab"], cut, len(whole)],
      ["bpe", tok.get_vocab_size(), cut2, m2["sources"][0]["bytes"]])
# bytes: the JSON Lines text byte for byte, document ends change nothing
check("bytes: jsonl.gz tokens = the text's bytes", split("bytes", "train") + split("bytes", "val"), list(whole))
sys.exit(1 if bad else 0)
EOF
[ $? -eq 0 ] && pass "prepare --tokenizer $tk.json: JSON Lines documents and plain text give the expected ids" ||
  fail "prepare --tokenizer $tk.json: ids differ (above)"
done
finish

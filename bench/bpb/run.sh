#!/usr/bin/env bash
# Bits per byte at equal training compute on the default corpus (bench/README.md, "Bits
# per byte"): GPT-2 on bytes against Llama on a byte-level BPE vocabulary.
#
#   bench/bpb/run.sh [--steps N] [--batch N] [--vocab N] [--threads N] [--results FILE] [--tiny] [--keep]
#
# 1. atoll prepare the default corpus (/usr/share/games/fortunes) with bytes;
# 2. atoll tokenizer train a BPE of --vocab ids (default 4096) on the training split
#    only (each source's first train_bytes, as that manifest records), and prepare the
#    same sources with it (same cut, so the same validation bytes);
# 3. train GPT-2 on bytes (L4, heads 4, dim 256, context 256, --batch, default 8) and
#    Llama on BPE (L4, heads 4, kv-heads 4, dim 256, SwiGLU 704 (--multiple-of 64),
#    context 64, untied head), both --steps steps (default 150), same schedule; Llama's batch
#    is chosen so that a step costs the same FLOPs as GPT-2's (atoll_flops_per_token:
#    6 x (the blocks' matrix parameters + vocab x dim for the head) + 6 x layers x dim x
#    context for attention's scores and mixing; embeddings looked up count nothing).
# The two runs go side by side (two processes of --threads each). Writes
# bench/bpb/results.json (bench/bpb/report.py) and prints a Markdown table. Bits per byte
# (summary.json's final_val_bpb) do not depend on the machine's load; tokens/s do.
# --tiny: a toy (L1, dim 32, 20 steps, vocab 512) that only checks the script works.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

STEPS=150 VOCAB=4096 THREADS=2 KEEP=0 TINY=0
RESULTS="$ROOT/bench/bpb/results.json"
L=4 H=4 C=256 TB=256 BB=8 TL=64 MULT=64 EVAL=32
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --steps|--batch|--vocab|--threads|--results)
      [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in --steps) STEPS="$2" ;; --batch) BB="$2" ;; --vocab) VOCAB="$2" ;; --threads) THREADS="$2" ;; --results) RESULTS="$2" ;; esac
      shift ;;
    --tiny) TINY=1; L=1 H=2 C=32 TB=32 BB=4 TL=8 MULT=16 EVAL=4 STEPS=20 VOCAB=512 ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
case "$STEPS$BB$VOCAB$THREADS" in *[!0-9]*|"") echo "run.sh: --steps, --batch, --vocab and --threads take integers" >&2; exit 2 ;; esac
[ "$STEPS" -ge 10 ] && [ "$VOCAB" -gt 256 ] || { echo "run.sh: need --steps >= 10 and --vocab > 256" >&2; exit 2; }
CORPUS=/usr/share/games/fortunes
[ -d "$CORPUS" ] || { echo "run.sh: the default corpus $CORPUS is missing (scripts/setup.sh installs fortunes)" >&2; exit 1; }

log() { echo "[bpb-bench $(date +%H:%M:%S)] $*" >&2; }
log "building atoll"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target atoll -j2 >/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bpb-bench.XXXXXX")
cleanup() { if [ "$KEEP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
A="$TMP/atoll"
cp build/atoll "$A"

log "prepare $CORPUS (bytes)"
"$A" prepare --text "$CORPUS" --out "$TMP/bytes" >"$TMP/prepare.log" 2>&1 || { cat "$TMP/prepare.log" >&2; exit 1; }
# the training split's text: each source's first train_bytes
mkdir "$TMP/train_text"
/usr/bin/python3 - "$TMP/bytes/manifest.json" "$TMP/train_text" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for i, s in enumerate(m["sources"]):
    with open(s["path"], "rb") as f:
        open(f"{sys.argv[2]}/{i:03d}.txt", "wb").write(f.read(s["train_bytes"]))
EOF
log "tokenizer train --vocab-size $VOCAB on the training split"
"$A" tokenizer train --text "$TMP/train_text" --vocab-size "$VOCAB" --out "$TMP/tokenizer.json" >"$TMP/tok.log" 2>&1 \
  || { cat "$TMP/tok.log" >&2; exit 1; }
"$A" prepare --text "$CORPUS" --tokenizer "$TMP/tokenizer.json" --out "$TMP/bpe" >>"$TMP/prepare.log" 2>&1 \
  || { cat "$TMP/prepare.log" >&2; exit 1; }

# Llama's batch for the same FLOPs per step (and so, with the same steps, in all)
read -r BL FB FL < <(/usr/bin/python3 - $L $H $C $TB $BB $TL $MULT $VOCAB <<'EOF'
import sys
L, H, C, TB, BB, TL, MULT, V = map(int, sys.argv[1:])
hidden = -(-int(2 * 4 * C / 3) // MULT) * MULT
gpt2 = 6 * (L * 12 * C * C + 256 * C) + 6 * L * C * TB
llama = 6 * (L * (4 * C * C + 3 * C * hidden) + V * C) + 6 * L * C * TL
print(max(1, round(BB * TB * gpt2 / (TL * llama))), gpt2, llama)
EOF
)
COMMON=(--layers $L --heads $H --dim $C --steps "$STEPS" --threads "$THREADS" --eval-every 0 --eval-batches $EVAL --save-every 0)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "side by side: GPT-2 on bytes (context $TB batch $BB) and Llama on BPE $VOCAB (context $TL batch $BL), $STEPS steps each"
"$A" train "${COMMON[@]}" --context $TB --batch $BB --data "$TMP/bytes" --out "$TMP/gpt2" >"$TMP/gpt2.log" 2>&1 &
P1=$!
"$A" train "${COMMON[@]}" --arch llama --kv-heads $H --multiple-of $MULT --context $TL --batch $BL --data "$TMP/bpe" \
  --out "$TMP/llama" >"$TMP/llama.log" 2>&1 &
P2=$!
wait $P1 || { tail -5 "$TMP/gpt2.log" >&2; kill $P2 2>/dev/null; exit 1; }
wait $P2 || { tail -5 "$TMP/llama.log" >&2; exit 1; }
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

CPU_MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
/usr/bin/python3 bench/bpb/report.py "$TMP" "$RESULTS" "$CPU_MODEL" "$THREADS" "$STEPS" "$VOCAB" "$TINY" "$LOAD_START" "$LOAD_END" \
  "$COMMIT" "$L $H $C $TB $BB $TL $BL $MULT $FB $FL"

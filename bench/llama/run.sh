#!/usr/bin/env bash
# atoll --arch llama against PyTorch 2 on the same Llama, in one run (bench/README.md, "Llama").
#
#   bench/llama/run.sh [--quick] [--tiny] [--rounds N] [--steps N] [--threads N] [--results FILE] [--keep]
#
# Shape: L6, heads 6, kv-heads 2, dim 384, context 256, batch 8, vocab 256, untied head,
# SwiGLU width by atoll's rule (1024 here). Peers, all on --threads (default 2): atoll
# --precision fp32 and bf16; PyTorch 2 from the venv (ATOLL_PYTHON, else scripts/venv.sh):
# eager with F.scaled_dot_product_attention in fp32 and under bf16 autocast, and
# torch.compile in fp32 (bench/llama/torch_llama.py). N interleaved rounds (default 3;
# each round runs every peer once), --steps per run (default 12), medians over the steps
# after the first 3, then over rounds. Checks that every peer reports the same parameter
# count. Writes bench/llama/results.json and prints a Markdown table on stdout (progress
# on stderr). --quick: 1 round, 5 steps, a smoke run, not a result. --tiny: a toy shape
# (L1 heads 2 kv-heads 1 dim 32 context 16 batch 2) that only checks the script works.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

ROUNDS=3
STEPS=12
THREADS=2
RESULTS="$ROOT/bench/llama/results.json"
KEEP=0
QUICK=0
L=6 H=6 KV=2 C=384 T=256 B=8 V=256

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; ROUNDS=1; STEPS=5 ;;
    --tiny) QUICK=1; L=1 H=2 KV=1 C=32 T=16 B=2 ;;
    --rounds|--steps|--threads|--results)
      [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in --rounds) ROUNDS="$2" ;; --steps) STEPS="$2" ;; --threads) THREADS="$2" ;; --results) RESULTS="$2" ;; esac
      shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
for v in "$ROUNDS" "$STEPS" "$THREADS"; do
  case "$v" in *[!0-9]*|"") echo "run.sh: --rounds, --steps and --threads take integers" >&2; exit 2 ;; esac
done
if [ "$ROUNDS" -lt 1 ] || [ "$STEPS" -lt 5 ] || [ "$THREADS" -lt 1 ]; then
  echo "run.sh: need --rounds >= 1, --steps >= 5 (the first 3 steps are warm-up), --threads >= 1" >&2; exit 2
fi

log() { echo "[llama-bench $(date +%H:%M:%S)] $*" >&2; }
# PyTorch keeps freed memory in glibc's malloc instead of unmapping it (bench/run.sh says why)
TORCH_MALLOC="MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776"

PY2=${ATOLL_PYTHON:-}
if [ -z "$PY2" ] && [ -f scripts/venv.sh ]; then PY2=$(bash scripts/venv.sh 2>/dev/null || true); fi
HAVE2=0; [ -n "$PY2" ] && "$PY2" -c "import torch; assert int(torch.__version__.split('.')[0]) >= 2" 2>/dev/null && HAVE2=1
[ $HAVE2 = 1 ] || log "no PyTorch 2 (set ATOLL_PYTHON or provide scripts/venv.sh): PyTorch peers left out"

log "building atoll"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target atoll -j"$(nproc)" >/dev/null

TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-llama-bench.XXXXXX")
cleanup() { if [ "$KEEP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
cp build/atoll "$TMP/atoll"  # every run uses this copy: a rebuild of build/ meanwhile changes nothing
log "work directory $TMP; preparing the default corpus (/usr/share/games/fortunes)"
"$TMP/atoll" prepare --text /usr/share/games/fortunes --out "$TMP/data" >"$TMP/prepare.log" 2>&1 \
  || { cat "$TMP/prepare.log" >&2; exit 1; }

MODEL=(--arch llama --layers $L --heads $H --kv-heads $KV --dim $C --context $T --vocab $V --batch $B)
ATOLL_BF16=1
"$TMP/atoll" train --arch llama --layers 1 --heads 2 --kv-heads 1 --dim 8 --context 8 --batch 1 --steps 1 --eval-every 0 \
  --save-every 0 --precision bf16 --data "$TMP/data" --out "$TMP/probe" >/dev/null 2>"$TMP/probe.err" \
  || { ATOLL_BF16=0; log "atoll bf16 left out: $(tail -1 "$TMP/probe.err")"; }

run_peer() { # round peer
  local r=$1 peer=$2 out="$TMP/${2}_$1.json" lg="$TMP/${2}_$1.log"
  case "$peer" in
    atoll_*)
      "$TMP/atoll" train "${MODEL[@]}" --threads "$THREADS" --precision "${peer#atoll_}" --steps "$STEPS" --warmup 2 \
        --eval-every 0 --save-every 0 --data "$TMP/data" --out "$TMP/run_${peer}_$r" >"$lg" 2>&1 \
        || { tail -5 "$lg" >&2; return 1; }
      cp "$TMP/run_${peer}_$r/summary.json" "$out"; rm -rf "$TMP/run_${peer}_$r" ;;
    torch2_*)
      local extra=()
      case "$peer" in
        torch2_eager_bf16) extra=(--precision bf16) ;;
        torch2_compile_fp32) extra=(--compile) ;;
      esac
      env $TORCH_MALLOC "$PY2" bench/llama/torch_llama.py --threads "$THREADS" --steps "$STEPS" --layers $L --heads $H --kv-heads $KV \
        --dim $C --context $T --batch $B --vocab $V "${extra[@]}" >"$out" 2>"$lg" \
        || { tail -5 "$lg" >&2; return 1; } ;;
  esac
}

PEERS="atoll_fp32"
[ $ATOLL_BF16 = 1 ] && PEERS="$PEERS atoll_bf16"
[ $HAVE2 = 1 ] && PEERS="$PEERS torch2_eager_fp32 torch2_eager_bf16 torch2_compile_fp32"
log "rounds $ROUNDS, steps $STEPS, threads $THREADS; peers: $PEERS"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
  for peer in $PEERS; do
    log "round $r/$ROUNDS: $peer"
    run_peer "$r" "$peer" || echo "$peer failed" >"$TMP/${peer}_$r.failed"
  done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

CPU_MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
log "CPU: $CPU_MODEL"
T2=$([ $HAVE2 = 1 ] && "$PY2" -c "import torch; print(torch.__version__)" || echo none)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
/usr/bin/python3 - "$TMP" "$RESULTS" "$ROUNDS" "$STEPS" "$THREADS" "$CPU_MODEL" "$QUICK" "$T2" "$PEERS" \
  "$LOAD_START" "$LOAD_END" "$COMMIT" "$L $H $KV $C $T $B $V" "$TORCH_MALLOC" <<'PYEOF'
import datetime, json, os, statistics, sys
tmp, results, rounds, steps, threads, cpu, quick, t2, peers, load0, load1, commit, dims, torch_env = sys.argv[1:15]
rounds, steps, threads, quick, peers = int(rounds), int(steps), int(threads), quick == "1", peers.split()
L, H, KV, C, T, B, V = map(int, dims.split())
med = statistics.median
labels = {"atoll_fp32": "atoll fp32", "atoll_bf16": "atoll bf16",
          "torch2_eager_fp32": f"PyTorch {t2} eager+SDPA fp32",
          "torch2_eager_bf16": f"PyTorch {t2} eager+SDPA bf16 autocast",
          "torch2_compile_fp32": f"PyTorch {t2} compile fp32"}
def load(name):
    p = os.path.join(tmp, name)
    return json.load(open(p)) if os.path.exists(p) else None
rows = {}
for p in peers:
    runs = [x for x in (load(f"{p}_{r}.json") for r in range(1, rounds + 1)) if x]
    if not runs:
        continue
    rows[p] = {"label": labels[p], "precision": "bf16" if p.endswith("bf16") else "fp32",
               "tokens_per_second": med([x["tokens_per_second"] for x in runs]),
               "tokens_per_second_rounds": [x["tokens_per_second"] for x in runs],
               "flops_per_token": runs[0]["flops_per_token"],
               "params": sorted({int(x["params"]) for x in runs}),
               "peak_rss_mib": med([x["peak_rss_bytes"] for x in runs]) / 2**20}
counts = sorted({n for row in rows.values() for n in row["params"]})
same = len(counts) == 1
ref = {"fp32": "torch2_eager_fp32", "bf16": "torch2_eager_bf16"}
best_fp32 = max((k for k in ("torch2_eager_fp32", "torch2_compile_fp32") if k in rows),
                key=lambda k: rows[k]["tokens_per_second"], default=None)
md = [f"Run {datetime.datetime.now().astimezone().isoformat(timespec='seconds')} on {cpu}, {threads} threads; "
      f"{rounds} interleaved round(s), {steps} steps per run, median over steps 4..{steps}, then over rounds; "
      f"atoll {commit}; load average {load0} at start, {load1} at end"
      + (" — QUICK SMOKE RUN, not a benchmark result" if quick else "") + ".", "",
      f"Llama L={L} heads={H} kv-heads={KV} C={C} T={T} B={B} V={V}, untied head, SwiGLU width "
      f"{256 * ((8 * C // 3 + 255) // 256)}; parameters: "
      + (f"{counts[0]} on every side (equal)" if same else "NOT EQUAL: " + ", ".join(
          f"{r['label']} {r['params']}" for r in rows.values())), "",
      "| peer | parameters | tokens/s | per round | vs PyTorch eager, same precision | vs best PyTorch fp32 | peak RSS MiB |",
      "|---|---:|---:|---|---:|---:|---:|"]
for p, row in rows.items():
    rp = ref[row["precision"]]
    row["ratio_vs_eager"] = row["tokens_per_second"] / rows[rp]["tokens_per_second"] if rp in rows else None
    row["ratio_vs_best_fp32"] = row["tokens_per_second"] / rows[best_fp32]["tokens_per_second"] if best_fp32 else None
    f = lambda x: f"{x:.2f}x" if x else "-"
    md.append(f"| {row['label']} | {','.join(map(str, row['params']))} | {row['tokens_per_second']:.0f} | "
              + " ".join(f"{x:.0f}" for x in row["tokens_per_second_rounds"])
              + f" | {f(row['ratio_vs_eager'])} | {f(row['ratio_vs_best_fp32'])} | {row['peak_rss_mib']:.0f} |")
failed = sorted(f[:-7] for f in os.listdir(tmp) if f.endswith(".failed"))
if failed:
    md += ["", "Failed runs: " + ", ".join(failed)]
out = {"quick": quick, "cpu_model": cpu, "threads": threads, "rounds": rounds, "steps": steps, "torch2": t2, "torch_env": torch_env,
       "atoll_commit": commit, "load_average_start": load0, "load_average_end": load1,
       "shape": {"layers": L, "heads": H, "kv_heads": KV, "dim": C, "context": T, "batch": B, "vocab": V},
       "params_equal": same, "params": counts, "peers": rows, "failed": failed, "markdown": "\n".join(md)}
os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)
json.dump(out, open(results + ".tmp", "w"), indent=2)
os.replace(results + ".tmp", results)
print(out["markdown"])
sys.exit(0 if same and not failed else 1)
PYEOF
log "wrote $RESULTS"

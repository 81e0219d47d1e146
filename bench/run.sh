#!/usr/bin/env bash
# atoll against PyTorch on the same GPT, in one run, at both precisions (bench/README.md).
#
#   bench/run.sh [--quick] [--rounds N] [--steps N] [--gpt2-steps N] [--threads N]
#                [--shapes "bench gpt2 tiny"] [--results FILE] [--keep]
#
# Shapes: bench (L6 H6 C384 T256 B8 V256), gpt2 (GPT-2 124M: L12 H12 C768 V50257 at
# T256 B8), tiny (L4 H4 C128 T256 B8 V256). Peers at each shape, every one on the same
# --threads (default: all cores): atoll --precision fp32 and bf16; Debian's PyTorch 1.13
# (/usr/bin/python3, fp32); PyTorch 2.x from PyPI (scripts/venv.sh or ATOLL_PYTHON):
# eager with F.scaled_dot_product_attention in fp32 and with bf16 autocast, and
# torch.compile of both. Each round also measures every matrix engine's peak per
# precision (build/bench_engines: OpenBLAS, oneDNN, BLIS sgemm; oneDNN bf16).
# N interleaved rounds (each round runs every peer once, so a shared machine slows all
# alike); medians over steps after the first 3, then over rounds. Writes bench/results.json
# and prints a Markdown table per shape on stdout (progress on stderr). The gpt2 shape runs
# --gpt2-steps (default 8: a step is about 1.5 TFLOP, tens of seconds on 2 cores).
# --quick: 1 round, 5 steps, gpt2 at batch 1: a smoke run, not a result.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

ROUNDS=3
STEPS=20
GPT2_STEPS=8
THREADS=$(nproc)
SHAPES="bench gpt2 tiny"
RESULTS="$ROOT/bench/results.json"
KEEP=0
QUICK=0
PY1=/usr/bin/python3

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; ROUNDS=1; STEPS=5; GPT2_STEPS=5 ;;
    --rounds) ROUNDS="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --gpt2-steps) GPT2_STEPS="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --shapes) SHAPES="$2"; shift ;;
    --results) RESULTS="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
for v in "$ROUNDS" "$STEPS" "$GPT2_STEPS" "$THREADS"; do
  case "$v" in *[!0-9]*|"") echo "run.sh: --rounds, --steps, --gpt2-steps and --threads take integers" >&2; exit 2 ;; esac
done
if [ "$ROUNDS" -lt 1 ] || [ "$STEPS" -lt 5 ] || [ "$GPT2_STEPS" -lt 5 ] || [ "$THREADS" -lt 1 ]; then
  echo "run.sh: need --rounds >= 1, --steps and --gpt2-steps >= 5 (the first 3 steps are warm-up), --threads >= 1" >&2; exit 2
fi
for s in $SHAPES; do
  case "$s" in bench|gpt2|tiny) ;; *) echo "run.sh: --shapes: unknown shape '$s' (known: bench gpt2 tiny)" >&2; exit 2 ;; esac
done

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }

# PyTorch's CPU allocator hands large blocks to glibc's malloc, which maps them afresh
# (mmap) and unmaps them on free: every step then faults in and zeroes its activations
# again. At GPT-2 124M on a 2-core Xeon VM that was 4.5 M page faults and 16 s of system
# time in a 26 s run, and half the speed (484 against 936 tokens/s, eager bf16). The PyTorch
# peers run with glibc keeping freed memory instead, as a tuned installation would
# (bench/README.md); atoll maps its buffers once.
TORCH_MALLOC="MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776"

# PyTorch 1.13 (Debian) and 2.x (PyPI venv); a missing one is left out with a note.
HAVE1=0; "$PY1" -c "import torch" 2>/dev/null && HAVE1=1
PY2=${ATOLL_PYTHON:-}
if [ -z "$PY2" ] && [ -f scripts/venv.sh ]; then PY2=$(bash scripts/venv.sh 2>/dev/null || true); fi
HAVE2=0; [ -n "$PY2" ] && "$PY2" -c "import torch; assert int(torch.__version__.split('.')[0]) >= 2" 2>/dev/null && HAVE2=1
[ $HAVE1 = 1 ] || log "no Debian PyTorch ($PY1 cannot import torch): left out"
[ $HAVE2 = 1 ] || log "no PyTorch 2 (set ATOLL_PYTHON or provide scripts/venv.sh): left out"

log "building atoll and bench_engines"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target atoll bench_engines -j"$(nproc)" >/dev/null

TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench.XXXXXX")
cleanup() { if [ "$KEEP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
log "work directory $TMP"
log "preparing the default corpus (/usr/share/games/fortunes)"
build/atoll prepare --text /usr/share/games/fortunes --out "$TMP/data" >"$TMP/prepare.log" 2>&1 \
  || { cat "$TMP/prepare.log" >&2; exit 1; }

shape_args() { # L H C T B V
  case "$1" in
    bench) echo "6 6 384 256 8 256" ;;
    gpt2) if [ $QUICK = 1 ]; then echo "12 12 768 256 1 50257"; else echo "12 12 768 256 8 50257"; fi ;;
    tiny) echo "4 4 128 256 8 256" ;;
  esac
}

ATOLL_BF16=1
build/atoll train --layers 1 --heads 1 --dim 8 --context 8 --batch 1 --steps 1 --eval-every 0 --save-every 0 \
  --precision bf16 --data "$TMP/data" --out "$TMP/probe" >/dev/null 2>"$TMP/probe.err" || { ATOLL_BF16=0; log "atoll bf16 left out: $(tail -1 "$TMP/probe.err")"; }

shape_steps() { if [ "$1" = gpt2 ]; then echo "$GPT2_STEPS"; else echo "$STEPS"; fi; }

run_peer() { # round shape peer L H C T B V
  local r=$1 shape=$2 peer=$3 L=$4 H=$5 C=$6 T=$7 B=$8 V=$9 out="$TMP/${2}_${3}_$1.json"
  local steps
  steps=$(shape_steps "$shape")
  case "$peer" in
    atoll_fp32|atoll_bf16)
      build/atoll train --layers $L --heads $H --dim $C --context $T --vocab $V --batch $B --threads $THREADS \
        --precision "${peer#atoll_}" --steps "$steps" --warmup 2 --eval-every 0 --save-every 0 \
        --data "$TMP/data" --out "$TMP/run_${shape}_${peer}_$r" >"$TMP/${shape}_${peer}_$r.log" 2>&1 \
        || { tail -5 "$TMP/${shape}_${peer}_$r.log" >&2; return 1; }
      cp "$TMP/run_${shape}_${peer}_$r/summary.json" "$out"; rm -rf "$TMP/run_${shape}_${peer}_$r" ;;
    *)
      local py=$PY2 extra=()
      case "$peer" in
        torch1_fp32) py=$PY1 ;;
        torch2_eager_fp32) extra=(--attention sdpa) ;;
        torch2_eager_bf16) extra=(--attention sdpa --precision bf16) ;;
        torch2_compile_fp32) extra=(--attention sdpa --compile) ;;
        torch2_compile_bf16) extra=(--attention sdpa --compile --precision bf16) ;;
      esac
      env $TORCH_MALLOC "$py" bench/torch_gpt.py --threads $THREADS --steps "$steps" --layers $L --heads $H --dim $C --context $T \
        --batch $B --vocab $V "${extra[@]}" >"$out" 2>"$TMP/${shape}_${peer}_$r.log" \
        || { tail -5 "$TMP/${shape}_${peer}_$r.log" >&2; return 1; } ;;
  esac
}

PEERS="atoll_fp32"
[ $ATOLL_BF16 = 1 ] && PEERS="$PEERS atoll_bf16"
[ $HAVE1 = 1 ] && PEERS="$PEERS torch1_fp32"
[ $HAVE2 = 1 ] && PEERS="$PEERS torch2_eager_fp32 torch2_eager_bf16 torch2_compile_fp32 torch2_compile_bf16"
log "rounds $ROUNDS, steps $STEPS (gpt2: $GPT2_STEPS), threads $THREADS, shapes: $SHAPES; peers: $PEERS"

for r in $(seq 1 "$ROUNDS"); do
  log "round $r/$ROUNDS: matrix engines"
  OMP_NUM_THREADS=$THREADS build/bench_engines --threads $THREADS --rounds 5 >"$TMP/engines_$r.json" 2>"$TMP/engines_$r.log" \
    || { cat "$TMP/engines_$r.log" >&2; exit 1; }
  for shape in $SHAPES; do
    for peer in $PEERS; do
      log "round $r/$ROUNDS: $shape: $peer"
      # shellcheck disable=SC2046
      run_peer "$r" "$shape" "$peer" $(shape_args "$shape") || echo "$peer failed" >"$TMP/${shape}_${peer}_$r.failed"
    done
  done
done

CPU_MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
T1=$([ $HAVE1 = 1 ] && "$PY1" -c "import torch; print(torch.__version__)" || echo none)
T2=$([ $HAVE2 = 1 ] && "$PY2" -c "import torch; print(torch.__version__)" || echo none)
/usr/bin/python3 - "$TMP" "$RESULTS" "$ROUNDS" "$STEPS" "$THREADS" "$CPU_MODEL" "$QUICK" "$T1" "$T2" "$SHAPES" "$PEERS" "$GPT2_STEPS" "$TORCH_MALLOC" <<'PYEOF'
import datetime, json, os, statistics, sys
tmp, results, rounds, steps, threads, cpu, quick, t1, t2, shapes, peers, gpt2_steps, torch_env = sys.argv[1:14]
rounds, steps, threads, quick, gpt2_steps = int(rounds), int(steps), int(threads), quick == "1", int(gpt2_steps)
shapes, peers = shapes.split(), peers.split()
med = statistics.median
dims = {"bench": (6, 6, 384, 256, 8, 256), "gpt2": (12, 12, 768, 256, 1 if quick else 8, 50257), "tiny": (4, 4, 128, 256, 8, 256)}
def load(name):
    p = os.path.join(tmp, name)
    return json.load(open(p)) if os.path.exists(p) else None

eng = [load(f"engines_{r}.json") for r in range(1, rounds + 1)]
names = list(eng[0]["engines"])
engines = {e: {"square_gflops": med([x["engines"][e]["square_2048"] for x in eng]),
               "model_shapes_gflops": med([x["engines"][e]["model_shapes_gflops"] for x in eng]),
               "best_gflops": med([x["engines"][e]["best_gflops"] for x in eng])} for e in names}
# The peak at a precision is the fastest product any engine ran at it (bench_engines'
# best_gflops: the square 2048 or one of the model's own products, bf16 on inputs
# already rounded). Until 2026-12-02 it was the square alone, with bf16 inputs rounded
# in every call: about 1.5x below what oneDNN's bf16 products reach inside the model.
bf16_engines = ("onednn_bf16", "onednn_bf16_rounded")
peak = {"fp32": max(v["best_gflops"] for e, v in engines.items() if e not in bf16_engines),
        "bf16": max([v["best_gflops"] for e, v in engines.items() if e in bf16_engines], default=None)}
labels = {"atoll_fp32": "atoll fp32", "atoll_bf16": "atoll bf16", "torch1_fp32": f"PyTorch {t1} (Debian) fp32",
          "torch2_eager_fp32": f"PyTorch {t2} eager+SDPA fp32", "torch2_eager_bf16": f"PyTorch {t2} eager+SDPA bf16 autocast",
          "torch2_compile_fp32": f"PyTorch {t2} compile fp32", "torch2_compile_bf16": f"PyTorch {t2} compile bf16 autocast"}
out = {"quick": quick, "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "cpu_model": cpu,
       "cpu_features": eng[0]["features"], "openblas_core": eng[0]["openblas_core"], "threads": threads,
       "rounds": rounds, "steps": steps, "gpt2_steps": gpt2_steps, "torch1": t1, "torch2": t2, "torch_env": torch_env, "engines": engines, "peak_gflops": peak, "shapes": {}}
md = [f"Run {out['date']} on {cpu} ({eng[0]['features']}), {threads} threads; {rounds} interleaved round(s), {steps} steps per run"
      + (f" ({gpt2_steps} at gpt2)" if "gpt2" in shapes else "")
      + (" — QUICK SMOKE RUN, not a benchmark result" if quick else "") + ".", "",
      "Matrix engines, GFLOP/s (fastest product; square 2048 and the model's products as a whole in brackets): "
      + ", ".join(f"{e} {v['best_gflops']:.0f} [{v['square_gflops']:.0f}, {v['model_shapes_gflops']:.0f}]" for e, v in engines.items()),
      "", f"Peaks: fp32 {peak['fp32']:.0f}" + (f", bf16 {peak['bf16']:.0f}" if peak.get('bf16') else "") + " GFLOP/s.", ""]
for s in shapes:
    L, H, C, T, B, V = dims[s]
    fpt = 6.0 * (12.0 * L * C * C + V * C) + 6.0 * L * C * T
    rows = {}
    for p in peers:
        runs = [load(f"{s}_{p}_{r}.json") for r in range(1, rounds + 1)]
        runs = [x for x in runs if x]
        if not runs:
            continue
        tps = med([x["tokens_per_second"] for x in runs])
        prec = "bf16" if p.endswith("bf16") else "fp32"
        rows[p] = {"label": labels[p], "precision": prec, "tokens_per_second": tps,
                   "tokens_per_second_rounds": [x["tokens_per_second"] for x in runs], "model_gflops": tps * fpt / 1e9,
                   "fraction_of_peak": (tps * fpt / 1e9 / peak[prec]) if peak.get(prec) else None,
                   "peak_rss_mib": med([x["peak_rss_bytes"] for x in runs]) / 2**20}
    def best(keys):
        ks = [k for k in keys if k in rows]
        return max(ks, key=lambda k: rows[k]["tokens_per_second"]) if ks else None
    ref = {"fp32": best(["torch2_eager_fp32", "torch2_compile_fp32"]), "bf16": best(["torch2_eager_bf16", "torch2_compile_bf16"])}
    md += [f"**{s}**: L={L} H={H} C={C} T={T} B={B} V={V}, {fpt / 1e6:.1f} MFLOP/token", "",
           "| peer | tokens/s | vs best PyTorch 2 (same precision) | model GFLOP/s | % of peak (same precision) | peak RSS MiB |",
           "|---|---:|---:|---:|---:|---:|"]
    for p, row in rows.items():
        rp = ref[row["precision"]]
        row["ratio_vs_torch2"] = row["tokens_per_second"] / rows[rp]["tokens_per_second"] if rp else None
        md.append(f"| {row['label']} | {row['tokens_per_second']:.0f} | "
                  + (f"{row['ratio_vs_torch2']:.2f}x" if row["ratio_vs_torch2"] else "-") + f" | {row['model_gflops']:.1f} | "
                  + (f"{100 * row['fraction_of_peak']:.0f}%" if row["fraction_of_peak"] else "-") + f" | {row['peak_rss_mib']:.0f} |")
    targets = {}
    if "atoll_fp32" in rows and ref["fp32"]:
        targets["fp32_at_least_1.0x_torch2"] = rows["atoll_fp32"]["ratio_vs_torch2"] >= 1.0
    if "atoll_bf16" in rows and ref["bf16"]:
        targets["bf16_at_least_1.5x_torch2_autocast"] = rows["atoll_bf16"]["ratio_vs_torch2"] >= 1.5
    for p in ("atoll_fp32", "atoll_bf16"):
        if p in rows and rows[p]["fraction_of_peak"] is not None:
            targets[f"{p}_at_least_70pct_of_peak"] = rows[p]["fraction_of_peak"] >= 0.7
    md += ["", "Targets: " + (", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in targets.items()) or "none measurable"), ""]
    out["shapes"][s] = {"dims": dict(zip("L H C T B V".split(), dims[s])), "flops_per_token": fpt,
                        "steps": gpt2_steps if s == "gpt2" else steps, "peers": rows,
                        "reference": ref, "targets": targets}
failed = sorted(f for f in os.listdir(tmp) if f.endswith(".failed"))
if failed:
    md.append("Failed runs: " + ", ".join(f[:-7] for f in failed))
out["markdown"] = "\n".join(md)
os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)
json.dump(out, open(results + ".tmp", "w"), indent=2)
os.replace(results + ".tmp", results)
print(out["markdown"])
PYEOF
log "wrote $RESULTS"

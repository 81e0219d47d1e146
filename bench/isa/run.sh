#!/usr/bin/env bash
# atoll and PyTorch 2 on the code paths of smaller processors, on this one (bench/README.md,
# "Smaller processors on one machine").
#
#   bench/isa/run.sh [--quick] [--rounds N] [--steps N] [--threads N] [--results FILE]
#
# At the bench shape (L6 H6 C384 T256 B8 V256), two caps, each for atoll and PyTorch alike:
#   avx2         no AVX-512: atoll built with -march=haswell (its own loops too) and run
#                with ATOLL_MAX_ISA=avx2, fp32; PyTorch with ONEDNN_MAX_CPU_ISA=AVX2,
#                MKL_ENABLE_INSTRUCTIONS=AVX2 and (eager) ATEN_CPU_CAPABILITY=avx2, eager
#                with F.scaled_dot_product_attention and torch.compile, fp32. torch.compile
#                runs without ATEN_CPU_CAPABILITY: with it PyTorch 2.15's compiled model
#                gave NaN losses from its second step on.
#   avx512_bf16  AVX-512 with AVX512_BF16 but no AMX (AMD Zen 4, Intel Cooper Lake): atoll
#                native with ATOLL_MAX_ISA=avx512_bf16, fp32 and bf16; PyTorch with
#                ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, MKL_ENABLE_INSTRUCTIONS=AVX512 and
#                ATEN_CPU_CAPABILITY=avx512: eager fp32, eager bf16 autocast, compiled bf16.
# N interleaved rounds (default 3), --steps per run (default 12), medians; PyTorch 2 from
# the venv (ATOLL_PYTHON, else scripts/venv.sh), with bench/run.sh's malloc setting.
# Writes bench/isa/results.json and prints a Markdown table. --quick: 1 round, 5 steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
ROUNDS=3
STEPS=12
THREADS=2
RESULTS="$ROOT/bench/isa/results.json"
usage() { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) ROUNDS=1; STEPS=5 ;;
    --rounds|--steps|--threads|--results)
      [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in --rounds) ROUNDS="$2" ;; --steps) STEPS="$2" ;; --threads) THREADS="$2" ;; --results) RESULTS="$2" ;; esac
      shift ;;
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
log() { echo "[isa-bench $(date +%H:%M:%S)] $*" >&2; }
grep -qw avx512_bf16 /proc/cpuinfo || { echo "run.sh: this CPU has no AVX512_BF16: nothing to cap" >&2; exit 2; }
TORCH_MALLOC="MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776"
PY2=${ATOLL_PYTHON:-$(bash scripts/venv.sh 2>/dev/null || true)}
[ -n "$PY2" ] && "$PY2" -c "import torch; assert int(torch.__version__.split('.')[0]) >= 2" 2>/dev/null \
  || { echo "run.sh: no PyTorch 2 (set ATOLL_PYTHON or run scripts/venv.sh)" >&2; exit 2; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

log "building atoll (native, and -march=haswell for the avx2 rows)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DATOLL_NATIVE=ON >/dev/null
cmake --build build --target atoll -j"$(nproc)" >/dev/null
cmake -S . -B "$TMP/build-avx2" -DCMAKE_BUILD_TYPE=Release -DATOLL_NATIVE=OFF -DATOLL_CUDA=OFF -DCMAKE_C_FLAGS=-march=haswell >/dev/null
cmake --build "$TMP/build-avx2" --target atoll -j"$(nproc)" >/dev/null

SHAPE="--layers 6 --heads 6 --dim 384 --context 256 --batch 8 --vocab 256"
AVX2_TORCH="ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"
BF16_TORCH="ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 MKL_ENABLE_INSTRUCTIONS=AVX512 ATEN_CPU_CAPABILITY=avx512"
JOBS="avx2/atoll_fp32 avx2/torch_eager_fp32 avx2/torch_compile_fp32 avx512_bf16/atoll_fp32 avx512_bf16/atoll_bf16
avx512_bf16/torch_eager_fp32 avx512_bf16/torch_eager_bf16 avx512_bf16/torch_compile_bf16"

atoll_run() { # atoll_run BIN CAP PRECISION OUTFILE
  rm -rf "$TMP/run"
  ATOLL_MAX_ISA=$2 "$1" train $SHAPE --threads "$THREADS" --precision "$3" --steps "$STEPS" --warmup 2 \
    --eval-every 0 --save-every 0 --out "$TMP/run" >/dev/null 2>"$TMP/atoll.err" || { tail -3 "$TMP/atoll.err" >&2; exit 1; }
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({'tokens_per_second': d['tokens_per_second'], 'params': d['params']}))" \
    "$TMP/run/summary.json" >"$4"
  grep -m1 "CPU " "$TMP/atoll.err" >"$4.header"
}
torch_run() { # torch_run ENV EXTRA OUTFILE
  env $TORCH_MALLOC $1 "$PY2" bench/torch_gpt.py --threads "$THREADS" --steps "$STEPS" $SHAPE --attention sdpa $2 \
    >"$3" 2>"$TMP/torch.err" || { tail -3 "$TMP/torch.err" >&2; exit 1; }
}
for r in $(seq "$ROUNDS"); do
  for job in $JOBS; do
    log "round $r/$ROUNDS: $job"
    f="$TMP/${job//\//_}.$r.json"
    case $job in
      avx2/atoll_fp32) atoll_run "$TMP/build-avx2/atoll" avx2 fp32 "$f" ;;
      avx2/torch_eager_fp32) torch_run "$AVX2_TORCH ATEN_CPU_CAPABILITY=avx2" "" "$f" ;;
      avx2/torch_compile_fp32) torch_run "$AVX2_TORCH" "--compile" "$f" ;;
      avx512_bf16/atoll_fp32) atoll_run build/atoll avx512_bf16 fp32 "$f" ;;
      avx512_bf16/atoll_bf16) atoll_run build/atoll avx512_bf16 bf16 "$f" ;;
      avx512_bf16/torch_eager_fp32) torch_run "$BF16_TORCH" "" "$f" ;;
      avx512_bf16/torch_eager_bf16) torch_run "$BF16_TORCH" "--precision bf16" "$f" ;;
      avx512_bf16/torch_compile_bf16) torch_run "$BF16_TORCH" "--precision bf16 --compile" "$f" ;;
    esac
  done
done

CPU_MODEL=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
python3 - "$TMP" "$RESULTS" "$ROUNDS" "$STEPS" "$THREADS" "$CPU_MODEL" "$JOBS" "$TORCH_MALLOC" "$(git describe --always --dirty)" <<'PYEOF'
import json, statistics, sys, os
tmp, results, rounds, steps, threads, cpu, jobs, tm, commit = sys.argv[1:]
rounds = int(rounds)
out = {"cpu_model": cpu, "threads": int(threads), "rounds": rounds, "steps": int(steps), "commit": commit,
       "shape": "L6 H6 C384 T256 B8 V256", "torch_env": tm, "caps": {}}
params = set()
for job in jobs.split():
    cap, peer = job.split("/")
    vals = []
    for r in range(1, rounds + 1):
        f = os.path.join(tmp, job.replace("/", "_") + ".%d.json" % r)
        d = json.load(open(f))
        vals.append(d["tokens_per_second"])
        if "params" in d: params.add(d["params"])
        if "parameters" in d: params.add(d["parameters"])
    row = {"tokens_per_second": statistics.median(vals), "rounds": vals}
    h = os.path.join(tmp, job.replace("/", "_") + ".1.json.header")
    if os.path.exists(h): row["header"] = open(h).read().strip()
    out["caps"].setdefault(cap, {})[peer] = row
if len(params) > 1: sys.exit("run.sh: the peers report different parameter counts: %s" % sorted(params))
for cap, rows in out["caps"].items():
    for prec in ("fp32", "bf16"):
        a = rows.get("atoll_" + prec)
        peers = [v["tokens_per_second"] for k, v in rows.items() if k.startswith("torch") and k.endswith(prec)]
        if a and peers: a["ratio_vs_best_torch"] = a["tokens_per_second"] / max(peers)
json.dump(out, open(results, "w"), indent=1)
print("| cap | peer | tokens/s (median) | ratio to the best PyTorch of its precision |")
print("|---|---|---:|---:|")
for cap, rows in out["caps"].items():
    for peer, v in rows.items():
        print("| %s | %s | %.0f | %s |" % (cap, peer, v["tokens_per_second"], "%.2fx" % v["ratio_vs_best_torch"] if "ratio_vs_best_torch" in v else ""))
print("\nCPU: %s, %d threads, %d rounds of %d steps (%s)" % (cpu, int(threads), rounds, int(steps), results))
PYEOF

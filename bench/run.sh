#!/usr/bin/env bash
# atoll against PyTorch on the same GPT in one run (see bench/README.md).
#
#   bench/run.sh [--quick] [--rounds N] [--steps N] [--torch-threads "1 2 default"]
#                [--results FILE] [--keep]
#
# Builds atoll and bench_sgemm if needed, prepares the default corpus, then runs
# N interleaved rounds of: the OpenBLAS sgemm peak, atoll train, PyTorch at each thread
# setting. Reports the medians over rounds, PyTorch at its best thread setting, the ratio
# and model FLOP/s as a fraction of the sgemm peak; writes bench/results.json and prints a
# Markdown table on stdout (progress goes to stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

ROUNDS=3
STEPS=30
SGEMM_REPS=9
TORCH_THREADS=""
RESULTS="$ROOT/bench/results.json"
KEEP=0
QUICK=0
PY=/usr/bin/python3
# The model of the issue's benchmark (fixed: the table compares this shape only).
L=6 H=6 C=384 T=256 B=8 V=256

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; ROUNDS=1; STEPS=8; SGEMM_REPS=3 ;;
    --rounds) ROUNDS="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --torch-threads) TORCH_THREADS="$2"; shift ;;
    --results) RESULTS="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
case "$ROUNDS$STEPS" in *[!0-9]*|"") echo "run.sh: --rounds and --steps take integers" >&2; exit 2 ;; esac
if [ "$ROUNDS" -lt 1 ] || [ "$STEPS" -lt 5 ]; then
  echo "run.sh: need --rounds >= 1 and --steps >= 5 (the first 3 steps are warm-up)" >&2; exit 2
fi
[ -x "$PY" ] || { echo "run.sh: $PY not found (Debian's python3 with python3-torch)" >&2; exit 1; }
"$PY" -c "import torch" 2>/dev/null || { echo "run.sh: $PY cannot import torch (apt install python3-torch)" >&2; exit 1; }

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }

# (a) build what is missing or stale; only the two targets needed here.
log "building atoll and bench_sgemm"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target atoll bench_sgemm -j"$(nproc)" >/dev/null

TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench.XXXXXX")
cleanup() { if [ "$KEEP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
log "work directory $TMP"

log "preparing the default corpus (/usr/share/games/fortunes)"
build/atoll prepare --text /usr/share/games/fortunes --out "$TMP/data" >"$TMP/prepare.log" 2>&1 \
  || { cat "$TMP/prepare.log" >&2; exit 1; }

NPROC=$(nproc)
# PyTorch's thread settings: 1 and 2, and torch's default when it is a different setting:
# its intra-op count outside {1, 2}, or one below the core count (then its OpenBLAS,
# which reads no torch setting, still runs on every core: a mixed setting of its own).
if [ -z "$TORCH_THREADS" ]; then
  TORCH_DEFAULT=$("$PY" -c "import torch; print(torch.get_num_threads())")
  TORCH_THREADS="1 2"
  if { [ "$TORCH_DEFAULT" != 1 ] && [ "$TORCH_DEFAULT" != 2 ]; } || [ "$TORCH_DEFAULT" != "$NPROC" ]; then
    TORCH_THREADS="$TORCH_THREADS default"
  fi
fi
log "rounds $ROUNDS, steps $STEPS, PyTorch thread settings: $TORCH_THREADS"

# (e) interleaved rounds: the machine may be shared, so each peer sees the same noise.
for r in $(seq 1 "$ROUNDS"); do
  log "round $r/$ROUNDS: sgemm peak"
  build/bench_sgemm --reps "$SGEMM_REPS" --batch $B --seq $T --dim $C --vocab $V --layers $L \
    >"$TMP/sgemm_$r.json" 2>"$TMP/sgemm_$r.log" || { cat "$TMP/sgemm_$r.log" >&2; exit 1; }

  log "round $r/$ROUNDS: atoll train ($STEPS steps)"
  build/atoll train --layers $L --heads $H --dim $C --context $T --vocab $V --batch $B \
    --steps "$STEPS" --warmup 5 --eval-every 0 --save-every 0 \
    --data "$TMP/data" --out "$TMP/atoll_$r" >"$TMP/atoll_$r.log" 2>&1 \
    || { tail -20 "$TMP/atoll_$r.log" >&2; exit 1; }
  cp "$TMP/atoll_$r/summary.json" "$TMP/atoll_$r.json"
  rm -rf "$TMP/atoll_$r/checkpoints"

  for th in $TORCH_THREADS; do
    log "round $r/$ROUNDS: PyTorch, threads $th ($STEPS steps)"
    arg=()
    [ "$th" = default ] || arg=(--threads "$th")
    "$PY" bench/torch_gpt.py "${arg[@]}" --steps "$STEPS" --layers $L --heads $H --dim $C \
      --context $T --batch $B --vocab $V >"$TMP/torch_${th}_$r.json" 2>"$TMP/torch_${th}_$r.log" \
      || { tail -20 "$TMP/torch_${th}_$r.log" >&2; exit 1; }
  done
done

# (f) medians, the best PyTorch setting, results.json and the Markdown table.
OPENBLAS_ATOLL=$(grep -m1 'OPENBLAS_LDFLAGS:INTERNAL' build/CMakeCache.txt | sed 's/.*=//' || true)
CPU_MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
TORCH_PKG=$(dpkg-query -W -f='${Version}' python3-torch 2>/dev/null || true)
"$PY" - "$TMP" "$RESULTS" "$ROUNDS" "$STEPS" "$NPROC" "$CPU_MODEL" "$OPENBLAS_ATOLL" \
  "$TORCH_PKG" "$QUICK" $TORCH_THREADS <<'EOF'
import datetime, json, os, statistics, sys

tmp, results, rounds, steps, nproc, cpu, ob_link, torch_pkg, quick = sys.argv[1:10]
rounds, steps, nproc, quick = int(rounds), int(steps), int(nproc), quick == "1"
settings = sys.argv[10:]
L, H, C, T, B, V = 6, 6, 384, 256, 8, 256
fpt = 6.0 * (12.0 * L * C * C + V * C) + 6.0 * L * C * T  # atoll_flops_per_token

def load(name):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)

med = statistics.median
sg = [load(f"sgemm_{r}.json") for r in range(1, rounds + 1)]
at = [load(f"atoll_{r}.json") for r in range(1, rounds + 1)]
tc = {s: [load(f"torch_{s}_{r}.json") for r in range(1, rounds + 1)] for s in settings}

peak = med([x["square_gflops"] for x in sg]) * 1e9
model_shapes = med([x["model_shapes_gflops"] for x in sg]) * 1e9

def summarize(runs, label, threads, flops_from_tps):
    tps = med([x["tokens_per_second"] for x in runs])
    # model FLOP/s: the same count for both peers, atoll's flops_per_token x tokens/s
    mflops = med([x["tokens_per_second"] * fpt for x in runs])
    if not flops_from_tps:
        reported = med([x["model_flops_per_second"] for x in runs])
        assert abs(reported - mflops) <= 1e-6 * max(1.0, mflops), (reported, mflops)
    return {
        "peer": label,
        "threads": threads,
        "tokens_per_second": tps,
        "tokens_per_second_rounds": [x["tokens_per_second"] for x in runs],
        "model_flops_per_second": mflops,
        "fraction_of_sgemm_peak": mflops / peak if peak > 0 else None,
        "peak_rss_bytes": med([x["peak_rss_bytes"] for x in runs]),
        "median_step_seconds": med([x["median_step_seconds"] for x in runs]),
    }

for x in at:
    assert abs(x["flops_per_token"] - fpt) < 1e-6 * fpt, ("flops_per_token differs", x["flops_per_token"], fpt)
atoll = summarize(at, "atoll", nproc, False)
atoll["threads_note"] = "--threads 0: all cores (OpenMP + OpenBLAS)"
torch_rows = {}
for s, runs in tc.items():
    row = summarize(runs, "PyTorch", runs[0]["threads"], True)
    row["setting"] = s
    row["interop_threads"] = runs[0]["interop_threads"]
    row["blas_libraries"] = runs[0]["blas_libraries"]
    if s == "default":
        row["threads_note"] = (f"torch default: {runs[0]['threads']} intra-op thread(s); "
                               "BLAS threads from its own default")
    torch_rows[s] = row
best_setting = max(torch_rows, key=lambda s: torch_rows[s]["tokens_per_second"])
best = torch_rows[best_setting]
ratio = atoll["tokens_per_second"] / best["tokens_per_second"]
for row in [atoll] + list(torch_rows.values()):
    row["ratio_vs_pytorch_best"] = row["tokens_per_second"] / best["tokens_per_second"]

t0 = tc[settings[0]][0]
ob_cfg = sg[0].get("openblas_config", "")
variant = "openmp" if "openblas-openmp" in ob_link else ("pthread" if "openblas-pthread" in ob_link else ob_link)
torch_blas = ", ".join(os.path.basename(p) + " (" + os.path.basename(os.path.dirname(p)) + ")"
                       for p in t0["blas_libraries"] if "blas" in os.path.basename(p))
info = {
    "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    "cpu_model": cpu,
    "cores": nproc,
    "openblas_atoll": f"{ob_cfg.split(' NO_')[0].strip()} ({variant}); config: {ob_cfg}; core: {sg[0].get('openblas_core')}",
    "torch_version": t0["torch_version"],
    "torch_package": torch_pkg,
    "torch_blas": torch_blas,
}
targets = {
    "ratio_at_least_1.5": ratio >= 1.5,
    "sgemm_fraction_at_least_0.75": atoll["fraction_of_sgemm_peak"] >= 0.75,
}

def mib(b):
    return b / (1 << 20)

def thr(row):
    if row["peer"] == "atoll":
        return f"{row['threads']} (all cores)"
    if row.get("setting") == "default":
        return f"{row['threads']} (torch default)"
    return str(row["threads"])

lines = []
lines.append(f"Model: L={L}, H={H}, C={C}, T={T}, B={B}, V={V}; full training step (forward, backward, AdamW); "
             f"{steps} steps per run, median over steps after the first 3, then median over {rounds} interleaved round(s)"
             + (" — QUICK SMOKE RUN, not a benchmark result" if quick else "") + ".")
lines.append("")
lines.append("| peer | threads | tokens/s | ratio vs PyTorch | model GFLOP/s | % of sgemm peak | peak RSS MiB |")
lines.append("|---|---|---:|---:|---:|---:|---:|")
rows = [atoll, best] + [torch_rows[s] for s in settings if s != best_setting]
for row in rows:
    name = row["peer"]
    if row is best:
        name += " (best thread setting)"
    elif row["peer"] == "PyTorch":
        name += " (other setting)"
    lines.append(f"| {name} | {thr(row)} | {row['tokens_per_second']:.0f} | {row['ratio_vs_pytorch_best']:.2f}x | "
                 f"{row['model_flops_per_second'] / 1e9:.1f} | {100 * row['fraction_of_sgemm_peak']:.1f}% | "
                 f"{mib(row['peak_rss_bytes']):.0f} |")
lines.append("")
lines.append(f"sgemm peak (OpenBLAS cblas_sgemm, square 2048, {sg[0]['threads']} threads, median over rounds): "
             f"{peak / 1e9:.1f} GFLOP/s; on the model's own matrix shapes: {model_shapes / 1e9:.1f} GFLOP/s. "
             f"Model FLOPs per token (atoll's count, both peers): {fpt:.0f}.")
lines.append(f"PyTorch at its best thread setting: {best_setting} "
             f"({best['threads']} intra-op thread(s); settings tried: {', '.join(settings)}).")
lines.append(f"Targets: atoll/PyTorch {ratio:.2f}x (>= 1.5x: {'met' if targets['ratio_at_least_1.5'] else 'NOT met'}); "
             f"atoll at {100 * atoll['fraction_of_sgemm_peak']:.1f}% of the sgemm peak "
             f"(>= 75%: {'met' if targets['sgemm_fraction_at_least_0.75'] else 'NOT met'}).")
lines.append(f"Run {info['date']} on {info['cpu_model']}, {nproc} cores; OpenBLAS (atoll): {info['openblas_atoll'].split(';')[0]}; "
             f"torch {info['torch_version']} (Debian python3-torch {torch_pkg}; BLAS: {torch_blas}).")
over = [r for r in rows if r["fraction_of_sgemm_peak"] > 1.0]
sq = [x["square_gflops"] for x in sg]
if over or (len(sq) > 1 and max(sq) > 1.2 * min(sq)):
    lines.append("Warning: " + ("a peer ran above 100% of the sgemm peak, " if over else "")
                 + f"sgemm peak per round {', '.join(f'{v:.1f}' for v in sq)} GFLOP/s: "
                 "the machine was busy and these numbers are noisy; rerun on a quiet machine.")
markdown = "\n".join(lines)

out = {
    "quick": quick,
    "model": {"layers": L, "heads": H, "dim": C, "context": T, "batch": B, "vocab": V},
    "flops_per_token": fpt,
    "rounds": rounds,
    "steps": steps,
    "machine": info,
    "sgemm": {
        "peak_gflops": peak / 1e9,
        "peak_definition": sg[0]["sgemm_peak_definition"],
        "model_shapes_gflops": model_shapes / 1e9,
        "threads": sg[0]["threads"],
        "rounds": [{"square_gflops": x["square_gflops"], "model_shapes_gflops": x["model_shapes_gflops"]} for x in sg],
        "shapes_first_round": sg[0]["shapes"],
    },
    "atoll": atoll,
    "pytorch": {"best_setting": best_setting, "best": best, "settings": torch_rows},
    "ratio_atoll_vs_pytorch": ratio,
    "atoll_fraction_of_sgemm_peak": atoll["fraction_of_sgemm_peak"],
    "targets": targets,
    "markdown": markdown,
}
os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)
with open(results + ".tmp", "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
os.replace(results + ".tmp", results)
print(markdown)
EOF
log "wrote $RESULTS"

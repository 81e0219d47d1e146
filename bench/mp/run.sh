#!/bin/bash
# Model-parallel benchmark: every layout of 4 ranks (data, tensor, pipeline parallel
# and their products) on this machine, measured by `atoll train` and predicted by
# `atoll plan` for the same layout on the measured CPU entry.
#
# usage: bench/mp/run.sh [--quick] [--rounds N] [--steps N] [--work DIR] [--atoll BIN] [--fresh]
#   --quick    smoke version: 1 round of 5 steps; results go to WORK only,
#              bench/mp/results.* are left alone
#   --rounds   interleaved rounds (default 3): every row once per round, the step
#              time is the median over rounds of each run's own median
#   --steps    steps per run (default 8; atoll leaves the first 3 out of its median)
#   --work     where the corpus, the runs and a snapshot of build/atoll go
#              (default /tmp/atoll-mp, or /tmp/atoll-mp-quick)
#   --atoll    the binary to measure (copied into WORK). Default: atoll built in
#              WORK/src from the committed sources (git archive HEAD), so that
#              uncommitted edits and rebuilds of build/ by others do not mix in
#   --fresh    rerun every run (by default a run whose summary.json exists with the
#              same command line and the same atoll binary is kept)
#
# Every row has 4 ranks (mpirun -q --oversubscribe -np 4) with one thread each, so on
# a 2-core machine the measured step times are those of 4 processes sharing 2 cores.
# A failing run stops the script with its error; nothing is retried or worked around.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
QUICK=0 FRESH=0 WORK="" ROUNDS=3 STEPS=8 BIN=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1; ROUNDS=1; STEPS=5 ;;
    --fresh) FRESH=1 ;;
    --rounds) ROUNDS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --work) WORK=$2; shift ;;
    --atoll) BIN=$2; shift ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for v in "$ROUNDS" "$STEPS"; do
  case "$v" in *[!0-9]*|"") echo "run.sh: --rounds and --steps take integers" >&2; exit 2 ;; esac
done
[ "$ROUNDS" -ge 1 ] && [ "$STEPS" -ge 5 ] || { echo "run.sh: need --rounds >= 1 and --steps >= 5" >&2; exit 2; }
[ -n "$WORK" ] || { [ $QUICK = 1 ] && WORK=/tmp/atoll-mp-quick || WORK=/tmp/atoll-mp; }
mkdir -p "$WORK/rows"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun -q --oversubscribe -np 4"
PY=/usr/bin/python3
T_ALL=$(date +%s)

# --- binary (a copy in WORK, so that rebuilds by others during the run do not mix in) and corpus
if [ -z "$BIN" ]; then
  SRC_COMMIT=$(cd "$ROOT" && git rev-parse HEAD)
  if [ "$(cat "$WORK/src/COMMIT" 2>/dev/null)" != "$SRC_COMMIT" ] || [ ! -x "$WORK/src/build/atoll" ]; then
    echo "== building atoll from the committed sources ($SRC_COMMIT) in $WORK/src" >&2
    rm -rf "$WORK/src" && mkdir -p "$WORK/src"
    (cd "$ROOT" && git archive HEAD) | tar -x -C "$WORK/src"
    (cd "$WORK/src" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j2 --target atoll >/dev/null)
    echo "$SRC_COMMIT" > "$WORK/src/COMMIT"
  fi
  BIN="$WORK/src/build/atoll"
  BIN_SOURCE="git archive $SRC_COMMIT"
else
  BIN_SOURCE="$BIN"
  # a binary an earlier run built here: say which commit it came from
  [ -f "$(dirname "$BIN")/../COMMIT" ] && BIN_SOURCE="git archive $(cat "$(dirname "$BIN")/../COMMIT") ($BIN)"
fi
cp "$BIN" "$WORK/atoll.new" && mv "$WORK/atoll.new" "$WORK/atoll"
ATOLL="$WORK/atoll"
SHA=$(sha256sum "$ATOLL" | cut -c1-64)
DATA="$WORK/data"
[ -f "$DATA/manifest.json" ] || "$ATOLL" prepare --text /usr/share/games/fortunes --out "$DATA" >/dev/null

# --- models. Every row trains a global batch of 8 sequences of 256 tokens per step.
MAIN="--layers 6 --heads 6 --dim 384 --context 256 --seq 256 --vocab 256"
# --tp 4 needs heads divisible by 4: the same model with 8 heads (head dim 48)
MAIN8="--layers 6 --heads 8 --dim 384 --context 256 --seq 256 --vocab 256"
DEEP="--layers 12 --heads 4 --dim 256 --context 256 --seq 256 --vocab 256"
FLOOR="--layers 1 --heads 1 --dim 8 --context 256 --seq 256 --vocab 256"
COMMON="--threads 1 --steps $STEPS --warmup 1 --lr 1e-3 --seed 1337 --eval-every 0 --eval-batches 1 --save-every 0 --log-every 100 --data $DATA"

# name | model | flags (the layout; batch = sequences per micro-batch)
ROWS=(
  "dp4|$MAIN|--batch 2"
  "dp4_zero3|$MAIN|--batch 2 --shard 3"
  "pp4_1f1b|$MAIN|--pp 4 --batch 1 --microbatches 8 --schedule 1f1b"
  "pp4_gpipe|$MAIN|--pp 4 --batch 1 --microbatches 8 --schedule gpipe"
  "tp2_pp2|$MAIN|--tp 2 --pp 2 --batch 1 --microbatches 8 --schedule 1f1b"
  "tp2_pp2_sp|$MAIN|--tp 2 --sequence-parallel 1 --pp 2 --batch 1 --microbatches 8 --schedule 1f1b"
  "dp2_tp2|$MAIN|--tp 2 --batch 4"
  "dp2_pp2|$MAIN|--pp 2 --batch 1 --microbatches 4 --schedule 1f1b"
  "h8_dp4|$MAIN8|--batch 2"
  "h8_tp4|$MAIN8|--tp 4 --batch 8"
  "h8_tp4_sp|$MAIN8|--tp 4 --sequence-parallel 1 --batch 8"
  "deep_dp4|$DEEP|--batch 2"
  "deep_pp4_1f1b|$DEEP|--pp 4 --batch 1 --microbatches 8 --schedule 1f1b"
  "deep_pp4_v3|$DEEP|--pp 4 --virtual-stages 3 --batch 1 --microbatches 8 --schedule 1f1b"
  "deep_tp2_pp2|$DEEP|--tp 2 --pp 2 --batch 1 --microbatches 8 --schedule 1f1b"
  # the memory floor: a 2k-parameter model, data parallel (MPI, OpenBLAS, buffers)
  "floor|$FLOOR|--batch 2"
)

# --- this machine's CPU entry for the planner: atoll plan --measure at one thread
# (sgemm and elementwise rates), 3 times before the runs and 3 after; the report
# takes the medians.
measure_cpu() {
  for i in 1 2 3; do
    "$ATOLL" plan --arch gpt2 $MAIN --accel cpu --gpus 1 --dp 1 --tp 1 --pp 1 --cp 1 --batch 8 \
      --threads 1 --measure --json > "$WORK/cpu_$1_$i.json"
  done
}
echo "== measuring the CPU (atoll plan --measure --threads 1, 3 times)" >&2
measure_cpu before

{
  echo "{"
  echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo "  \"machine\": \"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\","
  echo "  \"cores\": $(nproc),"
  echo "  \"load_average_at_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "  \"git_commit\": \"$(cd "$ROOT" && git rev-parse HEAD 2>/dev/null || echo unknown)\","
  echo "  \"atoll_sha256\": \"$SHA\","
  echo "  \"atoll_binary\": \"$BIN_SOURCE\","
  echo "  \"quick\": $QUICK,"
  echo "  \"rounds\": $ROUNDS,"
  echo "  \"steps\": $STEPS,"
  echo "  \"ranks\": 4,"
  echo "  \"threads_per_rank\": 1,"
  echo "  \"mpirun\": \"$(mpirun --version 2>&1 | head -1)\","
  echo "  \"common_flags\": \"$COMMON\""
  echo "}"
} > "$WORK/meta.json"

# --- the rows, in interleaved rounds
: > "$WORK/rows.txt"
for row in "${ROWS[@]}"; do
  IFS='|' read -r name model flags <<<"$row"
  echo "$name" >> "$WORK/rows.txt"
done
for round in $(seq 1 "$ROUNDS"); do
  for row in "${ROWS[@]}"; do
    IFS='|' read -r name model flags <<<"$row"
    # the floor's memory is all it is run for: one round is enough
    [ "$name" = floor ] && [ "$round" -gt 1 ] && continue
    dir="$WORK/rows/$name/r$round"
    cmd="$ATOLL train $model $flags $COMMON --out $dir/run"
    if [ $FRESH = 0 ] && [ -f "$dir/run/summary.json" ] && [ "$(cat "$dir/cmd" 2>/dev/null)" = "$SHA $cmd" ]; then
      echo "== round $round $name: kept (summary.json exists)" >&2
      continue
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    echo "$SHA $cmd" > "$dir/cmd"
    cut -d' ' -f1 /proc/loadavg > "$dir/load"   # 1-minute load average as the run starts
    t0=$(date +%s.%N)
    $MPIRUN $cmd > "$dir/log" 2>&1 || { echo "run $name (round $round) failed:" >&2; tail -5 "$dir/log" >&2; exit 1; }
    t1=$(date +%s.%N)
    awk "BEGIN{printf \"%.1f\\n\", $t1 - $t0}" > "$dir/wall_s"
    echo "== round $round $name: $flags: $(sed -n 's/.*"median_step_seconds":[[:space:]]*\([0-9.]*\).*/\1/p' "$dir/run/summary.json" | cut -c1-6) s/step, $(cat "$dir/wall_s") s wall" >&2
  done
done

echo "== measuring the CPU again" >&2
measure_cpu after
echo "$(( $(date +%s) - T_ALL ))" > "$WORK/runtime_s"

# --- predictions (atoll plan for each row's layout) and the tables
if [ $QUICK = 1 ]; then
  "$PY" "$HERE/report.py" "$WORK" "$WORK"
else
  "$PY" "$HERE/report.py" "$WORK" "$HERE"
fi
echo "all: $(( $(date +%s) - T_ALL )) s" >&2

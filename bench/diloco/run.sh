#!/bin/bash
# The DiLoCo experiment of issue 15: does DiLoCo match data parallel (DP) when the
# islands are warm-started from a DP checkpoint, have reasonable batches and train on
# a corpus they do not repeat? Rows: the inner learning rate tuned on one island,
# DP with a K-times batch, one island at the same per-island compute, DiLoCo K = 4
# (H = 25, 100, 250; outer lr 0.4, 0.7, 1.0) from scratch and warm-started from DP's
# checkpoint at 20% of the run, K = 2, streaming with fp4, non-i.i.d. islands and
# more seeds. Rows run in priority order, so a partial run is already useful.
#
# usage: bench/diloco/run.sh [--quick] [--work DIR] [--fresh] [--until ROW] [--scale N] [--grid] [--reuse-bin] [--long N] [--round4] [--round5] [--round6]
#   --quick   smoke version: every run 12.5x shorter (H and the warm-start step scaled
#             with it); results go to WORK only, bench/diloco/results.* are left alone
#   --work    where the corpus, the runs and a snapshot of build/atoll go
#             (default /tmp/atoll-diloco15, or /tmp/atoll-diloco15-quick)
#   --fresh   rerun every row (by default a row whose summary.json exists with the
#             same command line, the same atoll binary and, for warm starts, the same
#             source checkpoint is kept, so an interrupted run can be continued)
#   --until   stop after this row (rows are in priority order)
#   --scale N the full spec, later: DP steps = 1000 x N; ATOLL_DILOCO_MODEL (model
#             flags) and ATOLL_DILOCO_BATCH (sequences per island step, default 8)
#             change the model and the island batch (see README.md, "The full spec")
#   --grid    after the rows above, the issue's whole grid: K = 2, 4, 8 x H = 25, 50,
#             100, 250 x outer lr 0.4, 0.7, 1.0, from scratch and warm (K = 2 and 8
#             warm from DP with K ranks, dp2 and dp8); GRID_K, GRID_H, GRID_O (lists)
#             narrow it. A grid row whose command equals a finished row's (up to its
#             folder) links to it instead of running again.
#   --reuse-bin run with the atoll snapshot already in WORK (the binary of the earlier
#             rows) instead of copying build/atoll, so that new rows compare with the
#             finished ones bit for bit and those are kept (issue 15, second round)
#   --long N  after the rows above, the third round (the gap over run length): dp4 and
#             the warm K = 4 rows at H = 100 and 25 at N x the steps (rows *_lenN)
#   --round4  with --long N: then the fourth round's knobs on the long warm rows (outer
#             lr 1.0, streaming fp4 at H = 100 and 150, fp4 at H = 25, a 40% split);
#             ROUND4_SEED2=1 adds DP, the 40% split and H = 25 fp4 on seed 2
#   --round5  with --long N: ONLY the fifth round's rows, with a second binary
#             WORK/atoll-v5 (a snapshot of build/atoll made once; WORK/atoll, the
#             earlier rows' binary, is left alone): a DP sanity row (dp4_lenN's first
#             100 steps) and the warm rows continued exactly (--init-step 1, DP's own
#             schedule and seed); rows.txt is appended to, meta.json kept
#   --round6  with --long N: ONLY the sixth round's rows (round6.sh), on WORK/atoll-v5
#             (made by --round5): streaming fp4 from the 40% split, outer lr 0.4, a 25%
#             split, fp4 at H = 150 without streaming; two rows at a time
#
# Every process runs under `nice -n 19` (the machine is shared; losses, not timings,
# are the result). Each rank has one thread (mpirun -q --oversubscribe). A failing row
# stops the script with its error; nothing is retried or worked around.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
QUICK=0 FRESH=0 WORK="" UNTIL="" SCALE=1 GRID=0 REUSE_BIN=0 LONG=1 ROUND4=0 ROUND5=0 ROUND6=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --fresh) FRESH=1 ;;
    --work) WORK=$2; shift ;;
    --until) UNTIL=$2; shift ;;
    --scale) SCALE=$2; shift ;;
    --grid) GRID=1 ;;
    --reuse-bin) REUSE_BIN=1 ;;
    --long) LONG=$2; shift ;;
    --round4) ROUND4=1 ;;
    --round5) ROUND5=1 REUSE_BIN=1 ;;
    --round6) ROUND6=1 REUSE_BIN=1 ;;
    -h|--help) sed -n 2,46p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $SCALE in ''|*[!0-9]*|0) echo "run.sh: --scale wants a positive integer, got '$SCALE'" >&2; exit 2 ;; esac
case $LONG in ''|*[!0-9]*|0) echo "run.sh: --long wants a positive integer, got '$LONG'" >&2; exit 2 ;; esac
[ -n "$WORK" ] || { [ $QUICK = 1 ] && WORK=/tmp/atoll-diloco15-quick || WORK=/tmp/atoll-diloco15; }
mkdir -p "$WORK/rows"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NICE="nice -n 19"
MPIRUN="mpirun -q --oversubscribe"
PY=/usr/bin/python3

# --- binary (a snapshot, so that rebuilds by others during the run do not mix in) and corpus
if [ $REUSE_BIN = 1 ]; then
  [ -x "$WORK/atoll" ] || { echo "run.sh: --reuse-bin: no atoll snapshot in $WORK" >&2; exit 2; }
else
  if [ ! -x "$ROOT/build/atoll" ]; then
    (cd "$ROOT" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && $NICE cmake --build build -j2 --target atoll)
  fi
  cp "$ROOT/build/atoll" "$WORK/atoll.new" && mv "$WORK/atoll.new" "$WORK/atoll"
fi
ATOLL="$WORK/atoll"
SHA=$(sha256sum "$ATOLL" | cut -c1-64)
# CORPUS=fortunes: the old 2.4M-token corpus instead of kernel-docs (25.4M tokens)
if [ "${CORPUS:-kernel-docs}" = fortunes ]; then
  DATA="$WORK/data"
  [ -f "$DATA/manifest.json" ] || $NICE "$ATOLL" prepare --text /usr/share/games/fortunes --out "$DATA"
else
  DATA="$WORK/data-kernel-docs"
  [ -f "$DATA/manifest.json" ] || $NICE bash "$ROOT/scripts/corpus.sh" "$DATA" "$ATOLL"
fi
# Non-i.i.d. islands. atoll's --island-data files deals the source files out round-robin
# (island k: files k, k+K, ...); over 4762 path-sorted files that gives every island
# the same mix of topics. DATA_Q holds the same token files, with a manifest whose
# "sources" are the 4 contiguous quarters (by bytes) of the path-sorted file list, so
# island k of 4 trains on the k-th quarter only (topic-split data). Only the island split
# reads "sources"; validation is DATA's own validation file.
DATA_Q="$DATA-quarters"
if [ ! -f "$DATA_Q/manifest.json" ]; then
  mkdir -p "$DATA_Q"
  for f in "$DATA"/*.bin; do ln -sf "$f" "$DATA_Q/"; done
  "$PY" "$HERE/quarters.py" "$DATA/manifest.json" "$DATA_Q/manifest.json" 4
fi

# --- settings. An island step is BATCH sequences of SEQ tokens; DP with 4 ranks has
# the 4x batch. The K = 4 rows take S steps (S x 4 x BATCH x SEQ tokens); the single
# island and the K = 2 rows take the same steps (1/4 and 1/2 of the tokens: the same
# per-island compute). Warm rows start from DP's checkpoint at step W = S / 5 and take
# the remaining S - W steps.
if [ $QUICK = 1 ]; then S=80 EVAL_BATCHES=4; else S=$((1000 * SCALE)) EVAL_BATCHES=24; fi
W=$((S / 5))
BATCH=${ATOLL_DILOCO_BATCH:-8}
MODEL=${ATOLL_DILOCO_MODEL:---layers 4 --heads 4 --dim 128 --context 128 --seq 128 --vocab 256}
BASE="$MODEL --batch $BATCH --weight-decay 0.1 --grad-clip 1 --threads 1 --data $DATA --eval-batches $EVAL_BATCHES --log-every 100"
WAN="--wan-gbps 1 --wan-latency-ms 50"
STREAM="--fragments 4 --overlap 1 --merge-alpha 0.5 --outer-dtype fp4"
LRS="1.5e-3 3e-3 6e-3"
# H as written at --scale 1 and at any --scale (the period is a property of the method);
# only --quick shortens it with the run (at least 1)
h() { local x=$(($1 * S / (1000 * SCALE))); [ $x -ge 1 ] && echo $x || echo 1; }
# a fresh row of N steps: warm-up 5% of the steps, cosine to 0.1 x lr, 20 evaluations
steps() { echo "--steps $1 --warmup $(($1 / 20)) --min-lr-ratio 0.1 --eval-every $(($1 / 20 > 0 ? $1 / 20 : 1))"; }

# --- one row: name | ranks | flags | reference row [| source checkpoint of a warm start]
ROWS_DONE=""
run_row() {
  local name=$1 np=$2 flags=$3 ref=$4 src=${5:-}
  local dir="$WORK/rows/$name" srcsha=""
  echo "$name $ref" >> "$WORK/rows.txt"
  if [ -n "$src" ]; then
    [ -f "$src/model.safetensors" ] || { echo "row $name: warm-start checkpoint $src missing" >&2; exit 1; }
    srcsha=$(sha256sum "$src/model.safetensors" | cut -c1-16)
  fi
  local cmd="$ATOLL train $flags --out $dir/run"
  local key="$SHA $np $cmd"
  [ -z "$srcsha" ] || key="$key src=$srcsha"
  if [ $FRESH = 0 ] && [ ! -e "$dir" ]; then # the same run under another name: link it
    local f d
    for f in "$WORK"/rows/*/cmd; do
      d=$(dirname "$f")
      [ -L "$d" ] || [ ! -f "$d/wall_s" ] && continue
      if [ "$(sed "s|$d/run|@ROW@|g" "$f")" = "${key//$dir\/run/@ROW@}" ]; then
        ln -sfn "$(basename "$d")" "$dir"; echo "== $name: the same run as $(basename "$d") (linked)"; break
      fi
    done
  fi
  if [ -L "$dir" ]; then
    :
  elif [ $FRESH = 0 ] && [ -f "$dir/wall_s" ] && [ "$(cat "$dir/cmd" 2>/dev/null)" = "$key" ]; then
    # wall_s is written only when the row's command succeeded (a stopped atoll also
    # writes summary.json, at the step where it stopped)
    echo "== $name: kept (finished before)"
  else
    rm -rf "$dir" && mkdir -p "$dir"
    echo "$key" > "$dir/cmd"
    echo "== $name: $np rank(s) [$(date -u +%H:%M:%S)]: $flags"
    local t0 t1
    t0=$(date +%s.%N)
    if [ "$np" = 1 ]; then
      $NICE $cmd > "$dir/log" 2>&1 || { echo "row $name failed:"; tail -5 "$dir/log"; exit 1; }
    else
      $NICE $MPIRUN -np "$np" $cmd > "$dir/log" 2>&1 || { echo "row $name failed:"; tail -5 "$dir/log"; exit 1; }
    fi
    t1=$(date +%s.%N)
    awk "BEGIN{printf \"%.1f\\n\", $t1 - $t0}" > "$dir/wall_s"
    echo "   $(grep -o 'val_loss [0-9.]*' "$dir/log" | tail -1), $(cat "$dir/wall_s") s"
  fi
  if [ -n "$UNTIL" ] && [ "$name" = "$UNTIL" ]; then echo "stopping after $name (--until)"; report; exit 0; fi
}
final_loss() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["final_val_loss"])' "$1/run/summary.json"; }

# --- where and with what (--round5 and --round6 keep the earlier rounds' meta.json)
[ $ROUND5 = 1 ] || [ $ROUND6 = 1 ] || {
  echo "{"
  echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo "  \"machine\": \"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\","
  echo "  \"cores\": $(nproc),"
  echo "  \"load_average_at_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "  \"git_commit\": \"$(cd "$ROOT" && git rev-parse HEAD 2>/dev/null || echo unknown)\","
  echo "  \"atoll_sha256\": \"$SHA\","
  # 1: the binary is WORK's earlier snapshot (--reuse-bin), not built from git_commit
  echo "  \"binary_reused\": $REUSE_BIN,"
  echo "  \"quick\": $QUICK,"
  echo "  \"scale\": $SCALE,"
  echo "  \"mpirun\": \"$(mpirun --version 2>&1 | head -1)\","
  echo "  \"corpus\": \"$DATA\","
  echo "  \"common_flags\": \"$BASE\""
  echo "}"
} > "$WORK/meta.json"
report() {
  if [ $QUICK = 1 ]; then "$PY" "$HERE/report.py" "$WORK" "$WORK"; else "$PY" "$HERE/report.py" "$WORK" "$HERE"; fi
}

# A later round's start (round5.sh, round6.sh; $1 its number, $2 its rows): the load once
# a minute into loadavg_round$1.log, its rows taken out of rows.txt (which keeps the earlier
# rounds'; each row's line is written again when it ends), and meta_round$1.json.
round_start() {
  ( while sleep 60; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/loadavg_round$1.log"; done ) &
  ROUND_LOADLOG=$!
  trap 'kill $ROUND_LOADLOG 2>/dev/null || true' EXIT
  touch "$WORK/rows.txt"
  for n in $2; do sed -i "/^$n /d" "$WORK/rows.txt"; done
  echo "{\"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"atoll_v5_sha256\": \"$SHA\", \"load_average_at_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"git_commit\": \"$(cd "$ROOT" && git rev-parse HEAD 2>/dev/null || echo unknown)\"}" > "$WORK/meta_round$1.json"
}

[ $ROUND5 = 1 ] && [ $LONG = 1 ] && { echo "run.sh: --round5 wants --long N (its rows continue dp4_lenN)" >&2; exit 2; }
[ $ROUND5 = 1 ] && . "$HERE/round5.sh" # runs the fifth round's rows, the report, and exits
[ $ROUND6 = 1 ] && [ $LONG = 1 ] && { echo "run.sh: --round6 wants --long N (its rows continue dp4_lenN)" >&2; exit 2; }
[ $ROUND6 = 1 ] && . "$HERE/round6.sh" # the sixth round's rows, the report, and exits
T_ALL=$(date +%s)
# the machine's load, once a minute (the README reports it; stopped when run.sh exits)
( while sleep 60; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/loadavg.log"; done ) &
LOADLOG=$!
trap 'kill $LOADLOG 2>/dev/null || true' EXIT
: > "$WORK/rows.txt"
SEED=1337

# 1. The inner learning rate, tuned on the single island (the full row, S steps of one
# island) over a factor-2 grid; the best is kept for every row and is the "single" row.
# The three one-rank rows run at the same time (two cores).
pids=()
for lr in $LRS; do
  run_row "tune_lr$lr" 1 "$BASE $(steps $S) --lr $lr --seed $SEED --save-every 0" "dp4" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
BEST_LR="" BEST=""
for lr in $LRS; do
  l=$(final_loss "$WORK/rows/tune_lr$lr")
  if [ -z "$BEST" ] || awk "BEGIN{exit !($l < $BEST)}"; then BEST=$l BEST_LR=$lr; fi
done
echo "inner lr: $BEST_LR (single-island final validation loss $BEST)"
echo "$BEST_LR" > "$WORK/inner_lr"
ln -sfn "tune_lr$BEST_LR" "$WORK/rows/single"
echo "single dp4" >> "$WORK/rows.txt"
LR=$BEST_LR

# The warm rows' schedule. atoll starts a warm run's schedule at step 0, so the DP
# schedule cannot be continued exactly; a warm row of S - W steps has no warm-up, starts
# at DP's learning rate at step W and decays by a cosine to DP's final 0.1 x lr.
LR_W=$(awk -v lr=$LR -v s=$S -v w=$W -v wu=$((S / 20)) 'BEGIN{p=(w-wu)/(s-wu); pi=atan2(0,-1);
  printf "%.6g", lr*(0.1+0.45*(1+cos(pi*p)))}')
MIN_W=$(awk -v lr=$LR -v lw=$LR_W 'BEGIN{printf "%.6g", 0.1*lr/lw}')
warm() { # flags of a warm row from checkpoint $1
  echo "--steps $((S - W)) --warmup 0 --lr $LR_W --min-lr-ratio $MIN_W --eval-every $(((S - W) / 16 > 0 ? (S - W) / 16 : 1)) --init-from $1 --init-optim 1"
}
ck() { printf '%s/rows/%s/run/checkpoints/step_%08d' "$WORK" "$1" "$W"; }
# a later warm start, from DP's checkpoint at step $2 (a multiple of W), schedule continued as above
warm_at() {
  local lw mn
  lw=$(awk -v lr=$LR -v s=$S -v w=$2 -v wu=$((S / 20)) 'BEGIN{p=(w-wu)/(s-wu); pi=atan2(0,-1); printf "%.6g", lr*(0.1+0.45*(1+cos(pi*p)))}')
  mn=$(awk -v lr=$LR -v lw=$lw 'BEGIN{printf "%.6g", 0.1*lr/lw}')
  echo "--steps $((S - $2)) --warmup 0 --lr $lw --min-lr-ratio $mn --eval-every $((S / 20)) --init-from $1 --init-optim 1"
}
OUTER() { echo "--outer-optimizer nesterov --outer-lr $1 --outer-momentum 0.9"; }
# DP with 4 ranks, keeping its checkpoint at step W (the warm start of the DiLoCo rows)
dp() { run_row "$1" "${3:-4}" "$BASE $(steps $S) --lr $LR --seed $2 --save-every $W --keep 6" "$1"; }
# warm rows use another seed than their source (seed + 100): a warm run restarts at
# step 0, and the same seed would draw the DP run's first windows again
DIL="--save-every 0 $WAN"

# 2. rows in priority order
dp dp4 $SEED
run_row k4_h100 4 "$BASE $(steps $S) --lr $LR --seed $SEED $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7)" dp4
run_row k4_h100_warm 4 "$BASE $(warm "$(ck dp4)") --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7)" dp4 "$(ck dp4)"
for H in 25 250; do
  run_row k4_h${H}_warm 4 "$BASE $(warm "$(ck dp4)") --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h $H) $(OUTER 0.7)" dp4 "$(ck dp4)"
done
for O in 0.4 1.0; do
  run_row k4_h100_warm_olr$O 4 "$BASE $(warm "$(ck dp4)") --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER $O)" dp4 "$(ck dp4)"
done
run_row k2_h100_warm 2 "$BASE $(warm "$(ck dp4)") --seed $((SEED + 100)) $DIL --islands 2 --sync-every $(h 100) $(OUTER 0.7)" dp4 "$(ck dp4)"
run_row k4_h100_warm_stream_fp4 4 "$BASE $(warm "$(ck dp4)") --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7) $STREAM" dp4 "$(ck dp4)"
run_row k4_h100_warm_noniid 4 "$(echo "$BASE" | sed "s|--data $DATA|--data $DATA_Q|") $(warm "$(ck dp4)") --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7) --island-data files" dp4 "$(ck dp4)"
for s in 2 3; do
  dp dp4_seed$s $s
  run_row k4_h100_warm_seed$s 4 "$BASE $(warm "$(ck dp4_seed$s)") --seed $((s + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7)" dp4_seed$s "$(ck dp4_seed$s)"
done
# 3. extensions, in this order if time allows: the schedule restart alone (DP continued
# from its own checkpoint with the warm rows' schedule); H = 10; outer lr 1.4 (the grid's
# best, 1.0, is at its edge); the H ordering at outer lr 1.0 too (named as --grid names
# them); a later warm start (40%); streaming fp4 at H = 250 (the only setting in reach of
# 1000x fewer bytes); the round-robin file split of atoll's --island-data files
WARM="$(warm "$(ck dp4)") --seed $((SEED + 100))"
run_row dp4_warm 4 "$BASE $WARM --save-every 0" dp4 "$(ck dp4)"
run_row k4_h10_warm 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h 10) $(OUTER 0.7)" dp4 "$(ck dp4)"
run_row k4_h100_warm_olr1.4 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h 100) $(OUTER 1.4)" dp4 "$(ck dp4)"
for H in 25 250; do
  run_row k4_h${H}_warm_olr1.0 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h $H) $(OUTER 1.0)" dp4 "$(ck dp4)"
done
CK40=$(printf '%s/rows/dp4/run/checkpoints/step_%08d' "$WORK" $((2 * W)))
run_row k4_h100_warm40 4 "$BASE $(warm_at "$CK40" $((2 * W))) --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7)" dp4 "$CK40"
run_row k4_h250_warm_stream_fp4 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h 250) $(OUTER 0.7) $STREAM" dp4 "$(ck dp4)"
run_row k4_h100_warm_rrfiles 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7) --island-data files" dp4 "$(ck dp4)"
# 4. second round (issue 15, item 2 and the critical-batch question).
# (a) The outer lr at H = 50, between H = 25 (best 0.7) and H = 100 (best 1.0); then 0.85 at H = 100.
run_row k4_h50_warm 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h 50) $(OUTER 0.7)" dp4 "$(ck dp4)"
run_row k4_h50_warm_olr1.0 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h 50) $(OUTER 1.0)" dp4 "$(ck dp4)"
# (b) The island batch at the same tokens: 4x the sequences per step (4096 tokens at
# --scale 1), 1/4 of the steps. dp4_b4k is DP with the 4x batch of such islands
# (16384 tokens per step), S4 = S / 4 steps, checkpoint at W4 = S4 / 5; the warm rows
# take its remaining S4 - W4 steps with the schedule continued as above. H = 25 keeps
# the tokens per island between syncs, the syncs and the bytes of the b1k rows at H = 100.
B4=$((4 * BATCH)) S4=$((S / 4)); W4=$((S4 / 5))
BASE4=${BASE/--batch $BATCH /--batch $B4 }
run_row dp4_b4k 4 "$BASE4 $(steps $S4) --lr $LR --seed $SEED --save-every $W4 --keep 6" dp4_b4k
CK4=$(printf '%s/rows/dp4_b4k/run/checkpoints/step_%08d' "$WORK" $W4)
warm4() { # a warm row of the b4k series from dp4_b4k's checkpoint at W4 (or $2's, peak lr $1)
  local lw mn lr=${1:-$LR} ck=${2:-$CK4}
  lw=$(awk -v lr=$lr -v s=$S4 -v w=$W4 -v wu=$((S4 / 20)) 'BEGIN{p=(w-wu)/(s-wu); pi=atan2(0,-1); printf "%.6g", lr*(0.1+0.45*(1+cos(pi*p)))}')
  mn=$(awk -v lr=$lr -v lw=$lw 'BEGIN{printf "%.6g", 0.1*lr/lw}')
  echo "--steps $((S4 - W4)) --warmup 0 --lr $lw --min-lr-ratio $mn --eval-every $(((S4 - W4) / 16 > 0 ? (S4 - W4) / 16 : 1)) --init-from $ck --init-optim 1"
}
run_row k4_h25_warm_b4k 4 "$BASE4 $(warm4) --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 25) $(OUTER 0.7)" dp4_b4k "$CK4"
run_row k4_h100_warm_olr0.85 4 "$BASE $WARM $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.85)" dp4 "$(ck dp4)"
# (c) if time allows: the b4k island at H = 50 (4 syncs); the outer-lr order at H = 25
# and 100 on a second seed
run_row k4_h50_warm_b4k 4 "$BASE4 $(warm4) --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 50) $(OUTER 0.7)" dp4_b4k "$CK4"
WARM2="$(warm "$(ck dp4_seed2)") --seed 102"
run_row k4_h100_warm_olr1.0_seed2 4 "$BASE $WARM2 $DIL --islands 4 --sync-every $(h 100) $(OUTER 1.0)" dp4_seed2 "$(ck dp4_seed2)"
run_row k4_h25_warm_seed2 4 "$BASE $WARM2 $DIL --islands 4 --sync-every $(h 25) $(OUTER 0.7)" dp4_seed2 "$(ck dp4_seed2)"
run_row k4_h25_warm_olr1.0_seed2 4 "$BASE $WARM2 $DIL --islands 4 --sync-every $(h 25) $(OUTER 1.0)" dp4_seed2 "$(ck dp4_seed2)"
# (d) the H = 50 pair on seed 2 (where the default outer lr switches); then the batch
# premise without islands: one rank with the tokens of `single` in 4096-token steps, and
# with the tokens of dp4 in 1024-token steps (4x the steps); the two run at the same time
run_row k4_h50_warm_seed2 4 "$BASE $WARM2 $DIL --islands 4 --sync-every $(h 50) $(OUTER 0.7)" dp4_seed2 "$(ck dp4_seed2)"
run_row k4_h50_warm_olr1.0_seed2 4 "$BASE $WARM2 $DIL --islands 4 --sync-every $(h 50) $(OUTER 1.0)" dp4_seed2 "$(ck dp4_seed2)"
pids=()
run_row single_b4k 1 "$BASE4 $(steps $S4) --lr $LR --seed $SEED --save-every 0" single & pids+=($!)
run_row single_x4 1 "$BASE $(steps $((4 * S))) --lr $LR --seed $SEED --save-every 0" dp4 & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || exit 1; done
# (e) is the b4k series held back by an inner lr tuned for 1024-token steps? The single
# 4096-token island at 2x the lr (and DP at the same time), then the warm K = 4 row at it
LR2=$(awk -v lr=$LR 'BEGIN{printf "%g", 2 * lr}')
pids=()
run_row single_b4k_lr$LR2 1 "$BASE4 $(steps $S4) --lr $LR2 --seed $SEED --save-every 0" single & pids+=($!)
run_row dp4_b4k_lr$LR2 4 "$BASE4 $(steps $S4) --lr $LR2 --seed $SEED --save-every $W4 --keep 6" dp4_b4k_lr$LR2 & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || exit 1; done
CK4L=$(printf '%s/rows/dp4_b4k_lr%s/run/checkpoints/step_%08d' "$WORK" "$LR2" $W4)
run_row k4_h25_warm_b4k_lr$LR2 4 "$BASE4 $(warm4 "$LR2" "$CK4L") --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 25) $(OUTER 0.7)" dp4_b4k_lr$LR2 "$CK4L"
# 5. third round (issue 15, "the compute-equal gap over run length"): dp4 and the warm
# K = 4 rows at H = 100 and 25 (outer lr 0.7, as the short rows) at LONG x the steps,
# with the same model, batch, inner lr and schedule shape, warm-started at the same
# fraction (20%) with the schedule continued as above, evaluated every S / 20 steps like
# the short rows (so the curves line up with theirs step for step)
if [ $LONG -gt 1 ]; then
  SL=$((LONG * S)) WL=$((LONG * S / 5)) EV=$((S / 20 > 0 ? S / 20 : 1))
  run_row dp4_len$LONG 4 "$BASE --steps $SL --warmup $((SL / 20)) --min-lr-ratio 0.1 --eval-every $EV --lr $LR --seed $SEED --save-every $WL --keep 6" dp4_len$LONG
  CKL=$(printf '%s/rows/dp4_len%s/run/checkpoints/step_%08d' "$WORK" "$LONG" "$WL")
  LWL=$(awk -v lr=$LR -v s=$SL -v w=$WL -v wu=$((SL / 20)) 'BEGIN{p=(w-wu)/(s-wu); pi=atan2(0,-1); printf "%.6g", lr*(0.1+0.45*(1+cos(pi*p)))}')
  MNL=$(awk -v lr=$LR -v lw=$LWL 'BEGIN{printf "%.6g", 0.1*lr/lw}')
  WARML="--steps $((SL - WL)) --warmup 0 --lr $LWL --min-lr-ratio $MNL --eval-every $EV --init-from $CKL --init-optim 1 --seed $((SEED + 100))"
  for H in 100 25; do
    run_row k4_h${H}_warm_len$LONG 4 "$BASE $WARML $DIL --islands 4 --sync-every $(h $H) $(OUTER 0.7)" dp4_len$LONG "$CKL"
  done
  # The control: the long H = 100 row split from DP at the short rows' absolute step W
  # (the same tokens and DP loss at the split as they had), not at 20% of the long run.
  # dp4_lenN saved only every WL steps, so its first W steps run again (bit for bit: the
  # same command up to --save-every and --stop-after) and stop there with a checkpoint.
  run_row dp4_len${LONG}_to$W 4 "$BASE --steps $SL --warmup $((SL / 20)) --min-lr-ratio 0.1 --eval-every $EV --lr $LR --seed $SEED --save-every $W --stop-after $W" dp4_len${LONG}_to$W
  CKA=$(printf '%s/rows/dp4_len%s_to%s/run/checkpoints/step_%08d' "$WORK" "$LONG" "$W" "$W")
  LWA=$(awk -v lr=$LR -v s=$SL -v w=$W -v wu=$((SL / 20)) 'BEGIN{p=(w-wu)/(s-wu); pi=atan2(0,-1); printf "%.6g", lr*(0.1+0.45*(1+cos(pi*p)))}')
  MNA=$(awk -v lr=$LR -v lw=$LWA 'BEGIN{printf "%.6g", 0.1*lr/lw}')
  run_row k4_h100_warm_at${W}_len$LONG 4 "$BASE --steps $((SL - W)) --warmup 0 --lr $LWA --min-lr-ratio $MNA --eval-every $EV --init-from $CKA --init-optim 1 --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7)" dp4_len$LONG "$CKA"
  # 6. fourth round (--round4): which knob brings the long warm rows to the targets.
  # (1) H = 100 at outer lr 1.0; (2) the short streaming row's flags (outer lr 0.7);
  # (3) H = 25 with fp4 outer gradients, no streaming; (4) streaming fp4 at H = 150
  # (~1100x fewer counted bytes) at the better outer lr of (1) and k4_h100_warm_len3;
  # (5) H = 100 split at 40% (step 2 x WL), that outer lr, the schedule continued
  if [ $ROUND4 = 1 ]; then
    run_row k4_h100_warm_len${LONG}_olr1.0 4 "$BASE $WARML $DIL --islands 4 --sync-every $(h 100) $(OUTER 1.0)" dp4_len$LONG "$CKL"
    run_row k4_h100_warm_len${LONG}_stream_fp4 4 "$BASE $WARML $DIL --islands 4 --sync-every $(h 100) $(OUTER 0.7) $STREAM" dp4_len$LONG "$CKL"
    run_row k4_h25_warm_len${LONG}_fp4 4 "$BASE $WARML $DIL --islands 4 --sync-every $(h 25) $(OUTER 0.7) --outer-dtype fp4" dp4_len$LONG "$CKL"
    OB=0.7 OS=""
    if awk "BEGIN{exit !($(final_loss "$WORK/rows/k4_h100_warm_len${LONG}_olr1.0") < $(final_loss "$WORK/rows/k4_h100_warm_len$LONG"))}"; then OB=1.0 OS=_olr1.0; fi
    run_row k4_h150_warm_len${LONG}_stream_fp4$OS 4 "$BASE $WARML $DIL --islands 4 --sync-every $(h 150) $(OUTER $OB) $STREAM" dp4_len$LONG "$CKL"
    CK40L=$(printf '%s/rows/dp4_len%s/run/checkpoints/step_%08d' "$WORK" "$LONG" $((2 * WL)))
    LW40=$(awk -v lr=$LR -v s=$SL -v w=$((2 * WL)) -v wu=$((SL / 20)) 'BEGIN{p=(w-wu)/(s-wu); pi=atan2(0,-1); printf "%.6g", lr*(0.1+0.45*(1+cos(pi*p)))}')
    MN40=$(awk -v lr=$LR -v lw=$LW40 'BEGIN{printf "%.6g", 0.1*lr/lw}')
    run_row k4_h100_warm40_len$LONG$OS 4 "$BASE --steps $((SL - 2 * WL)) --warmup 0 --lr $LW40 --min-lr-ratio $MN40 --eval-every $EV --init-from $CK40L --init-optim 1 --seed $((SEED + 100)) $DIL --islands 4 --sync-every $(h 100) $(OUTER $OB)" dp4_len$LONG "$CK40L"
    # (6) ROUND4_SEED2=1: the rows that met a target on a second seed, warm from a long DP
    # run of seed 2 (the longest row): the 40% split first (its margin to 2% is near the
    # seed noise), then H = 25 with fp4
    if [ "${ROUND4_SEED2:-0}" = 1 ]; then
      run_row dp4_len${LONG}_seed2 4 "$BASE --steps $SL --warmup $((SL / 20)) --min-lr-ratio 0.1 --eval-every $EV --lr $LR --seed 2 --save-every $WL --keep 6" dp4_len${LONG}_seed2
      CKL2=$(printf '%s/rows/dp4_len%s_seed2/run/checkpoints/step_%08d' "$WORK" "$LONG" "$WL")
      WARML2=$(echo "$WARML" | sed "s|--init-from $CKL|--init-from $CKL2|; s|--seed $((SEED + 100))|--seed 102|")
      CK40L2=$(printf '%s/rows/dp4_len%s_seed2/run/checkpoints/step_%08d' "$WORK" "$LONG" $((2 * WL)))
      run_row k4_h100_warm40_len$LONG${OS}_seed2 4 "$BASE --steps $((SL - 2 * WL)) --warmup 0 --lr $LW40 --min-lr-ratio $MN40 --eval-every $EV --init-from $CK40L2 --init-optim 1 --seed 102 $DIL --islands 4 --sync-every $(h 100) $(OUTER $OB)" dp4_len${LONG}_seed2 "$CK40L2"
      run_row k4_h25_warm_len${LONG}_fp4_seed2 4 "$BASE $WARML2 $DIL --islands 4 --sync-every $(h 25) $(OUTER 0.7) --outer-dtype fp4" dp4_len${LONG}_seed2 "$CKL2"
    fi
  fi
fi
# 7. --grid: the issue's full grid (days at the full spec on 2 cores; README.md)
if [ $GRID = 1 ]; then
  for K in ${GRID_K:-2 4 8}; do
    [ $K = 4 ] || dp dp$K $SEED $K # DP with K ranks: K = 2 and 8 rows are compared with it and warm-start from it
    sfx=""; [ $K = 4 ] || sfx="_fromdp$K"
    for H in ${GRID_H:-25 50 100 250}; do
      for O in ${GRID_O:-0.4 0.7 1.0}; do
        o=""; [ $O = 0.7 ] || o="_olr$O"
        run_row k${K}_h$H$o $K "$BASE $(steps $S) --lr $LR --seed $SEED $DIL --islands $K --sync-every $(h $H) $(OUTER $O)" dp$K
        run_row k${K}_h${H}_warm$o$sfx $K "$BASE $(warm "$(ck dp$K)") --seed $((SEED + 100)) $DIL --islands $K --sync-every $(h $H) $(OUTER $O)" dp$K "$(ck dp$K)"
      done
    done
  done
fi
echo "all rows: $(( $(date +%s) - T_ALL )) s"

# --- results.json, results.md, diloco.png
report

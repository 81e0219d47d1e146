#!/bin/bash
# The DiLoCo experiment of issue 4: one island, data parallel with a K-times batch,
# DiLoCo with K = 2 and 4 islands and H in {10, 50, 100, 500}, streaming DiLoCo
# with fp4 outer gradients, i.i.d. and non-i.i.d. island data, all at equal total
# compute (the same number of training tokens in every row).
#
# usage: bench/diloco/run.sh [--quick] [--work DIR] [--fresh]
#   --quick   smoke version: every run 12.5x shorter (H scaled with it); results go
#             to WORK only, bench/diloco/results.* are left alone
#   --work    where the corpus, the runs and a snapshot of build/atoll go
#             (default /tmp/atoll-diloco, or /tmp/atoll-diloco-quick)
#   --fresh   rerun every row (by default a row whose summary.json exists with the
#             same command line and the same atoll binary is kept, so an
#             interrupted run can be continued)
#
# Rows run one after another, each rank with one thread (mpirun -q --oversubscribe:
# the reference machine has 2 cores). A failing row stops the script with its
# error; nothing is retried or worked around.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
QUICK=0 FRESH=0 WORK=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --fresh) FRESH=1 ;;
    --work) WORK=$2; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$WORK" ] || { [ $QUICK = 1 ] && WORK=/tmp/atoll-diloco-quick || WORK=/tmp/atoll-diloco; }
mkdir -p "$WORK/rows"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun -q --oversubscribe"
PY=/usr/bin/python3

# --- binary (a snapshot, so that rebuilds by others during the run do not mix in) and corpus
if [ ! -x "$ROOT/build/atoll" ]; then
  (cd "$ROOT" && cmake -S . -B build >/dev/null && cmake --build build -j2 --target atoll)
fi
cp "$ROOT/build/atoll" "$WORK/atoll.new" && mv "$WORK/atoll.new" "$WORK/atoll"
ATOLL="$WORK/atoll"
SHA=$(sha256sum "$ATOLL" | cut -c1-64)
DATA="$WORK/data"
# CORPUS=kernel-docs: the larger corpus of scripts/corpus.sh (25.4M tokens) instead of fortunes
if [ "${CORPUS:-fortunes}" = kernel-docs ]; then DATA="$WORK/data-kernel-docs"; fi
[ -f "$DATA/manifest.json" ] || if [ "${CORPUS:-fortunes}" = kernel-docs ]; then bash "$ROOT/scripts/corpus.sh" "$DATA" "$ATOLL"; else "$ATOLL" prepare --text /usr/share/games/fortunes --out "$DATA"; fi

# --- settings. Total tokens per row = K x steps x batch x seq, the same in every row.
if [ $QUICK = 1 ]; then S4=40 EVAL_BATCHES=8; else S4=500 EVAL_BATCHES=48; fi
S2=$((S4 * 2)) S1=$((S4 * 4))
BATCH=4
MODEL="--layers 4 --heads 4 --dim 128 --context 64 --seq 64 --vocab 256"
COMMON="$MODEL --batch $BATCH --lr 3e-3 --min-lr-ratio 0.1 --weight-decay 0.1 --grad-clip 1 --seed 1337 --threads 1 --data $DATA --eval-batches $EVAL_BATCHES --save-every 0 --log-every 100"
WAN="--wan-gbps 1 --wan-latency-ms 50"
OUTER="--outer-optimizer nesterov --outer-lr 0.7 --outer-momentum 0.9"
# H of the full run, scaled to the quick run's length (at least 1)
h() { local x=$(($1 * S4 / 500)); [ $x -ge 1 ] && echo $x || echo 1; }
# steps flags for a run of S steps: warm-up 5% of the steps, 10 evaluations
steps() { echo "--steps $1 --warmup $(($1 / 20)) --eval-every $(($1 / 10))"; }

# name | ranks | flags [| the data-parallel row it is compared with; default dp<K>]
ROWS=(
  "single|1|$(steps $S1)"
  "dp2|2|$(steps $S2)"
  "dp4|4|$(steps $S4)"
)
for H in 10 50 100 500; do ROWS+=("k2_h$H|2|$(steps $S2) --islands 2 --sync-every $(h $H) $OUTER $WAN"); done
for H in 10 50 100 500; do ROWS+=("k4_h$H|4|$(steps $S4) --islands 4 --sync-every $(h $H) $OUTER $WAN"); done
STREAM="--fragments 4 --overlap 1 --merge-alpha 0.5 --outer-dtype fp4"
ROWS+=(
  "k4_h100_fp4|4|$(steps $S4) --islands 4 --sync-every $(h 100) $OUTER $WAN --outer-dtype fp4"
  "k4_h100_stream_fp4|4|$(steps $S4) --islands 4 --sync-every $(h 100) $OUTER $WAN $STREAM"
  "k2_h100_stream_fp4|2|$(steps $S2) --islands 2 --sync-every $(h 100) $OUTER $WAN $STREAM"
  "k4_h100_noniid|4|$(steps $S4) --islands 4 --sync-every $(h 100) $OUTER $WAN --island-data files"
  "k4_h100_stream_fp4_noniid|4|$(steps $S4) --islands 4 --sync-every $(h 100) $OUTER $WAN $STREAM --island-data files"
  # streaming at a longer period: the only way in reach of 1000x fewer total bytes
  # (fragments cut the peak, not the total; fp4 alone is 6.4x)
  "k4_h250_stream_fp4|4|$(steps $S4) --islands 4 --sync-every $(h 250) $OUTER $WAN $STREAM"
  # a second seed (weights and data order) for the two rows of the main target: how
  # much of a gap is run-to-run noise
  "dp4_seed2|4|$(steps $S4) --seed 2"
  "k4_h100_seed2|4|$(steps $S4) --islands 4 --sync-every $(h 100) $OUTER $WAN --seed 2|dp4_seed2"
  # supplementary rows, to see why DiLoCo falls short here (not all at equal compute:
  # see the labels in report.py)
  "sup_single_quarter|1|$(steps $S4)|dp4"
  "sup_k4_h1_avg|4|$(steps $S4) --islands 4 --sync-every 1 --outer-optimizer sgd --outer-lr 1 --outer-momentum 0 $WAN|dp4"
  "sup_k4_h100_avg|4|$(steps $S4) --islands 4 --sync-every $(h 100) --outer-optimizer sgd --outer-lr 1 --outer-momentum 0 $WAN|dp4"
  "sup_dp4_lr1e-3|4|$(steps $S4) --lr 1e-3"
  "sup_k4_h100_lr1e-3|4|$(steps $S4) --islands 4 --sync-every $(h 100) $OUTER $WAN --lr 1e-3|sup_dp4_lr1e-3"
  "sup_dp4_long|4|$(steps $((S4 * 2)))"
  "sup_k4_h100_long|4|$(steps $((S4 * 2))) --islands 4 --sync-every $(h 100) $OUTER $WAN|sup_dp4_long"
)

# --- where and with what
{
  echo "{"
  echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo "  \"machine\": \"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\","
  echo "  \"cores\": $(nproc),"
  echo "  \"git_commit\": \"$(cd "$ROOT" && git rev-parse HEAD 2>/dev/null || echo unknown)\","
  echo "  \"atoll_sha256\": \"$SHA\","
  echo "  \"quick\": $QUICK,"
  echo "  \"mpirun\": \"$(mpirun --version 2>&1 | head -1)\","
  echo "  \"common_flags\": \"$COMMON\""
  echo "}"
} > "$WORK/meta.json"

# --- the rows, one after another
T_ALL=$(date +%s)
: > "$WORK/rows.txt"
for row in "${ROWS[@]}"; do
  IFS='|' read -r name np flags ref <<<"$row"
  dir="$WORK/rows/$name"
  echo "$name $ref" >> "$WORK/rows.txt"
  cmd="$ATOLL train $COMMON $flags --out $dir/run"
  if [ $FRESH = 0 ] && [ -f "$dir/run/summary.json" ] && [ "$(cat "$dir/cmd" 2>/dev/null)" = "$SHA $np $cmd" ]; then
    echo "== $name: kept (summary.json exists)"
    continue
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  echo "$SHA $np $cmd" > "$dir/cmd"
  echo "== $name: $np rank(s): $flags"
  t0=$(date +%s.%N)
  if [ "$np" = 1 ]; then
    $cmd > "$dir/log" 2>&1 || { echo "row $name failed:"; tail -5 "$dir/log"; exit 1; }
  else
    $MPIRUN -np "$np" $cmd > "$dir/log" 2>&1 || { echo "row $name failed:"; tail -5 "$dir/log"; exit 1; }
  fi
  t1=$(date +%s.%N)
  awk "BEGIN{printf \"%.1f\\n\", $t1 - $t0}" > "$dir/wall_s"
  echo "   $(grep -o 'val_loss [0-9.]*' "$dir/log" | tail -1), $(cat "$dir/wall_s") s"
done
echo "all rows: $(( $(date +%s) - T_ALL )) s"

# --- results.json, results.md, diloco.png
if [ $QUICK = 1 ]; then
  "$PY" "$HERE/report.py" "$WORK" "$WORK"
else
  "$PY" "$HERE/report.py" "$WORK" "$HERE"
fi

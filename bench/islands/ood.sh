#!/bin/bash
# Out-of-domain validation (issue 34, item 8): do models trained by islands do worse on
# their own corpus but better on others? Three rows at equal tokens, each evaluated on
# the training corpus' validation split and on two corpora of other domains
# (`--eval-data NAME=DIR`):
#   dp     data parallel, 4 ranks (mpirun), S steps of 4 x BATCH sequences; its checkpoint
#          at step W (40%) is the warm start of the island rows
#   sync   DiLoCo, 4 islands in one mpirun (--islands 4), H = 25, from dp's step W,
#          S - W steps of BATCH sequences per island (the same tokens as dp's rest)
#   async  the same 4 islands as separate processes joined by a coordinator over
#          loopback, --overlap 5 --outer-mode async (each island merges its outer step
#          5 or more steps after the sync; it never waits for the exchange between syncs;
#          --quick: H = 4, overlap 2)
# Corpora: training on kernel-docs (scripts/corpus.sh: the Linux kernel's documentation,
# technical English); other domains: fortunes (Debian's fortune cookies: jokes, quotes,
# verse) and code (atoll's own C sources, src/**/*.c). Byte tokens throughout. The warm
# rows' schedule continues dp's (as bench/diloco/run.sh's warm rows). Losses, not
# timings, are the result; ood_report.py writes WORK/ood.json and ood.md, and a full
# run copies them beside this script.
#
# usage: bench/islands/ood.sh [--quick] [--work DIR] [--seed N]
#   --quick  S = 40 (a smoke run; results stay in WORK)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
QUICK=0 WORK=/tmp/atoll-ood SEED=1337
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --work) WORK=$2; shift ;;
    --seed) SEED=$2; shift ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    *) echo "ood.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$ROOT/build/atoll" ] || { echo "ood.sh: build first (scripts/build.sh)" >&2; exit 1; }
mkdir -p "$WORK"
cp "$ROOT/build/atoll" "$WORK/atoll" # a snapshot: rebuilds during the run do not mix in
ATOLL="$WORK/atoll"
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe --bind-to none"

# --- corpora (kept in WORK between runs)
[ -f "$WORK/kernel-docs/manifest.json" ] || bash "$ROOT/scripts/corpus.sh" "$WORK/kernel-docs" "$ATOLL" >/dev/null
[ -f "$WORK/fortunes/manifest.json" ] || "$ATOLL" prepare --text /usr/share/games/fortunes --out "$WORK/fortunes" >/dev/null
if [ ! -f "$WORK/code/manifest.json" ]; then
  mapfile -t code < <(cd "$ROOT" && find src -name '*.c' | LC_ALL=C sort | sed "s|^|$ROOT/|")
  "$ATOLL" prepare --text "${code[@]}" --out "$WORK/code" >/dev/null
fi
{ lscpu | sed -n 's/^Model name: *//p' | head -1; cut -d' ' -f1-3 /proc/loadavg; git -C "$ROOT" rev-parse --short HEAD; echo "seed $SEED"; } >"$WORK/machine"

if [ $QUICK = 1 ]; then S=40; else S=400; fi
W=$((S * 2 / 5)) H=25 T=5 LR=3e-3 BATCH=8
[ $QUICK = 0 ] || H=4 T=2
EVALS="--eval-data fortunes=$WORK/fortunes --eval-data code=$WORK/code --eval-batches 24"
BASE="--layers 2 --heads 4 --dim 128 --context 128 --seq 128 --vocab 256 --batch $BATCH --weight-decay 0.1 --grad-clip 1 --threads 1 --data $WORK/kernel-docs $EVALS --log-every 50 --seed $SEED"
# the warm rows' schedule: no warm-up, from dp's learning rate at step W down to dp's final 0.1 x lr
LR_W=$(awk -v lr=$LR -v s=$S -v w=$W -v wu=$((S / 20)) 'BEGIN{p=(w-wu)/(s-wu); pi=atan2(0,-1); printf "%.6g", lr*(0.1+0.45*(1+cos(pi*p)))}')
MIN_W=$(awk -v lr=$LR -v lw=$LR_W 'BEGIN{printf "%.6g", 0.1*lr/lw}')
WARM="--steps $((S - W)) --warmup 0 --lr $LR_W --min-lr-ratio $MIN_W --eval-every $(((S - W) / 4)) --save-every 0"
ISLANDS="--islands 4 --sync-every $H --outer-optimizer nesterov --outer-lr 0.7 --outer-momentum 0.9"

row_done() { [ -f "$WORK/$1/done" ]; }
# dp: 4 ranks, its checkpoint at step W kept for the warm starts
if ! row_done dp; then
  rm -rf "$WORK/dp"; mkdir -p "$WORK/dp"
  echo "== dp [$(date -u +%H:%M:%S)]"
  $MPIRUN -np 4 $ATOLL train $BASE --steps $S --warmup $((S / 20)) --lr $LR --min-lr-ratio 0.1 --eval-every $((S / 4)) \
    --save-every $W --out "$WORK/dp/run" >"$WORK/dp/log" 2>&1 || { tail -n 5 "$WORK/dp/log"; exit 1; }
  touch "$WORK/dp/done"
fi
CK=$(printf '%s/dp/run/checkpoints/step_%08d' "$WORK" "$W")
[ -d "$CK" ] || { echo "ood.sh: dp's checkpoint at step $W is missing ($CK)" >&2; exit 1; }

if ! row_done sync; then
  rm -rf "$WORK/sync"; mkdir -p "$WORK/sync"
  echo "== sync [$(date -u +%H:%M:%S)]"
  $MPIRUN -np 4 $ATOLL train $BASE $WARM $ISLANDS --init-from "$CK" --init-optim 1 --out "$WORK/sync/run" >"$WORK/sync/log" 2>&1 \
    || { tail -n 5 "$WORK/sync/log"; exit 1; }
  touch "$WORK/sync/done"
fi

if ! row_done async; then
  D="$WORK/async"
  rm -rf "$D"; mkdir -p "$D"
  echo "== async [$(date -u +%H:%M:%S)]"
  "$ATOLL" keys --out "$D/coord" >/dev/null
  for k in 0 1 2 3; do "$ATOLL" keys --out "$D/k$k" >/dev/null; cp "$D/k$k/key.pub" "$D/coord/allowed/k$k.pub"; done
  PORT=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  timeout -k 5 3600 "$ATOLL" coordinator --listen tcp://127.0.0.1:$PORT --keys "$D/coord" --min-islands 4 --island-timeout 30 >"$D/coord.log" 2>&1 &
  CPID=$!
  pids=""
  for k in 0 1 2 3; do
    timeout -k 5 3600 "$ATOLL" train $BASE $WARM $ISLANDS --init-from "$CK" --init-optim 1 --island-id $k --overlap $T --outer-mode async \
      --join tcp://127.0.0.1:$PORT --coordinator-key "$D/coord/key.pub" --island-key "$D/k$k/key.secret" \
      --island-listen tcp://127.0.0.1:0 --out "$D/n$k" >"$D/n$k.log" 2>&1 &
    pids="$pids $!"
  done
  ok=1
  for p in $pids; do wait $p || ok=0; done
  [ $ok = 1 ] || kill $CPID 2>/dev/null # (it ends by itself once every island finished)
  wait $CPID || true
  [ $ok = 1 ] || { echo "ood.sh: an async island failed:"; tail -n 3 "$D"/n*.log; exit 1; }
  touch "$D/done"
fi

$PY "$HERE/ood_report.py" "$WORK"
if [ $QUICK = 0 ]; then cp "$WORK/ood.json" "$WORK/ood.md" "$HERE/"; fi

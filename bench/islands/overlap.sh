#!/bin/bash
# The background exchange against the lock-step one (issue 34, item 1): K islands, each
# in its own network namespace (tests/net/netns_lib.sh), links of RATE with DELAY ms
# each way (the delay line, tests/net/delayer.c), the same run with --overlap 0 and with
# --overlap T. Per row: each island's compute utilisation, exchange_wait_seconds and
# outer_sync_seconds (summary.json), the wall time, and the final validation loss;
# timeline.py draws the islands as lanes (computing, between steps) from their
# metrics.jsonl. Needs root, tc, a built build/atoll and build/tests/delayer; the plot
# needs python3-matplotlib.
#
# usage: bench/islands/overlap.sh [--work DIR] [--rate 100mbit] [--delay 50] [--overlap 8] [--sync-every 12]
#                                 [--dtype int8] [--steps 48] [--islands 4] [--batch 16]
# (the overlap hides an exchange only where T inner steps take longer than it: the batch
# sets a step's compute, the model's 6.45 M parameters the exchange's bytes)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=/tmp/atoll-overlap RATE=100mbit DELAY=50 T=8 H=12 DTYPE=int8 STEPS=48 K=4 BATCH=16
while [ $# -gt 0 ]; do
  case $1 in
    --work) WORK=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --delay) DELAY=$2; shift ;;
    --overlap) T=$2; shift ;;
    --sync-every) H=$2; shift ;;
    --dtype) DTYPE=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --islands) K=$2; shift ;;
    --batch) BATCH=$2; shift ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "overlap.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "overlap.sh: needs root (network namespaces)" >&2; exit 1; }
for f in build/atoll build/tests/delayer; do [ -x "$ROOT/$f" ] || { echo "overlap.sh: $f is missing: build first" >&2; exit 1; }; done
rm -rf "$WORK"; mkdir -p "$WORK"
cp "$ROOT/build/atoll" "$WORK/atoll"   # a snapshot: rebuilds meanwhile do not mix in
ATOLL="$WORK/atoll"
export WAN_DELAYER="$ROOT/build/tests/delayer"
"$ATOLL" prepare --text /usr/share/games/fortunes --out "$WORK/data" >/dev/null
MODEL="--layers 2 --heads 4 --dim 512 --context 32 --seq 32 --vocab 256 --batch $BATCH"
COMMON="$MODEL --threads 1 --seed 1337 --data $WORK/data --eval-every 0 --eval-batches 4 --save-every 0 --steps $STEPS --sync-every $H --islands $K --outer-dtype $DTYPE --net-timeout 60"
{ echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"; echo "rate $RATE, delay $DELAY ms each way, K $K, H $H, T $T, $DTYPE, $STEPS steps, batch $BATCH"; echo "$COMMON"; uptime; } >"$WORK/setup.txt"

. "$ROOT/tests/net/netns_lib.sh"
PIDS=""
cleanup() {
  for p in $PIDS; do for c in $(pgrep -P "$p"); do kill -9 "$c" 2>/dev/null || true; done; kill -9 "$p" 2>/dev/null || true; done
  wan_down
}
trap cleanup EXIT
trap 'exit 1' INT TERM
wan_up $K
wan_rate "$RATE"
wan_delay "$DELAY"

# row NAME FLAGS...: a coordinator and K islands
row() {
  local name=$1 D="$WORK/$1" i pids=""
  shift
  mkdir -p "$D"
  "$ATOLL" keys --out "$D/coord" >/dev/null
  for i in $(seq 0 $((K - 1))); do
    "$ATOLL" keys --out "$D/i$i" >/dev/null
    cp "$D/i$i/key.pub" "$D/coord/allowed/i$i.pub"
  done
  timeout -k 5 900 ip netns exec "${WAN}c" "$ATOLL" coordinator --listen tcp://10.231.0.254:5555 --keys "$D/coord" \
    --min-islands $K --island-timeout 30 >"$D/coord.log" 2>&1 &
  local cpid=$!
  local t0=$(date +%s.%N)
  for i in $(seq 0 $((K - 1))); do
    timeout -k 5 900 ip netns exec "$WAN$i" "$ATOLL" train $COMMON "$@" --join tcp://10.231.0.254:5555 \
      --coordinator-key "$D/coord/key.pub" --island-id $i --island-key "$D/i$i/key.secret" \
      --island-listen tcp://$(wan_ip $i):6000 --out "$D/n$i" >/dev/null 2>"$D/n$i.err" &
    pids="$pids $!"
  done
  PIDS="$cpid $pids"
  local ok=1
  for p in $pids; do wait $p || ok=0; done
  awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.3f\n", a - b }' >"$D/wall_seconds"
  kill $cpid 2>/dev/null || true; wait $cpid 2>/dev/null || true
  PIDS=""
  [ $ok = 1 ] || { echo "row $name: an island failed:"; tail -n 3 "$D"/n*.err; exit 1; }
  echo "row $name: $(cat "$D/wall_seconds") s"
}

# the two rows alternate twice, so that load drifting on a shared machine hits both
for round in 1 2; do
  row "sync$round" --overlap 0
  row "overlap$round" --overlap "$T"
done
wan_down
/usr/bin/python3 "$HERE/overlap_report.py" "$WORK" "$K" | tee "$WORK/results.md"
/usr/bin/python3 "$HERE/timeline.py" "$WORK/timeline.png" "sync (T = 0)" "$WORK/sync1" "overlap (T = $T)" "$WORK/overlap1" \
  || echo "(no plot: python3-matplotlib missing?)"

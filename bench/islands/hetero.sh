#!/bin/bash
# Islands of different speeds over a slow, distant link (issue 34's setting): 4 islands
# and a coordinator in network namespaces (tests/net/netns_lib.sh), each island's link
# 100 Mbit/s (tc tbf) with 50 ms added each way (the delayer: 100 ms round trip), island
# speeds 1:1:2:4 (the test hook ATOLL_TEST_STEP_MS adds 200, 200, 100 and 50 ms to each
# step, several times the model's own compute: a documented slow-down, not real
# machines), H = 20, int8 outer gradients,
# at least 20 merges per row. Rows:
#   sync          every island takes H steps a phase; the exchange waits for the slowest
#   grace         the same with the coordinator's --quorum-grace 1.5 and --min-islands 2:
#                 the slow islands are late and join (their work folded into their next
#                 exchange)
#   phase         --phase-seconds 1.5: each island trains about 1.5 s a phase (the fast
#                 one about H steps), skips the rest, weighs in by its tokens
#   phase_async   and --overlap 10 --outer-mode async: the exchange runs beside the next
#                 phase's steps and merges when done
#   phase_async_fast  the same with the two fast islands alone (2 and 3; the slow
#                 islands 0 and 1 absent): the fast islands' tokens/s with and without them
#   phase_async_a25  phase_async with --merge-alpha 0.25 (the island keeps a quarter of
#                 its own weights at a merge, not half)
#   phase_async_kill  phase_async with island 1 SIGKILLed 12 s in (for good): the
#                 survivors' longest gap between inner steps against their normal step
# Per island: compute utilisation, tokens trained per second of the run, steps taken,
# merges, staleness, the longest gap between inner steps; per row the final validation
# loss of the global model and the tokens all islands trained. hetero_report.py writes
# WORK/hetero.json and hetero.md, timeline.py WORK/hetero.png (sync and phase_async as
# lanes); a full run copies them beside this script. Needs root, tc, ip (scripts/setup.sh)
# and python3-matplotlib for the plot.
#
# usage: bench/islands/hetero.sh [--quick] [--work DIR] [--rows "sync phase ..."]
#   --quick  4 merges per row (smoke); with it, or with --rows, the results stay in WORK
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ALL_ROWS="sync grace phase phase_async phase_async_a25 phase_async_fast phase_async_kill"
QUICK=0 WORK=/tmp/atoll-hetero ROWS=$ALL_ROWS
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --work) WORK=$2; shift ;;
    --rows) ROWS=$2; shift ;;
    -h|--help) sed -n 2,25p "$0"; exit 0 ;;
    *) echo "hetero.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "hetero.sh: needs root (network namespaces)" >&2; exit 1; }
for c in tc ip; do command -v $c >/dev/null || { echo "hetero.sh: $c is missing (scripts/setup.sh)" >&2; exit 1; }; done
rm -rf "$WORK"; mkdir -p "$WORK"
PY=/usr/bin/python3
[ -x "$ROOT/build/atoll" ] && [ -x "$ROOT/build/tests/delayer" ] || { echo "hetero.sh: build first (scripts/build.sh)" >&2; exit 1; }
cp "$ROOT/build/atoll" "$WORK/atoll"   # a snapshot: rebuilds by others during the run do not mix in
ATOLL="$WORK/atoll"
export WAN_DELAYER="$ROOT/build/tests/delayer"
"$ATOLL" prepare --text /usr/share/games/fortunes --out "$WORK/data" >/dev/null
{ lscpu | grep 'Model name' | sed 's/.*: *//'; uptime; git -C "$ROOT" rev-parse --short HEAD; } >"$WORK/machine"

K=4 H=20
MERGES=$([ $QUICK = 1 ] && echo 4 || echo 20)
SLOW_MS=(200 200 100 50)  # speeds 1:1:2:4
COMMON="--layers 2 --heads 4 --dim 128 --context 32 --batch 4 --lr 5e-4 --threads 1 --seed 1337 --data $WORK/data --eval-every 100 --eval-batches 8 --save-every 0 --steps $((H * MERGES)) --sync-every $H --islands $K --outer-dtype int8 --net-timeout 60"
echo "$COMMON" >"$WORK/common_flags"

. "$ROOT/tests/net/netns_lib.sh"
PIDS=""
cleanup() {
  for p in $PIDS; do for c in $(pgrep -P "$p"); do kill -9 "$c" 2>/dev/null || true; done; kill -9 "$p" 2>/dev/null || true; done
  wan_down
}
trap cleanup EXIT
trap 'exit 1' INT TERM
wan_up $K
wan_rate 100mbit
wan_delay 50 || { echo "hetero.sh: cannot start the delayer"; exit 1; }

# row NAME COORD_FLAGS ISLAND_FLAGS FIRST [MIN]: islands FIRST..K-1 and a coordinator
# (--min-islands MIN, by default every island of the row)
row() {
  local name=$1 cflags=$2 iflags=$3 first=$4 min=${5:-$((K - $4))} D="$WORK/$1" i pids=""
  mkdir -p "$D"
  "$ATOLL" keys --out "$D/coord" >/dev/null
  for i in $(seq "$first" $((K - 1))); do
    "$ATOLL" keys --out "$D/k$i" >/dev/null
    cp "$D/k$i/key.pub" "$D/coord/allowed/k$i.pub"
  done
  timeout -k 5 900 ip netns exec "${WAN}c" "$ATOLL" coordinator --listen tcp://10.231.0.254:5555 --keys "$D/coord" \
    --min-islands $min --island-timeout 10 $cflags >"$D/coord.log" 2>&1 &
  local cpid=$!
  PIDS="$cpid"
  local t0=$(date +%s.%N)
  for i in $(seq "$first" $((K - 1))); do
    local cmd="$ATOLL train $COMMON $iflags --join tcp://10.231.0.254:5555 --coordinator-key $D/coord/key.pub --island-id $i --island-key $D/k$i/key.secret --island-listen tcp://$(wan_ip $i):6000 --out $D/n$i"
    echo "ATOLL_TEST_STEP_MS=${SLOW_MS[$i]} ip netns exec $WAN$i $cmd" >"$D/cmd$i"
    ATOLL_TEST_STEP_MS=${SLOW_MS[$i]} timeout -k 5 900 ip netns exec "$WAN$i" $cmd >/dev/null 2>"$D/n$i.err" &
    pids="$pids $!"
  done
  PIDS="$PIDS $pids"
  local ok=1 killed=""
  if [ -n "${KILL:-}" ]; then # ISLAND:SECONDS: that island's atoll process SIGKILLed then
    sleep "${KILL#*:}"
    pkill -9 -f -- "$D/k${KILL%:*}/key.secret" || true
    date +%s.%N >"$D/killed_at"; echo "${KILL%:*}" >"$D/killed"
    killed=$(echo $pids | cut -d' ' -f$((${KILL%:*} - first + 1)))
  fi
  for p in $pids; do wait $p || [ "$p" = "$killed" ] || ok=0; done
  # (with a grace window a straggler late for the run's last commit stops with status 1:
  # "the run ended before this island's steps did"; the row stands without its end)
  [ $ok = 1 ] || ! grep -q "the run ended before this island's steps did" "$D"/n*.err \
    || { ok=1; grep -l "the run ended before this island's steps did" "$D"/n*.err >"$D/ended_early"; }
  awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.3f\n", a - b }' >"$D/wall_seconds"
  kill $cpid 2>/dev/null || true; wait $cpid 2>/dev/null || true
  PIDS=""
  [ $ok = 1 ] || { echo "row $name: an island failed:"; tail -n 3 "$D"/n*.err; exit 1; }
  echo "row $name: $(cat "$D/wall_seconds") s"
}

PHASE="--phase-seconds 1.5"
ASYNC="$PHASE --overlap 10 --outer-mode async"
for r in $ROWS; do
  case $r in
    sync) row sync "" "" 0 ;;
    grace) row grace "--quorum-grace 1.5" "" 0 2 ;;
    phase) row phase "" "$PHASE" 0 ;;
    phase_async) row phase_async "" "$ASYNC" 0 ;;
    phase_async_fast) row phase_async_fast "" "$ASYNC" 2 ;;
    phase_async_kill) KILL=1:12 row phase_async_kill "" "$ASYNC" 0 3 ;;
    phase_async_a25) row phase_async_a25 "" "$ASYNC --merge-alpha 0.25" 0 ;;
    *) echo "hetero.sh: unknown row '$r'"; exit 2 ;;
  esac
done
wan_down
$PY "$HERE/hetero_report.py" "$WORK" $K
# the islands as lanes over time (timeline.py): sync against phase + async
lanes=""
for r in sync phase_async; do [ -d "$WORK/$r" ] && lanes="$lanes $r $WORK/$r"; done
[ -n "$lanes" ] && $PY "$HERE/timeline.py" "$WORK/hetero.png" $lanes
# a full run's results beside this script (a --quick one, or one of chosen --rows, stays in WORK)
if [ $QUICK = 0 ] && [ "$ROWS" = "$ALL_ROWS" ]; then
  cp "$WORK/hetero.json" "$WORK/hetero.md" "$HERE/"
  [ ! -f "$WORK/hetero.png" ] || cp "$WORK/hetero.png" "$HERE/"
fi

#!/bin/bash
# Islands over an emulated network (issue 14's benchmark): 4 islands and a coordinator,
# each in its own network namespace (tests/net/netns_lib.sh: veth pairs to a bridge,
# every island's link limited by tc tbf in both directions), at 1 Gbit/s and 100 Mbit/s,
# outer gradients in fp32 and int8. Per row: iperf3's rate on the link, seconds per
# outer step, exposed communication per inner step, bytes on the wire per island against
# what data parallel (ring all-reduce of fp32 gradients every inner step) would send for
# the same tokens. Then the chaos run of tests/net/test_islands_chaos.sh (kept with
# ATOLL_CHAOS_KEEP) for a timeline plot. report.py writes results.json, results.md and
# islands.png. Needs root (namespaces), iperf3, tc; the plot needs python3-matplotlib.
#
# usage: bench/islands/run.sh [--quick] [--work DIR] [--no-chaos]
#   --quick     2 outer steps per row (smoke); results stay in WORK
#   --work      work directory (default /tmp/atoll-islands)
#   --no-chaos  leave out the chaos run (the plot then has no timeline)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
QUICK=0 CHAOS=1 WORK=/tmp/atoll-islands
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --no-chaos) CHAOS=0 ;;
    --work) WORK=$2; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "run.sh: needs root (network namespaces)" >&2; exit 1; }
for c in iperf3 tc ip; do command -v $c >/dev/null || { echo "run.sh: $c is missing (scripts/setup.sh)" >&2; exit 1; }; done
rm -rf "$WORK"; mkdir -p "$WORK/rows"
uptime >"$WORK/load_at_start"
PY=/usr/bin/python3
if [ ! -x "$ROOT/build/atoll" ]; then (cd "$ROOT" && cmake -S . -B build >/dev/null && cmake --build build -j2 --target atoll); fi
cp "$ROOT/build/atoll" "$WORK/atoll"   # a snapshot: rebuilds by others during the run do not mix in
ATOLL="$WORK/atoll"
"$ATOLL" prepare --text /usr/share/games/fortunes --out "$WORK/data" >/dev/null

K=4
H=6
OUTER=$([ $QUICK = 1 ] && echo 2 || echo 4)
STEPS=$((H * OUTER))
MODEL="--layers 2 --heads 4 --dim 512 --context 32 --seq 32 --vocab 256 --batch 2"
COMMON="$MODEL --threads 1 --seed 1337 --data $WORK/data --eval-every 0 --eval-batches 2 --save-every 0 --steps $STEPS --sync-every $H --islands $K --net-timeout 60"
echo "$COMMON" >"$WORK/common_flags"

. "$ROOT/tests/net/netns_lib.sh"
PIDS=""
cleanup() {  # the programs under each timeout wrapper first, then the wrappers
  for p in $PIDS; do for c in $(pgrep -P "$p"); do kill -9 "$c" 2>/dev/null || true; done; kill -9 "$p" 2>/dev/null || true; done
  wan_down
}
trap cleanup EXIT
trap 'exit 1' INT TERM
wan_up $K

# row_once RATE DTYPE: iperf3 on the link, then the coordinator and K islands
row_once() {
  local rate=$1 dtype=$2 D="$WORK/rows/$1_$2" i p
  mkdir -p "$D"
  wan_rate "$rate"
  wan_iperf 0 1 4 >"$D/iperf_bps"
  "$ATOLL" keys --out "$D/coord" >/dev/null
  for i in $(seq 0 $((K - 1))); do
    "$ATOLL" keys --out "$D/i$i" >/dev/null
    cp "$D/i$i/key.pub" "$D/coord/allowed/i$i.pub"
  done
  timeout -k 5 900 ip netns exec "${WAN}c" "$ATOLL" coordinator --listen tcp://10.231.0.254:5555 --keys "$D/coord" \
    --min-islands $K --island-timeout 10 >"$D/coord.log" 2>&1 &
  local cpid=$! pids=""
  PIDS="$cpid"
  local t0=$(date +%s.%N) mons=""
  for i in $(seq 0 $((K - 1))); do  # each island's interface counter, for the wire-busy rate
    timeout 900 ip netns exec "$WAN$i" $PY "$HERE/linkmon.py" eth0 900 "$D/link$i.txt" 5 &
    mons="$mons $!"
  done
  for i in $(seq 0 $((K - 1))); do
    local cmd="$ATOLL train $COMMON --outer-dtype $dtype --join tcp://10.231.0.254:5555 --coordinator-key $D/coord/key.pub --island-id $i --island-key $D/i$i/key.secret --island-listen tcp://$(wan_ip $i):6000 --out $D/n$i"
    echo "ip netns exec $WAN$i $cmd" >"$D/cmd$i"
    timeout -k 5 900 ip netns exec "$WAN$i" $cmd >/dev/null 2>"$D/n$i.err" &
    pids="$pids $!"
  done
  PIDS="$PIDS $pids $mons"
  local ok=1
  for p in $pids; do wait $p || ok=0; done
  awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.3f\n", a - b }' >"$D/wall_seconds"
  kill $cpid $mons 2>/dev/null || true; wait $cpid $mons 2>/dev/null || true
  PIDS=""
  [ $ok = 1 ] || { echo "row $rate $dtype: an island failed:"; tail -n 3 "$D"/n*.err; exit 1; }
  echo "row $rate $dtype: iperf3 $(($(cat "$D/iperf_bps") / 1000000)) Mbit/s, $(cat "$D/wall_seconds") s"
}

# row RATE DTYPE: row_once; a row whose first exchange was aborted (the handshake race of
# docs/islands.md, "WAN": the abort waits 2 x --island-timeout, which would count as
# exchange time) is kept in rows/RATE_DTYPE.abortedN and run again, at most 3 times in
# all, and says so; the last run counts (results.json: its retries, and the aborted
# attempts of the runs before it)
row() {
  local D="$WORK/rows/$1_$2" r n=1 lost=0
  while :; do
    row_once "$1" "$2"
    r=$($PY -c 'import json, sys; print(sum(json.load(open(f"{sys.argv[1]}/n{i}/summary.json"))["net"]["retries"] for i in range(int(sys.argv[2]))))' "$D" $K)
    [ "$r" = 0 ] || [ $n = 3 ] && break
    echo "row $1 $2: $r aborted exchange attempt(s) ($(grep -h "cannot send" "$D"/n*.err | head -1)); kept in $D.aborted$n, running the row again"
    mv "$D" "$D.aborted$n"
    lost=$((lost + r)); n=$((n + 1))
  done
  echo "$lost" >"$D/aborted_first_run"
}

for rate in 1gbit 100mbit; do
  for dtype in fp32 int8; do row $rate $dtype; done
done
wan_down

if [ $CHAOS = 1 ]; then
  echo "chaos run (tests/net/test_islands_chaos.sh, seed ${ATOLL_CHAOS_SEED:-7}, coordinator killed too)"
  ATOLL_CHAOS_KEEP="$WORK/chaos" CHAOS_COORDINATOR=1 sh "$ROOT/tests/net/test_islands_chaos.sh" "$ATOLL" "$ROOT" \
    >"$WORK/chaos.out" 2>&1 || { echo "the chaos run failed:"; tail -n 20 "$WORK/chaos.out"; exit 1; }
  tail -n 3 "$WORK/chaos.out"
fi
OUT="$HERE"
[ $QUICK = 1 ] && OUT="$WORK"
$PY "$HERE/report.py" "$WORK" "$OUT" "$K" "$H"

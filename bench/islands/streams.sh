#!/bin/sh
# Streams at 100 ms (docs/islands.md, "WAN", "Streams that add up"): 2 islands in network
# namespaces at 100 Mbit/s with 50 ms each way (netns_lib.sh, the delayer); per round and
# stream count N: iperf3 -P N (5 s), then the islands (--dim 512, fp32, 5 syncs,
# --net-streams N); prints the slower island's exchange rate (waits included), transfer
# rate and seconds per exchange. With SS=1, `ss -tin` of island 0's connections every
# 0.1 s goes to OUTDIR/ss_NAME.log (per stream: bytes acked, cwnd, send queue). Root.
#   usage: bench/islands/streams.sh ATOLL SRC ROUNDS "N..." [SS] [OUTDIR]
ATOLL=$1; SRC=$2; ROUNDS=$3; SLIST=$4; SS=${5:-0}; OUTDIR=${6:-.}
WAN_DELAYER=$SRC/build/tests/delayer
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
. "$SRC/tests/net/netns_lib.sh"
trap 'wan_down; rm -rf $TMP' EXIT
small_data
K=2
wan_up $K || exit 1
wan_rate 100mbit && wan_delay 50 || exit 1
CASE=0
run() { # run NAME STREAMS
  D="$TMP/$1"; S=$2; CASE=$((CASE+1)); mkdir -p "$D"; net_keys "$D" $K
  cport=$((5550 + CASE))
  ip netns exec "${WAN}c" $ATOLL coordinator --listen tcp://10.231.0.254:$cport --keys "$D/coord" --min-islands $K --island-timeout 8 >"$D/coord.log" 2>&1 &
  cpid=$!
  M="--layers 2 --heads 4 --dim 512 --context 16 --seq 4 --batch 1 --threads 1 --data $TMP/data --eval-every 0
     --eval-batches 1 --save-every 0 --steps 5 --sync-every 1 --islands $K --net-timeout 30 --net-streams $S"
  pids=""
  for i in 0 1; do
    timeout 150 ip netns exec "$WAN$i" $ATOLL train $M --join tcp://10.231.0.254:$cport --coordinator-key "$D/coord/key.pub" --island-id $i --island-key "$D/i$i/key.secret" --island-listen tcp://$(wan_ip $i):6000 --out "$D/n$i" >/dev/null 2>"$D/n$i.err" &
    pids="$pids $!"
  done
  if [ "$SS" = 1 ]; then
    ( while kill -0 $(echo $pids | cut -d' ' -f1) 2>/dev/null; do echo "T $(date +%s.%N)"; ip netns exec ${WAN}0 ss -tin dst 10.231.0.2 2>/dev/null; sleep 0.1; done ) > "$D/ss.log" &
  fi
  for p in $pids; do wait $p; done
  kill $cpid; wait $cpid 2>/dev/null
  $PY - "$D" "$1" <<'PYEOF'
import json, sys
ns = [json.load(open(f"{sys.argv[1]}/n{i}/summary.json"))["net"] for i in range(2)]
ex = min(n["wire_bytes"] * 8 / n["exchange_seconds"] for n in ns)
tr = min(n["transfer_bytes"] * 8 / n["transfer_seconds"] for n in ns)
print("RESULT %s ex %.1f tr %.1f s/ex %.3f retries %d" % (sys.argv[2], ex/1e6, tr/1e6, max(n["exchange_seconds"]/n["exchanges"] for n in ns), sum(n["retries"] for n in ns)))
PYEOF
  [ "$SS" = 1 ] && cp "$D/ss.log" "$OUTDIR/ss_$1.log"
}
r=1
while [ $r -le $ROUNDS ]; do
  for S in $SLIST; do
    echo "RESULT iperf-P$S $(( $(wan_iperf 0 1 5 $S) / 1000000 ))"
    run r$r.s$S $S
  done
  r=$((r+1))
done

#!/bin/sh
# Signalled training runs stop cleanly: up to 24 runs (at most about 40 s), each sent a
# burst of stop signals (SIGHUP, SIGTERM, SIGINT in turn) while it trains, must all exit
# with status 130, a checkpoint and the "stopped at step" line; never 134 (glibc's heap
# abort) or 139. The model's products have K above 84, where oneDNN's fp32 gemm kernel
# runs with rsp in a malloc'd buffer (src/core/stop_signal.c); before the handler had its
# own stack about one run in three aborted here.
# usage: test_signal_stop.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
small_data
MODEL="--layers 2 --heads 2 --dim 128 --context 64 --batch 4 --eval-batches 2 --threads 1"
start=$(date +%s)
runs=0; bad=0
for sig in HUP TERM INT HUP TERM INT HUP TERM INT HUP TERM INT HUP TERM INT HUP TERM INT HUP TERM INT HUP TERM INT; do
  [ $(($(date +%s) - start)) -ge 40 ] && break
  out="$TMP/run$runs"
  $ATOLL train $MODEL --data "$TMP/data" --steps 1000000 --save-every 0 --eval-every 0 --out "$out" >/dev/null 2>"$out.err" &
  pid=$!
  i=0 # the handler is in place once the first step is written
  while [ "$(cat "$out/metrics.jsonl" 2>/dev/null | grep -c .)" -lt 1 ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
  sleep 0.0$(awk -v s=$$$runs 'BEGIN { srand(s); printf "%d", rand() * 10 }')
  k=0
  while [ $k -lt 30 ] && kill -$sig $pid 2>/dev/null; do sleep 0.002; k=$((k + 1)); done
  wait $pid
  rc=$?
  runs=$((runs + 1))
  if [ $rc -ne 130 ] || ! grep -q "stopped at step .*checkpoint saved" "$out.err"; then
    bad=$((bad + 1))
    fail "run $runs (SIG$sig): status $rc; its stderr:"
    grep -v '^step' "$out.err" | head -20
  fi
  rm -rf "$out"
done
if [ $bad -eq 0 ] && [ $runs -ge 5 ]; then pass "$runs signalled runs: all status 130 with a checkpoint"; fi
[ $runs -lt 5 ] && fail "only $runs runs in 40 s"
finish

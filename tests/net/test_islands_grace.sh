#!/bin/sh
# Islands that do not wait for a straggler (docs/islands.md, "Quorum and grace"): three
# islands over loopback, each step made 50 ms longer and island 2's 250 ms
# (ATOLL_TEST_STEP_MS), a coordinator with --quorum-grace 0.3 and --min-islands 2.
# Asserted: exchanges open without island 2 once the grace ends (the coordinator says
# so), island 2 joins at a following commit with the committed state, islands 0 and 1
# finish every step with bit-identical global weights, and no commit sees a hash
# mismatch. Then island 2 late once (one stalled step): its outer gradient of that
# phase is kept and merged, staleness-weighted, into its next exchange, and all three
# end bit-identical. Last, the slow island without a grace window: every exchange waits
# for island 2. Then island 2 late for the last commit (stalled before it): the others
# finish, and it ends at once with status 0, a checkpoint and a line saying its last
# contribution was not merged; late while the others stop (--stop-after 12), it is told
# that no commit is coming once they left (--island-timeout 3) and ends with a
# checkpoint and status 1; sent SIGTERM while it waits so, it ends with a checkpoint
# and status 130 (it waited 10 x --net-timeout, and a signal left no checkpoint).
# A kept late contribution survives a stop and resume (case lateresume: bit-identical to
# the uninterrupted run), and the fold's arithmetic is checked end to end from the
# checkpoints (case fold; it must fail with the fold's weight doubled by a test hook).
# The fast islands' longest gaps between steps and compute utilisation (summary.json)
# are printed, not judged.
#   usage: test_islands_grace.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
. "$SRC/tests/net/islands_lib.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 0 --eval-batches 1 --save-every 0 --steps 18 --islands 3 --sync-every 3"

# run NAME GRACE [SLOW_MS PAUSE_STEP PAUSE_MS]: three islands, each step 50 ms longer
# and island 2's SLOW_MS (default 250), and island 2's step PAUSE_STEP PAUSE_MS more
run() {
  D="$TMP/$1"; mkdir -p "$D"
  net_keys "$D" 3 || { fail "$1: keys"; return 1; }
  slow2=${3:-250} pstep=${4:-0} pms=${5:-0}
  set -- "$2" $(free_ports 4)
  start_coordinator "$D" $2 2 --island-timeout ${ITO:-20} --quorum-grace $1
  for i in 0 1 2; do
    slow=${FAST:-50}; ps=0; [ $i = 2 ] && slow=$slow2 && ps=$pstep
    ATOLL_TEST_STEP_MS=$slow ATOLL_TEST_PAUSE_STEP=$ps ATOLL_TEST_PAUSE_MS=$pms ATOLL_FAULT_LATE_WEIGHT=${LATE_PCT:-0} \
      timeout -k 5 120 $ATOLL train $M ${XF:-} $(island_flags "$D" $2 $i $(eval echo \${$((i + 3))})) \
      --out "$D/net$i" >/dev/null 2>"$D/net$i.err" &
    eval "P$i=\$!"
  done
  [ -n "${ON_WAIT:-}" ] && $ON_WAIT
  wait $P0; R0=$?; wait $P1; R1=$?; wait $P2; R2=$?
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
}

gap() { $PY -c 'import json, sys; s = json.load(open(sys.argv[1])); print("longest gap %.2f s, compute utilisation %.2f" % (s["longest_step_gap_seconds"], s["compute_utilisation"]))' "$1/summary.json"; }

run grace 0.3
if [ $R0 -eq 0 ] && [ $R1 -eq 0 ]; then pass "grace: islands 0 and 1 finished (island 2: status $R2)"
else fail "grace: island 0 status $R0, island 1 status $R1"; tail -n 3 "$D"/net0.err "$D"/net1.err; fi
late=$(grep -c "island 2 is late (--quorum-grace 0.3 s ended)" "$D/coord.log")
[ "$late" -ge 1 ] && pass "grace: $late exchange(s) opened without island 2: $(grep -m1 'island 2 is late' "$D/coord.log" | cut -c14-)" \
  || { fail "grace: no exchange opened without island 2"; tail -n 20 "$D/coord.log"; }
grep -q "island 2 is late .*it joins at the first commit after it asks" "$D/coord.log" && pass "grace: the late line says when island 2 joins" \
  || fail "grace: the late line says it joins at the next commit (it joins once it asks): $(grep -m1 'island 2 is late' "$D/coord.log")"
grep -q "island 2 joins at step" "$D/coord.log" && pass "grace: island 2 joined with the committed state: $(grep -m1 'island 2 joins at step' "$D/coord.log" | cut -c14-)" \
  || fail "grace: island 2 never joined"
grep -q "hash mismatch" "$D/coord.log" && fail "grace: hash mismatch" || pass "grace: no hash mismatch at any commit"
out=$($PY "$SRC/tests/net/same_weights.py" "$D/net0" "$D/net1") && pass "grace: islands 0 and 1 end with the same global weights: $out" || fail "grace: $out"
echo "grace: island 0: $(gap "$D/net0"); island 1: $(gap "$D/net1")"

# island 2 stalls once (step 2, 0.6 s) and is late for the first exchange: it joins, and
# its outer gradient of that phase is kept and merged into its next exchange,
# staleness-weighted (summary.json late_contributions_kept / _merged); all three islands
# then end bit-identical
run late 0.3 50 2 600
if [ $R0 -eq 0 ] && [ $R1 -eq 0 ] && [ $R2 -eq 0 ]; then pass "late: all three islands finished"
else fail "late: statuses $R0 $R1 $R2"; tail -n 3 "$D"/net*.err; fi
grep -q "island 2 is late" "$D/coord.log" && pass "late: an exchange opened without island 2" || fail "late: island 2 was never late"
counts=$($PY -c 'import json, sys; s = json.load(open(sys.argv[1])); print(s["late_contributions_kept"], s["late_contributions_merged"])' "$D/net2/summary.json")
set -- $counts
[ "${1:-0}" -ge 1 ] && [ "${2:-0}" -ge 1 ] && pass "late: island 2 kept $1 late contribution(s) and merged $2 into later exchanges" \
  || fail "late: island 2 kept ${1:-?}, merged ${2:-?} late contributions"
grep -q "3 islands in the exchange (were 2)" "$D/coord.log" && pass "late: island 2 is back in the exchanges" || fail "late: island 2 never exchanged again"
for i in 1 2; do
  out=$($PY "$SRC/tests/net/same_weights.py" "$D/net0" "$D/net$i") && pass "late: islands 0 and $i end with the same global weights: $out" || fail "late: island $i: $out"
done

# a kept late contribution survives a stop and resume: every island stopped between
# island 2's join and its next exchange (--stop-after J + 1: island 2, late for step 3,
# joined at the commit of step J, as in the uninterrupted run, and keeps its late
# contribution for the exchange of step J + 3) and started again with its own command
# ends bit-identical to the uninterrupted run: the kept contribution is in island 2's
# checkpoint (late.safetensors, island_late_tokens; before, a resume lost it). Every
# step takes 300 ms and island 2 stalls 2.4 s before step 3, so that it asks between
# two commits, far from either; grace 1 s; the resumed islands meet a coordinator
# restarted from its state file without a grace window (they start at different
# moments); their HELLOs carry their checkpoints' revision. Which commit a late island joins at still depends on timing: a try whose
# island 2 joined at another commit than the uninterrupted run's is run again (3 tries).
FAST=300 run latekeep 1 300 2 2400
LATE="$D"
J=$(sed -n 's/.*island 2 joins at step \([0-9]*\):.*/\1/p' "$LATE/coord.log" | head -n 1)
# lateresume TRY: 0 when island 2 joined at step J and the islands were resumed
lateresume() {
  D="$TMP/lateresume$1"; mkdir -p "$D"
  net_keys "$D" 3 || fail "lateresume: keys"
  set -- $(free_ports 4)
  start_coordinator "$D" $1 2 --island-timeout 20 --quorum-grace 1
  for stop in "--stop-after $((J + 1))" ""; do
    for i in 0 1 2; do
      ps=0; [ $i = 2 ] && ps=2
      ATOLL_TEST_STEP_MS=300 ATOLL_TEST_PAUSE_STEP=$ps ATOLL_TEST_PAUSE_MS=2400 \
        timeout -k 5 120 $ATOLL train $M $stop $(island_flags "$D" $1 $i $(eval echo \${$((i + 2))})) \
        --out "$D/net$i" >/dev/null 2>>"$D/net$i.err" &
      eval "P$i=\$!"
    done
    wait $P0; R0=$?; wait $P1; R1=$?; wait $P2; R2=$?
    kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
    grep -q "island 2 joins at step $J:" "$D/coord.log" || return 1
    start_coordinator "$D" $1 2 --island-timeout 20
  done
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  grep -q "resuming from" "$D/net2.err"
}
try=1
while [ -n "$J" ] && ! lateresume $try && [ $try -lt 3 ]; do try=$((try + 1)); done
if [ -z "$J" ] || ! grep -q "island 2 joins at step $J:" "$D/coord.log"; then
  fail "lateresume: island 2 did not join at the same commit in $try tries (uninterrupted: step ${J:-none})"
else
  [ $R0 -eq 0 ] && [ $R1 -eq 0 ] && [ $R2 -eq 0 ] || fail "lateresume: statuses $R0 $R1 $R2: $(tail -n 2 "$D/net2.err")"
  ck="$D/net2/checkpoints/step_$(printf %08d $((J + 1)))"
  grep -q "island_late_tokens" "$ck/state.json" && [ -f "$ck/late.safetensors" ] \
    && pass "lateresume: island 2's checkpoint of step $((J + 1)) keeps its late contribution (try $try)" || fail "lateresume: no late contribution in $ck"
  # (their HELLO says the checkpoint's revision: it said 0, and the coordinator took
  # each resumed island for one far behind until its first heartbeat)
  grep -q "holds revision 0, the run is at" "$D/coord.log" && fail "lateresume: a resumed island's HELLO said revision 0: $(grep -m1 'holds revision 0' "$D/coord.log")" \
    || pass "lateresume: the resumed islands' HELLOs said their checkpoints' revision"
  for i in 0 2; do
    out=$($PY "$SRC/tests/net/same_weights.py" "$LATE/net$i" "$D/net$i") && pass "lateresume: island $i ends as in the uninterrupted run: $out" \
      || fail "lateresume: island $i differs from the uninterrupted run: $out"
  done
fi

# the fold's arithmetic end to end (tests/net/late_fold.py): outer SGD at learning rate
# 1 without momentum, --overlap 1 and --merge-alpha 1 (each island keeps its own
# weights) and a checkpoint every step, so that the global weights after island 2's
# folding exchange are a formula of what the checkpoints hold (the global weights
# before, the islands' own weights, island 2's kept outer gradient and its weight);
# then the same with the fold's weight doubled (test hook ATOLL_FAULT_LATE_WEIGHT=200):
# the check must fail
FOLD="--save-every 1 --keep 40 --outer-optimizer sgd --outer-lr 1 --outer-momentum 0 --overlap 1 --merge-alpha 1"
for pct in 0 200; do
  LATE_PCT=$pct FAST=300 XF="$FOLD" run fold$pct 1 300 2 2400
  J=$(sed -n 's/.*island 2 joins at step \([0-9]*\):.*/\1/p' "$D/coord.log" | head -n 1)
  if [ $R0 -ne 0 ] || [ $R1 -ne 0 ] || [ $R2 -ne 0 ] || [ -z "$J" ] || [ $((J + 3)) -gt 18 ]; then
    fail "fold$pct: statuses $R0 $R1 $R2, island 2 joined at step ${J:-none}: $(tail -n 2 "$D/net2.err")"; continue
  fi
  out=$($PY "$SRC/tests/net/late_fold.py" "$D/net0" "$D/net1" "$D/net2" $((J + 3)) 192); rc=$?
  if [ $pct = 0 ]; then [ $rc -eq 0 ] && pass "fold: the global weights after step $((J + 3)) are the fold's formula: $out" || fail "fold: $out"
  else [ $rc -ne 0 ] && pass "fold with the weight doubled: the check fails: $out" || fail "fold with the weight doubled: the check passed: $out"; fi
done

run nograce 0
[ $R0 -eq 0 ] && [ $R1 -eq 0 ] && [ $R2 -eq 0 ] && pass "no grace: all three islands finished" || fail "no grace: statuses $R0 $R1 $R2"
grep -q "is late" "$D/coord.log" && fail "no grace: an exchange opened without an island" || pass "no grace: every exchange waited for island 2"
echo "no grace: island 0: $(gap "$D/net0"); island 1: $(gap "$D/net1")"

# ended NAME STATUS STEP LINE: island 2 ended within 15 s of the others, with STATUS,
# a checkpoint of STEP and LINE
ended() {
  [ $R0 -eq 0 ] && [ $R1 -eq 0 ] || fail "$1: islands 0 and 1: statuses $R0 $R1"
  [ $R2 -eq $2 ] && pass "$1: island 2 ended with status $2" || { fail "$1: island 2: status $R2, not $2"; tail -n 3 "$D/net2.err"; }
  [ $((T2 - T01)) -le 15 ] && pass "$1: island 2 ended $((T2 - T01)) s after the others" || fail "$1: island 2 ended $((T2 - T01)) s after the others"
  [ -f "$D/net2/checkpoints/step_000000$3/state.json" ] && pass "$1: island 2 saved its checkpoint of step $3" \
    || fail "$1: no checkpoint of step $3: $(ls "$D/net2/checkpoints" 2>&1)"
  [ "$(grep -c -- "$4" "$D/net2.err")" -eq 1 ] && pass "$1: $(grep -o -- "$4.*" "$D/net2.err" | cut -c1-150)" \
    || fail "$1: no line '$4': $(tail -n 2 "$D/net2.err")"
}
# times: when islands 0 and 1 ended, and island 2
watch_ends() {
  while kill -0 $P0 2>/dev/null || kill -0 $P1 2>/dev/null; do sleep 0.1; done; T01=$(date +%s)
  while kill -0 $P2 2>/dev/null; do sleep 0.1; done; T2=$(date +%s)
}
# island 2 stalls 4 s before the last step: the last exchange opens without it, and
# the others finish
ON_WAIT=watch_ends run lastlate 0.3 50 17 4000
ended lastlate 0 18 "the run ended while this island waited for its exchange after step 18: its last contribution was not merged"
# the others stop at step 12 (--stop-after) while island 2 stalls before it
ITO=3 XF="--stop-after 12" ON_WAIT=watch_ends run paused 0.3 50 11 4000
ended paused 1 12 "stopped at step 12, checkpoint saved: no commit is coming"
# the same, island 2 sent SIGTERM while it waits to join
sigwait() {
  i=0; while ! grep -q "behind the run" "$D/net2.err" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  kill -TERM $(pgrep -P $P2) 2>/dev/null
  watch_ends
}
XF="--stop-after 12" ON_WAIT=sigwait run sigwait 0.3 50 11 4000
ended sigwait 130 12 "stopped by a signal while waiting for its exchange after step 12; checkpoint saved"
finish

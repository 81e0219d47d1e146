#!/bin/sh
# A joining island when too few up-to-date islands are left to commit (docs/islands.md,
# "Joining"): islands 0 and 1 of --min-islands 2 train; island 1 is killed, so island 0
# waits for more islands; then a fresh island 2 starts, behind (revision 0). A join
# normally happens at the next commit, which now never comes: the coordinator has it
# fetch the last committed state from island 0, which waits for the next exchange, and
# the two finish the run together (a chaos run of test_islands_chaos stalled this way
# for 80 s and failed). Asserts: both finish with status 0, island 2 joined with the
# hash checked, and their global weights are bit-identical; each finished island says
# goodbye (not "left (silent)"), the coordinator then ends by itself with status 0 and a
# summary line, and summary.json counts the run's 3 islands.
# Then the same with island 0's outer momentum damaged on its way to the joiner (test
# hook ATOLL_FAULT_FEED_MOMENTUM): the joiner refuses it, since the hash it checks
# covers the momentum as well as the weights.
# Last, island 1 of 2 falls silent in its commit of step 6 (it stops itself, test hook
# ATOLL_FAULT_COMMIT_SIGSTOP: as a cut link) for longer than --island-timeout, while
# island 0 (--min-islands 1) commits on; resumed, its COMMIT of that old step is answered
# (it was left unanswered, and the island stopped after 2 x --net-timeout), and it joins
# with the committed state and finishes. Then the same silent island comes back after
# island 0 finished the run (island 0 stops itself before its goodbye,
# ATOLL_FAULT_BYE_SIGSTOP, until island 1 is back): nobody is left to give it the state,
# and it is told so in one line within seconds (it waited 50 s), and the coordinator ends.
# Last, an island sent SIGTERM trains on to its next outer sync, contributes, saves and
# says goodbye; started again with the very command that started it, it continues from
# that checkpoint (as with --resume; it was refused, naming --resume), joins the run and
# ends with the same global weights as the island that ran on.
# Last, the islands' hashes differ at a commit (test hook ATOLL_FAULT_DESYNC_ISLAND):
# though an island no longer waits for COMMITTED, both stop with the coordinator's line
# after at most one more inner step.
#   usage: test_islands_rejoin.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
small_data
D="$TMP/rejoin"; mkdir -p "$D"
net_keys "$D" 3 || { fail keys; finish; }
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 0 --eval-batches 2 --save-every 0 --steps 40 --sync-every 2 --islands 3 --net-timeout 5 --wan-gbps 1 --wan-latency-ms 50 --throttle 1"
set -- $(free_ports 4); CPORT=$1; P0=$2; P1=$3; P2=$4
start_coordinator "$D" $CPORT 2 --island-timeout 3
timeout -k 5 150 $ATOLL train $M $(island_flags "$D" $CPORT 0 $P0) --out "$D/n0" >/dev/null 2>"$D/n0.err" &
PID0=$!
timeout -k 5 150 $ATOLL train $M $(island_flags "$D" $CPORT 1 $P1) --out "$D/n1" >/dev/null 2>"$D/n1.err" &
PID1=$!
# wait_log PATTERN SECONDS: until the coordinator's log holds PATTERN
wait_log() {
  n=0
  while ! grep -q "$1" "$D/coord.log" 2>/dev/null; do
    n=$((n + 1)); [ $n -gt $(($2 * 10)) ] && return 1; sleep 0.1
  done
}
wait_log "committed: revision 2," 60 || fail "islands 0 and 1 did not commit twice"
# the waiting line that counts is a new one (island 0 may have printed it at start-up,
# ready before island 1 registered)
before=$(grep -c "at least 2 needed" "$D/coord.log")
kill9 $PID1
n=0
while [ "$(grep -c "at least 2 needed" "$D/coord.log")" -le "$before" ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
[ "$(grep -c "at least 2 needed" "$D/coord.log")" -gt "$before" ] || fail "island 0 was not left alone waiting"
timeout -k 5 150 $ATOLL train $M $(island_flags "$D" $CPORT 2 $P2) --out "$D/n2" >/dev/null 2>"$D/n2.err" &
PID2=$!
ok=1
wait $PID0 || { ok=0; echo "island 0:"; tail -n 3 "$D/n0.err"; }
wait $PID2 || { ok=0; echo "island 2:"; tail -n 3 "$D/n2.err"; }
# every island registered has finished (island 1 left, killed): the coordinator ends
n=0; while kill -0 $COORD_PID 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
if kill -0 $COORD_PID 2>/dev/null; then
  fail "the coordinator did not end within 10 s of the last island's end"
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
else
  wait $COORD_PID; crc=$?
  [ $crc -eq 0 ] && grep -q "every island finished: the run ends at revision" "$D/coord.log" \
    && pass "the coordinator ended by itself: $(grep -o 'every island finished.*' "$D/coord.log" | cut -c1-120)" \
    || fail "the coordinator ended with status $crc: $(tail -n 1 "$D/coord.log")"
fi
grep -q "island 0 finished (said goodbye" "$D/coord.log" && grep -q "island 2 finished (said goodbye" "$D/coord.log" \
  && pass "islands 0 and 2 said goodbye" || fail "no goodbye: $(grep -E 'island [02] (finished|left)' "$D/coord.log")"
grep -q "island [02] left (silent" "$D/coord.log" && fail "a finished island logged as silent: $(grep 'left (silent' "$D/coord.log")"
out=$($PY -c 'import json, sys; n = json.load(open(sys.argv[1]))["islands"]; print(n); sys.exit(0 if n == 3 else 1)' "$D/n0/summary.json") \
  && pass "summary.json: islands 3" || fail "summary.json: islands $out, expected 3"
[ $ok -eq 1 ] && pass "islands 0 and 2 finished the run" || { fail "an island failed"; grep -E "joined|left|joins|behind|waiting" "$D/coord.log" | tail -n 12; }
grep -q "joined at step .*hash checked" "$D/n2.err" && pass "island 2 $(grep -o 'joined at step [0-9]* (revision [0-9]*' "$D/n2.err" | head -1), hash checked" \
  || fail "island 2 did not join: $(tail -n 2 "$D/n2.err")"
rev=$(grep -o 'joined at step [0-9]* (revision [0-9]*' "$D/n2.err" | head -1 | grep -o '[0-9]*$')
out=$($PY -c 'import json, sys; n = json.load(open(sys.argv[1]))["net"]["commits_missed"]; print(n); sys.exit(0 if n == int(sys.argv[2]) else 1)' "$D/n2/summary.json" "${rev:-0}") \
  && pass "island 2's summary.json: commits_missed $out (it joined at revision $rev)" || fail "island 2's commits_missed $out, expected ${rev:-?}"
grep -q "island 2 joins at step .* from island 0" "$D/coord.log" && pass "the coordinator had island 2 fetch from island 0 while too few islands were left" \
  || fail "no feed line in the coordinator's log"
out=$($PY "$SRC/tests/net/same_weights.py" "$D/n2" "$D/n0") && pass "island 2's global weights == island 0's ($out)" || fail "weights: $out"

# --- the joiner checks the momentum too: island 0 sends a damaged one ---
D="$TMP/badmomentum"; mkdir -p "$D"
net_keys "$D" 3 || { fail keys; finish; }
M2=$(echo "$M" | sed 's/--steps 40/--steps 14/')
set -- $(free_ports 4); CPORT=$1; P0=$2; P1=$3; P2=$4
start_coordinator "$D" $CPORT 2 --island-timeout 3
ATOLL_FAULT_FEED_MOMENTUM=1 timeout -k 5 100 $ATOLL train $M2 $(island_flags "$D" $CPORT 0 $P0) --out "$D/n0" >/dev/null 2>"$D/n0.err" &
PID0=$!
timeout -k 5 100 $ATOLL train $M2 $(island_flags "$D" $CPORT 1 $P1) --out "$D/n1" >/dev/null 2>"$D/n1.err" &
PID1=$!
wait_log "committed: revision 2," 60 || fail "momentum case: islands 0 and 1 did not commit twice"
kill9 $PID1
timeout -k 5 60 $ATOLL train $M2 $(island_flags "$D" $CPORT 2 $P2) --out "$D/n2" >/dev/null 2>"$D/n2.err"
rc=$?
kill $PID0 $COORD_PID 2>/dev/null; wait $PID0 $COORD_PID 2>/dev/null
[ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "weights and outer momentum fetched from island 0 do not match the quorum's hash; refusing them" "$D/n2.err" \
  && pass "a damaged momentum is refused: $(grep -o 'joining at step [0-9]*: the weights and outer.*' "$D/n2.err" | head -1 | cut -c1-120)" \
  || fail "a damaged momentum (status $rc): $(grep -E 'joined|refusing|error' "$D/n2.err" | head -2)"

# --- an island silent during its commit comes back and joins ---
D="$TMP/stopped"; mkdir -p "$D"
net_keys "$D" 2 || { fail keys; finish; }
set -- $(free_ports 3); CPORT=$1; P0=$2; P1=$3
start_coordinator "$D" $CPORT 1 --island-timeout 2
# (60 steps: island 0 must still be running when island 1 comes back, about 3 s after
# SIGCONT (its link reconnects), 10 commits on this machine; with 14 it could finish
# first, and island 1 met the ended run of the next case)
M3=$(echo "$M" | sed 's/--steps 40/--steps 60/')
timeout -k 5 150 $ATOLL train $M3 $(island_flags "$D" $CPORT 0 $P0) --out "$D/n0" >/dev/null 2>"$D/n0.err" &
PID0=$!
ATOLL_FAULT_COMMIT_SIGSTOP=6 timeout -k 5 150 $ATOLL train $M3 $(island_flags "$D" $CPORT 1 $P1) --out "$D/n1" >/dev/null 2>"$D/n1.err" &
PID1=$!
wait_log "island 1 left (silent" 60 || fail "stopped island 1 did not leave"
left=$(grep -c "committed" "$D/coord.log")
n=0; while [ "$(grep -c "committed" "$D/coord.log")" -lt $((left + 2)) ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
for c in $(pgrep -P $PID1); do kill -CONT "$c"; done
ok=1
wait $PID1 || { ok=0; fail "island 1, resumed after the others committed on: $(grep -v '^step' "$D/n1.err" | tail -n 2)"; }
wait $PID0 || { ok=0; fail "island 0: $(tail -n 2 "$D/n0.err")"; }
kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
[ $ok -eq 1 ] && grep -q "joined at step .*hash checked" "$D/n1.err" \
  && pass "island 1, silent in its commit of step 6, came back: $(grep -o 'it left meanwhile.*' "$D/coord.log" | head -1); $(grep -o 'joined at step [0-9]*' "$D/n1.err")" \
  || fail "island 1 did not join after its silent commit: $(grep -E 'left meanwhile|joined' "$D/coord.log" | tail -2)"

# --- an island that comes back after the run ended is told so at once ---
# island 1 falls silent in its commit of step 6 and leaves; island 0 runs to the end
# and stops itself before its goodbye (ATOLL_FAULT_BYE_SIGSTOP); island 1 comes back
# and re-registers, behind; then island 0 says goodbye. Nobody holds the committed
# state for island 1 any more: it must be told in one line (it waited 50 s for a
# commit that never came), and the coordinator ends.
D="$TMP/ended"; mkdir -p "$D"
net_keys "$D" 2 || { fail keys; finish; }
set -- $(free_ports 3); CPORT=$1; P0=$2; P1=$3
start_coordinator "$D" $CPORT 1 --island-timeout 6
ATOLL_FAULT_BYE_SIGSTOP=1 timeout -k 5 100 $ATOLL train $M2 $(island_flags "$D" $CPORT 0 $P0) --out "$D/n0" >/dev/null 2>"$D/n0.err" &
PID0=$!
ATOLL_FAULT_COMMIT_SIGSTOP=6 timeout -k 5 100 $ATOLL train $M2 $(island_flags "$D" $CPORT 1 $P1) --out "$D/n1" >/dev/null 2>"$D/n1.err" &
PID1=$!
# stopped PID: 0 when the process (a child of timeout PID) is stopped
stopped() { for c in $(pgrep -P "$1"); do [ "$(cut -d' ' -f3 "/proc/$c/stat" 2>/dev/null)" = T ] && return 0; done; return 1; }
wait_log "island 1 left (silent" 60 || fail "ended case: stopped island 1 did not leave"
n=0; while ! stopped $PID0 && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
stopped $PID0 || fail "ended case: island 0 did not reach its goodbye"
for c in $(pgrep -P $PID1); do kill -CONT "$c"; done
wait_log "island 1 commits step 6" 20 || fail "ended case: island 1 did not come back"
for c in $(pgrep -P $PID0); do kill -CONT "$c"; done
t0=$(date +%s)
wait $PID1; rc=$?
took=$(($(date +%s) - t0))
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ $took -le 15 ] && grep -q "the run ended at step 14 (revision 7) while island 1 was away" "$D/n1.err" \
  && pass "island 1, back after the run ended, is told so within $took s: $(grep -o 'the run ended.*' "$D/n1.err" | cut -c1-90)..." \
  || fail "island 1 back after the run ended (status $rc, $took s): $(grep -v '^step' "$D/n1.err" | tail -n 2)"
wait $PID0 || fail "ended case: island 0: $(tail -n 2 "$D/n0.err")"
n=0; while kill -0 $COORD_PID 2>/dev/null && [ $n -lt 150 ]; do sleep 0.1; n=$((n + 1)); done
if kill -0 $COORD_PID 2>/dev/null; then
  fail "ended case: the coordinator did not end"
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
else
  grep -q "island 1 asks to join, but the run ended at step 14" "$D/coord.log" && pass "the coordinator logged it and ended" \
    || fail "ended case: no line in the coordinator's log: $(tail -n 2 "$D/coord.log")"
fi
# --- an island told to stop leaves gracefully; started again with its first command,
# it continues its own run ---
D="$TMP/again"; mkdir -p "$D"
net_keys "$D" 2 || { fail keys; finish; }
set -- $(free_ports 3); CPORT=$1; P0=$2; P1=$3
start_coordinator "$D" $CPORT 1 --island-timeout 3
M4=$(echo "$M" | sed 's/--save-every 0/--save-every 2/; s/--sync-every 2/--sync-every 4/')
timeout -k 5 150 $ATOLL train $M4 $(island_flags "$D" $CPORT 0 $P0) --out "$D/n0" >/dev/null 2>"$D/n0.err" &
PID0=$!
timeout -k 5 150 $ATOLL train $M4 $(island_flags "$D" $CPORT 1 $P1) --out "$D/n1" >/dev/null 2>"$D/n1.err" &
PID1=$!
wait_log "committed: revision 2," 60 || fail "restart case: islands 0 and 1 did not commit twice"
for c in $(pgrep -P $PID1); do kill -TERM "$c"; done
wait $PID1; rc=$?
# (it says which sync it trains on to, unless the signal came right after one)
at=$(grep -o '^stopped at step [0-9]*' "$D/n1.err" | grep -o '[0-9]*$')
said=$(grep -o 'training on to its outer sync after step [0-9]*' "$D/n1.err" | grep -o '[0-9]*$')
[ $rc -eq 130 ] && [ -n "$at" ] && [ $((at % 4)) -eq 0 ] && [ "${said:-$at}" = "$at" ] && grep -q "island 1 finished (said goodbye" "$D/coord.log" \
  && grep -q "step $at committed: revision [0-9]*, 2 islands" "$D/coord.log" \
  && pass "island 1, sent SIGTERM, trained on to its sync after step $at${said:+ (as it said)}, contributed, saved and said goodbye" \
  || fail "restart case: SIGTERM (status $rc, sync ${at:-none}): $(grep -v '^step' "$D/n1.err" | tail -n 2); $(grep 'island 1' "$D/coord.log" | tail -n 2)"
timeout -k 5 150 $ATOLL train $M4 $(island_flags "$D" $CPORT 1 $P1) --out "$D/n1" >/dev/null 2>"$D/n1r.err" &
PID1=$!
ok=1
wait $PID1 || { ok=0; fail "restart case: island 1 started again: $(grep -v '^step' "$D/n1r.err" | tail -n 2)"; }
wait $PID0 || { ok=0; fail "restart case: island 0: $(tail -n 2 "$D/n0.err")"; }
kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
[ $ok -eq 1 ] && grep -q "holds this island's run: it continues from its latest checkpoint" "$D/n1r.err" && grep -q "^resuming from $D/n1/checkpoints/step_0*$at at step $at" "$D/n1r.err" \
  && pass "island 1 started again with its first command: $(grep -o '^resuming from.*' "$D/n1r.err" | sed "s|$D/||")" \
  || fail "restart case: island 1 did not continue its run: $(grep -v '^step' "$D/n1r.err" | head -n 3)"
out=$($PY "$SRC/tests/net/same_weights.py" "$D/n1" "$D/n0") && pass "restart case: island 1's global weights == island 0's ($out)" || fail "restart case: weights: $out"
# --- the islands' hashes differ at a commit: both stop ---
# An island sends COMMIT and trains on (docs/islands.md, "One outer sync", 4): a
# mismatch still stops the run. Island 1's global weights drift before step 2 (test
# hook ATOLL_FAULT_DESYNC_ISLAND=0: each island is island 0 of its own process): the
# coordinator commits nothing, and both islands stop within seconds, with status 1 and
# the coordinator's line, at the latest after the inner step that follows the commit
# (step 3; their next sync would be after step 4); the checkpoint due at step 2 waits
# for the commit's answer and is not written.
D="$TMP/mismatch"; mkdir -p "$D"
net_keys "$D" 2 || { fail keys; finish; }
set -- $(free_ports 3); CPORT=$1; P0=$2; P1=$3
start_coordinator "$D" $CPORT 2 --island-timeout 3
M5=$(echo "$M" | sed 's/--steps 40/--steps 12/; s/--islands 3/--islands 2/; s/--save-every 0/--save-every 2/')
t0=$(date +%s)
timeout -k 5 60 $ATOLL train $M5 $(island_flags "$D" $CPORT 0 $P0) --out "$D/n0" >/dev/null 2>"$D/n0.err" &
PID0=$!
ATOLL_FAULT_DESYNC_ISLAND=0 timeout -k 5 60 $ATOLL train $M5 $(island_flags "$D" $CPORT 1 $P1) --out "$D/n1" >/dev/null 2>"$D/n1.err" &
PID1=$!
wait $PID0; rc0=$?
wait $PID1; rc1=$?
took=$(($(date +%s) - t0))
kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
last0=$(tail -n 1 "$D/n0/metrics.jsonl" 2>/dev/null | grep -o '"step": [0-9]*' | grep -o '[0-9]*$')
last1=$(tail -n 1 "$D/n1/metrics.jsonl" 2>/dev/null | grep -o '"step": [0-9]*' | grep -o '[0-9]*$')
[ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] && [ $took -le 30 ] && [ "${last0:-9}" -le 3 ] && [ "${last1:-9}" -le 3 ] \
  && grep -q "the islands' global weights differ" "$D/n0.err" && grep -q "the islands' global weights differ" "$D/n1.err" \
  && grep -q "step 2: hash mismatch between islands; nothing committed" "$D/coord.log" && ! grep -q "committed: revision" "$D/coord.log" \
  && ! ls -d "$D"/n*/checkpoints/step_* >/dev/null 2>&1 \
  && pass "a hash mismatch at the commit of step 2 stops both islands after step ${last0} and ${last1} ($took s), neither saving its checkpoint of step 2: $(grep -o 'error: .*' "$D/n0.err" | cut -c1-80)..." \
  || fail "mismatch case: status $rc0 and $rc1, last steps ${last0:-none} and ${last1:-none}, $took s: $(grep -v '^step' "$D/n0.err" | tail -n 1); $(grep -v '^step' "$D/n1.err" | tail -n 1)"
finish

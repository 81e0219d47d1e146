#!/bin/sh
# An open run (docs/islands.md, "Open membership"): a coordinator with --open 1 and a
# --run file without "islands"; islands started with only the coordinator's address,
# its key, their own key, --data and --out (no --islands, no --island-id). Asserted:
# - the second island's key is copied into allowed/ after the coordinator started and
#   still joins (allowed/ is read again; a bad file there is skipped, said once), each
#   key gets its own slot (0, 1);
# - the data goes out in units: the fresh units handed out are 0, 1, 2, ... each once;
# - island 1 is SIGKILLed mid-run: it leaves when its connection closes (1.5 s later,
#   not after --island-timeout); its uncommitted phases' units go out again, to island 0,
#   before any fresh unit;
# - island 1 restarted with the same command continues its run from its checkpoint,
#   with the same slot;
# - the coordinator is SIGKILLed and restarted with its --state: slots and units carry
#   on (no fresh unit is handed out twice across both coordinator processes);
# - both islands end with status 0 and the same global weights; the coordinator ends
#   with "every island finished"; its state file accounts for every unit (done +
#   returned + held = handed out) and counts the units handed out again;
# - the WELCOME says whether the coordinator reached the island's data endpoint (a
#   ZeroMQ greeting there; a WARNING line for a port nothing listens at, for a wildcard
#   address and for an ipc:// path);
# - a restarted coordinator gives back the units of an island that never came back;
# - a member that applied an exchange and died before its COMMIT: its phase's unit is
#   done at the commit made without it, only the unit it asked ahead goes out again;
#   UNITS for phases that are not the run's are refused in one line;
# - refusals in one line: --open 1 without --run, a --run with islands or fragments 2,
#   --data-units 1 without --join, an open run's state file without --open 1; an
#   island started with its own --islands and --island-id.
#   usage: test_islands_open.sh ATOLL SRC NET_PEER
ATOLL=$1; SRC=$2; NET_PEER=$3
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
. "$SRC/tests/net/islands_lib.sh"
small_data
D=$TMP/open
mkdir -p "$D"
net_keys "$D" 3 || { echo "FAIL: keys"; exit 1; }
rm "$D/coord/allowed/i1.pub" # island 1's key is allowed later
cat >"$D/run.json" <<'EOF'
{"layers": 2, "heads": 2, "dim": 32, "context": 32, "batch": 2, "threads": 1, "steps": 45, "sync-every": 3,
 "eval-every": 0, "eval-batches": 1, "save-every": 3}
EOF
PORT=$(free_ports 1)
coord() { start_coordinator "$D" $PORT 1 --open 1 --run "$D/run.json" --island-timeout 2; }
island() { # K: island K with only its coordinator, keys, data and out; 150 ms per step
  ATOLL_TEST_STEP_MS=150 timeout -k 5 120 $ATOLL train --join tcp://127.0.0.1:$PORT --coordinator-key "$D/coord/key.pub" \
    --island-key "$D/i$1/key.secret" --data "$TMP/data" --out "$D/net$1" >>"$D/net$1.err" 2>&1
}
wait_for() { # FILE PATTERN SECONDS
  i=0; while ! grep -q -- "$2" "$1" 2>/dev/null && [ $i -lt $(($3 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
  grep -q -- "$2" "$1"
}
coord
C1=$COORD_PID
island 0 & P0=$!
sleep 1
echo "not a key" >"$D/coord/allowed/junk.pub" # (skipped when read again, said once)
cp "$D/i1/key.pub" "$D/coord/allowed/i1.pub"
wait_for "$D/coord.log" "new island key" 10 || fail "the coordinator did not read allowed/ again"
# an island given a slot of its own (--islands, --island-id) is refused by an open run
timeout -k 5 60 $ATOLL train $TINY --data "$TMP/data" --out "$D/fixed" --islands 2 --island-id 0 --join tcp://127.0.0.1:$PORT \
  --coordinator-key "$D/coord/key.pub" --island-key "$D/i2/key.secret" --sync-every 3 >"$D/fixed.out" 2>"$D/fixed.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "this is an open run" "$D/fixed.err" && pass "an island with its own --islands/--island-id refused: $(grep -o 'this is an open run.*' "$D/fixed.err" | cut -c1-100)" \
  || fail "an island with its own slot: status $rc: $(tail -n 2 "$D/fixed.err")"
island 1 & P1=$!
wait_for "$D/coord.log" "island 1 takes unit [0-9]* for steps (3, 6]" 20 && sleep 1 || fail "island 1 took no units"
pkill -9 -f -- "$D/i1/key.secret" # (the atoll process itself: P1 is the shell function's)
wait $P1 2>/dev/null
wait_for "$D/coord.log" "island 1 left: the units of its" 10 && pass "killed island 1: $(grep -o 'island 1 left: the units.*' "$D/coord.log")" \
  || fail "killed island 1: its units did not go back: $(tail -n 3 "$D/coord.log")"
# (its connections closed with it: it left then, not after --island-timeout of silence)
grep -q "island 1 left (its connection closed 1.[5-9] s ago, not heard since" "$D/coord.log" \
  && pass "killed island 1 left when its connection closed: $(grep -o 'island 1 left (its connection.*' "$D/coord.log" | cut -c1-80)" \
  || fail "killed island 1: $(grep 'island 1 left' "$D/coord.log")"
island 1 & P1=$!
wait_for "$D/net1.err" "continues from its latest checkpoint" 10 && pass "island 1 restarted with the same command continues its run" \
  || fail "island 1 restarted: $(head -n 3 "$D/net1.err")"
sleep 2
rm "$D/coord/allowed/junk.pub"
kill9 $C1
mv "$D/coord.log" "$D/coord1.log"
coord
wait $P0; R0=$?
wait $P1; R1=$?
wait $COORD_PID; RC=$?
cat "$D/coord1.log" "$D/coord.log" >"$D/coords.log"
[ $R0 -eq 0 ] && [ $R1 -eq 0 ] && pass "both islands finished" || fail "statuses $R0 $R1: $(tail -n 2 "$D/net0.err") / $(tail -n 2 "$D/net1.err")"
[ $RC -eq 0 ] && grep -q "every island finished" "$D/coord.log" && pass "the coordinator ended: $(grep -o 'every island finished.*' "$D/coord.log" | cut -c1-120)" \
  || fail "coordinator: status $RC: $(tail -n 2 "$D/coord.log")"
grep -q "2 island keys allowed" "$D/coord1.log" && grep -q "takes island slot 0" "$D/coord1.log" && grep -q "takes island slot 1" "$D/coord1.log" \
  && pass "slots by key: 0 and 1, the second key allowed after the start" || fail "slots: $(grep slot "$D/coord1.log")"
n=$(grep -c "junk.pub.*(the file is skipped)" "$D/coord1.log")
[ "$n" -eq 1 ] && pass "a bad file in allowed/ is skipped when read again, said once: $(grep -o 'reading the allow-list again.*' "$D/coord1.log" | cut -c1-100)" \
  || fail "a bad file in allowed/: said $n times: $(grep 'allow-list' "$D/coord1.log" | head -n 2)"
grep -q "island slot 1" "$D/net1.err" && ! grep "takes island slot" "$D/coord.log" >/dev/null \
  && pass "the restarted coordinator knew both keys' slots" || fail "slots after the restart: $(grep slot "$D/coord.log")"
out=$($PY - "$D/coords.log" "$D/coord/coordinator.json" <<'EOF'
import json, re, sys
fresh, again, seen, back = [], [], set(), 0
for line in open(sys.argv[1]):
    m = re.search(r"island (\d+) takes unit (\d+) for steps \((\d+), (\d+)\]( \(again)?", line)
    if m:
        u = int(m.group(2))
        if m.group(5):
            if u not in seen: sys.exit(f"unit {u} handed out again before it was ever handed out")
            again.append(u)
        else:
            if u in seen: sys.exit(f"fresh unit {u} handed out twice")
            fresh.append(u)
        seen.add(u)
    m = re.search(r"left: the units of its (\d+)", line)
    if m: back += int(m.group(1))
if fresh != list(range(len(fresh))): sys.exit(f"fresh units not 0, 1, 2, ...: {fresh}")
s = json.load(open(sys.argv[2]))["units"]
held = len(s["held"])
if s["next"] != len(fresh): sys.exit(f"state next {s['next']}, {len(fresh)} fresh units logged")
if s["done"] + len(s["returned"]) + held != s["next"]: sys.exit(f"units lost from the books: {s}")
if s["again"] != len(again): sys.exit(f"state again {s['again']}, {len(again)} logged")
if not again: sys.exit("no unit went out again after the kill")
print(f"{len(fresh)} fresh units 0..{len(fresh) - 1} each once, {len(again)} handed out again ({again}), "
      f"{back} given back by leaving islands; done {s['done']}, returned {len(s['returned'])}, held {held}")
EOF
) && pass "units: $out" || fail "units: $out"
# the units given back at the kill went out again before any fresh unit
out=$($PY - "$D/coord1.log" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
k = next(i for i, l in enumerate(lines) if "island 1 left: the units" in l)
n = int(re.search(r"its (\d+) uncommitted", lines[k]).group(1))
after = [l for l in lines[k + 1:] if "takes unit" in l][:n]
if len(after) < n or not all("(again" in l for l in after): sys.exit("after the kill: " + " | ".join(after))
print(f"the {n} unit(s) given back went out next: " + "; ".join(re.search(r"takes unit \d+", l).group(0) for l in after))
EOF
) && pass "$out" || fail "units after the kill: $out"
out=$($PY "$SRC/tests/net/same_weights.py" "$D/net0" "$D/net1") && pass "both islands end with the same global weights: $out" \
  || fail "the islands' global weights differ: $out"

# an island that holds units and never comes back to a restarted coordinator (it died
# while the coordinator was down): after --island-timeout its units go out again
cp "$D/coord/coordinator.json" "$D/held.json"
want=$($PY -c 'import json, sys
s = json.load(open(sys.argv[1]))
u = s["units"]
u["held"] = [{"island": 1, "start": 45, "end": 48, "unit": u["next"], "started": True}]
u["next"] += 1 # (the books balance: a unit handed out is done, returned or held)
json.dump(s, open(sys.argv[1], "w"))
print([], [u["next"] - 1])' "$D/held.json")
timeout -k 5 30 $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --open 1 --run "$D/run.json" --state "$D/held.json" \
  --island-timeout 1 --run-seconds 4 >"$D/held.log" 2>&1
out=$($PY -c 'import json, sys; u = json.load(open(sys.argv[1]))["units"]; print(u["held"], u["returned"][-1:])' "$D/held.json")
grep -q "island 1 is not here" "$D/held.log" && [ "$out" = "$want" ] && pass "units of an island gone while the coordinator was down go back: $(grep -o 'island 1 is not here.*' "$D/held.log")" \
  || fail "units of a gone island: held, last returned $out: $(tail -n 2 "$D/held.log")"

# reachability: the WELCOME says whether the coordinator reached each island's data
# endpoint (a ZeroMQ greeting there), before any compute
grep -q "its data endpoint tcp://127.0.0.1:[0-9]* answered the coordinator" "$D/net0.err" \
  && pass "island 0's data endpoint answered the coordinator's probe" || fail "no probe line: $(grep 'took this' "$D/net0.err")"
P2=$(free_ports 1)
timeout -k 5 30 $ATOLL coordinator --listen tcp://127.0.0.1:$P2 --keys "$D/coord" --min-islands 1 --island-timeout 4 >"$D/probe.log" 2>&1 &
PC=$!
timeout -k 5 60 $ATOLL train $TINY --data "$TMP/data" --out "$D/probe" --islands 1 --island-id 0 --join tcp://127.0.0.1:$P2 \
  --coordinator-key "$D/coord/key.pub" --island-key "$D/i2/key.secret" --sync-every 3 --steps 3 --save-every 0 \
  --island-listen 'tcp://*:0' --island-advertise tcp://127.0.0.1:1 >"$D/probe.out" 2>"$D/probe.err"
rc=$?
wait $PC
[ $rc -eq 0 ] && grep -q "WARNING: its data endpoint tcp://127.0.0.1:1 did not answer the coordinator" "$D/probe.err" \
  && pass "an endpoint nothing listens at: $(grep -o 'WARNING.*' "$D/probe.err" | cut -c1-110)" || fail "probe of a closed port: status $rc: $(grep -i 'took\|error' "$D/probe.err")"

# a member that applied an exchange and died before its COMMIT (net_peer applied): the
# commit, made without it once it is gone, took its phase in; that unit is done, and
# only the unit it asked ahead goes out again (it went back before the commit marked it
# done, and was trained twice)
printf '{"sync-every": 3, "steps": 9, "layers": 2, "heads": 2, "dim": 32, "context": 32}' >"$D/applied_run.json"
P3=$(free_ports 1)
timeout -k 5 30 $ATOLL coordinator --listen tcp://127.0.0.1:$P3 --keys "$D/coord" --open 1 --run "$D/applied_run.json" \
  --state "$D/applied.json" --min-islands 2 --island-timeout 2 --run-seconds 12 >"$D/applied.log" 2>&1 &
PC=$!
# (an island with an inner phase of its own, 4 steps: its UNITS are refused in one line)
NET_PEER_STEP=4 timeout -k 5 20 "$NET_PEER" tcp://127.0.0.1:$P3 "$D/coord/key.pub" "$D/i1/key.secret" 0 applied 5 >"$D/peer_c.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "ERROR: UNITS: phases (0, 4\] and (4, 8\] are not this run's (an inner phase of 3 steps, --steps 9)" "$D/peer_c.out" \
  && pass "UNITS of phases not the run's refused: $(grep -o 'ERROR.*' "$D/peer_c.out" | cut -c1-110)" || fail "UNITS of another phase: status $rc: $(cat "$D/peer_c.out")"
NET_PEER_STEP=3 timeout -k 5 20 "$NET_PEER" tcp://127.0.0.1:$P3 "$D/coord/key.pub" "$D/i0/key.secret" 0 applied 10 >"$D/peer_a.out" 2>&1 &
PA=$!
NET_PEER_STEP=3 NET_PEER_COMMIT=1 timeout -k 5 20 "$NET_PEER" tcp://127.0.0.1:$P3 "$D/coord/key.pub" "$D/i2/key.secret" 0 applied 10 >"$D/peer_b.out" 2>&1
RB=$?
wait $PA; RA=$?
kill $PC 2>/dev/null; wait $PC
out=$($PY - "$D/applied.json" "$D/peer_a.out" 2>&1 <<'EOF'
import json, re, sys
u = json.load(open(sys.argv[1]))["units"]
m = re.search(r"slot (\d+) units (\d+) (\d+)", open(sys.argv[2]).read())
if not m: sys.exit("peer a: no units")
slot, mine, ahead = (int(g) for g in m.groups())
past = [h["unit"] for h in u["past"] if h["island"] == slot]
if u["done"] != 2 or past != [mine] or u["returned"] != [ahead] or any(h["island"] == slot for h in u["held"]):
    sys.exit(f"peer a's units {mine} (trained, applied) and {ahead} (ahead): done {u['done']}, its past {past}, returned {u['returned']}")
print(f"its unit {mine} done, only the unit asked ahead ({ahead}) returned")
EOF
)
[ $RA -eq 0 ] && [ $RB -eq 0 ] && grep -q "^applied" "$D/peer_a.out" && grep -q "^committed" "$D/peer_b.out" \
  && grep -q "its 1 uncommitted phase" "$D/applied.log" && echo "$out" | grep -q "^its unit" && pass "a member gone between applying and committing: $out" \
  || fail "a member gone between applying and committing: $RA $RB $out: $(tail -n 3 "$D/applied.log") / $(tail -n 1 "$D/peer_a.out") / $(tail -n 1 "$D/peer_b.out")"

# a member dropped between its GO and its COMMIT (silent past --island-timeout) that
# registers again by its heartbeat still commits the step (its entry in the commit group
# is taken back; the step waited for ever)
P5=$(free_ports 1)
timeout -k 5 30 $ATOLL coordinator --listen tcp://127.0.0.1:$P5 --keys "$D/coord" --open 1 --run "$D/applied_run.json" \
  --min-islands 1 --island-timeout 1 --run-seconds 12 >"$D/again.log" 2>&1 &
PC=$!
NET_PEER_STEP=3 NET_PEER_COMMIT=1 NET_PEER_SILENT=1.8 timeout -k 5 20 "$NET_PEER" tcp://127.0.0.1:$P5 "$D/coord/key.pub" "$D/i0/key.secret" 0 applied 8 >"$D/peer_d.out" 2>&1
rc=$?
kill $PC 2>/dev/null; wait $PC
[ $rc -eq 0 ] && grep -q "^committed" "$D/peer_d.out" && grep -q "left (silent" "$D/again.log" && grep -q "step 3 committed" "$D/again.log" \
  && pass "a member dropped between GO and COMMIT registers again and commits: $(grep -o 'step 3 committed.*' "$D/again.log" | cut -c1-60)" \
  || fail "a member dropped between GO and COMMIT: status $rc: $(tail -n 2 "$D/again.log") / $(tail -n 1 "$D/peer_d.out")"

# a connection that closes just before an island connects (a port scan, a health check)
# often hands its descriptor number to the island's: its close must not mark the island,
# which would leave 1.5 s later though alive (each trial: a raw TCP connect and close,
# then an island silent for 2.5 s after its HELLO, under --island-timeout 10)
P6=$(free_ports 1)
timeout -k 5 30 $ATOLL coordinator --listen tcp://127.0.0.1:$P6 --keys "$D/coord" --min-islands 1 --island-timeout 10 --run-seconds 12 >"$D/reuse.log" 2>&1 &
PC=$!
sleep 0.3
for t in 1 2 3; do
  $PY -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()' $P6
  timeout -k 5 10 "$NET_PEER" tcp://127.0.0.1:$P6 "$D/coord/key.pub" "$D/i0/key.secret" 0 hello 2.5 >>"$D/reuse.out" 2>&1
  sleep 0.2
done
kill $PC 2>/dev/null; wait $PC
n=$(grep -c "island 0 left (its connection closed" "$D/reuse.log")
# (each trial's peer closes at its end: a "left" may follow the last one, 1.5 s later,
# never one during a trial: the next trial's HELLO comes first)
out=$(awk '/island 0 joined|restarted/ { t++ } /island 0 left \(its connection/ { print "left after trial " t }' "$D/reuse.log")
[ "$n" -eq 0 ] || [ "$out" = "left after trial 3" ] \
  && pass "a reused descriptor's old close does not mark a live island (3 trials; left lines: $n)" \
  || fail "a live island left for another connection's close: $(grep 'island 0' "$D/reuse.log" | tail -n 4)"

# endpoints the probe cannot reach rightly: a wildcard address (a connect there reaches
# the coordinator's own machine) and a path (ipc://) are said as such, not "answered"
P4=$(free_ports 1)
timeout -k 5 20 $ATOLL coordinator --listen tcp://127.0.0.1:$P4 --keys "$D/coord" --min-islands 1 --island-timeout 4 --run-seconds 3 >"$D/wild.log" 2>&1 &
PC=$!
for ep in tcp://0.0.0.0:1 'tcp://[::]:1' ipc:///tmp/atoll-none; do
  NET_PEER_ENDPOINT=$ep timeout -k 5 10 "$NET_PEER" tcp://127.0.0.1:$P4 "$D/coord/key.pub" "$D/i0/key.secret" 0 hello 0.7 >>"$D/wild.out" 2>&1
done
wait $PC
n=$(grep -c "WARNING: its data endpoint .* is a wildcard address\|WARNING: its data endpoint ipc:///tmp/atoll-none is not a tcp:// address" "$D/wild.out")
[ "$n" -eq 3 ] && ! grep -q answered "$D/wild.out" && pass "wildcard and ipc:// endpoints are warned about, not probed: $(grep -o 'WARNING.*' "$D/wild.out" | head -n 1 | cut -c1-90)" \
  || fail "wildcard and ipc:// endpoints: $n warnings: $(cat "$D/wild.out")"

# refusals
printf '{"islands": 2, "sync-every": 3}' >"$TMP/k.json"
printf '{"sync-every": 3, "fragments": 3, "layers": 3}' >"$TMP/f.json"
expect_error "--open without --run" "needs --run FILE" $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --open 1
expect_error "--open with islands" "no fixed number of islands" $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --open 1 --run "$TMP/k.json"
expect_error "--open with fragments 3" "fragments 1" $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --open 1 --run "$TMP/f.json"
expect_error "--open 2" "expected 0 or 1" $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --open 2 --run "$D/run.json"
expect_error "--data-units without --join" "needs --join" $ATOLL train $TINY --data "$TMP/data" --out "$TMP/x" --data-units 1
expect_error "an open run's state without --open" "start the coordinator with --open 1" \
  $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --state "$D/coord/coordinator.json" --run-seconds 1
finish

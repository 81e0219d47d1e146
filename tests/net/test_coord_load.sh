#!/bin/sh
# The real coordinator under 300 light clients (bench/coord_load.c), more than the 256
# members it holds (MAX_MEMBERS, src/net/coordinator_int.h). Proves:
# 1. 256 are admitted and each of the other 44 gets one ERROR that names the maximum
#    (it was once dropped unanswered: the island waited out its limit), while the
#    coordinator's log says the refusal at most a few times (once per 10 s);
# 2. every admitted client's READY is answered (WAIT, the coordinator's --min-islands
#    above the members), round after round, heartbeats meanwhile;
# 3. with --min-islands 256 (a second coordinator), one full exchange of the 256
#    (READY, QUORUM, DONE, GO, COMMIT, COMMITTED) commits, and the 44 are refused again.
# Asserts on behaviour, never on timings. Loopback only; every process runs under
# timeout. About 6-15 s.
#   usage: test_coord_load.sh ATOLL COORD_LOAD SRC
ATOLL=$1; LOAD=$2; SRC=$3
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
D="$TMP/load"; mkdir -p "$D"
"$LOAD" --setup "$D/keys" --clients 300 >/dev/null || { fail "coord_load --setup"; finish; }

# field FILE NAME: member NAME of the JSON line in FILE
field() { $PY -c 'import json, sys; print(json.loads(open(sys.argv[1]).read())[sys.argv[2]])' "$1" "$2" 2>/dev/null; }
# expect FILE NAME VALUE WHAT
expect() {
  got=$(field "$1" "$2")
  if [ "$got" = "$3" ]; then pass "$4 ($2 $got)"; else fail "$4: $2 is '$got', expected $3 ($(cat "$1"))"; fi
}
# coord RUN MIN: a coordinator on a free port, log in $D/RUN.log; sets PORT and CPID
coord() {
  PORT=$(free_ports 1)
  timeout -k 5 120 $ATOLL coordinator --listen tcp://127.0.0.1:$PORT --keys "$D/keys" --min-islands "$2" \
    --state "$D/$1.state" >"$D/$1.log" 2>&1 &
  CPID=$!
  i=0 # (listening: the clients' HELLOs would wait in their queues anyway, but a start that fails is said here)
  while [ $i -lt 100 ] && ! grep -q "listening on" "$D/$1.log"; do sleep 0.1; i=$((i + 1)); done
  grep -q "listening on" "$D/$1.log" || fail "$1: the coordinator did not start: $(head -3 "$D/$1.log")"
}
stop() { kill "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null; }

# --- 1 and 2: 300 clients, READY answered by WAIT ------------------------------------
coord wait 257
timeout 60 "$LOAD" --endpoint tcp://127.0.0.1:$PORT --keys "$D/keys" --clients 300 --seconds 3 --rtt ready \
  --admit-timeout 20 --coordinator-pid "$CPID" >"$D/wait.json" 2>"$D/wait.err" || fail "coord_load: $(cat "$D/wait.err")"
stop
expect "$D/wait.json" admitted 256 "256 clients admitted"
expect "$D/wait.json" refused 44 "the other 44 refused"
expect "$D/wait.json" refused_one_error 44 "each refused client got one ERROR naming the maximum"
expect "$D/wait.json" unanswered 0 "no HELLO unanswered"
expect "$D/wait.json" admitted_told_full 0 "no admitted client told that the coordinator is full"
expect "$D/wait.json" rtt_clients_answered 256 "every admitted client's READY answered by WAIT"
expect "$D/wait.json" rtt_unanswered 0 "no READY left unanswered"
case "$(field "$D/wait.json" refusal)" in
  *"holds its most members (256)"*) pass "the refusal names the maximum: $(field "$D/wait.json" refusal)" ;;
  *) fail "the refusal does not name the maximum 256: '$(field "$D/wait.json" refusal)'" ;;
esac
said=$(grep -c "the most it holds" "$D/wait.log")
if [ "$said" -ge 1 ] && [ "$said" -le 3 ]; then pass "the coordinator's log says the refusal $said time(s) for 44 refused"
else fail "the coordinator's log says the refusal $said times (expected 1 to 3: once per 10 s)"; fi
grep -q "dropped HELLO" "$D/wait.log" && fail "a HELLO was dropped unanswered: $(grep -m1 'dropped HELLO' "$D/wait.log")"

# --- 3: one full exchange of the 256 -------------------------------------------------
coord exchange 256
timeout 60 "$LOAD" --endpoint tcp://127.0.0.1:$PORT --keys "$D/keys" --clients 300 --seconds 0 --exchange 1 \
  --admit-timeout 20 --exchange-timeout 20 --coordinator-pid "$CPID" >"$D/x.json" 2>"$D/x.err" || fail "coord_load: $(cat "$D/x.err")"
stop
expect "$D/x.json" admitted 256 "256 admitted again"
expect "$D/x.json" refused_one_error 44 "44 refused again, one ERROR each"
expect "$D/x.json" x_members 256 "the QUORUM lists the 256"
expect "$D/x.json" x_committed 256 "every member got COMMITTED"
expect "$D/x.json" x_aborts 0 "no exchange aborted"
if grep -q "committed: revision 1, 256 islands" "$D/exchange.log"; then pass "the coordinator committed revision 1 of 256 islands"
else fail "no commit of 256 islands in the coordinator's log: $(grep -v joined "$D/exchange.log" | tail -3)"; fi
finish

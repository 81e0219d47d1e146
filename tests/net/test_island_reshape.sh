#!/bin/sh
# An island restarted with another rank count (docs/islands.md): a 2-rank island 0
# whose rank 0 registered dies, and island 0 starts again as one process with the
# same key. The coordinator drops the old incarnation's ranks and adopts the new
# shape when no other island sets the run's (the island gets its quorum), or refuses
# it with one line when another island holds the run's 2-rank layout.
#   usage: test_island_reshape.sh ATOLL NET_PEER
set -u
ATOLL=$1
PEER=$2
T=$(mktemp -d)
COORD_PID=
trap '[ -n "$COORD_PID" ] && kill $COORD_PID 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; echo "--- coordinator log"; cat "$T/coord.log"; exit 1; }
# seen PATTERN: the coordinator's log has a line matching PATTERN within 10 s (on a loaded
# machine a peer's message may be logged after the peer has gone)
seen() {
  i=0
  while ! grep -q -- "$1" "$T/coord.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  grep -q -- "$1" "$T/coord.log"
}

$ATOLL keys --out "$T/coord" >/dev/null || fail "keys"
for k in zero one; do $ATOLL keys --out "$T/$k" >/dev/null || fail "keys $k"; cp "$T/$k/key.pub" "$T/coord/allowed/$k.pub"; done
CPUB="$T/coord/key.pub"

start() {
  rm -f "$T/coord/coordinator.json"
  PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  EP=tcp://127.0.0.1:$PORT
  : >"$T/coord.log"
  timeout 60 $ATOLL coordinator --listen $EP --keys "$T/coord" --min-islands 1 --island-timeout 30 >"$T/coord.log" 2>&1 &
  COORD_PID=$!
  # (up to 20 s: on the loaded machine a process took 3 s from the fork to its exec)
  for i in $(seq 1 100); do grep -q "listening on $EP" "$T/coord.log" && break; sleep 0.2; done
  grep -q "listening on $EP" "$T/coord.log" || fail "coordinator did not start"
}
stop() { kill $COORD_PID; wait $COORD_PID 2>/dev/null; COORD_PID=; }

# 1. adopted: island 0 was the run's only island
start
NET_PEER_RANKS=2 $PEER $EP "$CPUB" "$T/zero/key.secret" 0 hello 1.5 >/dev/null 2>&1
seen "island 0 rank 0 of 2 joined" || fail "the 2-rank incarnation did not register"
$PEER $EP "$CPUB" "$T/zero/key.secret" 0 ready 3 >"$T/new.out" 2>&1
grep -q "reply QUORUM" "$T/new.out" || fail "the 1-process island 0 got no quorum: $(cat "$T/new.out")"
seen "island 0 restarted with 1 rank(s), was 2" || fail "no line for the reshaped restart"
grep -q "of its 2 ranks registered" "$T/new.out" && fail "the coordinator kept the stale rank count"
stop

# 2. refused: island 1 (2 ranks, alive) holds the run's layout
start
NET_PEER_RANKS=2 $PEER $EP "$CPUB" "$T/one/key.secret" 1 hello 1 >/dev/null 2>&1
seen "island 1 rank 0 of 2 joined" || fail "island 1 did not register"
NET_PEER_RANKS=2 $PEER $EP "$CPUB" "$T/zero/key.secret" 0 hello 1 >/dev/null 2>&1
seen "island 0 rank 0 of 2 joined" || fail "island 0's 2-rank incarnation did not register"
$PEER $EP "$CPUB" "$T/zero/key.secret" 0 ready 3 >"$T/new.out" 2>&1
seen "island 0 restarted with 1 rank(s), was 2" || fail "no line for the reshaped restart (2)"
seen "island 0 has 1 rank(s), the run's islands have 2.*refused" || fail "the mismatched shape was not refused with a line"
grep -q "reply ERROR" "$T/new.out" || fail "the refused island was not told: $(cat "$T/new.out")"
grep -q "reply QUORUM" "$T/new.out" && fail "a refused island got a quorum"
stop
echo "ok: a reshaped island is adopted alone and refused against the run's layout"

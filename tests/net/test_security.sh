#!/bin/sh
# The coordinator's door (docs/islands.md): an island with an unknown key is refused
# during the handshake; malformed, truncated, oversized and replayed messages from an
# allowed key are dropped with a log line naming the peer, and the coordinator carries
# on (a well-formed island still joins and gets its quorum afterwards). READYs from an
# allowed key that is not a member are ignored with one line, not one per message.
#   usage: test_security.sh ATOLL NET_PEER
set -u
ATOLL=$1
PEER=$2
T=$(mktemp -d)
COORD_PID=
trap '[ -n "$COORD_PID" ] && kill $COORD_PID 2>/dev/null; [ -n "${KEEP_LOG:-}" ] && cp "$T/coord.log" "$KEEP_LOG"; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; echo "--- coordinator log"; cat "$T/coord.log"; exit 1; }
# seen PATTERN: the coordinator's log has a line matching PATTERN within 10 s (a loaded
# machine, a sanitizer build: the peer's message may be logged after the peer is gone)
seen() {
  i=0
  while ! grep -q -- "$1" "$T/coord.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  grep -q -- "$1" "$T/coord.log"
}

$ATOLL keys --out "$T/coord" >/dev/null || fail "keys"
for k in good bad stranger; do $ATOLL keys --out "$T/$k" >/dev/null || fail "keys $k"; done
cp "$T/good/key.pub" "$T/coord/allowed/good.pub"
cp "$T/bad/key.pub" "$T/coord/allowed/bad.pub"
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
EP=tcp://127.0.0.1:$PORT
timeout 100 $ATOLL coordinator --listen $EP --keys "$T/coord" --min-islands 2 --island-timeout 30 --state "$T/coord/coordinator.json" >"$T/coord.log" 2>&1 &
COORD_PID=$!
i=0
while ! grep -q "listening on $EP" "$T/coord.log" && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
grep -q "listening on $EP" "$T/coord.log" || fail "coordinator did not start"
CPUB="$T/coord/key.pub"

# 1. unknown key: refused in the handshake, never joins
$PEER $EP "$CPUB" "$T/stranger/key.secret" 7 hello 2 >"$T/stranger.out" 2>&1
seen "refused a connection from 127.0.0.1: CURVE key .* is not in the allow-list" || fail "unknown key not refused with a log line"
grep -q "island 7 joined" "$T/coord.log" && fail "unknown key joined"

# 2. garbage from an allowed key: each kind dropped with a line naming the peer
for kind in truncated oversized badmagic badtype badversion trailing multipart; do
  $PEER $EP "$CPUB" "$T/bad/key.secret" 3 $kind 1 >/dev/null 2>&1
done
for why in "truncated" "oversized" "bad magic" "unknown message type 200" "wire version 9" "trailing bytes"; do
  seen "dropped a message from peer with key .*$why" || fail "no drop line for: $why"
done
seen "dropped a message from .*: more than one frame" || fail "multipart message not dropped"
[ "$(grep -c 'dropped a message from peer with key .* at 127.0.0.1' "$T/coord.log")" -ge 7 ] || fail "expected 7 drop lines naming key and address"

# 3. replayed message: the second copy is dropped
$PEER $EP "$CPUB" "$T/bad/key.secret" 3 replay 1.5 >/dev/null 2>&1
seen "island 3 joined" || fail "the first copy of the replayed HELLO did not register"
seen "dropped HELLO from island 3 (key .*): replayed" || fail "replay not dropped"

# 3b. READYs from an allowed key that is not a member (an island that left, or that a
#     restarted coordinator does not know yet, repeats its READY): ignored, said once,
#     not logged as a drop per message (10 READYs in 5 s here)
$PEER $EP "$CPUB" "$T/good/key.secret" 5 readyonly 5 >/dev/null 2>&1
seen "ignored READY from peer with key .*: not a member" || fail "no line for READYs from a key that is not a member"
[ "$(grep -c "ignored READY from peer with key" "$T/coord.log")" -eq 1 ] && ! grep -q "dropped READY" "$T/coord.log" \
  || fail "READYs from a key that is not a member: $(grep -c "READY from peer" "$T/coord.log") lines, expected 1"

# 4. the coordinator carries on: a good island joins, and with island 3 forms a quorum
#    (--min-islands 2: island 3, ready first, is told to wait until island 5 comes)
$PEER $EP "$CPUB" "$T/bad/key.secret" 3 ready 15 >"$T/bad.out" 2>&1 &
P1=$!
seen "waiting for islands: 1 present, at least 2 needed" || fail "no waiting line below --min-islands"
$PEER $EP "$CPUB" "$T/good/key.secret" 5 ready 3 >"$T/good.out" 2>&1
wait $P1
seen "island 5 joined" || fail "a good island could not join after the garbage"
grep -q "reply QUORUM" "$T/good.out" || fail "good island got no quorum: $(cat "$T/good.out")"
grep -q "reply QUORUM" "$T/bad.out" || fail "island 3 got no quorum: $(cat "$T/bad.out")"
kill $COORD_PID; wait $COORD_PID 2>/dev/null; COORD_PID=
[ -f "$T/coord/coordinator.json" ] || fail "no state file"
grep -q '"endpoint"' "$T/coord/coordinator.json" || fail "state file lacks members"
echo "test_security: ok"

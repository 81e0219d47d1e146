#!/bin/sh
# The coordinator's door (docs/islands.md): an island with an unknown key is refused
# during the handshake with one line; junk bytes, a ZMTP greeting announcing a 2^63-byte
# frame and another coordinator key each leave one line naming the address; malformed, truncated, oversized and replayed messages from an
# allowed key are dropped with a log line naming the peer, and the coordinator carries
# on (a well-formed island still joins and gets its quorum afterwards); a replay stays
# dropped however many new sessions the key opens meanwhile. READYs from an allowed key
# that is not a member are ignored with one line, not one per message. A real island
# proves its keys before any compute: taken (one line), or refused in one line naming
# --island-key or --coordinator-key, within seconds.
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

# 1b. failed handshakes: one line each, naming the address (docs/islands.md, "What is
#     logged"); each from its own loopback address, as the lines are once per address
#     per 10 s. The unknown key above left only the allow-list's line.
raw() { # raw SRC_IP KIND: a TCP peer that is not a ZeroMQ one
  /usr/bin/python3 - "$1" "$PORT" "$2" <<'PYEOF'
import socket, struct, sys, time
s = socket.socket(); s.bind((sys.argv[1], 0)); s.connect(("127.0.0.1", int(sys.argv[2])))
time.sleep(0.3)  # (the coordinator reads a peer's address as it accepts: docs/islands.md)
if sys.argv[3] == "junk":
    s.sendall(b"GET / HTTP/1.1\r\nHost: coordinator\r\n\r\n")
else:  # a ZMTP 3.0 greeting for CURVE, then a frame announcing 2^63 bytes
    s.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\0" * 32)
    s.sendall(b"\x06" + struct.pack(">Q", 1 << 63))
time.sleep(0.5); s.close()
PYEOF
}
raw 127.0.0.2 junk
raw 127.0.0.3 huge
$PEER "tcp://127.0.0.4:0;127.0.0.1:$PORT" "$T/good/key.pub" "$T/good/key.secret" 6 hello 1 >/dev/null 2>&1 # another coordinator key
seen "coordinator: handshake failed with 127.0.0.2 port [0-9]*: not a ZMTP 3 greeting" || fail "no line for junk bytes"
seen "coordinator: handshake failed with 127.0.0.3 port [0-9]*: not a ZMTP 3 greeting" || fail "no line for a 2^63-byte frame"
seen "coordinator: handshake failed with 127.0.0.4 port [0-9]*: a CURVE box did not open" || fail "no line for another coordinator key"
sleep 0.5
for a in 127.0.0.2 127.0.0.3 127.0.0.4; do
  [ "$(grep -c "handshake failed with $a " "$T/coord.log")" -eq 1 ] || fail "not exactly one line for $a: $(grep "$a" "$T/coord.log")"
done
[ "$(grep -c "refused a connection from 127.0.0.1\|handshake failed with 127.0.0.1 " "$T/coord.log")" -eq 1 ] \
  || fail "the unknown key left more than the allow-list's line: $(grep "from 127.0.0.1\|with 127.0.0.1" "$T/coord.log")"

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
# 5. a replay from a session that new sessions would once have pushed out of the
#    coordinator's table (8 sessions; issue 32 item 18): still dropped
$PEER $EP "$CPUB" "$T/bad/key.secret" 3 evict 1.5 >/dev/null 2>&1
seen "dropped HELLO from island 3 (key .*): replayed (session 00000000000000e0, seq 1" || fail "a replay after 8 new sessions was taken"
seen "dropped HEARTBEAT from island 3 (key .*): a new session while 8 of its sessions are live" || fail "no line for a 9th live session"
kill $COORD_PID; wait $COORD_PID 2>/dev/null; COORD_PID=
[ -f "$T/coord/coordinator.json" ] || fail "no state file"
grep -q '"endpoint"' "$T/coord/coordinator.json" || fail "state file lacks members"

# 6. a real island proves its keys before any compute (WELCOME): an allowed key prints
#    one line saying the coordinator took it; a key not in the allow-list, and another
#    coordinator's public key, each end the island in one line naming the flag, within
#    seconds and before step 1 (they showed only at the first outer sync, as "no answer")
$ATOLL prepare --text /usr/share/games/fortunes/art --out "$T/data" >/dev/null 2>&1 || fail "cannot prepare test data"
# (under load its start was seen to miss the 10 s wait twice in a day: up to 3 tries,
# and the log of the last if none came up)
for try in 1 2 3; do
  timeout 100 $ATOLL coordinator --listen $EP --keys "$T/coord" --min-islands 1 --island-timeout 30 >"$T/coord.log" 2>&1 &
  COORD_PID=$!
  seen "listening on $EP" && break
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null; sleep 1
done
seen "listening on $EP" || { fail "second coordinator did not start"; cat "$T/coord.log"; }
I="--layers 1 --heads 2 --dim 32 --context 16 --batch 2 --threads 1 --data $T/data --eval-every 0 --eval-batches 1 --steps 2 --sync-every 2 --islands 2 --net-timeout 5 --join $EP --island-id 0"
IP=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# refused: status, seconds, one line naming the flag, nothing trained
refused() { # NAME PATTERN ARGS...
  name=$1; pat=$2; shift 2
  t0=$(date +%s)
  timeout 60 $ATOLL train $I --island-listen tcp://127.0.0.1:$IP --out "$T/isl_$name" "$@" >/dev/null 2>"$T/isl_$name.err"
  rc=$? took=$(($(date +%s) - t0))
  [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ $took -le 10 ] && [ "$(grep -c . "$T/isl_$name.err")" -eq 1 ] && grep -q -- "$pat" "$T/isl_$name.err" \
    || fail "$name: status $rc after $took s: $(cat "$T/isl_$name.err")"
}
refused stranger "^atoll: error: --island-key $T/stranger/key.secret: the coordinator $EP refused this island's key" \
  --coordinator-key "$CPUB" --island-key "$T/stranger/key.secret"
refused coordkey "^atoll: error: --coordinator-key $T/bad/key.pub: the coordinator $EP closed this island's handshake" \
  --coordinator-key "$T/bad/key.pub" --island-key "$T/good/key.secret"
# (the allowed island last: once it finished, the coordinator ends)
timeout 60 $ATOLL train $I --coordinator-key "$CPUB" --island-key "$T/good/key.secret" --island-listen tcp://127.0.0.1:$IP --out "$T/isl_good" >/dev/null 2>"$T/isl_good.err" \
  || fail "an allowed island failed: $(tail -n 2 "$T/isl_good.err")"
grep -q "^island 0: the coordinator $EP took this island's key: registered as island 0 rank 0" "$T/isl_good.err" \
  || fail "no greeting line: $(head -n 2 "$T/isl_good.err")"
kill $COORD_PID; wait $COORD_PID 2>/dev/null; COORD_PID=
echo "test_security: ok"

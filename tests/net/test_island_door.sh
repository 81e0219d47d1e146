#!/bin/sh
# The islands' endpoints (src/net/sock.c; docs/islands.md): a port outside 1-65535 in
# --listen or --island-listen is refused with one line (ZeroMQ bound another port); a
# coordinator on port 0 logs the port it bound; a wildcard --island-listen without
# --island-advertise is refused with one line, and with it the island binds the
# wildcard and announces the advertised address with the bound port (the exchange
# below runs over it).
# The island's data door (src/net/link_data.c, docs/islands.md "Wire format"): a member of
# the quorum (tests/net/net_peer.c, kind data) sends the island DATA frames that no
# receiver may take: phase 3 (a joining island's state) inside an exchange, an empty
# range at offset == total, an offset inside a chunk, another total. Each is dropped
# with one line naming its sender, and the island stays up. Before the fix the phase-3
# frame was taken without a line, its flag set past the end of the exchange's table (a
# heap-buffer-overflow under ASan), and counted as received.
# Before the door: an island waiting for its coordinator's WELCOME (nothing listens
# there) stops at a SIGTERM within seconds with status 130 and one line (it waited out
# 10 x --net-timeout); an island resumed from a checkpoint it cannot use stops with one
# line and a non-zero status before it registers: the coordinator never logs it (it
# registered first and held its slot until --island-timeout).
#   usage: test_island_door.sh ATOLL NET_PEER SRC
ATOLL=$1; PEER=$2; SRC=$3
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
small_data
D="$TMP/door"; mkdir -p "$D"
net_keys "$D" 2 || { fail keys; finish; }
set -- $(free_ports 4); CPORT=$1; PORT=$2; PPORT=$3; DEAD=$4
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 0 --save-every 0 --steps 4 --sync-every 2 --islands 2 --net-timeout 5"
J="--join tcp://127.0.0.1:$CPORT --coordinator-key $D/coord/key.pub --island-id 0 --island-key $D/i0/key.secret"

# the endpoints (no coordinator is needed for a refusal: it comes before any traffic)
expect_error "coordinator --listen port 99999" "--listen tcp://127.0.0.1:99999: port 99999 is not a port" \
  timeout 10 $ATOLL coordinator --listen tcp://127.0.0.1:99999 --keys "$D/coord" --min-islands 1 --state "$D/s1.json"
expect_error "--island-listen port 99999" "--island-listen tcp://127.0.0.1:99999: port 99999 is not a port" \
  timeout 30 $ATOLL train $M $J --island-listen tcp://127.0.0.1:99999 --net-timeout 1 --out "$D/r1"
expect_error "--island-listen wildcard without --island-advertise" "--island-listen tcp://0.0.0.0:$PORT: a wildcard address cannot be told to the other islands" \
  timeout 30 $ATOLL train $M $J --island-listen tcp://0.0.0.0:$PORT --net-timeout 1 --out "$D/r2"
timeout 3 $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --min-islands 1 --state "$D/s0.json" 2>"$D/c0.log"
grep -q "listening on tcp://127.0.0.1:[1-9][0-9]* " "$D/c0.log" && pass "--listen port 0: logs the bound port: $(grep -o 'listening on [^ ]*' "$D/c0.log")" \
  || fail "--listen port 0: $(head -2 "$D/c0.log")"

# a stop signal while the island waits to register: nothing listens at port DEAD
timeout 60 $ATOLL train $M --join tcp://127.0.0.1:$DEAD --coordinator-key $D/coord/key.pub --island-id 0 \
  --island-key $D/i0/key.secret --island-listen tcp://127.0.0.1:$PORT --net-timeout 30 --out "$D/sig" >/dev/null 2>"$D/sig.err" &
SIG=$!
sleep 2; kill -TERM $SIG
i=0; while kill -0 $SIG 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $SIG 2>/dev/null; then fail "SIGTERM while waiting to register: still waiting 10 s later"; kill -9 $SIG; wait $SIG
else
  wait $SIG; rc=$?
  [ $rc -eq 130 ] && [ "$(grep -c 'stopped by a signal while waiting for the coordinator' "$D/sig.err")" -eq 1 ] \
    && pass "SIGTERM while waiting to register: status 130, $(grep -o 'stopped by a signal.*' "$D/sig.err")" \
    || fail "SIGTERM while waiting to register: status $rc: $(tail -2 "$D/sig.err")"
fi

start_coordinator "$D" $CPORT 2 --island-timeout 5 --state "$D/state.json"
# a checkpoint the island cannot use (a run of one process, no island_1.safetensors):
# refused before it registers
timeout 60 $ATOLL train --layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 0 \
  --save-every 0 --steps 2 --out "$D/solo" >/dev/null 2>"$D/solo.err" || fail "a run for a checkpoint: $(tail -1 "$D/solo.err")"
expect_error "--resume a checkpoint the island cannot use" "was written by island 0" \
  timeout 30 $ATOLL train $M --join tcp://127.0.0.1:$CPORT --coordinator-key $D/coord/key.pub --island-id 1 \
  --island-key $D/i1/key.secret --island-listen tcp://127.0.0.1:$PPORT --resume "$D/solo"
sleep 1
grep -q "island 1" "$D/coord.log" && fail "the coordinator saw the island with a bad checkpoint: $(grep -m2 'island 1' "$D/coord.log")" \
  || pass "the island with a bad checkpoint never reached the coordinator"
# island 0 binds every interface on a free port and announces 127.0.0.1 with that port
timeout 90 $ATOLL train $M $J --island-listen 'tcp://*:0' --island-advertise tcp://127.0.0.1:0 --out "$D/run" >/dev/null 2>"$D/island.err" &
ISL=$!
i=0; while ! grep -q "island 0 joined" "$D/coord.log" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
grep -q "island 0 joined (.* data at tcp://127.0.0.1:[1-9][0-9]*, " "$D/coord.log" && pass "a wildcard --island-listen with --island-advertise: $(grep -o 'data at [^,]*' "$D/coord.log")" \
  || fail "announced endpoint: $(grep "island 0" "$D/coord.log"; head -3 "$D/island.err")"
NET_PEER_LISTEN=tcp://127.0.0.1:$PPORT NET_PEER_STEP=2 timeout 60 $PEER tcp://127.0.0.1:$CPORT "$D/coord/key.pub" \
  "$D/i1/key.secret" 1 data 40 >"$D/peer.out" 2>&1 || fail "net_peer: $(cat "$D/peer.out")"
K8=$(cut -c1-8 "$D/i1/key.pub")
# drops LINE-TEXT: the island's drop lines naming net_peer's key (fixed strings: a Z85
# key holds regex characters)
drops() { grep -F "dropped a data message from" "$D/island.err" | grep -F "(key $K8" | grep -F -- "$1"; }
i=0
while [ "$(drops "" | grep -c .)" -lt 4 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
alive=no; kill -0 $ISL 2>/dev/null && alive=yes
kill $ISL 2>/dev/null; wait $ISL 2>/dev/null
kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
[ $alive = yes ] && ! grep -q "AddressSanitizer\|runtime error" "$D/island.err" && pass "the island survived the hostile frames" \
  || fail "the island died: $(grep -m3 "ERROR\|error" "$D/island.err")"
n=$(drops "" | grep -c .)
[ "$n" -eq 4 ] && pass "4 hostile frames, 4 drop lines naming the sender" || fail "$n drop lines for 4 hostile frames: $(cat "$D/peer.out"; grep dropped "$D/island.err")"
for why in "phase 3 is not sent in an exchange" "DATA: empty range at" "range [1, " "of $(($(sed -n 's/.*piece of \([0-9]*\) bytes.*/\1/p' "$D/peer.out") + 4096)) does not fit"; do
  [ -n "$(drops "$why")" ] && pass "dropped: $why" || fail "no drop line for: $why"
done
finish

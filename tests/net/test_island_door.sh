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
#   usage: test_island_door.sh ATOLL NET_PEER SRC
ATOLL=$1; PEER=$2; SRC=$3
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
small_data
D="$TMP/door"; mkdir -p "$D"
net_keys "$D" 2 || { fail keys; finish; }
set -- $(free_ports 3); CPORT=$1; PORT=$2; PPORT=$3
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

start_coordinator "$D" $CPORT 2 --island-timeout 5 --state "$D/state.json"
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

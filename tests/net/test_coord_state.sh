#!/bin/sh
# The coordinator's state file (docs/islands.md, "State file"). Proves:
# 1. a damaged or hostile state file (numbers out of range or not integers, hashes not
#    strict hex, junk members) is refused at start with one line naming the file and the
#    member, and a good one is restored and written back with the same revision;
# 2. a second coordinator on the same --state is refused with one line (FILE.lock);
# 3. without --state nothing is written into the keys directory (a later run with the
#    same keys starts afresh), and islands of another run against a state file whose run
#    is gone are refused with an ERROR after --island-timeout, instead of waiting.
# Loopback only; every process runs under timeout. About 10 s.
#   usage: test_coord_state.sh ATOLL NET_PEER SRC
ATOLL=$1; PEER=$2; SRC=$3
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
D="$TMP/cstate"; mkdir -p "$D"
net_keys "$D" 1 || { fail keys; finish; }
H=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
KEY=$(cat "$D/i0/key.pub")
good_member="{\"island\":0,\"rank\":0,\"key\":\"$KEY\",\"endpoint\":\"tcp://127.0.0.1:1\"}"
# state REVISION STEP HASH MEMBERS [EXTRA]: a state file's text
state() { echo "{\"revision\":$1,\"step\":$2,\"hash\":\"$3\",\"members\":$4${5:+,$5}}"; }

# --- 1. refused: one line naming the file and the member, non-zero status -------------
PORT=$(free_ports 1)
refused() { # NAME MEMBER TEXT
  printf '%s' "$3" > "$D/bad.json"
  timeout 20 $ATOLL coordinator --listen tcp://127.0.0.1:$PORT --keys "$D/coord" --state "$D/bad.json" --run-seconds 1 >"$D/out" 2>"$D/err"
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c . "$D/err")" -eq 1 ] && grep -q "bad.json: .*$2" "$D/err"; then
    pass "$1: $(cat "$D/err")"
  else
    fail "$1: status $rc, expected one line naming $2: $(head -3 "$D/err")"
  fi
}
refused "revision 1e300" "revision must be an integer" "$(state 1e300 1 $H '[]')"
refused "revision -1" "revision must be an integer" "$(state -1 1 $H '[]')"
refused "revision 2.5" "revision must be an integer" "$(state 2.5 1 $H '[]')"
refused "step -5" "step must be an integer" "$(state 3 -5 $H '[]')"
refused "step 2^32" "step must be an integer" "$(state 3 4294967296 $H '[]')"
refused "counts -1e300" "counts.left must be an integer" "$(state 3 1 $H '[]' '"counts":{"left":-1e300}')"
refused "hash 0g..." "hash must be 64 hexadecimal digits" "$(state 3 1 "0g${H#??}" '[]')"
refused "hash -1..." "hash must be 64 hexadecimal digits" "$(state 3 1 "-1${H#??}" '[]')"
refused "rank hash junk" "rank_hashes\[1\] must be 64 hexadecimal" "$(state 3 1 $H '[]' "\"ranks\":2,\"rank_hashes\":[\"$H\",\" 1${H#???}\"]")"
refused "revision twice" "key 'revision' appears more than once" "{\"revision\":1,$(state 5 1 $H '[]' | cut -c2-)"
refused "members not a list" "members must be an array" "$(state 3 1 $H '{}')"
refused "member not an object" "members\[0\] must be an object" "$(state 3 1 $H '[5]')"
refused "member island -1" "members\[1\].island must be an integer" "$(state 3 1 $H "[$good_member,{\"island\":-1,\"rank\":0,\"key\":\"$KEY\",\"endpoint\":\"e\"}]")"
refused "member key junk" "members\[0\].key must be a public key" "$(state 3 1 $H '[{"island":0,"rank":0,"key":"junk","endpoint":"e"}]')"
refused "member endpoint empty" "members\[0\].endpoint must be" "$(state 3 1 $H "[{\"island\":0,\"rank\":0,\"key\":\"$KEY\",\"endpoint\":\"\"}]")"
refused "not an object" "not a coordinator state file" "[1,2]"

# a good one: restored, and written back at the same revision
state 3 8 $H "[$good_member]" > "$D/good.json"
timeout 20 $ATOLL coordinator --listen tcp://127.0.0.1:$PORT --keys "$D/coord" --state "$D/good.json" --run-seconds 0.5 >/dev/null 2>"$D/err"
rc=$?
[ $rc -eq 0 ] && grep -q "restored from .*good.json: revision 3, step 8" "$D/err" && pass "a good state file is restored" \
  || fail "good state file: status $rc: $(head -3 "$D/err")"
out=$($PY -c 'import json, sys; s = json.load(open(sys.argv[1])); print(s["revision"], s["step"]); sys.exit(0 if (s["revision"], s["step"]) == (3, 8) else 1)' "$D/good.json") \
  && pass "written back with revision 3, step 8" || fail "written back as: $out"

# --- 2. one coordinator per state file -------------------------------------------------
set -- $(free_ports 2); P1=$1; P2=$2
timeout -k 5 30 $ATOLL coordinator --listen tcp://127.0.0.1:$P1 --keys "$D/coord" --state "$D/shared.json" --run-seconds 20 >"$D/first.log" 2>&1 &
FIRST=$!
i=0; while ! grep -q "listening" "$D/first.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
timeout 20 $ATOLL coordinator --listen tcp://127.0.0.1:$P2 --keys "$D/coord" --state "$D/shared.json" --run-seconds 2 >/dev/null 2>"$D/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c . "$D/err")" -eq 1 ] && grep -q -- "--state .*shared.json: another coordinator (pid [0-9]*) is using it" "$D/err" \
  && pass "a second coordinator on one state file: $(cat "$D/err")" || fail "second coordinator on one state file: status $rc: $(head -3 "$D/err")"
# the same file through a symbolic link (its own lock file before: both ran)
ln -s "$D/shared.json" "$D/link.json"
timeout 20 $ATOLL coordinator --listen tcp://127.0.0.1:$P2 --keys "$D/coord" --state "$D/link.json" --run-seconds 2 >/dev/null 2>"$D/err"
rc=$?
kill $FIRST 2>/dev/null; wait $FIRST 2>/dev/null
[ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q -- "link.json: another coordinator (pid [0-9]*) is using it" "$D/err" \
  && pass "a second coordinator on a symbolic link to the state file refused" || fail "a second coordinator through a symbolic link: status $rc: $(head -3 "$D/err")"

# --- 3. state per run -----------------------------------------------------------------
PORT=$(free_ports 1)
timeout 20 $ATOLL coordinator --listen tcp://127.0.0.1:$PORT --keys "$D/coord" --run-seconds 2 >"$D/nostate.log" 2>&1 &
C=$!
$PEER tcp://127.0.0.1:$PORT "$D/coord/key.pub" "$D/i0/key.secret" 0 hello 1 >/dev/null 2>&1
wait $C
grep -q "island 0 joined" "$D/nostate.log" || fail "no --state: the island did not register: $(tail -2 "$D/nostate.log")"
[ -e "$D/coord/coordinator.json" ] && fail "no --state: a state file was written into the keys directory" \
  || pass "no --state: nothing written into the keys directory"
# a state file of an earlier run (revision 5) whose islands are gone: a new island
# (revision 0) is refused after --island-timeout 1, with one coordinator line
state 5 10 $H "[$good_member]" > "$D/old.json"
PORT=$(free_ports 1)
: > "$D/old.log"
timeout 20 $ATOLL coordinator --listen tcp://127.0.0.1:$PORT --keys "$D/coord" --state "$D/old.json" --island-timeout 1 --run-seconds 6 >"$D/old.log" 2>&1 &
C=$!
i=0; while ! grep -q "listening" "$D/old.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
$PEER tcp://127.0.0.1:$PORT "$D/coord/key.pub" "$D/i0/key.secret" 0 readyloop 4 >"$D/peer.out" 2>&1
wait $C
grep -q "reply ERROR: the coordinator's state file .*old.json is at revision 5 (step 10) of an earlier run" "$D/peer.out" \
  && pass "an island of another run is refused: $(grep -m1 'reply ERROR' "$D/peer.out" | cut -c1-150)..." \
  || fail "an island of another run was not refused: $(sort "$D/peer.out" | uniq -c | head -4)"
[ "$(grep -c "refused island 0 (revision 0)" "$D/old.log")" -eq 1 ] && pass "the coordinator logs the refusal once" \
  || fail "coordinator refusal lines: $(grep -c "refused island" "$D/old.log")"
finish

#!/bin/sh
# atoll simulate from the command line (src/cli/simulate_cli.c, docs/simulate.md): the
# default prints a row for data parallel and one for DiLoCo; --json is one object whose
# runs agree with the table's settings and hold shares between 0 and 1; the same seed
# gives the same numbers; every bad value is refused with status 2 and one line naming
# its flag.
#   usage: test_simulate.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"

out=$($ATOLL simulate 2>"$TMP/err"); rc=$?
if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q "^data parallel" && printf '%s\n' "$out" | grep -q "^DiLoCo H 100"; then
  pass "default: a data parallel row and a DiLoCo row"
else fail "default: status $rc: $out $(cat "$TMP/err")"; fi

$ATOLL simulate --accelerators 4096 --islands 8 --quorum-grace 20 --min-islands 4 --speeds 1,1,2 --days 3 --json >"$TMP/a.json" \
  && $ATOLL simulate --accelerators 4096 --islands 8 --quorum-grace 20 --min-islands 4 --speeds 1,1,2 --days 3 --json >"$TMP/b.json" \
  && cmp -s "$TMP/a.json" "$TMP/b.json" && pass "--json: the same seed gives the same output" || fail "--json: runs differ or failed"
msg=$($PY - "$TMP/a.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["accelerators"] == 4096 and d["islands"] == 8 and d["days"] == 3, d
modes = [r["mode"] for r in d["runs"]]
assert modes == ["dp", "diloco"], modes
for r in d["runs"]:
    for k in ("goodput", "utilisation_mean", "utilisation_min", "idle_max", "down_mean"):
        assert 0 <= r[k] <= 1, (r["mode"], k, r[k])
    assert r["goodput"] <= r["utilisation_mean"] + 1e-9, r
print("dp goodput %.3f, diloco goodput %.3f" % (d["runs"][0]["goodput"], d["runs"][1]["goodput"]))
PY
) && pass "--json: $msg" || fail "--json: $msg"
$ATOLL simulate --mode dp --json --seed 7 | $PY -c 'import json,sys; d=json.load(sys.stdin); assert [r["mode"] for r in d["runs"]] == ["dp"]' \
  && pass "--mode dp: only the data parallel run" || fail "--mode dp"

refused() { # FLAG-WORD ARGS...: status 2, one line on stderr naming FLAG-WORD
  word=$1; shift
  $ATOLL simulate "$@" >/dev/null 2>"$TMP/err"; rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "$word" "$TMP/err"; then pass "refused: $* ($(cat "$TMP/err"))"
  else fail "$*: status $rc, stderr: $(cat "$TMP/err")"; fi
}
refused --islands --islands 0
refused --islands --islands 2.5
refused --accelerators --accelerators 8 --islands 16
refused --min-islands --min-islands 17
refused --fail --fail x
refused --fail --fail 16@100
refused --fail --fail 1@-5
refused --speeds --speeds 1,,a
refused --speeds --speeds 0
refused --speeds --speeds 1,2,
refused --speeds --islands 2 --speeds 1,1,9
refused --seed --seed 1.5
refused events --islands 1000000 --accelerators 1e9
refused events --mode dp --restart-minutes 0 --mtbf-hours 0.001 --accelerators 1e9 --islands 1
refused --mode --mode async
refused --outer-dtype --outer-dtype int4
refused --link-gbit --link-gbit 0
refused --days --days 4000
refused --straggler-share --straggler-share 1.5
refused --bogus --bogus 1
refused --seed --seed

echo "$PASSES passed, $FAILS failed"
[ "$FAILS" -eq 0 ]

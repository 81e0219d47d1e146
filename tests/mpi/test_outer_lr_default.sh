#!/bin/sh
# DiLoCo's outer learning rate when --outer-lr is not given: by H from the table in
# src/parallel/outer_lr.c (0.7 below H = 50, 1.0 from 50; bench/diloco/results.md).
# The resolved number is in the header line, summary.json and state.json, and the run
# uses it (bit-identical to giving it); --outer-lr and --config win; streaming uses
# the same table; a resumed run keeps its recorded value, even with another H.
# usage: test_outer_lr_default.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
# 4 steps: the last step syncs every fragment, so the outer lr shapes the final weights
M="$TINY --batch 2 --data $TMP/data --eval-every 2 --steps 4 --warmup 1 --lr 3e-3 --save-every 2 --keep 4 --islands 2"

# train NAME FLAGS...: a 2-island run into $TMP/NAME, its stderr in $TMP/NAME.err
train() {
  n=$1; shift
  $MPIRUN -np 2 $ATOLL train $M "$@" --out "$TMP/$n" >/dev/null 2>"$TMP/$n.err" || { fail "$n: $(tail -1 "$TMP/$n.err")"; return 1; }
}
# recorded RUN FILE: the outer-lr the run recorded in FILE (summary.json or the last
# checkpoint's state.json)
recorded() {
  if [ "$2" = summary.json ]; then f="$1/summary.json"; else f=$(ls -d "$1"/checkpoints/step_* | tail -1)/state.json; fi
  $PY -c 'import json,sys; print("%.6g" % json.load(open(sys.argv[1]))["config"]["outer-lr"])' "$f"
}
# check NAME WANT: header line, summary.json and state.json all say WANT
check() {
  hdr=$(grep -o 'outer lr [0-9.]*' "$TMP/$1.err" | head -1)
  s=$(recorded "$TMP/$1" summary.json) st=$(recorded "$TMP/$1" state.json)
  if [ "$hdr" = "outer lr $2" ] && [ "$s" = "$2" ] && [ "$st" = "$2" ]; then
    pass "$1: outer lr $2 (header, summary.json, state.json)"
  else
    fail "$1: want outer lr $2; header '$hdr', summary.json $s, state.json $st"
  fi
}

# 1. not given: the table by H, and the run uses it (== the number given explicitly)
train h25 --sync-every 25 && check h25 0.7
train h25_07 --sync-every 25 --outer-lr 0.7
out=$($CLOSE "$TMP/h25" "$TMP/h25_07" 0) && pass "H=25 default == --outer-lr 0.7 bit for bit: $out" || fail "H=25 default vs 0.7: $out"
train h100 --sync-every 100 && check h100 1
train h100_10 --sync-every 100 --outer-lr 1.0
out=$($CLOSE "$TMP/h100" "$TMP/h100_10" 0) && pass "H=100 default == --outer-lr 1.0 bit for bit: $out" || fail "H=100 default vs 1.0: $out"
train h49 --sync-every 49 && check h49 0.7
train h50 --sync-every 50 && check h50 1
# the value matters: 0.7 at H = 100 gives other weights than the default
train h100_07 --sync-every 100 --outer-lr 0.7
out=$($CLOSE "$TMP/h100" "$TMP/h100_07" 0 2>&1); rc=$? # 1: they differ; 2: they could not be compared
if [ $rc -eq 0 ]; then fail "H=100: 0.7 and the default gave the same run (the test cannot see the outer lr)"
elif [ $rc -eq 1 ]; then pass "H=100: --outer-lr 0.7 gives another run than the default"
else fail "H=100: the runs could not be compared: $out"; fi

# 2. an explicit value wins, by flag and by --config; streaming uses the table too
train h100_04 --sync-every 100 --outer-lr 0.4 && check h100_04 0.4
echo '{"outer-lr": 0.5}' > "$TMP/c.json"
train h100_cfg --sync-every 100 --config "$TMP/c.json" && check h100_cfg 0.5
train h25_flag_over_cfg --sync-every 25 --config "$TMP/c.json" --outer-lr 0.9 && check h25_flag_over_cfg 0.9
train s100 --sync-every 100 --fragments 2 && check s100 1
train s25 --sync-every 25 --fragments 2 --overlap 1 && check s25 0.7

# 3. a resumed run keeps the recorded value: stopped at step 2 and resumed it equals the
#    uninterrupted run bit for bit; resumed with H = 25 it still uses 1.0 (the table
#    would give 0.7), and an explicit --outer-lr on resume wins
train cut --sync-every 100 --stop-after 2
cp -r "$TMP/cut" "$TMP/cut2" && cp -r "$TMP/cut" "$TMP/cut3"
$MPIRUN -np 2 $ATOLL train --resume "$TMP/cut" >/dev/null 2>"$TMP/cut.err" || fail "resume: $(tail -1 "$TMP/cut.err")"
check cut 1
out=$($CLOSE "$TMP/cut" "$TMP/h100" 0) && pass "default H=100 stopped at step 2 resumes bit for bit: $out" || fail "resume: $out"
$MPIRUN -np 2 $ATOLL train --resume "$TMP/cut2" --out "$TMP/cut2" --sync-every 25 >/dev/null 2>"$TMP/cut2.err" || fail "resume with H=25: $(tail -1 "$TMP/cut2.err")"
grep -q 'sync every 25 ' "$TMP/cut2.err" && check cut2 1 || fail "resume with H=25: the header does not show H=25"
$MPIRUN -np 2 $ATOLL train --resume "$TMP/cut3" --out "$TMP/cut3" --outer-lr 0.6 >/dev/null 2>"$TMP/cut3.err" || fail "resume with --outer-lr: $(tail -1 "$TMP/cut3.err")"
check cut3 0.6

# 4. the flag's range still holds: a negative value is refused, not taken as "not given"
expect_error "--outer-lr -1" "outer-lr" $ATOLL train $M --outer-lr -1 --out "$TMP/neg"
finish

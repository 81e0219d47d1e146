#!/bin/sh
# tests/gpu/run_close.c, the device script's comparer, on the CPU: it passes two equal
# runs (bit-identical weights and losses), and fails runs that differ (another seed),
# a changed tensor and a loss off by more than the tolerance; bad files exit 2.
# usage: test_run_close.sh ATOLL RUN_CLOSE SRC
ATOLL=$1; RC=$2; SRC=$3
. "$SRC/tests/cli/common.sh"
small_data
D="--data $TMP/data"
run() { $ATOLL train $TINY $D --steps 6 --save-every 6 "$@" >/dev/null 2>&1 || fail "train $*"; }
run --out "$TMP/a"
run --out "$TMP/b"
run --out "$TMP/c" --seed 7
W=checkpoints/step_00000006/model.safetensors

expect_rc() { # NAME WANT CMD...
  name=$1; want=$2; shift 2
  out=$("$@" 2>&1); got=$?
  [ "$got" -eq "$want" ] && pass "$name: $out" || fail "$name: exit $got, not $want: $out"
}
expect_rc "equal runs: weights bit-identical" 0 "$RC" weights "$TMP/a/$W" "$TMP/b/$W" 0
expect_rc "equal runs: optimizer state bit-identical" 0 "$RC" weights "$TMP/a/checkpoints/step_00000006/optimizer.safetensors" "$TMP/b/checkpoints/step_00000006/optimizer.safetensors" 0
expect_rc "equal runs: losses" 0 "$RC" losses "$TMP/a/metrics.jsonl" "$TMP/b/metrics.jsonl" 0
expect_rc "another seed: weights differ" 1 "$RC" weights "$TMP/a/$W" "$TMP/c/$W" 1e-4
expect_rc "another seed: losses differ" 1 "$RC" losses "$TMP/a/metrics.jsonl" "$TMP/c/metrics.jsonl" 1e-4
expect_rc "another seed: within a loose tolerance" 0 "$RC" weights "$TMP/a/$W" "$TMP/c/$W" 100

# the last float of the file (of the last tensor) made 3.4e38: caught at both tolerances
cp "$TMP/a/$W" "$TMP/w.safetensors"
size=$(stat -c %s "$TMP/w.safetensors")
printf '\377\377\177\177' | dd of="$TMP/w.safetensors" bs=1 seek=$((size - 4)) conv=notrunc 2>/dev/null
expect_rc "one changed float: not bit-identical" 1 "$RC" weights "$TMP/a/$W" "$TMP/w.safetensors" 0
expect_rc "one changed float: far off" 1 "$RC" weights "$TMP/a/$W" "$TMP/w.safetensors" 1e-4

# step 3's loss times 1.001: caught at 1e-4, passed at 1e-2
sed '3s/"loss": \([0-9]*\)\.\([0-9]*\)/"loss": \1.\2X/' "$TMP/a/metrics.jsonl" | awk -F'X' '{
  if (NF > 1) { match($1, /[0-9.]+$/); v = substr($1, RSTART) + 0; printf "%s%.6f%s\n", substr($1, 1, RSTART - 1), v * 1.001, $2 } else print }' >"$TMP/m.jsonl"
expect_rc "loss off by 1e-3: caught at 1e-4" 1 "$RC" losses "$TMP/a/metrics.jsonl" "$TMP/m.jsonl" 1e-4
expect_rc "loss off by 1e-3: passed at 1e-2" 0 "$RC" losses "$TMP/a/metrics.jsonl" "$TMP/m.jsonl" 1e-2
head -3 "$TMP/a/metrics.jsonl" >"$TMP/short.jsonl"
expect_rc "fewer steps" 1 "$RC" losses "$TMP/a/metrics.jsonl" "$TMP/short.jsonl" 1

# bad input: exit 2 with a line naming the file
expect_rc "missing file" 2 "$RC" weights "$TMP/none.safetensors" "$TMP/a/$W" 0
printf 'not json\n' >"$TMP/bad.jsonl"
expect_rc "not a metrics file" 2 "$RC" losses "$TMP/bad.jsonl" "$TMP/a/metrics.jsonl" 0
expect_rc "bad tolerance" 2 "$RC" losses "$TMP/a/metrics.jsonl" "$TMP/a/metrics.jsonl" -1
finish

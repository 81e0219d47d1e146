#!/bin/sh
# A run owns its directory (issue 12): a second run on the same --out is refused while
# the first holds it; SIGHUP saves like SIGINT; orphans of killed saves are cleaned at
# start; resuming an older checkpoint into a directory with newer ones (or another
# run's) is refused unless --move-newer DIR moves them aside; summary.json and
# metrics.jsonl write errors stop the run with one line; the validation split's
# vocabulary is checked against the model.
# usage: test_out_dir.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
small_data
D="--data $TMP/data"

# last_line_has NAME KEYWORD STATUS: the last run exited non-zero (not a crash) and
# the last line of $TMP/err names KEYWORD (training prints progress before it).
last_line_has() {
  if [ "$3" -eq 0 ] || [ "$3" -ge 128 ]; then fail "$1: status $3: $(cat "$TMP/err")"; return; fi
  tail -1 "$TMP/err" | grep -q -- "$2" && pass "$1: $(tail -1 "$TMP/err")" || fail "$1: last line lacks '$2': $(cat "$TMP/err")"
}
# steps_consecutive FILE: metrics lines are steps 1, 2, ..., N, each a JSON object
# (a line being written, not yet ended, is left out)
steps_consecutive() {
  $PY - "$1" <<'PYEOF'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]).read().split("\n")[:-1]]
sys.exit(0 if steps and steps == list(range(1, len(steps) + 1)) else 1)
PYEOF
}

# 1 and 5. a long run holds its directory: a second run there is refused naming its
# pid, and leaves the first run's files alone; SIGHUP then stops the first run with a
# checkpoint, like SIGINT and SIGTERM
$ATOLL train $TINY $D --steps 1000000 --save-every 0 --eval-every 0 --out "$TMP/long" >/dev/null 2>"$TMP/long.err" &
pid=$!
i=0
while [ "$(cat "$TMP/long/metrics.jsonl" 2>/dev/null | grep -c .)" -lt 3 ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
expect_error "second run on a held --out" "pid $pid" $ATOLL train $TINY $D --steps 2 --out "$TMP/long"
sleep 0.2
if [ ! -e "$TMP/long/summary.json" ] && [ ! -e "$TMP/long/checkpoints" ] && steps_consecutive "$TMP/long/metrics.jsonl"; then
  pass "the running run's files are untouched"
else
  fail "the second run touched the first's files: $(ls -a "$TMP/long"; head -3 "$TMP/long/metrics.jsonl")"
fi
kill -HUP $pid 2>/dev/null
wait $pid
rc=$?
n=$(grep -c . "$TMP/long/metrics.jsonl")
ck=$(printf '%s/long/checkpoints/step_%08d' "$TMP" "$n")
if [ $rc -eq 130 ] && [ -f "$ck/state.json" ] && grep -q "stopped at step $n; checkpoint saved" "$TMP/long.err"; then
  pass "SIGHUP: status 130, checkpoint at step $n"
else
  fail "SIGHUP: status $rc, checkpoints: $(ls "$TMP/long/checkpoints" 2>&1); the run's stderr:"
  cat "$TMP/long.err" # the old rare abort (134) was oneDNN vs the signal frame: src/core/stop_signal.c
fi

# 2. orphans of killed saves and prunes are cleaned when the run starts: a step_
# directory without state.json, and a hidden temporary copy (its pid 1 is alive, so
# the prune after a save would keep it)
R="$ATOLL train $TINY $D --eval-every 0"
$R --steps 4 --out "$TMP/orph" >/dev/null 2>&1 || fail "run to clean"
mkdir -p "$TMP/orph/checkpoints/step_00000099" "$TMP/orph/checkpoints/.tmp-step_00000004-1"
echo junk >"$TMP/orph/checkpoints/step_00000099/model.safetensors"
# ... but a step_ directory holding anything else is the user's (an export there, notes):
# kept, and the run refused at start (a save at that step would refuse to replace it
# after all the training since the last checkpoint)
mkdir -p "$TMP/orph/checkpoints/step_00000005"
echo precious >"$TMP/orph/checkpoints/step_00000005/notes.txt"
$ATOLL export --ckpt "$TMP/orph" --to hf --out "$TMP/orph/checkpoints/step_00000097" >/dev/null 2>&1 || fail "export into checkpoints/"
expect_error "a step_ directory with the user's files in checkpoints/" "not a checkpoint (no state.json) and holds other files" \
  $ATOLL train --resume "$TMP/orph" --steps 6
if [ "$(cat "$TMP/orph/checkpoints/step_00000005/notes.txt" 2>/dev/null)" = precious ] \
   && [ -f "$TMP/orph/checkpoints/step_00000097/config.json" ]; then
  pass "the user's files in step_ directories are kept"
else
  fail "a step_ directory with the user's files was removed: $(ls -a "$TMP/orph/checkpoints" | tr '\n' ' ')"
fi
mv "$TMP/orph/checkpoints/step_00000005" "$TMP/orph/checkpoints/step_00000097" "$TMP/"
$ATOLL train --resume "$TMP/orph" --steps 6 >/dev/null 2>"$TMP/err" || fail "resume with orphans: $(tail -1 "$TMP/err")"
left=$(ls -a "$TMP/orph/checkpoints" | tr '\n' ' ')
if [ ! -e "$TMP/orph/checkpoints/step_00000099" ] && [ ! -e "$TMP/orph/checkpoints/.tmp-step_00000004-1" ] \
   && [ -f "$TMP/orph/checkpoints/step_00000006/state.json" ]; then
  pass "orphans cleaned, resumed to step 6 ($left)"
else
  fail "orphans: $left"
fi

# 3. resuming an older checkpoint into its own directory, which holds newer ones
R="$ATOLL train $TINY $D --steps 24 --warmup 4 --eval-every 8 --save-every 5 --keep 10"
$R --out "$TMP/run" >/dev/null 2>&1 || fail "run to 24"
C=$TMP/run/checkpoints
before=$(ls "$C" | tr '\n' ' ')
expect_error "resume step 10 under newer checkpoints" "--move-newer" $ATOLL train --resume "$C/step_00000010"
grep -q "step 24" "$TMP/err" || fail "the refusal does not name the newest step: $(cat "$TMP/err")"
[ "$(ls "$C" | tr '\n' ' ')" = "$before" ] && [ "$(grep -c . "$TMP/run/metrics.jsonl")" -eq 24 ] \
  && pass "refused resume left checkpoints and metrics alone" || fail "refused resume changed $C: $(ls "$C")"
expect_error "--move-newer without --resume" "--move-newer" $ATOLL train $TINY $D --steps 2 --move-newer "$TMP/x" --out "$TMP/fresh"
# a resume refused for its step (--stop-after already reached, --steps below it) moves nothing
expect_error "--move-newer with --stop-after 10 at step 10" "the run already begins at step 10" \
  $ATOLL train --resume "$C/step_00000010" --move-newer "$TMP/aside" --stop-after 10
expect_error "--move-newer with --steps 9 at step 10" "already at step 10" \
  $ATOLL train --resume "$C/step_00000010" --move-newer "$TMP/aside" --steps 9
[ ! -e "$TMP/aside" ] && [ "$(ls "$C" | tr '\n' ' ')" = "$before" ] \
  && pass "resumes refused for their step moved nothing" || fail "a refused resume moved: $(ls "$TMP/aside" 2>&1)"
before=$(find "$C" | sort | tr '\n' ' ')
expect_error "--move-newer into a checkpoint that moves" "lies inside the checkpoint" \
  $ATOLL train --resume "$C/step_00000010" --move-newer "$C/step_00000020/aside"
[ "$(find "$C" | sort | tr '\n' ' ')" = "$before" ] && pass "the refused --move-newer moved nothing" || fail "--move-newer into a moving checkpoint changed $C"
$ATOLL train --resume "$C/step_00000010" --move-newer "$TMP/aside" >/dev/null 2>"$TMP/err" \
  || fail "resume with --move-newer: $(tail -1 "$TMP/err")"
moved=$(ls "$TMP/aside" 2>/dev/null | tr '\n' ' ')
if [ "$moved" = "metrics.jsonl step_00000015 step_00000020 step_00000024 summary.json " ] \
   && [ "$(grep -c . "$TMP/aside/metrics.jsonl")" -eq 24 ]; then
  pass "--move-newer: newer checkpoints, summary and metrics set aside ($moved)"
else
  fail "--move-newer: $TMP/aside holds: $moved"
fi
[ -f "$C/step_00000024/state.json" ] && [ -f "$TMP/run/summary.json" ] && steps_consecutive "$TMP/run/metrics.jsonl" \
  && [ "$(grep -c . "$TMP/run/metrics.jsonl")" -eq 24 ] && pass "the resumed run completed" || fail "resumed run: $(ls "$C")"
$PY "$SRC/tests/cli/st_equal.py" "$TMP/aside/step_00000024/model.safetensors" "$C/step_00000024/model.safetensors" \
  && pass "and equals the run it replaced, bit for bit" || fail "the resumed run differs from the moved one"
# another run's checkpoint into a directory holding a run
$ATOLL train $TINY $D --steps 4 --out "$TMP/other" >/dev/null 2>&1 || fail "other run"
expect_error "resume into another run's directory" "another run" $ATOLL train --resume "$C/step_00000010" --out "$TMP/other"
[ -f "$TMP/other/checkpoints/step_00000004/state.json" ] && [ "$(grep -c . "$TMP/other/metrics.jsonl")" -eq 4 ] \
  && pass "the other run is untouched" || fail "the other run changed: $(ls "$TMP/other/checkpoints")"
$ATOLL train --resume "$C/step_00000010" --steps 12 --out "$TMP/other" --move-newer "$TMP/other_aside" >/dev/null 2>"$TMP/err" \
  || fail "resume into another run's directory with --move-newer: $(tail -1 "$TMP/err")"
[ "$(ls "$TMP/other/checkpoints" | tr '\n' ' ')" = "step_00000012 " ] && [ "$(grep -c . "$TMP/other/metrics.jsonl")" -eq 2 ] \
  && [ "$(grep -c . "$TMP/other_aside/metrics.jsonl")" -eq 4 ] && [ -f "$TMP/other_aside/step_00000004/state.json" ] \
  && pass "with --move-newer the other run moves aside whole" \
  || fail "--move-newer over another run: $(ls "$TMP/other" "$TMP/other/checkpoints" "$TMP/other_aside")"

# 4. summary.json and metrics.jsonl that cannot be written: one line naming the file
mkdir -p "$TMP/sum/summary.json/inside"
$ATOLL train $TINY $D --steps 2 --out "$TMP/sum" >/dev/null 2>"$TMP/err"
last_line_has "summary.json cannot be written" "summary.json" $?
tmps=$(ls -a "$TMP/sum" | grep -c tmp)
[ "$tmps" -eq 0 ] && pass "no temporary summary left" || fail "temporary files left: $(ls -a "$TMP/sum")"
if [ -c /dev/full ]; then
  mkdir -p "$TMP/full"; ln -s /dev/full "$TMP/full/metrics.jsonl"
  $ATOLL train $TINY $D --steps 3 --out "$TMP/full" >/dev/null 2>"$TMP/err"
  last_line_has "metrics.jsonl on a full disk" "metrics.jsonl: cannot write" $?
  [ ! -e "$TMP/full/summary.json" ] && pass "no summary after a lost metrics line" || fail "summary written after a lost metrics line"
else
  echo "skip: no /dev/full"
fi

# 6. a validation split whose tokens the model's vocabulary cannot hold
mkdir -p "$TMP/vocab"
$PY - "$TMP/data/train_000.bin" "$TMP/vocab/train_000.bin" <<'PYEOF'
import struct, sys
blob = open(sys.argv[1], "rb").read()
magic, version, vocab, n, width, res = struct.unpack("<8sIIQII", blob[:32])
assert width == 1
tokens = bytes(b % 64 for b in blob[32:32 + n])  # a training split of vocabulary 64
open(sys.argv[2], "wb").write(struct.pack("<8sIIQII", magic, version, 64, n, 1, 0) + tokens)
PYEOF
cp "$TMP/data/val_000.bin" "$TMP/vocab/val_000.bin"
expect_error "validation tokens beyond the model's vocab" "val_000.bin" $ATOLL train $TINY --vocab 64 --data "$TMP/vocab" --steps 2 --out "$TMP/vocabrun"
finish

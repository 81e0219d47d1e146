#!/bin/sh
# Attacks of a careless or hostile user that are not in test_bad_input.sh or
# test_out_dir.sh: each once misbehaved (a hang, a run written among token files,
# garbage output) or guards an item of issue 12 end to end. Every command is bounded.
# usage: test_hostile.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
small_data
D="--data $TMP/data"
TO="timeout 60"

# --out pointing at a data directory: the run's files would land among the token
# files (and prepare would then refuse the directory); the data stays untouched
before=$(ls -a "$TMP/data" | tr '\n' ' ')
expect_error "--out is the --data directory" "data directory" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/data/"
$TO $ATOLL prepare --text /usr/share/games/fortunes/art --out "$TMP/data2" >/dev/null 2>&1 || fail "prepare data2"
expect_error "--out is another data directory" "$TMP/data2: is a data directory" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/data2"
[ "$(ls -a "$TMP/data" | tr '\n' ' ')" = "$before" ] && pass "the data directory is untouched" \
  || fail "the data directory changed: $(ls -a "$TMP/data")"
echo x >"$TMP/afile"
expect_error "--out is a regular file" "$TMP/afile: not a directory" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/afile"
# --out that is neither new, empty nor a run (a slip such as --out / or --out ~/project):
# refused, nothing written there; a run directory with a user's extra file still works
mkdir -p "$TMP/project" && echo notes >"$TMP/project/notes.txt"
expect_error "--out holds someone else's files" "not empty and not a run directory" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/project"
[ "$(ls -A "$TMP/project")" = "notes.txt" ] && pass "--out refused: nothing written there" || fail "--out refused but written: $(ls -A "$TMP/project")"
$TO $ATOLL train $TINY $D --steps 2 --out "$TMP/mine" >/dev/null 2>&1 && echo notes >"$TMP/mine/notes.txt" \
  && $TO $ATOLL train --resume "$TMP/mine" --steps 3 >/dev/null 2>&1 \
  && pass "a run directory with an extra file resumes" || fail "a run directory with an extra file does not resume"

# prepare: a FIFO hung in open(); a token file was prepared as if it were text
mkfifo "$TMP/fifo.txt"
expect_error "prepare: FIFO as --text" "FIFO" $TO $ATOLL prepare --text "$TMP/fifo.txt" --out "$TMP/p1"
expect_error "prepare: a token file as --text" "token file" $TO $ATOLL prepare --text "$TMP/data/train_000.bin" --out "$TMP/p2"
[ ! -e "$TMP/p1" ] && [ ! -e "$TMP/p2" ] && pass "no output directory left by the refusals" || fail "refused prepare left $(ls -d "$TMP"/p*)"

# plan: an absurd token budget printed truncated day and token counts
expect_error "plan: --tokens 1e300" "--tokens" $TO $ATOLL plan --model gpt2 --tokens 1e300

# a checkpoint to damage (issue 12: every reader distrusts its input)
$TO $ATOLL train $TINY $D --steps 3 --out "$TMP/run" >/dev/null 2>&1 || fail "good run"
CK=$TMP/run/checkpoints/step_00000003
bad_ckpt() { rm -rf "$TMP/bad"; mkdir -p "$TMP/bad"; cp -r "$CK" "$TMP/bad/"; B=$TMP/bad/step_00000003; }
bad_ckpt; $PY - "$B/model.safetensors" <<'PYEOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-5] ^= 0x10; open(p, "wb").write(b)
PYEOF
expect_error "sample: one flipped bit in the weights" "does not match\|do not match" $TO $ATOLL sample --ckpt "$B" --tokens 3
bad_ckpt; sed -i 's/"step":[^,]*/"step": 1e20/' "$B/state.json"
expect_error "resume: state.json step 1e20" "state.json" $TO $ATOLL train --resume "$B" --steps 6 --out "$TMP/r2"

# SIGKILL at many moments of a run that saves and prunes every step, each time
# resumed: the end equals an uninterrupted run bit for bit, with no orphan left
R="$ATOLL train $TINY $D --steps 60 --eval-every 10 --save-every 1 --keep 2"
$TO $R --out "$TMP/ref" >/dev/null 2>&1 || fail "reference run"
$TO $R --out "$TMP/kill" --stop-after 1 >/dev/null 2>&1 || fail "run to kill"
for delay in 0.31 0.33 0.35 0.37 0.4 0.43 0.47 0.5; do
  # atoll itself in the background (not under timeout: a SIGKILL to the timeout
  # wrapper would leave atoll running, holding the run's lock for the next resume)
  $ATOLL train --resume "$TMP/kill" >/dev/null 2>&1 &
  pid=$!
  sleep $delay
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
done
# always resumed once more: on a fast machine the kills may come after the last step,
# and a kill between step 60's save and its prune leaves step 58 for this resume to prune
$TO $ATOLL train --resume "$TMP/kill" >/dev/null 2>"$TMP/err" || fail "final resume: $(tail -1 "$TMP/err")"
left=$(ls -a "$TMP/kill/checkpoints" | tr '\n' ' ')
[ "$left" = ". .. step_00000059 step_00000060 " ] && pass "no orphans after the kills ($left)" || fail "after kills: $left"
# (the comparisons' own lines go into the failure: a miss under ASan in one CI rehearsal
# of 2026-12-01 could not be reproduced in 12 runs, so the next one must say what differed)
if w=$($PY "$SRC/tests/cli/st_equal.py" "$TMP/ref/checkpoints/step_00000060/model.safetensors" "$TMP/kill/checkpoints/step_00000060/model.safetensors" 2>&1) \
  && m=$($PY "$SRC/tests/cli/metrics_equal.py" "$TMP/ref/metrics.jsonl" "$TMP/kill/metrics.jsonl" 2>&1); then
  pass "killed and resumed run equals the uninterrupted one"
else
  fail "killed and resumed run differs: $(echo "$w" | tail -3 | tr '\n' ' ') $(echo "${m:-}" | tail -3 | tr '\n' ' ') (checkpoints left: $left)"
fi
# the same kill made on purpose: a finished run with one checkpoint over --keep 2
# (killed after step 60's save, before its prune) is pruned by its resume
cp -r "$TMP/ref/checkpoints/step_00000059" "$TMP/ref/checkpoints/step_00000058"
$TO $ATOLL train --resume "$TMP/ref" >/dev/null 2>"$TMP/err" || fail "resume of a finished run: $(tail -1 "$TMP/err")"
left=$(ls -a "$TMP/ref/checkpoints" | tr '\n' ' ')
[ "$left" = ". .. step_00000059 step_00000060 " ] && pass "a resume finishes a prune a kill interrupted" || fail "resume left: $left"

# a resume that fails on its way (a NaN at its first step) prunes nothing, even with a
# lower --keep; a resume of a copied run directory writes into the copy, not the
# original its settings name; a temporary file a kill left in OUT is removed
$TO $ATOLL train $TINY $D --steps 6 --save-every 2 --keep 5 --stop-after 4 --out "$TMP/orig" >/dev/null 2>&1 || fail "run to copy"
ATOLL_FAULT_NAN_STEP=5 $TO $ATOLL train --resume "$TMP/orig" --keep 1 >/dev/null 2>&1 && fail "the NaN resume succeeded"
left=$(ls "$TMP/orig/checkpoints" | tr '\n' ' ')
[ "$left" = "step_00000002 step_00000004 " ] && pass "a failed resume pruned nothing ($left)" || fail "a failed resume left: $left"
cp -r "$TMP/orig" "$TMP/copy"
before=$(cat "$TMP/orig/metrics.jsonl" "$TMP/orig/summary.json" | md5sum)
touch "$TMP/copy/.metrics.jsonl.tmp-999999"
$TO $ATOLL train --resume "$TMP/copy" >/dev/null 2>"$TMP/err" || fail "resume of the copy: $(tail -1 "$TMP/err")"
[ -d "$TMP/copy/checkpoints/step_00000006" ] && [ ! -e "$TMP/orig/checkpoints/step_00000006" ] \
  && [ "$(cat "$TMP/orig/metrics.jsonl" "$TMP/orig/summary.json" | md5sum)" = "$before" ] \
  && pass "a copied run directory resumes into the copy; the original is untouched" \
  || fail "copy resumed: copy has $(ls "$TMP/copy/checkpoints" | tr '\n' ' '), original $(ls "$TMP/orig/checkpoints" | tr '\n' ' ')"
[ ! -e "$TMP/copy/.metrics.jsonl.tmp-999999" ] && pass "a killed run's temporary metrics file is removed on resume" || fail "the temporary metrics file is still there"

# a token file truncated while training runs (2 threads): one line naming it, status 1,
# not SIGBUS (issue 12; tests/test_data.c checks the reader alone)
cp -r "$TMP/data" "$TMP/shrink"
$TO $ATOLL train --layers 2 --heads 2 --dim 32 --context 32 --batch 4 --threads 2 --data "$TMP/shrink" \
  --steps 1000000 --eval-every 0 --save-every 0 --out "$TMP/shr" >/dev/null 2>"$TMP/err" &
pid=$!
i=0
while [ "$(cat "$TMP/shr/metrics.jsonl" 2>/dev/null | grep -c .)" -lt 3 ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
truncate -s 64 "$TMP/shrink/train_000.bin"
wait $pid
rc=$?
if [ $rc -eq 1 ] && tail -1 "$TMP/err" | grep -q "shrink/train_000.bin: token file shrank"; then
  pass "token file truncated during training: $(tail -1 "$TMP/err")"
else
  fail "token file truncated during training: status $rc: $(tail -1 "$TMP/err")"
fi
# a manifest that names another tokenizer: its ids would be trained on as bytes
cp -r "$TMP/data" "$TMP/bpe"
sed -i 's/"tokenizer":[[:space:]]*"bytes"/"tokenizer": "bpe"/' "$TMP/bpe/manifest.json"
expect_error "manifest of another tokenizer" "tokenizer bpe" $TO $ATOLL train $TINY --data "$TMP/bpe" --steps 1 --out "$TMP/bpe_run"
# a directory as --config: the reason, not a bare "read failed"
expect_error "--config is a directory" "Is a directory" $TO $ATOLL train $TINY $D --config "$TMP/data" --out "$TMP/cfgdir"
# a negative sample seed is refused, not wrapped to 2^64 - 1 as train would refuse it too
expect_error "sample --seed -1" "--seed" $TO $ATOLL sample --ckpt "$TMP/mine" --seed -1
# two prepares writing one --out at once: the later waits for the earlier (a lock on
# the parent directory), both succeed, and the set that lands is whole
F=/usr/share/games/fortunes
$TO $ATOLL prepare --text $F/art $F/science --out "$TMP/race/d" >/dev/null 2>"$TMP/race1.err" &
p1=$!
$TO $ATOLL prepare --text $F/science --out "$TMP/race/d" >/dev/null 2>"$TMP/race2.err" &
p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && $TO $ATOLL train $TINY --data "$TMP/race/d" --steps 1 --out "$TMP/race_run" >/dev/null 2>&1 \
   && [ -z "$(ls -a "$TMP/race" | grep atoll-)" ]; then
  pass "two prepares on one --out: both done, the set trains, nothing left over"
else
  fail "two prepares on one --out: status $r1 / $r2: $(cat "$TMP/race1.err" "$TMP/race2.err")"
fi
finish

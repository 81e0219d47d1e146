#!/bin/sh
# Resume is exact: a run stopped at step 10 and resumed ends with the same losses and
# bit-identical weights and optimizer state as an uninterrupted run; a run killed with
# SIGKILL while saving every step resumes from an intact checkpoint and also matches.
# usage: test_resume.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
small_data
RUN="$ATOLL train $TINY --data $TMP/data --steps 24 --warmup 4 --eval-every 8 --save-every 8"

$RUN --out "$TMP/full" >/dev/null 2>&1 || fail "uninterrupted run"
$RUN --out "$TMP/part" --stop-after 10 >/dev/null 2>&1 || fail "run stopped at 10"
[ -d "$TMP/part/checkpoints/step_00000010" ] && pass "stop-after 10 saved step_00000010" || fail "no checkpoint at step 10"
finished() { $PY -c "import json, sys; s = json.load(open(sys.argv[1])); print(s['steps'], s['finished'])" "$1/summary.json"; }
[ "$(finished "$TMP/part")" = "10 False" ] && pass "a stopped run's summary.json says steps 10, finished false" \
  || fail "stopped run's summary: $(finished "$TMP/part")"
# a resume with a stop it has already reached is refused (it used to run one step)
if $ATOLL train --resume "$TMP/part" --stop-after 10 >/dev/null 2>"$TMP/stop.err"; then fail "a resume at step 10 with --stop-after 10 ran"
else grep -q "stop-after 10: the run already begins at step 10" "$TMP/stop.err" && pass "--stop-after 10 at step 10 refused: $(tail -1 "$TMP/stop.err")" \
  || fail "--stop-after 10 at step 10: $(cat "$TMP/stop.err")"; fi
[ -d "$TMP/part/checkpoints/step_00000011" ] && fail "the refused resume saved step 11"
$ATOLL train --resume "$TMP/part" >/dev/null 2>&1 || fail "resume"
[ "$(finished "$TMP/part")" = "24 True" ] && pass "after the resume: steps 24, finished true" || fail "resumed run's summary: $(finished "$TMP/part")"
f=$TMP/full/checkpoints/step_00000024; p=$TMP/part/checkpoints/step_00000024
$PY "$SRC/tests/cli/st_equal.py" "$f/model.safetensors" "$p/model.safetensors" && pass "weights bit-identical after resume" || fail "weights differ after resume"
$PY "$SRC/tests/cli/st_equal.py" "$f/optimizer.safetensors" "$p/optimizer.safetensors" && pass "AdamW moments bit-identical" || fail "moments differ"
$PY "$SRC/tests/cli/metrics_equal.py" "$TMP/full/metrics.jsonl" "$TMP/part/metrics.jsonl" && pass "losses identical at every step" || fail "metrics differ"

# SIGKILL at an arbitrary moment while a checkpoint is written every step
RUN2="$ATOLL train $TINY --dim 64 --context 64 --batch 8 --data $TMP/data --steps 60 --warmup 4 --eval-every 0"
$RUN2 --out "$TMP/full2" >/dev/null 2>&1 || fail "uninterrupted run 2"
$RUN2 --out "$TMP/killed" --save-every 1 >/dev/null 2>&1 &
pid=$!
i=0
# wait until 5 steps are logged (checkpoint step_5 itself may already be pruned by --keep)
steps_logged() { cat "$TMP/killed/metrics.jsonl" 2>/dev/null | grep -c .; }
while [ "$(steps_logged)" -lt 5 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
left=$(ls -a "$TMP/killed/checkpoints" | tr '\n' ' ')
if [ -d "$TMP/killed/checkpoints/step_00000060" ]; then fail "the kill came after the run ended ($left)"; fi
$ATOLL train --resume "$TMP/killed" >/dev/null 2>"$TMP/resume.err" && pass "resumed after kill -9 (left: $left): $(head -1 "$TMP/resume.err")" || fail "resume after kill -9: $(cat "$TMP/resume.err")"
g=$TMP/full2/checkpoints/step_00000060
$PY "$SRC/tests/cli/st_equal.py" "$g/model.safetensors" "$TMP/killed/checkpoints/step_00000060/model.safetensors" && pass "killed-and-resumed weights identical" || fail "killed-and-resumed weights differ"
$PY "$SRC/tests/cli/metrics_equal.py" "$TMP/full2/metrics.jsonl" "$TMP/killed/metrics.jsonl" && pass "killed-and-resumed losses identical" || fail "killed-and-resumed metrics differ"

# At 3 threads too (the gradient norm's sum used to depend on the order threads
# finished in): stopped and resumed equals uninterrupted, bit for bit. The clip is
# low so the norm decides every update.
RUN3="$ATOLL train $TINY --threads 3 --grad-clip 0.05 --data $TMP/data --steps 16 --warmup 2 --eval-every 0 --save-every 8"
$RUN3 --out "$TMP/full3" >/dev/null 2>&1 || fail "uninterrupted run at --threads 3"
$RUN3 --out "$TMP/part3" --stop-after 7 >/dev/null 2>&1 || fail "run at --threads 3 stopped at 7"
$ATOLL train --resume "$TMP/part3" >/dev/null 2>&1 || fail "resume at --threads 3"
h=checkpoints/step_00000016/model.safetensors
$PY "$SRC/tests/cli/st_equal.py" "$TMP/full3/$h" "$TMP/part3/$h" && pass "--threads 3: weights bit-identical after resume" || fail "--threads 3: weights differ after resume"
$PY "$SRC/tests/cli/metrics_equal.py" "$TMP/full3/metrics.jsonl" "$TMP/part3/metrics.jsonl" && pass "--threads 3: losses identical at every step" || fail "--threads 3: metrics differ"
# a relative --data is recorded absolute: a resume from another working directory reads the
# same corpus (it read whatever ./DATA named there), and an older checkpoint's relative
# path is named when the resume reads it
mkdir -p "$TMP/wd/elsewhere"
cp -r "$TMP/data" "$TMP/wd/d"
(cd "$TMP/wd" && $ATOLL train $TINY --data d --steps 4 --eval-every 0 --out run >/dev/null 2>&1) || fail "run with a relative --data"
rec=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['config']['data'])" "$TMP/wd/run/checkpoints/step_00000004/state.json")
[ "$rec" = "$(cd "$TMP/wd/d" && pwd -P)" ] && pass "a relative --data is recorded absolute: $rec" || fail "recorded --data: $rec"
(cd "$TMP/wd/elsewhere" && $ATOLL train --resume ../run --steps 6 >/dev/null 2>"$TMP/wd/err") && pass "resumed from another working directory" \
  || fail "resume from another working directory: $(tail -1 "$TMP/wd/err")"
$PY - "$TMP/wd/run/checkpoints/step_00000006/state.json" <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1])); s["config"]["data"] = "d"
open(sys.argv[1], "w").write(json.dumps(s))
PYEOF
cd "$TMP/wd/elsewhere" || fail "cd"
expect_error "an older checkpoint's relative --data, missing here" "recorded relative in" $ATOLL train --resume ../run --steps 8
cd - >/dev/null || fail "cd -"
(cd "$TMP/wd" && $ATOLL train --resume run --steps 8 >/dev/null 2>"$TMP/wd/err2") && grep -q "records --data d, relative: reading $(cd "$TMP/wd/d" && pwd -P)" "$TMP/wd/err2" \
  && pass "an older checkpoint's relative --data: the resume names what it reads" || fail "relative --data note: $(cat "$TMP/wd/err2")"
expect_error "--key=value" "with a space, not '='" $ATOLL train --lr=1e-3 --steps 3

finish

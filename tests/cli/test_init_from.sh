#!/bin/sh
# --init-from CKPT [--init-optim 0|1] (src/train/init_from.c): a new run at any layout,
# island count or ZeRO stage starts from a checkpoint's weights (and moments), with the
# step, the schedule and DiLoCo's outer momentum at zero (AdamW's bias correction goes
# on from the source's step count when the moments come along). At lr 0 one step changes no
# weight, so the first checkpoint of the new run must hold the source's weights bit for
# bit; the moments show in exp_avg (one step later: beta1 x the source's more).
# --init-step 1 goes on from the checkpoint's step instead (section 4).
# usage: test_init_from.sh ATOLL SOURCE_DIR
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
CK="/usr/bin/python3 $SRC/tests/hf/init_check.py"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-batches 2 --save-every 0"
ZERO="--steps 1 --lr 0" # one step that changes no weight
last() { ls -d "$1"/checkpoints/step_* | tail -1; }
check() { # NAME CMD...: CMD's output as the pass line
  name=$1; shift
  if out=$("$@" 2>&1); then pass "$name: $out"; else fail "$name: $out"; fi
}

# the source: one process, data parallel, 4 steps
$ATOLL train $M --steps 4 --out "$TMP/src" >/dev/null 2>&1 || fail "source run"
S=$(last "$TMP/src")

# 1. DP checkpoint -> 2 DiLoCo islands, with the moments: first-step weights are the source's
$MPIRUN -np 2 $ATOLL train $M $ZERO --islands 2 --sync-every 1 --init-from "$TMP/src" --init-optim 1 --out "$TMP/k2" \
  >/dev/null 2>"$TMP/err" || fail "islands 2 from DP: $(tail -1 "$TMP/err")"
K=$(last "$TMP/k2")
check "DP -> 2 islands: global weights" $CK equal "$S/model.safetensors" "" "$K/model.safetensors" ""
check "DP -> 2 islands: island 1's weights" $CK equal "$S/model.safetensors" "" "$K/island_1.safetensors" "weights."
check "DP -> 2 islands: outer momentum starts at zero" $CK zero "$K/outer.safetensors"
grep -q '"step":[[:space:]]*1,' "$K/state.json" && pass "the step counter starts at zero" || fail "step: $(grep step "$K/state.json" | head -1)"
grep -q "\"init-from\":[[:space:]]*\"$TMP/src\"" "$K/state.json" && pass "state.json records --init-from" || fail "state.json lacks init-from"
# without the moments: the same step from zero moments
$MPIRUN -np 2 $ATOLL train $M $ZERO --islands 2 --sync-every 1 --init-from "$TMP/src" --out "$TMP/k2n" \
  >/dev/null 2>"$TMP/err" || fail "islands 2 without moments: $(tail -1 "$TMP/err")"
check "--init-optim 1" $CK moments "$S/optimizer.safetensors" "$K/optimizer.safetensors" "$(last "$TMP/k2n")/optimizer.safetensors" 0.9 0.95

# AdamW's bias correction goes on from the source's 4 steps with the moments, not without
grep -q '"adam_steps":[[:space:]]*5,' "$K/state.json" && pass "with the moments, AdamW's step count goes on (adam_steps 5)" \
  || fail "adam_steps with the moments: $(grep -o '"adam_steps":[^,]*' "$K/state.json")"
grep -q '"adam_steps":[[:space:]]*1,' "$(last "$TMP/k2n")/state.json" && pass "without them it starts at 1" \
  || fail "adam_steps without the moments: $(grep -o '"adam_steps":[^,]*' "$(last "$TMP/k2n")/state.json")"
# and a resume keeps it: stopped at 2 of 4 and resumed equals the run straight through
W="$ATOLL train $M --steps 4 --init-from $TMP/src --init-optim 1"
$W --out "$TMP/w_full" >/dev/null 2>&1 || fail "warm run"
$W --out "$TMP/w_part" --save-every 2 --stop-after 2 >/dev/null 2>&1 || fail "warm run stopped at 2"
$ATOLL train --resume "$TMP/w_part" >/dev/null 2>"$TMP/err" || fail "warm resume: $(tail -1 "$TMP/err")"
check "a warm run stopped and resumed: weights" $CK equal "$(last "$TMP/w_full")/model.safetensors" "" "$(last "$TMP/w_part")/model.safetensors" ""
grep -q '"adam_steps":[[:space:]]*8,' "$(last "$TMP/w_part")/state.json" && pass "resumed warm run: adam_steps 8" \
  || fail "resumed warm run: $(grep -o '"adam_steps":[^,]*' "$(last "$TMP/w_part")/state.json")"

# 2. other layouts: ZeRO-3, tensor parallel, pipeline
for layout in "--zero 3" "--tp 2" "--pp 2"; do
  name=$(echo "$layout" | tr -d ' -')
  $MPIRUN -np 2 $ATOLL train $M $ZERO $layout --init-from "$S" --out "$TMP/$name" >/dev/null 2>"$TMP/err" ||
    fail "$layout: $(tail -1 "$TMP/err")"
  check "DP -> $layout: weights" $CK equal "$S/model.safetensors" "" "$(last "$TMP/$name")/model.safetensors" ""
done

# 3. DiLoCo checkpoint (outer momentum not zero) -> 2 islands again and -> one process:
#    the global weights come along, the momentum does not
$MPIRUN -np 2 $ATOLL train $M --steps 4 --islands 2 --sync-every 2 --out "$TMP/d2" >/dev/null 2>&1 || fail "DiLoCo source"
D=$(last "$TMP/d2")
# (it must be read and found nonzero: an unreadable file is no evidence either)
case $($CK zero "$D/outer.safetensors" 2>&1) in *"nonzero values"*) ;;
  *) fail "the DiLoCo source's outer momentum is zero or unreadable (test too weak)" ;; esac
$MPIRUN -np 2 $ATOLL train $M $ZERO --islands 2 --sync-every 1 --init-from "$D" --out "$TMP/d2b" >/dev/null 2>"$TMP/err" ||
  fail "DiLoCo -> DiLoCo: $(tail -1 "$TMP/err")"
check "DiLoCo -> 2 islands: global weights" $CK equal "$D/model.safetensors" "" "$(last "$TMP/d2b")/model.safetensors" ""
check "DiLoCo -> 2 islands: outer momentum reset" $CK zero "$(last "$TMP/d2b")/outer.safetensors"
$ATOLL train $M $ZERO --init-from "$TMP/d2" --out "$TMP/d1" >/dev/null 2>"$TMP/err" || fail "DiLoCo -> 1: $(tail -1 "$TMP/err")"
check "DiLoCo (2 islands) -> one process: weights" $CK equal "$D/model.safetensors" "" "$(last "$TMP/d1")/model.safetensors" ""

# 4. --init-step 1: the new run goes on from the checkpoint's step. A run of 8 steps
#    stopped at 4, then continued by a new run from that checkpoint with the moments,
#    ends with the uninterrupted run's weights bit for bit (the learning-rate schedule,
#    the data windows and AdamW's step count all go on); 2 islands continued from the
#    same checkpoint take steps 5-8 at the same learning rates.
$ATOLL train $M --steps 8 --out "$TMP/s_full" >/dev/null 2>&1 || fail "8-step source"
$ATOLL train $M --steps 8 --save-every 4 --stop-after 4 --out "$TMP/s_half" >/dev/null 2>&1 || fail "source stopped at 4"
H4=$(last "$TMP/s_half")
# --steps not past the checkpoint's step: one line, and the new OUT is not left behind
if $ATOLL train $M --steps 4 --init-from "$H4" --init-step 1 --out "$TMP/s_short/a/./" >/dev/null 2>"$TMP/err"; then
  fail "--init-step 1 with --steps 4 from step 4 ran"
else
  grep -q "pass more than 4" "$TMP/err" && pass "--init-step 1, --steps 4 from step 4 refused: $(tail -1 "$TMP/err")" \
    || fail "--init-step 1, --steps 4: $(cat "$TMP/err")"
  [ -e "$TMP/s_short" ] && fail "the refused run left $TMP/s_short ($(ls -AR "$TMP/s_short"))" \
    || pass "the refused run left neither OUT nor the parent it made"
fi
$ATOLL train $M --steps 8 --init-from "$H4" --init-optim 1 --init-step 1 --out "$TMP/s_cont" >/dev/null 2>"$TMP/err" ||
  fail "--init-step 1: $(tail -1 "$TMP/err")"
check "--init-step 1: the continued run's weights equal the uninterrupted run's" \
  $CK equal "$(last "$TMP/s_full")/model.safetensors" "" "$(last "$TMP/s_cont")/model.safetensors" ""
grep -q '"adam_steps":[[:space:]]*8,' "$(last "$TMP/s_cont")/state.json" && pass "--init-step 1: adam_steps 8" \
  || fail "--init-step 1: $(grep -o '"adam_steps":[^,]*' "$(last "$TMP/s_cont")/state.json")"
$ATOLL train $M --steps 8 --init-from "$H4" --out "$TMP/s_fresh" --init-step 1 >/dev/null 2>&1 || fail "--init-step without moments"
grep -q '"adam_steps":[[:space:]]*4,' "$(last "$TMP/s_fresh")/state.json" && pass "--init-step 1 with fresh moments: adam_steps 4" \
  || fail "--init-step 1, fresh moments: $(grep -o '"adam_steps":[^,]*' "$(last "$TMP/s_fresh")/state.json")"
# such a run (adam_steps below its step) stopped at 6 and resumed equals it uninterrupted
$ATOLL train $M --steps 8 --init-from "$H4" --init-step 1 --save-every 2 --stop-after 6 --out "$TMP/s_fresh_cut" \
  >/dev/null 2>&1 || fail "--init-step, fresh moments, stopped at 6"
$ATOLL train --resume "$TMP/s_fresh_cut" >/dev/null 2>"$TMP/err" || fail "--init-step, fresh moments, resume: $(tail -1 "$TMP/err")"
check "--init-step 1 with fresh moments, stopped at 6 and resumed: weights" \
  $CK equal "$(last "$TMP/s_fresh")/model.safetensors" "" "$(last "$TMP/s_fresh_cut")/model.safetensors" ""
$MPIRUN -np 2 $ATOLL train $M --steps 8 --islands 2 --sync-every 2 --init-from "$H4" --init-optim 1 --init-step 1 \
  --out "$TMP/s_k2" >/dev/null 2>"$TMP/err" || fail "--init-step 1 into 2 islands: $(tail -1 "$TMP/err")"
lrs() { /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join("%d:%.6g" % (r["step"], r["lr"]) for r in rows if "lr" in r and r["step"] > 4))' "$1/metrics.jsonl"; }
full=$(lrs "$TMP/s_full"); k2=$(lrs "$TMP/s_k2")
[ -n "$full" ] && [ "$full" = "$k2" ] && pass "--init-step 1 into 2 islands: steps 5-8 at the source's learning rates ($k2)" \
  || fail "--init-step 1 into 2 islands: learning rates '$k2', the source's '$full'"
grep -q '"step":[[:space:]]*8,' "$(last "$TMP/s_k2")/state.json" && pass "--init-step 1 into 2 islands: ends at step 8" \
  || fail "--init-step 1 into 2 islands: $(grep -o '"step":[^,]*' "$(last "$TMP/s_k2")/state.json")"
# streaming islands with an overlap of 2 begun at step 4 (a sync step of H = 4), stopped
# at 5 and resumed, equal the run straight through: no sync happened at the start step,
# so no merge is pending at the resume (state.json first_step)
O="--steps 8 --islands 2 --sync-every 4 --overlap 2 --init-from $H4 --init-optim 1 --init-step 1"
$MPIRUN -np 2 $ATOLL train $M $O --out "$TMP/o_full" >/dev/null 2>"$TMP/err" || fail "overlap islands: $(tail -1 "$TMP/err")"
$MPIRUN -np 2 $ATOLL train $M $O --save-every 5 --stop-after 5 --out "$TMP/o_cut" >/dev/null 2>"$TMP/err" ||
  fail "overlap islands stopped at 5: $(tail -1 "$TMP/err")"
$MPIRUN -np 2 $ATOLL train --resume "$TMP/o_cut" >/dev/null 2>"$TMP/err" || fail "overlap islands resumed: $(tail -1 "$TMP/err")"
check "--init-step 1 into islands with --overlap 2, stopped at 5 and resumed: global weights" \
  $CK equal "$(last "$TMP/o_full")/model.safetensors" "" "$(last "$TMP/o_cut")/model.safetensors" ""
check "--init-step 1 into islands with --overlap 2, stopped at 5 and resumed: island 1" \
  $CK equal "$(last "$TMP/o_full")/island_1.safetensors" "weights." "$(last "$TMP/o_cut")/island_1.safetensors" "weights."

# 5. refusals, one line each
expect_error "shape differs" "the checkpoint's model has dim=32, this run --dim 64" \
  $ATOLL train $M --dim 64 --steps 1 --init-from "$S" --out "$TMP/e1"
expect_error "no checkpoint" "--init-from $TMP/nothere" $ATOLL train $M --steps 1 --init-from "$TMP/nothere" --out "$TMP/e2"
expect_error "--init-optim alone" "--init-optim 1: needs --init-from" $ATOLL train $M --steps 1 --init-optim 1 --out "$TMP/e3"
expect_error "--init-optim with SGD" "needs --optimizer adamw" \
  $ATOLL train $M --steps 1 --init-from "$S" --init-optim 1 --optimizer sgd --out "$TMP/e4"
expect_error "--init-from with --resume" "--init-from: conflicts with --resume" $ATOLL train --resume "$TMP/src" --steps 8 --init-from "$S"
expect_error "--init-step alone" "--init-step 1: needs --init-from" $ATOLL train $M --steps 1 --init-step 1 --out "$TMP/e5"
expect_error "--init-step past --steps" "--steps 4: --init-step 1 begins at the checkpoint's step 4" \
  $ATOLL train $M --steps 4 --init-from "$H4" --init-step 1 --out "$TMP/e6"
expect_error "--init-from into a run directory in use" "already holds a run" $ATOLL train $M --steps 1 --init-from "$S" --out "$TMP/src"
finish

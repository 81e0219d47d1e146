#!/bin/sh
# An island's inner phase in tokens or seconds (docs/islands.md, "Phases in tokens or
# seconds"; src/train/phase.h): islands of one networked run sync after the same steps,
# but an island with --phase-tokens or --phase-seconds takes only the first steps of each
# phase that fit its budget and skips the rest, and its outer gradient weighs in by the
# tokens it trained. Islands and a coordinator over loopback.
#  - tokens: island 1 takes 2 of every 4 steps (--phase-tokens = 2 steps' tokens); its
#    summary and metrics.jsonl say which; with outer SGD at lr 1, no momentum and
#    --merge-alpha 1 the last outer step makes the global weights the mean of the
#    islands' own weights weighted 2:1 by their tokens (weighted_mean.py), not the plain
#    mean (the weight of a phase that skipped nothing);
#  - resume: the same run with every island stopped after step 7 (island 1 mid-phase,
#    one step skipped since the sync) and resumed ends bit-identical to it (the phase's
#    state is in the checkpoint: state.json island_phase);
#  - seconds: three islands of 40, 40 and 160 ms a step (a test hook), H = 16, all with
#    --phase-seconds 0.5: each phase ends after about 0.5 s of steps on every island, so
#    the slow island takes at most half the steps of the fast ones; all three end with
#    the same global weights; the fast islands' compute utilisation is printed beside
#    that of the same run without phases (printed, not judged: a timing is no test);
#  - refusals: a phase inside one job, both flags, --fragments 2; each one line.
#   usage: test_islands_phase.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
. "$SRC/tests/net/islands_lib.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 4 --eval-batches 2 --save-every 0 --steps 12 --islands 2 --sync-every 4"
W="--outer-optimizer sgd --outer-lr 1 --outer-momentum 0 --overlap 1 --merge-alpha 1"
PHASE="--phase-tokens 128" # 2 steps of batch 2 x 32 tokens

# summary FILE KEY: a number of summary.json
summary() { $PY -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1/summary.json" "$2"; }

# two_islands NAME [STOP]: islands 0 (no phase) and 1 ($PHASE) in $TMP/NAME; with STOP,
# both stop after step STOP, then resume
two_islands() {
  D="$TMP/$1"; mkdir -p "$D"
  net_keys "$D" 2 || { fail "$1: keys"; return 1; }
  set -- "$1" "${2:-}" $(free_ports 3)
  start_coordinator "$D" $3 2 --island-timeout 20
  ok=1
  for pass_ in ${2:+stop} run; do
    m0=""; m1=""
    [ $pass_ = stop ] && m0="--stop-after $2" && m1=$m0
    [ $pass_ = run ] && [ -n "$2" ] && m0="--resume $D/net0" && m1="--resume $D/net1"
    timeout -k 5 300 $ATOLL train $M $W $(island_flags "$D" $3 0 $4) $m0 --out "$D/net0" >/dev/null 2>>"$D/net0.err" &
    p0=$!
    timeout -k 5 300 $ATOLL train $M $W $PHASE $(island_flags "$D" $3 1 $5) $m1 --out "$D/net1" >/dev/null 2>>"$D/net1.err" &
    p1=$!
    for p in $p0 $p1; do wait $p; rc=$?; [ $rc -eq 0 ] || { [ $pass_ = stop ] && [ $rc -eq 1 ]; } || ok=0; done
  done
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $ok -eq 1 ] || { fail "$1: an island failed: $(tail -n 2 "$D"/net*.err)"; return 1; }
  return 0
}

if two_islands tokens; then
  D="$TMP/tokens"
  t1=$(summary "$D/net1" inner_steps_taken); s1=$(summary "$D/net1" steps_skipped)
  t0=$(summary "$D/net0" inner_steps_taken 2>/dev/null || echo none)
  [ "$t0 $t1 $s1" = "none 6 6" ] && pass "tokens: island 1 (--phase-tokens 128) took 6 of 12 steps and skipped 6 (island 0, without a phase, reports none)" \
    || fail "tokens: island 1 took/skipped $t1/$s1, expected 6/6; island 0's inner_steps_taken '$t0', expected none"
  sk=$($PY -c 'import json, sys; print(",".join(str(l["step"]) for l in map(json.loads, open(sys.argv[1])) if l.get("skipped") and "loss" not in l))' "$D/net1/metrics.jsonl")
  [ "$sk" = "3,4,7,8,11,12" ] && pass "tokens: island 1's metrics.jsonl marks steps $sk skipped (no loss)" \
    || fail "tokens: skipped steps in metrics.jsonl: '$sk', expected 3,4,7,8,11,12"
  c0=$(summary "$D/net0" tokens_contributed_per_island); c1=$(summary "$D/net1" tokens_contributed_per_island)
  [ "$c0 $c1" = "768 384" ] && pass "tokens: contributed 768 and 384 tokens" || fail "tokens: contributed $c0 and $c1, expected 768 and 384"
  out=$($PY "$SRC/tests/net/weighted_mean.py" "$D/net0" "$D/net1" 2 1) && pass "tokens: last outer step weighted by tokens 2:1, $out" \
    || fail "tokens: $out"
  # the resumed run, stopped after step 7: island 1 took step 5 and 6, skipped 7
  if two_islands resume 7; then
    grep -q '"island_phase"' "$TMP/resume/net1/checkpoints/step_00000007/state.json" \
      && pass "resume: island 1's checkpoint of step 7 holds its phase: $($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["island_phase"])' "$TMP/resume/net1/checkpoints/step_00000007/state.json")" \
      || fail "resume: no island_phase in island 1's checkpoint of step 7"
    for i in 0 1; do
      out=$($PY "$SRC/tests/net/same_run.py" "$TMP/resume/net$i" "$D/net$i") && pass "resume: island $i stopped after step 7 and resumed == uninterrupted: $out" \
        || fail "resume: island $i: $out"
    done
  fi
fi

# three_islands NAME PHASE: islands of 40, 40 and 160 ms a step; PHASE the phase flag (empty: none)
three_islands() {
  D="$TMP/$1"; mkdir -p "$D"; phase=$2
  net_keys "$D" 3 || { fail "$1: keys"; return 1; }
  set -- $(free_ports 4)
  start_coordinator "$D" $1 3 --island-timeout 20
  S="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 0 --eval-batches 1 --save-every 0 --steps 32 --islands 3 --sync-every 16"
  pids=""
  for i in 0 1 2; do
    ms=40; [ $i -eq 2 ] && ms=160
    port=$(echo "$*" | cut -d' ' -f$((i + 2)))
    ATOLL_TEST_STEP_MS=$ms timeout -k 5 300 $ATOLL train $S $phase $(island_flags "$D" $1 $i $port) --out "$D/net$i" >/dev/null 2>"$D/net$i.err" &
    pids="$pids $!"
  done
  ok=1
  for p in $pids; do wait $p || ok=0; done
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $ok -eq 1 ] || { fail "seconds: an island failed: $(tail -n 2 "$D"/net*.err)"; return 1; }
  return 0
}
if three_islands seconds "--phase-seconds 0.5" && three_islands nophase ""; then
  D="$TMP/seconds"
  t0=$(summary "$D/net0" inner_steps_taken); t1=$(summary "$D/net1" inner_steps_taken); t2=$(summary "$D/net2" inner_steps_taken)
  [ "$t0" -ge 8 ] && [ "$t1" -ge 8 ] && [ $((2 * t2)) -le "$t0" ] && [ $((2 * t2)) -le "$t1" ] && [ "$t2" -ge 2 ] \
    && pass "seconds: of 32 steps the fast islands took $t0 and $t1, the 4x slower one $t2 (0.5 s a phase each)" \
    || fail "seconds: steps taken $t0, $t1, $t2: expected at least 8 for the fast islands, at most half of that (and 2) for the slow one"
  for i in 1 2; do
    out=$($PY "$SRC/tests/net/same_weights.py" "$D/net0" "$D/net$i") && pass "seconds: island $i holds island 0's global weights" \
      || fail "seconds: island $i: $out"
  done
  u=$(summary "$D/net0" compute_utilisation); n=$(summary "$TMP/nophase/net0" compute_utilisation)
  echo "seconds: island 0's compute utilisation $u with --phase-seconds 0.5, $n without phases (printed, not judged)"
fi

# refusals, each one line
expect_error "phase inside one job" "--join" $ATOLL train $TINY --data "$TMP/data" --phase-tokens 128 --out "$TMP/bad1"
K="$TMP/keys"; net_keys "$K" 1
J="--join tcp://127.0.0.1:1 --island-key $K/i0/key.secret --coordinator-key $K/coord/key.pub --island-id 0"
expect_error "both phase flags" "give one" $ATOLL train $M $J --phase-tokens 128 --phase-seconds 1 --out "$TMP/bad2"
expect_error "phase with fragments" "--fragments 1" $ATOLL train $M $J --phase-seconds 1 --fragments 2 --out "$TMP/bad3"
finish

#!/bin/sh
# --outer-mode async (docs/islands.md, "Asynchronous merges"): with --overlap T the
# exchange runs beside the inner steps, and in async mode its outer step merges at the
# first step from T on at which the exchange is done, instead of the training thread
# waiting for it at step T. A test hook holds each exchange 300 ms (a slow link) while a
# step takes 20 ms (another hook), H = 32, T = 1:
#  - in one job (2 islands) and as 2 networked islands over loopback, evaluated at every
#    sync (--eval-every 32: async evaluates the global weights its exchange started from,
#    without waiting for it): sync merges every
#    outer step exactly T steps after its sync, async later (staleness at least 4 steps:
#    it merged when the exchange was done); networked, sync's longest gap between two
#    inner steps is the wait (at least 0.2 s) and async's under half of it (in one job
#    printed only); the networked islands end with the same global weights, bit for bit;
#    compute utilisation printed (not judged);
#  - islands of 2 ranks (ZeRO-1) in one job, evaluated and checkpointed mid-run, stopped
#    and resumed: the run ends (its ranks merge together), merging later than T (2 steps
#    or more; 4 ranks share the 2 cores here, so fewer steps fit in the exchange);
#  - refusals: async without --overlap, an unknown mode; each one line.
#   usage: test_islands_async.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
. "$SRC/tests/net/islands_lib.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 32 --eval-batches 1 --save-every 0 --steps 96 --islands 2 --sync-every 32 --overlap 1"
export ATOLL_TEST_EXCHANGE_DELAY_MS=300 ATOLL_TEST_STEP_MS=20

# summary RUN KEY: a number of RUN/summary.json
summary() { $PY -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1/summary.json" "$2"; }

# judge WHERE SYNC_RUN ASYNC_RUN [GAPS]: the staleness of the two runs, and with GAPS
# their longest gaps between inner steps
judge() {
  ss=$(summary "$2" staleness_steps_max); as=$(summary "$3" staleness_steps_max)
  sg=$(summary "$2" longest_step_gap_seconds); ag=$(summary "$3" longest_step_gap_seconds)
  [ "$ss" -eq 1 ] && [ "$as" -ge 4 ] && pass "$1: staleness sync $ss step, async $as steps (merged when the exchange was done)" \
    || fail "$1: staleness sync $ss (expected 1), async $as (expected at least 4)"
  # metrics.jsonl: each merge's staleness on the line of its step, the largest the summary's
  ml=$($PY -c 'import json, sys; print(",".join(str(int(l["merge_staleness"])) for l in map(json.loads, open(sys.argv[1])) if "merge_staleness" in l))' "$3/metrics.jsonl")
  [ "$(echo "$ml" | tr , '\n' | sort -n | tail -1)" = "$as" ] && [ "$(echo "$ml" | tr , '\n' | wc -l)" -eq 3 ] \
    && pass "$1: async metrics.jsonl's merge_staleness per merge: $ml" || fail "$1: async merge_staleness lines '$ml', expected 3 with largest $as"
  if [ -z "${4:-}" ]; then
    echo "$1: longest gap between inner steps sync $sg s, async $ag s (printed, not judged: in one job the exchange thread's MPI calls share the ranks' cores and MPI with the training thread, and its gaps measured 0.001-0.17 s on a loaded 2-core machine)"
  else $PY -c 'import sys; s, a = map(float, sys.argv[1:]); sys.exit(0 if s >= 0.2 and a < s / 2 else 1)' "$sg" "$ag" \
    && pass "$1: longest gap between inner steps sync $sg s (the wait for the exchange), async $ag s" \
    || fail "$1: longest gap between inner steps sync $sg s (expected at least 0.2), async $ag s before step $(summary "$3" longest_step_gap_before_step) (expected under half of it)"
  fi
  echo "$1: compute utilisation sync $(summary "$2" compute_utilisation), async $(summary "$3" compute_utilisation) (printed, not judged)"
}

# in one job
for mode in sync async; do
  $MPIRUN -np 2 $ATOLL train $M --outer-mode $mode --out "$TMP/injob_$mode" >/dev/null 2>"$TMP/injob_$mode.err" \
    || fail "in one job, $mode: $(tail -n 1 "$TMP/injob_$mode.err")"
done
[ -f "$TMP/injob_sync/summary.json" ] && [ -f "$TMP/injob_async/summary.json" ] && judge "in one job" "$TMP/injob_sync" "$TMP/injob_async"

# islands of 2 ranks (ZeRO-1): the ranks of an island merge at the same step (the
# merge's gathers are collective); evaluation and a checkpoint mid-run settle and merge
# what is due; stopped after step 40 and resumed, the run ends
R="$TMP/injob_dp2"
$MPIRUN -np 4 $ATOLL train $M --zero 1 --outer-mode async --eval-every 40 --save-every 20 --stop-after 40 --out "$R" >/dev/null 2>"$R.err"
$MPIRUN -np 4 $ATOLL train $M --zero 1 --outer-mode async --eval-every 40 --save-every 20 --resume "$R" >/dev/null 2>>"$R.err" \
  && [ "$(summary "$R" steps)" -eq 96 ] && [ "$(summary "$R" staleness_steps_max)" -ge 2 ] \
  && pass "in one job, islands of 2 ranks: stopped after step 40, resumed, ended at step 96 with staleness $(summary "$R" staleness_steps_max)" \
  || fail "in one job, islands of 2 ranks: $(tail -n 1 "$R.err")"

# networked: 2 islands and a coordinator over loopback
net_run() {
  D="$TMP/net_$1"; mkdir -p "$D"
  net_keys "$D" 2 || { fail "networked $1: keys"; return 1; }
  set -- "$1" $(free_ports 3)
  start_coordinator "$D" $2 2 --island-timeout 20
  timeout -k 5 300 $ATOLL train $M --outer-mode $1 $(island_flags "$D" $2 0 $3) --out "$D/net0" >/dev/null 2>"$D/net0.err" &
  p0=$!
  timeout -k 5 300 $ATOLL train $M --outer-mode $1 $(island_flags "$D" $2 1 $4) --out "$D/net1" >/dev/null 2>"$D/net1.err" &
  p1=$!
  ok=1; wait $p0 || ok=0; wait $p1 || ok=0
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $ok -eq 1 ] || { fail "networked $1: an island failed: $(tail -n 1 "$D"/net*.err)"; return 1; }
  out=$($PY "$SRC/tests/net/same_weights.py" "$D/net0" "$D/net1") && pass "networked $1: both islands hold the same global weights" \
    || { fail "networked $1: $out"; return 1; }
}
net_run sync && net_run async && judge "networked" "$TMP/net_sync/net0" "$TMP/net_async/net0" gaps

unset ATOLL_TEST_EXCHANGE_DELAY_MS ATOLL_TEST_STEP_MS
expect_error "async without overlap" "--overlap" $MPIRUN -np 2 $ATOLL train $(echo "$M" | sed 's/--overlap 1//') --outer-mode async --out "$TMP/bad1"
expect_error "unknown mode" "--outer-mode" $ATOLL train $TINY --data "$TMP/data" --outer-mode eager --out "$TMP/bad2"
finish

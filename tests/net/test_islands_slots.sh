#!/bin/sh
# `--join` with fewer island slots (--islands K) than the coordinator's --min-islands
# (docs/islands.md): no quorum can ever form (another island would need an --island-id
# of at least K), so the island stops at its first outer step with one line naming
# both flags, instead of waiting 10 x --net-timeout for islands that cannot come. With
# --min-islands 1 the same single-slot island is valid: it runs to the end. A bad
# --overlap is refused before the island registers with the coordinator.
#   usage: test_islands_slots.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
small_data
D="$TMP/slots"; mkdir -p "$D"
net_keys "$D" 1 || { fail keys; finish; }
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 0 --save-every 0 --steps 6 --sync-every 2 --islands 1 --net-timeout 5"
for min in 2 1; do
  set -- $(free_ports 2); CPORT=$1; PORT=$2
  start_coordinator "$D" $CPORT $min --island-timeout 4 --state "$D/state$min.json"
  t0=$(date +%s)
  timeout 120 $ATOLL train $M $(island_flags "$D" $CPORT 0 $PORT) --out "$D/run$min" >/dev/null 2>"$D/err$min"
  rc=$?; took=$(( $(date +%s) - t0 ))
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  if [ $min -eq 2 ]; then
    errs=$(grep -c "error" "$D/err$min")
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$errs" -eq 1 ] && grep -q -- "--islands 1: the coordinator .* needs at least 2 islands (its --min-islands)" "$D/err$min" \
      && pass "--islands 1 against --min-islands 2: $(grep error "$D/err$min" | cut -c1-160)" || fail "--islands 1 against --min-islands 2 (status $rc): $(tail -2 "$D/err$min")"
    # at its first outer step, not after 10 x --net-timeout (50 s)
    [ $took -lt 25 ] && pass "stopped after ${took} s" || fail "stopped only after ${took} s"
  else
    [ $rc -eq 0 ] && pass "--islands 1 with --min-islands 1: a single island over a coordinator runs to the end" || fail "--islands 1 with --min-islands 1 (status $rc): $(tail -2 "$D/err$min")"
  fi
done

# a bad --overlap is refused before the island registers with the coordinator
set -- $(free_ports 2); CPORT=$1; PORT=$2
: > "$D/coord.log"
start_coordinator "$D" $CPORT 2 --island-timeout 4 --state "$D/state_overlap.json"
i=0; while [ $i -lt 50 ] && ! grep -q "coordinator: listening" "$D/coord.log"; do sleep 0.2; i=$((i + 1)); done
grep -q "coordinator: listening" "$D/coord.log" || fail "the coordinator did not start: $(tail -2 "$D/coord.log")"
timeout 60 $ATOLL train $M --overlap 5 $(island_flags "$D" $CPORT 0 $PORT) --out "$D/run_overlap" >/dev/null 2>"$D/err_overlap"
rc=$?
sleep 1
kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c . "$D/err_overlap")" -eq 1 ] && grep -q -- "--overlap 5: must be >= 0" "$D/err_overlap" \
  && pass "bad --overlap with --join: $(cat "$D/err_overlap")" || fail "bad --overlap with --join (status $rc): $(tail -2 "$D/err_overlap")"
grep -q "island 0 joined" "$D/coord.log" && fail "the island registered before refusing --overlap: $(grep joined "$D/coord.log")" \
  || pass "the coordinator never saw the island"
finish

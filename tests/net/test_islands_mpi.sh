#!/bin/sh
# Islands of several ranks (docs/islands.md, "Islands of several ranks"): K = 2 islands,
# each its own `mpirun -np 2` job joined to a coordinator over loopback, end with
# global weights bit-identical to --islands 2 in one `mpirun -np 4`, with equal
# validation losses, the coordinator committing every sync; inner layouts DDP (fp32,
# and fp4 with streaming fragments and overlap), TP = 2 (fp4, fragments), ZeRO-1
# with --island-data files (each island its own source files), PP = 2 (int8) and
# ZeRO-3 (fp4, fragments). Then an
# island of one rank meeting islands of two is refused with one line.
#   usage: test_islands_mpi.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
. "$SRC/tests/net/islands_lib.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 4 --eval-batches 2 --save-every 0 --steps 12"


cmp_runs() { $PY "$SRC/tests/net/same_run.py" "$1" "$2"; }

# run_case NAME FLAGS...: --islands 2 in one mpirun -np 4, then 2 islands of mpirun -np 2
run_case() {
  name=$1; shift
  D="$TMP/$name"; mkdir -p "$D"
  $MPIRUN -np 4 $ATOLL train $M --islands 2 "$@" --out "$D/injob" >/dev/null 2>"$D/injob.err" || { fail "$name: in-job run: $(tail -1 "$D/injob.err")"; return; }
  net_keys "$D" 2 || { fail "$name: keys"; return; }
  cport=$(free_ports 1)
  start_coordinator "$D" $cport 2 --island-timeout 30
  p0=$(pair_port); p1=$(pair_port)
  $MPIRUN -np 2 $ATOLL train $M --islands 2 "$@" $(island_flags "$D" $cport 0 $p0) --out "$D/net0" >/dev/null 2>"$D/net0.err" &
  a=$!
  $MPIRUN -np 2 $ATOLL train $M --islands 2 "$@" $(island_flags "$D" $cport 1 $p1) --out "$D/net1" >/dev/null 2>"$D/net1.err" &
  b=$!
  ok=1
  wait $a || ok=0
  wait $b || ok=0
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $ok -eq 1 ] || { fail "$name: an island failed"; tail -n 3 "$D"/net*.err "$D/coord.log"; return; }
  for i in 0 1; do
    out=$(cmp_runs "$D/net$i" "$D/injob") && pass "$name: island $i (2 ranks) == --islands 2 in one mpirun -np 4: $out" || fail "$name: island $i: $out"
  done
  syncs=$(grep -c "committed: revision" "$D/coord.log")
  joined=$(grep -c "rank [01] of 2 joined" "$D/coord.log")
  [ "$joined" -eq 4 ] && pass "$name: the coordinator saw 2 islands x 2 ranks" || fail "$name: $joined rank registrations, expected 4"
  out=$($PY -c 'import json, sys
n = json.load(open(sys.argv[1]))["net"]
per = n["wire_bytes_per_rank"]
ok = len(per) == 2 and min(per) > 0 and n["wire_bytes"] == sum(per)
print("wire_bytes %d = %s" % (n["wire_bytes"], " + ".join("%d" % x for x in per)))
sys.exit(0 if ok else 1)' "$D/net0/summary.json") && pass "$name: summary.json net: $out" || fail "$name: summary.json net: $out"
  echo "$syncs" > "$D/syncs"
}

# every sync committed: 12 steps, sync every 3 -> 4 commits; every 4 with 2 fragments -> 6
expect_syncs() { [ "$(cat "$TMP/$1/syncs" 2>/dev/null)" = "$2" ] && pass "$1: coordinator committed all $2 syncs" || fail "$1: $(cat "$TMP/$1/syncs" 2>/dev/null) commits, expected $2"; }

if [ -z "${ONLY:-}" ] || [ "$ONLY" = ddp_fp32 ]; then run_case ddp_fp32 --sync-every 3; expect_syncs ddp_fp32 4; fi
if [ -z "${ONLY:-}" ] || [ "$ONLY" = ddp_fp4_stream ]; then
  run_case ddp_fp4_stream --sync-every 4 --fragments 2 --overlap 1 --outer-dtype fp4; expect_syncs ddp_fp4_stream 6; fi
if [ -z "${ONLY:-}" ] || [ "$ONLY" = tp2_fp4_stream ]; then
  run_case tp2_fp4_stream --tp 2 --sync-every 4 --fragments 2 --outer-dtype fp4; expect_syncs tp2_fp4_stream 6; fi

if [ -z "${ONLY:-}" ] || [ "$ONLY" = zero1_files ]; then
  run_case zero1_files --zero 1 --island-data files --sync-every 3; expect_syncs zero1_files 4; fi

if [ -z "${ONLY:-}" ] || [ "$ONLY" = pp2_int8 ]; then
  run_case pp2_int8 --pp 2 --microbatches 2 --sync-every 3 --outer-dtype int8; expect_syncs pp2_int8 4; fi
if [ -z "${ONLY:-}" ] || [ "$ONLY" = zero3_fp4 ]; then
  run_case zero3_fp4 --zero 3 --sync-every 4 --fragments 2 --outer-dtype fp4; expect_syncs zero3_fp4 6; fi

# mismatch NAME LINE NP FLAGS...: island 0 (2 ranks, DDP) registers first, then island 1
# of NP ranks with FLAGS must stop with LINE, which the coordinator logs once
mismatch() {
  name=$1; line=$2; np=$3; shift 3
  if [ "$np" -gt 1 ]; then launch="$MPIRUN -np $np"; else launch="timeout -k 5 120"; fi
  D="$TMP/$name"; mkdir -p "$D"
  net_keys "$D" 2
  cport=$(free_ports 1); p0=$(pair_port); p1=$(pair_port)
  start_coordinator "$D" $cport 2 --island-timeout 30
  $MPIRUN -np 2 $ATOLL train $M --islands 2 --sync-every 3 --net-timeout 20 $(island_flags "$D" $cport 0 $p0) --out "$D/net0" >/dev/null 2>"$D/net0.err" &
  a=$!
  t=0; while [ $t -lt 60 ] && [ "$(grep -c 'of 2 joined' "$D/coord.log")" -lt 2 ]; do sleep 1; t=$((t + 1)); done
  # island 1 must come second, or it would set the run's layout and island 0 be refused
  [ "$(grep -c 'of 2 joined' "$D/coord.log")" -ge 2 ] || { fail "$name: island 0 did not register in 60 s: $(tail -1 "$D/net0.err")"; kill $a $COORD_PID 2>/dev/null; wait $a $COORD_PID 2>/dev/null; return; }
  $launch $ATOLL train $M --islands 2 --sync-every 3 "$@" $(island_flags "$D" $cport 1 $p1) --out "$D/net1" >/dev/null 2>"$D/net1.err"
  rc=$?
  kill $a 2>/dev/null; wait $a 2>/dev/null
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $rc -ne 0 ] && grep -q "$line" "$D/net1.err" && pass "$name: island 1 stops: $(grep "$line" "$D/net1.err" | head -1)" || fail "$name: island 1 exit $rc: $(tail -2 "$D/net1.err")"
  [ "$(grep -c "$line" "$D/coord.log")" -eq 1 ] && pass "$name: the coordinator logs the refusal once" || fail "$name: coordinator log: $(grep -c "$line" "$D/coord.log") refusal lines"
}
# a mismatch of rank counts: island 1 is one process
if [ -z "${ONLY:-}" ] || [ "$ONLY" = mismatch ]; then
  mismatch mismatch_ranks "island 1 has 1 rank(s), the run's islands have 2" 1
  # the same ranks, another layout: island 1 is TP 2, island 0 DDP
  mismatch mismatch_layout "its layout (tp x pp x dp, the model, --islands, --island-data, --sync-every, --fragments or --outer-dtype) differs from the run's islands'" 2 --tp 2
  # the same layout, another split of the data: island 1 thinks the run has 3 islands
  mismatch mismatch_islands "its layout (tp x pp x dp, the model, --islands, --island-data, --sync-every, --fragments or --outer-dtype) differs from the run's islands'" 2 --islands 3
  # the same layout, another schedule: each would wait for the other's READYs for ever
  mismatch mismatch_sync "its layout (tp x pp x dp, the model, --islands, --island-data, --sync-every, --fragments or --outer-dtype) differs from the run's islands'" 2 --sync-every 2
fi
finish

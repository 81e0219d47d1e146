#!/bin/sh
# Islands as separate jobs (docs/islands.md) end bit-identical to the same run with
# --islands K inside one mpirun: K island processes and a coordinator over loopback,
# fp32, and fp4 with streaming fragments and overlap (the exchange on its own thread,
# proven to run beside the inner steps); K = 2 and K = 3; islands given no
# --island-listen (they listen on their address toward the coordinator); and islands on
# the shadow device against the in-job CPU run; islands stopped between syncs and
# resumed. Compared: every tensor of each island's final model.safetensors (the global
# weights) and every validation loss. Also: islands of different batches, whose outer
# mean is weighted by their tokens.
#   usage: test_islands_equiv.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
. "$SRC/tests/net/islands_lib.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 4 --eval-batches 2 --save-every 0 --steps 12"

cmp_runs() { $PY "$SRC/tests/net/same_run.py" "$1" "$2"; } # the global weights bit for bit, and the validation losses

# run_case NAME K FLAGS...: --islands K in one mpirun, then K islands as processes
# (EXCEPT="NAME ...": leave those cases out; ctest runs fp32_k2 alone in the quick tier)
run_case() {
  name=$1; K=$2; shift 2
  case " ${EXCEPT:-} " in *" $name "*) return ;; esac
  D="$TMP/$name"; mkdir -p "$D"
  $MPIRUN -np $K $ATOLL train $M --islands $K "$@" --out "$D/injob" >/dev/null 2>"$D/injob.err" || { fail "$name: in-job run: $(tail -1 "$D/injob.err")"; return; }
  net_keys "$D" $K || { fail "$name: keys"; return; }
  set -- "$@" -- $(free_ports $((K + 1)))
  flags=""; while [ "$1" != "--" ]; do flags="$flags $1"; shift; done; shift
  cport=$1; shift
  start_coordinator "$D" $cport $K --island-timeout 20
  ports="$*"; ok=1
  # STOP_AT=S: every island stops after step S (a checkpoint), then all resume
  for pass_ in ${STOP_AT:+stop} run; do
    set -- $ports
    pids=""; i=0
    while [ $i -lt $K ]; do
      net=$(island_flags "$D" $cport $i $1)
      # NO_LISTEN=1: without --island-listen (the address toward the coordinator, a free port)
      [ "${NO_LISTEN:-0}" = 1 ] && net=$(echo "$net" | sed 's/ --island-listen [^ ]*//')
      more=""
      [ $pass_ = stop ] && more="--stop-after $STOP_AT"
      [ $pass_ = run ] && [ -n "${STOP_AT:-}" ] && more="--resume $D/net$i"
      timeout -k 5 300 $ATOLL train $M --islands $K $flags ${NET_ONLY:-} $net $more --out "$D/net$i" >/dev/null 2>>"$D/net$i.err" &
      pids="$pids $!"; i=$((i + 1)); shift
    done
    for p in $pids; do wait $p; rc=$?; [ $rc -eq 0 ] || { [ $pass_ = stop ] && [ $rc -eq 1 ]; } || ok=0; done
  done
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $ok -eq 1 ] || { fail "$name: an island failed"; tail -n 3 "$D"/net*.err "$D/coord.log"; return; }
  i=0
  while [ $i -lt $K ]; do
    out=$(cmp_runs "$D/net$i" "$D/injob") && pass "$name: island $i of $K as its own process == --islands $K in one job: $out" || fail "$name: island $i: $out"
    i=$((i + 1))
  done
  commits=$(grep -c "committed: revision" "$D/coord.log")
  [ "$commits" -ge 1 ] && pass "$name: coordinator committed $commits revisions" || fail "$name: no commits in the coordinator log"
}

[ -n "${ONLY:-}" ] && { run_case $ONLY; finish; }
run_case fp32_k2 2 --sync-every 3
# with overlap the exchange runs on its own thread; the test hook holds it until the
# training thread has taken its T steps, which an exchange run in place never lets happen
export ATOLL_TEST_OVERLAP_PROOF=1
run_case fp4_stream_k2 2 --sync-every 4 --fragments 2 --overlap 1 --outer-dtype fp4
unset ATOLL_TEST_OVERLAP_PROOF
run_case fp4_stream_k3 3 --sync-every 4 --fragments 3 --outer-dtype fp4 --net-streams 2
# islands given no --island-listen listen on their address toward the coordinator
NO_LISTEN=1 run_case fp32_k2_nolisten 2 --sync-every 3
[ -d "$TMP/fp32_k2_nolisten" ] && { grep -q "data at tcp://127.0.0.1:[0-9]*" "$TMP/fp32_k2_nolisten/coord.log" \
  && pass "without --island-listen: $(grep -o 'island 0 joined.*data at tcp://[0-9.:]*' "$TMP/fp32_k2_nolisten/coord.log" | head -1 | sed 's/(key [^,]*, //')" \
  || fail "without --island-listen: $(grep 'joined' "$TMP/fp32_k2_nolisten/coord.log" | head -1)"; }
# few flags: the coordinator holds the run's settings (--run FILE) and each island gives
# only the coordinator, its keys, its data and its out; its slot is its key's place in
# the allow-list (i0.pub, i1.pub). Bit-identical to --islands 2 in one job, as above.
few_flags() {
  D="$TMP/few"; mkdir -p "$D"
  $MPIRUN -np 2 $ATOLL train $M --islands 2 --sync-every 3 --out "$D/injob" >/dev/null 2>"$D/injob.err" || { fail "few flags: in-job run: $(tail -1 "$D/injob.err")"; return; }
  net_keys "$D" 2 || { fail "few flags: keys"; return; }
  printf '{"layers": 2, "heads": 2, "dim": 32, "context": 32, "batch": 2, "threads": 1, "eval_every": 4, "eval-batches": 2, "save-every": 0, "steps": 12, "islands": 2, "sync-every": 3}\n' >"$D/run.json"
  set -- $(free_ports 1)
  start_coordinator "$D" $1 2 --island-timeout 20 --run "$D/run.json"
  # a flag that disagrees with the run's settings is refused in one line, before registering
  timeout -k 5 30 $ATOLL train --join tcp://127.0.0.1:$1 --island-key "$D/i0/key.secret" --coordinator-key "$D/coord/key.pub" \
    --data "$TMP/data" --sync-every 4 --out "$D/bad" >/dev/null 2>"$D/bad.err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c . "$D/bad.err")" -eq 1 ] && grep -q -- "--sync-every 4: the coordinator's run sets sync-every = 3" "$D/bad.err" \
    && pass "few flags: a disagreeing flag: $(cat "$D/bad.err")" || fail "few flags: a disagreeing flag (status $rc): $(cat "$D/bad.err")"
  pids=""
  for i in 1 0; do  # (in reverse: the slot comes from the key, not the order of arrival)
    timeout -k 5 300 $ATOLL train --join tcp://127.0.0.1:$1 --island-key "$D/i$i/key.secret" --coordinator-key "$D/coord/key.pub" \
      --data "$TMP/data" --out "$D/net$i" >/dev/null 2>"$D/net$i.err" &
    pids="$pids $!"
  done
  ok=1
  for p in $pids; do wait $p || ok=0; done
  [ $ok -eq 1 ] || { fail "few flags: an island failed: $(tail -n 1 "$D"/net*.err)"; kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null; return; }
  for i in 0 1; do
    out=$(cmp_runs "$D/net$i" "$D/injob") && pass "few flags: island $i ($(grep -o 'slot [0-9]* of [0-9]*' "$D/net$i.err")) == --islands 2 in one job: $out" || fail "few flags: island $i: $out"
  done
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  # a run file that names an island's own setting is refused at the coordinator's start
  printf '{"islands": 2, "data": "x"}' >"$D/own.json"
  $ATOLL coordinator --listen tcp://127.0.0.1:$1 --keys "$D/coord" --run "$D/own.json" >/dev/null 2>"$D/own.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "data is each island's own" "$D/own.err" && pass "few flags: $(cat "$D/own.err")" || fail "few flags: --run with data (status $rc): $(cat "$D/own.err")"
  # a coordinator without --run gives the island slot alone: an island without --islands is
  # told. (A new port and no state file: this is a new run, not the one above restored.)
  rm -f "$D/coord/coordinator.json"
  echo "--- a coordinator without --run" >>"$D/coord.log"
  set -- $(free_ports 1)
  start_coordinator "$D" $1 2
  timeout -k 5 60 $ATOLL train --join tcp://127.0.0.1:$1 --island-key "$D/i1/key.secret" --coordinator-key "$D/coord/key.pub" \
    --data "$TMP/data" --out "$D/norun" --net-timeout 40 >/dev/null 2>"$D/norun.err"
  rc=$?
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c . "$D/norun.err")" -eq 1 ] && grep -q "it was started without --run FILE); give --islands" "$D/norun.err" \
    && pass "few flags: $(cat "$D/norun.err")" || { fail "few flags: a coordinator without --run (status $rc): $(cat "$D/norun.err")"; sed -n '/^--- a coordinator without/,$p' "$D/coord.log" | tail -n 8; }
}
[ -z "${EXCEPT_FEW:-}" ] && few_flags

# islands of different batches (2 and 6 sequences a step): the outer mean weighs each
# contribution by its tokens. Outer SGD with lr 1 and no momentum, and --merge-alpha 1
# (each island keeps its own weights): the last outer step makes the global weights
# (2 l_0 + 6 l_1) / 8 of the islands' own weights l_k, whatever they were before.
weighted() {
  D="$TMP/weighted"; mkdir -p "$D"
  net_keys "$D" 2 || { fail "weighted: keys"; return; }
  set -- $(free_ports 3)
  start_coordinator "$D" $1 2 --island-timeout 20
  W=$(echo "$M" | sed 's/--batch 2 //')" --islands 2 --sync-every 3 --outer-optimizer sgd --outer-lr 1 --outer-momentum 0 --overlap 1 --merge-alpha 1"
  timeout -k 5 300 $ATOLL train $W --batch 2 $(island_flags "$D" $1 0 $2) --out "$D/net0" >/dev/null 2>"$D/net0.err" &
  p0=$!
  timeout -k 5 300 $ATOLL train $W --batch 6 $(island_flags "$D" $1 1 $3) --out "$D/net1" >/dev/null 2>"$D/net1.err" &
  p1=$!
  ok=1; wait $p0 || ok=0; wait $p1 || ok=0
  kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
  [ $ok -eq 1 ] || { fail "weighted: an island failed: $(tail -n 1 "$D"/net*.err)"; return; }
  out=$($PY "$SRC/tests/net/weighted_mean.py" "$D/net0" "$D/net1" 2 6) && pass "weighted: batches 2 and 6, $out" || fail "weighted: $out"
}
[ -z "${EXCEPT_WEIGHTED:-}" ] && weighted

# every island stopped between two syncs (and, with overlap, between a sync and its
# merge) and resumed from its checkpoint: its own weights come back (island_K.safetensors)
# and, at the run's revision (state.json island_revision), it exchanges at once
STOP_AT=5 run_case resume_fp32_k2 2 --sync-every 3
STOP_AT=5 run_case resume_int8_overlap_k2 2 --sync-every 4 --fragments 2 --overlap 1 --outer-dtype int8

# the islands on a device (the shadow device: the CPU kernels behind addresses the host
# may not touch), their outer exchange on the host copy of the weights, against the
# in-job CPU run
NET_ONLY="--device shadow" run_case shadow_fp4_stream_k2 2 --sync-every 4 --fragments 2 --overlap 1 --outer-dtype fp4
finish

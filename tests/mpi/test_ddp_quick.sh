#!/bin/sh
# The quick tier's data-parallel check: DDP at 2 ranks ends within 1e-5 of one process
# with --accum 2 on the same global batch (6 steps, a tiny model; test_dp checks the rest).
# usage: test_ddp_quick.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --steps 6 --warmup 2 --lr 3e-3 --eval-every 3 --eval-batches 2 --save-every 0"
$ATOLL train $M --accum 2 --out "$TMP/single" >/dev/null 2>"$TMP/err" || fail "one process, accum 2: $(tail -1 "$TMP/err")"
$MPIRUN -np 2 $ATOLL train $M --out "$TMP/ddp" >/dev/null 2>"$TMP/err" || fail "DDP at 2 ranks: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/ddp" "$TMP/single" 1e-5) && pass "DDP N=2 == one process accum 2: $out" || fail "DDP N=2 vs one process: $out"
finish

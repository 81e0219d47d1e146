#!/bin/sh
# --grad-dtype bf16: data-parallel gradients on the wire in bfloat16 (src/comm/ring.c).
# DDP at bf16 grads tracks DDP at fp32 within bf16 tolerance and every replica ends
# bit-identical; DDP and ZeRO-1/2/3 at bf16 are bit-identical to each other (every
# stage leaves the same bf16-valued sums); resume is exact within bf16; the gradient
# bytes are exactly half; TP, PP and islands keep working with it; bad values fail.
# usage: test_grad16.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --steps 20 --warmup 2 --lr 3e-3 --eval-every 10 --eval-batches 3 --save-every 0"
run() { # run NAME NP FLAGS...
  name=$1; np=$2; shift 2
  $MPIRUN -np $np $ATOLL train $M "$@" --out "$TMP/$name" >/dev/null 2>"$TMP/$name.err" \
    || fail "$name: $(tail -1 "$TMP/$name.err")"
}

# 1. 2-rank DDP: bf16 grads vs fp32 grads; the header says it
run ddp32 2
run ddp16 2 --grad-dtype bf16
grep -q "gradients bf16 on the wire" "$TMP/ddp16.err" && pass "header: $(grep -o 'gradients bf16 on the wire' "$TMP/ddp16.err")" \
  || fail "header lacks the gradient dtype: $(head -2 "$TMP/ddp16.err")"
out=$($CLOSE "$TMP/ddp16" "$TMP/ddp32" 0); rc=$? # 1: they differ; 2: they could not be compared
[ $rc -eq 1 ] && pass "bf16 grads differ from fp32 (as they must)" \
  || fail "bf16 grads vs fp32 (status $rc, 0 = bit-identical: is the wire bf16 at all?): $out"
out=$($CLOSE "$TMP/ddp16" "$TMP/ddp32" 4e-3) && pass "DDP bf16 grads ~ DDP fp32 within 4e-3 (one bf16 ulp) after 20 steps: $out" \
  || fail "DDP bf16 vs fp32: $out"

# 2. ZeRO-1/2/3 at bf16 == DDP at bf16, bit for bit, at 4 ranks (the run itself checks
#    that every replica holds the same weights hash, or fails)
run d4 4 --grad-dtype bf16
for st in 1 2 3; do
  run z$st 4 --grad-dtype bf16 --zero $st
  out=$($CLOSE "$TMP/z$st" "$TMP/d4" 0) && pass "ZeRO-$st bf16 == DDP bf16 bit for bit: $out" || fail "ZeRO-$st bf16 vs DDP bf16: $out"
done
run d4f 4
run z2f 4 --zero 2

# 3. gradient bytes per rank: exactly half of fp32 (all-reduce; reduce-scatter), the
#    weights' all-gather unchanged; the config in summary.json says bf16
$PY - "$TMP" <<'PYEOF' && pass "bytes: $(cat "$TMP/verdict")" || fail "bytes: $(cat "$TMP/verdict")"
import json, sys
t = sys.argv[1]
S = {d: json.load(open(f"{t}/{d}/summary.json")) for d in ("ddp32", "ddp16", "d4", "d4f", "z2", "z2f")}
b = lambda d, op: S[d]["bytes_sent_per_rank"][op]
ok = all(2 * x == y and x > 0 for x, y in zip(b("ddp16", "allreduce"), b("ddp32", "allreduce")))
ok &= all(2 * x == y and x > 0 for x, y in zip(b("d4", "allreduce"), b("d4f", "allreduce")))
ok &= all(2 * x == y and x > 0 for x, y in zip(b("z2", "reduce_scatter"), b("z2f", "reduce_scatter")))
ok &= b("z2", "allgather") == b("z2f", "allgather")
ok &= S["ddp16"]["config"]["grad-dtype"] == "bf16" and S["ddp32"]["config"]["grad-dtype"] == "fp32"
open(f"{t}/verdict", "w").write(
    f"2-rank all-reduce {b('ddp16', 'allreduce')} vs fp32 {b('ddp32', 'allreduce')}; "
    f"4-rank ZeRO-2 reduce-scatter {b('z2', 'reduce_scatter')} vs {b('z2f', 'reduce_scatter')}, "
    f"all-gather {b('z2', 'allgather')} vs {b('z2f', 'allgather')}")
sys.exit(0 if ok else 1)
PYEOF

# 4. resume within --grad-dtype bf16 is exact (the checkpoint records it); a resume may
#    change it (the state is fp32 either way)
run stop16 2 --grad-dtype bf16 --stop-after 10
$MPIRUN -np 2 $ATOLL train --resume "$TMP/stop16" >/dev/null 2>"$TMP/err" || fail "resume bf16: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/stop16" "$TMP/ddp16" 0 11) && pass "bf16 stop at 10 + resume == uninterrupted, bit for bit: $out" \
  || fail "bf16 resume: $out"
run stopb 2 --grad-dtype bf16 --stop-after 10
$MPIRUN -np 2 $ATOLL train --resume "$TMP/stopb" --grad-dtype fp32 >/dev/null 2>"$TMP/err" \
  && ! grep -q "on the wire" "$TMP/err" && pass "a bf16 checkpoint resumes at --grad-dtype fp32" \
  || fail "resume bf16 -> fp32: $(tail -1 "$TMP/err")"

# 5. with TP, PP and islands the dp axis carries bf16 (half its bytes) and runs track fp32
for lay in "tp:--tp 2" "pp:--pp 2" "isl:--islands 2 --sync-every 5"; do
  n=${lay%%:*}; f=${lay#*:}
  run ${n}32 4 $f
  run ${n}16 4 $f --grad-dtype bf16
  out=$($CLOSE "$TMP/${n}16" "$TMP/${n}32" 4e-3) || fail "$n bf16 vs fp32: $out"
  $PY - "$TMP" $n <<'PYEOF' && pass "$n ($f): bf16 ~ fp32 ($out); $(cat "$TMP/verdict")" || fail "$n: $(cat "$TMP/verdict")"
import json, sys
t, n = sys.argv[1], sys.argv[2]
a, b = (json.load(open(f"{t}/{n}{x}/summary.json"))["bytes_per_step_per_rank_by_axis"]["data"] for x in ("16", "32"))
ok = all(2 * x == y and x > 0 for x, y in zip(a, b))
open(f"{t}/verdict", "w").write(f"dp-axis bytes/step/rank {a} vs fp32 {b}")
sys.exit(0 if ok else 1)
PYEOF
done

# 6. bad input: one line naming the flag
expect_error "unknown grad dtype" "--grad-dtype" $ATOLL train $M --grad-dtype fp16 --out "$TMP/bad"
expect_error "empty grad dtype" "--grad-dtype" $ATOLL train $M --grad-dtype "" --out "$TMP/bad"
finish

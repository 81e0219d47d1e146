#!/bin/sh
# The device path on any CPU (src/ops/ops_shadow.c): with --device shadow the model, its
# gradients, AdamW moments and activations sit behind addresses that fault when host code
# dereferences them, and every op runs the CPU kernel on the translated address. A run
# must equal the CPU run bit for bit (data parallel too); any host read or write of
# device memory crashes it.
# This is the host side of --device cuda (docs/gpu.md), proven without a GPU.
# usage: test_device_shadow.sh ATOLL SOURCE_DIR
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
small_data
EQ="$PY $SRC/tests/cli/st_equal.py"
MQ="$PY $SRC/tests/cli/metrics_equal.py"
M="$TINY --data $TMP/data --steps 6 --save-every 3 --warmup 2"
ck() { echo "$1/checkpoints/step_0000000$2"; }
same_run() { # NAME A B STEP: weights, moments and the metrics of runs A and B are identical
  for f in model optimizer; do
    if out=$($EQ "$(ck "$2" "$4")/$f.safetensors" "$(ck "$3" "$4")/$f.safetensors"); then pass "$1: $f $out"
    else fail "$1: $f $out"; fi
  done
  if out=$($MQ "$2/metrics.jsonl" "$3/metrics.jsonl"); then pass "$1: metrics $out"; else fail "$1: metrics $out"; fi
}
train() { # OUT FLAGS...: a run that must succeed
  out=$1; shift
  $ATOLL train "$@" --out "$TMP/$out" >"$TMP/$out.log" 2>&1 || fail "run $out: $(tail -1 "$TMP/$out.log")"
}

# 1. GPT-2 and Llama: shadow equals cpu
train g_cpu $M
train g_sh $M --device shadow
grep -q "device shadow" "$TMP/g_sh.log" && pass "the header names the device" || fail "header: $(grep 'atoll train:' "$TMP/g_sh.log" | tail -1)"
same_run "gpt2 on shadow vs cpu" "$TMP/g_cpu" "$TMP/g_sh" 6
train l_cpu $M --arch llama --kv-heads 1
train l_sh $M --arch llama --kv-heads 1 --device shadow
same_run "llama on shadow vs cpu" "$TMP/l_cpu" "$TMP/l_sh" 6
# SGD and accumulation over micro-batches
train s_cpu $M --optimizer sgd --accum 2
train s_sh $M --optimizer sgd --accum 2 --device shadow
same_run "sgd, accum 2 on shadow vs cpu" "$TMP/s_cpu" "$TMP/s_sh" 6

# data parallel: the buckets' collectives run on host copies of the device gradients
# (and ZeRO-1's all-gather of the weights), in the CPU run's buckets, so the sums match
mpi_pair() { # NAME NP FLAGS...: the same job on cpu and on shadow
  name=$1; np=$2; shift 2
  $MPIRUN -np "$np" $ATOLL train $M "$@" --out "$TMP/${name}_cpu" >"$TMP/$name.log" 2>&1 || fail "$name on cpu: $(tail -1 "$TMP/$name.log")"
  $MPIRUN -np "$np" $ATOLL train $M "$@" --device shadow --out "$TMP/${name}_sh" >"$TMP/$name.log" 2>&1 \
    || fail "$name on shadow: $(tail -1 "$TMP/$name.log")"
  same_run "$name on shadow vs cpu" "$TMP/${name}_cpu" "$TMP/${name}_sh" 6
}
mpi_pair "DDP 3 ranks, small buckets" 3 --bucket-mb 0.01
mpi_pair "ZeRO-1 3 ranks" 3 --zero 1 --bucket-mb 0.01
mpi_pair "DDP 2 ranks, bf16 gradients" 2 --grad-dtype bf16
# DiLoCo islands in one job: the outer steps run on host copies of the weights, copied
# from the device before a step's syncs and merges and back after (and around eval)
mpi_pair "2 islands, H 2" 2 --islands 2 --sync-every 2 --eval-every 2
mpi_pair "2 islands of 2 ranks, ZeRO-1, streaming fp4, overlap" 4 --islands 2 --sync-every 4 --fragments 2 --overlap 1 --outer-dtype fp4 --zero 1 --bucket-mb 0.01
$MPIRUN -np 2 $ATOLL train $M --islands 2 --sync-every 2 --eval-every 2 --device shadow --stop-after 3 --out "$TMP/is_x" >"$TMP/is_x.log" 2>&1 || fail "islands stopped on shadow: $(tail -1 "$TMP/is_x.log")"
$MPIRUN -np 2 $ATOLL train --resume "$TMP/is_x" >"$TMP/is_x.log" 2>&1 || fail "islands resumed on shadow: $(tail -1 "$TMP/is_x.log")"
same_run "2 islands stopped at 3 and resumed on shadow vs cpu straight through" "$TMP/2 islands, H 2_cpu" "$TMP/is_x" 6

# 2. checkpoints move between devices: a shadow run stopped at 3 resumes on the cpu and
# a cpu run on shadow, both equal to the run straight through
train x_sh $M --device shadow --stop-after 3
$ATOLL train --resume "$TMP/x_sh" --device cpu >"$TMP/x.log" 2>&1 || fail "shadow -> cpu resume: $(tail -1 "$TMP/x.log")"
same_run "stopped on shadow, resumed on cpu" "$TMP/g_cpu" "$TMP/x_sh" 6
train y_cpu $M --stop-after 3
$ATOLL train --resume "$TMP/y_cpu" --device shadow >"$TMP/y.log" 2>&1 || fail "cpu -> shadow resume: $(tail -1 "$TMP/y.log")"
same_run "stopped on cpu, resumed on shadow" "$TMP/g_cpu" "$TMP/y_cpu" 6

# 3. --init-from with the moments (host copies written, then copied in)
train i_cpu $M --init-from "$TMP/g_cpu" --init-optim 1
train i_sh $M --init-from "$TMP/g_cpu" --init-optim 1 --device shadow
same_run "--init-from with moments on shadow vs cpu" "$TMP/i_cpu" "$TMP/i_sh" 6

# 4. sampling (the key/value cache decoder) on the device
for arch in g l; do
  a=$($ATOLL sample --ckpt "$TMP/${arch}_cpu" --tokens 40 --seed 3 2>&1); b=$($ATOLL sample --ckpt "$TMP/${arch}_cpu" --tokens 40 --seed 3 --device shadow 2>&1)
  [ -n "$a" ] && [ "$a" = "$b" ] && pass "sample $arch: shadow prints what cpu prints" || fail "sample $arch differs: '$a' vs '$b'"
done

# MFU: model FLOP/s over ranks x --peak-tflops, in summary.json and the progress line;
# null without a known peak
train p $M --device shadow --peak-tflops 0.5
if out=$($PY - "$TMP/p/summary.json" "$TMP/g_sh/summary.json" <<'PYEOF'
import json, sys
s, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
want = s["model_flops_per_second"] / 0.5e12
assert abs(s["mfu"] - want) <= 1e-6 * want, (s["mfu"], want)
assert t["mfu"] is None and t["peak_flops_per_rank"] is None, t["mfu"]
print(f"mfu {s['mfu']:.3g} = model FLOP/s / 0.5 TFLOP/s; null without a peak")
PYEOF
); then pass "$out"; else fail "mfu: $out"; fi
grep -q "| MFU " "$TMP/p.log" && pass "the progress line shows MFU" || fail "no MFU in the progress line"

# 5. what the device path does not run yet is refused, one line each
expect_error "shadow is fp32" "precision" $ATOLL train $M --device shadow --precision bf16 --out "$TMP/e1"
expect_error "no ZeRO-2 on a device" "--zero" $ATOLL train $M --device shadow --zero 2 --out "$TMP/e2"
expect_error "no tensor parallel on a device" "--tp" $MPIRUN -np 2 $ATOLL train $M --device shadow --tp 2 --out "$TMP/e3"
expect_error "unknown device" "--device" $ATOLL train $M --device gpu --out "$TMP/e4"
expect_error "sample: unknown device" "--device" $ATOLL sample --ckpt "$TMP/g_cpu" --device tpu
expect_error "nccl needs cuda" "--dp-comm" $ATOLL train $M --device shadow --dp-comm nccl --out "$TMP/e5"
[ -e "$TMP/e5" ] && fail "a refused --dp-comm left $TMP/e5" || pass "a refused --dp-comm writes nothing"
expect_error "a peak below a GFLOP/s" "--peak-tflops" $ATOLL train $M --peak-tflops 1e-40 --out "$TMP/e6"

echo "$PASSES passed, $FAILS failed"
[ "$FAILS" -eq 0 ]

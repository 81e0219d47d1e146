#!/usr/bin/env bash
# Training on the GPU against the CPU (issue 18), the last step of tests/gpu/run_device.sh.
# PREPARED, NOT YET RUN ON A DEVICE: the tolerances below are the targets, not measurements.
#
#   usage: device_train.sh ATOLL RUN_CLOSE WORKDIR [LOGDIR]
#
# One small GPT-2 (2 layers, 4 heads, width 128, context 128, batch 4, 20 steps) on the
# repository's own Markdown (README.md, docs/: on every checkout, no download), byte
# tokens. Each check prints a PASS or FAIL line (run_close's numbers after it):
#   fp32       --device cuda against --device cpu: per-step losses within 1e-4
#              relative, final weights within 1e-4 (max |diff| / max |cpu|)
#   bf16       --device cuda --precision bf16 against the fp32 CPU run: losses within 2e-2
#   nccl       --dp-comm nccl in a world of one (NCCL all-reduces of the gradient buckets on
#              the device) equals --dp-comm host bit for bit
#   resume     a cuda run stopped after step 10 and resumed on cuda equals the straight
#              cuda run bit for bit (weights and AdamW moments)
#   move       the step-10 cuda checkpoint resumed with --device cpu runs to the end, and
#              its losses stay within 1e-4 of the straight cuda run's; the step-10 cpu
#              checkpoint resumed with --device cuda likewise against the cpu run
#   islands    two DiLoCo islands in one job (mpirun -np 2, both ranks on the same GPU;
#              the outer steps on host copies of the weights) against the same job on the
#              CPU: losses within 1e-4 (skipped without mpirun)
#   sample     atoll sample --device cuda prints text (the key/value-cache decoder on
#              the GPU, gqa_forward); whether it equals the CPU's is printed, not checked
# Exit 0 all passed, 1 a failure, 77 --device cuda refused (no usable GPU: skipped).
# Run directories go to WORKDIR (checkpoints: ~5 MB each); logs and metrics to LOGDIR.
set -u
ATOLL=$1 CLOSE=$2 W=$3 LOG=${4:-$3}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$W" && mkdir -p "$W" "$LOG" || exit 1
FAILS=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
now() { date +%s.%N; }

"$ATOLL" prepare --text "$SRC/README.md" "$SRC/docs" --out "$W/data" >"$LOG/prepare.log" 2>&1 ||
  { tail -3 "$LOG/prepare.log"; echo "FAIL prepare the corpus"; exit 1; }
SHAPE="--data $W/data --layers 2 --heads 4 --dim 128 --context 128 --batch 4 --steps 20 --threads 4
       --eval-batches 2 --save-every 10"

# train NAME ARGS...: one run; its output in LOGDIR/train_NAME.log, its metrics copied there
train() {
  local name=$1 rc t0
  shift
  t0=$(now)
  # shellcheck disable=SC2086
  "$ATOLL" train $SHAPE "$@" >"$LOG/train_$name.log" 2>&1
  rc=$?
  echo "  run $name: exit $rc, $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s: $*"
  [ $rc -eq 0 ] || tail -3 "$LOG/train_$name.log" | sed 's/^/    /'
  return $rc
}
keep_metrics() { [ -f "$W/$1/metrics.jsonl" ] && cp "$W/$1/metrics.jsonl" "$LOG/metrics_$1.jsonl"; }
# check NAME CMD...: PASS or FAIL by the command's exit status, its line after it
check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name"; fi
  echo "    $out"
}
M20=checkpoints/step_00000020/model.safetensors
O20=checkpoints/step_00000020/optimizer.safetensors

# --- fp32: the GPU against the CPU -----------------------------------------------------
if ! train cuda --device cuda --out "$W/cuda"; then
  if grep -q -e '--device cuda: no CUDA device' -e 'built without CUDA' -e '--device cuda: cannot' \
       "$LOG/train_cuda.log"; then
    echo "SKIP no usable GPU: $(grep -m1 'device cuda' "$LOG/train_cuda.log")"
    exit 77
  fi
  fail "fp32: the cuda run failed (above)"
fi
keep_metrics cuda
grep -m1 'device cuda' "$LOG/train_cuda.log" | sed 's/^/  /'
train cpu --device cpu --out "$W/cpu" || fail "fp32: the cpu run failed (above)"
keep_metrics cpu
check "fp32: losses, cuda against cpu, within 1e-4" "$CLOSE" losses "$W/cpu/metrics.jsonl" "$W/cuda/metrics.jsonl" 1e-4
check "fp32: final weights, cuda against cpu, within 1e-4" "$CLOSE" weights "$W/cpu/$M20" "$W/cuda/$M20" 1e-4
"$CLOSE" weights "$W/cpu/$O20" "$W/cuda/$O20" 1e-4 | sed 's/^/  (not checked) AdamW moments: /'

# --- bf16 products on the GPU against the fp32 CPU run ----------------------------------
if train cuda_bf16 --device cuda --precision bf16 --out "$W/cuda_bf16"; then
  keep_metrics cuda_bf16
  check "bf16: losses, cuda bf16 against cpu fp32, within 2e-2" "$CLOSE" losses "$W/cpu/metrics.jsonl" \
    "$W/cuda_bf16/metrics.jsonl" 2e-2
else
  fail "bf16: the cuda bf16 run failed (above)"
fi

# --- data parallel's NCCL path in a world of one (--dp-comm nccl: an all-reduce per
# gradient bucket on the device buffers; one member's sum is itself) -------------------
if train cuda_nccl --device cuda --dp-comm nccl --out "$W/cuda_nccl"; then
  keep_metrics cuda_nccl
  check "nccl: --dp-comm nccl (world of one) = --dp-comm host, weights bit-identical" \
    "$CLOSE" weights "$W/cuda/$M20" "$W/cuda_nccl/$M20" 0
elif grep -q 'built without NCCL' "$LOG/train_cuda_nccl.log"; then
  echo "SKIP nccl: $(grep -m1 'dp-comm' "$LOG/train_cuda_nccl.log")"
else
  fail "nccl: the --dp-comm nccl run failed (above)"
fi

# --- resume: stopped at 10 and resumed on the GPU = the straight GPU run, bit for bit ---
if train cuda_stop --device cuda --stop-after 10 --out "$W/cuda_stop" &&
   train cuda_resumed --resume "$W/cuda_stop" --device cuda --out "$W/cuda_stop"; then
  keep_metrics cuda_stop
  check "resume: cuda stopped at 10 and resumed = straight cuda, weights bit-identical" \
    "$CLOSE" weights "$W/cuda/$M20" "$W/cuda_stop/$M20" 0
  check "resume: AdamW moments bit-identical" "$CLOSE" weights "$W/cuda/$O20" "$W/cuda_stop/$O20" 0
else
  fail "resume: the stopped or the resumed cuda run failed (above)"
fi

# --- move: a step-10 checkpoint resumed on the other device runs to step 20, with the
# losses of steps 11-20 within 1e-4 of the run it came from
move() { # FROM TO: the step-10 checkpoint of run FROM (cuda or cpu) resumed with --device TO
  from=$1; to=$2
  if train "${to}_from_$from" --resume "$W/${from}_ckpt10" --device "$to" --out "$W/${to}_from_$from" &&
     grep -q '"finished":[[:space:]]*true' "$W/${to}_from_$from/summary.json"; then
    pass "move: the step-10 $from checkpoint resumed with --device $to ran to step 20"
    keep_metrics "${to}_from_$from"
    sed -n '11,20p' "$W/$from/metrics.jsonl" >"$W/${from}_11_20.jsonl"
    check "move: its losses (steps 11-20) against the straight $from run, within 1e-4" \
      "$CLOSE" losses "$W/${from}_11_20.jsonl" "$W/${to}_from_$from/metrics.jsonl" 1e-4
  else
    fail "move: the step-10 $from checkpoint did not run to the end with --device $to (above)"
  fi
}
ln -sfn "$W/cuda_stop/checkpoints/step_00000010" "$W/cuda_ckpt10"
ln -sfn "$W/cpu/checkpoints/step_00000010" "$W/cpu_ckpt10"
move cuda cpu
move cpu cuda

# --- DiLoCo islands: 2 islands of one rank each, syncing every 5 steps --------------------
if command -v mpirun >/dev/null && [ -z "${OPAL_PREFIX:-}" ]; then
  islands() { # DEVICE: the islands job on that device
    local t0 rc
    t0=$(now)
    # shellcheck disable=SC2086
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 "$ATOLL" train $SHAPE \
      --threads 2 --islands 2 --sync-every 5 --device "$1" --out "$W/islands_$1" >"$LOG/train_islands_$1.log" 2>&1
    rc=$?
    echo "  run islands_$1: exit $rc, $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
    [ $rc -eq 0 ] || tail -3 "$LOG/train_islands_$1.log" | sed 's/^/    /'
    return $rc
  }
  if islands cuda && islands cpu; then
    keep_metrics islands_cuda
    check "islands: 2 islands on cuda against the same job on cpu, losses within 1e-4" \
      "$CLOSE" losses "$W/islands_cpu/metrics.jsonl" "$W/islands_cuda/metrics.jsonl" 1e-4
  else
    fail "islands: the islands job failed on cuda or cpu (above)"
  fi
else
  echo "SKIP islands: no mpirun here"
fi

# --- sample on the GPU (the key/value-cache decoder) -----------------------------------
if "$ATOLL" sample --ckpt "$W/cuda" --device cuda --prompt "The " --tokens 64 --seed 1 >"$LOG/sample_cuda.txt" \
     2>"$LOG/sample_cuda.err" && [ -s "$LOG/sample_cuda.txt" ]; then
  pass "sample: atoll sample --device cuda printed $(wc -c <"$LOG/sample_cuda.txt") bytes"
  "$ATOLL" sample --ckpt "$W/cuda" --device cpu --prompt "The " --tokens 64 --seed 1 >"$LOG/sample_cpu.txt" 2>&1
  cmp -s "$LOG/sample_cuda.txt" "$LOG/sample_cpu.txt" && echo "    (same text as --device cpu)" ||
    echo "    (not the CPU's text: a draw near a tie, or a fault; both in $LOG)"
else
  fail "sample: atoll sample --device cuda: $(head -1 "$LOG/sample_cuda.err")"
fi

# speed, for the record (loaded or not, one run each: no conclusions)
for r in cpu cuda cuda_bf16; do
  [ -f "$W/$r/summary.json" ] &&
    echo "  $r: $(grep -o '"tokens_per_second":[^,]*' "$W/$r/summary.json" | tr -d '\t')"
done
[ $FAILS -eq 0 ] && { echo "device_train: all passed"; exit 0; }
echo "device_train: $FAILS failed"
exit 1

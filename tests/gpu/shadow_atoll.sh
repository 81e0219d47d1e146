#!/usr/bin/env bash
# atoll with the GPU played by the shadow device: --device cuda becomes --device shadow,
# and --precision bf16 and --dp-comm nccl are dropped (shadow is fp32 and has no NCCL).
# For test_device_train_rehearsal, which runs tests/gpu/device_train.sh through it on a
# CPU to test the script itself (its runs, resumes, comparisons and exit codes), not the
# GPU. ATOLL_REAL: the real binary.
args=()
n=$#
argv=("$@")
for ((i = 0; i < n; i++)); do
  a=${argv[i]} next=${argv[i + 1]:-}
  if { [ "$a" = --precision ] && [ "$next" = bf16 ]; } || { [ "$a" = --dp-comm ] && [ "$next" = nccl ]; }; then
    i=$((i + 1))
    continue
  fi
  [ "$a" = --device ] && [ "$next" = cuda ] && { args+=(--device shadow); i=$((i + 1)); continue; }
  args+=("$a")
done
exec "$ATOLL_REAL" "${args[@]}"

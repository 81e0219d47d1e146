#!/usr/bin/env bash
# atoll with the GPU played by the shadow device: --device cuda becomes --device shadow
# and --precision bf16 is dropped (shadow is fp32 only). For test_device_train_rehearsal,
# which runs tests/gpu/device_train.sh through it on a CPU to test the script itself (its
# runs, resumes, comparisons and exit codes), not the GPU. ATOLL_REAL: the real binary.
args=()
skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; [ "$a" = bf16 ] && { unset 'args[${#args[@]}-1]'; continue; }; fi
  [ "$a" = --precision ] && skip=1
  [ "$a" = cuda ] && [ "${args[${#args[@]}-1]:-}" = --device ] && a=shadow
  args+=("$a")
done
exec "$ATOLL_REAL" "${args[@]}"

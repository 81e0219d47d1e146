#!/usr/bin/env bash
# The one script for a GPU machine (issue 6). PREPARED, NOT YET RUN ON A DEVICE.
#
#   bash tests/gpu/run_device.sh            on the GPU machine: get the test programs
#                                           (prebuilt bundle if carried, else build),
#                                           run them, print a summary; exit 0 all passed,
#                                           1 a failure, 3 steps skipped (no GPU found)
#   bash tests/gpu/run_device.sh --bundle   on a CPU machine with the toolchain: build the
#                                           GPU test programs and the atoll executable here
#                                           and pack them with the shared libraries they
#                                           need (not CUDA's, cuBLAS's or NCCL's, which the
#                                           device has) into build-gpu-bundle/atoll-gpu.tar.xz
#
# Steps on the device: test_cuda_ops (every op of the CUDA table against the CPU's),
# its --bench, optionally compute-sanitizer, the NCCL tests, and "train_gpu_vs_cpu"
# (tests/gpu/device_train.sh: atoll train --device cuda against --device cpu, fp32 and
# bf16, resume on the GPU, a GPU checkpoint resumed on the CPU, atoll sample on the GPU;
# PASS/FAIL lines copied into the summary).
#
# Options (device side): --build (build there even if a bundle is carried),
# --sanitize (also run test_cuda_ops --quick under compute-sanitizer memcheck; works on
# Firecracker machines, not on gVisor ones), --no-bench.
#
# Why a bundle: the device image (CUDA, CMake, PyTorch...) may lack OpenBLAS, cJSON and
# MPI, which libatoll needs, and compiling src/ops/cuda/ takes about a minute of device
# time. With the tool: run `bash tests/gpu/run_device.sh --bundle` here, then
#   run(command="bash tests/gpu/run_device.sh", carry=["build-gpu-bundle"], timeout_s=540)
# (build-gpu-bundle/ is ignored by git through /build*; the tarball is ~10-20 MB).
# Logs go to $OUT when it is set (the device tool brings them back), else to /tmp.
# Time on an H200: expected about 3 minutes (test_cuda_ops ~1 min of CPU reference
# work, bench ~10 s, train_gpu_vs_cpu ~30 s of small runs); nothing here has been timed
# on a device yet.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

MODE=device FORCE_BUILD=0 SANITIZE=0 BENCH=1
for a in "$@"; do
  case "$a" in
    --bundle) MODE=bundle ;;
    --build) FORCE_BUILD=1 ;;
    --sanitize) SANITIZE=1 ;;
    --no-bench) BENCH=0 ;;
    *) echo "run_device.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
JOBS=$(nproc 2>/dev/null || echo 4)

# Libraries a bundle leaves to the target machine: glibc's, the C++ runtime, and
# CUDA's own (driver, cuBLAS, NCCL: the device's versions match its driver).
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libutil\.|libresolv\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas|libcublasLt|libnccl\.|libnvidia)'

if [ "$MODE" = bundle ]; then
  B=$ROOT/build-gpu-bundle
  rm -rf "$B" && mkdir -p "$B"
  # -march=native off: the device's CPU may lack this machine's instructions
  cmake -S . -B "$B/build" -DATOLL_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release >"$B/configure.log" 2>&1 ||
    { cat "$B/configure.log"; exit 1; }
  grep -q 'building atoll_cuda' "$B/configure.log" || { echo "bundle: nvcc not found here"; exit 1; }
  cmake --build "$B/build" -j"$JOBS" --target test_cuda_ops test_nccl_id run_close atoll >"$B/build.log" 2>&1 ||
    { tail -30 "$B/build.log"; exit 1; }
  S=$B/stage
  mkdir -p "$S/bin" "$S/lib"
  cp "$B/build/tests/gpu/test_cuda_ops" "$B/build/tests/gpu/test_nccl_id" "$B/build/tests/gpu/run_close" \
     "$B/build/atoll" "$S/bin/"
  # Open MPI's runtime, laid out under a prefix that OPAL_PREFIX relocates (a singleton
  # MPI_Init loads its components from there)
  OMPI_LIBDIR=$(dirname "$(ldd "$S/bin/test_nccl_id" | awk '/libmpi\.so/{print $3}')")
  OMPI_PKGLIB=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
  OMPI_PKGDATA=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
  OMPI_PREFIX=$(ompi_info --path prefix --parsable 2>/dev/null | sed -n 's/^path:prefix://p')
  objs=("$S/bin/test_cuda_ops" "$S/bin/test_nccl_id" "$S/bin/run_close" "$S/bin/atoll")
  if [ -n "$OMPI_PKGLIB" ] && [ -d "$OMPI_PKGLIB" ]; then
    for d in "$OMPI_PKGLIB" "$OMPI_PKGDATA"; do
      [ -n "$d" ] && [ -d "$d" ] && mkdir -p "$S/ompi${d#$OMPI_PREFIX}" && cp -rL "$d/." "$S/ompi${d#$OMPI_PREFIX}/"
    done
    objs+=("$OMPI_PKGLIB"/*.so)
  else
    echo "bundle: Open MPI's ompi_info not found: MPI components not bundled (MPICH needs none)"
  fi
  # every shared library these need, less the system's and CUDA's
  for o in "${objs[@]}"; do ldd "$o" 2>/dev/null; done | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u |
    while read -r lib; do
      base=$(basename "$lib")
      [[ "$base" =~ $SYSTEM_LIBS ]] && continue
      cp -L "$lib" "$S/lib/$base"
    done
  echo "$OMPI_LIBDIR" >"$S/ompi_libdir.txt"
  git rev-parse HEAD >"$S/commit.txt" 2>/dev/null
  git status --short >>"$S/commit.txt" 2>/dev/null
  tar -C "$S" -cJf "$B/atoll-gpu.tar.xz" .
  rm -rf "$B/build" "$S"
  echo "bundle: $B/atoll-gpu.tar.xz ($(du -h "$B/atoll-gpu.tar.xz" | cut -f1)); carry build-gpu-bundle"
  exit 0
fi

# ------------------------------------------------------------------- device side ---
LOG=${OUT:-/tmp/atoll-gpu-logs}
mkdir -p "$LOG"
declare -a SUMMARY
FAILED=0 SKIPPED=0
note() { SUMMARY+=("$(printf '%-34s %s' "$1" "$2")"); }
step() { echo; echo "=== $1"; }

step "machine"
nvidia-smi -L 2>&1 | head -4
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -2
command -v nvcc >/dev/null && nvcc --version | tail -1
echo "CPU cores: $JOBS"

# Shared libraries the programs take from the device: cuBLAS (toolkit or pip wheel)
# and NCCL (toolkit, system or pip wheel).
find_lib_dir() { # $1 = file name
  local d
  d=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/$1" ] && { echo "$d"; return; }
  done
  d=$(find / -xdev -name "$1" -path '*nvidia*' 2>/dev/null | head -1)
  [ -n "$d" ] && dirname "$d"
}
CUBLAS_DIR=$(find_lib_dir libcublas.so.13)
CUBLASLT_DIR=$(find_lib_dir libcublasLt.so.13)
NCCL_DIR=$(find_lib_dir libnccl.so.2)
echo "cuBLAS: ${CUBLAS_DIR:-not found}  cuBLASLt: ${CUBLASLT_DIR:-not found}  NCCL: ${NCCL_DIR:-not found}"
for d in "$CUBLAS_DIR" "$CUBLASLT_DIR" "$NCCL_DIR"; do
  [ -n "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

BIN=
BUNDLE=$ROOT/build-gpu-bundle/atoll-gpu.tar.xz
if [ -f "$BUNDLE" ] && [ "$FORCE_BUILD" = 0 ]; then
  step "prebuilt bundle"
  U=/tmp/atoll-gpu-bundle
  rm -rf "$U" && mkdir -p "$U" && tar -C "$U" -xJf "$BUNDLE"
  head -1 "$U/commit.txt" 2>/dev/null | sed 's/^/built from commit /'
  BIN=$U/bin
  export LD_LIBRARY_PATH="$U/lib:$LD_LIBRARY_PATH"
  if [ -d "$U/ompi" ]; then
    export OPAL_PREFIX=$U/ompi OMPI_MCA_ess_singleton_isolated=1
  fi
  note "programs" "prebuilt bundle"
  # a bundle built against a newer glibc, or missing a library here: build instead
  if ldd "$BIN/test_cuda_ops" "$BIN/test_nccl_id" "$BIN/atoll" 2>&1 | grep -q 'not found'; then
    ldd "$BIN/test_cuda_ops" "$BIN/test_nccl_id" "$BIN/atoll" 2>&1 | grep 'not found' | sort -u | head
    echo "bundle: unusable here (above); building instead"
    note "programs" "bundle unusable, building"
    BIN= FORCE_BUILD=1
  fi
fi
if [ -z "$BIN" ]; then
  step "build (cmake, CUDA)"
  BD=$ROOT/build-gpu
  t0=$(date +%s)
  if cmake -S . -B "$BD" -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 &&
     cmake --build "$BD" -j"$JOBS" --target test_cuda_ops test_nccl_id run_close atoll >"$LOG/build.log" 2>&1; then
    BIN=$BD/tests/gpu
    cp "$BD/atoll" "$BIN/atoll" # where the bundle has it
    note "build" "ok ($(( $(date +%s) - t0 )) s)"
  else
    grep -E 'atoll:|Error|error' "$LOG/configure.log" | head -20
    tail -20 "$LOG/build.log" 2>/dev/null
    note "build" "FAILED (logs in $LOG; carry a bundle: run_device.sh --bundle on a CPU machine)"
    FAILED=1
  fi
fi

run_step() { # name, timeout, command...: pass on 0, skip on 77
  local name=$1 limit=$2 rc t0
  shift 2
  step "$name"
  t0=$(date +%s)
  timeout "$limit" "$@" 2>&1 | tee "$LOG/$(echo "$name" | tr -c 'A-Za-z0-9._\n-' '_').log"
  rc=${PIPESTATUS[0]}
  local dt=$(( $(date +%s) - t0 ))
  case $rc in
    0) note "$name" "passed (${dt} s)" ;;
    77) note "$name" "SKIPPED (${dt} s)"; SKIPPED=1 ;;
    124) note "$name" "FAILED: timed out after ${limit} s"; FAILED=1 ;;
    *) note "$name" "FAILED (exit $rc, ${dt} s)"; FAILED=1 ;;
  esac
}

if [ -n "$BIN" ]; then
  run_step "test_cuda_ops" 420 "$BIN/test_cuda_ops"
  [ "$BENCH" = 1 ] && run_step "test_cuda_ops --bench" 180 "$BIN/test_cuda_ops" --bench
  if [ "$SANITIZE" = 1 ]; then
    if command -v compute-sanitizer >/dev/null; then
      run_step "compute-sanitizer memcheck" 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$BIN/test_cuda_ops" --quick
    else
      note "compute-sanitizer memcheck" "SKIPPED (not installed)"
    fi
  fi
  if [ -n "$NCCL_DIR" ]; then
    if command -v mpirun >/dev/null && [ -z "${OPAL_PREFIX:-}" ]; then
      run_step "test_nccl_id (2 ranks)" 120 mpirun -np 2 "$BIN/test_nccl_id"
      run_step "test_nccl_id --init (1 rank)" 180 mpirun -np 1 "$BIN/test_nccl_id" --init
    else # no launcher (or a bundled MPI): an MPI singleton, a world of one
      run_step "test_nccl_id (singleton)" 120 "$BIN/test_nccl_id"
      run_step "test_nccl_id --init (singleton)" 180 "$BIN/test_nccl_id" --init
    fi
  else
    note "test_nccl_id" "FAILED: libnccl.so.2 not found on the device"
    FAILED=1
  fi
  # atoll train --device cuda against --device cpu (tests/gpu/device_train.sh); its
  # PASS/FAIL lines go into the summary
  run_step "train_gpu_vs_cpu" 300 bash "$ROOT/tests/gpu/device_train.sh" "$BIN/atoll" "$BIN/run_close" \
    /tmp/atoll-gpu-train "$LOG/train"
  while IFS= read -r l; do SUMMARY+=("  $l"); done < <(grep -E '^(PASS|FAIL|SKIP) ' "$LOG/train_gpu_vs_cpu.log")
fi

echo
echo "=== summary (logs in $LOG)"
for l in "${SUMMARY[@]}"; do echo "  $l"; done
# On a device a skip means nothing was verified: exit 3, not 0.
if [ "$FAILED" != 0 ]; then echo "run_device.sh: FAILED"; exit 1; fi
if [ "$SKIPPED" != 0 ]; then echo "run_device.sh: no failures, but steps were SKIPPED (no usable GPU?)"; exit 3; fi
echo "run_device.sh: all passed"

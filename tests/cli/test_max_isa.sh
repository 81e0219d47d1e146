#!/bin/sh
# ATOLL_MAX_ISA (src/ops/cpu_features.h) runs the code paths of a smaller processor on
# this one: an unknown value and bf16 without its instructions are refused with one
# line; below AMX, bf16 runs on AVX512_BF16 products with the fp32 attention, and below
# AVX-512, fp32 runs on oneDNN's AVX2 kernels (OpenBLAS's Haswell ones in attention);
# each trains to the losses of the uncapped run within its precision. A cap above what the CPU has changes nothing, so
# the comparisons that need a feature this machine lacks are skipped (said so).
# usage: test_max_isa.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
# the uncapped runs must be uncapped, whatever the caller's environment holds
unset ATOLL_MAX_ISA ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA OPENBLAS_CORETYPE ATOLL_TEST_OPENBLAS_CORE ONEDNN_VERBOSE
small_data
M="--layers 2 --heads 2 --dim 64 --context 48 --batch 4 --threads 2 --steps 8 --warmup 2 --eval-every 0 --save-every 0 --data $TMP/data"
has() { grep -qw "$1" /proc/cpuinfo; }
loss() { $PY -c "import json, sys; print(json.load(open(sys.argv[1]))['final_train_loss'])" "$1/summary.json"; }
close() { # close NAME A B REL: |A - B| <= REL |A|
  $PY -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= r * abs(a) else 1)" "$2" "$3" "$4" \
    && pass "$1: $3 against $2" || fail "$1: $3 against $2 (allowed relative difference $4)"
}

ATOLL_MAX_ISA=sse4 expect_error "unknown ATOLL_MAX_ISA" "ATOLL_MAX_ISA=sse4: unknown instruction set" \
  "$ATOLL" train $M --out "$TMP/bad"
[ -e "$TMP/bad" ] && fail "unknown ATOLL_MAX_ISA: $TMP/bad was made" || pass "unknown ATOLL_MAX_ISA: no run directory made"

# bf16 needs oneDNN in the build and AVX512_BF16 or AMX in the CPU: the uncapped run says
"$ATOLL" train $M --precision bf16 --out "$TMP/amx" >"$TMP/amx.out" 2>"$TMP/amx.err" && BF16=1 || BF16=0
# a failure is a skip only when it is the refusal (one line naming the precision), not a crash
if [ $BF16 = 0 ]; then
  if [ "$(grep -c . "$TMP/amx.err")" -eq 1 ] && grep -q "precision bf16" "$TMP/amx.err"; then
    echo "skipped: every bf16 check (uncapped bf16 refused here: $(tail -1 "$TMP/amx.err"))"
  else
    fail "uncapped bf16 run failed, not refused in one line: $(tail -3 "$TMP/amx.err")"
  fi
fi
if [ $BF16 = 1 ]; then
  ATOLL_MAX_ISA=avx512 expect_error "bf16 below avx512_bf16" "ATOLL_MAX_ISA=avx512 leaves neither" \
    "$ATOLL" train $M --precision bf16 --out "$TMP/bf16_avx512"
fi

# bf16 with and without AMX: the products sum in another order and the attention is fp32
# below AMX, so the losses agree within bf16's precision, not bit for bit
# (oneDNN says which kernels it ran: ONEDNN_VERBOSE, on stdout)
if [ $BF16 = 1 ] && grep -q "bf16 products: oneDNN matmul on AMX-BF16 tiles" "$TMP/amx.err" && has avx512_bf16; then
  ATOLL_MAX_ISA=avx512_bf16 ONEDNN_VERBOSE=1 "$ATOLL" train $M --precision bf16 --out "$TMP/nox" >"$TMP/nox.out" 2>"$TMP/nox.err" \
    || fail "bf16 capped at avx512_bf16: $(tail -1 "$TMP/nox.err")"
  grep -q "capped by ATOLL_MAX_ISA=avx512_bf16" "$TMP/nox.err" && grep -q "bf16 products: oneDNN matmul on AVX512_BF16" "$TMP/nox.err" \
    && grep -q "attention: OpenBLAS" "$TMP/nox.err" && grep -q "note: without AMX" "$TMP/nox.err" \
    && pass "bf16 capped at avx512_bf16: the header says so, and the note" || fail "bf16 capped header: $(cat "$TMP/nox.err")"
  grep "exec,cpu,matmul," "$TMP/nox.out" | grep -q "brg:avx512_core_bf16" && ! grep "exec,cpu,matmul," "$TMP/nox.out" | grep -q amx \
    && pass "bf16 capped at avx512_bf16: oneDNN ran $(grep -o 'exec,cpu,matmul,[^,]*' "$TMP/nox.out" | sort -u | tr '\n' ' ')" \
    || fail "bf16 capped at avx512_bf16: oneDNN ran $(grep -o 'exec,cpu,matmul,[^,]*' "$TMP/nox.out" | sort -u | tr '\n' ' ')"
  close "bf16 loss after 8 steps, AMX against AVX512_BF16" "$(loss "$TMP/amx")" "$(loss "$TMP/nox")" 0.01
else
  echo "skipped: bf16 without AMX (this CPU lacks AMX or AVX512_BF16)"
fi

# oneDNN capped by its own variable below bf16 instructions: the header says it emulates
if [ $BF16 = 1 ] && has avx512f; then
  ONEDNN_MAX_CPU_ISA=AVX512_CORE "$ATOLL" train $M --precision bf16 --steps 2 --out "$TMP/emul" >/dev/null 2>"$TMP/emul.err" \
    || fail "bf16 with ONEDNN_MAX_CPU_ISA=AVX512_CORE: $(tail -1 "$TMP/emul.err")"
  grep -q "bf16 products: oneDNN matmul on AVX-512 without bf16 instructions" "$TMP/emul.err" \
    && pass "bf16 with ONEDNN_MAX_CPU_ISA=AVX512_CORE: $(grep -o 'bf16 products: [^,]*' "$TMP/emul.err")" \
    || fail "bf16 with ONEDNN_MAX_CPU_ISA=AVX512_CORE: $(grep CPU "$TMP/emul.err")"
  ONEDNN_MAX_CPU_ISA=AVX2 expect_error "bf16 with ONEDNN_MAX_CPU_ISA=AVX2" "oneDNN offers no bf16 product here" \
    "$ATOLL" train $M --precision bf16 --out "$TMP/emul2"
fi

# fp32 below AVX-512; OpenBLAS, where it had picked AVX-512 kernels, re-executed with
# its Haswell ones
if has avx512f && has avx2; then
  "$ATOLL" train $M --out "$TMP/f512" >/dev/null 2>"$TMP/f512.err" || fail "fp32: $(tail -1 "$TMP/f512.err")"
  ATOLL_MAX_ISA=avx2 "$ATOLL" train $M --out "$TMP/favx2" >"$TMP/favx2.out" 2>"$TMP/favx2.err" \
    || fail "fp32 capped at avx2: $(tail -1 "$TMP/favx2.err")"
  grep -q "(avx2; capped by ATOLL_MAX_ISA=avx2)" "$TMP/favx2.err" && grep -q "fp32 products: oneDNN" "$TMP/favx2.err" \
    && pass "fp32 capped at avx2: $(grep -o "fp32 products: .*" "$TMP/favx2.err")" \
    || fail "fp32 capped at avx2: $(cat "$TMP/favx2.err")"
  if grep -Eq "attention: OpenBLAS \((SkylakeX|Cooperlake|SapphireRapids) kernels" "$TMP/f512.err"; then
    grep -q "attention: OpenBLAS (Haswell kernels)" "$TMP/favx2.err" \
      && pass "fp32 capped at avx2: OpenBLAS runs Haswell's kernels" || fail "fp32 capped at avx2, OpenBLAS: $(cat "$TMP/favx2.err")"
  fi
  close "fp32 loss after 8 steps, AVX-512 against AVX2 kernels" "$(loss "$TMP/f512")" "$(loss "$TMP/favx2")" 1e-4
else
  echo "skipped: fp32 below AVX-512 (this CPU has no AVX-512 to cap)"
fi

# a cap at or above what the CPU has (any case): the same run, bit for bit
"$ATOLL" train $M --out "$TMP/plain" >/dev/null 2>&1
ATOLL_MAX_ISA=AMX "$ATOLL" train $M --out "$TMP/amxcap" >/dev/null 2>&1
h1=$($PY -c "import json; print(json.load(open('$TMP/plain/summary.json'))['weights_hash'])")
h2=$($PY -c "import json; print(json.load(open('$TMP/amxcap/summary.json'))['weights_hash'])")
[ -n "$h1" ] && [ "$h1" = "$h2" ] && pass "ATOLL_MAX_ISA=AMX: the uncapped run's weights ($h1)" || fail "ATOLL_MAX_ISA=AMX: weights $h2, uncapped $h1"
finish

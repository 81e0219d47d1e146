#!/bin/sh
# A portable build (-DATOLL_NATIVE=OFF: no -march=native, as a distribution would build
# it) trains at both precisions and agrees with this build. The bf16 attention's AMX code
# has its own target attributes there, and gcc 12 once compiled its tile configuration
# away in such a build: every bf16 run crashed at its first tile instruction. Skipped (77)
# in the sanitized suite, which checks its own build only.
# usage: test_portable.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
[ "${ATOLL_TEST_SANITIZED:-0}" = 1 ] && { echo "skipped: sanitized suite"; exit 77; }
small_data
if cmake -S "$SRC" -B "$TMP/build" -DCMAKE_BUILD_TYPE=Release -DATOLL_NATIVE=OFF -DATOLL_CUDA=OFF >"$TMP/build.log" 2>&1 \
  && cmake --build "$TMP/build" --target atoll -j2 >>"$TMP/build.log" 2>&1; then
  pass "portable build (-DATOLL_NATIVE=OFF)"
else
  fail "portable build: $(tail -5 "$TMP/build.log")"
  finish
fi
PORTABLE=$TMP/build/atoll
loss() { $PY -c "import json, sys; print(json.load(open(sys.argv[1]))['final_train_loss'])" "$1/summary.json"; }
for p in fp32 bf16; do
  RUN="train --layers 2 --heads 3 --dim 96 --context 100 --batch 3 --threads 2 --precision $p --steps 6 --warmup 2 \
    --eval-every 0 --save-every 0 --data $TMP/data"
  $ATOLL $RUN --out "$TMP/native_$p" >/dev/null 2>"$TMP/native_$p.err"; rn=$?
  $PORTABLE $RUN --out "$TMP/portable_$p" >/dev/null 2>"$TMP/portable_$p.err"; rp=$?
  [ $rn -ne 0 ] && [ $p = fp32 ] && { fail "fp32: this build failed (exit $rn): $(tail -3 "$TMP/native_$p.err")"; continue; }
  if [ $rn -ne 0 ]; then
    # bf16 refused here (no AVX512_BF16 or AMX): the portable build must refuse it alike
    [ $rp -eq $rn ] && [ "$(tail -1 "$TMP/native_$p.err")" = "$(tail -1 "$TMP/portable_$p.err")" ] \
      && pass "$p refused alike by both builds: $(tail -1 "$TMP/native_$p.err")" \
      || fail "$p: native exit $rn ($(tail -1 "$TMP/native_$p.err")), portable exit $rp ($(tail -1 "$TMP/portable_$p.err"))"
    continue
  fi
  [ $rp -eq 0 ] || { fail "$p: the portable build failed (exit $rp): $(tail -3 "$TMP/portable_$p.err")"; continue; }
  # the builds vectorize the elementwise kernels differently: close, not equal
  a=$(loss "$TMP/native_$p"); b=$(loss "$TMP/portable_$p")
  $PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-3 * abs(a) else 1)" "$a" "$b" \
    && pass "$p: the portable build's loss after 6 steps $b, this build's $a" || fail "$p: portable loss $b, native $a"
done
finish

#!/bin/sh
# Ranks agree before they act: a failure at start-up on one rank only, ranks launched
# with different settings, and a DiLoCo failure seen by some ranks only all end the
# job within seconds, non-zero, with one line naming the rank (never a hang, a heap
# corruption or a run that finishes unnoticed). Two ranks with different arguments
# are an MPMD launch: mpirun -np 1 A : -np 1 B.
# usage: test_agree.sh ATOLL SRC
ATOLL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); SRC=$2 # absolute: some ranks run elsewhere (-wdir)
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
# every launch here must end on its own: a hang fails instead of blocking the suite
LAUNCH=$(echo "$MPIRUN" | sed 's/timeout 300/timeout 60/')
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --steps 4 --eval-every 0 --eval-batches 1 --save-every 0"

# agreed NAME KEYWORD CMD...: expect_error (one line, non-zero, KEYWORD), within 30 s
agreed() {
  t0=$(date +%s)
  expect_error "$@"
  took=$(( $(date +%s) - t0 ))
  [ $took -lt 30 ] || fail "$1: took ${took}s"
}
# agreed_run NAME KEYWORD CMD...: the same for a failure during training, after the
# banner: one error line besides the banner, within 30 s
agreed_run() {
  name=$1; keyword=$2; shift 2
  t0=$(date +%s)
  "$@" >/dev/null 2>"$TMP/run.err"
  rc=$? took=$(( $(date +%s) - t0 ))
  drop_launcher_noise "$TMP/run.err"
  grep -v '^atoll train: ' "$TMP/run.err" >"$TMP/run.msg"
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: status $rc after ${took}s: $(cat "$TMP/run.err")"
  elif [ "$(grep -c . "$TMP/run.msg")" -ne 1 ] || ! grep -q -- "$keyword" "$TMP/run.msg"; then fail "$name: expected one line with '$keyword': $(cat "$TMP/run.err")"
  elif [ $took -ge 30 ]; then fail "$name: took ${took}s"
  else pass "$name (${took}s): $(cat "$TMP/run.msg")"; fi
}
# two ranks, rank 0 with $A and rank 1 with $B (the settings both share come first)
two() { $LAUNCH -np 1 $ATOLL train $M $A : -np 1 $ATOLL train $M $B; }

# 1. a start-up failure on one rank only: its message, once, naming the rank
A="--out $TMP/c1"; B="--out $TMP/c1 --config $TMP/nope.json"
agreed "unreadable --config on rank 1 only" "rank 1: $TMP/nope.json" two
B="--out $TMP/c1 --heads 3"
agreed "a setting refused on rank 1 only" "rank 1: .*heads" two
agreed "a bad test hook on rank 1 only" "rank 1: ATOLL_FAULT_NAN_STEP" \
  $LAUNCH -np 1 $ATOLL train $M --out "$TMP/c1" : -np 1 -x ATOLL_FAULT_NAN_STEP=soon $ATOLL train $M --out "$TMP/c1"
# a machine that cannot run bf16 on one rank only (a cap there stands in for an older
# node): refused before the mesh's collectives, which had waited out --comm-timeout.
# Where bf16 cannot run at all (no oneDNN, no bf16 instructions) there is nothing to cap.
unset ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA ATOLL_MAX_ISA
if grep -qw avx512_bf16 /proc/cpuinfo && $ATOLL train $M --precision bf16 --steps 1 --out "$TMP/bf16probe" >/dev/null 2>&1; then
  agreed "bf16 refused by rank 1's machine only" "rank 1: --precision bf16: ATOLL_MAX_ISA=avx512 leaves" \
    $LAUNCH -np 1 $ATOLL train $M --precision bf16 --out "$TMP/c1" : -np 1 -x ATOLL_MAX_ISA=avx512 $ATOLL train $M --precision bf16 --out "$TMP/c1"
fi
$MPIRUN -np 2 $ATOLL train $M --steps 2 --out "$TMP/base" >/dev/null 2>"$TMP/err" || fail "base run: $(tail -1 "$TMP/err")"
A="--resume $TMP/base"; B="--resume $TMP/nope"
agreed "unreadable --resume on rank 1 only" "rank 1: $TMP/nope" two
# the same --data, --out and --resume text, read in two working directories whose
# shards differ (the manifests are equal): the data fails to open on rank 1 only, and
# rank 0 must not go on into the checkpoint's (collective) load. --data is given: the
# checkpoint records the absolute path, which names the same directory on both ranks
mkdir -p "$TMP/wa" "$TMP/wb/d"; ln -s "$TMP/data" "$TMP/wa/d"
cp "$TMP/data"/* "$TMP/wb/d/"; head -c 100 "$TMP/data/val_000.bin" >"$TMP/wb/d/val_000.bin"
R="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data d --out run"
(cd "$TMP/wa" && $MPIRUN -np 2 $ATOLL train $R --steps 2 >/dev/null 2>"$TMP/err") || fail "run to resume: $(tail -1 "$TMP/err")"
cp -r "$TMP/wa/run" "$TMP/wb/run"
agreed "a shard unreadable on rank 1 only" "rank 1: d/val_000.bin" \
  $LAUNCH -np 1 -wdir "$TMP/wa" $ATOLL train --resume run --data d --steps 4 : -np 1 -wdir "$TMP/wb" $ATOLL train --resume run --data d --steps 4

# 2. settings that must agree, checked before the first collective that uses them
A="--out $TMP/s"
for d in "dim 64" "zero 1" "steps 6" "batch 4" "seed 7" "lr 0.02" "out $TMP/t" "data $TMP/wb/d"; do
  key=${d%% *}; B="--out $TMP/s --$d"
  agreed "ranks disagree on --$key" "ranks disagree on settings: $key is .* on rank 0 but .* on rank 1" two
done
"$ATOLL" prepare --text /usr/share/games/fortunes/art --out "$TMP/wb/other" >/dev/null 2>&1 || fail "prepare other"
mv "$TMP/wb/d" "$TMP/wb/first"; mv "$TMP/wb/other" "$TMP/wb/d"
agreed "the same --data path holding other data" "data manifest is .* on rank 0 but .* on rank 1" \
  $LAUNCH -np 1 -wdir "$TMP/wa" $ATOLL train $R --out new : -np 1 -wdir "$TMP/wb" $ATOLL train $R --out new
A="--out $TMP/th --threads 1"; B="--out $TMP/th --threads 2"
two >/dev/null 2>"$TMP/err" && pass "--threads may differ between ranks" || fail "--threads differing: $(tail -1 "$TMP/err")"

# 3. DiLoCo: a verdict only some ranks can see stops every rank with its message
K="--islands 2 --sync-every 2 --steps 6"
agreed_run "gradient norm NaN on island 1 only" "rank 1: step 2: gradient norm is NaN" \
  env ATOLL_FAULT_NAN_STEP=2 ATOLL_FAULT_NAN_ISLAND=1 $LAUNCH -np 2 $ATOLL train $M $K --out "$TMP/n1"
# 2 ranks per island: only the slice of rank 3 (island 1, data-parallel rank 1) drifts
agreed_run "drift seen by one slice of four" "island 1 holds different global weights" \
  env ATOLL_FAULT_DESYNC_ISLAND=1 $LAUNCH -np 4 $ATOLL train $M $K --out "$TMP/n2"

# 4. a NaN or Inf in a quantized outer gradient stops the run with a message
agreed_run "int8 outer gradient holding NaN" "rank 1 (island 1): the outer gradient holds NaN or Inf" \
  env ATOLL_FAULT_OUTER_NAN_ISLAND=1 $LAUNCH -np 2 $ATOLL train $M $K --outer-dtype int8 --out "$TMP/q1"
agreed_run "fp4 outer gradient holding NaN, 2 ranks per island" "island 1): the outer gradient holds NaN or Inf" \
  env ATOLL_FAULT_OUTER_NAN_ISLAND=1 $LAUNCH -np 4 $ATOLL train $M $K --outer-dtype fp4 --out "$TMP/q2"
finish

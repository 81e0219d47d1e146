#!/bin/sh
# --arch llama in every layout (the GPT-2 rows are test_dp.sh, test_mp.sh, test_diloco.sh):
# DDP, ZeRO-1/2/3, TP (key/value heads cut with the query heads), TP with sequence
# parallelism (also with q/k/v biases, --qkv-bias 1, and with heads wider than dim / heads,
# --head-dim), PP (1F1B, interleaved, an untied and a tied head), TP x PP and DP x TP each
# equal one process accumulating the same micro-batches; DiLoCo with H = 1 equals DDP; a
# checkpoint stopped mid-run resumes bit-exactly and moves from TP x PP to one process;
# --tp that does not divide --kv-heads, an odd --head-dim and a resume with another are
# refused with one line.
# usage: test_llama_layouts.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
# grouped queries (2 per key/value head); SwiGLU width floor(8 32 / 3) = 85 -> 96
L="--arch llama --layers 4 --heads 4 --kv-heads 2 --dim 32 --multiple-of 16 --context 32"
M="$L --batch 2 --threads 1 --data $TMP/data --steps 12 --warmup 2 --lr 3e-3 --eval-every 6 --eval-batches 2 --save-every 0"

# 1. every layout with 4 micro-batches per step in total == one process with accum 4 (1e-5)
$ATOLL train $M --accum 4 --out "$TMP/single4" >/dev/null 2>"$TMP/err" || fail "single accum 4: $(tail -1 "$TMP/err")"
same_as() { # REF NAME NP ARGS...
  ref=$1; name=$2; np=$3; shift 3
  if ! $MPIRUN -np "$np" $ATOLL train $M "$@" --out "$TMP/$name" </dev/null >/dev/null 2>"$TMP/err"; then
    fail "llama $name ($*, np $np): $(tail -1 "$TMP/err")"; return
  fi
  out=$($CLOSE "$TMP/$name" "$TMP/$ref" 1e-5) && pass "llama $name ($*, np $np) == $ref: $out" \
    || fail "llama $name ($*, np $np) vs $ref: $out"
}
same_as single4 ddp2     2 --accum 2
same_as single4 zero1    2 --accum 2 --zero 1
same_as single4 zero2    2 --accum 2 --zero 2
same_as single4 zero3    2 --accum 2 --zero 3
same_as single4 tp2      2 --tp 2 --microbatches 4
same_as single4 tp2sp    2 --tp 2 --sequence-parallel 1 --microbatches 4
same_as single4 pp2      2 --pp 2 --microbatches 4
same_as single4 pp2v2    2 --pp 2 --virtual-stages 2 --microbatches 4 --schedule 1f1b
same_as single4 tp2pp2   4 --tp 2 --pp 2 --microbatches 4
same_as single4 dp2tp2z1 4 --tp 2 --sequence-parallel 1 --accum 2 --zero 1
$ATOLL train $M --tie 1 --accum 4 --out "$TMP/tied4" >/dev/null 2>"$TMP/err" || fail "tied single: $(tail -1 "$TMP/err")"
same_as tied4 tied_pp2 2 --tie 1 --pp 2 --microbatches 4
# Qwen2's q/k/v biases (--qkv-bias 1) cut with their rows under TP with sequence parallelism
$ATOLL train $M --qkv-bias 1 --accum 4 --out "$TMP/qkv4" >/dev/null 2>"$TMP/err" || fail "qkv-bias single: $(tail -1 "$TMP/err")"
same_as qkv4 qkv_tp2sp 2 --qkv-bias 1 --tp 2 --sequence-parallel 1 --microbatches 4
# heads 12 wide, not dim / heads = 8 (--head-dim): q's rows and o's columns cut by heads
$ATOLL train $M --head-dim 12 --accum 4 --out "$TMP/hd4" >/dev/null 2>"$TMP/err" || fail "head-dim single: $(tail -1 "$TMP/err")"
same_as hd4 hd_tp2sp 2 --head-dim 12 --tp 2 --sequence-parallel 1 --microbatches 4

# 2. DiLoCo: H = 1, outer SGD lr 1, momentum 0, inner SGD == DDP (1e-6 in test_diloco.sh; 1e-5 here)
SGD="--optimizer sgd --lr 0.05 --warmup 0 --grad-clip 0 --weight-decay 0"
EQ="--sync-every 1 --outer-lr 1 --outer-momentum 0 --outer-optimizer sgd"
$MPIRUN -np 2 $ATOLL train $M $SGD --out "$TMP/sgd_dp2" >/dev/null 2>"$TMP/err" || fail "sgd dp 2: $(tail -1 "$TMP/err")"
same_as sgd_dp2 diloco2 2 $SGD --islands 2 $EQ
same_as sgd_dp2 diloco2tp2 4 $SGD --islands 2 --tp 2 $EQ

# 3. checkpoints: stopped at step 5 and resumed == uninterrupted (bits); TP x PP -> 1 process
$ATOLL train $M --out "$TMP/whole" >/dev/null 2>&1 || fail "uninterrupted"
$ATOLL train $M --stop-after 5 --out "$TMP/cut" >/dev/null 2>&1 || fail "stop after 5"
$ATOLL train --resume "$TMP/cut" >/dev/null 2>"$TMP/err" || fail "resume: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/cut" "$TMP/whole" 0) && pass "llama stopped at step 5 resumes bit-exactly: $out" || fail "llama resume: $out"
grep -q '"arch":[[:space:]]*"llama"' "$TMP/cut/checkpoints/step_00000012/state.json" && grep -q '"kv-heads":[[:space:]]*2' "$TMP/cut/checkpoints/step_00000012/state.json" \
  && pass "state.json records the arch fields" || fail "state.json lacks arch or kv-heads"
$MPIRUN -np 4 $ATOLL train $M --tp 2 --pp 2 --stop-after 5 --out "$TMP/moved" >/dev/null 2>&1 || fail "tp2 pp2 to step 5"
$ATOLL train --resume "$TMP/moved" --tp 1 --pp 1 >/dev/null 2>"$TMP/err" || fail "tp2 pp2 -> 1 rank: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/moved" "$TMP/whole" 1e-5) && pass "llama TP 2 x PP 2 checkpoint resumed at 1 rank == uninterrupted: $out" || fail "moved resume: $out"

# 4. refused layouts and shapes, one line each
expect_error "tp not dividing kv-heads" "kv-heads" $MPIRUN -np 4 $ATOLL train $M --tp 4 --out "$TMP/x"
expect_error "kv-heads not dividing heads" "kv-heads" $ATOLL train $M --kv-heads 3 --out "$TMP/x"
expect_error "untied gpt2" "--tie 0" $ATOLL train --tie 0 --data "$TMP/data" --out "$TMP/x"
expect_error "unknown arch" "arch" $ATOLL train --arch llama3 --data "$TMP/data" --out "$TMP/x"
expect_error "resume with another rope-theta" "rope-theta" $ATOLL train --resume "$TMP/cut" --rope-theta 500 --steps 14
expect_error "resume with another head-dim" "head-dim" $ATOLL train --resume "$TMP/cut" --head-dim 12 --steps 14
expect_error "odd head-dim" "head-dim: rotary embeddings need an even head size, got 7" $ATOLL train $M --head-dim 7 --out "$TMP/x"
expect_error "resume as gpt2" "arch" $ATOLL train --resume "$TMP/cut" --arch gpt2 --steps 14
finish

#!/bin/sh
# Bad input gets one clear error line naming the file or flag, and a non-zero exit;
# never a crash, and never an existing checkpoint overwritten.
# usage: test_bad_input.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
small_data
D="--data $TMP/data"

# flags and shapes
expect_error "unknown flag" "--bogus" $ATOLL train --bogus 1
expect_error "flag without value" "--steps" $ATOLL train --steps
expect_error "non-numeric value" "--lr" $ATOLL train --lr fast
expect_error "heads do not divide width" "heads" $ATOLL train $D --heads 5 --dim 64
expect_error "head-dim on gpt2" "head-dim: is a llama option" $ATOLL train $D --head-dim 12 --heads 4 --dim 64
expect_error "head-dim out of range" "--head-dim" $ATOLL train $D --arch llama --head-dim 2000
expect_error "seq longer than context" "seq" $ATOLL train $D --context 16 --seq 32
expect_error "negative steps" "steps" $ATOLL train $D --steps -3
expect_error "unknown command" "frobnicate" $ATOLL frobnicate

# config files
printf '{"layers": 2, "dim": ' >"$TMP/bad.json"
expect_error "config: invalid JSON" "$TMP/bad.json" $ATOLL train --config "$TMP/bad.json"
printf '{"layers": 2, "colour": "blue"}' >"$TMP/unknown.json"
expect_error "config: unknown key" "colour" $ATOLL train --config "$TMP/unknown.json"
printf '{"layers": "two"}' >"$TMP/type.json"
expect_error "config: wrong type" "layers" $ATOLL train --config "$TMP/type.json"
expect_error "config: missing file" "$TMP/nope.json" $ATOLL train --config "$TMP/nope.json"

# data
expect_error "missing data dir" "$TMP/nodata" $ATOLL train --data "$TMP/nodata"
mkdir -p "$TMP/corrupt"; cp "$TMP/data"/*.bin "$TMP/corrupt/"
printf 'NOTATOLL' | dd of="$TMP/corrupt/train_000.bin" conv=notrunc 2>/dev/null
expect_error "shard: wrong magic" "train_000.bin" $ATOLL train --data "$TMP/corrupt" $TINY
cp "$TMP/data/train_000.bin" "$TMP/corrupt/train_000.bin"
head -c 100 "$TMP/data/val_000.bin" >"$TMP/corrupt/val_000.bin"
expect_error "shard: truncated" "val_000.bin" $ATOLL train --data "$TMP/corrupt" $TINY
expect_error "prepare: missing input" "$TMP/missing.txt" $ATOLL prepare --text "$TMP/missing.txt" --out "$TMP/p"

# a good run to corrupt
$ATOLL train $TINY $D --steps 4 --out "$TMP/run" >/dev/null 2>&1 || fail "good run"
CK=$TMP/run/checkpoints/step_00000004
expect_error "resume: not a checkpoint" "$TMP/empty" sh -c "mkdir -p $TMP/empty && $ATOLL train --resume $TMP/empty"
expect_error "resume: changed shape" "--dim" $ATOLL train --resume "$TMP/run" --dim 64
expect_error "resume: longer context than the checkpoint's" "context" $ATOLL train --resume "$TMP/run" --context 64
expect_error "run dir already holds a run" "--resume" $ATOLL train $TINY $D --steps 4 --out "$TMP/run"
# (the good run's weights are readable: the damaged copies below differ from them only as made)
$PY "$SRC/tests/cli/st_equal.py" "$CK/model.safetensors" "$CK/model.safetensors" >/dev/null || fail "good run: $CK/model.safetensors unreadable"

bad_ckpt() { rm -rf "$TMP/bad"; mkdir -p "$TMP/bad"; cp -r "$CK" "$TMP/bad/"; echo "$TMP/bad/step_00000004"; }
B=$(bad_ckpt); head -c 4 "$CK/model.safetensors" >"$B/model.safetensors"
expect_error "checkpoint: truncated weights" "model.safetensors" $ATOLL train --resume "$B"
B=$(bad_ckpt); size=$(stat -c %s "$CK/model.safetensors"); head -c $((size - 40)) "$CK/model.safetensors" >"$B/model.safetensors"
expect_error "checkpoint: header lies about sizes" "model.safetensors" $ATOLL train --resume "$B"
B=$(bad_ckpt); $PY - "$B/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; blob = bytearray(open(p, "rb").read())
(n,) = struct.unpack("<Q", blob[:8]); h = json.loads(blob[8:8 + n])
off = 8 + n + h["ln_f.bias"]["data_offsets"][0]
blob[off:off + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(blob)
PYEOF
expect_error "checkpoint: NaN in weights" "NaN" $ATOLL train --resume "$B"
B=$(bad_ckpt); printf '{"format": "atoll-checkpoint", "version": 1}' >"$B/state.json"
expect_error "checkpoint: state without step" "state.json" $ATOLL train --resume "$B"
expect_error "sample: missing checkpoint" "$TMP/none" $ATOLL sample --ckpt "$TMP/none"
expect_error "sample: bad temperature" "--temperature" $ATOLL sample --ckpt "$TMP/run" --temperature -1
# --device cuda where no GPU can be used: one line naming the flag, exit 1, nothing
# written. A CUDA build says "no CUDA device" (CUDA_VISIBLE_DEVICES hides any GPU), a
# CPU-only one "built without CUDA"; both lines start with "--device cuda".
expect_error "device: cuda without a GPU" "--device cuda" env CUDA_VISIBLE_DEVICES= $ATOLL train $TINY $D --device cuda --steps 2 --out "$TMP/cudarun"
[ "$rc" -eq 1 ] || fail "device: cuda without a GPU: exit status $rc, not 1"
[ ! -e "$TMP/cudarun/checkpoints" ] || fail "device: cuda without a GPU: wrote $TMP/cudarun/checkpoints"
# heads wider than the CUDA attention kernels take: refused up front (a CPU-only build
# says "built without CUDA" first)
expect_error "device: cuda head size 300" "head sizes up to 256\|built without CUDA" env CUDA_VISIBLE_DEVICES= $ATOLL train $D --layers 1 --heads 2 --dim 600 --device cuda --steps 2 --out "$TMP/widehead"
# a device refused for its settings is refused before the default corpus is prepared
# (no --data: the default is a directory under the working directory)
mkdir -p "$TMP/nodata" && cd "$TMP/nodata"
expect_error "device: refused before the default corpus" "--device shadow" $ATOLL train $TINY --device shadow --precision bf16 --steps 2 --out "$TMP/nodata/run"
[ -z "$(ls -A "$TMP/nodata")" ] && pass "device: the refusal wrote nothing" || fail "device: the refusal wrote $(ls -A "$TMP/nodata")"
# so is a layout that needs more ranks than one process
expect_error "islands in one process: refused before the default corpus" "--islands 2: islands need several ranks" \
  $ATOLL train $TINY --islands 2 --steps 2 --out "$TMP/nodata/run"
expect_error "tensor parallel in one process: refused before the default corpus" "--tp 2 --pp 1: model parallelism needs several ranks" \
  $ATOLL train $TINY --tp 2 --steps 2 --out "$TMP/nodata/run"
expect_error "a bad --overlap: refused before the default corpus" "--overlap 5: must be >= 0 and below" \
  $ATOLL train $TINY --islands 2 --sync-every 4 --overlap 5 --join tcp://127.0.0.1:9 --island-key k --coordinator-key k \
  --island-listen tcp://127.0.0.1:0 --steps 2 --out "$TMP/nodata/run"
[ -z "$(ls -A "$TMP/nodata")" ] && pass "layout: the refusals wrote nothing" || fail "layout: the refusals wrote $(ls -A "$TMP/nodata")"
cd - >/dev/null
expect_error "sample: --device cuda without a GPU" "--device cuda" env CUDA_VISIBLE_DEVICES= $ATOLL sample --ckpt "$TMP/run" --device cuda --tokens 2
[ "$rc" -eq 1 ] || fail "sample: --device cuda without a GPU: exit status $rc, not 1"

# a NaN loss stops the run and leaves the last good checkpoint intact
cp "$CK/model.safetensors" "$TMP/before.safetensors"
ATOLL_FAULT_NAN_STEP=6 $ATOLL train --resume "$TMP/run" --steps 8 --save-every 1 >/dev/null 2>"$TMP/nan.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "step 6: loss is NaN" "$TMP/nan.err" && grep -q "step_00000005" "$TMP/nan.err"; then
  pass "NaN loss stops the run: $(tail -1 "$TMP/nan.err")"
else
  fail "NaN loss: status $rc: $(cat "$TMP/nan.err")"
fi
[ -d "$TMP/run/checkpoints/step_00000005" ] && [ ! -d "$TMP/run/checkpoints/step_00000006" ] \
  && pass "last good checkpoint (step 5) kept, none written for step 6" || fail "checkpoints after NaN: $(ls "$TMP/run/checkpoints")"
$ATOLL sample --ckpt "$TMP/run" --tokens 5 >/dev/null 2>&1 && pass "the run is still usable" || fail "sample after NaN"

# a checkpoint under a ~1500-byte path (nested directories, below PATH_MAX): sample reads
# it, and an error about such a path keeps its reason, past the message's 512 bytes (issue 32)
LONG=$TMP/long; while [ ${#LONG} -lt 1500 ]; do LONG=$LONG/nested_directory_name; done
mkdir -p "$LONG" && cp -r "$TMP/run" "$LONG/run"
$ATOLL sample --ckpt "$LONG/run" --tokens 2 >/dev/null 2>"$TMP/err" && pass "sample --ckpt with a 1500-byte path" \
  || fail "sample --ckpt with a 1500-byte path: $(cat "$TMP/err")"
expect_error "sample --ckpt: a missing 1500-byte path keeps the reason" "/nope: cannot open: No such file or directory" \
  $ATOLL sample --ckpt "$LONG/nope" --tokens 2

# config files: duplicate keys, trailing content and a resume key are refused (issue 12)
printf '{"layers": 2, "dim": 32, "layers": 3}' >"$TMP/dup.json"
expect_error "config: duplicate key" "layers" $ATOLL train $D --config "$TMP/dup.json"
grep -q "dup.json" "$TMP/err" || fail "config: duplicate key: message lacks the file: $(cat "$TMP/err")"
# the same setting in two spellings, or under its older name, is a duplicate too (issue 32)
printf '{"sync_every": 5, "sync-every": 7}' >"$TMP/dup_spelling.json"
expect_error "config: one setting in two spellings" "dup_spelling.json: keys 'sync_every' and 'sync-every' are the same setting" \
  $ATOLL train $TINY $D --steps 1 --out "$TMP/dup_spelling" --config "$TMP/dup_spelling.json"
printf '{"shard": 1, "zero": 0}' >"$TMP/dup_alias.json"
expect_error "config: a setting and its older name" "dup_alias.json: keys 'shard' and 'zero' are the same setting (zero)" \
  $ATOLL train $TINY $D --steps 1 --out "$TMP/dup_alias" --config "$TMP/dup_alias.json"
printf '{"layers": 2}\n{"layers": 3}\n' >"$TMP/trailing.json"
expect_error "config: content after the object" "$TMP/trailing.json" $ATOLL train $D --config "$TMP/trailing.json"
printf '{"layers": 2, "resume": "%s"}' "$TMP/run" >"$TMP/resume.json"
expect_error "config: resume key" "--resume" $ATOLL train $D --config "$TMP/resume.json"

# prepare into its own --text directory, or train on a FIFO: one line, no hang (issue 12)
mkdir -p "$TMP/texts"; printf 'one\ntwo\nthree\nfour\n' >"$TMP/texts/t.txt"
expect_error "prepare: --out is the --text directory" "inside" $ATOLL prepare --text "$TMP/texts" --out "$TMP/texts"
mkdir -p "$TMP/fifo"; mkfifo "$TMP/fifo/train_000.bin"
expect_error "data: FIFO as a token file" "FIFO" timeout 20 $ATOLL train --data "$TMP/fifo" --steps 1

# sizes: each flag has a maximum, and a run too large for the machine is refused at
# start-up with its estimate, before allocating (issue 12)
expect_error "limit: --batch" "65536" $ATOLL train $D --batch 100000
expect_error "limit: --steps" "--steps" $ATOLL train $D --steps 2000000000
expect_error "limit: --context" "131072" $ATOLL train $D --context 1000000
expect_error "limit: --microbatches" "--microbatches" $ATOLL train $D --microbatches 100000
expect_error "limit: --global-batch" "--global-batch" $ATOLL train $D --batch 1 --global-batch 2000000000
t0=$(date +%s%N)
expect_error "memory: huge batch" "needs about" $ATOLL train $D --layers 2 --heads 2 --dim 32 --context 4096 --batch 65536 --out "$TMP/huge"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $ms -lt 10000 ] && pass "memory: refused in $ms ms" || fail "memory: refusing took $ms ms"
# under a 1 GiB address-space limit the estimate (3.2 GiB, RSS 3.17 GiB when run) is refused,
# while a tiny run still trains
# AddressSanitizer reserves terabytes of shadow address space, which ulimit -v forbids:
# under ASan (scripts/test_sanitize.sh) these two cases cannot run
if ldd "$ATOLL" 2>/dev/null | grep -q libasan; then
  echo "skip: ulimit -v cases under AddressSanitizer"
else
  expect_error "memory: over ulimit -v" "--batch 2000 --seq 256" sh -c "ulimit -v 1000000; $ATOLL train $D --layers 2 --heads 2 --dim 32 --context 256 --batch 2000 --out $TMP/big"
  sh -c "ulimit -v 1000000; $ATOLL train $TINY $D --steps 1 --out $TMP/small" >/dev/null 2>&1 && pass "memory: a tiny run under ulimit -v trains" || fail "memory: tiny run under ulimit -v"
fi
# token counts in 64 bits: 65536 x 65536 tokens is 2^32, not 0 (issue 12)
expect_error "sequence parallel: tokens past int" "4294967296" $ATOLL train $D --tp 3 --sequence-parallel 1 --batch 65536 --context 65536

# sample: a prompt byte outside a small vocabulary is refused, not read out of bounds
# (issue 12); the model is trained on token files of vocabulary 64
mkdir -p "$TMP/v64"
$PY - "$TMP/v64" <<'PYEOF'
import os, struct, sys
for name, n in (("train_000.bin", 20000), ("val_000.bin", 4000)):
    toks = bytes((i * 7 + i // 13) % 64 for i in range(n))
    open(os.path.join(sys.argv[1], name), "wb").write(b"ATOLLTOK" + struct.pack("<IIQII", 1, 64, n, 1, 0) + toks)
PYEOF
$ATOLL train $TINY --vocab 64 --data "$TMP/v64" --steps 2 --out "$TMP/v64run" >/dev/null 2>&1 || fail "vocab 64: training"
expect_error "sample: prompt byte outside the vocabulary" "--prompt: byte 104" $ATOLL sample --ckpt "$TMP/v64run" --prompt hello
$ATOLL sample --ckpt "$TMP/v64run" --prompt 0123 --tokens 4 >/dev/null 2>&1 && pass "sample: a prompt inside vocabulary 64" \
  || fail "sample: prompt inside vocabulary 64"
# an island without --island-listen listens on its address toward the coordinator: a
# coordinator host that does not resolve says so; --island-advertise alone is refused
"$ATOLL" keys --out "$TMP/k" >/dev/null 2>&1 || fail "keys"
NET="--island-key $TMP/k/key.secret --coordinator-key $TMP/k/key.pub"
expect_error "--join to a host that does not resolve, no --island-listen" "cannot resolve no-such-host.invalid" \
  $ATOLL train $TINY $D $NET --islands 2 --join tcp://no-such-host.invalid:5555 --steps 2 --out "$TMP/j1"
expect_error "--island-advertise without --island-listen" "--island-advertise tcp://10.0.0.1:6000: needs --island-listen" \
  $ATOLL train $TINY $D $NET --islands 2 --join tcp://127.0.0.1:9 --island-advertise tcp://10.0.0.1:6000 --steps 2 --out "$TMP/j2"
# an island without --islands asks the coordinator first: a host that does not resolve
# is said at once, not after --net-timeout
expect_error "--join to a host that does not resolve, no --islands" "--join tcp://no-such-host.invalid:5555: cannot resolve" \
  $ATOLL train $TINY $D $NET --join tcp://no-such-host.invalid:5555 --steps 2 --out "$TMP/j3"
finish

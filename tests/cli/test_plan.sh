#!/bin/sh
# atoll plan from the command line: bad input gets one clear error line; --json carries
# the documented fields; the Llama 3 405B rows and the 16,384-GPU ranking hold through
# the CLI; --fewest, --sweep, --explain and --config work; and the calibration against
# a real (tiny, seconds-long) atoll CPU run predicts its step time within 25%.
# usage: test_plan.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"

# ---------------------------------------------------------------- bad input
expect_error "unknown model lists the known ones" "gpt2-xl, llama3-8b, llama3-70b, llama3-405b" $ATOLL plan --model llama4
expect_error "unknown accelerator lists the known ones" "h100, h200" $ATOLL plan --model gpt2 --accel tpu-v5
expect_error "heads do not divide the width" "do not divide the width" $ATOLL plan --layers 4 --dim 64 --heads 5
expect_error "KV heads do not divide the heads" "--kv-heads" $ATOLL plan --layers 4 --dim 64 --heads 4 --kv-heads 3
expect_error "--grad-dtype takes bf16 or fp32" "--grad-dtype fp16: expected bf16 or fp32" $ATOLL plan --model gpt2 --grad-dtype fp16
# --grad-dtype's default on the cpu accelerator is atoll train's (fp32 gradients on the wire
# at either precision), and the training line says which gradients the plan sends
dpb() { $ATOLL plan --model gpt2 --accel cpu --cpu-gflops 1000 --gpus 4 --dp 4 --tp 1 --pp 1 --cp 1 --zero 0 "$@" 2>&1 | grep -o 'DP [0-9.]* [KMG]B'; }
[ "$(dpb --precision bf16)" = "$(dpb --precision bf16 --grad-dtype fp32)" ] && [ "$(dpb --precision bf16)" != "$(dpb --precision bf16 --grad-dtype bf16)" ] \
  && pass "cpu at bf16: fp32 gradients by default, as atoll train ($(dpb --precision bf16))" \
  || fail "cpu at bf16: default $(dpb --precision bf16), fp32 $(dpb --precision bf16 --grad-dtype fp32), bf16 $(dpb --precision bf16 --grad-dtype bf16)"
$ATOLL plan --model gpt2 --gpus 8 --precision fp32 --grad-dtype bf16 2>&1 | grep '^training' | grep -q 'bf16 gradients' \
  && pass "training line names bf16 gradients of an fp32 run" || fail "training line: $($ATOLL plan --model gpt2 --gpus 8 --precision fp32 --grad-dtype bf16 2>&1 | grep '^training')"
for gd in "--precision fp32 --grad-dtype bf16:bf16" "--precision bf16:bf16" "--precision bf16 --grad-dtype fp32:fp32" "--precision fp32:fp32"; do
  got=$($ATOLL plan --model gpt2 --gpus 8 ${gd%:*} --json 2>&1 | $PY -c 'import json,sys; print(json.load(sys.stdin)["training"].get("grad_dtype"))' 2>&1)
  [ "$got" = "${gd#*:}" ] && pass "--json training.grad_dtype ${gd#*:} for ${gd%:*}" || fail "--json training.grad_dtype for ${gd%:*}: $got"
done
expect_error "more pipeline stages than layers" "more pipeline stages than the model's 126 layers" \
  $ATOLL plan --model llama3-405b --gpus 2048 --pp 256
expect_error "layout larger than the cluster" "needs 32768 devices, the cluster has 16384" \
  $ATOLL plan --model llama3-405b --gpus 16384 --tp 8 --pp 16 --dp 256 --cp 1
expect_error "nothing fits: says what the lightest layout needs" "GiB per device" $ATOLL plan --model llama3-405b --gpus 8
expect_error "tp does not divide the heads" "--tp 5" $ATOLL plan --model gpt2 --tp 5
expect_error "unknown flag" "--bogus" $ATOLL plan --model gpt2 --bogus 1
expect_error "flag without value" "--gpus" $ATOLL plan --model gpt2 --gpus
expect_error "non-numeric count" "--gpus" $ATOLL plan --model gpt2 --gpus many
expect_error "bad bandwidth" "--inter-bw" $ATOLL plan --model gpt2 --inter-bw fast
expect_error "bad recompute" "--recompute" $ATOLL plan --model gpt2 --recompute some
expect_error "seq beyond a GPT-2 context" "context" $ATOLL plan --model gpt2 --seq 4096
expect_error "unknown assumption" "--set" $ATOLL plan --model gpt2 --set speed=2
printf '{"model": "gpt2", "gpus": ' >"$TMP/bad.json"
expect_error "config: invalid JSON" "$TMP/bad.json" $ATOLL plan --config "$TMP/bad.json"
mkdir -p "$TMP/confdir"; mkfifo "$TMP/conffifo"
expect_error "config: a directory" "confdir: cannot read: Is a directory" $ATOLL plan --config "$TMP/confdir"
expect_error "config: a FIFO (an open without O_NONBLOCK waited for ever)" "conffifo: not a regular file" timeout 20 $ATOLL plan --config "$TMP/conffifo"
printf '{"model": "gpt2", "colour": "blue"}' >"$TMP/unknown.json"
expect_error "config: unknown key" "colour" $ATOLL plan --config "$TMP/unknown.json"
# issue 12: a key repeated 100 times overran the reader's fixed array of 82 strings
# (a crash, or a stack overflow under ASan); duplicates and trailing text are refused
$PY -c "print('{' + ', '.join(['\"model\": \"gpt2\"'] * 100) + '}')" >"$TMP/dup.json"
expect_error "config: a key given 100 times" "$TMP/dup.json: duplicate key 'model'" $ATOLL plan --config "$TMP/dup.json"
printf '{"model": "gpt2", "batch_tokens": "1M", "batch-tokens": "2M"}' >"$TMP/dup2.json"
expect_error "config: one key in two spellings" "duplicate key 'batch-tokens'" $ATOLL plan --config "$TMP/dup2.json"
printf '{"model": "gpt2"} {"gpus": 8}' >"$TMP/trail.json"
expect_error "config: content after the object" "$TMP/trail.json: unexpected content after the JSON object" \
  $ATOLL plan --config "$TMP/trail.json"
$PY -c "import json; print(json.dumps({'model': 'gpt2', 'set': ['dp_overlap=0.5'] * 40}))" >"$TMP/sets.json"
expect_error "config: more assumptions than --set takes" "at most 32" $ATOLL plan --config "$TMP/sets.json"
expect_error "calibrate: missing file" "$TMP/none.json" $ATOLL plan --calibrate "$TMP/none.json"
printf '{"steps": 3} {"config": {}}' >"$TMP/twosummaries.json"
expect_error "calibrate: two JSON values" "twosummaries.json: unexpected content after the JSON object at byte 13" \
  $ATOLL plan --calibrate "$TMP/twosummaries.json"
printf '{"steps": 3}' >"$TMP/notsummary.json"
expect_error "calibrate: not a summary" "config" $ATOLL plan --calibrate "$TMP/notsummary.json"
expect_error "calibrate: a negative tolerance (it switched the check off)" "--tolerance -1: must be >= 0" \
  $ATOLL plan --calibrate "$TMP/notsummary.json" --tolerance -1
expect_error "--threads on a GPU cluster (ignored before)" "--threads: only with --accel cpu" $ATOLL plan --model gpt2 --threads 4
# the failure model's flags (docs/plan.md "Failures and goodput"): a bad value is one line
expect_error "negative failure rate" "--fail-accel -1: expected interruptions per 1000 accelerator-days" \
  $ATOLL plan --model gpt2 --fail-accel -1
expect_error "failure rate not a number" "--fail-node: expected a number" $ATOLL plan --model gpt2 --fail-node often
expect_error "planned stops beyond the range" "--planned-stops 2e6" $ATOLL plan --model gpt2 --planned-stops 2e6
expect_error "zero checkpoint bandwidth" "--ckpt-bw: must be at least" $ATOLL plan --model gpt2 --ckpt-bw 0
expect_error "restart time without a unit we know" "--restart: expected a time" $ATOLL plan --model gpt2 --restart 5weeks
expect_error "checkpoint interval of zero" "--ckpt-every 0: expected a time above 0" $ATOLL plan --model gpt2 --ckpt-every 0
# the goodput of the chosen layout, in the report and in --json; Llama 3 405B on its
# 16,384 H100s lands within 3 points above the published ">90%" (arXiv 2407.21783)
$ATOLL plan --model llama3-405b --gpus 16384 --top 1 >"$TMP/gp.txt" 2>"$TMP/err" || fail "goodput text: $(cat "$TMP/err")"
grep -q "^  goodput [0-9.]*%: checkpoint every" "$TMP/gp.txt" && grep -q "interruptions a day" "$TMP/gp.txt" \
  && pass "report: $(grep '^  goodput' "$TMP/gp.txt")" || fail "report lacks the goodput: $(tail -25 "$TMP/gp.txt")"
$ATOLL plan --model llama3-405b --gpus 16384 --top 1 --json --ckpt-every 30min >"$TMP/gp.json" 2>"$TMP/err" \
  || fail "goodput json: $(cat "$TMP/err")"
$ATOLL plan --model llama3-405b --gpus 16384 --top 1 --json >"$TMP/gp0.json" 2>"$TMP/err" || fail "goodput json: $(cat "$TMP/err")"
$PY - "$TMP/gp0.json" "$TMP/gp.json" >"$TMP/verdict" <<'PYEOF' && pass "--json failures: $(cat "$TMP/verdict")" || fail "--json failures: $(cat "$TMP/verdict")"
import json, sys
best = json.load(open(sys.argv[1]))["layouts"][0]["failures"]
fixed = json.load(open(sys.argv[2]))
f = fixed["layouts"][0]["failures"]
print(f"goodput {best['goodput']:.3f} every {best['checkpoint_interval_seconds']:.0f} s; --ckpt-every 30min: "
      f"{f['goodput']:.3f} every {f['checkpoint_interval_seconds']:.0f} s")
ok = (0.90 <= best["goodput"] <= 0.93 and best["interval_rule"] == "daly" and f["interval_rule"] == "fixed"
      and abs(f["checkpoint_interval_seconds"] - 1800) < 10 and f["goodput"] < best["goodput"]
      and fixed["failures"]["checkpoint_every_seconds"] == 1800 and best["days_with_failures"] > 0)
sys.exit(0 if ok else 1)
PYEOF

# ---------------------------------------------------------------- --json
$ATOLL plan --model llama3-405b --accel h100 --gpus 16384 --top 3 --json >"$TMP/s16k.json" 2>"$TMP/err" \
  || fail "search 16384: $(cat "$TMP/err")"
$PY - "$TMP/s16k.json" >"$TMP/verdict" <<'PYEOF' && pass "json fields; 16384 H100 top 3: $(cat "$TMP/verdict")" || fail "16384 search: $(cat "$TMP/verdict")"
import json, sys
j = json.load(open(sys.argv[1]))
need = ["dp", "tp", "pp", "cp", "zero_stage", "microbatch", "fits", "memory_per_gpu_bytes", "step_seconds",
        "tflops_per_gpu", "mfu"]
L = j["layouts"]
missing = [k for k in need if any(k not in l for l in L)]
shape = [l for l in L[:3] if l["tp"] == 8 and l["pp"] > 1 and l["bytes_per_gpu_per_step"]["tp"]["link"] == "intra-node"
         and l["bytes_per_gpu_per_step"]["pp"]["link"] == "inter-node"]
print(", ".join(f"dp {l['dp']} tp {l['tp']} pp {l['pp']} cp {l['cp']} {l['tflops_per_gpu']:.0f} TFLOP/s" for l in L[:3]),
      f"(missing {missing})" if missing else "")
ok = (not missing and len(L) == 3 and shape and all(l["fits"] for l in L) and "assumptions" in j
      and "eta_mm" in j["assumptions"] and j["cluster"]["gpus"] == 16384)
sys.exit(0 if ok else 1)
PYEOF

# the three published layouts (arXiv 2407.21783, Table 4), fixed on the command line
row() { # GPUS TP CP PP DP SEQ BATCH PUBLISHED
  $ATOLL plan --model llama3-405b --accel h100 --gpus $1 --tp $2 --cp $3 --pp $4 --dp $5 --seq $6 --batch $7 --json \
    >"$TMP/row.json" 2>"$TMP/err" || { fail "row $*: $(cat "$TMP/err")"; return; }
  v=$($PY -c "import json,sys; l=json.load(open(sys.argv[1]))['layouts'][0]; print(f\"{l['tflops_per_gpu']:.1f} {l['tflops_per_gpu']/$8-1:+.3f}\")" "$TMP/row.json")
  gap=${v#* }
  $PY -c "import sys; sys.exit(0 if abs(float(sys.argv[1])) <= 0.15 else 1)" "$gap" \
    && pass "llama3-405b on $1 H100, tp $2 cp $3 pp $4 dp $5, seq $6: predicted ${v% *} TFLOP/s vs published $8 ($gap)" \
    || fail "llama3-405b on $1 H100, tp $2 cp $3 pp $4 dp $5: predicted ${v% *} TFLOP/s vs published $8 ($gap)"
}
row 8192 8 1 16 64 8192 2048 430
row 16384 8 1 16 128 8192 2048 400
row 16384 8 16 16 8 131072 128 380

# ---------------------------------------------------------------- text output
$ATOLL plan --model llama3-405b --gpus 16384 --explain >"$TMP/explain.txt" 2>"$TMP/err" || fail "explain: $(cat "$TMP/err")"
grep -q "stays inside a node" "$TMP/explain.txt" && grep -q "bubble" "$TMP/explain.txt" && grep -q "^assumptions" "$TMP/explain.txt" \
  && grep -q "Alternatives" "$TMP/explain.txt" && pass "--explain says why in words" || fail "--explain: $(head -40 "$TMP/explain.txt")"
# --versus: why the first beats a published layout (Megatron-LM's 18.4B row, Narayanan
# et al. 2021 Table 1, with that paper's software: docs/plan.md "Validation")
MEG18="--arch gpt2 --layers 40 --dim 6144 --heads 48 --vocab 51200 --seq 2048 --accel a100-80gb --gpus 256 --batch 1024
  --set attn_fused=0 --set seq_par=0 --set tp_regather=0 --set tp_overlap=0"
$ATOLL plan $MEG18 --explain --versus dp=32,tp=8,pp=1,cp=1,recompute=full >"$TMP/versus.txt" 2>"$TMP/err" \
  || fail "versus: $(cat "$TMP/err")"
grep -q "Against the given layout dp 32 x tp 8 x pp 1 x cp 1" "$TMP/versus.txt" \
  && grep -q "the time per token of the first" "$TMP/versus.txt" && grep -q "recompute full vs" "$TMP/versus.txt" \
  && pass "--versus: $(grep -A1 'Against the given' "$TMP/versus.txt" | tail -1 | sed 's/^ *//')" \
  || fail "--versus: $(grep -A4 'Against' "$TMP/versus.txt")"
$ATOLL plan $MEG18 --json --versus dp=32,tp=8,pp=1,cp=1,recompute=full >"$TMP/versus.json" 2>"$TMP/err" \
  && $PY -c "import json,sys; v=json.load(open(sys.argv[1]))['versus']; sys.exit(0 if v['tp'] == 8 and v['recompute'] == 'full' and v['time_per_token_vs_first'] > 1 else 1)" "$TMP/versus.json" \
  && pass "--versus in --json" || fail "--versus in --json: $(cat "$TMP/err")"
expect_error "versus without all four sizes" "give all of dp, tp, pp and cp" $ATOLL plan $MEG18 --explain --versus dp=32,tp=8
expect_error "versus with an unknown key" "unknown key 'ep'" $ATOLL plan $MEG18 --explain --versus dp=32,tp=8,pp=1,cp=1,ep=2
expect_error "versus larger than the cluster" "devices" $ATOLL plan $MEG18 --explain --versus dp=64,tp=8,pp=1,cp=1
$ATOLL plan --model llama3-405b --accel h100 --fewest >"$TMP/fewest.txt" 2>"$TMP/err" || fail "fewest: $(cat "$TMP/err")"
n=$(sed -n 's/^fewest .*: \([0-9]*\)$/\1/p' "$TMP/fewest.txt")
[ -n "$n" ] && [ "$n" -gt 75 ] && [ "$n" -le 150 ] && pass "fewest H100s for 405B: $n ($(sed -n 2p "$TMP/fewest.txt" | sed 's/^ *//'))" \
  || fail "fewest: $(cat "$TMP/fewest.txt")"
$ATOLL plan --model llama3-405b --accel h100 --sweep 128,1024,16384 --json >"$TMP/sweep.json" 2>"$TMP/err" || fail "sweep: $(cat "$TMP/err")"
$PY - "$TMP/sweep.json" >"$TMP/verdict" <<'PYEOF' && pass "--sweep: $(cat "$TMP/verdict")" || fail "--sweep: $(cat "$TMP/verdict")"
import json, sys
s = json.load(open(sys.argv[1]))["sweep"]
d = [x.get("days") for x in s]
print(", ".join(f"{x['cluster_gpus']} GPUs {x.get('days', 0):.0f} days" for x in s))
sys.exit(0 if None not in d and d[0] > d[1] > d[2] and d[0] > 365 * 5 else 1)
PYEOF

# a config file and the same flags give the same plan
printf '{"model": "llama3-70b", "accel": "h200", "gpus": 512, "batch_tokens": "8M", "set": ["dp_overlap=0.5"]}' >"$TMP/c.json"
$ATOLL plan --config "$TMP/c.json" --json >"$TMP/a.json" 2>"$TMP/err" || fail "config: $(cat "$TMP/err")"
$ATOLL plan --model llama3-70b --accel h200 --gpus 512 --batch-tokens 8M --set dp_overlap=0.5 --json >"$TMP/b.json" 2>&1
cmp -s "$TMP/a.json" "$TMP/b.json" && pass "--config FILE equals the same flags" || fail "--config differs from flags"
$ATOLL plan --config "$TMP/c.json" --gpus 1024 --json >"$TMP/c2.json" 2>&1
$PY -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['cluster']['gpus'] == 1024 else 1)" "$TMP/c2.json" \
  && pass "flags override the config file" || fail "flags do not override the config file"

# ---------------------------------------------------------------- bench results
# the fp32 peak of a bench/run.sh results file ("peak_gflops": {"fp32"}) is the cpu's peak,
# scaled from the file's threads to the plan's; a file without one gets one line
printf '{"threads": 2, "peak_gflops": {"fp32": 300.0, "bf16": 900.0}}\n' >"$TMP/bench.json"
for th in 2 1; do
  want=$([ $th = 2 ] && echo "cpu peak 300.0 GFLOP/s from $TMP/bench.json" || echo "cpu peak 150.0 GFLOP/s: $TMP/bench.json's 300.0 at 2 threads, scaled to 1")
  $ATOLL plan --model gpt2 --accel cpu --gpus 1 --threads $th --bench-results "$TMP/bench.json" >"$TMP/out" 2>&1
  grep -qF "$want" "$TMP/out" && pass "bench results at --threads $th: $want" || fail "bench results at --threads $th: $(grep -i 'cpu' "$TMP/out" | head -3)"
done
printf '{"threads": 2, "peak_gflops": {"bf16": 900.0}}\n' >"$TMP/bench_bf16.json"
expect_error "a results file without an fp32 peak" "no peak_gflops.fp32" \
  $ATOLL plan --model gpt2 --accel cpu --gpus 1 --bench-results "$TMP/bench_bf16.json"
# the whole file is one JSON value: junk after it, or a NUL byte, is refused (it was ignored)
printf '{"threads": 2, "peak_gflops": {"fp32": 300.0}}\n}garbage' >"$TMP/bench_junk.json"
expect_error "a results file with content after its JSON" "bench_junk.json: unexpected content after the JSON object at byte 47" \
  $ATOLL plan --model gpt2 --accel cpu --gpus 1 --bench-results "$TMP/bench_junk.json"
printf '{"threads": 2, "peak_gflops": {"fp32": 300.0}}\000{}' >"$TMP/bench_nul.json"
expect_error "a results file with a NUL byte after its JSON" "bench_nul.json: unexpected content after the JSON object" \
  $ATOLL plan --model gpt2 --accel cpu --gpus 1 --bench-results "$TMP/bench_nul.json"
for g in 1e999 1e-300 1e300 -5; do
  printf '{"threads": 2, "peak_gflops": {"fp32": %s}}\n' $g >"$TMP/bench_odd.json"
  expect_error "a results file with fp32 peak $g" "is not a CPU's" $ATOLL plan --model gpt2 --accel cpu --gpus 1 --bench-results "$TMP/bench_odd.json"
done

# ---------------------------------------------------------------- calibration
# A tiny model on one thread (about 2 s), then the plan of that run with this machine
# measured right after it. The machine may be shared: one retry tells noise from error.
small_data
calibrate() {
  rm -rf "$TMP/cal"
  $ATOLL train --data "$TMP/data" --out "$TMP/cal" --layers 2 --heads 4 --dim 128 --context 64 --batch 16 --steps 25 \
    --warmup 2 --eval-every 0 --eval-batches 1 --save-every 0 --threads 1 >/dev/null 2>"$TMP/train.err" \
    || { echo "training failed: $(tail -1 "$TMP/train.err")"; return 1; }
  $ATOLL plan --calibrate "$TMP/cal/summary.json" --measure --json >"$TMP/cal.json" 2>"$TMP/err" \
    || { echo "plan --calibrate failed: $(cat "$TMP/err")"; return 1; }
  $PY - "$TMP/cal.json" "${ATOLL_TEST_SANITIZED:-0}" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"predicted {j['predicted_step_seconds']*1e3:.1f} ms, measured {j['measured_step_seconds']*1e3:.1f} ms, "
      f"gap {100*j['gap']:+.1f}% ({j['cpu']})")
# under ASan/UBSan (scripts/test_sanitize.sh) instrumented code runs at other rates
# than the ones the planner measures: only a finite gap is required there
bound = float("inf") if sys.argv[2] == "1" else 0.25
sys.exit(0 if abs(j["gap"]) <= bound else 1)
PYEOF
}
if first=$(calibrate); then
  pass "calibration: $first"
elif second=$(calibrate); then
  pass "calibration (second try; first: $first): $second"
else
  fail "calibration: $first; again: $second"
fi
finish

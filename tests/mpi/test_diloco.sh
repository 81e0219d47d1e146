#!/bin/sh
# DiLoCo: with H = 1, outer SGD at lr 1 and inner SGD it equals data parallel; a run
# stopped mid-round (fragment merges pending) resumes bit-exactly; inter-island bytes
# follow the formula for every dtype and fragment count; summary.json's timeline
# numbers (merges, staleness, tokens contributed, utilisation) hold; a drifted island is
# caught.
# usage: test_diloco.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 5 --eval-batches 2 --save-every 0"
SGD="--optimizer sgd --lr 0.05 --warmup 0 --grad-clip 0 --weight-decay 0 --steps 10"
EQ="--sync-every 1 --outer-lr 1 --outer-momentum 0 --outer-optimizer sgd"

# 1. H = 1, outer SGD lr 1, momentum 0, inner SGD == data parallel (1e-6)
$MPIRUN -np 2 $ATOLL train $M $SGD --out "$TMP/dp2" >/dev/null 2>&1 || fail "dp 2"
$MPIRUN -np 2 $ATOLL train $M $SGD --islands 2 $EQ --out "$TMP/k2" >/dev/null 2>"$TMP/err" || fail "diloco 2x1: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/k2" "$TMP/dp2" 1e-6) && pass "DiLoCo 2 islands x 1, H=1 == DDP 2: $out" || fail "DiLoCo 2x1 vs DDP: $out"
$MPIRUN -np 4 $ATOLL train $M $SGD --out "$TMP/dp4" >/dev/null 2>&1 || fail "dp 4"
$MPIRUN -np 4 $ATOLL train $M $SGD --islands 2 --shard 1 $EQ --out "$TMP/k22" >/dev/null 2>"$TMP/err" || fail "diloco 2x2: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/k22" "$TMP/dp4" 1e-6) && pass "DiLoCo 2 islands x 2 (ZeRO-1 inside), H=1 == DDP 4: $out" || fail "DiLoCo 2x2 vs DDP: $out"

# 2. resume in the middle of a round, with fragments, overlap and fp4: bit-exact
S="--islands 2 --sync-every 4 --fragments 2 --overlap 1 --outer-dtype fp4 --steps 16 --warmup 2 --lr 3e-3"
$MPIRUN -np 4 $ATOLL train $M $S --shard 3 --out "$TMP/whole" >/dev/null 2>"$TMP/err" || fail "streaming run: $(tail -1 "$TMP/err")"
$MPIRUN -np 4 $ATOLL train $M $S --shard 3 --stop-after 6 --out "$TMP/cut" >/dev/null 2>"$TMP/err" || fail "stop at 6: $(tail -1 "$TMP/err")"
$MPIRUN -np 4 $ATOLL train --resume "$TMP/cut" >/dev/null 2>"$TMP/err" || fail "resume: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/cut" "$TMP/whole" 0) && pass "streaming DiLoCo stopped at step 6 (merge pending) resumes bit-exactly: $out" || fail "resume: $out"
expect_error "resume with another island count" "--islands" $MPIRUN -np 4 $ATOLL train --resume "$TMP/cut" --islands 4 --shard 0 --steps 20

# 2a. with --overlap T the exchange runs on a thread of its own while the island takes
#     its T inner steps: the test hook holds each exchange until the training thread
#     took them (an exchange run in place would wait for ever, and fail after 60 s);
#     the result is the same bits, at T = 1 (ZeRO-3 inside) and T = 2
ATOLL_TEST_OVERLAP_PROOF=1 $MPIRUN -np 4 $ATOLL train $M $S --shard 3 --out "$TMP/proof" >/dev/null 2>"$TMP/err" || fail "overlap proof: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/proof" "$TMP/whole" 0) && pass "the exchange ran beside the inner steps (T = 1, ZeRO-3): same bits: $out" || fail "overlap proof T = 1: $out"
S2="--islands 2 --sync-every 6 --fragments 2 --overlap 2 --steps 12"
$MPIRUN -np 2 $ATOLL train $M $S2 --out "$TMP/t2" >/dev/null 2>"$TMP/err" || fail "overlap 2: $(tail -1 "$TMP/err")"
ATOLL_TEST_OVERLAP_PROOF=1 $MPIRUN -np 2 $ATOLL train $M $S2 --out "$TMP/t2proof" >/dev/null 2>"$TMP/err" || fail "overlap 2 proof: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/t2proof" "$TMP/t2" 0) && pass "the exchange ran beside the inner steps (T = 2): same bits: $out" || fail "overlap proof T = 2: $out"

# 2b. islands around model parallelism: each island is TP 2 (or PP 2); H = 1 equals
#     DDP 2, and streaming fp4 resumes bit-exactly (tensor-parallel ranks keep their
#     replicated tensors equal under compressed outer gradients)
$MPIRUN -np 4 $ATOLL train $M $SGD --islands 2 --tp 2 $EQ --out "$TMP/k2tp2" >/dev/null 2>"$TMP/err" || fail "diloco 2 x tp 2: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/k2tp2" "$TMP/dp2" 1e-5) && pass "DiLoCo 2 islands x TP 2, H=1 == DDP 2: $out" || fail "DiLoCo 2 x TP 2 vs DDP: $out"
$MPIRUN -np 4 $ATOLL train $M $SGD --islands 2 --pp 2 $EQ --out "$TMP/k2pp2" >/dev/null 2>"$TMP/err" || fail "diloco 2 x pp 2: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/k2pp2" "$TMP/dp2" 1e-5) && pass "DiLoCo 2 islands x PP 2, H=1 == DDP 2: $out" || fail "DiLoCo 2 x PP 2 vs DDP: $out"
$MPIRUN -np 4 $ATOLL train $M $S --tp 2 --out "$TMP/tpwhole" >/dev/null 2>"$TMP/err" || fail "streaming x tp 2: $(tail -1 "$TMP/err")"
$MPIRUN -np 4 $ATOLL train $M $S --tp 2 --stop-after 6 --out "$TMP/tpcut" >/dev/null 2>"$TMP/err" || fail "tp 2 stop at 6: $(tail -1 "$TMP/err")"
$MPIRUN -np 4 $ATOLL train --resume "$TMP/tpcut" >/dev/null 2>"$TMP/err" || fail "tp 2 resume: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/tpcut" "$TMP/tpwhole" 0) && pass "streaming fp4 DiLoCo x TP 2 stopped at step 6 resumes bit-exactly: $out" || fail "tp 2 resume: $out"
# PP 2 islands with int8 outer gradients, at a shape where the two ends' wte falls in
# different quantisation blocks: the tied wte stays one tensor (the weight check
# compares the ends) and a stopped run resumes bit-exactly
O="--context 33 --vocab 2048 --islands 2 --sync-every 2 --pp 2 --microbatches 2 --outer-dtype int8 --steps 8"
$MPIRUN -np 4 $ATOLL train $M $O --out "$TMP/tiewhole" >/dev/null 2>"$TMP/err" || fail "int8 x pp 2: $(tail -1 "$TMP/err")"
$MPIRUN -np 4 $ATOLL train $M $O --stop-after 3 --out "$TMP/tiecut" >/dev/null 2>"$TMP/err" || fail "int8 x pp 2 stop: $(tail -1 "$TMP/err")"
$MPIRUN -np 4 $ATOLL train --resume "$TMP/tiecut" >/dev/null 2>"$TMP/err" || fail "int8 x pp 2 resume: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/tiecut" "$TMP/tiewhole" 0) && pass "int8 DiLoCo x PP 2 (tied wte at both ends) resumes bit-exactly: $out" || fail "int8 x pp 2 resume: $out"
# fragments are cut on the whole model: streaming DiLoCo syncs the same layers at the
# same steps at every layout (PP 2 islands == single-rank islands, 1e-5)
F="--islands 2 --sync-every 6 --fragments 3 --steps 12"
$MPIRUN -np 2 $ATOLL train $M $F --accum 2 --out "$TMP/frnone" >/dev/null 2>&1 || fail "fragments, no model parallel"
$MPIRUN -np 4 $ATOLL train $M $F --pp 2 --microbatches 2 --out "$TMP/frpp" >/dev/null 2>"$TMP/err" || fail "fragments x pp 2: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/frpp" "$TMP/frnone" 1e-5) && pass "streaming DiLoCo x PP 2 == without PP (same fragments): $out" || fail "fragments x pp 2: $out"

# 3. inter-island bytes per sync: fp32 exactly 2 (K-1)/K x 4 P per full sync; the
#    other dtypes in proportion to their encodings (quant.h); P fragments cut each
#    sync about P-fold (the peak cross-island traffic)
for q in fp32 bf16 int8 fp4; do
  $MPIRUN -np 2 $ATOLL train $M --islands 2 --sync-every 2 --steps 8 --outer-dtype $q --out "$TMP/q_$q" >/dev/null 2>&1 || fail "dtype $q"
done
$MPIRUN -np 2 $ATOLL train $M --islands 2 --sync-every 2 --steps 8 --fragments 2 --out "$TMP/frag2" >/dev/null 2>&1 || fail "fragments 2"
$PY - "$TMP" <<'PYEOF' && pass "inter-island bytes: $(cat "$TMP/verdict")" || fail "bytes: $(cat "$TMP/verdict")"
import json, sys
t = sys.argv[1]
S = {q: json.load(open(f"{t}/q_{q}/summary.json")) for q in ("fp32", "bf16", "int8", "fp4")}
P, K = S["fp32"]["params"], 2
per_sync = {q: S[q]["inter_island_bytes"][0] / S[q]["outer_syncs"] for q in S}
fp32 = 2 * (K - 1) / K * P * 4
ratio = {"bf16": 2 / 4, "int8": (1 + 4 / 32) / 4, "fp4": (0.5 + 4 / 32) / 4}
ok = per_sync["fp32"] == fp32 and all(abs(per_sync[q] / per_sync["fp32"] / ratio[q] - 1) < 0.01 for q in ratio)
f2 = json.load(open(f"{t}/frag2/summary.json"))
f2_sync = f2["inter_island_bytes"][0] / f2["outer_syncs"]
ok = ok and abs(f2_sync / per_sync["fp32"] - 0.5) < 0.15
msg = ", ".join(f"{q} {per_sync[q]:.0f} B/sync" for q in per_sync) + f" (fp32 formula {fp32:.0f}); 2 fragments: {f2_sync:.0f} B/sync (fragments are whole layers, so about half)"
open(f"{t}/verdict", "w").write(msg)
sys.exit(0 if ok else 1)
PYEOF

# 3b. the islands' time and contributions in summary.json and metrics.jsonl: without
#     overlap every outer step is applied at once (staleness 0), with --overlap 1 a
#     step later (the run's last sync at once); every inner step reached a sync, so
#     the tokens contributed are the island's tokens per step x steps
$PY - "$TMP" <<'PYEOF' && pass "timeline: $(cat "$TMP/verdict")" || fail "timeline: $(cat "$TMP/verdict")"
import json, sys
t = sys.argv[1]
bad = []
# (run, tokens per island per step, steps, merges, largest staleness)
for run, tok, steps, merges, stale in (("q_fp32", 2 * 32, 8, 4, 0), ("whole", 2 * 2 * 32, 16, 9, 1)):
    s = json.load(open(f"{t}/{run}/summary.json"))
    got = (s["tokens_contributed_per_island"], s["merges"], s["outer_syncs"], s["staleness_steps_max"])
    if got != (tok * steps, merges, merges, stale):
        bad.append(f"{run}: tokens, merges, syncs, staleness {got}, expected {(tok * steps, merges, merges, stale)}")
    u, g = s["compute_utilisation"], s["longest_step_gap_seconds"]
    if not (0 < u <= 1 and u == min(s["compute_utilisation_per_rank"]) and g >= 0 and 1 < s["longest_step_gap_before_step"] <= steps):
        bad.append(f"{run}: utilisation {u}, longest gap {g} before step {s['longest_step_gap_before_step']}")
    lines = [json.loads(x) for x in open(f"{t}/{run}/metrics.jsonl")]
    if not all(x["compute_seconds"] > 0 and x["gap_seconds"] >= 0 for x in lines) or lines[0]["gap_seconds"] != 0:
        bad.append(f"{run}: metrics.jsonl compute_seconds / gap_seconds")
w = json.load(open(f"{t}/whole/summary.json"))
msg = "; ".join(bad) or (f"overlap 1: {w['merges']} merges, staleness mean {w['staleness_steps_mean']:.2f} max 1, "
                         f"{w['tokens_contributed_per_island']} tokens per island, compute utilisation {w['compute_utilisation']:.2f}")
open(f"{t}/verdict", "w").write(msg)
sys.exit(1 if bad else 0)
PYEOF

# 4. an island whose global weights drift is caught at the next outer sync
ATOLL_FAULT_DESYNC_ISLAND=1 $MPIRUN -np 2 $ATOLL train $M --islands 2 --sync-every 2 --steps 8 --out "$TMP/drift" >/dev/null 2>"$TMP/drift.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "island 1 holds different global weights" "$TMP/drift.err"; then
  pass "drifted island detected: $(grep -m1 'different global' "$TMP/drift.err")"
else
  fail "drift: status $rc: $(cat "$TMP/drift.err")"
fi
expect_error "islands not dividing the ranks" "--islands" $MPIRUN -np 4 $ATOLL train $M --islands 3 --out "$TMP/x"
# non-i.i.d. data: island k takes source files k, k+K, ... (the test corpus has 2 files)
$MPIRUN -np 2 $ATOLL train $M --islands 2 --island-data files --sync-every 2 --steps 4 --out "$TMP/files" >/dev/null 2>"$TMP/err" \
  && pass "--island-data files with 2 islands on 2 files" || fail "--island-data files: $(tail -1 "$TMP/err")"
expect_error "more islands than files" "source files" $MPIRUN -np 4 $ATOLL train $M --islands 4 --island-data files --out "$TMP/y"
finish

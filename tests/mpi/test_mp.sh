#!/bin/sh
# Tensor and pipeline parallelism end to end: every layout (TP, PP with both schedules,
# TP x PP, DP x TP with ZeRO-1, DP x PP, sequence parallel, interleaved) equals one
# process accumulating the same micro-batches, GPipe and 1F1B leave identical weights,
# a checkpoint saved at TP 2 x PP 2 resumes at DP 4 with ZeRO-3, the bytes of each mesh
# axis match the collective formulas and atoll plan's, the pipeline's logical bubble
# equals (P-1)/(V M) exactly, and bad layouts fail with one line.
# usage: test_mp.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
M="--layers 4 --heads 4 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --steps 20 --warmup 2 --lr 3e-3 --eval-every 10 --eval-batches 3 --save-every 0"

# 1. every layout with 4 micro-batches per step in total == one process with accum 4 (1e-5)
$ATOLL train $M --accum 4 --out "$TMP/single4" >/dev/null 2>"$TMP/err" || fail "single accum 4: $(tail -1 "$TMP/err")"
same_as_single() { # NAME NP ARGS...
  name=$1; np=$2; shift 2
  if ! $MPIRUN -np "$np" $ATOLL train $M "$@" --out "$TMP/$name" </dev/null >/dev/null 2>"$TMP/err"; then
    fail "$name ($*, np $np): $(tail -1 "$TMP/err")"; return
  fi
  out=$($CLOSE "$TMP/$name" "$TMP/single4" 1e-5) && pass "$name ($*, np $np) == single process accum 4: $out" \
    || fail "$name ($*, np $np) vs single process: $out"
}
same_as_single tp2    2 --tp 2 --microbatches 4
same_as_single tp4    4 --tp 4 --microbatches 4
same_as_single pp2g   2 --pp 2 --microbatches 4 --schedule gpipe
same_as_single pp2f   2 --pp 2 --microbatches 4 --schedule 1f1b
same_as_single pp4g   4 --pp 4 --microbatches 4 --schedule gpipe
same_as_single pp4f   4 --pp 4 --microbatches 4 --schedule 1f1b
same_as_single tp2pp2 4 --tp 2 --pp 2 --microbatches 4
same_as_single dp2tp2 4 --tp 2 --accum 2 --shard 1
same_as_single dp2pp2 4 --pp 2 --microbatches 2
same_as_single tp2sp  2 --tp 2 --sequence-parallel 1 --microbatches 4
same_as_single tp2pp2sp 4 --tp 2 --pp 2 --sequence-parallel 1 --microbatches 4
same_as_single dp2tp2spz2 4 --tp 2 --sequence-parallel 1 --accum 2 --shard 2
same_as_single pp2v2  2 --pp 2 --virtual-stages 2 --microbatches 4

# 2. GPipe and 1F1B add each micro-batch's gradient in the same order: identical weights
for p in 2 4; do
  ha=$(sed -n 's/.*"weights_hash":[[:space:]]*"\([0-9a-f]*\)".*/\1/p' "$TMP/pp${p}g/summary.json")
  hb=$(sed -n 's/.*"weights_hash":[[:space:]]*"\([0-9a-f]*\)".*/\1/p' "$TMP/pp${p}f/summary.json")
  [ -n "$ha" ] && [ "$ha" = "$hb" ] && pass "pp $p: gpipe and 1f1b weights hash identical ($ha)" \
    || fail "pp $p: gpipe weights hash '$ha' != 1f1b '$hb'"
done

# 3. layout, stage parameters and bytes per step per rank on each axis against the formulas
$PY - "$TMP" <<'PYEOF' && pass "layouts and bytes by axis:$(cat "$TMP/verdict")" || fail "layouts and bytes by axis:$(cat "$TMP/verdict")"
import json, sys
t = sys.argv[1]
# run: (pp, dp, tp, microbatches per replica, schedule)
runs = {"tp2": (1, 1, 2, 4, "none"), "tp4": (1, 1, 4, 4, "none"),
        "pp2g": (2, 1, 1, 4, "gpipe"), "pp4f": (4, 1, 1, 4, "1f1b"),
        "tp2pp2": (2, 1, 2, 4, "1f1b"), "dp2tp2": (1, 2, 2, 2, "none"), "dp2pp2": (2, 2, 1, 2, "1f1b")}
lines, ok = [], True
for name, (P, DP, T, Mb, sched) in runs.items():
    s = json.load(open(f"{t}/{name}/summary.json"))
    c, lay, ax = s["config"], s["layout"], s["bytes_per_step_per_rank_by_axis"]
    L, C, V, ctx = c["layers"], c["dim"], c["vocab"], c["context"]
    N = c["batch"] * (c["seq"] or ctx)          # tokens of one micro-batch
    D = 4 * N * C                               # bytes of one activation
    ring = 2 * (T - 1) / T
    got_layout = (lay["pp"], lay["dp"], lay["tp"], lay["microbatches"], lay["schedule"])
    if got_layout != (P, DP, T, Mb, sched) or s["world_size"] != P * DP * T:
        ok = False; lines.append(f"{name}: layout {got_layout} world {s['world_size']}, want {(P, DP, T, Mb, sched)}")
        continue
    if ("pipeline" in s) != (P > 1):
        ok = False; lines.append(f"{name}: 'pipeline' section {'present' if 'pipeline' in s else 'missing'} at pp {P}")
    block = 4 * C + (3 * C * C + 3 * C) // T + C * C // T + C + (4 * C * C + 4 * C) // T + 4 * C * C // T + C
    worst = {"params": 0.0, "data": 0.0, "tensor": 0.0, "pipeline": 0.0, "embedding_tie": 0.0, "sum": 0.0}
    for r in range(s["world_size"]):
        st = r // (T * DP)                      # rank order: island, pp, dp, tp (tp innermost)
        first, last, held = st == 0, st == P - 1, L // P
        want = {"params": held * block + (V * C // T if first or last else 0) + (ctx * C if first else 0) + (2 * C if last else 0)}
        want["tensor"] = Mb * ((4 * held + first + last) * ring * D + (8 * N if last else 0)) if T > 1 else 0
        want["pipeline"] = Mb * D * ((not last) + (not first)) if P > 1 else 0
        want["embedding_tie"] = 2 * (1 / 2) * 4 * (V // T) * C if P > 1 and (first or last) else 0
        want["data"] = 2 * (DP - 1) / DP * 4 * lay["stage_parameters_per_rank"][r] if DP > 1 else 0
        got = {"params": lay["stage_parameters_per_rank"][r], **{k: ax[k][r] for k in ("data", "tensor", "pipeline", "embedding_tie")}}
        for k, w in want.items():
            tol = 0.01 if k == "data" else 1e-3
            e = abs(got[k] - w) / w if w else (0.0 if got[k] == 0 else float("inf"))
            worst[k] = max(worst[k], e)
            if e > tol:
                ok = False; lines.append(f"{name} rank {r} (stage {st}) {k}: {got[k]:.0f}, formula {w:.0f}")
        # every byte sent belongs to one axis
        tot = s["bytes_sent_per_step_per_rank"][r]
        e = abs(sum(ax[k][r] for k in ax) - tot) / tot if tot else 0.0
        worst["sum"] = max(worst["sum"], e)
        if e > 1e-3:
            ok = False; lines.append(f"{name} rank {r}: axes sum {sum(ax[k][r] for k in ax):.0f} != bytes sent {tot:.0f}")
    show = lambda k: "/".join(f"{v:.0f}" for v in (lay["stage_parameters_per_rank"] if k == "params" else ax[k]))
    lines.append(f"{name}: params {show('params')}, tensor {show('tensor')}, pipeline {show('pipeline')}, "
                 f"tie {show('embedding_tie')}, data {show('data')} B/step/rank; worst rel diff to formula "
                 + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
open(f"{t}/verdict", "w").write("".join("\n    " + x for x in lines))
sys.exit(0 if ok else 1)
PYEOF

# 3b. the planner's formulas (atoll plan --calibrate plans the run's own layout, with
# atoll's choice of keeping the gathered inputs): tensor-axis bytes of the stage it
# models (the slowest: here the last, which holds the LM head) equal the collectives
# measured there, less the cross-entropy's 8 bytes per token; pipeline bytes equal
for run in tp2sp tp2pp2sp; do
  $ATOLL plan --calibrate "$TMP/$run/summary.json" --json >"$TMP/plan.json" 2>"$TMP/err" || fail "plan --calibrate $run: $(tail -1 "$TMP/err")"
  $PY - "$TMP" "$run" <<'PYEOF' && pass "$run bytes == atoll plan's: $(cat "$TMP/verdict")" || fail "$run bytes vs atoll plan: $(cat "$TMP/verdict")"
import json, sys
t, run = sys.argv[1], sys.argv[2]
s = json.load(open(f"{t}/{run}/summary.json")); plan = json.load(open(f"{t}/plan.json"))
by = plan["layout"]["bytes_per_gpu_per_step"]
c, lay, ax = s["config"], s["layout"], s["bytes_per_step_per_rank_by_axis"]
N = c["batch"] * (c["seq"] or c["context"])
last = [r // (lay["tp"] * lay["dp"]) == lay["pp"] - 1 for r in range(s["world_size"])]
tensor = max(ax["tensor"][r] - (8 * N * lay["microbatches"] if last[r] else 0) for r in range(s["world_size"]))
pipe = max(ax["pipeline"])
ok = abs(tensor - by["tp"]["bytes"]) <= 1e-6 * tensor and abs(pipe - by["pp"]["bytes"]) <= 1e-6 * max(pipe, 1)
open(f"{t}/verdict", "w").write(f"tensor {tensor:.0f} measured vs {by['tp']['bytes']:.0f} planned, pipeline {pipe:.0f} vs {by['pp']['bytes']:.0f}")
sys.exit(0 if ok else 1)
PYEOF
done

# 4. save at TP 2 x PP 2, resume at DP 4 with ZeRO-3 (4 replicas x 1 micro-batch: the
# same 8 sequences per step): continues like the single process
$MPIRUN -np 4 $ATOLL train $M --tp 2 --pp 2 --microbatches 4 --stop-after 10 --out "$TMP/moved" >/dev/null 2>"$TMP/err" \
  || fail "TP 2 x PP 2 to step 10: $(tail -1 "$TMP/err")"
expect_error "resume at another layout that would change the global batch" "--global-batch 8" \
  $MPIRUN -np 4 $ATOLL train --resume "$TMP/moved" --tp 1 --pp 1 --shard 3
$MPIRUN -np 4 $ATOLL train --resume "$TMP/moved" --tp 1 --pp 1 --microbatches 1 --shard 3 >/dev/null 2>"$TMP/err" \
  || fail "resume at DP 4 ZeRO-3: $(tail -1 "$TMP/err")"
out=$($CLOSE "$TMP/moved" "$TMP/single4" 1e-5 11) && pass "TP 2 x PP 2 -> DP 4 ZeRO-3 resume matches the single process: $out" \
  || fail "TP 2 x PP 2 -> DP 4 ZeRO-3 resume: $out"

# 5. pipeline bubble, exactly: ATOLL_TEST_STAGE_UNITS=1,2 runs the pipeline's logical
# clock (src/parallel/pipeline.c): a forward costs 1 unit, a backward 2, every message
# carries its sender's clock. The stages start each step together and the pipeline's
# time is the last finish, so every stage's logical bubble must be (P-1)/(V M) to 1e-9
# for both schedules and interleaved. No sleeps, and no machine load can move it; the
# wall-clock bubble (bubble_per_rank) is only printed: a timing is never a test.
B="--layers 4 --heads 4 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --steps 3 --warmup 1 --lr 3e-3 --eval-every 0 --eval-batches 1 --save-every 0"
for lay in "2 2 4 gpipe 1" "2 2 4 1f1b 1" "2 2 8 1f1b 1" "4 4 4 1f1b 1" "2 2 4 1f1b 2"; do
  set -- $lay; np=$1; P=$2; mb=$3; sch=$4; V=$5
  rm -rf "$TMP/bubble"
  if ! ATOLL_TEST_STAGE_UNITS=1,2 $MPIRUN -np "$np" $ATOLL train $B --pp "$P" --microbatches "$mb" --schedule "$sch" --virtual-stages "$V" --out "$TMP/bubble" >/dev/null 2>"$TMP/err"; then
    fail "bubble run pp $P M $mb $sch: $(tail -1 "$TMP/err")"; continue
  fi
  $PY - "$TMP" <<'PYEOF' && pass "bubble pp $P M $mb V $V $sch: $(cat "$TMP/verdict")" || fail "bubble pp $P M $mb V $V $sch: $(cat "$TMP/verdict")"
import json, sys
t = sys.argv[1]
s = json.load(open(f"{t}/bubble/summary.json"))
p, lay = s["pipeline"], s["layout"]
theory = (lay["pp"] - 1) / (lay["virtual_stages"] * lay["microbatches"])
ranks = p.get("bubble_logical_per_rank", [])
ok = (abs(p["bubble_theory"] - theory) < 1e-12 and len(ranks) == s["world_size"]
      and all(abs(x - theory) <= 1e-9 for x in ranks + [p.get("bubble_logical", -1)]))
open(f"{t}/verdict", "w").write(f"logical {' '.join(f'{x:.12g}' for x in ranks) or 'missing'} per rank vs theory (P-1)/(V M) = "
                                f"{theory:.12g}; wall clock (not asserted) {' '.join(f'{x:.3f}' for x in p['bubble_per_rank'])}")
sys.exit(0 if ok else 1)
PYEOF
done

# 5b. the hook's bad values: one line naming the variable
for v in "1" "0,2" "1,2,3" "a,b" "1,99999999999999999999"; do
  expect_error "ATOLL_TEST_STAGE_UNITS=$v" "ATOLL_TEST_STAGE_UNITS" env ATOLL_TEST_STAGE_UNITS=$v $ATOLL train $M --out "$TMP/eu"
done

# 6. bad layouts: one line on stderr, non-zero exit
expect_error "--tp not dividing the heads" "--tp 3" $MPIRUN -np 3 $ATOLL train $M --tp 3 --out "$TMP/e1"
expect_error "--tp not dividing the ranks" "divide the 3 ranks" $MPIRUN -np 3 $ATOLL train $M --tp 2 --out "$TMP/e2"
expect_error "more stages than layers" "--pp 8" $MPIRUN -np 2 $ATOLL train $M --pp 8 --out "$TMP/e3"
expect_error "unknown schedule" "--schedule" $MPIRUN -np 2 $ATOLL train $M --pp 2 --schedule foo --out "$TMP/e4"
expect_error "--microbatches against --accum" "--microbatches 3" $MPIRUN -np 2 $ATOLL train $M --tp 2 --microbatches 3 --accum 2 --out "$TMP/e5"
expect_error "tensor parallel in one process" "mpirun" $ATOLL train $M --tp 2 --out "$TMP/e6"
expect_error "pipeline parallel in one process" "mpirun" $ATOLL train $M --pp 2 --out "$TMP/e7"
expect_error "virtual stages without a pipeline" "--virtual-stages" $MPIRUN -np 2 $ATOLL train $M --tp 2 --virtual-stages 2 --out "$TMP/e8"
expect_error "interleaving with micro-batches not a multiple of P" "--virtual-stages" $MPIRUN -np 2 $ATOLL train $M --pp 2 --virtual-stages 2 --microbatches 3 --out "$TMP/e9"
expect_error "sequence parallel without tensor parallel" "--sequence-parallel" $MPIRUN -np 2 $ATOLL train $M --pp 2 --sequence-parallel 1 --out "$TMP/e10"
finish

#!/bin/sh
# --eval-data NAME=DIR (src/train/eval_sets.h): more validation sets beside the run's
# own. A set that is the run's own data gives exactly its val_loss (the same windows
# rule); another corpus gives its own loss; both are in metrics.jsonl at every
# evaluation, in the progress line and in summary.json's final_val_losses; the flag
# may be repeated or given as a list; a stopped run resumes with its sets; DiLoCo
# islands evaluate them on the global model like val_loss; bad values get one line.
# usage: test_eval_data.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
small_data
"$ATOLL" prepare --text /usr/share/games/fortunes/linux --out "$TMP/ood" >/dev/null 2>&1 || { fail "prepare ood"; finish; }
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 3 --eval-batches 2 --save-every 3 --steps 9 --log-every 1"

# check RUN EVALS: metrics.jsonl has val_loss_same == val_loss and val_loss_ood at every
# evaluation (EVALS of them), and summary.json holds the last ones
check() {
  $PY - "$1" "$2" <<'PYEOF'
import json, sys
run, evals = sys.argv[1], int(sys.argv[2])
lines = [json.loads(x) for x in open(f"{run}/metrics.jsonl")]
ev = [x for x in lines if "val_loss" in x]
bad = []
if len(ev) != evals: bad.append(f"{len(ev)} evaluations, expected {evals}")
for x in ev:
    if x.get("val_loss_same") != x["val_loss"]: bad.append(f"step {x['step']}: same {x.get('val_loss_same')} != val_loss {x['val_loss']}")
    if not isinstance(x.get("val_loss_ood"), float) or x["val_loss_ood"] == x["val_loss"]: bad.append(f"step {x['step']}: ood {x.get('val_loss_ood')}")
s = json.load(open(f"{run}/summary.json"))
f = s.get("final_val_losses", {})
if set(f) != {"ood", "same"} or abs(f["same"] - s["final_val_loss"]) > 1e-6 or abs(f["ood"] - ev[-1]["val_loss_ood"]) > 1e-6:
    bad.append(f"summary final_val_losses {f}")
print("; ".join(bad) or f"{len(ev)} evaluations; final ood {f['ood']:.4f}, same {f['same']:.4f} == val_loss")
sys.exit(1 if bad else 0)
PYEOF
}

$ATOLL train $M --eval-data ood=$TMP/ood --eval-data same=$TMP/data --out "$TMP/r" >/dev/null 2>"$TMP/r.err" || fail "run: $(tail -1 "$TMP/r.err")"
out=$(check "$TMP/r" 3) && pass "two sets by the flag twice: $out" || fail "two sets: $out"
grep -q "| ood [0-9.]* | same [0-9.]*" "$TMP/r.err" && pass "the progress line shows them" || fail "progress line: $(grep 'val_loss' "$TMP/r.err" | tail -1)"
# a list in one flag; stopped at step 4 and resumed: the sets come from the checkpoint
$ATOLL train $M --eval-data "ood=$TMP/ood,same=$TMP/data" --stop-after 4 --out "$TMP/c" >/dev/null 2>"$TMP/c.err" || fail "stop: $(tail -1 "$TMP/c.err")"
$ATOLL train --resume "$TMP/c" >/dev/null 2>"$TMP/c.err" || fail "resume: $(tail -1 "$TMP/c.err")"
out=$(check "$TMP/c" 3) && pass "a list in one flag, stopped and resumed: $out" || fail "resumed: $out"
# islands: the sets are evaluated on the global model, like val_loss
$MPIRUN -np 2 $ATOLL train $M --islands 2 --sync-every 2 --eval-data ood=$TMP/ood --eval-data same=$TMP/data --out "$TMP/k" >/dev/null 2>"$TMP/k.err" \
    || fail "islands: $(tail -1 "$TMP/k.err")"
out=$(check "$TMP/k" 3) && pass "2 islands: $out" || fail "islands: $out"

expect_error "no NAME=" "expected NAME=DIR" $ATOLL train $M --eval-data "$TMP/ood" --out "$TMP/x"
expect_error "a bad name" "the name must be" $ATOLL train $M --eval-data "a b=$TMP/ood" --out "$TMP/x"
expect_error "a name twice" "the name ood is given twice" $ATOLL train $M --eval-data "ood=$TMP/ood" --eval-data "ood=$TMP/data" --out "$TMP/x"
expect_error "a missing directory" "--eval-data ood=$TMP/none: no such directory" $ATOLL train $M --eval-data "ood=$TMP/none" --out "$TMP/x"
mkdir -p "$TMP/empty"
expect_error "a directory not prepared" "no val_000.bin" $ATOLL train $M --eval-data "ood=$TMP/empty" --out "$TMP/x"
finish

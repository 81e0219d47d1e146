#!/bin/sh
# A short training run on the default corpus (Debian's fortunes) lowers the validation
# loss well below ln(256) = 5.55 (a model that learned nothing), and the run's outputs
# (summary.json, metrics.jsonl, sample) are complete.
# usage: test_train_corpus.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
$ATOLL prepare --text /usr/share/games/fortunes --out "$TMP/fortunes" >/dev/null 2>&1 || { fail "prepare the default corpus"; finish; }
$ATOLL train --data "$TMP/fortunes" --out "$TMP/run" --layers 2 --heads 4 --dim 128 --context 64 \
  --batch 16 --steps 200 --warmup 20 --lr 3e-3 --eval-every 100 --eval-batches 8 >/dev/null 2>"$TMP/train.err" \
  || { fail "training: $(tail -1 "$TMP/train.err")"; finish; }
$PY - "$TMP/run" <<'PYEOF' && pass "summary.json: $(cat "$TMP/verdict")" || fail "summary.json: $(cat "$TMP/verdict")"
import json, math, sys, os
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
m = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
need = ["steps", "params", "final_train_loss", "final_val_loss", "tokens_per_second",
        "model_flops_per_second", "peak_rss_bytes"]
missing = [k for k in need if k not in s]
vals = [x["val_loss"] for x in m if "val_loss" in x]
ok = (not missing and s["steps"] == 200 and len(m) == 200 and s["final_val_loss"] < 2.9
      and s["final_val_loss"] < math.log(256) - 2.5 and len(vals) == 2 and vals[1] < vals[0]
      and all(k in m[0] for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s")))
verdict = f"val_loss {s.get('final_val_loss')} (ln 256 = {math.log(256):.3f}), val curve {vals}, missing {missing}"
open(os.path.join(os.path.dirname(run), "verdict"), "w").write(verdict)
sys.exit(0 if ok else 1)
PYEOF
out=$($ATOLL sample --ckpt "$TMP/run" --prompt "The " --tokens 80 --seed 3 2>&1)
n=$(printf '%s' "$out" | wc -c)
[ "$n" -ge 80 ] && pass "sample: $(printf '%s' "$out" | tr '\n' ' ' | head -c 100)" || fail "sample printed $n bytes: $out"
finish

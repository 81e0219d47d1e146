"""usage: same_run.py RUN_A RUN_B: exit 0 if the final checkpoints hold bit-identical global
weights (every tensor of model.safetensors) and metrics.jsonl the same validation losses."""
import glob, json, struct, sys
def weights(run):
    ck = sorted(glob.glob(f"{run}/checkpoints/step_*"))[-1]
    blob = open(f"{ck}/model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    h = json.loads(blob[8:8 + n]); h.pop("__metadata__", None)
    return {k: blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
def vals(run):
    return [(o["step"], o["val_loss"]) for o in map(json.loads, open(f"{run}/metrics.jsonl")) if "val_loss" in o]
a, b = sys.argv[1], sys.argv[2]
wa, wb = weights(a), weights(b)
if not wb: sys.exit(f"no tensors in {b}'s final checkpoint")
bad = [k for k in wb if wa.get(k) != wb[k]] + [k for k in wa if k not in wb]
if bad: sys.exit(f"weights differ in {len(bad)} tensors, e.g. {bad[:3]}")
if vals(a) != vals(b): sys.exit(f"validation losses differ: {vals(a)} vs {vals(b)}")
print(f"{len(wb)} tensors bit-identical, {len(vals(b))} validation losses equal")

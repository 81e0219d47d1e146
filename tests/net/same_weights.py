"""usage: same_weights.py RUN_A RUN_B: exit 0 if the final checkpoints' model.safetensors
hold bit-identical tensors (the global weights), ignoring the header's metadata."""
import glob, json, struct, sys

def weights(run):
    ck = sorted(glob.glob(f"{run}/checkpoints/step_*"))[-1]
    blob = open(f"{ck}/model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    h = json.loads(blob[8:8 + n]); h.pop("__metadata__", None)
    return {k: blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}

a, b = weights(sys.argv[1]), weights(sys.argv[2])
if not b:
    sys.exit(f"no tensors in {sys.argv[2]}'s final checkpoint")
bad = [k for k in b if a.get(k) != b[k]] + [k for k in a if k not in b]
if bad:
    sys.exit(f"weights differ in {len(bad)} tensors, e.g. {bad[:3]}")
print(f"{len(b)} tensors bit-identical")

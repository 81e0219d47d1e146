"""usage: weighted_mean.py RUN_0 RUN_1 T_0 T_1: checks the token-weighted outer mean
(docs/islands.md, "Token-weighted mean") on two islands run with --outer-optimizer sgd
--outer-lr 1 --outer-momentum 0 --overlap 1 --merge-alpha 1: each island keeps its own
weights l_k (island_K.safetensors) and the last outer step makes the global weights
g = (T_0 l_0 + T_1 l_1) / (T_0 + T_1), whatever g was before. Exit 0 when g is that
mean to float rounding and clearly not the plain mean (l_0 + l_1) / 2."""
import glob, sys

import numpy as np
from st_tensors import tensors


def last(run):
    return sorted(glob.glob(f"{run}/checkpoints/step_*"))[-1]


run0, run1, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
g = tensors(f"{last(run0)}/model.safetensors")
l0 = tensors(f"{last(run0)}/island_0.safetensors", "weights.")
l1 = tensors(f"{last(run1)}/island_1.safetensors", "weights.")
if not g or set(g) != set(l0) or set(g) != set(l1):
    sys.exit("the checkpoints do not hold the same tensors")
w0, w1 = t0 / (t0 + t1), t1 / (t0 + t1)
weighted = max(float(np.max(np.abs(g[k] - (w0 * l0[k] + w1 * l1[k])))) for k in g)
plain = max(float(np.max(np.abs(g[k] - 0.5 * (l0[k] + l1[k])))) for k in g)
apart = max(float(np.max(np.abs(l0[k] - l1[k]))) for k in g)
print(f"weights {w0:.3f}/{w1:.3f}: global - weighted mean {weighted:.2e}, - plain mean {plain:.2e} (islands {apart:.2e} apart)")
sys.exit(0 if weighted < 1e-6 and plain > 100 * weighted and plain > 1e-5 else 1)

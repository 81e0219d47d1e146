"""usage: late_fold.py RUN_0 RUN_1 RUN_2 S T: checks the staleness-weighted fold of a
late contribution end to end (docs/islands.md, "Late contributions") on three islands run
with --outer-optimizer sgd --outer-lr 1 --outer-momentum 0 --overlap 1 --merge-alpha 1
--save-every 1, island 2 late before and folding its kept contribution into the
exchange of step S; T the tokens of each island's fresh contribution. From the
checkpoints: g_old, the global weights before that exchange (model.safetensors of step
S - 1), g_late and w, island 2's kept outer gradient and its weight (late.safetensors,
state.json island_late_tokens of step S - 1), l_k, each island's own weights at step S
(island_K.safetensors). Island 2 sends D_2 = (T (g_old - l_2) + w g_late) / (T + w),
weighing T + round(w), the others D_k = g_old - l_k weighing T, and the exchange makes
g_new = g_old - sum_k T_k D_k / sum_k T_k (model.safetensors of step S). Exit 0 when g_new
is that to float rounding and clearly not what another fold weight gives (w dropped,
w not discounted for staleness: w (1 + s), or twice w)."""
import glob, json, sys

import numpy as np
from st_tensors import tensors


def ck(run, step):
    return f"{run}/checkpoints/step_{step:08d}"


runs, S, T = sys.argv[1:4], int(sys.argv[4]), float(sys.argv[5])
g_old = tensors(f"{ck(runs[0], S - 1)}/model.safetensors")
g_new = tensors(f"{ck(runs[0], S)}/model.safetensors")
g_late = tensors(f"{ck(runs[2], S - 1)}/late.safetensors", "late_gradient.")
state = json.load(open(f"{ck(runs[2], S - 1)}/state.json"))
w = float(state["island_late_tokens"][0])
own = [tensors(f"{ck(runs[k], S)}/island_{k}.safetensors", "weights.") for k in range(3)]


def predicted(wf):
    tot = 3 * T + round(wf)
    out = {}
    for name in g_old:
        d2 = (T * (g_old[name] - own[2][name]) + wf * g_late[name]) / (T + wf)
        mean = sum(T * (g_old[name] - own[k][name]) for k in range(2)) + (T + round(wf)) * d2
        out[name] = g_old[name] - mean / tot
    return out


def off(pred):
    return max(float(np.max(np.abs(g_new[k] - pred[k]))) for k in g_new)


fold = off(predicted(w))
# the staleness: w = t_late / (1 + s), so the undiscounted weight is w (1 + s) with
# s >= 1; 2 w stands for it
others = {"no fold": off(predicted(0.0)), "2 w": off(predicted(2 * w))}
print(f"w {w:.1f} tokens: global - fold formula {fold:.2e}; with " + ", ".join(f"{k} {v:.2e}" for k, v in others.items()))
sys.exit(0 if w > 0 and fold < 1e-6 and all(v > 100 * fold and v > 1e-6 for v in others.values()) else 1)

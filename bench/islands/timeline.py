"""Islands as lanes over wall time, from each island's metrics.jsonl (its "time" at each
step's end, "compute_seconds" and "gap_seconds"): computing (the inner steps), between
steps (outer syncs and their waits, evaluation, checkpoints), and nothing where an island
was not running (dead, or not yet started). One panel per run.
usage: timeline.py OUT.png TITLE RUN_DIR [TITLE RUN_DIR ...]  (RUN_DIR holds n0, n1, ...)"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def lanes(run):
    islands = sorted(d for d in os.listdir(run) if d.startswith("n") and d[1:].isdigit())
    out = []
    for d in islands:
        lines = [json.loads(x) for x in open(os.path.join(run, d, "metrics.jsonl"))]
        spans = []  # (start, length, kind)
        for x in lines:
            end = x["time"]
            spans.append((end - x["compute_seconds"], x["compute_seconds"], "compute"))
            if x.get("gap_seconds", 0) > 0:
                spans.append((end - x["compute_seconds"] - x["gap_seconds"], x["gap_seconds"], "gap"))
        out.append((d, spans))
    return out


pairs = list(zip(sys.argv[2::2], sys.argv[3::2]))
fig, axes = plt.subplots(len(pairs), 1, figsize=(11, 1.2 + 0.6 * 4 * len(pairs)), squeeze=False)
for ax, (title, run) in zip(axes[:, 0], pairs):
    t0 = min(s[0] for _, spans in lanes(run) for s in spans)  # each run from its own start
    for y, (name, spans) in enumerate(lanes(run)):
        for kind, color in (("compute", "tab:green"), ("gap", "tab:orange")):
            ax.broken_barh([(s - t0, n) for s, n, k in spans if k == kind], (y - 0.35, 0.7), color=color,
                           label=None if y else {"compute": "inner steps", "gap": "between steps (sync, wait)"}[kind])
    ax.set_yticks(range(len(lanes(run))))
    ax.set_yticklabels([f"island {n[1:]}" for n, _ in lanes(run)])
    ax.set_title(title)
    ax.set_xlabel("seconds")
    ax.legend(loc="upper right", fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=90)
print(f"wrote {sys.argv[1]}")

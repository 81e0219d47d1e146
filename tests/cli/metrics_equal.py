#!/usr/bin/python3
"""usage: metrics_equal.py A/metrics.jsonl B/metrics.jsonl: exit 0 if both hold the same
steps with bit-identical loss, grad_norm, lr and val_loss (timings may differ), and at
least one (two empty files are no evidence)."""
import json, sys

def load(path):
    return {o["step"]: o for o in map(json.loads, open(path))}

a, b = load(sys.argv[1]), load(sys.argv[2])
if not a:
    print(f"no steps in {sys.argv[1]}")
    sys.exit(1)
if sorted(a) != sorted(b):
    print(f"steps differ: {sorted(a)[:5]}... vs {sorted(b)[:5]}...")
    sys.exit(1)
for s in sorted(a):
    for k in ("loss", "grad_norm", "lr", "val_loss"):
        if a[s].get(k) != b[s].get(k):
            print(f"step {s}: {k} {a[s].get(k)} vs {b[s].get(k)}")
            sys.exit(1)
print(f"identical: {len(a)} steps")

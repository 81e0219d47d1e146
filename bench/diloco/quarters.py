#!/usr/bin/python3
"""Writes a manifest whose "sources" are N contiguous groups of the source files.

usage: quarters.py IN_MANIFEST OUT_MANIFEST N

atoll's --island-data files gives island k the sources k, k+K, ... of the manifest.
With N = K groups of consecutive files (cut where the running train_bytes passes
i/N of the total), island k trains on group k alone: over a path-sorted corpus that
is a split by topic. Everything else of the manifest (token counts, hashes) is kept,
so the token files it sits beside are the unchanged ones of IN_MANIFEST's folder.
"""
import json
import sys


def main():
    src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    m = json.load(open(src))
    files = m["sources"]
    total = sum(f["train_bytes"] for f in files)
    groups, acc = [[] for _ in range(n)], 0
    for f in files:
        g = min(n - 1, acc * n // total)
        groups[g].append(f)
        acc += f["train_bytes"]
    if any(not g for g in groups):
        sys.exit(f"quarters.py: {src}: {len(files)} source files do not make {n} non-empty groups")
    m["sources"] = [{
        "path": f"group {i} of {n}: {g[0]['path']} .. {g[-1]['path']} ({len(g)} files)",
        "bytes": sum(f["bytes"] for f in g),
        "train_bytes": sum(f["train_bytes"] for f in g),
        "val_bytes": sum(f["val_bytes"] for f in g),
    } for i, g in enumerate(groups)]
    with open(dst, "w") as f:
        json.dump(m, f, indent=1)
        f.write("\n")
    for s in m["sources"]:
        print(f"  {s['path']}: {s['train_bytes']} training tokens")


if __name__ == "__main__":
    main()

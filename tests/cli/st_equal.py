#!/usr/bin/python3
"""usage: st_equal.py A.safetensors B.safetensors: exit 0 if every tensor is bit-identical
(names, shapes and data; the JSON metadata may differ), and there is at least one."""
import json, struct, sys

def load(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    h = json.loads(blob[8:8 + n]); h.pop("__metadata__", None)
    data = blob[8 + n:]
    return {k: (v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}

a, b = load(sys.argv[1]), load(sys.argv[2])
if not a:
    print(f"no tensors in {sys.argv[1]}")
    sys.exit(1)
diff = [k for k in a if k not in b or a[k] != b[k]] + [k for k in b if k not in a]
if diff:
    print(f"differ: {len(diff)} tensors, first {diff[0]}")
    sys.exit(1)
print(f"identical: {len(a)} tensors")

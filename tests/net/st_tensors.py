"""The tensors of a safetensors file (F32) as float64 numpy arrays, for the islands'
arithmetic checks (late_fold.py, weighted_mean.py): tensors(path, prefix) maps each
name that starts with prefix, less the prefix, to its values."""
import json, struct

import numpy as np


def tensors(path, prefix=""):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    head = json.loads(blob[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for k, v in head.items():
        if k.startswith(prefix):
            a, b = v["data_offsets"]
            out[k[len(prefix):]] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=np.float32).astype(np.float64)
    return out

#!/usr/bin/python3
"""Checks for tests/cli/test_init_from.sh on checkpoint tensor files (numpy only).

  init_check.py equal A.safetensors PREFIX_A B.safetensors PREFIX_B
      every tensor PREFIX_A<name> of A is bit-identical to PREFIX_B<name> of B
  init_check.py zero A.safetensors
      every value is 0 (and there is at least one tensor); "nonzero values" if not
  init_check.py moments SRC_OPT WITH_OPT WITHOUT_OPT BETA1 BETA2
      one AdamW step at lr 0 from the same weights, with and without the source's
      moments: m' - m'' = beta1 m_src and v' - v'' = beta2 v_src (same gradient)
"""
import json, struct, sys
import numpy as np


def load(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    h = json.loads(blob[8:8 + n])
    h.pop("__metadata__", None)
    return {k: np.frombuffer(blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
            for k, v in h.items()}


def strip(t, prefix):
    return {k[len(prefix):]: v for k, v in t.items() if k.startswith(prefix)}


def equal(a, pa, b, pb):
    ta, tb = strip(load(a), pa), strip(load(b), pb)
    assert ta and sorted(ta) == sorted(tb), "different tensor names"
    bad = [k for k in ta if not np.array_equal(ta[k], tb[k])]
    assert not bad, f"{len(bad)} tensors differ, first {bad[0]}"
    print(f"{len(ta)} tensors bit-identical")


def zero(a):
    t = load(a)
    assert t, "no tensors"
    assert all(not v.any() for v in t.values()), "nonzero values"
    print(f"{len(t)} tensors all zero")


def moments(src, with_opt, without, b1, b2):
    s, w, o = load(src), load(with_opt), load(without)
    worst = 0.0
    for prefix, beta in (("exp_avg.", float(b1)), ("exp_avg_sq.", float(b2))):
        for k in strip(s, prefix):
            got = w[prefix + k].astype(np.float64) - o[prefix + k]
            want = beta * s[prefix + k].astype(np.float64)
            scale = np.abs(want).max() + 1e-30
            worst = max(worst, float(np.abs(got - want).max() / scale))
    assert worst < 1e-5, f"moments differ from beta x the source's by {worst:.3g} (relative)"
    print(f"moments carried: m' - m'' = beta1 m_src, v' - v'' = beta2 v_src (worst relative error {worst:.2g})")


if __name__ == "__main__":
    {"equal": equal, "zero": zero, "moments": moments}[sys.argv[1]](*sys.argv[2:])

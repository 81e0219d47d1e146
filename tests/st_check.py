#!/usr/bin/python3
"""Independent safetensors reader used by test_ckpt: checks a file written by atoll_st_write.

usage: st_check.py FILE NAME:D0xD1:OFFSET ...

Each tensor NAME must be F32 with the given shape, and its values must be
0.25 * (OFFSET + i) - 3 for i = 0, 1, ... (the pattern test_ckpt writes), with OFFSET
the tensor's offset in floats in the flat buffer. Exits 0 if everything matches.
"""
import json
import struct
import sys

import numpy as np


def fail(msg):
    print("st_check.py: " + msg)
    sys.exit(1)


def main():
    path, specs = sys.argv[1], sys.argv[2:]
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if n % 8 != 0:
        fail("header length %d is not a multiple of 8" % n)
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    header.pop("__metadata__", None)
    if len(header) != len(specs):
        fail("%d tensors in the file, %d expected" % (len(header), len(specs)))
    for spec in specs:
        name, dims, offset = spec.split(":")
        shape = [int(d) for d in dims.split("x")] if dims else []
        info = header.get(name)
        if info is None:
            fail("tensor %s missing" % name)
        if info["dtype"] != "F32" or info["shape"] != shape:
            fail("tensor %s: %s %s" % (name, info["dtype"], info["shape"]))
        begin, end = info["data_offsets"]
        values = np.frombuffer(data[begin:end], dtype="<f4").reshape(shape)
        count = int(np.prod(shape)) if shape else 1
        want = (0.25 * (int(offset) + np.arange(count, dtype=np.float64)) - 3.0).astype(np.float32)
        if not np.array_equal(values.reshape(-1), want):
            fail("tensor %s: values differ" % name)
    print("st_check.py: %d tensors match" % len(specs))


if __name__ == "__main__":
    main()

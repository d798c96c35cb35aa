#!/usr/bin/env python3
"""safetensors_diff.py A B: the largest absolute difference between two safetensors files' F32/F64 tensors (same
names, shapes and dtypes required), and the largest absolute value in A. Prints "max_abs_diff max_abs name".
Standard library only (tests/e2e helper for the data-parallel equivalence tests)."""
import array
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, t in header.items():
        code = {"F32": "f", "F64": "d"}.get(t["dtype"])
        if code is None:
            sys.exit(f"{path}: {name}: dtype {t['dtype']} not supported")
        a = array.array(code)
        a.frombytes(data[base + t["data_offsets"][0]:base + t["data_offsets"][1]])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = (t["shape"], a)
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if a.keys() != b.keys():
        sys.exit("tensor names differ")
    worst, worst_name, biggest = 0.0, "", 0.0
    for name, (shape, x) in a.items():
        if b[name][0] != shape:
            sys.exit(f"{name}: shapes differ")
        y = b[name][1]
        for u, v in zip(x, y):
            d = abs(u - v)
            if d != d:  # NaN on one side
                sys.exit(f"{name}: NaN")
            if d > worst:
                worst, worst_name = d, name
            biggest = max(biggest, abs(u))
    print(f"{worst:.9g} {biggest:.9g} {worst_name or '-'}")


if __name__ == "__main__":  # also imported for load() by tests/e2e scripts
    main()

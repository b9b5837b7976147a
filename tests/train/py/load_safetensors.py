#!/usr/bin/env python3
"""Loads a safetensors file with the PyPI `safetensors` package (NumPy
backend) and prints, tab-separated and sorted by name:

    tensor <TAB> <name> <TAB> <numpy dtype> <TAB> [d0,d1,...] <TAB> <sum as float repr>
    meta <TAB> <key> <TAB> <value>

Used by tests/train/checkpoint_test.cc to check that Spire checkpoints are
readable by the reference implementation. Exit status 2 when safetensors or
numpy is missing, 1 when the file is rejected.
"""
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: load_safetensors.py FILE", file=sys.stderr)
        return 2
    try:
        import numpy as np
        from safetensors import safe_open
        from safetensors.numpy import load_file
    except ImportError as e:
        print("safetensors/numpy is not installed: %s" % e, file=sys.stderr)
        return 2
    path = sys.argv[1]
    try:
        tensors = load_file(path)
        with safe_open(path, framework="np") as f:
            meta = f.metadata() or {}
    except Exception as e:  # the reference rejected the file
        print("safetensors rejected %s: %s" % (path, e), file=sys.stderr)
        return 1
    for name in sorted(tensors):
        a = tensors[name]
        shape = "[" + ",".join(str(d) for d in a.shape) + "]"
        total = float(np.asarray(a, dtype=np.float64).sum())
        print("tensor\t%s\t%s\t%s\t%r" % (name, a.dtype.name, shape, total))
    for key in sorted(meta):
        print("meta\t%s\t%s" % (key, meta[key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

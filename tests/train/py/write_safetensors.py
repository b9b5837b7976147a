#!/usr/bin/env python3
"""Writes a safetensors file with the PyPI `safetensors` package (NumPy
backend) holding one tensor of each dtype Spire supports, a scalar and an
empty tensor; tests/train/checkpoint_test.cc loads it with Spire and checks
the values written here. Exit status 2 when safetensors or numpy is missing.
"""
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: write_safetensors.py FILE", file=sys.stderr)
        return 2
    try:
        import numpy as np
        from safetensors.numpy import save_file
    except ImportError as e:
        print("safetensors/numpy is not installed: %s" % e, file=sys.stderr)
        return 2
    tensors = {
        "weights": (np.arange(6, dtype=np.float32) * 0.5 - 1.0).reshape(2, 3),
        "bias": np.array([-1.5, 2.25, 1e300], dtype=np.float64),
        "ids": np.array([[1, -2], [3, 2**40]], dtype=np.int64),
        "count": np.array(7, dtype=np.int32),
        "mask": np.array([True, False, True, True]),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    save_file(tensors, sys.argv[1], metadata={"producer": "safetensors-python"})
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch check of Spire's fused attention op, for tests/core/ops/attention_torch_parity_test.cc.

Usage: attention_torch.py DIR

DIR holds what the Spire test wrote:
  config.json             {"cases": [{"prefix", "causal", "scale", "tolerance"}, ...]}
  attention.safetensors   per case (names start with its prefix): the inputs q, k, v
                          ([B, H, T, D]), the weights w of the loss <w, out>, and Spire's
                          out and the gradients dq, dk, dv of that loss

For each case, torch.nn.functional.scaled_dot_product_attention(q, k, v,
is_causal=causal, scale=None if scale == 0 else scale) is evaluated in the inputs'
dtype, <w, out> is back-propagated, and each of out, dq, dk, dv is compared with
Spire's as max |a - b| / max(max |b|, 1). Prints one line per case and exits 1 when
any differs by more than the case's tolerance, 77 when torch or safetensors is
missing (the test then skips).
"""

import json
import os
import sys

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
except ImportError as e:  # the test skips
    print(f"attention_torch.py: {e}")
    sys.exit(77)


def rel_diff(a, b):
    return ((a - b).abs().max() / max(b.abs().max().item(), 1.0)).item()


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t = load_file(os.path.join(d, "attention.safetensors"))
    failed = False
    for case in cfg["cases"]:
        p = case["prefix"]
        q, k, v = (t[p + n].clone().requires_grad_(True) for n in ("q", "k", "v"))
        scale = None if case["scale"] == 0 else case["scale"]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"], scale=scale)
        (out * t[p + "w"]).sum().backward()
        diffs = {
            "out": rel_diff(t[p + "out"], out.detach()),
            "dq": rel_diff(t[p + "dq"], q.grad),
            "dk": rel_diff(t[p + "dk"], k.grad),
            "dv": rel_diff(t[p + "dv"], v.grad),
        }
        worst = max(diffs.values())
        ok = worst <= case["tolerance"]
        failed = failed or not ok
        shape = f"q {list(q.shape)} k {list(k.shape)} v {list(v.shape)}"
        print(f"{'ok  ' if ok else 'FAIL'} {p} {str(q.dtype):14} {shape} causal={case['causal']} "
              + " ".join(f"{n}={x:.2e}" for n, x in diffs.items())
              + f" (tolerance {case['tolerance']:.0e})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

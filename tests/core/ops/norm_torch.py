#!/usr/bin/env python3
"""PyTorch side of tests/core/ops/norm_torch_parity_test.cc.

Usage: norm_torch.py FILE.safetensors

FILE holds f64 inputs and Spire's results:
  ln{k}_x, ln{k}_gamma, ln{k}_beta (when the case has one), ln{k}_dy
  spire_ln{k}_{y,mean,rstd,dx,dgamma[,dbeta]}: Spire's LayerNorm over the last axis
      (epsilon 1e-5), its mean and rstd outputs, and the gradients of sum(y * dy)
  gelu_x, gelu_dy, spire_gelu_{y,dx}: GELU with approximate="tanh" and its gradient

Each is recomputed with torch.nn.functional.layer_norm / gelu(approximate="tanh")
and autograd (mean and rstd with torch.var_mean(unbiased=False)), and compared as
max |a - b| / max(max |b|, 1). Prints one line per tensor; exits 1 when any differs
by more than 1e-10, 77 when torch or safetensors is missing.
"""

import sys

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
except ImportError as e:  # skipped by the C++ test
    print(f"missing: {e}")
    sys.exit(77)

TOL = 1e-10


def main():
    t = load_file(sys.argv[1])
    worst = 0.0
    failed = False

    def check(name, want):
        nonlocal worst, failed
        got = t["spire_" + name]
        if got.shape != want.shape:
            print(f"{name}: shape {tuple(got.shape)} vs torch {tuple(want.shape)}  FAIL")
            failed = True
            return
        scale = max(want.abs().max().item() if want.numel() else 0.0, 1.0)
        err = (got - want).abs().max().item() / scale if want.numel() else 0.0
        ok = err <= TOL
        worst = max(worst, err)
        failed = failed or not ok
        print(f"{name}: max rel diff {err:.3e}  {'ok' if ok else 'FAIL'}")

    k = 0
    while f"ln{k}_x" in t:
        p = f"ln{k}_"
        x = t[p + "x"].clone().requires_grad_(True)
        gamma = t[p + "gamma"].clone().requires_grad_(True)
        beta = t[p + "beta"].clone().requires_grad_(True) if p + "beta" in t else None
        c = x.shape[-1]
        y = F.layer_norm(x, (c,), gamma, beta, 1e-5)
        y.backward(t[p + "dy"])
        var, mean = torch.var_mean(x.detach(), dim=-1, unbiased=False)
        check(p + "y", y.detach())
        check(p + "mean", mean)
        check(p + "rstd", torch.rsqrt(var + 1e-5))
        check(p + "dx", x.grad)
        check(p + "dgamma", gamma.grad)
        if beta is not None:
            check(p + "dbeta", beta.grad)
        k += 1

    x = t["gelu_x"].clone().requires_grad_(True)
    y = F.gelu(x, approximate="tanh")
    y.backward(t["gelu_dy"])
    check("gelu_y", y.detach())
    check("gelu_dx", x.grad)

    print(f"{k} LayerNorm cases and GELU tanh; worst {worst:.3e} (tolerance {TOL:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

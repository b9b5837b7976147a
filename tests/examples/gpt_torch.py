#!/usr/bin/env python3
"""PyTorch twin of Spire's GPT (examples/gpt/gpt_model.cc), for the step-parity test
tests/examples/gpt_parity_test.cc.

Usage: gpt_torch.py DIR

DIR holds what the Spire test wrote:
  config.json          {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias",
                        "gelu": "none" | "tanh", "lr", "weight_decay", "beta1", "beta2", "clip",
                        "steps", "tolerance", "max_tolerance", "dtype": "f32" | "f64",
                        "trainable"}
  init.safetensors     every variable before the first step (Spire's names; dense [in, out])
  batches.safetensors  x{i}, y{i} (i64 [B, T]) for each step
  spire.safetensors    Spire's loss per step ("loss") and its variables after the steps

nanoGPT's GPT (bench/nanogpt_torch.py) is built with the config, loaded with Spire's initial
weights, and trained on the same batches as nanoGPT's train.py does one step (dropout off):
forward, loss.backward(), clip_grad_norm_(clip), AdamW (groups: dim >= 2 decayed, eps 1e-8),
zero_grad, in the config's dtype. Compares each step's loss (relative, to "tolerance") and
every variable after the steps: norm-wise, ||a - b|| / ||b|| to "tolerance", and elementwise,
max |a - b| over the tensor's largest magnitude (at least 1e-2) to "max_tolerance". Prints
one line per check and exits 1 when any differs by more than its tolerance.
"""

import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import nanogpt_torch  # noqa: E402


def max_diff(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-2)).item()


def norm_diff(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp(min=1e-12)).item()


def main():
    d = sys.argv[1]
    cfg = json.load(open(d + "/config.json"))
    torch.manual_seed(0)
    init = load_file(d + "/init.safetensors")
    batches = load_file(d + "/batches.safetensors")
    spire = load_file(d + "/spire.safetensors")
    model = nanogpt_torch.build_gpt_class()(dict(cfg, dropout=0.0))
    if cfg["dtype"] == "f64":
        model = model.double()
    names = {s for s, _, _ in nanogpt_torch.spire_names(cfg)}
    if names != set(cfg["trainable"]):
        print("FAILED: Spire's variables %s differ from nanoGPT's %s" %
              (sorted(set(cfg["trainable"]) - names), sorted(names - set(cfg["trainable"]))))
        return 1
    nanogpt_torch.load_spire_weights(model, init)
    model.train()
    # Spire keeps the learning rate in an f32 variable (cast to f64 for f64 variables).
    lr = torch.tensor(cfg["lr"], dtype=torch.float32).item()
    opt = model.configure_optimizers(cfg["weight_decay"], lr, (cfg["beta1"], cfg["beta2"]))
    tol, max_tol = cfg["tolerance"], cfg["max_tolerance"]
    failures = []

    def check(what, diff, bound=tol):
        ok = diff <= bound
        print("%-56s rel diff %.3g %s" % (what, diff, "ok" if ok else "> %g FAIL" % bound))
        if not ok:
            failures.append(what)

    for step in range(cfg["steps"]):
        _, loss = model(batches["x%d" % step], batches["y%d" % step])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        check("step %d loss (%.6f, grad norm %.4f)" % (step, loss.item(), norm.item()),
              abs(spire["loss"][step].item() - loss.item()) / abs(loss.item()))

    after = nanogpt_torch.spire_weights(model)
    for name, fn, bound in (("norm-wise", norm_diff, tol), ("elementwise", max_diff, max_tol)):
        worst = max((fn(spire[k], t), k) for k, t in after.items())
        for k, t in sorted(after.items()):
            diff = fn(spire[k], t)
            if diff > bound:
                check("variable %s, %s" % (k, name), diff, bound)
        check("every variable after %d steps, %s (worst: %s)" % (cfg["steps"], name, worst[1]),
              worst[0], bound)
    if failures:
        more = " and %d more" % (len(failures) - 8) if len(failures) > 8 else ""
        print("FAILED:", ", ".join(failures[:8]) + more)
        return 1
    print("PyTorch %s agrees with Spire" % torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())

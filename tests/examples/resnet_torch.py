#!/usr/bin/env python3
"""PyTorch twin of Spire's ResNets (examples/resnet/resnet_model.cc), for the step-parity
test tests/examples/resnet_parity_test.cc.

Usage: resnet_torch.py DIR

DIR holds what the Spire test wrote:
  config.json          {"model": "cifar" | "imagenet", "depth", "classes", "mode": "preact" |
                        "resnet", "lr", "momentum", "nesterov", "weight_decay",
                        "label_smoothing", "steps", "tolerance"}
  init.safetensors     every variable before the first step (Spire's names, HWIO / [in, out])
  batches.safetensors  image{i} (NHWC f32) and label{i} (i64) for each step, eval_image
  spire.safetensors    Spire's loss per step ("loss", "xent"), its variables after the steps
                       (same names as init) and its eval-mode logits of eval_image
                       ("eval_logits")

The same model is built here from functional PyTorch ops (no torchvision) with
TensorFlow's SAME padding made explicit (stride 2 pads (0, 1): zeros for
convolutions, -inf for max pooling), BatchNorm with momentum 0.1 (tensorpack's decay
0.9) and eps 1e-5, the L2 term wd * sum(W^2) / 2 over the '/W' weights added to the
loss, and torch.optim.SGD (momentum, optional Nesterov; the same update as TF's
MomentumOptimizer). It trains from init on the same batches, then compares each step's
loss and every variable after the steps with Spire's, and the eval-mode logits it
computes from Spire's final variables with Spire's own: each as max |a - b| / max(|b|, 1)
(relative above 1, absolute below). Prints one line per check and exits 1 when any
differs by more than the tolerance.
"""

import json
import math
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def same_pads(size, k, s):
    """TensorFlow's SAME padding (before, after) of one spatial dimension."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


class Model:
    def __init__(self, cfg, variables):
        self.cfg = cfg
        self.v = variables  # name -> tensor; trainable ones require grad
        self.training = True

    def conv(self, name, x, k, stride=1):
        w = self.v[name + "/W"].permute(3, 2, 0, 1)  # HWIO -> OIHW
        top, bottom = same_pads(x.shape[2], k, stride)
        left, right = same_pads(x.shape[3], k, stride)
        x = F.pad(x, (left, right, top, bottom))
        return F.conv2d(x, w, stride=stride)

    def bn(self, scope, x):
        return F.batch_norm(x, self.v[scope + "/mean/EMA"], self.v[scope + "/variance/EMA"],
                            self.v[scope + "/gamma"], self.v[scope + "/beta"],
                            training=self.training, momentum=0.1, eps=1e-5)

    def bnrelu(self, scope, x):
        return F.relu(self.bn(scope, x))

    def linear(self, x):
        return x @ self.v["linear/W"] + self.v["linear/b"]

    # ---- 32x32 (cifar10-resnet.py) ----
    def cifar_unit(self, name, x, increase_dim, first):
        preact = self.cfg["mode"] == "preact"
        stride = 2 if increase_dim else 1
        shortcut = x
        if increase_dim:
            half = x.shape[1] // 2
            shortcut = F.pad(F.avg_pool2d(x, 2), (0, 0, 0, 0, half, half))
        if preact:
            b1 = x if first else self.bnrelu(name + "/bn", x)
            c1 = self.bnrelu(name + "/conv1/bn", self.conv(name + "/conv1", b1, 3, stride))
            return self.conv(name + "/conv2", c1, 3) + shortcut
        c1 = self.bnrelu(name + "/conv1/bn", self.conv(name + "/conv1", x, 3, stride))
        c2 = self.bn(name + "/conv2/bn", self.conv(name + "/conv2", c1, 3))
        return F.relu(c2 + shortcut)

    def cifar(self, x):
        n = (self.cfg["depth"] - 2) // 6
        x = self.bnrelu("conv0/bn", self.conv("conv0", x, 3))
        for stage in (1, 2, 3):
            for k in range(n):
                x = self.cifar_unit("res%d.%d" % (stage, k), x, stage > 1 and k == 0,
                                    stage == 1 and k == 0)
        if self.cfg["mode"] == "preact":
            x = self.bnrelu("bnlast/bn", x)
        return self.linear(x.mean(dim=(2, 3)))

    # ---- 224x224 (resnet_model.py) ----
    def shortcut(self, scope, x, n_out, stride):
        if x.shape[1] == n_out:
            return x
        return self.bn(scope + "/convshortcut/bn", self.conv(scope + "/convshortcut", x, 1, stride))

    def basic(self, s, x, features, stride):
        l = self.bnrelu(s + "/conv1/bn", self.conv(s + "/conv1", x, 3, stride))
        l = self.bn(s + "/conv2/bn", self.conv(s + "/conv2", l, 3))
        return F.relu(l + self.shortcut(s, x, features, stride))

    def bottleneck(self, s, x, features, stride):
        l = self.bnrelu(s + "/conv1/bn", self.conv(s + "/conv1", x, 1))
        l = self.bnrelu(s + "/conv2/bn", self.conv(s + "/conv2", l, 3, stride))
        l = self.bn(s + "/conv3/bn", self.conv(s + "/conv3", l, 1))
        return F.relu(l + self.shortcut(s, x, features * 4, stride))

    def imagenet(self, x):
        blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3],
                  152: [3, 8, 36, 3]}[self.cfg["depth"]]
        block = self.bottleneck if self.cfg["depth"] >= 50 else self.basic
        x = self.bnrelu("conv0/bn", self.conv("conv0", x, 7, 2))
        top, bottom = same_pads(x.shape[2], 3, 2)
        left, right = same_pads(x.shape[3], 3, 2)
        x = F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-math.inf), 3, 2)
        for g, features in enumerate((64, 128, 256, 512)):
            for b in range(blocks[g]):
                x = block("group%d/block%d" % (g, b), x, features, 2 if b == 0 and g > 0 else 1)
        return self.linear(x.mean(dim=(2, 3)))

    def logits(self, image_nhwc):
        x = image_nhwc.permute(0, 3, 1, 2)
        return self.cifar(x) if self.cfg["model"] == "cifar" else self.imagenet(x)


def rel_diff(a, b):
    """max |a - b| / max(|b|, 1): relative for magnitudes over 1, absolute below (the
    weights of a ResNet are O(1) or smaller; betas and biases start at 0)."""
    a, b = a.double(), b.double()
    return ((a - b).abs() / b.abs().clamp(min=1.0)).max().item()


def main():
    d = sys.argv[1]
    cfg = json.load(open(d + "/config.json"))
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    init = load_file(d + "/init.safetensors")
    batches = load_file(d + "/batches.safetensors")
    torch.set_default_dtype(init["linear/W"].dtype)
    spire = load_file(d + "/spire.safetensors")
    trainable = set(cfg["trainable"])
    v = {k: t.clone().requires_grad_(k in trainable) for k, t in init.items()}
    model = Model(cfg, v)
    params = [v[k] for k in sorted(trainable)]
    decayed = [v[k] for k in sorted(trainable) if k.endswith("/W")]
    # Spire keeps the learning rate in an f32 variable.
    lr = torch.tensor(cfg["lr"], dtype=torch.float32).item()
    opt = torch.optim.SGD(params, lr=lr, momentum=cfg["momentum"],
                          nesterov=cfg["nesterov"])
    tol = cfg["tolerance"]
    failures = []

    def check(what, diff):
        ok = diff <= tol
        print("%-44s rel diff %.3g %s" % (what, diff, "ok" if ok else "> %g FAIL" % tol))
        if not ok:
            failures.append(what)

    for step in range(cfg["steps"]):
        logits = model.logits(batches["image%d" % step])
        xent = F.cross_entropy(logits, batches["label%d" % step],
                               label_smoothing=cfg["label_smoothing"])
        l2 = sum((w * w).sum() for w in decayed) * (cfg["weight_decay"] / 2)
        loss = xent + l2
        opt.zero_grad()
        loss.backward()
        opt.step()
        check("step %d loss (%.6f)" % (step, loss.item()),
              rel_diff(spire["loss"][step:step + 1], loss.detach().reshape(1)))

    worst = max(((rel_diff(spire[k], t.detach()), k) for k, t in v.items()))
    for k, t in sorted(v.items()):
        diff = rel_diff(spire[k], t.detach())
        if diff > tol:
            check("variable " + k, diff)
    check("every variable after %d steps (worst: %s)" % (cfg["steps"], worst[1]), worst[0])

    # Eval mode from Spire's variables after the steps (its moving averages included), so
    # this checks the inference forward pass itself, not the training drift checked above.
    spire_vars = {k: spire[k] for k in v}
    with torch.no_grad():
        evaluator = Model(cfg, spire_vars)
        evaluator.training = False
        check("eval-mode logits", rel_diff(spire["eval_logits"],
                                           evaluator.logits(batches["eval_image"])))
    if failures:
        more = " and %d more" % (len(failures) - 8) if len(failures) > 8 else ""
        print("FAILED:", ", ".join(failures[:8]) + more)
        return 1
    print("PyTorch %s agrees with Spire" % torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())

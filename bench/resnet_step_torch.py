#!/usr/bin/env python3
"""One ResNet training step in PyTorch 2 eager on the CPU, timed, with the process's peak
resident memory: the PyTorch half of bench/resnet_vs_torch.sh, printing the same RESULT
line as bench/resnet_step.cc (Spire's half).

The models have the shapes of Spire's (examples/resnet/resnet_model.cc), written here as
nn.Modules in PyTorch's NCHW layout (no torchvision):
  resnet20  tensorpack's cifar10-resnet.py: preactivation ResNet-20 (3 stages of 3 units,
            16/32/64 channels, option-A shortcuts: 2x2 average pooling and zero
            channels, BN+ReLU last), 32x32x3 images, 10 classes, weight decay 2e-4;
  resnet50  tensorpack's resnet_model.py: ResNet-50 with the stride on the bottleneck's
            3x3 convolution and projection shortcuts only where the channels change,
            224x224x3, 1000 classes, weight decay 1e-4; the last BatchNorm of each
            residual branch starts with gamma 0 (Goyal et al.), as Spire's.
Convolutions are bias-free; the FC layer has a bias. ReLUs run in place, as torchvision's
ResNets (PyTorch's usual memory saving). The cost is cross-entropy plus
wd * sum(W^2) / 2 over the convolution and FC weights (tensorpack's '.*/W'), as
Spire's graph computes it. BatchNorm in training mode (momentum 0.1, eps 1e-5), so each
step also updates the running statistics. torch.optim.SGD(lr 0.1, momentum 0.9,
nesterov=True), PyTorch's default implementation for CPU tensors.

Padding: PyTorch's symmetric padding (k // 2 on each side) where Spire uses TensorFlow's
SAME, which pads (0, 1) at stride 2 instead of (1, 1). Every layer has the same output
shape and the same FLOPs; only which border pixels are zero differs, which does not
matter for timing (tests/examples/resnet_torch.py pads explicitly where the numbers
must agree).

Fake data as tensorflow/benchmarks: one batch of N(0, 1) images and uniform labels made
once and used by every step. torch.set_num_threads(--threads). After --warmup untimed
steps, --windows windows of --steps steps; images/s = batch / the median window's
seconds per step; cpu_ms_per_step is the process's CPU time (all threads) over the timed
steps. Peak resident memory: VmHWM of /proc/self/status at the end (the
whole process, the Python interpreter and torch's libraries included; start_rss_mib is
VmRSS after importing torch, before the model is built). Last line:

  RESULT engine=torch model=M batch=B threads=T images_per_s=X ms_per_step=X ms_best=X
         cpu_ms_per_step=X peak_rss_mib=X start_rss_mib=X loss_first=X loss_last=X part=P

--part forward|backward times less than a step (the forward pass and cost; that and
backward, without the update), as resnet_step's --part.

--device cuda runs on cuda:0 (as resnet_step --device gpu): the batch is copied from the
host every step (Spire feeds it the same way), loss.item() ends each step, windows end
with torch.cuda.synchronize(), and the RESULT line adds device=gpu tf32=0|1 and
device_peak_mib (torch.cuda.max_memory_allocated). --tf32 sets cuDNN's and cuBLAS's
allow_tf32 (default 0: off for both, as Spire's default; PyTorch's own default allows
TF32 in cuDNN).
Exits 0 with a "skipped" message (and no RESULT line) when PyTorch is not installed.
"""

import argparse
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet20", choices=["resnet20", "resnet50"])
    p.add_argument("--batch", type=int, default=0, help="default 128 (resnet20), 32 (resnet50)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--steps", type=int, default=0, help="steps per window (default 10 / 2)")
    p.add_argument("--windows", type=int, default=3, help="timed windows (default 3)")
    p.add_argument("--warmup", type=int, default=-1, help="untimed steps first (default 3 / 2)")
    p.add_argument("--part", default="step", choices=["step", "forward", "backward"])
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--tf32", type=int, default=0, choices=[0, 1])
    a = p.parse_args()
    r20 = a.model == "resnet20"
    a.batch = a.batch or (128 if r20 else 32)
    a.steps = a.steps or (10 if r20 else 2)
    a.warmup = (3 if r20 else 2) if a.warmup < 0 else a.warmup
    if a.batch < 1 or a.threads < 1 or a.steps < 1 or a.windows < 1 or a.warmup < 0 or a.lr < 0:
        p.error("--batch, --threads, --steps, --windows >= 1; --warmup, --lr >= 0")
    return a


def proc_status_mib(field):
    """A 'Vm...:  123 kB' field of /proc/self/status in MiB (-1 where it cannot be read)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return -1.0


def build(torch, model):
    nn = torch.nn
    F = torch.nn.functional

    def conv(cin, cout, k, stride=1):
        return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)

    class BNReLU(nn.Sequential):
        def __init__(self, c):
            super().__init__(nn.BatchNorm2d(c, momentum=0.1, eps=1e-5), nn.ReLU(inplace=True))

    class PreactUnit(nn.Module):
        """cifar10-resnet.py's residual unit (preact, option-A shortcut)."""

        def __init__(self, cin, increase_dim, first):
            super().__init__()
            cout = cin * 2 if increase_dim else cin
            self.increase_dim = increase_dim
            self.pre = nn.Identity() if first else BNReLU(cin)
            self.conv1 = conv(cin, cout, 3, 2 if increase_dim else 1)
            self.bnrelu1 = BNReLU(cout)
            self.conv2 = conv(cout, cout, 3)

        def forward(self, x):
            shortcut = x
            if self.increase_dim:
                half = x.shape[1] // 2
                shortcut = F.pad(F.avg_pool2d(x, 2), (0, 0, 0, 0, half, half))
            return self.conv2(self.bnrelu1(self.conv1(self.pre(x)))) + shortcut

    class ResNet20(nn.Module):
        def __init__(self, classes=10):
            super().__init__()
            self.conv0 = conv(3, 16, 3)
            self.bnrelu0 = BNReLU(16)
            units, c = [], 16
            for stage in range(3):
                for k in range(3):
                    inc = stage > 0 and k == 0
                    units.append(PreactUnit(c, inc, stage == 0 and k == 0))
                    c = c * 2 if inc else c
            self.units = nn.Sequential(*units)
            self.bnlast = BNReLU(c)
            self.linear = nn.Linear(c, classes)

        def forward(self, x):
            x = self.bnlast(self.units(self.bnrelu0(self.conv0(x))))
            return self.linear(x.mean(dim=(2, 3)))

    class Bottleneck(nn.Module):
        """resnet_model.py's bottleneck: stride on the 3x3, projection where channels change."""

        def __init__(self, cin, features, stride):
            super().__init__()
            cout = features * 4
            self.conv1, self.bn1 = conv(cin, features, 1), BNReLU(features)
            self.conv2, self.bn2 = conv(features, features, 3, stride), BNReLU(features)
            self.conv3, self.bn3 = conv(features, cout, 1), nn.BatchNorm2d(cout)
            nn.init.zeros_(self.bn3.weight)  # gamma 0 on the branch's last BN, as Spire's
            self.shortcut = None
            if cin != cout:
                self.shortcut = nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))

        def forward(self, x):
            l = self.bn3(self.conv3(self.bn2(self.conv2(self.bn1(self.conv1(x))))))
            return F.relu_(l + (x if self.shortcut is None else self.shortcut(x)))

    class ResNet50(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            self.conv0, self.bnrelu0 = conv(3, 64, 7, 2), BNReLU(64)
            self.pool0 = nn.MaxPool2d(3, 2, padding=1)
            blocks, c = [], 64
            for g, (n, features) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
                for b in range(n):
                    blocks.append(Bottleneck(c, features, 2 if b == 0 and g > 0 else 1))
                    c = features * 4
            self.blocks = nn.Sequential(*blocks)
            self.linear = nn.Linear(c, classes)

        def forward(self, x):
            x = self.blocks(self.pool0(self.bnrelu0(self.conv0(x))))
            return self.linear(x.mean(dim=(2, 3)))

    return ResNet20() if model == "resnet20" else ResNet50()


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"resnet_step_torch: skipped: PyTorch is not installed ({e})")
        return 0
    start_rss = proc_status_mib("VmRSS")
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    r20 = args.model == "resnet20"
    size, classes, wd = (32, 10, 2e-4) if r20 else (224, 1000, 1e-4)
    gpu = args.device == "cuda"
    if gpu:
        if not torch.cuda.is_available():
            print("resnet_step_torch: --device cuda, but torch.cuda.is_available() is False", file=sys.stderr)
            return 1
        torch.backends.cudnn.allow_tf32 = bool(args.tf32)
        torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
    dev = torch.device(args.device)
    net = build(torch, args.model).to(dev).train()
    decayed = [m.weight for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    gen = torch.Generator().manual_seed(42)
    images = torch.randn(args.batch, 3, size, size, generator=gen)
    labels = torch.randint(0, classes, (args.batch,), generator=gen, dtype=torch.int64)

    def cost():
        l2 = torch.stack([w.square().sum() for w in decayed]).sum() * (wd / 2)
        x, y = (images.to(dev), labels.to(dev)) if gpu else (images, labels)
        return F.cross_entropy(net(x), y) + l2

    def step():
        if args.part == "forward":
            with torch.no_grad():  # (a training-mode forward; no graph kept for a backward)
                return cost().item()
        opt.zero_grad(set_to_none=True)
        loss = cost()
        loss.backward()
        if args.part == "step":
            opt.step()
        return loss.item()

    print(f"resnet_step_torch: torch {torch.__version__}, {args.model} batch {args.batch}, "
          f"{torch.get_num_threads()} threads, part {args.part}: {args.warmup} warm-up steps, "
          f"{args.windows} windows of {args.steps} steps", file=sys.stderr, flush=True)
    loss_first = loss_last = float("nan")
    if gpu:  # the peak of the steps, from the model and batch made (as resnet_step's)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    for i in range(args.warmup):
        loss_last = step()
        if i == 0:
            loss_first = loss_last
    ms = []
    cpu0 = time.process_time()
    for w in range(args.windows):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss_last = step()
            if loss_first != loss_first:
                loss_first = loss_last
        if gpu:
            torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3 / args.steps)
        print(f"resnet_step_torch: window {w}: {ms[-1]:.1f} ms/step, loss {loss_last:.4f}",
              file=sys.stderr, flush=True)
    cpu_ms = (time.process_time() - cpu0) * 1e3 / (args.windows * args.steps)
    ms_sorted = sorted(ms)
    median = ms_sorted[len(ms_sorted) // 2]  # the upper median, as resnet_step.cc
    print(f"RESULT engine=torch model={args.model} batch={args.batch} threads={args.threads} "
          f"images_per_s={1e3 * args.batch / median:.2f} ms_per_step={median:.2f} "
          f"ms_best={ms_sorted[0]:.2f} cpu_ms_per_step={cpu_ms:.2f} peak_rss_mib={proc_status_mib('VmHWM'):.1f} "
          f"start_rss_mib={start_rss:.1f} loss_first={loss_first:.4f} "
          f"loss_last={loss_last:.4f} part={args.part}"
          + (f" device=gpu tf32={args.tf32} device_peak_mib={torch.cuda.max_memory_allocated() / 2**20:.1f}"
             if gpu else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The MNIST convnet training step of bench/gpu_train_step.cc in PyTorch eager, on CUDA.

Same model and step as Spire's (examples/mnist_convnet.cc): input [B, 28, 28]
in 0..255 scaled to [-1, 1]; Conv 32 3x3 SAME ReLU, MaxPool 2, Conv x2,
MaxPool 2, Conv, FC 512 ReLU, Dropout 0.5 (training mode), FC 10; mean
cross-entropy + 1e-5 * L2 (sum(w^2) / 2) of the FC weights; Adam lr 1e-3
(PyTorch's default implementation for CUDA tensors). PyTorch's native NCHW
layout; the layer sizes, and so the FLOPs, are the same.

TF32 is off for matmuls and cuDNN (torch.backends.cuda.matmul.allow_tf32 =
torch.backends.cudnn.allow_tf32 = False), matching Spire's default
(SessionOptions::allow_tf32 = false). Timed with cudnn.benchmark False and
True, batches 128 and 512, and the batch either resident on the GPU or fed
from (pageable) host tensors every step (.to("cuda"), as Spire's "fed"
copies the fed host tensors). After warm-up steps, several windows of S
steps, each ended by torch.cuda.synchronize(); ms/step is the median window
(best beside it).

Usage: mnist_step_torch.py [--quick] [--batch N] [--steps S] [--windows W]
                           [--warmup N] [--csv FILE] [--device cuda|cpu]
(--device cpu only checks the script where there is no GPU.)
Exits 0 with a message when PyTorch or CUDA is missing.
"""

import argparse
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="3 windows of 10 steps after 5 warm-up steps")
    p.add_argument("--batch", type=int, default=0, help="only this batch (default: 128 and 512)")
    p.add_argument("--steps", type=int, default=50, help="steps per timed window (default 50)")
    p.add_argument("--windows", type=int, default=7, help="timed windows (default 7)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    p.add_argument("--csv", default="", help="also write the rows as CSV to this file")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cuda (default) or cpu (only to check the script without a GPU)")
    a = p.parse_args()
    if a.quick:
        a.steps, a.windows, a.warmup = 10, 3, 5
    if a.batch < 0 or a.steps < 1 or a.windows < 1 or a.warmup < 0:
        p.error("--batch >= 1, --steps >= 1, --windows >= 1 and --warmup >= 0")
    return a


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print(f"mnist_step_torch: skipped: PyTorch is not installed ({e})")
        return 0
    on_gpu = args.device != "cpu"
    if on_gpu and not torch.cuda.is_available():
        print(f"mnist_step_torch: skipped: torch {torch.__version__} sees no CUDA device "
              f"(no GPU or driver, or a CPU-only build)")
        return 0

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv0 = nn.Conv2d(1, 32, 3, padding=1)
            self.conv1 = nn.Conv2d(32, 32, 3, padding=1)
            self.conv2 = nn.Conv2d(32, 32, 3, padding=1)
            self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
            self.fc0 = nn.Linear(7 * 7 * 32, 512)
            self.fc1 = nn.Linear(512, 10)
            self.dropout = nn.Dropout(0.5)

        def forward(self, x):  # x: [B, 28, 28] in 0..255
            x = x.unsqueeze(1) * (2.0 / 255.0) - 1.0
            x = F.max_pool2d(F.relu(self.conv0(x)), 2)
            x = F.relu(self.conv1(x))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = F.relu(self.conv3(x))
            x = F.relu(self.fc0(x.flatten(1)))
            return self.fc1(self.dropout(x))

    def run(batch, resident, cudnn_benchmark):
        torch.backends.cudnn.benchmark = cudnn_benchmark
        torch.manual_seed(0)
        net = Net().to(dev).train()
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
        gen = torch.Generator().manual_seed(batch)
        images_cpu = torch.rand(batch, 28, 28, generator=gen) * 255.0
        labels_cpu = torch.randint(0, 10, (batch,), generator=gen, dtype=torch.int64)
        images_gpu, labels_gpu = images_cpu.to(dev), labels_cpu.to(dev)

        def batch_tensors():
            if resident:
                return images_gpu, labels_gpu
            return images_cpu.to(dev), labels_cpu.to(dev)

        def loss_of(x, y):
            logits = net(x)
            wd = 1e-5 * 0.5 * (net.fc0.weight.square().sum() + net.fc1.weight.square().sum())
            return F.cross_entropy(logits, y) + wd

        def step():
            x, y = batch_tensors()
            opt.zero_grad(set_to_none=True)
            loss_of(x, y).backward()
            opt.step()

        with torch.no_grad():
            loss_before = loss_of(images_gpu, labels_gpu).item()
        for _ in range(args.warmup):
            step()
        sync()
        ms = []
        for _ in range(args.windows):
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            sync()
            ms.append((time.perf_counter() - t0) * 1e3 / args.steps)
        with torch.no_grad():
            loss_after = loss_of(images_gpu, labels_gpu).item()
        return {"batch": batch, "input": "resident" if resident else "fed",
                "cudnn_benchmark": cudnn_benchmark, "ms_median": statistics.median(ms),
                "ms_best": min(ms), "loss_before": loss_before, "loss_after": loss_after}

    where = torch.cuda.get_device_name(0) if on_gpu else "CPU (script check only)"
    print(f"mnist_step_torch: torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{where}; TF32 off; {args.warmup} warm-up steps, "
          f"{args.windows} windows of {args.steps} steps, ms/step = median window (best)",
          flush=True)
    batches = [args.batch] if args.batch else [128, 512]
    rows, failed = [], False
    for cudnn_benchmark in (False, True):
        for batch in batches:
            for resident in (True, False):
                print(f"measuring cudnn.benchmark={cudnn_benchmark} batch {batch} "
                      f"{'resident' if resident else 'fed'}...", file=sys.stderr, flush=True)
                try:
                    rows.append(run(batch, resident, cudnn_benchmark))
                except Exception as e:  # report and go on with the other configurations
                    failed = True
                    rows.append({"batch": batch, "input": "resident" if resident else "fed",
                                 "cudnn_benchmark": cudnn_benchmark,
                                 "error": f"{type(e).__name__}: {e}"})
                if on_gpu:
                    torch.cuda.empty_cache()

    print("\n## mnist_step_torch table\n")
    print("| cudnn.benchmark | batch | input | ms/step (median) | ms/step (best) | images/s "
          "| loss before -> after |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        head = f"| {r['cudnn_benchmark']} | {r['batch']} | {r['input']} |"
        if "error" in r:
            err = r["error"].replace("|", "/").replace("\n", " ")[:160]
            print(f"{head} FAILED: {err} | | | |")
            continue
        print(f"{head} {r['ms_median']:.3f} | {r['ms_best']:.3f} | "
              f"{1e3 * r['batch'] / r['ms_median']:.0f} | "
              f"{r['loss_before']:.4f} -> {r['loss_after']:.4f} |")
    if args.csv:
        import csv
        keys = ["cudnn_benchmark", "batch", "input", "ms_median", "ms_best", "loss_before",
                "loss_after", "error"]
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            for r in rows:
                w.writerow({k: r.get(k, "") for k in keys})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

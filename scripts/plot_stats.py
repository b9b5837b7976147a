#!/usr/bin/env python3
"""The training curve of any Spire run: losses and accuracies or error rates
per epoch from LOGDIR/stats.json (written by the trainer's monitors), as a PNG
(LOGDIR/training_curve.png unless --out) and a table on stdout.

usage: scripts/plot_stats.py LOGDIR [--out FILE] [--title TEXT]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The main job's names, then the ResNet example's (tensorpack's ImageNetModel).
LOSSES = ("total_cost", "cross_entropy_loss", "validation_cross_entropy_loss",
          "cost", "xentropy-loss", "validation_xentropy-loss")
ACCURACIES = ("accuracy", "validation_accuracy",
              "train-error-top1", "val-error-top1")


def read_stats(logdir):
    path = os.path.join(logdir, "stats.json")
    try:
        with open(path) as f:
            stats = json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"plot_stats: no {path} (a trainer with the JSON monitor writes it)")
    except json.JSONDecodeError as e:
        raise SystemExit(f"plot_stats: {path} is not valid JSON: {e}")
    if not isinstance(stats, list) or not all(isinstance(e, dict) for e in stats):
        raise SystemExit(f"plot_stats: {path} is not a list of per-epoch records")
    return stats


def series(stats):
    """{name: [(epoch, value), ...]} for the losses and accuracies present,
    in epoch order (an entry without epoch_num is skipped)."""
    out = {}
    for e in sorted((e for e in stats if "epoch_num" in e), key=lambda e: e["epoch_num"]):
        for k in LOSSES + ACCURACIES:
            if isinstance(e.get(k), (int, float)):
                out.setdefault(k, []).append((e["epoch_num"], float(e[k])))
    return out


def plot(s, out, title):
    from plotting import pyplot
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for k in LOSSES:
        if k in s:
            left.plot(*zip(*s[k]), marker="o", label=k)
    left.set_xlabel("epoch")
    left.set_ylabel("loss")
    left.set_yscale("log")
    left.grid(True, alpha=0.3)
    left.legend()
    for k in ACCURACIES:
        if k in s:
            right.plot(*zip(*s[k]), marker="o", label=k)
    right.set_xlabel("epoch")
    right.set_ylabel("error" if all("error" in k for k in ACCURACIES if k in s) else "accuracy")
    if all("error" in k for k in ACCURACIES if k in s):
        right.set_yscale("log")
    right.grid(True, alpha=0.3)
    right.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logdir")
    ap.add_argument("--out")
    ap.add_argument("--title")
    args = ap.parse_args(argv)
    s = series(read_stats(args.logdir))
    if not s:
        raise SystemExit(f"plot_stats: {args.logdir}/stats.json has no losses, accuracies or errors per epoch")
    epochs = sorted({ep for v in s.values() for ep, _ in v})
    names = [k for k in LOSSES + ACCURACIES if k in s]
    print("epoch " + " ".join(f"{k:>30}" for k in names))
    for ep in epochs:
        row = [dict(s[k]).get(ep) for k in names]
        print(f"{ep:>5} " + " ".join(f"{v:>30.6g}" if v is not None else f"{'':>30}" for v in row))
    out = args.out or os.path.join(args.logdir, "training_curve.png")
    plot(s, out, args.title or f"Spire training: {os.path.basename(os.path.normpath(args.logdir))}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

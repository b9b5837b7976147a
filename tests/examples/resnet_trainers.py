#!/usr/bin/env python3
"""Every trainer trains the ResNet example: a few steps of ResNet-20 on MNIST with each
of tensorpack's trainers (simple; replicated, ps and async over two CPU devices; horovod
on 2 MPI ranks; dist-ps and dist-replicated with 1 server and 2 workers), checking that
the training loss (the epoch's moving average of xentropy-loss in stats.json) falls from
the first epoch to the last by more than batch noise; horovod's run also writes one
timeline per rank (--timeline) with several gradient buckets (--fusion-threshold).

Usage: resnet_trainers.py BUILD_DIR MNIST_DIR [MPIEXEC]
Exits 77 (ctest's skip) with a message when the MNIST files are absent (../shared/data/README); trainers
that need MPIEXEC are skipped, saying so, when it is not given.
"""
import json
import os
import subprocess
import sys
import tempfile

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def main():
    build, mnist = sys.argv[1], sys.argv[2]
    mpiexec = sys.argv[3] if len(sys.argv) > 3 else ""
    if not os.path.exists(os.path.join(mnist, "train-images-idx3-ubyte.gz")):
        print("MNIST not found in %s: skipping (see ../shared/data/README)" % mnist)
        return 77
    program = os.path.join(build, "examples", "resnet")
    common = ["--dataset", "mnist", "--data", mnist, "--depth", "20", "--batch", "16",
              "--max-epoch", "3", "--steps-per-epoch", "6", "--lr", "0.05", "--val-images", "500"]
    runs = [("simple", [], 0), ("replicated", [], 0), ("ps", [], 0), ("async", [], 0),
            ("horovod", ["--fusion-threshold", "200000", "--timeline", "8:2"], 2),
            ("dist-ps", ["--ps", "1"], 3), ("dist-replicated", ["--ps", "1"], 3)]
    failures = []
    env = dict(os.environ, **MPI_ENV)
    for trainer, extra, ranks in runs:
        if ranks and not mpiexec:
            print("%-16s skipped: no mpiexec given" % trainer)
            continue
        with tempfile.TemporaryDirectory(prefix="spire_resnet_" + trainer + "_") as logdir:
            cmd = [program] + common + ["--trainer", trainer, "--logdir", logdir] + extra
            if ranks:
                cmd = [mpiexec, "-np", str(ranks)] + cmd
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=600)
            stats_path = os.path.join(logdir, "stats.json")
            if r.returncode != 0 or not os.path.exists(stats_path):
                failures.append(trainer)
                print("%-16s FAILED (exit %d):\n%s" % (trainer, r.returncode, r.stdout[-3000:]))
                continue
            if "--timeline" in extra:
                # One timeline per rank, each with the step's gradient buckets (several: the
                # 200 kB cap splits ResNet-20's 1.1 MB of gradients).
                for rank in range(ranks):
                    path = os.path.join(logdir, "timeline-rank%d.json" % rank)
                    names = [e["name"] for e in json.load(open(path))["traceEvents"]] if os.path.exists(path) else []
                    buckets = {n for n in names if n.startswith("AllReduce/bucket")}
                    if len(buckets) < 3:
                        failures.append(trainer + " timeline")
                        print("%-16s FAILED: %s has %d bucket allreduces" % (trainer, path, len(buckets)))
            stats = json.load(open(stats_path))
            losses = [e["xentropy-loss"] for e in stats if "xentropy-loss" in e]
            # Batch noise moves the average by about 0.01 when nothing trains (lr 0);
            # training lowers it by 0.15 to 0.3 here.
            ok = len(losses) == 3 and losses[-1] < losses[0] - 0.05
            print("%-16s xentropy-loss by epoch %s, val-error-top1 %.3f %s" %
                  (trainer, " ".join("%.3f" % l for l in losses), stats[-1]["val-error-top1"],
                   "ok" if ok else "FAIL: the loss did not fall"))
            if not ok:
                failures.append(trainer)
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

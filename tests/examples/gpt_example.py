#!/usr/bin/env python3
"""The GPT example end to end (examples/gpt.cc) on a small text it writes: a tiny GPT trains
with the simple trainer, the replicated trainer on two CPU devices and HorovodTrainer on 2
MPI ranks (when MPIEXEC is given), with gradient accumulation and with bf16 and f16 mixed
precision; each run's validation loss (stats.json) must fall well below its first value and
TensorBoard events must be written. Then the same command resumes a finished run with more
iterations (it continues from the saved step, not from 0), and --sample prints text of the
requested length in the training text's vocabulary. HorovodTrainer on 2 ranks must match
--accum 2 (mean) on one process: the same two batches per step, averaged.

Usage: gpt_example.py BUILD_DIR [MPIEXEC]
"""
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}

TINY = ["--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch", "8",
        "--eval-interval", "20", "--eval-iters", "8", "--warmup-iters", "5", "--lr", "1e-2",
        "--min-lr", "1e-3", "--threads", "1"]


def write_text(path):
    """Sentences from a small grammar: learnable (the loss falls fast), not a fixed string."""
    rng = random.Random(7)
    subjects = ["the cat", "a dog", "my friend", "the king", "our ship"]
    verbs = ["sees", "likes", "finds", "takes", "calls"]
    objects = ["the sea", "a red ball", "the old house", "some bread", "the moon"]
    lines = ["%s %s %s." % (rng.choice(subjects), rng.choice(verbs), rng.choice(objects))
             for _ in range(4000)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return set(open(path, "rb").read())


def run(cmd, env, merge=True):
    """(exit status, stdout); stderr merged into stdout, or, with merge=False, printed when the
    command fails."""
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT if merge else subprocess.PIPE, text=True, timeout=600)
    if not merge and r.returncode != 0:
        print(r.stderr[-3000:])
    return r.returncode, r.stdout


def val_losses(logdir):
    path = os.path.join(logdir, "stats.json")
    if not os.path.exists(path):
        return []
    return [(e["global_step"], e["validation_loss"]) for e in json.load(open(path))
            if "validation_loss" in e]


def main():
    build = sys.argv[1]
    mpiexec = sys.argv[2] if len(sys.argv) > 2 else ""
    program = os.path.join(build, "examples", "gpt")
    env = dict(os.environ, **MPI_ENV)
    failures = []
    with tempfile.TemporaryDirectory(prefix="spire_gpt_example_") as tmp:
        text = os.path.join(tmp, "text.txt")
        alphabet = write_text(text)
        runs = [("simple", [], 0, 60), ("replicated", ["--trainer", "replicated"], 0, 60),
                ("accum-mean", ["--accum", "2"], 0, 60), ("accum-sum", ["--accum", "2", "--accum-mode", "sum"], 0, 60),
                ("bf16", ["--precision", "bf16"], 0, 60), ("f16", ["--precision", "f16"], 0, 60),
                ("horovod", ["--trainer", "horovod"], 2, 60)]
        for name, extra, ranks, iters in runs:
            if ranks and not mpiexec:
                print("%-12s skipped: no mpiexec given" % name)
                continue
            logdir = os.path.join(tmp, name)
            cmd = [program, "--data", text, "--logdir", logdir, "--max-iters", str(iters)] + TINY + extra
            if ranks:
                cmd = [mpiexec, "-np", str(ranks)] + cmd
            rc, out = run(cmd, env)
            losses = val_losses(logdir)
            events = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
            # A uniform guess over the ~25 symbols is ln 25 = 3.2; the grammar is learnt to
            # well under 2 in 60 steps.
            ok = rc == 0 and len(losses) == iters // 20 and losses[-1][1] < min(2.0, losses[0][1] - 0.3) and events
            print("%-12s validation_loss %s%s %s" % (name, " ".join("%.3f" % l for _, l in losses),
                                                   "" if events else " (no TensorBoard events)",
                                                   "ok" if ok else "FAIL"))
            if not ok:
                failures.append(name)
                print(out[-3000:])
            if name == "f16" and ok:
                stats = json.load(open(os.path.join(logdir, "stats.json")))
                if "loss_scale" not in stats[-1]:
                    failures.append("f16 loss_scale monitor")
                    print("f16: no loss_scale in stats.json: %s" % sorted(stats[-1]))

        # HorovodTrainer on 2 ranks averages the gradients of batches 2s and 2s + 1 of the one
        # stream (each rank keeps every 2nd batch); --accum 2 --accum-mode mean averages the same
        # two batches on one process: the same steps, so the same validation losses.
        if mpiexec and "horovod" not in failures and "accum-mean" not in failures:
            a = val_losses(os.path.join(tmp, "accum-mean"))
            h = val_losses(os.path.join(tmp, "horovod"))
            ok = len(a) == len(h) and all(abs(x[1] - y[1]) < 1e-3 for x, y in zip(a, h))
            print("%-12s horovod %s, accum-mean %s %s" % ("horovod=acc", [round(l, 4) for _, l in h],
                                                        [round(l, 4) for _, l in a], "ok" if ok else "FAIL"))
            if not ok:
                failures.append("horovod equals accum-mean")

        # Resume: a run of 40 of 80 scheduled iterations, run again with --max-iters 80, trains
        # on from step 40 with the training and validation batches (and learning rates) that an
        # uninterrupted 80-iteration run has: the same validation losses.
        sched = ["--lr-decay-iters", "80"]
        logdir = os.path.join(tmp, "resumed")
        run([program, "--data", text, "--logdir", logdir, "--max-iters", "40"] + sched + TINY, env)
        rc, out = run([program, "--data", text, "--logdir", logdir, "--max-iters", "80"] + sched + TINY, env)
        losses = val_losses(logdir)
        straight_dir = os.path.join(tmp, "straight")
        rc2, out2 = run([program, "--data", text, "--logdir", straight_dir, "--max-iters", "80"] + sched + TINY, env)
        straight = val_losses(straight_dir)
        ok = (rc == 0 and rc2 == 0 and "Resuming from epoch 3" in out and [s for s, _ in losses] == [20, 40, 60, 80]
              and len(straight) == 4 and all(abs(a[1] - b[1]) < 1e-5 for a, b in zip(losses, straight)))
        print("%-12s steps %s, losses %s (uninterrupted %s) %s" %
              ("resume", [s for s, _ in losses], [round(l, 5) for _, l in losses],
               [round(l, 5) for _, l in straight], "ok" if ok else "FAIL"))
        if not ok:
            failures.append("resume")
            print(out[-3000:], out2[-3000:])

        # Sampling from the resumed run's latest checkpoint.
        rc, out = run([program, "--data", text, "--logdir", logdir, "--sample", "60", "--start", "the ",
                       "--seed", "3"] + TINY, env, merge=False)
        # The program ends the sample with one newline (the sample itself may end with one).
        sample = (out[:-1] if out.endswith("\n") else out).encode()
        ok = rc == 0 and sample.startswith(b"the ") and len(sample) == 64 and set(sample) <= alphabet
        print("%-12s %r %s" % ("sample", out[:80], "ok" if ok else "FAIL"))
        if not ok:
            failures.append("sample")
            print(out[-3000:])
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

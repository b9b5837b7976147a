#!/usr/bin/env python3
"""The main job under mpirun with HorovodTrainer (ctest runs this; see
tests/CMakeLists.txt), short: 2 ranks train 3 epochs of 15 steps, and
  1. every rank ends with bit-identical variables (the checksum each prints),
     and only rank 0 wrote the log directory;
  2. the whole job is SIGKILLed as epoch 2 starts (after epoch 1's checkpoint); the same
     command resumes on every rank from epoch 2 (rank 0 decides, the others
     follow), and again every rank ends with identical variables, bit for bit
     those of the straight run (the checkpoint keeps the dropout streams'
     positions, and each rank's shard continues at the restored global_step,
     mid-pass: 15 steps are not a pass of 234 batches).
Exit 77 (skipped) when the MNIST files are absent.

usage: mnist_horovod.py MPIEXEC MNIST_CONVNET DATA_DIR WORK_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def checksums(out):
    return dict(re.findall(r"variables checksum \(rank (\d+)\): ([0-9a-f]+)", out))


def main():
    mpiexec, binary, data, work = sys.argv[1:5]
    if not all(os.path.exists(os.path.join(data, f)) for f in
               ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]):
        print(f"SKIPPED: no MNIST files in {data}")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    problems = []

    def command(logdir):
        return [mpiexec, "-np", "2", binary, "--trainer", "horovod", "--data", data, "--logdir", logdir,
                "--max-epoch", "3", "--steps-per-epoch", "15", "--threads", "1"]

    # 1. A straight run.
    straight = os.path.join(work, "straight")
    rc, out = run(command(straight))
    sums = checksums(out)
    straight_sums = sums
    print(f"straight run: exit {rc}, checksums {sums}")
    if rc != 0 or len(sums) != 2 or len(set(sums.values())) != 1:
        problems.append("the straight run did not end with identical variables on both ranks")
        print(out[-4000:])
    if not os.path.exists(os.path.join(straight, "stats.json")):
        problems.append("rank 0 wrote no stats.json")
    logs = [l for l in out.splitlines() if "does not write the log directory" in l]
    if len(logs) != 1:
        problems.append(f"expected rank 1 alone to skip the log directory, got {logs}")

    # 2. SIGKILL the whole job after epoch 1's checkpoint, then resume.
    killed = os.path.join(work, "killed")
    p = subprocess.Popen(command(killed), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    deadline = time.monotonic() + 200
    seen = ""
    for line in p.stdout:
        seen += line
        # After epoch 1's checkpoint and stats.json: rank 0 writes both
        # before it starts epoch 2 (rank 1 may start it earlier).
        if seen.count("Start Epoch 2") == 2:
            # The whole job: mpirun and every rank (mpirun starts the ranks
            # in sessions of their own).
            pids = subprocess.run(["pgrep", "-f", killed], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        if time.monotonic() > deadline:
            break
    p.wait(timeout=30)
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", killed], capture_output=True, text=True).stdout.split()
    if left:
        problems.append(f"processes left after the SIGKILL: {left}")
        subprocess.run(["pkill", "-9", "-f", killed])
    if "model-15" not in seen:
        problems.append("the killed run never saved epoch 1")
    rc, out = run(command(killed))
    sums = checksums(out)
    resumed = re.findall(r"Start Epoch (\d+)", out)
    print(f"resumed run: exit {rc}, epochs started {resumed}, checksums {sums}")
    if rc != 0 or len(sums) != 2 or len(set(sums.values())) != 1:
        problems.append("the resumed run did not end with identical variables on both ranks")
        print(out[-4000:])
    if sums and set(sums.values()) != set(straight_sums.values()):
        problems.append(f"the resumed run ended with other variables than the straight run: "
                        f"{sums} vs {straight_sums}")
    if sorted(resumed) != ["2", "2", "3", "3"]:
        problems.append(f"both ranks should run epochs 2 and 3 after the resume, got {resumed}")
    for p in problems:
        print("FAILED:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

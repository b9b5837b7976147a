#!/usr/bin/env python3
"""A failing rank never leaves the others hanging (ctest runs this; see
tests/CMakeLists.txt): runs `spire_mpi_tests --spire-failure=MODE` under
mpirun, where rank 1 raises (announcing its error), is SIGKILLed, stalls or
exits early while the other ranks wait in an allreduce with a 3 s timeout
(or, "raise-early", rank 1 raises before it makes its communicator while
the others make theirs; or, "trainer", a HorovodTrainer callback raises on rank 1; or, the
"ps-" modes, a DistributedTrainerParameterServer worker raises or is killed,
or its server (rank 0) is killed), and checks that the whole job ends non-zero within a time bound, that every
surviving rank's error names the failed rank, and that no process of the job is left
behind. SIGKILL runs twice: as mpirun does by default ("kill": mpirun
itself ends the others at once and names rank 1) and with mpirun's
--enable-recovery ("kill-recovery": the others run on, and Spire's own
detection ends them, naming rank 1; OpenMPI 4.1's mpirun then exits 0).

usage: rank_failures.py MPIEXEC SPIRE_MPI_TESTS NRANKS [MODE...]
"""
import os
import subprocess
import sys
import time

BOUND_S = {"raise": 10, "raise-early": 10, "kill": 15, "kill-recovery": 20, "stall": 20, "exit": 20, "trainer": 20,
           "ps-raise-worker": 10, "ps-kill-worker": 20, "ps-kill-server": 20}
# The parameter-server trainer's modes (DistributedTrainerParameterServer,
# rank 0 the server): the rank that fails and what every other rank's error
# must say. The kill modes run with --enable-recovery, so Spire's own
# detection ends the job.
PS_MODES = {
    "ps-raise-worker": (1, "rank 1 failed: "),
    "ps-kill-worker": (1, "rank(s) 1"),
    "ps-kill-server": (0, "parameter server rank 0"),
}


def leftovers(tag):
    out = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
    return [p for p in out if int(p) != os.getpid()]


def main():
    mpiexec, binary, nranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    modes = sys.argv[4:] or ["raise", "raise-early", "kill", "kill-recovery", "stall", "exit", "trainer", *PS_MODES]
    failures = []
    for mode in modes:
        flag = f"--spire-failure={mode.replace('-recovery', '')}"
        victim, ps_want = PS_MODES.get(mode, (1, None))
        cmd = [mpiexec, "-np", str(nranks), binary, flag]
        if mode == "kill-recovery" or mode.startswith("ps-kill"):
            # By default mpirun ends every rank as soon as one is killed (and
            # names it: "kill"); with --enable-recovery it lets the others
            # run, so Spire's own detection is what ends them.
            cmd.insert(1, "--enable-recovery")
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode() + (e.stderr or b"").decode(), None
        took = time.monotonic() - start
        problems = []
        if rc is None:
            problems.append("the job hung (killed after 90 s)")
        elif rc == 0 and mode != "kill-recovery" and not mode.startswith("ps-kill"):  # (with recovery, OpenMPI 4.1's mpirun exits 0)
            problems.append("the job exited 0")
        if took > BOUND_S[mode]:
            problems.append(f"the job took {took:.1f} s (bound {BOUND_S[mode]} s)")
        survivors = [r for r in range(nranks) if r != victim]
        if mode == "kill" and "rank 1" not in out:
            problems.append("mpirun did not name rank 1")
        for r in survivors if mode != "kill" else []:
            lines = [l for l in out.splitlines() if l.startswith(f"rank {r}: spire::Error")]
            want = ("rank 1 failed: " if mode in ("raise", "raise-early", "trainer") else "rank 1 did not arrive")
            if ps_want:
                want = ps_want
            if mode in ("raise", "raise-early"):
                want += "the model raised: boom"
            if not any(want in l for l in lines):
                problems.append(f"rank {r} did not report '{want}'")
        time.sleep(0.5)
        left = leftovers(flag)
        if left:
            problems.append(f"processes left behind: {left}")
            subprocess.run(["pkill", "-9", "-f", flag])
        status = "ok" if not problems else "FAILED: " + "; ".join(problems)
        print(f"[{mode}, {nranks} ranks] exit {rc} after {took:.1f} s: {status}")
        if problems:
            print(out)
            failures.append(mode)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

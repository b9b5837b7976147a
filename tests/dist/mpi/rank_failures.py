#!/usr/bin/env python3
"""A failing rank never leaves the others hanging, and a slow one does not
fail the job (ctest runs this; see tests/CMakeLists.txt): runs
`spire_mpi_tests --spire-failure=MODE` under mpirun, where rank 1 raises
(announcing its error), is SIGKILLed, is SIGSTOPped ("stop"), exits early,
or only sleeps ("slow") while the other ranks wait in an allreduce with no
time limit (or, "raise-early", rank 1 raises before it makes its
communicator while the others make theirs; or, "trainer", a HorovodTrainer
callback raises on rank 1; or, "trainer-slow", a chief-only HorovodTrainer
callback sleeps SPIRE_TEST_SLEEP_SECONDS, 125 s by default: twice the 60 s
the others' waits were limited to; or, the "ps-" modes, a
DistributedTrainerParameterServer worker raises or is killed, or its server
(rank 0) is killed). A failure must end the whole job non-zero within a
time bound, every surviving rank's error naming the failed rank, with no
process left behind; the slow modes must end well, the waiting ranks having
logged stall warnings. SIGKILL runs twice: as mpirun does by default
("kill": mpirun itself ends the others at once and names rank 1) and with
mpirun's --enable-recovery ("kill-recovery": the others run on, and Spire's
heartbeats find rank 1 dead). OpenMPI 4.1's mpirun exits 0 under
--enable-recovery whatever its ranks do (even `sh -c 'exit 3'`), so there
the test requires the survivors' own verdict instead: the job ended by
Spire's MPI_Abort.

usage: rank_failures.py MPIEXEC SPIRE_MPI_TESTS NRANKS [MODE...]
(MPIEXEC may carry arguments: "scripts/test_hosts.sh run" runs the jobs
across the test hosts, over TCP.)
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import time

SLEEP_S = float(os.environ.get("SPIRE_TEST_SLEEP_SECONDS", "125"))
BOUND_S = {"pause": 35, "raise": 10, "raise-early": 10, "kill": 15, "kill-recovery": 25, "stop": 25, "exit": 15, "slow": 20,
           "trainer": 20, "trainer-slow": SLEEP_S + 40, "ps-raise-worker": 10, "ps-kill-worker": 25,
           "ps-kill-server": 25}
PAUSE_S = 14  # "pause": longer than the 10 s after which a silent rank is dead
# What each surviving rank's error must say ("" for the slow modes: no error).
WANT = {"raise": "rank 1 failed: the model raised: boom", "raise-early": "rank 1 failed: the model raised: boom",
        "trainer": "rank 1 failed: ", "kill-recovery": "rank 1 stopped responding: no heartbeat",
        "stop": "rank 1 stopped responding: no heartbeat", "exit": "rank 1 finished (its notice that it reached its exit"}
# The environment of each mode's job: short stall checks, so the slow modes
# show their warnings; the low-level slow mode sleeps 8 s, twice the time
# after which a silent rank is dead: the sleeping rank's heartbeats go on.
ENV = {"pause": {"SPIRE_TEST_SLEEP_SECONDS": "20"},
       "slow": {"SPIRE_STALL_CHECK_SECONDS": "2", "SPIRE_TEST_SLEEP_SECONDS": "8", "SPIRE_MPI_DEAD_AFTER_SECONDS": "4"},
       "trainer-slow": {"SPIRE_STALL_CHECK_SECONDS": str(max(1, SLEEP_S // 4)), "SPIRE_TEST_SLEEP_SECONDS": str(SLEEP_S)}}
# The parameter-server trainer's modes (DistributedTrainerParameterServer,
# rank 0 the server): the rank that fails and what every other rank's error
# must say. The kill modes run with --enable-recovery, so Spire's own
# detection ends the job.
PS_MODES = {
    "ps-raise-worker": (1, "rank 1 failed: "),
    "ps-kill-worker": (1, "rank 1 stopped responding: no heartbeat"),
    "ps-kill-server": (0, "rank 0 stopped responding: no heartbeat"),
}


def leftovers(tag):
    out = subprocess.run(["pgrep", "-f", "--", tag], capture_output=True, text=True).stdout.split()
    return [p for p in out if int(p) != os.getpid()]


def main():
    mpiexec, binary, nranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    modes = sys.argv[4:] or ["raise", "raise-early", "kill", "kill-recovery", "stop", "exit", "slow", "pause",
                             "trainer", "trainer-slow", *PS_MODES]
    failures = []
    for mode in modes:
        job = []
        flag = f"--spire-failure={mode.replace('-recovery', '')}"
        victim, ps_want = PS_MODES.get(mode, (1, None))
        recovery = mode == "kill-recovery" or mode.startswith("ps-kill")
        slow = mode in ("slow", "trainer-slow", "pause")
        # By default mpirun ends every rank as soon as one is killed (and
        # names it: "kill"); with --enable-recovery it lets the others run,
        # so Spire's own detection is what ends them.
        cmd = [*shlex.split(mpiexec), *(["--enable-recovery"] if recovery else []), "-np", str(nranks), binary, flag]
        limit = BOUND_S[mode] + 60
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **ENV.get(mode, {})})
        if mode == "pause":
            # The whole job (mpirun and every rank) stopped for longer than a
            # silent rank takes to be dead, then continued, as a batch
            # system suspends and resumes a job: a rank resumed first must
            # not take its still stopped neighbour for dead.
            time.sleep(3)
            job = leftovers(flag)
            for pid in job:
                os.kill(int(pid), signal.SIGSTOP)
            time.sleep(PAUSE_S)
            # One by one, 1 s apart, as hosts resume at different times; the
            # ranks before mpirun (started first: the lowest pid), which
            # forwards its SIGCONT to every rank at once.
            for pid in sorted(job, key=int, reverse=True):
                os.kill(int(pid), signal.SIGCONT)
                time.sleep(1)
        try:
            out, _ = proc.communicate(timeout=max(1, limit - (time.monotonic() - start)))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, rc = proc.communicate()[0], None
        took = time.monotonic() - start
        problems = []
        if rc is None:
            problems.append(f"the job hung (killed after {limit:.0f} s)")
        elif slow and rc != 0:
            problems.append(f"the job exited {rc}")
        elif not slow and not recovery and rc == 0:
            problems.append("the job exited 0")
        if recovery and "ending every rank with MPI_Abort" not in out:
            problems.append("no survivor ended the job with MPI_Abort")
        if took > BOUND_S[mode]:
            problems.append(f"the job took {took:.1f} s (bound {BOUND_S[mode]} s)")
        survivors = [r for r in range(nranks) if r != victim or mode == "pause"]
        if mode == "kill" and "rank 1" not in out:
            problems.append("mpirun did not name rank 1")
        for r in survivors if mode != "kill" else []:
            if slow:
                if f"rank {r}: no error" not in out:
                    problems.append(f"rank {r} did not end well")
                continue
            lines = [l for l in out.splitlines() if l.startswith(f"rank {r}: spire::Error")]
            want = ps_want or WANT[mode]
            if not any(want in l for l in lines):
                problems.append(f"rank {r} did not report '{want}'")
        if slow and mode != "pause":
            # The slow rank held the others up (its sleep), and they said why.
            if took < float(ENV[mode]["SPIRE_TEST_SLEEP_SECONDS"]):
                problems.append(f"the job took {took:.1f} s, less than the slow rank's sleep")
            waited = ("for rank 1 to make this call" if mode == "slow"
                      else "for rank 0 (the coordinator) to hear from every rank")
            if not any("has waited" in l and waited in l for l in out.splitlines()):
                problems.append(f"no stall warning '... has waited N s {waited}'")
            sums = set(re.findall(r"checksum (\S+)", out))
            if mode == "trainer-slow" and len(sums) != 1:
                problems.append(f"the ranks ended with different variables: {sums}")
        time.sleep(0.5)
        left = leftovers(flag)
        if left:
            problems.append(f"processes left behind: {left}")
            subprocess.run(["pkill", "-9", "-f", "--", flag])
        if mode == "pause" and len(job) < nranks:
            problems.append(f"the harness found {len(job)} processes of the job to stop")
        status = "ok" if not problems else "FAILED: " + "; ".join(problems)
        print(f"[{mode}, {nranks} ranks] exit {rc} after {took:.1f} s: {status}")
        if problems:
            print(out)
            failures.append(mode)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

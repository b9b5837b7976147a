"""Loads a Chrome trace JSON file with Python's json module and checks the Trace Event
Format fields Perfetto and chrome://tracing read. Prints "process <name>", "lane <tid>
<name>" per named lane, and "run <id> <events> <first ts> <last end>" per run; exits 1
(with the reason) on a malformed file."""
import json
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: check_chrome_trace.py FILE", file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    lanes, runs, process = {}, {}, None
    for e in events:
        if e["ph"] == "M":
            if e["name"] == "process_name":
                process = e["args"]["name"]
            elif e["name"] == "thread_name":
                lanes[e["tid"]] = e["args"]["name"]
            continue
        if e["ph"] != "X":
            raise SystemExit("unexpected phase %r" % e["ph"])
        for key in ("name", "cat", "ts", "dur", "pid", "tid", "args"):
            if key not in e:
                raise SystemExit("event without %r: %r" % (key, e))
        if not isinstance(e["ts"], (int, float)) or e["dur"] < 0:
            raise SystemExit("bad time in %r" % e)
        if e["tid"] not in lanes:
            raise SystemExit("event on an unnamed lane: %r" % e)
        run = e["args"]["run"]
        n, lo, hi = runs.get(run, (0, float("inf"), 0.0))
        runs[run] = (n + 1, min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    print("process", process)
    for tid in sorted(lanes):
        print("lane", tid, lanes[tid])
    for run in sorted(runs):
        n, lo, hi = runs[run]
        print("run", run, n, "%.3f" % lo, "%.3f" % hi)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How much of a step's gradient allreduces overlap its compute, from Spire's Chrome traces
(the Timeline callback's timeline-rank<r>.json, the examples' --timeline flag).

Per traced run: the step's time (first event to last), the number of allreduces, when the
first gradient bucket's allreduce starts, and the allreduces' time (their nodes' intervals,
waiting for the other ranks included) split into the part that overlaps compute on the
main lane and the part exposed (nothing else runs). Prints one line per run, or with
--summary one line of medians.

Usage: python3 bench/trace_overlap.py [--summary] [--label L] FILE...
"""
import argparse
import json
import statistics


def union(intervals):
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def length(intervals):
    return sum(hi - lo for lo, hi in intervals)


def intersect(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append([lo, hi])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def runs_of(path):
    with open(path) as f:
        doc = json.load(f)
    lanes, runs = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                lanes[e["tid"]] = e["args"]["name"]
            continue
        runs.setdefault(e["args"]["run"], []).append(e)
    out = []
    for run, events in sorted(runs.items()):
        start = min(e["ts"] for e in events)
        end = max(e["ts"] + e["dur"] for e in events)
        reduces = [e for e in events if e["cat"] == "AllReduce"]
        if not reduces:
            continue
        comm_tids = {e["tid"] for e in reduces}
        compute = union([e["ts"], e["ts"] + e["dur"]] for e in events
                        if e["tid"] not in comm_tids and e["cat"] != "collective")
        comm = union([e["ts"], e["ts"] + e["dur"]] for e in reduces)
        buckets = sorted((e for e in reduces if "bucket" in e["name"]), key=lambda e: e["ts"])
        transfer = sum(e["dur"] for e in events if e["name"].endswith(".transfer"))
        overlapped = length(intersect(comm, compute))
        out.append({
            "run": run,
            "step_ms": (end - start) / 1e3,
            "allreduces": len(reduces),
            "buckets": len(buckets),
            "first_bucket_ms": ((buckets[0]["ts"] - start) / 1e3) if buckets else float("nan"),
            "compute_end_ms": (compute[-1][1] - start) / 1e3 if compute else float("nan"),
            "comm_ms": length(comm) / 1e3,
            "transfer_ms": transfer / 1e3,
            "overlapped_ms": overlapped / 1e3,
            "exposed_ms": (length(comm) - overlapped) / 1e3,
        })
    return out


COLUMNS = ["step_ms", "allreduces", "buckets", "first_bucket_ms", "comm_ms", "transfer_ms",
           "overlapped_ms", "exposed_ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--summary", action="store_true", help="one line of medians over all runs")
    p.add_argument("--label", default="", help="first column of the summary line")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    rows = [r for path in args.files for r in runs_of(path)]
    if not rows:
        raise SystemExit("trace_overlap: no run with an allreduce in " + " ".join(args.files))
    if args.summary:
        med = {c: statistics.median(r[c] for r in rows) for c in COLUMNS}
        print(args.label, len(rows), " ".join("%.1f" % med[c] for c in COLUMNS))
        return
    print("run", " ".join(COLUMNS))
    for r in rows:
        print(r["run"], " ".join("%.1f" % r[c] for c in COLUMNS))


if __name__ == "__main__":
    main()

"""bench/trace_overlap.py on a hand-made Chrome trace (ctest trace_overlap): the step's span,
the allreduces and buckets counted, the first bucket's start, and the allreduce time split
into the part that overlaps compute on the main lane and the part exposed, to the
microsecond; a trace without allreduces is an error saying so."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import trace_overlap  # noqa: E402


def event(name, cat, tid, ts, dur, run=1):
    return {"ph": "X", "pid": 0, "tid": tid, "name": name, "cat": cat, "ts": ts, "dur": dur,
            "args": {"device": "cpu", "run": run}}


class TraceOverlap(unittest.TestCase):
    def write(self, events):
        doc = {"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "cpu"}},
                               {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "cpu (2)"}}]
               + events}
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(doc, f)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_overlap_and_exposure(self):
        # Compute on lane 0 from 1000 to 1100 us and 1150 to 1200 us; bucket 0 on lane 1 from
        # 1040 to 1120 (60 us over compute, 20 exposed), bucket 1 from 1190 to 1230 (10 + 30),
        # with a transfer event inside bucket 0 (not compute).
        path = self.write([
            event("conv", "Conv2D", 0, 1000, 100), event("apply", "ApplyMomentum", 0, 1150, 50),
            event("AllReduce/bucket0/allreduce", "AllReduce", 1, 1040, 80),
            event("allreduce.transfer", "collective", 1, 1060, 50),
            event("AllReduce/bucket1/allreduce", "AllReduce", 1, 1190, 40),
            event("other run", "Conv2D", 0, 5000, 10, run=2),
        ])
        rows = trace_overlap.runs_of(path)
        self.assertEqual(len(rows), 1)  # run 2 has no allreduce
        r = rows[0]
        self.assertAlmostEqual(r["step_ms"], 0.230)
        self.assertEqual(r["allreduces"], 2)
        self.assertEqual(r["buckets"], 2)
        self.assertAlmostEqual(r["first_bucket_ms"], 0.040)
        self.assertAlmostEqual(r["comm_ms"], 0.120)
        self.assertAlmostEqual(r["transfer_ms"], 0.050)
        self.assertAlmostEqual(r["overlapped_ms"], 0.070)
        self.assertAlmostEqual(r["exposed_ms"], 0.050)

    def test_no_allreduce_is_an_error(self):
        path = self.write([event("conv", "Conv2D", 0, 0, 10)])
        sys.argv = ["trace_overlap.py", path]
        with self.assertRaises(SystemExit) as e:
            trace_overlap.main()
        self.assertIn("no run with an allreduce", str(e.exception))


if __name__ == "__main__":
    unittest.main()

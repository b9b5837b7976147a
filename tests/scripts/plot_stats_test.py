#!/usr/bin/env python3
"""Tests of scripts/plot_stats.py (ctest runs this): the per-epoch series it
reads from a trainer's stats.json, its clear errors on a missing or broken
file, and (where matplotlib is installed; skipped, saying so, elsewhere)
the PNG it writes."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
import plot_stats  # noqa: E402

STATS = [
    {"epoch_num": 2, "global_step": 20, "total_cost": 0.5, "cross_entropy_loss": 0.4,
     "validation_accuracy": 0.9, "accuracy": 0.88},
    {"epoch_num": 1, "global_step": 10, "total_cost": 0.9, "cross_entropy_loss": 0.8,
     "validation_accuracy": 0.7, "validation_cross_entropy_loss": 0.85, "learning_rate": 0.1},
    {"global_step": 25, "total_cost": 0.3},  # no epoch: skipped
]


class PlotStats(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(self.dir.name, "stats.json"), "w") as f:
            json.dump(STATS, f)

    def tearDown(self):
        self.dir.cleanup()

    def test_series_in_epoch_order(self):
        s = plot_stats.series(plot_stats.read_stats(self.dir.name))
        self.assertEqual(s["total_cost"], [(1, 0.9), (2, 0.5)])
        self.assertEqual(s["validation_accuracy"], [(1, 0.7), (2, 0.9)])
        self.assertEqual(s["validation_cross_entropy_loss"], [(1, 0.85)])
        self.assertEqual(s["accuracy"], [(2, 0.88)])
        self.assertNotIn("learning_rate", s)

    def test_resnet_example_names(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "stats.json"), "w") as f:
                json.dump([{"epoch_num": 1, "xentropy-loss": 0.06, "val-error-top1": 0.14,
                            "learning_rate": 0.1},
                           {"epoch_num": 2, "xentropy-loss": 0.05, "val-error-top1": 0.02}], f)
            s = plot_stats.series(plot_stats.read_stats(d))
            self.assertEqual(s["xentropy-loss"], [(1, 0.06), (2, 0.05)])
            self.assertEqual(s["val-error-top1"], [(1, 0.14), (2, 0.02)])
            self.assertNotIn("learning_rate", s)

    def test_missing_and_broken_files_are_clear_errors(self):
        with tempfile.TemporaryDirectory() as empty:
            with self.assertRaises(SystemExit) as e:
                plot_stats.read_stats(empty)
            self.assertIn("no ", str(e.exception))
            with open(os.path.join(empty, "stats.json"), "w") as f:
                f.write("[{")
            with self.assertRaises(SystemExit) as e:
                plot_stats.read_stats(empty)
            self.assertIn("not valid JSON", str(e.exception))

    @unittest.skipIf(importlib.util.find_spec("matplotlib") is None,
                     "matplotlib is not installed (scripts/install_deps.sh installs it)")
    def test_writes_a_png(self):
        out = os.path.join(self.dir.name, "curve.png")
        r = subprocess.run([sys.executable, "-B", os.path.join(SCRIPTS, "plot_stats.py"), self.dir.name,
                            "--out", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertIn("0.9", r.stdout)


if __name__ == "__main__":
    unittest.main()

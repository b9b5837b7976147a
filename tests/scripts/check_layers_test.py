#!/usr/bin/env python3
"""Tests of scripts/check_layers.py (ctest runs this): the repository's own
tree passes, and a copy of it with one planted upward include (or sideways
between the two dist libraries, or into the tests) fails, naming the file,
the line and both layers."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "check_layers.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import check_layers  # noqa: E402


def run(root):
    return subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)


class CheckLayers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.clean = os.path.join(cls.tmp.name, "clean")
        for top in check_layers.top_folders():
            shutil.copytree(os.path.join(REPO, top), os.path.join(cls.clean, top))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def planted(self, path, line):
        """A copy of the tree with `line` added after the first #include of `path`."""
        root = tempfile.mkdtemp(dir=self.tmp.name)
        shutil.rmtree(root)
        shutil.copytree(self.clean, root)
        full = os.path.join(root, path)
        with open(full) as f:
            lines = f.read().split("\n")
        first = next(i for i, l in enumerate(lines) if l.startswith("#include"))
        lines.insert(first + 1, line)
        with open(full, "w") as f:
            f.write("\n".join(lines))
        return root, first + 2

    def test_the_repository_passes(self):
        r = run(REPO)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(run(self.clean).returncode, 0)

    def test_core_including_train_fails(self):
        root, line = self.planted("core/graph.h", '#include "train/trainer.h"')
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"core/graph.h:{line}: core includes train/trainer.h of train", r.stderr)

    def test_kernels_including_autograd_fails(self):
        root, line = self.planted("kernels/cpu/gemm.cc", '#  include "autograd/gradients.h"')
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"kernels/cpu/gemm.cc:{line}: kernels includes autograd/gradients.h", r.stderr)

    def test_communication_including_a_trainer_fails(self):
        root, line = self.planted("dist/comm/in_process_ring.cc",
                                  '#include "dist/trainers/horovod_trainer.h"')
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"dist/comm/in_process_ring.cc:{line}: dist/comm includes "
                      "dist/trainers/horovod_trainer.h of dist/trainers", r.stderr)
        # Communication may not include train/ either (it sits on core and kernels only).
        root, line = self.planted("dist/mpi/mpi_communicator.cc", '#include "train/trainer.h"')
        self.assertIn(f"dist/mpi/mpi_communicator.cc:{line}: dist/mpi includes train/trainer.h",
                      run(root).stderr)

    def test_a_library_file_including_a_test_header_fails(self):
        root, line = self.planted("layers/layers.cc", '#include "tests/support/temp_dir.h"')
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"layers/layers.cc:{line}: layers includes tests/support/temp_dir.h", r.stderr)

    def test_relative_and_angle_includes_fail(self):
        # A relative path would hide the layer (and the install would not rewrite it).
        root, line = self.planted("core/graph.cc", '#include "../train/trainer.h"')
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f'core/graph.cc:{line}: includes "../train/trainer.h" by a relative path', r.stderr)
        root, line = self.planted("layers/layers.cc", "#include <core/graph.h>")
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"layers/layers.cc:{line}: includes <core/graph.h>", r.stderr)
        # System headers in angle brackets stay fine.
        root, _ = self.planted("layers/layers.cc", "#include <vector>")
        self.assertEqual(run(root).returncode, 0)

    def test_other_source_extensions_are_checked(self):
        root = tempfile.mkdtemp(dir=self.tmp.name)
        shutil.rmtree(root)
        shutil.copytree(self.clean, root)
        with open(os.path.join(root, "kernels", "cpu", "planted.inl"), "w") as f:
            f.write('#include "layers/layers.h"\n')
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("kernels/cpu/planted.inl:1: kernels includes layers/layers.h", r.stderr)

    def test_downward_includes_pass(self):
        root, _ = self.planted("dist/trainers/horovod_trainer.cc", '#include "kernels/functors.h"')
        self.assertEqual(run(root).returncode, 0)
        root, _ = self.planted("layers/layers.cc", '#include "autograd/gradients.h"')
        self.assertEqual(run(root).returncode, 0)

    def test_an_empty_tree_is_an_error_not_a_pass(self):
        empty = tempfile.mkdtemp(dir=self.tmp.name)
        self.assertEqual(run(empty).returncode, 2)

    def test_every_layer_reaches_core(self):
        for layer in check_layers.LAYERS:
            self.assertIn("core", check_layers.reachable(layer), layer)


if __name__ == "__main__":
    unittest.main()

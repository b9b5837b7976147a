#!/usr/bin/env python3
"""spire.h is the whole public API (ctest runs this): every header of core/,
autograd/, layers/, train/ and dist/ is reached from spire.h's #include
lines (directly or through another header, #if guards included), except the
internals listed below (and all of kernels/), which spire.h must not
include directly. A new header thus needs a decision: into spire.h, or onto
this list."""
import os
import re
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PUBLIC_FOLDERS = ["core", "autograd", "layers", "train", "dist"]
# Internal headers (spire.h's comment says why each is left out).
INTERNAL = {
    "core/executor.h",
    "core/step_order.h",
    "core/caching_allocator.h",
    "core/ops/op_util.h",
    "layers/layer_util.h",
    "layers/variable_store.h",
    "dist/comm/ring_device.h",
    "dist/comm/ring_schedule.h",
    "core/enum_names.h",
    "dist/mpi/mpi_internal.h",
    "dist/mpi/mpi_waits.h",
    "dist/trainers/gradient_buckets.h",
    "dist/trainers/master_sync.h",
    "dist/trainers/ps_protocol.h",
    "dist/trainers/ps_server.h",
    "dist/trainers/ps_worker.h",
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def includes(path):
    with open(os.path.join(REPO, path)) as f:
        return [m.group(1) for m in map(INCLUDE.match, f) if m]


def closure(start):
    seen, todo = set(), [start]
    while todo:
        h = todo.pop()
        for inc in includes(h):
            if inc not in seen and os.path.exists(os.path.join(REPO, inc)):
                seen.add(inc)
                todo.append(inc)
    return seen


def headers():
    out = set()
    for top in PUBLIC_FOLDERS:
        for d, _, files in os.walk(os.path.join(REPO, top)):
            out |= {os.path.relpath(os.path.join(d, f), REPO) for f in files if f.endswith(".h")}
    return out


class UmbrellaHeader(unittest.TestCase):
    def test_every_public_header_is_reached(self):
        missing = sorted(headers() - INTERNAL - closure("spire.h"))
        self.assertEqual(missing, [], "headers neither reached from spire.h nor listed as internal "
                         "in tests/scripts/umbrella_header_test.py")

    def test_no_internal_header_included_directly(self):
        direct = set(includes("spire.h"))
        self.assertEqual(sorted(direct & INTERNAL), [])
        self.assertEqual(sorted(h for h in direct if h.startswith("kernels/")), [])

    def test_internal_list_is_current(self):
        self.assertEqual(sorted(INTERNAL - headers()), [], "INTERNAL names headers that are gone")


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""Fails when a source file of Spire includes a header of a layer above its own.

The layers and what each may include are written once, below (LAYERS); a
layer may include its own headers and those of every layer it reaches
through DEPS. The libraries in CMakeLists.txt link along the same edges.
Each file under a layer's folder is checked: every `#include "x/y.h"` of a
Spire header must name a layer it may use, and Spire's headers are named
only that way (not `<core/graph.h>`, not `"../core/graph.h"`: the install
rewrites "layer/..." and nothing else, and the check could not tell the
layer). Programs outside the layers (tests/, bench/, examples/, fuzz/,
spire.h) may include anything.

  python3 scripts/check_layers.py [--root DIR]

prints each upward include as `file:line: <layer> includes <header> of
<layer>` and exits 1 when there is one (2 when the tree has no layers).
"""
import argparse
import os
import re
import sys

# layer folder -> the layers it builds on directly (bottom to top).
LAYERS = {
    "core": [],
    "kernels": ["core"],
    "autograd": ["core"],
    "layers": ["autograd", "kernels"],
    "train": ["layers"],
    # dist/ is two libraries: communication (spire_comm) ...
    "dist/comm": ["kernels"],
    "dist/nccl": ["dist/comm"],
    "dist/mpi": ["dist/comm", "dist/nccl"],
    "dist/ops": ["dist/comm", "dist/nccl"],
    # ... and the trainers (spire_trainers).
    "dist/trainers": ["train", "dist/ops", "dist/mpi"],
}

SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".inl", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ANGLE_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>')


def reachable(layer):
    """The layers `layer` may include: itself and everything below it."""
    seen, todo = set(), [layer]
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        todo.extend(LAYERS[cur])
    return seen


def layer_of(path):
    """The layer a repository-relative path belongs to (longest folder), or None."""
    best = None
    for layer in LAYERS:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def top_folders():
    return sorted({layer.split("/")[0] for layer in LAYERS})


def check(root):
    """Returns the list of violations (strings) under `root`."""
    problems = []
    found_any = False
    for top in top_folders():
        base = os.path.join(root, top)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                found_any = True
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                own = layer_of(rel)
                if own is None:
                    problems.append(f"{rel}: in no layer (add its folder to LAYERS in {__file__})")
                    continue
                allowed = reachable(own)
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        a = ANGLE_INCLUDE.match(line)
                        if a and layer_of(a.group(1)) is not None:
                            problems.append(f"{rel}:{lineno}: includes <{a.group(1)}>: name Spire's "
                                            f'headers as "{a.group(1)}"')
                            continue
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        header = m.group(1)
                        if header.startswith(("../", "./")) or "/../" in header:
                            problems.append(f"{rel}:{lineno}: includes \"{header}\" by a relative path: "
                                            "name Spire's headers from the repository root")
                            continue
                        if "/" not in header:
                            continue  # a header beside the file
                        target = layer_of(header)
                        if target is None:
                            if header.split("/")[0] in ("tests", "bench", "examples", "fuzz"):
                                problems.append(f"{rel}:{lineno}: {own} includes {header}, "
                                                "which is not part of the library")
                            continue  # a system or third-party header
                        if target not in allowed:
                            problems.append(f"{rel}:{lineno}: {own} includes {header} of {target}, "
                                            f"a layer above it or beside it ({own} may use: "
                                            f"{', '.join(sorted(allowed))})")
    if not found_any:
        return None
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the source tree to check (default: this repository)")
    args = ap.parse_args()
    problems = check(os.path.abspath(args.root))
    if problems is None:
        print(f"check_layers: no source files under {args.root}", file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layering", file=sys.stderr)
        return 1
    print("check_layers: every include points down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())

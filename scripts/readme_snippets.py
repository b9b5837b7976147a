#!/usr/bin/env python3
"""Compiles and runs every C++ snippet of README.md against an installed Spire.

The ctest test `readme_snippets` runs this script: it installs the build tree
into a scratch prefix (`cmake --install`), writes one small CMake project
that finds the package with find_package(Spire) and has one executable per
snippet, builds them all in one build (so the snippets compile side by side,
-j2), and runs each. Every failure names the README line of its block and
shows the compiler's or the program's output; the script then exits 1.

The convention (what README writers follow)
------------------------------------------

Only fenced blocks tagged exactly ```cpp are extracted (```sh and the others
are not; a block tagged c++, cc, cxx or C++ is an error: tag it cpp).
A block may be indented (inside a list item): the fence's indentation is
removed from its lines.

* A block containing `int main(` is a complete program, compiled as is.

* Any other block is a fragment. Its `#include` lines are hoisted to the
  top of the file; the rest becomes the body of main() in a harness that has
  `#include <spire.h>`, `using namespace spire;`, and the prelude
  tests/readme/snippet_prelude.h, which defines a ready TrainConfig:

      TrainConfig config = spire_readme::tiny_config();  // then the fragment

  (a linear classifier on 32 in-memory datapoints in batches of 4, 1 epoch,
  no callbacks, monitors or log directory), so a trainer fragment such as

      SyncMultiGPUTrainerReplicated trainer(parse_device_list("cpu:0,cpu:1"));
      launch_train_with_config(config, trainer);

  trains for real in a moment. A fragment thus cannot name a variable
  `config` of its own, and must be valid C++ inside a function: write
  `// ...` for elided code, never a bare `...`. A spire::Error (any
  exception) escaping the fragment fails it.

* An HTML comment on the line right before the opening fence changes how the
  snippet runs:

      <!-- snippet: mpirun -np N -->   run under mpirun with N ranks (with
                                       OpenMPI's environment for running as
                                       root and oversubscribing, as the MPI
                                       tests); skipped, saying so, when the
                                       build has no MPI (no --mpiexec)
      <!-- snippet: skip-run -->       compile only (e.g. GPU snippets: they
                                       need a GPU)

  Any other `<!-- snippet: ... -->` text is an error.

Compiler messages point into README.md itself (each generated file carries
`#line` directives), so `README.md:123: error: ...` is the README's line 123.

Usage
-----

    python3 scripts/readme_snippets.py --build-dir build [--work-dir DIR]
        [--readme README.md] [--mpiexec /usr/bin/mpiexec] [--cxx-flags FLAGS]
        [--jobs 2] [--timeout 300]
    python3 scripts/readme_snippets.py --list        # what would run, and how

--prefix PREFIX uses an existing installation instead of installing
--build-dir. --cxx-flags are added to the compile and link flags (the
sanitizers the library was built with). Exit status: 0 when every snippet
compiled and ran (or was skipped, saying why), 1 otherwise, 2 for bad
arguments or a README that breaks the convention.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRELUDE_DIR = os.path.join(ROOT, "tests", "readme")

FENCE_OPEN = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)\s*$")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")
ANNOTATION = re.compile(r"^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$")
MPIRUN = re.compile(r"^mpirun\s+-np\s+([1-9][0-9]*)$")
WRONG_TAGS = {"c++", "cc", "cxx", "C++", "CPP", "Cpp"}

# OpenMPI's settings for running as root, more ranks than cores, and inside
# containers (as tests/CMakeLists.txt sets for the MPI tests).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}


class ConventionError(Exception):
    """The README breaks the convention (names the line)."""


class Snippet:
    """One ```cpp block: `line` is the README line of its opening fence,
    `first` that of its first code line; `kind` "program" or "fragment";
    `run` "run", "skip-run" or "mpirun"; `ranks` for mpirun."""

    def __init__(self, line, first, code_lines, run="run", ranks=0):
        self.line = line
        self.first = first
        self.code_lines = code_lines
        self.kind = "program" if any("int main(" in l for l in code_lines) else "fragment"
        self.run = run
        self.ranks = ranks

    @property
    def name(self):
        return "snippet_line%d" % self.line

    def describe(self):
        how = {"run": "run", "skip-run": "compile only",
               "mpirun": "run under mpirun -np %d" % self.ranks}[self.run]
        return "%s, %s" % (self.kind, how)


def parse_annotation(text, where):
    if text == "skip-run":
        return "skip-run", 0
    m = MPIRUN.match(text)
    if m:
        return "mpirun", int(m.group(1))
    raise ConventionError("%s: unknown snippet annotation '%s' (expected 'skip-run' or "
                          "'mpirun -np N')" % (where, text))


def extract(text, readme_name="README.md"):
    """The snippets of a README's text, in order (ConventionError on a breach)."""
    lines = text.split("\n")
    snippets = []
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            if ANNOTATION.match(lines[i]):
                nxt = FENCE_OPEN.match(lines[i + 1]) if i + 1 < len(lines) else None
                if not nxt or nxt.group(2) != "cpp":
                    raise ConventionError("%s:%d: a snippet annotation must be on the line right "
                                          "before a ```cpp fence" % (readme_name, i + 1))
            i += 1
            continue
        indent, tag = m.group(1), m.group(2)
        start = i
        i += 1
        body = []
        while i < len(lines) and not FENCE_CLOSE.match(lines[i]):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ConventionError("%s:%d: code block never closed" % (readme_name, start + 1))
        i += 1  # the closing fence
        if tag in WRONG_TAGS:
            raise ConventionError("%s:%d: C++ block tagged '%s': tag it cpp so it is compiled"
                                  % (readme_name, start + 1, tag))
        if tag != "cpp":
            continue
        code = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in body]
        run, ranks = "run", 0
        if start > 0:
            a = ANNOTATION.match(lines[start - 1])
            if a:
                run, ranks = parse_annotation(a.group(1), "%s:%d" % (readme_name, start))
        snippets.append(Snippet(start + 1, start + 2, code, run, ranks))
    return snippets


def c_string(path):
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def source_of(snippet, readme_path):
    """The C++ file compiled for `snippet`; its #line directives point into the README."""
    here = c_string(readme_path)
    head = "// Generated by scripts/readme_snippets.py from %s line %d: do not edit.\n" % (
        os.path.basename(readme_path), snippet.line)
    if snippet.kind == "program":
        return head + "#line %d %s\n" % (snippet.first, here) + "\n".join(snippet.code_lines) + "\n"
    includes, body = [], []
    for k, l in enumerate(snippet.code_lines):
        if l.strip().startswith("#include"):
            includes += ["#line %d %s" % (snippet.first + k, here), l.strip()]
            body.append("")  # keeps the body's lines where the README has them
        else:
            body.append(l)
    out = [head.rstrip("\n")] + includes
    out += [
        '#line 1 "readme_snippet_harness"',
        "#include <spire.h>",
        "",
        "#include <cstdio>",
        "#include <exception>",
        "",
        '#include "snippet_prelude.h"',
        "",
        "using namespace spire;",
        "",
        "int main() {",
        "  try {",
        "    TrainConfig config = spire_readme::tiny_config();",
        "    (void)config;",
        "#line %d %s" % (snippet.first, here),
    ]
    out += body
    out += [
        '#line 1 "readme_snippet_harness_end"',
        "  } catch (const std::exception& e) {",
        '    std::fprintf(stderr, "%%s:%d: the snippet threw: %%s\\n", %s, e.what());' % (
            snippet.line, c_string(os.path.basename(readme_path))),
        "    return 1;",
        "  }",
        "  return 0;",
        "}",
        "",
    ]
    return "\n".join(out)


def cmake_project(snippets):
    out = [
        "# Generated by scripts/readme_snippets.py: one executable per README snippet.",
        "cmake_minimum_required(VERSION 3.22)",
        "project(spire_readme_snippets LANGUAGES CXX)",
        "set(CMAKE_CXX_STANDARD 17)",
        "set(CMAKE_CXX_STANDARD_REQUIRED ON)",
        "find_package(Spire 0.1 REQUIRED)",
    ]
    for s in snippets:
        out.append("add_executable(%s %s.cc)" % (s.name, s.name))
        out.append("target_include_directories(%s PRIVATE %s)" % (s.name, cmake_path(PRELUDE_DIR)))
        out.append("target_link_libraries(%s PRIVATE Spire::spire)" % s.name)
    return "\n".join(out) + "\n"


def cmake_path(p):
    return '"' + p.replace("\\", "/") + '"'


def write_if_changed(path, text):
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    with open(path, "w") as f:
        f.write(text)


def run(cmd, timeout=None, env=None, cwd=None):
    """(returncode, combined output, seconds); returncode None on timeout."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        rc = None
    return rc, out.decode("utf-8", "replace"), time.monotonic() - t0


def step(cmd, what):
    rc, out, _ = run(cmd)
    if rc != 0:
        sys.stderr.write("%s failed (exit %s): %s\n%s\n" % (what, rc, " ".join(cmd), out))
        sys.exit(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--build-dir", help="the Spire build tree to install")
    ap.add_argument("--prefix", help="an existing Spire installation (instead of --build-dir)")
    ap.add_argument("--work-dir", help="scratch directory (default: <build-dir>/readme_snippets)")
    ap.add_argument("--mpiexec", default="", help="mpirun of the build's MPI; none: MPI snippets skip")
    ap.add_argument("--cxx-flags", default="", help="extra compile and link flags (sanitizers)")
    ap.add_argument("--cxx-compiler", default="",
                    help="the C++ compiler Spire was built with (a sanitizer build's runtime must match)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per snippet run")
    ap.add_argument("--list", action="store_true", help="list the snippets and exit")
    args = ap.parse_args(argv)

    readme = os.path.abspath(args.readme)
    with open(readme) as f:
        text = f.read()
    try:
        snippets = extract(text, os.path.basename(readme))
    except ConventionError as e:
        sys.stderr.write("%s\n" % e)
        return 2
    rel = os.path.basename(readme)
    if args.list:
        for s in snippets:
            print("%s:%d: %s" % (rel, s.line, s.describe()))
        return 0
    if not snippets:
        sys.stderr.write("%s: no ```cpp blocks found (did the fences change?)\n" % rel)
        return 2
    if not args.prefix and not args.build_dir:
        ap.error("give --build-dir (to install) or --prefix (an installation)")
    work = os.path.abspath(args.work_dir or os.path.join(args.build_dir, "readme_snippets"))
    os.makedirs(work, exist_ok=True)
    t_start = time.monotonic()

    # The snippets to build; MPI ones skip without MPI.
    skipped = []
    build = []
    for s in snippets:
        if s.run == "mpirun" and not args.mpiexec:
            skipped.append((s, "needs MPI, and no --mpiexec was given (ctest gives it when the "
                               "build has MPI: this one has SPIRE_MPI=OFF)"))
        else:
            build.append(s)

    prefix = os.path.abspath(args.prefix) if args.prefix else os.path.join(work, "prefix")
    if not args.prefix:
        step(["cmake", "--install", args.build_dir, "--prefix", prefix], "installing the build tree")

    project = os.path.join(work, "project")
    os.makedirs(project, exist_ok=True)
    for f in os.listdir(project):  # snippets gone from the README
        if f.startswith("snippet_line") and f.endswith(".cc") and f[:-3] not in {s.name for s in build}:
            os.remove(os.path.join(project, f))
    for s in build:
        write_if_changed(os.path.join(project, s.name + ".cc"), source_of(s, readme))
    write_if_changed(os.path.join(project, "CMakeLists.txt"), cmake_project(build))

    bdir = os.path.join(work, "build")
    ninja = shutil.which("ninja")
    configure = ["cmake", "-S", project, "-B", bdir, "-DCMAKE_PREFIX_PATH=" + prefix,
                 "-DCMAKE_BUILD_TYPE=", "-DCMAKE_CXX_FLAGS=" + args.cxx_flags,
                 # As linkers that drop libraries no symbol is taken from (Ubuntu's default).
                 "-DCMAKE_EXE_LINKER_FLAGS=%s -Wl,--as-needed" % args.cxx_flags]
    if args.cxx_compiler:
        configure.append("-DCMAKE_CXX_COMPILER=" + args.cxx_compiler)
    if ninja and not os.path.exists(os.path.join(bdir, "CMakeCache.txt")):
        configure += ["-G", "Ninja"]
    step(configure, "configuring the snippets' project")
    with open(os.path.join(bdir, "CMakeCache.txt")) as f:
        uses_ninja = "CMAKE_GENERATOR:INTERNAL=Ninja" in f.read()
    keep_going = ["-k", "0"] if uses_ninja else ["-k"]
    t0 = time.monotonic()
    rc, out, _ = run(["cmake", "--build", bdir, "-j", str(args.jobs), "--"] + keep_going)
    t_build = time.monotonic() - t0

    failures = []
    results = []
    for s in build:
        exe = os.path.join(bdir, s.name)
        where = "%s:%d (%s)" % (rel, s.line, s.describe())
        if rc != 0 or not os.path.exists(exe):
            # Builds this one alone for its own messages (the others are done).
            brc, bout, _ = run(["cmake", "--build", bdir, "--target", s.name])
            if brc != 0 or not os.path.exists(exe):
                failures.append("%s: does not compile:\n%s" % (where, bout if brc != 0 else out))
                continue
        if s.run == "skip-run":
            results.append("%s: compiled (not run)" % where)
            continue
        env = dict(os.environ)
        cmd = [exe]
        if s.run == "mpirun":
            for k, v in MPI_ENV.items():
                env.setdefault(k, v)
            cmd = [args.mpiexec, "-np", str(s.ranks), exe]
        prc, pout, secs = run(cmd, timeout=args.timeout, env=env, cwd=work)
        if prc is None:
            failures.append("%s: still running after %g s (killed); its output:\n%s" % (
                where, args.timeout, pout))
        elif prc != 0:
            failures.append("%s: exited with status %d; its output:\n%s" % (where, prc, pout))
        else:
            results.append("%s: ok (ran in %.1f s)" % (where, secs))

    for s, why in skipped:
        results.append("%s:%d (%s): skipped: %s" % (rel, s.line, s.describe(), why))
    for r in results:
        print(r)
    total = time.monotonic() - t_start
    if failures:
        for f in failures:
            sys.stdout.write("\nFAILED %s\n" % f.rstrip("\n"))
        print("\n%d of %d README snippets failed (build %.0f s, total %.0f s)" % (
            len(failures), len(snippets), t_build, total))
        return 1
    print("%d README snippets: %d compiled, %d skipped (build %.0f s, total %.0f s)" % (
        len(snippets), len(build), len(skipped), t_build, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())

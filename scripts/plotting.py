"""Matplotlib for Spire's plotting scripts (scripts/plot_stats.py,
bench/plot_scaling.py): pyplot() imports it with the file-only Agg backend,
installing it from PyPI first when it is missing (into the user site where
a Debian system python refuses plain pip installs)."""
import importlib
import subprocess
import sys


def pyplot():
    """matplotlib.pyplot, installed if needed; raises RuntimeError saying
    how to install it when that fails."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        print("matplotlib is missing: installing it from PyPI", file=sys.stderr)
        base = [sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"]
        if subprocess.run(base).returncode != 0 and \
                subprocess.run(base + ["--user", "--break-system-packages"]).returncode != 0:
            raise RuntimeError("could not install matplotlib: run `python3 -m pip install matplotlib` "
                               "or `apt-get install python3-matplotlib`")
        import site  # a --user install may have created the user site just now
        site.addsitedir(site.getusersitepackages())
        importlib.invalidate_caches()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt

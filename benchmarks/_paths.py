"""Import paths for the benchmark scripts: corpus.py beside them, and convmem itself.

convmem is the installed package when there is one; a source checkout built in place
(`python setup.py build_ext --inplace`) needs its root on the path instead.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
try:
    import convmem._core  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))


def convmem_pythonpath() -> str:
    """PYTHONPATH for a child process that must import the same convmem as this one: the
    installed package, or the checkout built in place."""
    import convmem

    return str(Path(convmem.__file__).resolve().parent.parent)


def data_dir() -> Path:
    """Where generated corpora, stores and scratch files go: $CONVMEM_BENCH_DATA, else
    $XDG_CACHE_HOME/convmem-bench (~/.cache/convmem-bench); never inside the checkout, so that
    running a benchmark leaves `git status` clean."""
    explicit = os.environ.get("CONVMEM_BENCH_DATA")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "convmem-bench"


def commit() -> str:
    """The checkout's short commit, "+dirty" when it has uncommitted changes to tracked files
    (results from a dirty tree are not the commit's), "" outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""
    return head + ("+dirty" if head and dirty else "")

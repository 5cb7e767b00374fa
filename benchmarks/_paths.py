"""Import paths for the benchmark scripts: corpus.py beside them, and convmem itself.

convmem is the installed package when there is one; a source checkout built in place
(`python setup.py build_ext --inplace`) needs its root on the path instead.
"""
from __future__ import annotations

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

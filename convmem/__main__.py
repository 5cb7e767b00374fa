"""python -m convmem"""
from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path


def _core_missing() -> bool:
    """A source tree whose compiled core was never built (and the pure core not asked for)."""
    if os.environ.get("CONVMEM_PURE", "") not in ("", "0"):
        return False
    core = Path(__file__).resolve().parent / "_core"
    return not any((core / f"codec{suffix}").exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


if __name__ == "__main__":
    if _core_missing():
        sys.stderr.write(f"convmem: the compiled core is not built in {Path(__file__).resolve().parent.parent}: "
                         "run `pip install -e .` there (or use an installed convmem; CONVMEM_PURE=1 runs the "
                         "slow pure-Python core)\n")
        sys.exit(1)
    from convmem.cli import main

    sys.exit(main())

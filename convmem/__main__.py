"""python -m convmem"""
from __future__ import annotations

import sys

from convmem.cli import main

if __name__ == "__main__":
    sys.exit(main())

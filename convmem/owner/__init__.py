"""One store shared by every convmem process on a data directory: the owner serves it over a
Unix socket in the directory (listener.py), the others relay to it and take over when it ends
(shared.py)."""
from __future__ import annotations

from .shared import SharedStore

__all__ = ["SharedStore"]

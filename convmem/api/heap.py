"""Freed heap memory handed back to the system after a step that frees a lot of it at once.

glibc keeps freed chunks below its mmap threshold (which rises, up to 32 MiB, as big blocks are
freed) inside the heap, and returns only the top of it on its own. After rebuild_index at 1M
messages 200 MB of such free memory stayed resident (anonymous RSS 263 MB; 61 MB once trimmed),
after a bulk import of 1M 148 MB (587 MB; 439 once trimmed, in 34 ms). Only those two ask for
it: the trim takes the allocator's locks, which a periodic snapshot's thread must not do while
writes run.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

_looked_up = False
_trim: Callable[[int], int] | None = None


def give_back() -> bool:
    """malloc_trim(0) where the C library has it (glibc); whether it ran."""
    global _looked_up, _trim
    if not _looked_up:
        _looked_up = True
        if sys.platform.startswith("linux"):
            import ctypes  # (lazily: not on the path of a server's first answer)

            try:
                fn = ctypes.CDLL(None).malloc_trim
            except (OSError, AttributeError):  # (musl and others have none)
                fn = None
            if fn is not None:
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
                _trim = fn
    if _trim is None:
        return False
    _trim(0)
    return True

"""Freed heap memory handed back to the system after a step that frees a lot of it at once.

glibc keeps freed chunks below its mmap threshold (which rises, up to 32 MiB, as big blocks are
freed) inside the heap, and returns only the top of it on its own. After rebuild_index at 1M
messages 200 MB of such free memory stayed resident (anonymous RSS 263 MB; 61 MB once trimmed),
after a bulk import of 1M 148 MB (587 MB; 439 once trimmed, in 34 ms). Only those two ask for
it: the trim takes the allocator's locks, which a periodic snapshot's thread must not do while
writes run. A `convmem` process that holds a store also fixes the threshold at 128 KiB
(shared.tune_allocator), so that big blocks never land in the heap; what smaller ones leave is
trimmed here.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # (lazily: not on the path of a server's first answer)

    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # (musl and others have none)
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def give_back() -> bool:
    """malloc_trim(0) where the C library has it (glibc); whether it ran."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True

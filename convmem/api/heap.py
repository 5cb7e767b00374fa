"""Freed heap memory handed back to the system after a step that frees a lot of it at once.

glibc keeps freed chunks below its mmap threshold (which rises, up to 32 MiB, as big blocks are
freed) inside the heap, and returns only the top of it on its own. After rebuild_index at 1M
messages 200 MB of such free memory stayed resident (anonymous RSS 263 MB; 61 MB once trimmed),
after a bulk import of 1M 148 MB (587 MB; 439 once trimmed, in 34 ms). Only those two ask for
it: the trim takes the allocator's locks, which a periodic snapshot's thread must not do while
writes run.

A `convmem` process that holds a store also fixes that threshold at 128 KiB
(map_large_blocks_apart, called by SharedStore as it becomes the owner): a store's arrays grow,
merge and are copied for snapshots by the thousand while an import runs, and with the rising
threshold their holes stayed resident (a 1M import's heap held 184 MB free of 288 before its
close). Not by MemoryStore itself: a library leaves its host's allocator alone.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any


M_MMAP_THRESHOLD = -3  # (glibc's malloc.h)


@functools.cache
def _libc_function(name: str, *argtypes: Any) -> Callable[..., int] | None:
    """The C library's function of that name (returning int), where it has one (glibc)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # (lazily: not on the path of a server's first answer)

    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # (musl and others have none)
        return None
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn


def give_back() -> bool:
    """malloc_trim(0) where the C library has it (glibc); whether it ran."""
    import ctypes

    trim = _libc_function("malloc_trim", ctypes.c_size_t)
    if trim is None:
        return False
    trim(0)
    return True


def map_large_blocks_apart() -> bool:
    """Blocks of 128 KiB and more get a mapping of their own from now on, given back to the
    kernel when freed (mallopt M_MMAP_THRESHOLD), unless free heap memory already holds them:
    the heap no longer grows for them. Whether the C library took it."""
    import ctypes

    mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
    return mallopt is not None and mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1

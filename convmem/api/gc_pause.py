"""A process-wide pause of Python's cyclic garbage collector while a bulk import runs.

An import allocates a few containers a message, and the collector's automatic passes, set off by
allocation counts, traverse the older generations, which grow with the store: their share of
an import grows with its size (`benchmarks/import_scale.py` times both ways; figures in
benchmarks/README.md). The import path makes no reference cycles (a 1M import with the
collector off leaves nothing for gc.collect() to free), so nothing piles up while it is off;
reference counting frees everything as before.

Reentrant and thread-safe: the collector comes back on when the last pause ends, and only if it
was on when the first began (an embedding application that turned it off keeps it off).
"""
from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()

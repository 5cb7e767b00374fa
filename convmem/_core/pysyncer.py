"""Pure-Python twin of convmem._core.syncer: the same API, the flush done in wait().

Nothing overlaps here: wait() calls os.fdatasync itself. The store's behaviour (durable before
acknowledged, OSError on a failed flush) is the same; only the latency differs.
"""
from __future__ import annotations

import os


class Syncer:
    """fdatasync(fd) posted by start() and carried out, and reported, by wait()."""

    def __init__(self) -> None:
        self._fd = -1

    def start(self, fd: int, offset: int = 0, nbytes: int = 0) -> None:
        """Post fdatasync(fd); the compiled module also starts the writeback of the range."""
        if fd < 0 or offset < 0 or nbytes < 0:
            raise ValueError("fd, offset and nbytes must not be negative")
        if self._fd >= 0:
            raise RuntimeError("a flush is already in flight: wait() for it first")
        self._fd = fd

    def wait(self) -> None:
        """fdatasync(fd) now; OSError if it fails."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            raise RuntimeError("no flush is in flight")
        os.fdatasync(fd)  # (EINTR is retried by Python itself)

    @property
    def pending(self) -> bool:
        return self._fd >= 0

    @property
    def nbytes(self) -> int:
        return 0

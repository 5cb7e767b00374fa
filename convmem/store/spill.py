"""Large merged posting data moved out of anonymous memory into a file of the store's, while a
snapshot is taken and written.

At the end of a bulk import the merged index is most of the process: at 10M messages 1.8 GB of
content postings, beside which the snapshot then builds its character lists (0.4 GB), the id table
and the histories (0.23 GB), to a peak of 4.4 GiB. Written to an unnamed file in the data
directory (O_TMPFILE: private to its owner, and nothing is left behind by a crash) and mapped back
read-only, those bytes are page cache, which the kernel can reclaim, instead of anonymous memory,
which it cannot; the snapshot's writer reads them in pieces and drops each piece's pages from the
process once written (`pieces`). Once the snapshot is in place the index reads those bytes from
its map instead (api/snapshots.adopt_snapshot_postings, SearchIndex.adopt_postings), and the
file's blocks go back to the file system.

The data is synced before it is mapped, and its XXH3 taken from the memory it came from: the
snapshot's writer checks the bytes it read from the file against it (`checked_digest`), so a page the disk
gave back wrong is never written into a snapshot as if it were right (`SpilledDataChanged`: the
store rebuilds its state from the log, as for any damaged posting list). Any failure before the
swap (a full disk, an I/O error) leaves the data where it was: `take` answers None.
"""
from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import xxhash

from .io import CLOEXEC, FILE_MODE, IoCounters, drop_pages, pwrite_all

log = logging.getLogger("convmem")

SPILL_MIN_BYTES = 256 << 20  # a field's posting data from which it moves (about 1.5M messages)
PIECE_BYTES = 64 << 20       # what the writer reads before it drops the pages it read
_ALIGN = mmap.ALLOCATIONGRANULARITY
# Linux's: elsewhere nothing is spilled (the data stays in memory, as before the spill).
SUPPORTED = hasattr(os, "O_TMPFILE") and hasattr(os, "posix_fallocate")


class SpilledDataChanged(ValueError):
    """The bytes read back from the spill file are not those that were written to it."""


class _SpilledMap(mmap.mmap):
    """A read-only mapping of spilled bytes, with the XXH3 of what was written (`digest`)."""

    digest: int = 0


class SpillFile:
    """One snapshot's spill file: opened on the first `take`, closed by `close` (the mappings it
    made stay valid while the index holds them; the file's blocks go with the last of them)."""

    def __init__(self, directory: Path, io: IoCounters) -> None:
        self.directory, self.io = directory, io
        self.min_bytes = SPILL_MIN_BYTES
        self.taken = 0  # bytes taken (and mapped back)
        self._fd = -1
        self._end = 0
        self._maps: list[_SpilledMap] = []

    def take(self, data: np.ndarray) -> np.ndarray | None:
        """`data`'s bytes (a 1-d uint8 array) written to the file, synced, and mapped back: the
        read-only array to use in its place; None when the file system refused (logged)."""
        if not SUPPORTED:
            return None
        n = int(data.nbytes)
        try:
            if self._fd < 0:
                self._fd = _open_unnamed(self.directory)
            off = self._end
            os.posix_fallocate(self._fd, off, n)  # (a full disk fails here, not on a page)
            view = memoryview(data).cast("B")
            digest = xxhash.xxh3_64_intdigest(view)
            for start in range(0, n, PIECE_BYTES):
                pwrite_all(self._fd, view[start:start + PIECE_BYTES], off + start, self.io)
            os.fdatasync(self._fd)
            self.io.flush_calls += 1
            m = _SpilledMap(self._fd, n, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=off)
        except OSError as exc:
            log.warning("posting data kept in memory: cannot write it to a spill file in %s (%s)",
                        self.directory, exc.strerror or exc)
            return None
        m.digest = digest
        self.taken += n
        self._end = off + -(-n // _ALIGN) * _ALIGN
        self._maps.append(m)
        return np.frombuffer(m, dtype=np.uint8)

    def drop_pages(self) -> None:
        """The pages of what this file took dropped from the process (read since: the
        character lists)."""
        for m in self._maps:
            drop_pages(m, 0, len(m))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._maps = []


def _map_of(arr: np.ndarray) -> _SpilledMap | None:
    """The spill mapping that `arr` is, whole (of this snapshot's spill or an earlier one's)."""
    base = arr.base
    while isinstance(base, np.ndarray):
        if base.nbytes != arr.nbytes:
            return None
        base = base.base
    if isinstance(base, memoryview):  # (np.frombuffer's: a view of the mapping)
        base = base.obj
    if isinstance(base, _SpilledMap) and arr.nbytes == len(base):
        return base
    return None


def spilled(arr: np.ndarray) -> bool:
    """Whether `arr` is spilled posting data (SpillFile.take's)."""
    return _map_of(arr) is not None


def pieces(arr: np.ndarray) -> Iterator[memoryview]:
    """A spilled array's bytes in pieces, each piece's pages dropped from this process once the
    next is asked for (they stay in the page cache)."""
    m = _map_of(arr)
    assert m is not None
    view = memoryview(arr).cast("B")
    for start in range(0, len(view), PIECE_BYTES):
        yield view[start:start + PIECE_BYTES]
        drop_pages(m, start, min(start + PIECE_BYTES, len(view)))


def checked_digest(arr: np.ndarray) -> int:
    """The XXH3 of a spilled array's bytes as read back, in pieces (their pages dropped), once
    it is found to be that of what was written; else SpilledDataChanged."""
    m = _map_of(arr)
    assert m is not None
    digest = xxhash.xxh3_64()
    for piece in pieces(arr):
        digest.update(piece)
    if digest.intdigest() != m.digest:
        raise SpilledDataChanged(
            f"{len(m)} bytes of posting data read back from the spill file are not those "
            "written to it")
    return m.digest


def _open_unnamed(directory: Path) -> int:
    """A new file in `directory` with no name, private to its owner."""
    return os.open(directory, os.O_TMPFILE | os.O_RDWR | CLOEXEC, FILE_MODE)

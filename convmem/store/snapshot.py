"""The snapshot file: the in-memory state as named numpy sections, loaded without re-parsing.

Layout (docs/FORMAT.md, "Snapshot file"):
    0  magic           8 bytes b"CVMEMSNP"
    8  format_version  u32     3 (2 is still read)
   12  meta_len        u32     length of the meta JSON
   16  meta_crc        u32     crc32 of the meta JSON
   20  header_crc      u32     crc32 of bytes 0..20
   24  meta JSON (UTF-8): scalar state and the section table
       [{"name", "dtype", "shape", "offset", "nbytes", "xxh3"}, ...]   (version 2: "crc", crc32)
   ... sections, each starting on a 64-byte boundary

A section's checksum is XXH3-64 since format 3: the sections a store checks before its first
answer are ~100 MB at 1M messages, which zlib's crc32 reads at ~2.3 GB/s here (43 ms per 100 MB)
and XXH3 at ~15 GB/s (6.5 ms). A version 2 snapshot is read as it is (its crc32s checked), and
the next snapshot is written in format 3: no store re-indexes for this change.
"""
from __future__ import annotations

import mmap
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson
import xxhash

from .background import background_thread
from .io import IoCounters, drop_pages, open_file, write_file_atomically
from . import spill

SNAPSHOT_NAME = "snapshot.bin"
MAGIC = b"CVMEMSNP"
VERSION = 3
READABLE_VERSIONS = (2, 3)
_HEAD = struct.Struct("<8sIIII")
_ALIGN = 64
PARALLEL_VERIFY_BYTES = 16 << 20  # sections to check at open worth a second thread
DROP_PIECE_BYTES = 64 << 20  # the background check's reads (verify_deferred(drop=True))
DROP_LAG_BYTES = 1 << 20  # ... and how far behind them it drops the pages read
DROP_INLINE_BYTES = 64 << 20  # checked-only pages dropped by the open itself, up to this many


class SnapshotError(Exception):
    """The snapshot cannot be used; `reason` says why (the store then rebuilds from the log)."""


class SnapshotVersionError(SnapshotError):
    """A snapshot of another format version: not damage, just not ours to read."""


def xxh3(view: memoryview | bytes) -> int:
    """The section checksum of format 3 (xxhash releases the GIL on large buffers)."""
    return xxhash.xxh3_64_intdigest(view)


@dataclass(frozen=True, slots=True)
class Expected:
    """A section's recorded checksum and the function that made it (crc32 in format 2)."""
    value: int
    xxh3: bool

    def matches(self, view: memoryview) -> bool:
        return (xxh3(view) if self.xxh3 else zlib.crc32(view)) == self.value

    def matches_dropping(self, view: memoryview) -> bool:
        """matches, read DROP_PIECE_BYTES at a time, each piece's pages dropped once hashed
        (_drop_view_pages): the process holds one piece of the section, not all of it."""
        h = xxhash.xxh3_64() if self.xxh3 else None
        crc = 0
        dropped = 0
        for lo in range(0, len(view), DROP_PIECE_BYTES):
            piece = view[lo:lo + DROP_PIECE_BYTES]
            if h is not None:
                h.update(piece)
            else:
                crc = zlib.crc32(piece, crc)
            # Behind the reads by a margin: a page fault maps the pages around it too (the
            # kernel's fault-around, 64 KiB), which would map back the pages just dropped.
            upto = lo + len(piece) - DROP_LAG_BYTES
            if upto > dropped:
                _drop_view_pages(view[dropped:upto])
                dropped = upto
        _drop_view_pages(view)
        return (h.intdigest() if h is not None else crc) == self.value


def write_snapshot(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray],
                   io: IoCounters) -> int:
    """Write atomically (tmp, fsync, rename, fsync dir); returns the file size. Spilled
    sections (store/spill.py) are read a piece at a time, each piece's pages dropped once read,
    and checked against what was written to the spill (SpilledDataChanged)."""
    table = []
    blobs: list[memoryview | np.ndarray] = []  # (an array: a spilled section, read in pieces)
    # The largest sections first: a large store's open checks only its small sections before
    # its first answer (recovery.DEFER_SECTION_BYTES), and together at the end of the file
    # they are one sequential read for the kernel's readahead, not a fault per section spread
    # over the file (1M messages, page cache dropped: the open's check of its 9 MB took 8 ms,
    # against 59 with the same sections spread over the file).
    # (Not the smallest first: the last section would then be a big per-doc array, which has
    # no file bytes after it for a private map's room, read_snapshot.)
    as_arrays = [(name, np.asarray(arr)) for name, arr in arrays.items()]
    for name, arr in sorted(as_arrays, key=lambda item: -item[1].nbytes):
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
        if spill.spilled(arr):
            checksum = spill.checked_digest(arr)
            blobs.append(arr)
        else:
            view = memoryview(arr).cast("B") if arr.nbytes else memoryview(b"")
            checksum = xxh3(view)
            blobs.append(view)
        table.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape),
                      "nbytes": arr.nbytes, "xxh3": checksum})
    # Offsets depend on the meta length, which depends on the offsets: grow to a fixed point.
    data_start = _align(_HEAD.size + 1024)
    while True:
        pos = data_start
        for entry in table:
            pos = _align(pos)
            entry["offset"] = pos
            pos += entry["nbytes"]
        meta_bytes = orjson.dumps({**meta, "sections": table})
        needed = _align(_HEAD.size + len(meta_bytes))
        if needed <= data_start:
            break
        data_start = needed
    head = MAGIC + struct.pack("<III", VERSION, len(meta_bytes), zlib.crc32(meta_bytes))
    head += struct.pack("<I", zlib.crc32(head))

    def chunks():
        pos = _HEAD.size + len(meta_bytes)
        yield head + meta_bytes
        for entry, blob in zip(table, blobs):
            pad = entry["offset"] - pos
            if pad:
                yield b"\0" * pad
            if isinstance(blob, np.ndarray):  # (read a second time: the pages were dropped)
                yield from spill.pieces(blob)
            elif entry["nbytes"]:
                yield blob
            pos = entry["offset"] + entry["nbytes"]

    return write_file_atomically(path, chunks(), io)


Deferred = list[tuple[str, memoryview, Expected]]  # (section name, bytes, its checksum)


def read_snapshot(path: Path, verify: bool = True,
                  defer: Callable[[str, memoryview, Expected], bool] | None = None,
                  growable: Callable[[str], bool] | None = None,
                  drop_checked: bool = False,
                  ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Map the snapshot and return (meta, arrays); arrays are read-only views of the map.

    `defer(name, bytes, expected checksum) -> bool` may take over the checksum of a section: when
    it answers True the check is left to it (the store keeps it for `verify_deferred`, which it
    runs in the background).

    A section `growable(name)` answers True for (an array that writes append to or change:
    catalog.GROWABLE_SECTIONS) is a writable view of a private mapping of its own instead (copy
    on write: a change copies the page it touches, never reaching the file or the other views),
    whose base array runs on past the section over the bytes that follow it in the file, a
    quarter of the section more where the file is that long: room that appends overwrite in
    place (catalog/columns.py, shared.garr_borrow). Without it the first write after an open
    copied every such array whole (at 10M messages 0.50-0.53 s). Checksums are always taken
    over the read-only map, and the pages of the sections served from a private map are dropped
    from it once checked; with `drop_checked`, the pages of every section checked here are
    (rebuild_index's read-back: a query faults back what it reads, from the page cache).
    """
    try:
        fd = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        raise
    except OSError as exc:  # unreadable, a directory, a planted link...
        raise SnapshotError(f"cannot open the snapshot: {exc.strerror or exc}") from exc
    try:
        return _read_mapped(fd, verify, defer, growable, drop_checked)
    finally:
        os.close(fd)


def _private_view(fd: int, size: int, off: int, n: int, dtype: np.dtype,
                  shape: tuple[int, ...]) -> np.ndarray:
    """Section [off, off + n) as a writable view of a private mapping, its base running on
    over up to n / 4 more bytes of the file (see read_snapshot)."""
    row = dtype.itemsize * (int(np.prod(shape[1:])) if len(shape) > 1 else 1)
    room_rows = min(size - (off + n), max(n // 4, mmap.PAGESIZE)) // row
    start = off - off % mmap.ALLOCATIONGRANULARITY
    pm = mmap.mmap(fd, off + n + room_rows * row - start, access=mmap.ACCESS_COPY, offset=start)
    rows = shape[0]
    # (an array made over the buffer itself: the view's base is it, of the section's row shape)
    whole = np.ndarray((rows + room_rows,) + shape[1:], dtype=dtype, buffer=pm, offset=off - start)
    return whole[:rows]


def _read_mapped(fd: int, verify: bool,
                 defer: Callable[[str, memoryview, Expected], bool] | None,
                 growable: Callable[[str], bool] | None, drop_checked: bool,
                 ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        size = os.fstat(fd).st_size
        if size < _HEAD.size:
            raise SnapshotError("snapshot is shorter than its header")
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # (mmap refused)
        raise SnapshotError(f"cannot map the snapshot: {exc}") from exc
    magic, version, meta_len, meta_crc, head_crc = _HEAD.unpack_from(mm, 0)
    if magic != MAGIC:
        raise SnapshotError("bad snapshot magic")
    if zlib.crc32(mm[:20]) != head_crc:
        raise SnapshotError("snapshot header checksum mismatch")
    if version not in READABLE_VERSIONS:
        raise SnapshotVersionError(f"snapshot format_version {version} is not {VERSION}")
    sum_key = "xxh3" if version >= 3 else "crc"
    if _HEAD.size + meta_len > size:
        raise SnapshotError("snapshot meta runs past the end of the file")
    meta_bytes = mm[_HEAD.size:_HEAD.size + meta_len]
    if zlib.crc32(meta_bytes) != meta_crc:
        raise SnapshotError("snapshot meta checksum mismatch")
    try:
        meta = orjson.loads(meta_bytes)
        sections = meta["sections"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise SnapshotError("snapshot meta is not valid") from exc
    arrays: dict[str, np.ndarray] = {}
    buf = memoryview(mm)
    now: Deferred = []  # the checksums to check before returning
    # Sections whose pages in this map are not needed once checked: those served from a private
    # map of their own, and with drop_checked all.
    unneeded: list[memoryview] = []
    for entry in sections:
        try:
            off, n = int(entry["offset"]), int(entry["nbytes"])
            dtype = np.dtype(entry["dtype"])
            shape = tuple(int(x) for x in entry["shape"])
            expected = Expected(int(entry[sum_key]), sum_key == "xxh3")
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError("snapshot section table is not valid") from exc
        if off < 0 or n < 0 or off + n > size:
            raise SnapshotError(f"snapshot section {entry.get('name')!r} runs past the end")
        view = buf[off:off + n]
        taken = defer is not None and defer(entry["name"], view, expected)
        if verify and not taken:
            now.append((entry["name"], view, expected))
        count = int(np.prod(shape)) if shape else 1
        if count * dtype.itemsize != n:
            raise SnapshotError(f"snapshot section {entry['name']!r} has a bad shape")
        if (growable is not None and n and shape and dtype.kind in "biuf"
                and growable(entry["name"])):  # (never an object dtype over file bytes)
            try:
                arrays[entry["name"]] = _private_view(fd, size, off, n, dtype, shape)
                unneeded.append(view)
                continue
            except (OSError, ValueError):  # (mmap refused: the read-only view serves)
                pass
        arrays[entry["name"]] = np.frombuffer(view, dtype=dtype, count=count).reshape(shape)
        if drop_checked:
            unneeded.append(view)
    bad = _verify_in_two(now)
    if bad is not None:
        raise SnapshotError(f"snapshot section {bad!r} checksum mismatch")
    # A section served from its private map was read here only to check it: its pages in the
    # read-only map would stay mapped for nothing (at 10M messages 0.8 GB, most of what an open
    # checks). Many of them are dropped on a thread of their own: at 10M the madvise calls take
    # 5-6 ms, which the open's first answer need not wait for.
    if sum(len(view) for view in unneeded) <= DROP_INLINE_BYTES:
        for view in unneeded:
            _drop_view_pages(view)
    elif unneeded:
        background_thread(lambda: [_drop_view_pages(view) for view in unneeded],
                          "convmem-unmap").start()
    return meta, arrays


def _verify_in_two(sections: Deferred) -> str | None:
    """verify_deferred over two threads when there is enough to check (xxhash and zlib release
    the GIL: ~100 MB of sections at 1M messages took 10.5 ms on one core, 6.5 on two)."""
    total = sum(len(view) for _, view, _ in sections)
    if total < PARALLEL_VERIFY_BYTES:
        return verify_deferred(sections)
    # two halves of about equal bytes, big sections first
    halves: tuple[Deferred, Deferred] = ([], [])
    sizes = [0, 0]
    for item in sorted(sections, key=lambda it: -len(it[1])):
        i = 0 if sizes[0] <= sizes[1] else 1
        halves[i].append(item)
        sizes[i] += len(item[1])
    found: list[str | None] = [None]

    def other() -> None:
        found[0] = verify_deferred(halves[1])

    thread = threading.Thread(target=other, name="convmem-snapshot-check")
    thread.start()
    try:
        mine = verify_deferred(halves[0])
    finally:
        thread.join()
    return mine if mine is not None else found[0]


def verify_deferred(deferred: Deferred, drop: bool = False) -> str | None:
    """Check postponed section checksums; the name of the first bad section, or None.

    With `drop`, each section is read a piece at a time and each piece's pages leave the
    process once hashed (the background pass after an open): the check reads every byte, and at
    10M messages it left 2.3 GB of index sections mapped in that no query had asked for. A
    query faults in again what it reads, from the page cache."""
    for name, view, expected in deferred:
        ok = expected.matches_dropping(view) if drop else expected.matches(view)
        if not ok:  # zlib and xxhash release the GIL on large buffers
            return name
    return None


def _drop_view_pages(view: memoryview) -> None:
    """drop_pages over `view`, a slice of a read-only map of the file (read_snapshot's)."""
    mm = view.obj
    if not isinstance(mm, mmap.mmap) or not len(view):
        return
    base = np.frombuffer(mm, dtype=np.uint8)
    off = np.frombuffer(view, dtype=np.uint8).ctypes.data - base.ctypes.data
    del base
    drop_pages(mm, off, off + len(view))


def snapshot_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN

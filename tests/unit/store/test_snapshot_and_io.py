"""The snapshot file and the file-system primitives on their own: a round trip of every dtype
and shape the store writes, each kind of damage as SnapshotError, deferred section checks, and
the atomic file write (mode, no temporary left behind, the old file kept on failure)."""
from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest
from snapshot_helpers import as_format_2

from convmem.store import io as store_io
from convmem.store.io import IoCounters, write_file_atomically
from convmem.store.snapshot import (VERSION, SnapshotError, SnapshotVersionError, read_snapshot,
                                    verify_deferred, write_snapshot, xxh3)

ARRAYS = {
    "ids": np.arange(48, dtype=np.uint8).reshape(3, 16),
    "ts": np.array([1, 2, 3], dtype=np.int64),
    "empty": np.zeros(0, dtype=np.int32),
    "scalar": np.array(7, dtype=np.uint32),
    "big": np.arange(100_000, dtype=np.uint32),
}


def write(path: Path) -> Path:
    write_snapshot(path, {"log_id": "ab", "n": 3}, ARRAYS, IoCounters())
    return path


def test_round_trip_keeps_values_dtypes_shapes_and_meta(tmp_path):
    meta, arrays = read_snapshot(write(tmp_path / "snap"))
    assert meta["log_id"] == "ab" and meta["n"] == 3
    for name, arr in ARRAYS.items():
        assert arrays[name].dtype == arr.dtype and arrays[name].shape == arr.shape
        assert np.array_equal(arrays[name], arr)
    assert not arrays["big"].flags.writeable  # a view of the map, not a copy


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where, reason", [
    (0, "magic"), (9, "header checksum"), (30, "meta checksum"), (-5, "checksum mismatch")])
def test_each_damage_is_a_snapshot_error(tmp_path, where, reason):
    """`where` < 0: that far from the end of the section "big"."""
    path = write(tmp_path / "snap")
    if where < 0:
        meta, _ = read_snapshot(path)
        big = next(sec for sec in meta["sections"] if sec["name"] == "big")
        where += big["offset"] + big["nbytes"]
    _flip(path, where)
    with pytest.raises(SnapshotError, match=reason):
        read_snapshot(path)


def test_sections_are_checksummed_with_xxh3_in_format_3(tmp_path):
    path = write(tmp_path / "snap")
    assert struct.unpack_from("<I", path.read_bytes(), 8)[0] == VERSION == 3
    meta, _ = read_snapshot(path)
    big = next(s for s in meta["sections"] if s["name"] == "big")
    assert "crc" not in big and big["xxh3"] == xxh3(ARRAYS["big"].tobytes())


def test_a_format_2_snapshot_is_read_and_its_crc32s_checked(tmp_path):
    path = write(tmp_path / "snap")
    as_format_2(path)
    meta, arrays = read_snapshot(path)
    assert np.array_equal(arrays["big"], ARRAYS["big"]) and meta["n"] == 3
    big = next(s for s in meta["sections"] if s["name"] == "big")
    _flip(path, big["offset"] + 10)
    with pytest.raises(SnapshotError, match="'big' checksum mismatch"):
        read_snapshot(path)
    deferred: list = []
    read_snapshot(path, defer=lambda n, v, c: n == "big" and not deferred.append((n, v, c)))
    assert verify_deferred(deferred) == "big"


@pytest.mark.parametrize("victim", ["big", "ts", "ids"])
def test_sections_checked_on_two_threads_report_a_mismatch_in_either_half(
        tmp_path, monkeypatch, victim):
    """Enough bytes to check at open are split over two threads (the biggest section on one,
    the rest on the other here); damage in any section is found, the file never used."""
    from convmem.store import snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "PARALLEL_VERIFY_BYTES", 0)
    calls: list[list[str]] = []
    real = snapshot_module.verify_deferred
    monkeypatch.setattr(snapshot_module, "verify_deferred",
                        lambda items: calls.append([n for n, _, _ in items]) or real(items))
    path = write(tmp_path / "snap")
    read_snapshot(path)
    assert sorted(map(sorted, calls)) == [["big"], ["empty", "ids", "scalar", "ts"]]
    meta, _ = read_snapshot(path)
    entry = next(s for s in meta["sections"] if s["name"] == victim)
    _flip(path, entry["offset"] + entry["nbytes"] - 1)
    with pytest.raises(SnapshotError, match=f"'{victim}' checksum mismatch"):
        read_snapshot(path)


def test_a_later_format_is_not_read(tmp_path):
    path = write(tmp_path / "snap")
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 8, 4)
    struct.pack_into("<I", data, 20, zlib.crc32(bytes(data[:20])))
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotVersionError, match="format_version 4"):
        read_snapshot(path)


def test_truncated_snapshot_is_a_snapshot_error(tmp_path):
    path = write(tmp_path / "snap")
    os.truncate(path, path.stat().st_size - 100)
    with pytest.raises(SnapshotError, match="past the end"):
        read_snapshot(path)
    os.truncate(path, 10)
    with pytest.raises(SnapshotError, match="shorter than its header"):
        read_snapshot(path)


def test_deferred_sections_are_checked_later(tmp_path):
    path = write(tmp_path / "snap")
    meta, _ = read_snapshot(path)
    big = next(s for s in meta["sections"] if s["name"] == "big")
    _flip(path, big["offset"] + 10)
    deferred = []
    _, arrays = read_snapshot(path, defer=lambda n, v, c: n == "big" and not deferred.append((n, v, c)))
    assert [d[0] for d in deferred] == ["big"] and arrays["big"][2] != 2
    assert verify_deferred(deferred) == "big"


def test_a_section_numpy_cannot_view_raises_before_use(tmp_path):
    path = write(tmp_path / "snap")
    data = bytearray(path.read_bytes())
    _, _, meta_len, _, _ = struct.unpack_from("<8sIIII", data, 0)
    meta = orjson.loads(bytes(data[24:24 + meta_len]))
    meta["sections"][1]["dtype"] = "|O"
    new = orjson.dumps(meta).ljust(meta_len)
    head = bytes(data[:12]) + struct.pack("<II", meta_len, zlib.crc32(new))
    data[:24] = head + struct.pack("<I", zlib.crc32(head))
    data[24:24 + meta_len] = new
    path.write_bytes(bytes(data))
    with pytest.raises((SnapshotError, ValueError, TypeError)):
        read_snapshot(path)


def test_atomic_write_sets_the_mode_and_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "file"
    counters = IoCounters()
    assert write_file_atomically(path, [b"one", b"two"], counters) == 6
    assert path.read_bytes() == b"onetwo" and path.stat().st_mode & 0o777 == 0o600
    assert counters.replace_calls == 1 and counters.flush_calls == 2  # the file and its directory

    def broken():
        yield b"new"
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        write_file_atomically(path, broken(), counters)
    assert path.read_bytes() == b"onetwo" and not (tmp_path / "file.tmp").exists()
    monkeypatch.setattr(store_io.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(OSError):
        write_file_atomically(path, [b"x"], counters)
    assert path.read_bytes() == b"onetwo" and not (tmp_path / "file.tmp").exists()


def test_a_growable_section_is_a_private_writable_view_with_room_that_never_reaches_the_file(
        tmp_path):
    path = write(tmp_path / "snap")
    before = path.read_bytes()
    meta, arrays = read_snapshot(path, growable=lambda name: name in ("ids", "ts", "big"))
    ts, ids = arrays["ts"], arrays["ids"]
    assert ts.flags.writeable and ts.tolist() == [1, 2, 3]
    assert ids.shape == (3, 16) and np.array_equal(ids, ARRAYS["ids"])
    room = ts.base
    assert len(room) > 3 and np.shares_memory(room[:3], ts)  # the file's next bytes: room
    assert ids.base.shape[1:] == (16,) and len(ids.base) > 3  # (rows of a 2-d section)
    assert not arrays["empty"].flags.writeable  # (not named growable: the read-only view)
    ts[0] = -1
    room[:] = 99  # (over the bytes of the sections after it, in this mapping only)
    ids.base[:] = 0
    arrays["big"].base[:] = 0
    _, again = read_snapshot(path)  # checksums over the file: all still right
    assert again["ts"].tolist() == [1, 2, 3] and np.array_equal(again["big"], ARRAYS["big"])
    assert path.read_bytes() == before
    assert arrays["scalar"] == 7 and arrays["empty"].size == 0  # (other views unchanged)


def test_a_growable_section_at_the_end_of_the_file_has_only_the_room_the_file_has(tmp_path):
    path = tmp_path / "snap"
    sections = {"big": ARRAYS["big"], "last": np.arange(5, dtype=np.uint32)}
    write_snapshot(path, {}, sections, IoCounters())
    meta, _ = read_snapshot(path)
    last = max(meta["sections"], key=lambda sec: sec["offset"])
    assert last["name"] == "last"  # (the smallest section: nothing follows it)
    _, arrays = read_snapshot(path, growable=lambda name: name == "last")
    tail = arrays["last"]
    assert tail.flags.writeable and np.array_equal(tail, sections["last"])
    room = tail.base if tail.base is not None and isinstance(tail.base, np.ndarray) else tail
    assert len(room) == len(tail)  # no room past the end of the file (that would fault)
    room[:] = 1  # every byte of it writable
    assert read_snapshot(path)[1]["last"][0] == 0


def _resident_kib(path: Path) -> int:
    """Resident KiB of this process's maps of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                inside = line.rstrip().endswith(str(path))
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps")
@pytest.mark.parametrize("fmt", [3, 2])
def test_the_background_check_drops_the_pages_it_read_and_still_finds_damage(
        tmp_path, monkeypatch, fmt):
    """verify_deferred(drop=True), the pass after an open: a section is hashed a piece at
    a time, as one hash of the whole (xxh3 and format 2's crc32), and the pages it read leave
    the process; the arrays over them read the same bytes afterwards."""
    from convmem.store import snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "DROP_PIECE_BYTES", 64 * 1024)
    big = np.arange(2_000_000, dtype=np.uint32)  # 8 MB: 122 pieces
    path = tmp_path / "snap"
    write_snapshot(path, {"n": 1}, {"big": big, "ts": np.arange(3, dtype=np.int64)}, IoCounters())
    if fmt == 2:
        as_format_2(path)

    def deferring(deferred: list):
        return lambda n, v, c: n == "big" and not deferred.append((n, v, c))

    deferred: list = []
    _, arrays = read_snapshot(path, defer=deferring(deferred))
    assert int(arrays["big"].sum(dtype=np.int64)) == int(big.sum(dtype=np.int64))  # all read in
    before = _resident_kib(path)
    assert before >= 7800
    assert verify_deferred(deferred, drop=True) is None
    assert _resident_kib(path) < before - 7500
    assert np.array_equal(arrays["big"], big)
    del arrays, deferred
    meta, _ = read_snapshot(path)
    entry = next(s for s in meta["sections"] if s["name"] == "big")
    _flip(path, entry["offset"] + entry["nbytes"] - 3)  # in the last piece
    deferred = []
    read_snapshot(path, defer=deferring(deferred))
    assert verify_deferred(deferred, drop=True) == "big"
    assert verify_deferred(deferred) == "big"


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps")
@pytest.mark.parametrize("inline_bytes", [64 << 20, 0])
def test_a_privately_served_section_leaves_no_pages_in_the_checked_map(tmp_path, monkeypatch,
                                                                      inline_bytes):
    """A growable section is checked over the read-only map and served from a private map of its
    own: once checked, its pages in the read-only map are dropped (they would stay mapped for
    nothing), by the open itself or, past DROP_INLINE_BYTES, by a thread of their own; the
    array still reads the file's bytes."""
    import threading

    from convmem.store import snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "DROP_INLINE_BYTES", inline_bytes)
    started: list[threading.Thread] = []
    real_thread = snapshot_module.background_thread

    def noted(target, name):
        started.append(real_thread(target, name))
        return started[-1]

    monkeypatch.setattr(snapshot_module, "background_thread", noted)
    big = np.arange(2_000_000, dtype=np.uint32)  # 8 MB
    path = tmp_path / "snap"
    write_snapshot(path, {"n": 1}, {"big": big, "ts": np.arange(3, dtype=np.int64)}, IoCounters())
    _, shared = read_snapshot(path)  # (served from the read-only map: it stays mapped)
    assert _resident_kib(path) >= 7800
    del shared
    import gc
    gc.collect()
    assert _resident_kib(path) < 100  # (that map is gone with its arrays)
    _, arrays = read_snapshot(path, growable=lambda name: name == "big")
    assert [t.name for t in started] == (["convmem-unmap"] if inline_bytes == 0 else [])
    for t in started:
        t.join(10)
    assert _resident_kib(path) < 1000  # checked (every byte read), then dropped
    assert np.array_equal(arrays["big"], big)


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps")
def test_drop_checked_leaves_no_checked_page_mapped(tmp_path):
    """read_snapshot(drop_checked=True), rebuild_index's read-back of its new snapshot: every
    section is checked (damage still raises) and its pages leave the process; the arrays read
    the file's bytes when touched again."""
    big = np.arange(2_000_000, dtype=np.uint32)  # 8 MB
    path = tmp_path / "snap"
    write_snapshot(path, {"n": 1}, {"big": big, "ts": np.arange(3, dtype=np.int64)}, IoCounters())
    _, kept = read_snapshot(path)
    assert _resident_kib(path) >= 7800
    del kept
    import gc
    gc.collect()
    _, arrays = read_snapshot(path, drop_checked=True)
    assert _resident_kib(path) < 100
    assert np.array_equal(arrays["big"], big)
    meta, _ = read_snapshot(path)
    entry = next(s for s in meta["sections"] if s["name"] == "big")
    _flip(path, entry["offset"] + 5)
    with pytest.raises(SnapshotError, match="'big' checksum mismatch"):
        read_snapshot(path, drop_checked=True)

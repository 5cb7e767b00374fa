"""Damage to the files, through reopen: one test per kind of damage (LevelDB's matrix).

A damaged tail (nothing valid after it) is a crash's torn write: it is truncated durably and
reported once (`recovered_tail`). Damage with valid records after it is corruption: reported in
`last_error` (health DEGRADED) with the byte offset, and never served.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest

from snapshot_helpers import as_format_2

from convmem import ConvMemError, MemoryStore
from convmem._core import PURE, codec
from convmem.store.snapshot import read_snapshot, xxh3

LOG = "messages.log"
SNAP = "snapshot.bin"


def make_store(path: Path, n: int = 3, keep_snapshot: bool = False) -> list[str]:
    with MemoryStore.open(path) as s:
        ids = [s.write_message(session_id="s", role="user", content=f"message number {i}")
               ["message"]["message_id"] for i in range(n)]
    if not keep_snapshot:
        (path / SNAP).unlink()  # as after kill -9: only the log
    return ids


def records(path: Path) -> list[tuple[int, int]]:
    """(offset, frame length) of each record in the log."""
    data = (path / LOG).read_bytes()
    res = codec.scan_log(data, codec.LOG_HEADER_SIZE, len(data))
    return [(int(o), int(n) + codec.RECORD_HEADER_SIZE) for o, n in zip(res.offsets, res.lengths)]


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path / LOG, "r+b") as f:
        f.seek(offset)
        f.write(data)


def live_contents(s: MemoryStore) -> list[str]:
    return [m["content"] for m in s.read_messages(session_id="s")["history"]]


def reopen_twice(path: Path):
    with MemoryStore.open(path) as s:
        first = s.get_system_health()
        contents = live_contents(s)
    with MemoryStore.open(path) as s:
        second = s.get_system_health()
        assert live_contents(s) == contents
    return first, second, contents


def assert_torn_tail(path: Path, survivors: int) -> None:
    first, second, contents = reopen_twice(path)
    assert first["recovered_tail"] is True
    assert first["io"]["truncate_calls"] == 1
    assert first["status"] == "OK" and first["last_error"] == ""
    assert contents == [f"message number {i}" for i in range(survivors)]
    # The repair was durable: the next clean open has nothing to recover.
    assert second["recovered_tail"] is False and second["io"]["truncate_calls"] == 0


@pytest.mark.parametrize("keep_snapshot", [False, True])
def test_truncated_payload(tmp_path, keep_snapshot):
    make_store(tmp_path, keep_snapshot=keep_snapshot)
    size = (tmp_path / LOG).stat().st_size
    os.truncate(tmp_path / LOG, size - 5)
    assert_torn_tail(tmp_path, 2)


def test_truncated_header(tmp_path):
    make_store(tmp_path)
    last_off, _ = records(tmp_path)[-1]
    os.truncate(tmp_path / LOG, last_off + 10)
    assert_torn_tail(tmp_path, 2)


def test_zero_filled_tail(tmp_path):
    make_store(tmp_path)
    with open(tmp_path / LOG, "ab") as f:
        f.write(b"\0" * 4096)
    assert_torn_tail(tmp_path, 3)


def test_garbage_appended(tmp_path):
    make_store(tmp_path, keep_snapshot=True)
    with open(tmp_path / LOG, "ab") as f:
        f.write(os.urandom(777))
    assert_torn_tail(tmp_path, 3)


def test_flipped_checksum_byte_of_last_record(tmp_path):
    make_store(tmp_path)
    last_off, _ = records(tmp_path)[-1]
    data = (tmp_path / LOG).read_bytes()
    patch(tmp_path, last_off, bytes([data[last_off] ^ 0xFF]))
    assert_torn_tail(tmp_path, 2)


def test_bad_length_of_last_record(tmp_path):
    make_store(tmp_path)
    last_off, _ = records(tmp_path)[-1]
    patch(tmp_path, last_off + 4, struct.pack("<I", 0x7FFFFFFF))
    assert_torn_tail(tmp_path, 2)


def _assert_middle_damage(path: Path, offset: int) -> None:
    with MemoryStore.open(path) as s:
        h = s.get_system_health()
        assert h["status"] == "DEGRADED"
        assert f"byte offset {offset}" in h["last_error"]
        assert live_contents(s) == ["message number 0", "message number 2"]
        assert [m["content"] for m in s.search_messages(query="message")["results"]].count(
            "message number 1") == 0


@pytest.mark.parametrize("keep_snapshot", [False, True])
def test_damage_in_the_middle_is_reported_not_served(tmp_path, keep_snapshot):
    make_store(tmp_path, keep_snapshot=keep_snapshot)
    off, length = records(tmp_path)[1]
    data = (tmp_path / LOG).read_bytes()
    patch(tmp_path, off + length - 3, bytes([data[off + length - 3] ^ 0x55]))
    _assert_middle_damage(tmp_path, off)


def test_unknown_type_in_the_middle(tmp_path):
    make_store(tmp_path)
    off, length = records(tmp_path)[1]
    data = bytearray((tmp_path / LOG).read_bytes())
    data[off + 8] = 9  # a type no reader knows, with a checksum that matches
    struct.pack_into("<I", data, off, zlib.crc32(bytes(data[off + 4: off + length])))
    (tmp_path / LOG).write_bytes(bytes(data))
    _assert_middle_damage(tmp_path, off)


def test_damaged_snapshot_is_rebuilt_from_log(tmp_path):
    make_store(tmp_path, keep_snapshot=True)
    snap = tmp_path / SNAP
    data = bytearray(snap.read_bytes())
    meta, _ = read_snapshot(snap)
    section = next(sec for sec in meta["sections"] if sec["name"] == "slot_ulid")
    data[section["offset"] + 5] ^= 0x10
    snap.write_bytes(bytes(data))
    with MemoryStore.open(tmp_path) as s:
        h = s.get_system_health()
        assert h["snapshot_valid"] is False and h["status"] == "DEGRADED"
        assert "snapshot" in h["last_error"]
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
    with MemoryStore.open(tmp_path) as s:
        h = s.get_system_health()
        assert h["snapshot_valid"] is True and h["status"] == "OK"


def test_stale_snapshot_from_other_log_is_not_used(tmp_path):
    make_store(tmp_path, keep_snapshot=True)
    other = tmp_path / "other"
    with MemoryStore.open(other) as s:
        s.write_message(session_id="x", role="user", content="from another store")
    (other / SNAP).replace(tmp_path / SNAP)
    with MemoryStore.open(tmp_path) as s:
        assert s.get_system_health()["snapshot_valid"] is False
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
        assert s.read_messages(session_id="x")["history"] == []


def test_damaged_log_header_fails_with_offset(tmp_path):
    make_store(tmp_path)
    patch(tmp_path, 0, b"XXXX")
    with pytest.raises(ConvMemError) as info:
        MemoryStore.open(tmp_path)
    assert info.value.code == "CORRUPT_STORE" and "byte offset 0" in info.value.message


def test_reads_of_a_record_damaged_after_open_report_corruption(tmp_path):
    with MemoryStore.open(tmp_path) as s:
        mid = s.write_message(session_id="s", role="user", content="fragile")["message"]["message_id"]
        off, length = records(tmp_path)[0]
        patch(tmp_path, off + length - 2, b"\xff\xff")
        with pytest.raises(ConvMemError) as info:
            s.read_messages(view="content", message_id=mid)
        assert info.value.code == "CORRUPT_STORE" and f"byte offset {off}" in info.value.message


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=60)


def test_write_failure_gives_io_error_and_leaves_nothing_partial(tmp_path):
    make_store(tmp_path, n=2, keep_snapshot=True)
    r = _run("""
        import resource, sys
        from convmem import MemoryStore, ConvMemError
        s = MemoryStore.open(sys.argv[1])
        size = s.get_system_health()["log_size"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
        try:
            s.write_message(session_id="s", role="user", content="x" * 5000)
            print("no error")
        except ConvMemError as e:
            print(e.code)
        print(len(s.read_messages(session_id="s")["history"]))
        h = s.get_system_health()
        print(h["status"], h["log_size"] == size)
    """, str(tmp_path))
    assert r.stdout.split() == ["IO_ERROR", "2", "DEGRADED", "True"], r.stderr
    with MemoryStore.open(tmp_path) as s:
        h = s.get_system_health()
        assert h["recovered_tail"] is False and h["last_sequence"] == 2
        assert len(live_contents(s)) == 2


def test_second_process_gets_busy_with_pid(tmp_path):
    with MemoryStore.open(tmp_path):
        r = _run("""
            import sys
            from convmem import MemoryStore, ConvMemError
            try:
                MemoryStore.open(sys.argv[1])
            except ConvMemError as e:
                print(e.code, e.message)
        """, str(tmp_path))
        assert r.stdout.startswith("BUSY") and str(os.getpid()) in r.stdout, r.stderr
    # Released on close: a new holder can open it.
    with MemoryStore.open(tmp_path) as s:
        assert s.get_system_health()["status"] == "OK"


def test_background_verification_of_a_large_log_reports_damage(tmp_path, monkeypatch):
    import threading

    from convmem.store import background, recovery

    monkeypatch.setattr(recovery, "VERIFY_IN_FOREGROUND_BYTES", 0)
    lowered: list[str] = []  # (the pass gives way to the threads that answer: background.py)
    real_lower = background.lower_this_thread
    monkeypatch.setattr(background, "lower_this_thread",
                        lambda: (lowered.append(threading.current_thread().name), real_lower())[1])
    make_store(tmp_path, keep_snapshot=True)
    off, length = records(tmp_path)[1]
    data = (tmp_path / LOG).read_bytes()
    patch(tmp_path, off + length - 3, bytes([data[off + length - 3] ^ 0x55]))
    s = MemoryStore.open(tmp_path)
    try:
        assert s._verifier is not None
        s._verifier.join(timeout=30)
        h = s.get_system_health()
        assert h["status"] == "DEGRADED" and f"byte offset {off}" in h["last_error"]
        assert live_contents(s) == ["message number 0", "message number 2"]
        assert lowered == ["convmem-verify"]
    finally:
        s.close()



def test_background_verification_begins_late_and_is_dropped_by_close(tmp_path, monkeypatch):
    """The background pass waits VERIFY_DELAY_SECONDS (it would share the cores with a spawned
    server's first answer); a store closed before then drops it, and the next open finds the
    damage all the same."""
    from convmem.store import recovery

    monkeypatch.setattr(recovery, "VERIFY_IN_FOREGROUND_BYTES", 0)
    monkeypatch.setattr(recovery, "VERIFY_DELAY_SECONDS", 3600)
    make_store(tmp_path, keep_snapshot=True)
    off, length = records(tmp_path)[1]
    data = (tmp_path / LOG).read_bytes()
    patch(tmp_path, off + length - 3, bytes([data[off + length - 3] ^ 0x55]))
    s = MemoryStore.open(tmp_path)
    verification = s._verifier
    assert verification is not None
    assert s.get_system_health()["status"] == "OK"  # (not begun)
    s.close()
    assert not verification.thread.is_alive() and s._findings.last_error == ""
    monkeypatch.setattr(recovery, "VERIFY_DELAY_SECONDS", 0)
    s = MemoryStore.open(tmp_path)
    try:
        s._verifier.join(timeout=30)
        h = s.get_system_health()
        assert h["status"] == "DEGRADED" and f"byte offset {off}" in h["last_error"]
    finally:
        s.close()


def test_damaged_index_section_found_in_background_rebuilds_from_log(tmp_path, monkeypatch):
    from convmem.store import recovery

    monkeypatch.setattr(recovery, "VERIFY_IN_FOREGROUND_BYTES", 0)
    monkeypatch.setattr(recovery, "DEFER_SECTION_BYTES", 0)
    make_store(tmp_path, keep_snapshot=True)
    snap = tmp_path / SNAP
    meta, _ = read_snapshot(snap)
    section = max((sec for sec in meta["sections"] if sec["name"].startswith("ix.")),
                  key=lambda sec: sec["nbytes"])
    data = bytearray(snap.read_bytes())
    data[section["offset"]] ^= 0x01
    snap.write_bytes(bytes(data))
    s = MemoryStore.open(tmp_path)
    try:
        s._verifier.join(timeout=30)
        h = s.get_system_health()
        assert h["snapshot_valid"] is False and h["status"] == "DEGRADED"
        assert section["name"] in h["last_error"]
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
        assert len(s.search_messages(query="message")["results"]) == 3
    finally:
        s.close()
    with MemoryStore.open(tmp_path) as s:  # the rebuilt snapshot is good
        assert s.get_system_health()["snapshot_valid"] is True


def damage_section(path: Path, name: str) -> np.ndarray:
    """Flip a bit in the first value of snapshot section `name`; returns its values before."""
    snap = path / SNAP
    meta, arrays = read_snapshot(snap)
    before = np.array(arrays[name])
    section = next(sec for sec in meta["sections"] if sec["name"] == name)
    data = bytearray(snap.read_bytes())
    data[section["offset"]] ^= 0x01
    snap.write_bytes(bytes(data))
    return before


def defer_every_section(monkeypatch, delay: float = 3600) -> None:
    """Open as a large store does (every section's check deferred), with the background pass
    held back for `delay` seconds."""
    from convmem.store import recovery

    monkeypatch.setattr(recovery, "VERIFY_IN_FOREGROUND_BYTES", 0)
    monkeypatch.setattr(recovery, "DEFER_SECTION_BYTES", 0)
    monkeypatch.setattr(recovery, "VERIFY_DELAY_SECONDS", delay)


@pytest.mark.parametrize("section", ["slot_ts", "doc_kind", "ix.doc_lens"])
def test_a_snapshot_written_before_the_deferred_check_does_not_carry_its_damage(
        tmp_path, monkeypatch, section):
    """A store closed before its background pass began still checks the sections its snapshot
    at close would copy: damage is not written on under a fresh checksum. It rebuilds the state
    from the log instead, and the next open serves what the log says."""
    make_store(tmp_path, keep_snapshot=True)
    before = damage_section(tmp_path, section)
    defer_every_section(monkeypatch)
    s = MemoryStore.open(tmp_path)
    assert s._unchecked is not None and not s._unchecked.done()
    s.write_message(session_id="s", role="user", content="message number 3")
    s.close()
    meta, arrays = read_snapshot(tmp_path / SNAP)  # (every checksum good)
    assert np.array_equal(arrays[section][:len(before)], before)
    with MemoryStore.open(tmp_path) as s:
        assert live_contents(s) == [f"message number {i}" for i in range(4)]
        assert s.get_system_health()["snapshot_valid"] is True


def test_a_periodic_snapshot_waits_for_the_deferred_check(tmp_path, monkeypatch):
    """A periodic snapshot (on its thread, while writes go on) is not written while sections are
    unchecked; the first write after the check writes it."""
    from convmem.api import snapshots

    make_store(tmp_path, keep_snapshot=True)
    defer_every_section(monkeypatch)
    monkeypatch.setattr(snapshots, "SNAPSHOT_EVERY_RECORDS", 1)
    with MemoryStore.open(tmp_path) as s:
        replaced = s.get_system_health()["io"]["replace_calls"]
        for i in range(3, 6):
            s.write_message(session_id="s", role="user", content=f"message number {i}")
        assert s.get_system_health()["io"]["replace_calls"] == replaced
        assert s._unchecked.check() is None  # (what the background pass does first)
        s.write_message(session_id="s", role="user", content="message number 6")
        s._wait_snapshot()
        assert s.get_system_health()["io"]["replace_calls"] == replaced + 1


def test_rebuild_index_checks_the_deferred_sections_it_would_copy(tmp_path, monkeypatch,
                                                                 caplog):
    make_store(tmp_path, keep_snapshot=True)
    before = damage_section(tmp_path, "slot_ts")
    defer_every_section(monkeypatch)
    with MemoryStore.open(tmp_path) as s:
        s.rebuild_index()  # (a rebuild that succeeds clears last_error)
        assert s.get_system_health()["snapshot_valid"] is False
        assert any("'slot_ts' is damaged" in r.getMessage() for r in caplog.records)
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
    meta, arrays = read_snapshot(tmp_path / SNAP)
    assert np.array_equal(arrays["slot_ts"], before)


def test_a_state_rebuilt_from_the_snapshot_checks_every_section_first(tmp_path, monkeypatch):
    """After in-memory work failed (Applying), the state is loaded again from the snapshot and
    the log; no background pass follows that load, so it defers nothing: the damage is found
    there, and the snapshot written next holds the log's values."""
    make_store(tmp_path, keep_snapshot=True)
    before = damage_section(tmp_path, "slot_ts")
    defer_every_section(monkeypatch)
    with MemoryStore.open(tmp_path) as s:
        s._unchecked = None  # (as if the open's sections were checked: the reload is on its own)
        s._rebuild_state("a test")
        assert s._unchecked is None
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
    meta, arrays = read_snapshot(tmp_path / SNAP)
    assert np.array_equal(arrays["slot_ts"], before)


def test_a_backup_checks_the_deferred_sections_it_would_copy(tmp_path, monkeypatch):
    store, copy = tmp_path / "store", tmp_path / "copy"
    make_store(store, keep_snapshot=True)
    before = damage_section(store, "doc_kind")
    defer_every_section(monkeypatch)
    with MemoryStore.open(store) as s:
        assert s.backup(copy)["status"] == "OK"
        assert s.get_system_health()["snapshot_valid"] is False
    meta, arrays = read_snapshot(copy / SNAP)
    assert np.array_equal(arrays["doc_kind"], before)
    with MemoryStore.open(copy) as s:
        assert live_contents(s) == [f"message number {i}" for i in range(3)]


def test_damage_in_a_deferred_catalog_section_is_found_in_the_background(tmp_path, monkeypatch):
    make_store(tmp_path, keep_snapshot=True)
    damage_section(tmp_path, "slot_ulid")
    defer_every_section(monkeypatch, delay=0)
    s = MemoryStore.open(tmp_path)
    try:
        s._verifier.join(timeout=30)
        h = s.get_system_health()
        assert h["snapshot_valid"] is False and "'slot_ulid'" in h["last_error"]
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
    finally:
        s.close()


def test_sections_are_written_largest_first(tmp_path):
    """The sections an open checks before its first answer (the small ones) lie together at
    the end of the file: one sequential read."""
    make_store(tmp_path, n=50, keep_snapshot=True)
    meta, _ = read_snapshot(tmp_path / SNAP)
    table = sorted(meta["sections"], key=lambda sec: sec["offset"])
    sizes = [sec["nbytes"] for sec in table]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]


def test_emptied_log_beside_a_snapshot_is_reported(tmp_path):
    make_store(tmp_path, keep_snapshot=True)
    os.truncate(tmp_path / LOG, 0)
    with MemoryStore.open(tmp_path) as s:
        h = s.get_system_health()
        assert h["status"] == "DEGRADED" and "log" in h["last_error"]
        assert h["active_messages"] == 0 and live_contents(s) == []


def test_snapshot_of_another_index_format_is_rebuilt_quietly(tmp_path, monkeypatch):
    from convmem.catalog import catalog

    make_store(tmp_path, keep_snapshot=True)
    monkeypatch.setattr(catalog.core_index, "ARRAYS_FORMAT", 10_000)
    with MemoryStore.open(tmp_path) as s:
        h = s.get_system_health()
        # An upgrade, not damage: no diagnostic; the state is re-derived from the log.
        assert h["status"] == "OK" and h["last_error"] == ""
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
        assert h["io"]["replace_calls"] == 1  # and a new snapshot is written


def test_leftovers_of_an_interrupted_rebuild_are_removed_at_open(tmp_path):
    make_store(tmp_path, keep_snapshot=True)
    leftovers = ["messages.log.compact", "snapshot.bin.next", "snapshot.bin.next.tmp",
                 "snapshot.bin.tmp"]
    for name in leftovers:
        (tmp_path / name).write_bytes(b"half-written")
    with MemoryStore.open(tmp_path) as s:
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
    assert not any((tmp_path / name).exists() for name in leftovers)


def rewrite_snapshot_meta(path: Path, change) -> None:
    """Apply `change(meta)` to the snapshot's meta and write it back with valid checksums (a
    tampered file that every checksum accepts)."""
    data = bytearray((path / SNAP).read_bytes())
    magic, version, meta_len, _, _ = struct.unpack_from("<8sIIII", data, 0)
    meta = orjson.loads(bytes(data[24:24 + meta_len]))
    change(meta)
    new_meta = orjson.dumps(meta)
    assert len(new_meta) <= meta_len  # (sections keep their offsets)
    new_meta = new_meta + b" " * (meta_len - len(new_meta))
    head = magic + struct.pack("<III", version, meta_len, zlib.crc32(new_meta))
    data[0:24] = head + struct.pack("<I", zlib.crc32(head))
    data[24:24 + meta_len] = new_meta
    (path / SNAP).write_bytes(bytes(data))


def test_snapshot_section_of_an_object_dtype_is_rebuilt_from_the_log(tmp_path):
    make_store(tmp_path, keep_snapshot=True)

    def object_dtype(meta):
        for sec in meta["sections"]:
            if sec["name"] == "slot_ts":
                sec["dtype"] = "|O"

    rewrite_snapshot_meta(tmp_path, object_dtype)
    with MemoryStore.open(tmp_path) as s:  # opens (it raised out of open() before)
        h = s.get_system_health()
        assert h["snapshot_valid"] is False and h["status"] == "DEGRADED"
        assert "snapshot" in h["last_error"]
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
    with MemoryStore.open(tmp_path) as s:  # and the snapshot written then is good
        assert s.get_system_health()["snapshot_valid"] is True


def test_leftover_temporary_files_are_removed_at_open(tmp_path):
    make_store(tmp_path)
    names = ["cursor.key.tmp", "snapshot.bin.tmp", "messages.log.compact", "snapshot.bin.next",
             "snapshot.bin.next.tmp"]
    for name in names:
        (tmp_path / name).write_bytes(b"half-written")
    with MemoryStore.open(tmp_path) as s:
        assert live_contents(s) == [f"message number {i}" for i in range(3)]
        assert [n for n in names if (tmp_path / n).exists()] == []


def test_cursor_key_is_made_durable_private_and_kept(tmp_path, monkeypatch):
    from convmem.store import io

    synced = []
    real = io.fsync_dir
    monkeypatch.setattr(io, "fsync_dir", lambda d, counters: (synced.append(Path(d)), real(d, counters)))
    with MemoryStore.open(tmp_path) as s:
        page = s.read_messages(view="sessions", limit=1)
    key = (tmp_path / "cursor.key").read_bytes()
    assert len(key) == 32 and (tmp_path / "cursor.key").stat().st_mode & 0o777 == 0o600
    assert tmp_path in synced  # the key's rename was followed by a directory fsync
    with MemoryStore.open(tmp_path) as s:
        assert (tmp_path / "cursor.key").read_bytes() == key
        assert page == s.read_messages(view="sessions", limit=1)


def test_damaged_posting_list_found_on_first_use_rebuilds_from_the_log(tmp_path):
    """A posting list of the snapshot whose checksum was forged along with it: decoding it on
    first use finds the damage; the search is answered from a state rebuilt from the log, and
    health reports it. Later merges (a checkpoint) do not trip over it again."""
    with MemoryStore.open(tmp_path) as s:
        s.import_messages([{"session_id": f"s{i % 5}", "role": "user",
                            "content": f"common word {i} " + ("rare" if i % 50 == 0 else "")}
                           for i in range(600)])
    meta, arrays = read_snapshot(tmp_path / SNAP)
    offsets = arrays["ix.post_offsets_content"].astype(np.int64)
    victim = int(np.argmax(np.diff(offsets)))  # the longest list: "common"'s
    lo, hi = int(offsets[victim]), int(offsets[victim + 1])
    section = next(sec for sec in meta["sections"] if sec["name"] == "ix.post_data_content")
    data = bytearray((tmp_path / SNAP).read_bytes())
    start = section["offset"]
    _, version, meta_len, _, _ = struct.unpack_from("<8sIIII", data, 0)
    for fill in range(0xFF, 0x80, -1):  # a damage whose checksum fits the meta's room
        data[start + lo + 12:start + hi] = bytes([fill]) * (hi - lo - 12)
        body = bytes(data[start:start + section["nbytes"]])
        doc = orjson.loads(bytes(data[24:24 + meta_len]))
        for sec in doc["sections"]:
            if sec["name"] == "ix.post_data_content":
                sec["xxh3"] = xxh3(body)
        new_meta = orjson.dumps(doc)
        if len(new_meta) <= meta_len:
            break
    new_meta = new_meta.ljust(meta_len)
    head = b"CVMEMSNP" + struct.pack("<III", version, meta_len, zlib.crc32(new_meta))
    data[0:24] = head + struct.pack("<I", zlib.crc32(head))
    data[24:24 + meta_len] = new_meta
    (tmp_path / SNAP).write_bytes(bytes(data))
    with MemoryStore.open(tmp_path) as s:
        if PURE:  # the pure twin checks every list at open: the snapshot is rejected there
            assert "snapshot is unusable" in s.get_system_health()["last_error"]
        else:
            assert s.get_system_health()["status"] == "OK"  # nothing decoded yet
        got = s.search_messages(query="common", limit=100)["results"]
        assert len(got) == 100 and all("common" in r["content"] for r in got)
        h = s.get_system_health()
        assert h["status"] == "DEGRADED" and h["snapshot_valid"] is False
        assert ("snapshot is unusable" if PURE else "search index is damaged") in h["last_error"]
        assert h["active_messages"] == 600
        s.write_message(session_id="s0", role="user", content="common after")
        s.checkpoint()
    with MemoryStore.open(tmp_path) as s:  # the snapshot written from the log is good
        assert s.get_system_health()["status"] == "OK"
        assert len(s.search_messages(query="common", limit=100)["results"]) == 100


def test_a_format_2_snapshot_opens_without_re_indexing_and_is_replaced_by_format_3(tmp_path, caplog):
    """Format 3 changed only the section checksum (crc32 -> XXH3): an existing store keeps its
    snapshot at the first open after the upgrade, and the next snapshot is format 3."""
    ids = make_store(tmp_path, n=5, keep_snapshot=True)
    as_format_2(tmp_path / SNAP)
    caplog.set_level("DEBUG", logger="convmem")
    with MemoryStore.open(tmp_path) as s:
        assert s.get_system_health()["snapshot_valid"] is True
        found = [r["message_id"] for r in s.search_messages(query="number", limit=10)["results"]]
        assert sorted(found) == sorted(ids)
        s.write_message(session_id="s", role="user", content="one more")
    text = caplog.text
    assert "re-indexing" not in text and "snapshot loaded, 0 log records replayed" in text
    assert struct.unpack_from("<I", (tmp_path / SNAP).read_bytes(), 8)[0] == 3
    with MemoryStore.open(tmp_path) as s:
        assert s.get_system_health()["active_messages"] == 6


def _damage_in_one_scan(data: bytes, end: int) -> list[tuple[int, int, str]]:
    """find_damage as it was: each scan_log over the whole rest of the log."""
    found, pos = [], codec.LOG_HEADER_SIZE
    while pos < end:
        res = codec.scan_log(data, pos, end)
        if res.error is None:
            break
        nxt = res.resync if res.resync >= 0 else end
        found.append((res.stop, nxt, res.error))
        pos = nxt
    return found


def test_the_log_scanned_in_windows_finds_what_one_scan_finds(tmp_path, monkeypatch):
    """The background pass reads the log a window at a time (recovery.SCAN_WINDOW_BYTES) and drops
    the pages behind it: every kind of damage, at and around the windows' edges, is found at the
    same offsets, with the same reasons and resyncs, as by one scan; the sequence is compared
    across an edge."""
    import mmap
    import random

    from convmem.store import recovery

    window = 4096
    monkeypatch.setattr(recovery, "SCAN_WINDOW_BYTES", window)
    rng = random.Random(7)
    records_ = [codec.encode_record(codec.REC_MESSAGE, seq, bytes(rng.randrange(256) for _ in
                                                                  range(rng.randrange(40, 900))))
                for seq in range(1, 120)]
    clean = codec.encode_log_header(b"\x01" * 16, 0) + b"".join(records_)
    starts = list(np.cumsum([codec.LOG_HEADER_SIZE] + [len(r) for r in records_])[:-1])
    edges = [e for e in range(window, len(clean), window)]
    spots = sorted({p for e in edges for p in (e - 21, e - 1, e, e + 3)} |
                   {int(s) + k for s in starts[::9] for k in (0, 5, 12, 30)})
    cases = []
    for p in spots:
        if codec.LOG_HEADER_SIZE <= p < len(clean):
            cases.append(("flip", p))
    for i in range(1, len(records_), 7):  # a record whose seq does not increase
        cases.append(("seq", i))
    cases.append(("torn", len(clean) - 5))
    checked = 0
    for kind, at in cases:
        data = bytearray(clean)
        if kind == "flip":
            data[at] ^= 0x5A
        elif kind == "seq":
            again = codec.encode_record(codec.REC_MESSAGE, at, records_[at][20:])  # seq repeats
            data[starts[at]:starts[at] + len(again)] = again
        else:
            data = data[:at]
        path = tmp_path / f"log-{checked}"
        path.write_bytes(bytes(data))
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            got = recovery.find_damage(mm, len(data))
            want = _damage_in_one_scan(bytes(data), len(data))
        assert got == want, (kind, at)
        checked += bool(want)
    assert checked > 60  # (most cases are damage: the comparison is not of empty lists)


@pytest.mark.parametrize("damage", ["flip", "seq", "torn"])
def test_a_replay_in_windows_applies_what_a_replay_in_one_scan_applies(tmp_path, monkeypatch,
                                                                        damage):
    """Replay (an open without a usable snapshot) walks the log a window at a time: with windows
    a few records long, the same messages are live, the same damage reported, the same torn
    tail cut, as with one window over the whole log."""
    import shutil

    from convmem.store import recovery

    src = tmp_path / "src"
    with MemoryStore.open(src) as s:
        for i in range(150):
            s.write_message(session_id="s", role="user", content=f"message number {i} " + "x" * (i % 37))
        for i in range(0, 150, 11):
            ids = [m["message_id"] for m in s.read_messages(session_id="s")["history"]]
            s.delete_message(message_id=ids[i % len(ids)])
    (src / SNAP).unlink()
    recs = records(src)
    data = (src / LOG).read_bytes()
    if damage == "flip":
        off, length = recs[77]
        patch(src, off + length - 3, bytes([data[off + length - 3] ^ 0x55]))
    elif damage == "seq":  # record 90 takes record 89's sequence number
        off89, off90 = recs[89][0], recs[90][0]
        patch(src, off90 + 12, data[off89 + 12:off89 + 20])
        frame = bytearray((src / LOG).read_bytes()[off90:off90 + recs[90][1]])
        struct.pack_into("<I", frame, 0, zlib.crc32(bytes(frame[4:])))
        patch(src, off90, bytes(frame[:4]))
    else:
        os.truncate(src / LOG, recs[-1][0] + 7)
    from convmem.store import maintenance
    from convmem.store.io import IoCounters
    from convmem.store.logfile import LogFile

    seen = {}
    for window in (1 << 26, 2048):
        monkeypatch.setattr(recovery, "SCAN_WINDOW_BYTES", window)
        work = tmp_path / f"w{window}"
        shutil.copytree(src, work)
        lf = LogFile.open(work / LOG, IoCounters(), read_only=True)
        try:  # `convmem verify`'s reading of the log, before the open repairs it
            checked = maintenance.verify(work, lf)
        finally:
            lf.close()
        with MemoryStore.open(work) as s:
            h = s.get_system_health()
            seen[window] = (live_contents(s), h["status"], h["last_error"], s.recovered_tail,
                            (work / LOG).stat().st_size, checked["log_records"],
                            checked["log_damage"])
    assert seen[2048] == seen[1 << 26]
    contents, status, last_error, torn, _, n_records, found = seen[2048]
    assert n_records >= 150 and len(found) == 1 and not checked["ok"]
    assert len(contents) > 50  # (a page of them)
    assert (status, torn) == (("OK", True) if damage == "torn" else ("DEGRADED", False))
    if damage == "seq":
        assert "sequence" in last_error

"""The periodic snapshot is written off the write path (issue 14): a write that makes one due
takes the state and returns; the file is written by a thread of its own, and writes, reads and
health go on meanwhile. No timing thresholds: a slow write_snapshot held at a barrier."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from convmem import MemoryStore
from convmem.api import snapshots as snapshots_module
from convmem.store import background
from convmem.store.snapshot import SNAPSHOT_NAME, read_snapshot

EVERY = 10


def write(s: MemoryStore, i: int, session: str = "s") -> dict:
    return s.write_message(session_id=session, role="user", content=f"message {i}")["message"]


class HeldWrite:
    """write_snapshot that waits at `release` before writing (and notes when it started)."""

    def __init__(self) -> None:
        self.real = snapshots_module.write_snapshot
        self.started = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.metas: list[dict] = []
        self.events: list[str] = []

    def __call__(self, path, meta, arrays, io):
        self.metas.append(dict(meta))
        self.started.set()
        assert self.release.wait(30), "the test never released the snapshot"
        out = self.real(path, meta, arrays, io)
        self.events.append("snapshot written")
        self.done.set()
        return out


@pytest.fixture
def held(monkeypatch) -> HeldWrite:
    monkeypatch.setattr(snapshots_module, "SNAPSHOT_EVERY_RECORDS", EVERY)
    h = HeldWrite()
    monkeypatch.setattr(snapshots_module, "write_snapshot", h)
    return h


def settle(s: MemoryStore) -> None:
    with s._mutex:
        s._wait_snapshot()


def test_a_write_during_a_background_snapshot_completes_before_it(store_dir: Path, held: HeldWrite):
    s = MemoryStore.open(store_dir)
    try:
        for i in range(EVERY):
            write(s, i)  # the last one makes the snapshot due: it returns with it being written
        assert held.started.wait(30)
        size_at_snapshot = s._log.size
        seq_at_snapshot = s.get_system_health()["last_sequence"]
        # Writes, a read and health go on while the snapshot is held at the barrier.
        later = [write(s, 100 + i) for i in range(3)]
        assert not held.done.is_set()
        assert len(s.read_messages(session_id="s")["history"]) == EVERY + 3
        assert s.get_system_health()["status"] == "OK"
        held.release.set()
        settle(s)
        assert held.done.is_set()
        # The snapshot describes exactly the state taken, not the writes after it.
        meta, _ = read_snapshot(store_dir / SNAPSHOT_NAME)
        assert meta["covered_end"] == size_at_snapshot
        assert meta["last_seq"] == seq_at_snapshot
        assert s._catalog.unsaved_records == len(later)  # (still to be saved)
    finally:
        held.release.set()
        s.close()
    with MemoryStore.open(store_dir) as s:
        assert len(s.read_messages(session_id="s")["history"]) == EVERY + 3


def test_the_frozen_state_does_not_see_later_updates_and_deletes(store_dir: Path, held: HeldWrite,
                                                                  tmp_path: Path):
    copy = tmp_path / "copy"
    s = MemoryStore.open(store_dir)
    try:
        ids = [write(s, i)["message_id"] for i in range(EVERY)]
        assert held.started.wait(30)
        # Changed in place while the snapshot waits: the catalog's columns and the index's docs.
        s.update_message(message_id=ids[0], content="changed after the snapshot")
        s.delete_message(message_id=ids[1])
        held.release.set()
        settle(s)
        # The snapshot with the log cut where it ends: it must hold the state it was taken at.
        meta, _ = read_snapshot(store_dir / SNAPSHOT_NAME)
        copy.mkdir()
        for name in (SNAPSHOT_NAME, "cursor.key"):
            (copy / name).write_bytes((store_dir / name).read_bytes())
        (copy / "messages.log").write_bytes((store_dir / "messages.log").read_bytes()[: meta["covered_end"]])
    finally:
        held.release.set()
        s.close()
    with MemoryStore.open(copy) as c:
        assert c.get_system_health()["snapshot_valid"] is True
        hist = c.read_messages(session_id="s")["history"]
        assert [m["message_id"] for m in hist] == ids
        assert hist[0]["content"] == "message 0"
        assert c.search_messages(query="changed")["results"] == []


def test_checkpoint_and_close_wait_for_it(store_dir: Path, held: HeldWrite):
    s = MemoryStore.open(store_dir)
    for i in range(EVERY + 2):
        write(s, i)
    assert held.started.wait(30)
    t = threading.Thread(target=s.close)
    t.start()
    held.release.set()
    t.join(30)
    assert not t.is_alive()
    assert held.events == ["snapshot written", "snapshot written"]  # the periodic one, then close's
    meta, _ = read_snapshot(store_dir / SNAPSHOT_NAME)
    assert meta["covered_end"] == (store_dir / "messages.log").stat().st_size


def test_rebuild_index_waits_for_it(store_dir: Path, held: HeldWrite, monkeypatch):
    from convmem.store import compaction
    real = compaction.write_compacted_log

    def noted(*args, **kwargs):
        held.events.append("rebuild")
        return real(*args, **kwargs)

    monkeypatch.setattr(compaction, "write_compacted_log", noted)
    s = MemoryStore.open(store_dir)
    try:
        ids = [write(s, i)["message_id"] for i in range(EVERY)]
        assert held.started.wait(30)
        s.delete_message(message_id=ids[0])
        out: list = []
        t = threading.Thread(target=lambda: out.append(s.rebuild_index()))
        t.start()
        held.release.set()
        t.join(30)
        assert out and out[0]["status"] == "OK"
        assert held.events[:2] == ["snapshot written", "rebuild"]
    finally:
        held.release.set()
        s.close()
    with MemoryStore.open(store_dir) as s:
        assert s.get_system_health()["snapshot_valid"] is True
        assert [m["message_id"] for m in s.read_messages(session_id="s")["history"]] == ids[1:]


def test_a_failed_background_snapshot_is_reported_in_health(store_dir: Path, monkeypatch):
    monkeypatch.setattr(snapshots_module, "SNAPSHOT_EVERY_RECORDS", EVERY)

    def enospc(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots_module, "write_snapshot", enospc)
    with MemoryStore.open(store_dir) as s:
        for i in range(EVERY):
            write(s, i)
        settle(s)
        h = s.get_system_health()
        assert h["status"] == "DEGRADED" and "snapshot write failed" in h["last_error"]
        monkeypatch.undo()
        s.checkpoint()
        assert s.get_system_health()["status"] == "OK"


@pytest.fixture
def held_job(monkeypatch, held: HeldWrite) -> HeldWrite:
    """The background job held before it does anything (the histories and the index's sections
    too are derived from the frozen state only after the changes below)."""
    real_run = snapshots_module.SnapshotJob.run

    def run(job):
        if job._thread is not None:  # (a background job; close's own runs at once)
            assert held.release.wait(30), "the test never released the snapshot"
        real_run(job)

    monkeypatch.setattr(snapshots_module.SnapshotJob, "run", run)
    return held


def test_frozen_sections_equal_the_state_they_were_taken_at(store_dir: Path, held_job: HeldWrite,
                                                           tmp_path: Path):
    """The catalog's columns and the sessions' histories are frozen without a copy
    (Column.frozen, SessionIndex.freeze): every section of the held snapshot must still equal,
    array for array, the state replayed from the log up to the snapshot's end, after updates,
    deletes, restores, metadata changes and appends that grow the columns past their capacity
    went on while it was being written."""
    import numpy as np
    truth = tmp_path / "truth"
    s = MemoryStore.open(store_dir)
    try:
        ids = [s.write_message(session_id="s", role="user", content=f"message {i}",
                               metadata={"tags": [f"t{i % 3}"], "importance": i})
               ["message"]["message_id"] for i in range(EVERY - 2)]
        s.delete_message(message_id=ids[2])  # in the trash before the snapshot
        write(s, 50, session="other")  # the EVERY-th record: the snapshot is due
        held = held_job
        assert s._snapshot_job is not None and not held.started.is_set()
        s.update_message(message_id=ids[0], content="changed", metadata={"tags": ["new"]})
        s.delete_message(message_id=ids[1])
        s.restore_message(message_id=ids[2])
        # (the delete shifted a frozen history, the restore went back into its middle)
        write(s, 60)  # at its end
        for i in range(400):  # past the columns' capacity (256): they grow meanwhile
            write(s, 1000 + i, session=f"g{i % 7}")
        held.release.set()
        settle(s)
        meta, sections = read_snapshot(store_dir / SNAPSHOT_NAME)
        truth.mkdir(mode=0o700)
        (truth / "cursor.key").write_bytes((store_dir / "cursor.key").read_bytes())
        (truth / "messages.log").write_bytes(
            (store_dir / "messages.log").read_bytes()[: meta["covered_end"]])
        sections = {k: np.array(v) for k, v in sections.items()}
    finally:
        held.release.set()
        s.close()
    with MemoryStore.open(truth) as t:  # no snapshot: the state replayed from the log
        _, expected, histories = t._catalog._state_sections()
        expected.update(histories())
    compared = [k for k in expected if not k.startswith("ix.")]
    assert {"slot_doc", "doc_flags", "rk.tagset", "trash_slot", "hist_ts", "hist_slots",
            "kind_counts"} <= set(compared)
    for name in compared:
        assert np.array_equal(sections[name], expected[name]), name


def _count_snapshots(monkeypatch) -> list[int]:
    written: list[int] = []
    real = snapshots_module.write_snapshot

    def counting(path, meta, arrays, io):
        written.append(meta["last_seq"])
        return real(path, meta, arrays, io)

    monkeypatch.setattr(snapshots_module, "write_snapshot", counting)
    return written


def test_import_messages_writes_one_snapshot_at_its_end(store_dir: Path, monkeypatch):
    """A bulk import defers the periodic snapshots (deferring_snapshots): 500 records with a
    snapshot due every 10 give one snapshot, its closing checkpoint, covering them all."""
    monkeypatch.setattr(snapshots_module, "SNAPSHOT_EVERY_RECORDS", EVERY)
    written = _count_snapshots(monkeypatch)
    items = [{"session_id": f"s{i % 5}", "role": "user", "content": f"imported {i}"}
             for i in range(500)]
    with MemoryStore.open(store_dir) as s:
        assert s.import_messages(items, batch_size=20) == 500
        assert written == [500]
        # Afterwards the cadence is as before (Cadence.due: a quarter of the docs, at least EVERY).
        due = next(k for k in range(1, 1000) if k >= max(EVERY, (500 + k) // 4))
        for i in range(due):
            write(s, i)
        settle(s)
        assert written == [500, 500 + due]


def test_deferring_snapshots_ends_with_its_block_even_on_an_error(store_dir: Path, monkeypatch):
    monkeypatch.setattr(snapshots_module, "SNAPSHOT_EVERY_RECORDS", EVERY)
    written = _count_snapshots(monkeypatch)
    items = [{"session_id": "s", "role": "user", "content": f"imported {i}"} for i in range(30)]
    items.append({"session_id": "s", "role": "nobody", "content": "bad"})
    with MemoryStore.open(store_dir) as s:
        with pytest.raises(Exception, match="role"):
            s.import_messages(items, batch_size=15)  # two groups imported, the third refused
        settle(s)
        # The block's end found a snapshot due (30 unsaved) and wrote it in the background.
        assert written == [30]
        assert s.get_system_health()["active_messages"] == 30
        assert s._catalog.index.merge_factor == 2


def test_a_bulk_import_merges_more_segments_at_once(store_dir: Path):
    """Inside deferring_snapshots (a bulk import) the index merges IMPORT_MERGE_FACTOR segments
    at once, nested blocks included; after the outermost, two again."""
    from convmem.api.store import IMPORT_MERGE_FACTOR
    assert IMPORT_MERGE_FACTOR == 8
    with MemoryStore.open(store_dir) as s:
        assert s._catalog.index.merge_factor == 2
        with s.deferring_snapshots():
            with s.deferring_snapshots():
                assert s._catalog.index.merge_factor == 8
            assert s._catalog.index.merge_factor == 8
        assert s._catalog.index.merge_factor == 2


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux only")
def test_the_snapshot_thread_runs_below_the_writers_priority(store_dir: Path, held: HeldWrite,
                                                             monkeypatch):
    # The merge and the file write share the CPU with the writes' threads; at a lower priority
    # they give way when a flush wakes (convmem/store/background.py).
    seen: list[int] = []
    real = held.real
    monkeypatch.setattr(held, "real", lambda *a: (seen.append(_nice()), real(*a))[1])
    before = _nice()
    s = MemoryStore.open(store_dir)
    try:
        for i in range(EVERY):
            write(s, i)
        held.release.set()
        settle(s)
    finally:
        s.close()
    assert seen == [min(19, before + background.BACKGROUND_NICE)]
    assert before < 19 and seen[0] > before
    assert _nice() == before  # the writers' thread keeps its own


def test_a_thread_that_may_not_lower_itself_still_runs(monkeypatch):
    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    ran = threading.Event()
    thread = background.background_thread(ran.set, "convmem-test")
    thread.start()
    thread.join(5)
    assert ran.is_set()
    assert background.lower_this_thread() is False

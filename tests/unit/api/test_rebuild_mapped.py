"""After rebuild_index the store serves its new snapshot mapped, as after an open, not the
arrays the snapshot was written from (anonymous memory the size of the state, held until the
process ended); when the file does not read back, the arrays serve and nothing is lost. After
a rebuild and at the end of a bulk import the freed heap is given back (api/heap.py)."""
from __future__ import annotations

import gc
import logging
import mmap
import platform
from pathlib import Path

import numpy as np
import pytest

from convmem import MemoryStore
from convmem._core import CORE_KIND
from convmem.api import heap
from convmem.store import compaction
from convmem.store.snapshot import SnapshotError

QUERIES = ["alpha", "beta gamma", "message 7", "東京"]


def _fill(s: MemoryStore) -> None:
    ids = []
    for i in range(240):
        words = ["alpha", "beta", "gamma", "delta"][i % 4]
        text = f"message {i} {words} {'東京の天気' if i % 5 == 0 else 'plain'}"
        ids.append(s.write_message(session_id=f"s{i % 3}", role="user", content=text)
                   ["message"]["message_id"])
    for mid in ids[::7]:
        s.delete_message(message_id=mid)


def _answers(s: MemoryStore) -> list:
    return [[(r["message_id"], r["score"]) for r in s.search_messages(query=q, limit=20)["results"]]
            for q in QUERIES]


def _owner(a: np.ndarray) -> object:
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def _postings_owner(s: MemoryStore) -> object:
    return _owner(s._catalog.index.to_arrays()["post_data_content"])


def test_rebuilt_state_is_served_from_the_mapped_snapshot(
        store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    adopted = []
    real = compaction.mapped_state
    monkeypatch.setattr(compaction, "mapped_state",
                        lambda *a: adopted.append(real(*a)) or adopted[-1])
    with MemoryStore.open(store_dir) as s:
        _fill(s)
        before = _answers(s)
        assert s.rebuild_index()["status"] == "OK"
        (_, arrays), = adopted
        assert arrays and all(isinstance(_owner(a), mmap.mmap) for a in arrays.values())
        if CORE_KIND == "compiled":  # (the twin copies what it loads into its own lists)
            assert isinstance(_postings_owner(s), mmap.mmap)
        assert _answers(s) == before
        new = s.write_message(session_id="s9", role="user", content="alpha after the rebuild")
        found = s.search_messages(query="rebuild", limit=5)["results"]
        assert [r["message_id"] for r in found] == [new["message"]["message_id"]]
        after = _answers(s)
    with MemoryStore.open(store_dir) as s:
        assert _answers(s) == after


def test_a_snapshot_that_does_not_read_back_leaves_the_state_in_memory(
        store_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def unreadable(path, growable=None, drop_checked=False):
        raise SnapshotError("section ix.post_data_content: checksum mismatch")

    with MemoryStore.open(store_dir) as s:
        _fill(s)
        before = _answers(s)
        monkeypatch.setattr(compaction, "read_snapshot", unreadable)
        with caplog.at_level(logging.WARNING, logger="convmem"):
            assert s.rebuild_index()["status"] == "OK"
        assert "did not read back" in caplog.text and "checksum mismatch" in caplog.text
        assert not isinstance(_postings_owner(s), mmap.mmap)  # (the twin's never is)
        assert _answers(s) == before
        assert s.get_system_health()["status"] == "OK"
    monkeypatch.undo()
    with MemoryStore.open(store_dir) as s:
        assert _answers(s) == before


def test_rebuild_gives_the_freed_heap_back(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = heap.give_back
    monkeypatch.setattr(heap, "give_back", lambda: calls.append(1) or real())
    with MemoryStore.open(store_dir) as s:
        _fill(s)
        assert calls == []
        s.rebuild_index()
        assert calls == [1]
    # where the C library is glibc the trim really runs
    assert real() is (platform.libc_ver()[0] == "glibc")


def test_a_bulk_import_gives_the_freed_heap_back_once_at_its_end(
        store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(heap, "give_back", lambda: calls.append(1) or True)
    items = ({"session_id": "s", "role": "user", "content": f"imported {i}"} for i in range(30))
    with MemoryStore.open(store_dir) as s:
        with s.deferring_snapshots():
            assert s.import_messages(items, batch_size=10) == 30  # (a deferral inside: nested)
            assert calls == []
        assert calls == [1]
        s.write_message(session_id="s", role="user", content="one more")
        assert calls == [1]
        with pytest.raises(RuntimeError), s.deferring_snapshots():
            raise RuntimeError("an import that fails")
        assert calls == [1]


def test_a_rebuild_reading_its_spans_in_chunks_keeps_every_message(tmp_path: Path, monkeypatch):
    """write_compacted_log turns the live records' spans into Python ints a chunk at a time: with
    chunks of 7 records, the rebuilt store holds the same messages, in the same order, with
    the same answers, as before the rebuild."""
    monkeypatch.setattr(compaction, "_SPAN_CHUNK", 7)
    with MemoryStore.open(tmp_path / "s") as s:
        _fill(s)
        before = _answers(s)
        history = [[m["message_id"] for m in s.read_messages(session_id=f"s{k}", limit=100)["history"]]
                   for k in range(3)]
        assert s.rebuild_index()["messages_indexed"] == 240 - len(range(0, 240, 7))
        assert _answers(s) == before
    with MemoryStore.open(tmp_path / "s") as s:
        assert [[m["message_id"] for m in s.read_messages(session_id=f"s{k}", limit=100)["history"]]
                for k in range(3)] == history
        assert _answers(s) == before



def _mapped_snapshots(directory: Path) -> set[tuple[str, bool]]:
    """The snapshot files of `directory` this process maps: (inode, deleted)."""
    out = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith(str(directory / "snapshot.bin")):
            out.add((parts[4], parts[5].endswith("(deleted)")))
    return out


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/maps")
def test_a_rebuild_unmaps_the_snapshot_it_replaced_at_once(store_dir: Path) -> None:
    """When rebuild_index returns, the snapshot it replaced is no longer mapped, with the cyclic
    collector off: nothing of the old catalog is held by a reference cycle (a loaded session
    and its SessionIndex were one), which kept the old file's pages resident and its disk space
    allocated (the file deleted) until a collection happened to run."""
    with MemoryStore.open(store_dir) as s:
        _fill(s)
    with MemoryStore.open(store_dir) as s:                # served from the snapshot, mapped
        before = _answers(s)
        s.search_messages(query="alpha", session_id="s1")  # a session made from the snapshot
        old = _mapped_snapshots(store_dir)
        assert old and not any(deleted for _, deleted in old)
        gc.disable()
        try:
            assert s.rebuild_index()["status"] == "OK"
            now = _mapped_snapshots(store_dir)
        finally:
            gc.enable()
        assert now and not any(deleted for _, deleted in now)
        assert not {inode for inode, _ in old} & {inode for inode, _ in now}
        assert _answers(s) == before


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/maps")
def test_close_unmaps_the_snapshot(store_dir: Path) -> None:
    """close() lets the snapshot's map go at once, with the cyclic collector off (the store and
    its catalog refer to each other); a closed store still refuses calls as before."""
    with MemoryStore.open(store_dir) as s:
        _fill(s)
    s = MemoryStore.open(store_dir)
    _answers(s)
    s.search_messages(query="alpha", session_id="s1")
    assert _mapped_snapshots(store_dir)
    gc.disable()
    try:
        s.close()
        assert _mapped_snapshots(store_dir) == set()
    finally:
        gc.enable()
    with pytest.raises(Exception, match="closed"):
        s.search_messages(query="alpha")

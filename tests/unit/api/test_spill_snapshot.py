"""A foreground snapshot (and rebuild_index's) moves the merged index's large posting data to a spill file
(store/spill.py) before it builds the rest: the snapshot holds the same sections, the index goes
on answering from the file, and bytes that come back from it changed are never written into a
snapshot: the store rebuilds its state from the log."""
from __future__ import annotations

import gc
import os

import orjson
import pytest

from convmem import MemoryStore
from convmem._core import CORE_KIND
from convmem.api import snapshots
from convmem.errors import IO_ERROR, ConvMemError
from convmem.store import snapshot as snapshot_mod
from convmem.store import spill as spill_mod

pytestmark = pytest.mark.skipif(CORE_KIND != "compiled", reason="the compiled index's postings")

N = 7000


def _items():
    for i in range(N):
        yield {"session_id": f"s{i % 7}", "role": "user",
               "content": f"message number {i} about marker{i % 50} and rare{i} 東京{i % 9}"}


def _found(store: MemoryStore, i: int) -> list[str]:
    return [h["content"] for h in store.search_messages(query=f"rare{i}", limit=5)["results"]]


def _expected(i: int) -> list[str]:
    return [f"message number {i} about marker{i % 50} and rare{i} 東京{i % 9}"]


def _index_sections(directory) -> dict[str, int]:
    with open(directory / snapshot_mod.SNAPSHOT_NAME, "rb") as f:
        head = snapshot_mod._HEAD.unpack(f.read(snapshot_mod._HEAD.size))  # noqa: SLF001
        meta = orjson.loads(f.read(head[2]))
    return {e["name"]: e["xxh3"] for e in meta["sections"] if e["name"].startswith("ix.post_")}


@pytest.fixture
def spilled(monkeypatch):
    """Every non-empty field spills; the bytes each take moved (None: refused)."""
    taken: list = []
    take = spill_mod.SpillFile.take

    def recording(self, data):
        out = take(self, data)
        taken.append(None if out is None else out.nbytes)  # (not the array: no reference kept)
        return out

    monkeypatch.setattr(spill_mod, "SPILL_MIN_BYTES", 1)
    monkeypatch.setattr(spill_mod.SpillFile, "take", recording)
    return taken


def _spill_files_mapped(directory) -> list[str]:
    """The unnamed files of `directory` this process maps (O_TMPFILE's show as "#inode")."""
    with open("/proc/self/maps") as f:
        return [line.split(None, 5)[5].strip() for line in f
                if len(line.split(None, 5)) == 6
                and line.split(None, 5)[5].startswith(f"{directory}/#")]


def test_a_spilled_snapshot_holds_the_same_postings(tmp_path, spilled, monkeypatch) -> None:
    adopted = []
    adopt = snapshots.adopt_snapshot_postings

    def spy(path, index) -> None:
        adopted.append(len(_spill_files_mapped(tmp_path / "spilled")))
        adopt(path, index)

    monkeypatch.setattr(snapshots, "adopt_snapshot_postings", spy)
    with MemoryStore.open(tmp_path / "spilled") as store:
        assert store.import_messages(_items()) == N
        assert spilled and all(n is not None for n in spilled)
        assert sum(spilled) > 50_000  # (the content field)
        # The spill file was mapped until the snapshot was written, and then the index read the
        # same bytes from the snapshot instead: no unnamed file is left held.
        assert adopted == [1]
        gc.collect()
        assert _spill_files_mapped(tmp_path / "spilled") == []
        for i in (0, 4321, N - 1):
            assert _found(store, i) == _expected(i)  # (read from the file's mapping)
        assert store.get_system_health()["last_error"] == ""
    assert os.listdir(tmp_path / "spilled") and not any(
        name.startswith(".") or name.endswith(".tmp") for name in os.listdir(tmp_path / "spilled"))
    monkeypatch.setattr(spill_mod, "SPILL_MIN_BYTES", 1 << 40)
    count = len(spilled)
    with MemoryStore.open(tmp_path / "kept") as store:
        store.import_messages(_items())
    assert len(spilled) == count  # (nothing asked of the spill file)
    assert _index_sections(tmp_path / "spilled") == _index_sections(tmp_path / "kept")
    with MemoryStore.open(tmp_path / "spilled") as store:
        for i in (5, 1234, N - 2):
            assert _found(store, i) == _expected(i)


def test_changed_spill_bytes_rebuild_the_state_from_the_log(tmp_path, spilled, monkeypatch,
                                                             caplog) -> None:
    drop = spill_mod.SpillFile.drop_pages

    def damaging(self) -> None:  # (the disk gives a page back wrong, after the index took it)
        drop(self)
        os.pwrite(self._fd, b"\xff" * 64, 4096)  # noqa: SLF001

    monkeypatch.setattr(spill_mod.SpillFile, "drop_pages", damaging)
    with MemoryStore.open(tmp_path) as store:
        assert store.import_messages(_items()) == N
        health = store.get_system_health()
        assert health["last_error"].startswith("CORRUPT_STORE: the search index is damaged")
        assert "not those written" in health["last_error"]
        # once: the rebuilt state's snapshot keeps its postings in memory (the file is not
        # trusted again by this store)
        assert caplog.text.count("not those written") == 1
        assert health["active_messages"] == N
        for i in (0, 4321, N - 1):
            assert _found(store, i) == _expected(i)
    monkeypatch.setattr(spill_mod.SpillFile, "drop_pages", drop)
    with MemoryStore.open(tmp_path) as store:
        assert store.get_system_health()["active_messages"] == N
        for i in (7, 2345, N - 3):
            assert _found(store, i) == _expected(i)


def test_rebuild_index_spills_the_new_index_and_serves_it(tmp_path, spilled) -> None:
    with MemoryStore.open(tmp_path) as store:
        store.import_messages(_items())
        for i in range(0, N, 2):  # (half replaced: the rebuild renumbers the docs)
            store.delete_message(message_id=store.search_messages(
                query=f"rare{i}", limit=1)["results"][0]["message_id"])
        count = len(spilled)
        answer = store.rebuild_index()
        assert answer["messages_indexed"] == N // 2
        assert len(spilled) > count and spilled[-1] is not None
        for i in (1, 4321, N - 1):
            assert _found(store, i) == _expected(i)
        assert _found(store, 4320) == []
        assert store.get_system_health()["last_error"] == ""
    with MemoryStore.open(tmp_path) as store:
        for i in (3, 1235, N - 3):
            assert _found(store, i) == _expected(i)


def test_a_rebuild_whose_spill_comes_back_changed_leaves_the_store_as_it_was(
        tmp_path, spilled, monkeypatch) -> None:
    with MemoryStore.open(tmp_path) as store:
        store.import_messages(_items())
        drop = spill_mod.SpillFile.drop_pages

        def damaging(self) -> None:
            drop(self)
            os.pwrite(self._fd, b"\xff" * 64, 4096)  # noqa: SLF001

        monkeypatch.setattr(spill_mod.SpillFile, "drop_pages", damaging)
        with pytest.raises(ConvMemError) as raised:
            store.rebuild_index()
        assert raised.value.code == IO_ERROR
        assert "the store is unchanged" in str(raised.value)
        for i in (0, 4321, N - 1):
            assert _found(store, i) == _expected(i)
    monkeypatch.setattr(spill_mod.SpillFile, "drop_pages", drop)
    with MemoryStore.open(tmp_path) as store:
        assert store.get_system_health()["active_messages"] == N
        assert sorted(os.listdir(tmp_path)) == sorted(
            ["LOCK", "messages.log", "snapshot.bin", "cursor.key"])

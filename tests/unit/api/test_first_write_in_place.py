"""The first writes after an open from a snapshot append to the catalog's and the recall keys'
columns, the index's per-doc and term arrays and the id map in place, in private mappings of
their sections (store/snapshot.read_snapshot's `growable`, catalog/columns.py,
shared.garr_borrow), rather than copying each whole; the snapshot file never sees them, and the
state they make is the one a replay of the log makes."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from convmem import MemoryStore
from convmem._core import CORE_KIND
from convmem.catalog.catalog import (COLUMN_SECTIONS, GROWABLE_SECTIONS, INDEX_GROWABLE_SECTIONS,
                                     Catalog)
from convmem.catalog.recall_keys import COLUMN_SECTIONS as RECALL_SECTIONS
from convmem.store.snapshot import SNAPSHOT_NAME, read_snapshot


def _columns(s: MemoryStore) -> dict:
    cat = s._catalog
    return {**cat._columns(),
            **{f"rk.{name}": getattr(cat.recall, name)
               for name in ("content_key", "gist_key", "tagset", "facet", "importance")}}


def _fill(s: MemoryStore, n: int) -> None:
    for i in range(n):
        s.write_message(session_id=f"s{i % 4}", role="user", content=f"message {i} about apples",
                        metadata={"tags": [f"t{i % 3}"], "importance": 1 + i % 5})


def _answers(s: MemoryStore) -> list:
    found = s.search_messages(query="apples", limit=100)["results"]
    return sorted((r["message_id"], r["content"], r["metadata"]["importance"]) for r in found)


def test_the_growable_sections_are_every_column_the_catalog_and_recall_keys_adopt(store_dir: Path):
    with MemoryStore.open(store_dir) as s:
        assert set(_columns(s)) == set(COLUMN_SECTIONS) | set(RECALL_SECTIONS)
        assert set(s._catalog._columns()) == set(COLUMN_SECTIONS)
    assert GROWABLE_SECTIONS == (set(COLUMN_SECTIONS) | set(RECALL_SECTIONS)
                                 | set(INDEX_GROWABLE_SECTIONS) | {"slot_ulid", "id_table"})
    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="one")
        s.checkpoint()
    sections = {e["name"] for e in read_snapshot(store_dir / SNAPSHOT_NAME)[0]["sections"]}
    # (the twin has no length codes or tag buckets)
    optional = {"ix.qlen", "ix.qlen2", "ix.tagb"} if CORE_KIND != "compiled" else set()
    assert GROWABLE_SECTIONS - optional <= sections  # (no name that a snapshot does not hold)
    assert Catalog.growable_section("slot_doc") and not Catalog.growable_section("ix.post_data_content")


def test_writes_after_an_open_append_in_place_and_never_reach_the_snapshot(store_dir: Path):
    with MemoryStore.open(store_dir) as s:
        _fill(s, 300)
        s.checkpoint()
    snapshot = (store_dir / SNAPSHOT_NAME).read_bytes()
    with MemoryStore.open(store_dir) as s:
        cols = _columns(s)
        mapped = {name: col.data for name, col in cols.items()}
        assert all(col.mapped for col in cols.values()), [n for n, c in cols.items() if not c.mapped]
        _fill(s, 5)
        s.update_message(message_id=_answers(s)[0][0], metadata={"importance": 5})  # (in place)
        assert all(cols[name].data is data for name, data in mapped.items())  # no copy taken
        assert all(col.n == 305 for col in _columns(s).values())
        assert (store_dir / SNAPSHOT_NAME).read_bytes() == snapshot
        read_snapshot(store_dir / SNAPSHOT_NAME)  # (every checksum still right)
        assert s.get_system_health()["status"] == "OK"
        after = _answers(s)
        values = {name: col.view().copy() for name, col in _columns(s).items()}
        s.checkpoint()  # a snapshot written from the mapped columns
    with MemoryStore.open(store_dir) as s:
        assert _answers(s) == after
        assert all(np.array_equal(col.view(), values[n]) for n, col in _columns(s).items())
    (store_dir / SNAPSHOT_NAME).unlink()  # the same state replayed from the log alone
    with MemoryStore.open(store_dir) as s:
        assert _answers(s) == after
        assert not any(col.mapped for col in _columns(s).values())
        assert all(np.array_equal(col.view(), values[n]) for n, col in _columns(s).items())


def test_past_the_room_a_column_grows_into_memory_of_its_own(store_dir: Path):
    with MemoryStore.open(store_dir) as s:
        _fill(s, 40)
        s.checkpoint()
    with MemoryStore.open(store_dir) as s:
        col = s._catalog.slot_ts
        room = len(col.data) - col.n
        assert col.mapped and room > 0
        _fill(s, room + 1)
        assert not col.mapped and col.n == 40 + room + 1
        assert np.all(np.diff(col.view()) >= 0)  # (timestamps in creation order, none lost)
        before = _answers(s)
    with MemoryStore.open(store_dir) as s:
        assert _answers(s) == before


def test_the_first_write_after_an_open_copies_no_array_whole(store_dir: Path):
    """What the first write allocates (tracemalloc sees the core's PyMem_Raw memory too) stays
    far below the growable sections' bytes, which copying them would allocate."""
    with MemoryStore.open(store_dir) as s:
        s.import_messages(({"session_id": f"s{i % 50}", "role": "user",
                            "content": f"imported message {i} word{i % 997}"}
                           for i in range(10_000)), batch_size=2000)
    meta, arrays = read_snapshot(store_dir / SNAPSHOT_NAME)
    growable = sum(arrays[name].nbytes for name in GROWABLE_SECTIONS if name in arrays)
    assert growable > 800_000
    with MemoryStore.open(store_dir) as s:
        s.search_messages(query="imported", limit=5)
        tracemalloc.start()
        try:
            s.write_message(session_id="s1", role="user", content="a first write, newword")
            s.write_message(session_id="s2", role="user", content="a second write, otherword")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < growable // 8, (peak, growable)
        assert s.search_messages(query="newword", limit=5)["results"][0]["content"] == \
            "a first write, newword"
    with MemoryStore.open(store_dir) as s:
        assert len(s.search_messages(query="otherword", limit=5)["results"]) == 1


@pytest.mark.skipif(CORE_KIND != "compiled",
                    reason="the twins copy what they load at open: nothing is mapped to view")
def test_a_snapshot_frozen_after_an_open_views_the_mapped_arrays_and_no_write_reaches_it(
        store_dir: Path):
    """Freezing the state for a periodic snapshot copied the mapped arrays under the store's
    lock (at 1M, a 115 ms triggering write); it views them, and later writes still append in
    place past what it views."""
    with MemoryStore.open(store_dir) as s:
        s.import_messages(({"session_id": f"s{i % 50}", "role": "user",
                            "content": f"imported message {i} word{i % 997}"}
                           for i in range(10_000)), batch_size=2000)
    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s1", role="user", content="a first write")
        ix, ids = s._catalog.index, s._catalog.ids
        tracemalloc.start()
        try:
            frozen = ix.freeze()
            frozen_ids = ids.keys_array(share=True)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        arrays = frozen.arrays()
        ulid, lens = arrays["doc_ulid"].copy(), arrays["doc_lens"].copy()
        keys = frozen_ids.copy()
        viewed = ulid.nbytes + lens.nbytes + keys.nbytes  # (three of the arrays it views)
        assert peak < viewed // 2, (peak, viewed)
        assert not frozen_ids.flags.writeable
        for i in range(20):
            s.write_message(session_id="s2", role="user", content=f"after the freeze {i}")
        s.delete_message(message_id=s.search_messages(query="imported", limit=1)["results"][0]["message_id"])
        assert np.array_equal(arrays["doc_ulid"], ulid) and np.array_equal(arrays["doc_lens"], lens)
        assert np.array_equal(frozen_ids, keys)
        del frozen, arrays, frozen_ids
        ix.release_frozen()
        ids.release_frozen()
        s.write_message(session_id="s2", role="user", content="after the release")
        before = _answers(s)
        s.checkpoint()
    with MemoryStore.open(store_dir) as s:
        assert _answers(s) == before
        found = {r["content"] for r in s.search_messages(query="freeze", limit=50)["results"]}
        assert found == {f"after the freeze {i}" for i in range(20)}

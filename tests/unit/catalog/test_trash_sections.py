"""The Trash on its own, and its snapshot sections: order kept through removals, nothing held or
written while empty, damaged sections refused (the state is then rebuilt from the log)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convmem import MemoryStore
from convmem.catalog.catalog import Catalog
from convmem.catalog.trash import SECTIONS, Trash


def test_entries_stay_in_delete_order_through_removals() -> None:
    t = Trash()
    assert t.nbytes == 0 and t.arrays() == {}
    for slot, doc, seq in [(5, 9, 10), (2, 3, 11), (7, 12, 15), (1, 1, 20)]:
        t.add(slot, doc, seq)
    assert t.find(7) == 2 and t.find(4) == -1
    t.discard(2)
    t.discard(4)  # not there: nothing happens
    assert t.slots.view().tolist() == [5, 7, 1]
    assert t.docs.view().tolist() == [9, 12, 1]
    assert t.seqs.view().tolist() == [10, 15, 20]
    again = Trash.from_arrays(t.arrays())
    assert again.slots.view().tolist() == [5, 7, 1] and again.seqs.view().tolist() == [10, 15, 20]
    again.add(8, 30, 21)  # a loaded (read-only) column is copied on the first change
    assert len(again) == 4 and len(t) == 3


@pytest.mark.parametrize("damage", ["missing", "lengths", "order", "twice"])
def test_damaged_sections_are_refused(damage: str) -> None:
    t = Trash()
    t.add(1, 1, 5)
    t.add(2, 2, 6)
    arrays = t.arrays()
    if damage == "missing":
        del arrays["trash_doc"]
    elif damage == "lengths":
        arrays["trash_seq"] = arrays["trash_seq"][:1]
    elif damage == "order":
        arrays["trash_seq"] = np.array([6, 5], dtype=np.int64)
    else:
        arrays["trash_slot"] = np.array([1, 1], dtype=np.int32)
    with pytest.raises(ValueError):
        Trash.from_arrays(arrays)


def test_a_store_without_deletions_holds_and_writes_no_trash(store_dir: Path) -> None:
    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="x")
        meta, arrays = s._catalog.snapshot_state()  # noqa: SLF001
        assert not set(SECTIONS) & set(arrays)
        assert s._catalog.trash.nbytes == 0  # noqa: SLF001


def test_a_snapshot_whose_trash_names_a_live_message_is_not_adopted(store_dir: Path) -> None:
    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="live")  # slot 0
        b = s.write_message(session_id="s", role="user", content="gone")["message"]  # slot 1
        s.delete_message(message_id=b["message_id"])
        meta, arrays = s._catalog.snapshot_state()  # noqa: SLF001
    live_slot = 0
    good = Catalog.from_snapshot(lambda off, n: None, meta, arrays)  # type: ignore[arg-type,return-value]
    assert good.trash.slots.view().tolist() == [1]
    # A live message, a slot or doc out of range, a version of another message (doc 0 is slot 0's).
    for name, bad in (("trash_slot", [live_slot]), ("trash_slot", [99]), ("trash_doc", [99]),
                      ("trash_doc", [0])):
        forged = dict(arrays)
        forged[name] = np.array(bad, dtype=arrays[name].dtype)
        with pytest.raises(ValueError):
            Catalog.from_snapshot(lambda off, n: None, meta, forged)  # type: ignore[arg-type,return-value]

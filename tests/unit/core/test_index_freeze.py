"""SearchIndex.freeze(): the sections of one moment, merged later (a background snapshot).

freeze() takes the index's state cheaply (copies of its columns, its immutable segments);
.arrays() must then return exactly what to_arrays() + block_max_arrays() returned at the
freeze, whatever was added or removed in between, and leave the live index as it was.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from test_char_lists import COMMON, _build, _docs, _results, uni

import convmem._core.pyindex as twin

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1


def _same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


def _reference(ix) -> dict:
    """to_arrays + block_max_arrays of the index now, on a copy (they merge it)."""
    return {**ix.to_arrays(), **ix.block_max_arrays()}


@pytest.mark.parametrize("cls", [compiled.SearchIndex, twin.SearchIndex], ids=["compiled", "twin"])
def test_frozen_arrays_are_those_of_the_freeze_despite_later_changes(cls) -> None:
    docs = _docs(5, 3000)
    later = _docs(6, 400)
    ix = _build(cls, docs[:2000])
    ix.merge_segments()
    for d in range(2000, 3000):  # a second segment and a buffer, and dead docs in both
        ix.add(d, *docs[d])
    for d in (3, 10, 2500, 2999):
        ix.remove(d, *docs[d][:3])
    twin_ref = _build(cls, docs)
    for d in (3, 10, 2500, 2999):
        twin_ref.remove(d, *docs[d][:3])
    frozen = ix.freeze()
    # Changes after the freeze: in place (removes) and appended (adds).
    for d in (4, 11, 2501):
        ix.remove(d, *docs[d][:3])
    for i, args in enumerate(later):
        ix.add(3000 + i, *args)
    got = frozen.arrays()
    _same(got, _reference(twin_ref))
    # The sections load, and search as the index did at the freeze.
    back = cls.from_arrays(got)
    assert _results(back) == _results(twin_ref)
    # The live index was not merged and still holds every change.
    assert ix.n_docs == 3000 + len(later)
    assert _results(ix) == _results(_rebuilt(cls, docs, later))


def _rebuilt(cls, docs, later):
    ix = _build(cls, docs)
    for i, args in enumerate(later):
        ix.add(3000 + i, *args)
    for d in (3, 10, 2500, 2999, 4, 11, 2501):
        ix.remove(d, *docs[d][:3])
    return ix


def test_frozen_char_lists_are_kept_or_built() -> None:
    docs = _docs(3, 5000)
    ix = _build(compiled.SearchIndex, docs)
    ref = _reference(ix)  # (merged: one segment, its char lists built)
    assert ref["cx_chars"].tolist() == sorted(COMMON)
    kept = ix.freeze().arrays()  # one segment, nothing dead: its lists are reused
    _same(kept, ref)
    ix.remove(0, *docs[0][:3])
    built = ix.freeze().arrays()  # a dead doc: merged again, lists built for the merge
    ix.merge_segments()
    _same(built, _reference(ix))
    assert compiled.SearchIndex.from_arrays(built).search(
        np.array([uni(COMMON[0])], dtype=np.uint64), 10)[0].tolist() == \
        ix.search(np.array([uni(COMMON[0])], dtype=np.uint64), 10)[0].tolist()


def test_freezing_a_merged_index_builds_its_char_lists_for_it_to_keep() -> None:
    """The foreground snapshot merges, then freezes: the character lists are built once, and
    both the frozen arrays and the live index's later searches have them."""
    docs = _docs(3, 5000)
    ix = _build(compiled.SearchIndex, docs)
    ix.merge_segments()
    assert ix.char_lists() is None
    got = ix.freeze().arrays()
    assert got["cx_chars"].tolist() == sorted(COMMON)
    assert ix.char_lists().tolist() == sorted(COMMON)
    assert _results(ix) == _results(_build(twin.SearchIndex, docs))


def test_freeze_shares_the_growing_columns_until_released() -> None:
    """The compiled freeze() copies no column that only grows: its arrays view the index's own
    memory, which the index appends past and copies only to grow (past its capacity, here) or
    to change in place. release_frozen takes the memory back once no view of it is left, and
    never while one is: the views stay valid and unchanged whatever the index does."""
    docs = _docs(7, 1200)
    ix = _build(compiled.SearchIndex, docs[:1000])
    frozen = ix.freeze()
    got = frozen.arrays()
    # term keys and the doc columns set once (tag hashes only when there are some)
    shared = 7 + (got["tag_hashes"].size > 0)
    assert ix.shared_columns == shared
    ulid, ts, keys = got["doc_ulid"], got["doc_timestamp"], got["term_keys"]
    assert not ulid.flags.writeable
    before = {name: np.array(a) for name, a in got.items()}
    ix.release_frozen()  # views are alive: nothing is taken back
    assert ix.shared_columns == shared
    for d in range(1000, 1200):  # appends, past the columns' capacity
        ix.add(d, *docs[d])
    ix.remove(5, *docs[5][:3])
    for name, a in got.items():
        assert np.array_equal(a, before[name]), name
    del got, frozen, ulid, ts, keys, a
    ix.release_frozen()  # every column grew away from its shared memory
    assert ix.shared_columns == 0
    # Shared, then taken back without growing: later changes copy nothing and stay right.
    arrays = ix.freeze().arrays()
    ref = {name: np.array(a) for name, a in arrays.items()}
    del arrays
    ix.release_frozen()
    assert ix.shared_columns == 0
    ix.remove(6, *docs[6][:3])
    ix.add(1200, *docs[7])
    again = _reference(ix)
    assert again["doc_ulid"][:1200].tobytes() == ref["doc_ulid"].tobytes()
    rebuilt = _build(compiled.SearchIndex, docs + [docs[7]])
    for d in (5, 6):
        rebuilt.remove(d, *docs[d][:3])
    assert _results(ix) == _results(rebuilt)

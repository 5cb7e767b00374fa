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

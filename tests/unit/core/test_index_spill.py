"""SearchIndex.spill_postings: a merged index's large posting data handed to `take` and replaced
by the array it returns (store/spill.py maps it from a file); the index then reads the new array,
and lets the old memory go. Only data the index built and never handed out is moved."""
from __future__ import annotations

import gc
import importlib
import weakref

import numpy as np
import pytest
from test_char_lists import _build, _docs, _results

import convmem._core.pyindex as twin

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1


class _Elsewhere:
    """A take that copies into arrays of its own (read-only, as a mapping is), remembering what
    it was given."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.given: list[weakref.ref] = []
        self.made: list[np.ndarray] = []

    def __call__(self, data: np.ndarray) -> np.ndarray | None:
        self.given.append(weakref.ref(data))
        if self.refuse:
            return None
        out = data.copy()
        out.flags.writeable = False
        self.made.append(out)
        return out


def _merged(docs):
    ix = _build(compiled.SearchIndex, docs)
    for d in (3, 10, 2500):
        ix.remove(d, *docs[d][:3])
    ix.merge_segments()
    return ix


def test_spilled_postings_are_read_from_the_new_arrays_and_the_old_ones_go() -> None:
    docs = _docs(11, 4000)
    ix = _merged(docs)
    before = _results(ix)
    take = _Elsewhere()
    moved = ix.spill_postings(take, 1)
    gc.collect()
    assert moved == sum(a.nbytes for a in take.made) and moved > 0
    assert len(take.made) >= 2  # (content and tags at least; summary may be empty)
    assert all(ref() is None for ref in take.given)  # the index no longer holds the old data
    arrays = ix.to_arrays()
    assert any(np.shares_memory(arrays["post_data_content"], a) for a in take.made)
    assert _results(ix) == before
    # planted: the index reads the spilled bytes, not a copy it kept
    take.made[0].flags.writeable = True
    take.made[0][:] = 0xFF
    assert _results(ix) != before


def test_only_fields_of_min_bytes_and_only_private_data_move() -> None:
    docs = _docs(12, 3000)
    ix = _merged(docs)
    content = ix.to_arrays()["post_data_content"].nbytes  # (to_arrays hands the segment out)
    assert ix.spill_postings(_Elsewhere(), 1) == 0
    ix = _merged(docs)
    take = _Elsewhere()
    assert ix.spill_postings(take, content) == content  # the content field alone
    assert len(take.made) == 1
    ix = _merged(docs)
    ix.freeze()  # (a frozen index reads the segment off the lock)
    assert ix.spill_postings(_Elsewhere(), 1) == 0
    refused = _Elsewhere(refuse=True)
    ix = _merged(docs)
    before = _results(ix)
    assert ix.spill_postings(refused, 1) == 0 and refused.given  # asked, kept
    assert _results(ix) == before


def test_the_twin_moves_nothing() -> None:
    docs = _docs(13, 500)
    ix = _build(twin.SearchIndex, docs)
    ix.merge_segments()
    assert ix.spill_postings(_Elsewhere(), 1) == 0


def test_adopted_data_replaces_spilled_data_that_nothing_else_holds() -> None:
    docs = _docs(14, 4000)
    ix = _merged(docs)
    before = _results(ix)
    take = _Elsewhere()
    assert ix.spill_postings(take, 1) > 0
    fields = ("content", "summary", "tags")
    again = {f: a.copy() for f, a in zip(fields, take.made)}  # (field order: content first)
    spilled = {id(a) for a in take.made}
    only = lambda a: id(a) in spilled  # noqa: E731
    assert ix.adopt_postings(again, only) == 0  # take.made still holds them
    held = [weakref.ref(a) for a in take.made]
    take.made.clear()
    moved = ix.adopt_postings(again, only)
    gc.collect()
    assert moved == sum(a.nbytes for a in again.values() if a.nbytes) and moved > 0
    assert all(ref() is None for ref in held)  # the spilled arrays went
    assert _results(ix) == before
    arrays = ix.to_arrays()
    assert np.shares_memory(arrays["post_data_content"], again["content"])
    # bytes of another length are refused, and the index keeps what it had
    ix = _merged(docs)
    take = _Elsewhere()
    ix.spill_postings(take, 1)
    content = take.made[0]
    take.made.clear()
    with pytest.raises(ValueError, match="as many bytes"):
        ix.adopt_postings({"content": content[:-1].copy()}, lambda a: True)
    del content
    assert _results(ix) == before

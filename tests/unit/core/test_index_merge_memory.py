"""A merge's output is handed to its segment, not copied (shared.garr_take).

The compiled index builds a merged segment's lists in raw buffers; at 10M messages a field's
data is gigabytes, so copying it into numpy would hold it twice at the end of every merge (the
final checkpoint of an import, rebuild_index). The arrays must own the very buffers, read-only,
and free them with the last array.
"""
from __future__ import annotations

import gc
import importlib
import tracemalloc

import numpy as np
import pytest
from test_char_lists import _build, _docs, _results

import convmem._core.pyindex as twin

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1
shared = importlib.import_module("convmem._core.shared")

POSTINGS = [f"post_{part}_{field}" for part in ("terms", "offsets", "data")
            for field in ("content", "summary", "tags")]


def _owner(a: np.ndarray) -> object:
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def test_merged_postings_own_the_merge_buffers() -> None:
    docs = _docs(7, 3000)
    ix = _build(compiled.SearchIndex, docs)
    for d in (3, 10, 2500):
        ix.remove(d, *docs[d][:3])
    arrays = ix.to_arrays()  # merges the segments and the buffer into one segment
    nonempty = [n for n in POSTINGS if arrays[n].nbytes > 0]
    assert "post_data_content" in nonempty and "post_terms_content" in nonempty
    for name in nonempty:
        a = arrays[name]
        assert not a.flags.writeable, name
        assert isinstance(_owner(a), shared.SharedBlock), name  # not a copy numpy allocated
    again = ix.to_arrays()
    assert all(np.shares_memory(arrays[n], again[n]) for n in nonempty)
    # and the lists read back right: the same results as the twin's
    ref = _build(twin.SearchIndex, docs)
    for d in (3, 10, 2500):
        ref.remove(d, *docs[d][:3])
    assert _results(ix) == _results(ref)


def _cycle(docs) -> int:
    """Build, merge and drop an index (a view outliving it first); the postings bytes it held."""
    ix = _build(compiled.SearchIndex, docs)
    arrays = ix.to_arrays()
    held = sum(arrays[n].nbytes for n in POSTINGS)
    view = arrays["post_data_content"][10:20]  # a view alone keeps its buffer alive
    expect = bytes(view)
    del ix, arrays
    gc.collect()
    assert bytes(view) == expect
    del view
    gc.collect()
    return held


def test_handed_over_buffers_are_freed_with_the_index() -> None:
    docs = _docs(8, 4000)
    _cycle(docs)  # (first-use allocations of the module outside the traced window)
    gc.collect()
    tracemalloc.start()
    try:
        left = []
        for _ in range(4):
            held = _cycle(docs)
            left.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert held > 20_000
    # each cycle would leave `held` bytes behind if the buffers were not freed
    assert left[-1] - left[0] < held, (left, held)


# -- a merge gives back the lists it has read (postings._merge's `release`)

postings = importlib.import_module("convmem._core.postings")


@pytest.fixture
def page_step():
    """Give back after every page read, so that small segments exercise it."""
    postings._set_give_back_step(4096)
    yield
    postings._set_give_back_step(1 << 20)


def _segmented(docs, cls=compiled.SearchIndex):
    """An index of several segments (merge factor 8: flushed segments pile up) and a buffer."""
    ix = cls()
    ix.merge_factor = 8
    for d, args in enumerate(docs):
        ix.add(d, *args)
    return ix


def test_a_merge_gives_back_the_lists_it_read_and_serves_the_same(page_step) -> None:
    docs = _docs(9, 10000)
    ix = _segmented(docs)
    assert ix.n_segments >= 3
    held = ix.nbytes()["postings"]  # (every segment's arrays and the buffer)
    before = postings._given_back_bytes()
    for d in (5, 17, 8000):
        ix.remove(d, *docs[d][:3])
    ix.merge_segments()
    given = postings._given_back_bytes() - before
    assert ix.n_segments == 1
    ref = _build(twin.SearchIndex, docs)
    for d in (5, 17, 8000):
        ref.remove(d, *docs[d][:3])
    assert _results(ix) == _results(ref)
    # the inputs held about what the output holds (three docs fewer): most of it went back
    merged = sum(a.nbytes for n, a in ix.to_arrays().items() if n.startswith("post_data_"))
    assert given > merged // 2, (given, merged)
    assert given <= held


def test_segments_a_freeze_holds_are_not_given_back(page_step) -> None:
    """A frozen index merges its segments later, off the lock: the live index's merges of the
    same segments must leave their memory alone."""
    docs = _docs(10, 12000)
    ix = _segmented(docs[:10000])
    assert ix.n_segments >= 3
    ref = _segmented(docs[:10000])  # (the same index, merged at once)
    expect = {**ref.to_arrays(), **ref.block_max_arrays()}
    frozen = ix.freeze()
    before = postings._given_back_bytes()
    for d in range(10000, 12000):
        ix.add(d, *docs[d])
    ix.merge_segments()  # reads the frozen segments, with the new ones
    assert ix.n_segments == 1
    got = frozen.arrays()
    assert sorted(got) == sorted(expect)
    for name in got:
        assert np.array_equal(got[name], expect[name]), name
    assert _results(ix) == _results(_build(twin.SearchIndex, docs))
    # only the segments built after the freeze went back
    assert postings._given_back_bytes() - before < sum(
        a.nbytes for n, a in got.items() if n.startswith("post_data_"))


def test_postings_handed_out_are_not_given_back(page_step) -> None:
    """to_arrays' arrays are the segment's own: a later merge of that segment leaves them whole."""
    docs = _docs(11, 12000)
    ix = _segmented(docs[:10000])
    arrays = ix.to_arrays()
    copy = {n: a.copy() for n, a in arrays.items() if n.startswith("post_")}
    for d in range(10000, 12000):
        ix.add(d, *docs[d])
    ix.merge_segments()
    for name, a in copy.items():
        assert np.array_equal(arrays[name], a), name
    assert _results(ix) == _results(_build(twin.SearchIndex, docs))


def test_a_merge_that_fails_after_giving_back_says_its_segments_are_lost(page_step) -> None:
    """Its inputs can no longer be read: the failure is DamagedPostings (the store rebuilds its
    state from the log on it), never a MemoryError that would leave them served."""
    docs = _docs(12, 10000)
    ix = _segmented(docs)
    assert ix.n_segments >= 3
    postings._plant_merge_fault(1)
    try:
        with pytest.raises(postings.DamagedPostings, match="giving back") as err:
            ix.merge_segments()
    finally:
        postings._plant_merge_fault(0)
    assert isinstance(err.value.__cause__, MemoryError)


def test_a_merge_that_fails_before_giving_back_leaves_the_index_whole(page_step) -> None:
    """Segments a freeze holds are not given back: the planted failure stays a MemoryError and
    the index serves what it served."""
    docs = _docs(13, 10000)
    ix = _segmented(docs)
    ix.freeze()
    postings._plant_merge_fault(1)
    try:
        with pytest.raises(MemoryError, match="planted"):
            ix.merge_segments()
    finally:
        postings._plant_merge_fault(0)
    assert _results(ix) == _results(_build(twin.SearchIndex, docs))

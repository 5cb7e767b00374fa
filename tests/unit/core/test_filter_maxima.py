"""Filter maxima (docs/SCORING.md "Filter maxima", docs/FORMAT.md): per block, the largest x_f
among its docs of each kind, each tier, each importance floor and each tag bucket. A query that
asks for kinds, tiers, an importance floor or tags bounds a block by them, so it skips blocks and
windows whose best docs are filtered out; results stay those of exhaustive scoring, to the last
bit."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1

WORD, OTHER = np.uint64(1 << 40), np.uint64(2 << 40)
EMPTY = np.zeros(0, dtype=np.uint64)
TAGS = np.array([1001, 1002], dtype=np.uint64)
FILTERS = [{"kind_mask": 1 << 2}, {"tier_mask": 1 << 1}, {"min_importance": 70},
           {"kind_mask": 0b100100, "tier_mask": 0b0101, "min_importance": 55},
           {"tag_hashes": TAGS[:1]}, {"tag_hashes": TAGS}]


def skewed_index(n: int = 30000, seed: int = 7, merge_factor: int = 2, merge: bool = True):
    """Every doc holds WORD. The docs of kind 0, tier 0, importance 20 and no tag hold it often
    in short messages (high x_f); the few docs of other kinds, tiers, importance and tags hold it
    once in long ones, so a block's maximum is a doc the filters above drop."""
    rng = np.random.default_rng(seed)
    ix = compiled.SearchIndex()
    ix.merge_factor = merge_factor
    for d in range(n):
        if rng.random() < 0.9:
            content = np.array([WORD] * int(rng.integers(2, 5)) + [OTHER], dtype=np.uint64)
            kind, tier, imp, tags = 0, 0, 20, EMPTY
        else:
            content = np.array([WORD] + [OTHER] * int(rng.integers(20, 60)), dtype=np.uint64)
            kind, tier = int(rng.integers(0, 6)), int(rng.integers(0, 4))
            imp = int(rng.integers(0, 101))
            tags = TAGS[rng.random(2) < 0.5]
        ix.add(d, content, EMPTY, EMPTY, tags, 0, kind, tier, imp, d, rng.bytes(16))
    if merge:
        ix.merge_segments()
    ix._set_prune_density(0)
    return ix


def search(ix, flt: dict, *, maxima: bool = True, exhaustive: bool = False):
    ix.filter_maxima = maxima
    try:
        res = ix.search(np.array([WORD], dtype=np.uint64), 10, exhaustive=exhaustive, **flt)
        return res, ix.last_windows_skipped + ix.last_blocks_skipped
    finally:
        ix.filter_maxima = True


def assert_same(a, b) -> None:
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


@pytest.fixture(scope="module")
def ix():
    return skewed_index()


@pytest.mark.parametrize("flt", FILTERS)
def test_filtered_queries_skip_what_the_filters_drop_and_give_the_exhaustive_top_k(ix, flt) -> None:
    exact, _ = search(ix, flt, exhaustive=True)
    with_maxima, skipped = search(ix, flt)
    without, skipped_before = search(ix, flt, maxima=False)
    assert len(exact[0]) == 10
    assert_same(with_maxima, exact)
    assert_same(without, exact)
    assert skipped > skipped_before + 50, (skipped, skipped_before)


def test_adopted_maxima_serve_the_same_and_older_snapshots_without_them_too(ix) -> None:
    arrays, derived = ix.to_arrays(), ix.block_max_arrays()
    assert {"bx_content", "bx_summary", "bx_tags"} <= set(derived)
    assert derived["bx_content"].shape == (12 * derived["bm_content"].shape[0],)
    assert np.array_equal(derived["bx_content"], ix.block_max_arrays()["bx_content"])
    adopted = compiled.SearchIndex.from_arrays({**arrays, **derived})
    older = compiled.SearchIndex.from_arrays(
        {**arrays, **{k: v for k, v in derived.items() if not k.startswith("bx_")}})
    for other in (adopted, older):
        other._set_prune_density(0)
    flt = FILTERS[0]
    exact, _ = search(ix, flt, exhaustive=True)
    got, skipped = search(adopted, flt)
    old, skipped_old = search(older, flt)
    assert_same(got, exact)
    assert_same(old, exact)
    assert skipped > skipped_old + 50
    assert "bx_content" not in older.block_max_arrays()    # nothing to copy on: none invented
    # The next snapshot after a write merges the segment again and takes them.
    older.add(older.n_docs, np.array([WORD], dtype=np.uint64), EMPTY, EMPTY, EMPTY, 0, 2, 1, 80,
              older.n_docs, b"\1" * 16)
    again = older.freeze().arrays()
    assert again["bx_content"].shape == (12 * again["bm_content"].shape[0],)


def test_filter_maxima_of_the_wrong_size_are_refused(ix) -> None:
    arrays, derived = ix.to_arrays(), ix.block_max_arrays()
    bad = {**derived, "bx_content": derived["bx_content"][:-12]}
    with pytest.raises(ValueError, match="filter maxima"):
        compiled.SearchIndex.from_arrays({**arrays, **bad})


def test_every_column_bounds_its_docs() -> None:
    """Random kinds, tiers, importance, tags and lengths, a window of 64 docs: every mask, floor
    and tag set gives the exhaustive top k (a column rounded down, or a doc counted in the wrong
    column, would drop a doc that belongs there)."""
    rng = np.random.default_rng(3)
    ix = compiled.SearchIndex()
    words = rng.integers(1, 2**40, 6).astype(np.uint64)
    tags = rng.integers(1, 2**63, 12).astype(np.uint64)
    for d in range(12000):
        content = rng.choice(words, int(rng.integers(1, 40)))
        held = rng.choice(tags, int(rng.integers(0, 4)), replace=False)
        ix.add(d, content, EMPTY, EMPTY, held, int(rng.integers(0, 3)), int(rng.integers(0, 6)),
               int(rng.integers(0, 4)), int(rng.integers(0, 101)), d, rng.bytes(16))
        if rng.random() < 0.05:
            ix.remove(int(rng.integers(0, d + 1)))
    ix.merge_segments()
    ix._set_prune_density(0)
    ix._set_window(64)
    for _ in range(60):
        flt = {"kind_mask": int(rng.integers(1, 64)), "tier_mask": int(rng.integers(1, 16)),
               "min_importance": int(rng.integers(0, 101)),
               "tag_hashes": rng.choice(tags, int(rng.integers(0, 3)), replace=False)}
        q = rng.choice(words, int(rng.integers(1, 3)), replace=False)
        k = int(rng.integers(1, 30))
        got = ix.search(q, k, **flt)
        assert_same(got, ix.search(q, k, exhaustive=True, **flt))


def test_a_bulk_import_takes_them_once_at_its_final_merge() -> None:
    """With merge_factor > 2 (a bulk import) flushes and merges take no filter maxima (the
    checkpoint replaces those segments anyway); the import's checkpoint merges everything into
    one segment, which has them."""
    ix = skewed_index(merge_factor=8, merge=False)
    assert ix.n_segments >= 2
    flt = FILTERS[0]
    exact, _ = search(ix, flt, exhaustive=True)
    got, skipped = search(ix, flt)
    _, skipped_off = search(ix, flt, maxima=False)
    assert_same(got, exact)
    assert skipped == skipped_off                          # none to bound with yet
    ix.merge_factor = 2
    ix.merge_segments()
    got, skipped = search(ix, flt)
    assert_same(got, exact)
    assert skipped > skipped_off + 50

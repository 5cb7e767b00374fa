"""SearchIndex.from_arrays without per-open work: stored block maxima, lists checked lazily."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1


def _index(seed: int = 7, n: int = 3000):
    """A compiled index whose common words have lists of many blocks (> 128 postings)."""
    rng = np.random.default_rng(seed)
    words = rng.integers(1, 2**62, 300, dtype=np.uint64)
    ix = compiled.SearchIndex()
    for d in range(n):
        z = np.minimum(rng.zipf(1.3, int(rng.integers(1, 25))), len(words)) - 1
        ix.add(d, words[z], words[z[:2]], np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64),
               0, int(rng.integers(0, 6)), 0, 50, d, rng.bytes(16))
    queries = [words[np.minimum(rng.zipf(1.1, int(rng.integers(1, 4))), len(words)) - 1]
               for _ in range(40)]
    return ix, queries


def _searches(ix, queries):
    out = []
    for q in queries:
        docs, scores, parts = ix.search(q, 10)
        out.append((docs.tolist(), scores.tolist(), parts.tolist(), ix.last_blocks_skipped))
    return out


def test_stored_block_maxima_give_the_same_results_and_the_same_pruning() -> None:
    ix, queries = _index()
    arrays = ix.to_arrays()
    bm = ix.block_max_arrays()
    assert bm["bm_cb"].shape == (3,) and len(bm["bm_content"]) > 0
    # every stored list of bm_terms_content has more than one block
    assert len(bm["bm_terms_content"]) == len(bm["bm_off_content"]) > 0
    adopted = compiled.SearchIndex.from_arrays({**arrays, **bm})
    computed = compiled.SearchIndex.from_arrays(arrays)
    a, c, o = _searches(adopted, queries), _searches(computed, queries), _searches(ix, queries)
    assert a == c
    assert [r[:3] for r in a] == [r[:3] for r in o]
    again = adopted.block_max_arrays()
    for name, arr in bm.items():
        assert np.array_equal(again[name], arr), name


@pytest.mark.parametrize("damage", ["offset", "term", "length"])
def test_block_maxima_that_do_not_fit_the_lists_are_rejected(damage: str) -> None:
    ix, _ = _index()
    arrays = ix.to_arrays()
    bm = {k: v.copy() for k, v in ix.block_max_arrays().items()}
    if damage == "offset":
        bm["bm_off_content"][1] += 1
    elif damage == "term":
        bm["bm_terms_content"][0] = bm["bm_terms_content"][1]  # not ascending
    else:
        bm["bm_content"] = bm["bm_content"][:-1]
    with pytest.raises(ValueError, match="block maxima"):
        compiled.SearchIndex.from_arrays({**arrays, **bm})


def test_a_damaged_list_is_found_on_first_use_and_never_read() -> None:
    ix, queries = _index()
    arrays = {k: np.array(v) for k, v in ix.to_arrays().items()}
    bm = ix.block_max_arrays()
    terms, offsets = arrays["post_terms_content"], arrays["post_offsets_content"]
    lengths = np.diff(offsets.astype(np.int64))
    victim = int(np.argmax(lengths))  # the longest list: a multi-block one
    lo, hi = int(offsets[victim]), int(offsets[victim + 1])
    # Damage the list body but keep its header (posting count, first doc): the stored block
    # maxima still fit, so only decoding the list shows the damage.
    data = arrays["post_data_content"]
    data[lo + 12:hi] = 0xFF
    key = np.array([arrays["term_keys"][int(terms[victim])]], dtype=np.uint64)
    other = next(q for q in queries if not np.isin(key, q).any())
    loaded = compiled.SearchIndex.from_arrays({**arrays, **bm})  # nothing decoded at open
    assert loaded.search(other, 10)[0].tolist() == ix.search(other, 10)[0].tolist()
    for _ in range(2):  # reported every time, never served
        with pytest.raises(ValueError, match="damaged posting list"):
            loaded.search(key, 10)
    empty = np.zeros(0, dtype=np.uint64)
    loaded.add(loaded.n_docs, key, empty, empty, empty, 0, 0, 0, 50, 0, b"\1" * 16)
    with pytest.raises(ValueError, match="damaged posting list"):
        loaded.merge_segments()  # a merge decodes every list it copies
    # Without stored maxima, computing them decodes every list: checked at open, as before.
    with pytest.raises(ValueError, match="bad post_data_content"):
        compiled.SearchIndex.from_arrays(arrays)

"""Character lists: a CJK one-character query read from one stored list per field (issue 14).

For a CJK character whose group (the unigram and every bigram holding it, docs/SCORING.md "Term
groups") is large, the snapshot segment keeps the group's postings merged into one list per
field (tfs summed, capped at 127, lead flags OR-ed). Results must be exactly those of the group read key by key,
and of the pure twin.
"""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import convmem._core.pyindex as twin

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1

UNIGRAM, BIGRAM = 0b11 << 62, 0b10 << 62
COMMON = [0x6771, 0x4EAC, 0x4F1A, 0x306E, 0x8A2D, 0x5B9A]  # 東 京 会 の 設 定
RARE = 0x9F8D                                               # 龍: a small group, no lists


def uni(c: int) -> int:
    return UNIGRAM | c


def bi(c1: int, c2: int) -> int:
    return BIGRAM | (c1 << 21) | c2


def _docs(seed: int, n: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    words = rng.integers(1, 2**62, 100, dtype=np.uint64)
    bigrams = np.array([bi(a, b) for a in COMMON for b in COMMON], dtype=np.uint64)
    out = []
    for d in range(n):
        keys = [words[np.minimum(rng.zipf(1.3, int(rng.integers(0, 12))), len(words)) - 1]]
        keys.append(rng.choice(bigrams, int(rng.integers(0, 14))))
        if rng.random() < 0.1:
            keys.append(np.array([uni(int(rng.choice(COMMON)))], dtype=np.uint64))
        if rng.random() < 0.01:
            keys.append(np.array([bi(RARE, COMMON[0]), uni(RARE)], dtype=np.uint64))
        if d == 17:  # tfs that sum past 127 within one group, first (lead): the sum is capped
            keys.insert(0, np.full(200, bi(COMMON[0], COMMON[1]), dtype=np.uint64))
            keys.insert(1, np.full(200, bi(COMMON[1], COMMON[0]), dtype=np.uint64))
        content = np.concatenate(keys).astype(np.uint64)
        summary = rng.choice(bigrams, int(rng.integers(0, 3))).astype(np.uint64)
        tags = np.array([uni(COMMON[2])] if rng.random() < 0.05 else [], dtype=np.uint64)
        out.append((content, summary, tags, np.zeros(0, dtype=np.uint64), int(rng.integers(0, 4)),
                    int(rng.integers(0, 6)), int(rng.integers(0, 4)), int(rng.choice([0, 50, 80])),
                    int(rng.integers(0, 1000)), rng.bytes(16)))
    return out


QUERIES = [[uni(COMMON[0])], [uni(COMMON[2])], [uni(COMMON[0]), uni(COMMON[1])],
           [bi(COMMON[0], COMMON[1])], [uni(COMMON[0]), bi(COMMON[0], COMMON[1])], [uni(RARE)],
           [uni(COMMON[3]), uni(RARE)], [uni(0x4E00)]]
FILTERS = [{}, {"session": 2}, {"kind_mask": 0b101}, {"min_importance": 50}]


def _build(cls, docs):
    ix = cls()
    for d, args in enumerate(docs):
        ix.add(d, *args)
    return ix


def _results(ix, k: int = 10, **kw):
    out = []
    for q in QUERIES:
        for f in FILTERS:
            docs, scores, parts = ix.search(np.array(q, dtype=np.uint64), k, **f, **kw)
            out.append((docs.tolist(), scores.tolist(), parts.tolist()))
    return out


@pytest.fixture(scope="module")
def stored():
    docs = _docs(3, 5000)
    ix = _build(compiled.SearchIndex, docs)
    arrays = ix.to_arrays()
    derived = ix.block_max_arrays()
    return docs, ix, arrays, derived


def test_the_large_groups_get_lists_the_small_one_does_not(stored) -> None:
    _, ix, _, derived = stored
    assert derived["cx_chars"].tolist() == sorted(COMMON)
    assert ix.char_lists().tolist() == sorted(COMMON)
    # df: the docs holding the unigram or a bigram of the character in any field
    docs = stored[0]
    for c, df in zip(derived["cx_chars"].tolist(), derived["cx_df"].tolist()):
        def holds(key: int) -> bool:
            return key >> 62 == 3 and key & 0x1FFFFF == c or key >> 62 == 2 and (
                (key >> 21) & 0x1FFFFF == c or key & 0x1FFFFF == c)
        assert df == sum(any(holds(int(k)) for f in d[:3] for k in f) for d in docs)
    # one list per field that holds the character: the content lists are all there
    assert derived["cx_terms_content"].tolist() == sorted(COMMON)
    assert len(derived["cx_terms_tags"]) == 1 and int(derived["cx_terms_tags"][0]) == COMMON[2]


def test_char_lists_give_exactly_the_results_of_the_group_read_key_by_key(stored) -> None:
    docs, _, arrays, derived = stored
    with_cx = compiled.SearchIndex.from_arrays({**arrays, **derived})
    no_cx = compiled.SearchIndex.from_arrays(
        {k: v for k, v in {**arrays, **derived}.items() if not k.startswith("cx_")})
    assert with_cx.char_lists() is not None and no_cx.char_lists() is None
    ref = _build(twin.SearchIndex, docs)
    for k in (1, 10, 200):
        a = _results(with_cx, k)
        assert a == _results(no_cx, k)
        assert a == _results(ref, k)
        assert a == _results(with_cx, k, exhaustive=True)


def test_a_capped_sum_of_tfs_scores_as_the_spec_says(stored) -> None:
    docs, _, arrays, derived = stored
    with_cx = compiled.SearchIndex.from_arrays({**arrays, **derived})
    ref = _build(twin.SearchIndex, docs)
    q = np.array([uni(COMMON[0])], dtype=np.uint64)
    d, s, _ = with_cx.search(q, 5000)
    rd, rs, _ = ref.search(q, 5000)
    assert d.tolist() == rd.tolist() and s.tolist() == rs.tolist()
    # doc 17's 400 occurrences count as 127 (the twin caps literally): more would raise its part
    at = d.tolist().index(17)
    uncapped = twin.SearchIndex()
    twin_cap = twin.TF_CAP
    try:
        twin.TF_CAP = 400
        for i, args in enumerate(docs):
            uncapped.add(i, *args)
        ud, us, _ = uncapped.search(q, 5000)
    finally:
        twin.TF_CAP = twin_cap
    assert us[ud.tolist().index(17)] > s[at]


def test_the_char_lists_prune() -> None:
    """The merged list has tight block maxima: a top-10 reads a fraction of the group."""
    docs = _docs(5, 20000)
    ix = _build(compiled.SearchIndex, docs)
    arrays, derived = ix.to_arrays(), ix.block_max_arrays()
    with_cx = compiled.SearchIndex.from_arrays({**arrays, **derived})
    no_cx = compiled.SearchIndex.from_arrays(
        {k: v for k, v in {**arrays, **derived}.items() if not k.startswith("cx_")})
    q = np.array([uni(COMMON[0])], dtype=np.uint64)
    assert with_cx.search(q, 10)[0].tolist() == no_cx.search(q, 10)[0].tolist()
    # one list's block bounds are tight where the sum of many lists' bounds is not
    assert with_cx.last_blocks_skipped > 0 == no_cx.last_blocks_skipped


def test_the_char_lists_have_filter_maxima() -> None:
    """A one-character query with filters bounds the merged list's blocks by the messages the
    filters keep (docs/SCORING.md "Filter maxima"): the same top k, more skipped."""
    docs = _docs(5, 20000)
    ix = _build(compiled.SearchIndex, docs)
    arrays, derived = ix.to_arrays(), ix.block_max_arrays()
    assert derived["cx_bx_content"].shape == (12 * derived["cx_bm_content"].shape[0],)
    with_cx = compiled.SearchIndex.from_arrays({**arrays, **derived})
    with_cx._set_prune_density(0)
    q = np.array([uni(COMMON[0])], dtype=np.uint64)
    f = {"kind_mask": 1 << 2, "min_importance": 80}
    exact = with_cx.search(q, 10, exhaustive=True, **f)
    with_cx.filter_maxima = False
    off = with_cx.search(q, 10, **f)
    skipped_off = with_cx.last_blocks_skipped + with_cx.last_windows_skipped
    with_cx.filter_maxima = True
    on = with_cx.search(q, 10, **f)
    skipped_on = with_cx.last_blocks_skipped + with_cx.last_windows_skipped
    for got in (on, off):
        assert all(np.array_equal(a, b) for a, b in zip(got, exact))
    assert skipped_on > skipped_off


def test_docs_added_and_removed_after_the_snapshot(stored) -> None:
    docs, _, arrays, derived = stored
    more = _docs(11, 3000)
    ix = compiled.SearchIndex.from_arrays({**arrays, **derived})
    ref = _build(twin.SearchIndex, docs)
    for d, args in enumerate(more, start=len(docs)):
        ix.add(d, *args)
        ref.add(d, *args)
    # the stored df of segment 0 plus the df of the newer segments and the buffer
    assert _results(ix) == _results(ref)
    for d in range(0, len(docs) + len(more), 7):
        ix.remove(d)
        ref.remove(d)
    assert ix.char_lists() is not None      # segment 0 kept: the lists are still used
    assert _results(ix) == _results(ref)
    ix.merge_segments()                      # a new segment 0: the lists are left
    assert ix.char_lists() is None
    assert _results(ix) == _results(ref)
    again = ix.block_max_arrays()            # built again for the merged segment
    assert again["cx_chars"].tolist() == sorted(COMMON)
    assert _results(ix) == _results(ref)


def test_a_damaged_char_list_is_reported_on_first_use_and_never_read(stored) -> None:
    _, _, arrays, derived = stored
    derived = {k: np.array(v) for k, v in derived.items()}
    terms, offsets = derived["cx_terms_content"], derived["cx_offsets_content"]
    victim = int(np.flatnonzero(terms == COMMON[0])[0])
    lo, hi = int(offsets[victim]), int(offsets[victim + 1])
    derived["cx_data_content"][lo + 12:hi] = 0xFF   # the header (count, first doc) kept
    ix = compiled.SearchIndex.from_arrays({**arrays, **derived})  # nothing decoded at open
    other = ix.search(np.array([uni(COMMON[1])], dtype=np.uint64), 5)
    assert len(other[0]) == 5
    for _ in range(2):
        with pytest.raises(ValueError, match="damaged posting list"):
            ix.search(np.array([uni(COMMON[0])], dtype=np.uint64), 5)


@pytest.mark.parametrize("damage", ["chars", "df", "terms", "offsets", "bm"])
def test_char_list_sections_that_do_not_fit_are_rejected(stored, damage: str) -> None:
    _, _, arrays, derived = stored
    derived = {k: np.array(v) for k, v in derived.items()}
    if damage == "chars":
        derived["cx_chars"] = derived["cx_chars"][::-1].copy()
    elif damage == "df":
        derived["cx_df"] = derived["cx_df"][:-1]
    elif damage == "terms":
        derived["cx_terms_content"][0] = 0x200000
    elif damage == "offsets":
        derived["cx_offsets_content"][1] = derived["cx_offsets_content"][2] + 1
    else:
        derived["cx_bm_off_content"][0] = 1
    with pytest.raises(ValueError, match="cx_|block maxima"):
        compiled.SearchIndex.from_arrays({**arrays, **derived})


def test_char_list_maxima_that_miscount_its_blocks_are_reported_on_first_use(stored) -> None:
    """The blocks a character list's maxima count are checked with the list, on first use."""
    _, _, arrays, derived = stored
    derived = {k: np.array(v) for k, v in derived.items()}
    derived["cx_bm_content"] = np.append(derived["cx_bm_content"], np.float32(1.0))
    derived["cx_bx_content"] = np.append(derived["cx_bx_content"], np.full(12, 255, np.uint8))
    cp = int(derived["cx_terms_content"][int(derived["cx_bm_terms_content"][-1])])
    ix = compiled.SearchIndex.from_arrays({**arrays, **derived})
    others = [c for c in COMMON if c != cp]
    assert len(ix.search(np.array([uni(others[0])], dtype=np.uint64), 5)[0]) == 5
    for _ in range(2):
        with pytest.raises(ValueError, match="damaged posting list"):
            ix.search(np.array([uni(cp)], dtype=np.uint64), 5)


def test_chained_bigram_queries_weigh_the_same_with_and_without_char_lists(stored) -> None:
    """A run of bigrams (東京, 京会) weighs each 1/sqrt(2) (docs/SCORING.md "Query weights")."""
    docs, _, arrays, derived = stored
    with_cx = compiled.SearchIndex.from_arrays({**arrays, **derived})
    ref = _build(twin.SearchIndex, docs)
    q = np.array([bi(COMMON[0], COMMON[1]), bi(COMMON[1], COMMON[2]), uni(COMMON[3])],
                 dtype=np.uint64)
    r2 = 1 / math.sqrt(2)
    assert compiled.query_weights(q) == {int(q[0]): r2, int(q[1]): r2}
    for k in (1, 20):
        a, b = with_cx.search(q, k), ref.search(q, k)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()

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


@pytest.mark.parametrize("damage", ["term", "first", "gap", "past"])
def test_block_maxima_of_the_wrong_shape_are_rejected(damage: str) -> None:
    """What can be checked without reading the lists is, at adoption: terms ascending, offsets
    from 0, at least two blocks a list, within the maxima."""
    ix, _ = _index()
    arrays = ix.to_arrays()
    bm = {k: v.copy() for k, v in ix.block_max_arrays().items()}
    if damage == "term":
        bm["bm_terms_content"][0] = bm["bm_terms_content"][1]  # not ascending
    elif damage == "first":
        bm["bm_off_content"][0] = 1
    elif damage == "gap":
        bm["bm_off_content"][1] = bm["bm_off_content"][0] + 1  # a list of one block
    else:
        bm["bm_off_content"][-1] = len(bm["bm_content"]) - 1
    with pytest.raises(ValueError, match="block maxima"):
        compiled.SearchIndex.from_arrays({**arrays, **bm})


@pytest.mark.parametrize("damage", ["offset", "length"])
def test_block_maxima_that_miscount_a_list_are_reported_on_its_first_use(damage: str) -> None:
    """Whether a list has as many blocks as its maxima say is checked with the list, on its
    first use (adoption reads no list: it touched a page per list): the list is reported
    damaged every time, never served, and a merge reports it too; other lists serve."""
    ix, queries = _index()
    arrays = ix.to_arrays()
    bm = {k: v.copy() for k, v in ix.block_max_arrays().items()}
    if damage == "offset":                                 # the first list gets one block more
        bm["bm_off_content"][1] += 1
        victim = int(bm["bm_terms_content"][0])
    else:                                                  # the last list one more
        bm["bm_content"] = np.append(bm["bm_content"], np.float32(1.0))
        bm["bx_content"] = np.append(bm["bx_content"], np.full(12, 255, dtype=np.uint8))
        victim = int(bm["bm_terms_content"][-1])
    loaded = compiled.SearchIndex.from_arrays({**arrays, **bm})
    tid = int(arrays["post_terms_content"][victim])
    key = np.array([arrays["term_keys"][tid]], dtype=np.uint64)
    other = next(q for q in queries if not np.isin(key, q).any()
                 and not np.isin(arrays["term_keys"][arrays["post_terms_content"][
                     bm["bm_terms_content"][:2]]], q).any())
    assert loaded.search(other, 10)[0].tolist() == ix.search(other, 10)[0].tolist()
    for _ in range(2):
        with pytest.raises(ValueError, match="damaged posting list"):
            loaded.search(key, 10)
    empty = np.zeros(0, dtype=np.uint64)
    loaded.add(loaded.n_docs, other, empty, empty, empty, 0, 0, 0, 50, 0, b"\1" * 16)
    with pytest.raises(ValueError, match="damaged posting list"):
        loaded.merge_segments()


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


def _one_block_list_with_some_lead(arrays):
    """(list index, offset of its lead byte, offset of its bitmap, postings) of a content list of
    one block whose postings are partly lead (format at the top of postings.pxd)."""
    from convmem._core import pyindex

    data, offsets = arrays["post_data_content"], arrays["post_offsets_content"]
    raw = data.tobytes()
    for i in range(len(offsets) - 1):
        n, pos = pyindex._read_varint(raw, int(offsets[i]))
        _, pos = pyindex._read_varint(raw, pos)
        if n > 128 or n % 8 == 0 or raw[pos + 1] != 2:
            continue
        hdr = raw[pos]
        tb = (0, 1, 2, 8)[hdr >> 6]
        bitmap = pos + 2 + (n * (hdr & 63) + 7) // 8 + (n * tb + 7) // 8
        assert bitmap + (n + 7) // 8 == int(offsets[i + 1])
        return i, pos + 1, bitmap, n
    raise AssertionError("no such list")


@pytest.mark.parametrize("damage", ["code", "none", "all-zero", "all-one", "padding"])
def test_damaged_lead_flags_are_found_on_first_use(damage: str) -> None:
    ix, _ = _index()
    arrays = {k: np.array(v) for k, v in ix.to_arrays().items()}
    bm = ix.block_max_arrays()
    victim, lead_at, bitmap_at, n = _one_block_list_with_some_lead(arrays)
    data = arrays["post_data_content"]
    nbytes = (n + 7) // 8
    if damage == "code":
        data[lead_at] = 3                             # no such code
    elif damage == "none":
        data[lead_at] = 0                             # the bitmap is then bytes past the list
    elif damage == "all-zero":
        data[bitmap_at:bitmap_at + nbytes] = 0        # "some" with none set
    elif damage == "all-one":
        data[bitmap_at:bitmap_at + nbytes] = 0xFF
        data[bitmap_at + nbytes - 1] = (1 << (n % 8)) - 1   # every posting set, padding clear
    else:
        data[bitmap_at + nbytes - 1] |= 0x80          # a padding bit (n % 8 != 0)
    key = np.array([arrays["term_keys"][int(arrays["post_terms_content"][victim])]],
                   dtype=np.uint64)
    loaded = compiled.SearchIndex.from_arrays({**arrays, **bm})
    with pytest.raises(ValueError, match="damaged posting list"):
        loaded.search(key, 10)


def _qlen_code(n: int) -> int:
    """docs/SCORING.md's one-byte length: exact below 64, then 4 significant bits, rounded down."""
    if n < 64:
        return n
    e = n.bit_length() - 1
    return 255 if e > 17 else 64 + (e - 6) * 16 + ((n >> (e - 4)) & 15)


def _pruned_searches(ix, queries):
    """Searches by the pruned scorer in windows of 64 docs, with what it skipped: the length
    codes are its bounds (other codes skip other docs)."""
    ix._set_prune_density(0)
    ix._set_window(64)
    out = []
    for q in queries:
        docs, scores, _ = ix.search(q, 5)
        out.append((docs.tolist(), scores.tolist(), ix.last_docs_skipped, ix.last_blocks_skipped))
    return out


def test_stored_length_codes_are_every_docs_and_adopted_with_room_to_grow() -> None:
    """qlen/qlen2 (block_max_arrays) are the codes of doc_lens; an index that adopts them
    ranks and prunes as one that codes the lengths itself, before and after docs are added
    past them."""
    rng = np.random.default_rng(11)
    words = rng.integers(1, 2**62, 200, dtype=np.uint64)
    ix = compiled.SearchIndex()
    empty = np.zeros(0, dtype=np.uint64)
    for d in range(2000):  # lengths from 1 to ~40k keys: every range of the code
        z = np.minimum(rng.zipf(1.3, int(np.exp(rng.uniform(0, 10.6)))), len(words)) - 1
        ix.add(d, words[z], words[z[:int(rng.integers(0, 80))]], words[z[:3]], empty, 0, 0, 0,
               50, d, rng.bytes(16))
    queries = [words[np.minimum(rng.zipf(1.1, int(rng.integers(1, 4))), len(words)) - 1]
               for _ in range(40)]
    arrays = ix.to_arrays()
    derived = ix.block_max_arrays()
    lens = arrays["doc_lens"]
    assert derived["qlen"].tolist() == [_qlen_code(int(x)) for x in lens[:, 0]]
    assert derived["qlen2"].tolist() == [[_qlen_code(int(a)), _qlen_code(int(b))]
                                         for a, b in lens[:, 1:]]
    assert min(lens[:, 0]) < 64 <= 1000 < max(lens[:, 0])  # (both sides of the exact range)
    # read-only, as a snapshot's sections are
    frozen = {k: np.frombuffer(v.tobytes(), dtype=v.dtype).reshape(v.shape)
              for k, v in {**arrays, **derived}.items()}
    adopted = compiled.SearchIndex.from_arrays(frozen)
    computed = compiled.SearchIndex.from_arrays(arrays)
    assert _pruned_searches(adopted, queries) == _pruned_searches(computed, queries)
    for d in range(2000, 2300):  # past the adopted arrays: they are copied as they grow
        keys = queries[d % len(queries)]
        long = np.repeat(keys, int(rng.integers(1, 90)))
        for x in (adopted, computed):
            x.add(d, long, keys[:1], empty, empty, 0, 0, 0, 50, d, bytes(16))
    assert _pruned_searches(adopted, queries) == _pruned_searches(computed, queries)
    with pytest.raises(ValueError, match="qlen2"):
        compiled.SearchIndex.from_arrays({**arrays, **derived, "qlen2": derived["qlen2"][:-1]})


def test_stored_tag_buckets_are_every_docs_and_filter_as_the_tags_do() -> None:
    """tagb (block_max_arrays) holds, per doc, bit _tag_bucket(h) of each tag hash h it has (the
    filter maxima's 8 buckets); a tag-filtered search drops a doc lacking an asked bucket as its
    postings are read. Adopted read-only or coded at the first search, before and after docs are
    added past the stored arrays, the tag-filtered top k is the twin's, pruned or not."""
    from convmem._core import pyindex

    rng = np.random.default_rng(5)
    tags = rng.integers(1, 2**63, 40, dtype=np.uint64)
    ix, tw = compiled.SearchIndex(), pyindex.SearchIndex()
    empty = np.zeros(0, dtype=np.uint64)

    def add(d: int, indexes) -> None:
        content = rng.integers(1, 12, int(rng.integers(1, 30))).astype(np.uint64)
        th = np.array(rng.choice(tags, int(rng.integers(0, 4)), replace=False), dtype=np.uint64)
        for x in indexes:
            x.add(d, content, empty, empty, th, 0, 0, 0, 50, d, d.to_bytes(16, "big"))

    def assert_same(got, want) -> None:
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].tolist()

    for d in range(3000):
        add(d, (ix, tw))
    arrays, derived = ix.to_arrays(), ix.block_max_arrays()
    offs, hashes = arrays["tag_offsets"], arrays["tag_hashes"]
    want = [sum({1 << (pyindex._mix64(int(h)) >> 61) for h in hashes[offs[d]:offs[d + 1]]})
            for d in range(3000)]
    assert derived["tagb"].tolist() == want
    assert len(set(want)) > 80  # (of the 93 sets of at most 3 of the 8 buckets)
    frozen = {k: np.frombuffer(v.tobytes(), dtype=v.dtype).reshape(v.shape)
              for k, v in {**arrays, **derived}.items()}
    adopted = compiled.SearchIndex.from_arrays(frozen)
    computed = compiled.SearchIndex.from_arrays(arrays)
    filters = [[int(t)] for t in tags[:10]] + [[int(tags[0]), int(tags[1])], [int(tags[5]), 7]]

    def check(indexes) -> int:
        found = 0
        for x in indexes:
            x._set_prune_density(0)
            x._set_window(64)
        for q in ([1], [2, 3], [1, 4, 5, 6]):
            for th in filters:
                want_top = tw.search(q, 10, tag_hashes=th)
                found += len(want_top[0])
                for x in indexes:
                    assert_same(x.search(q, 10, tag_hashes=th), want_top)
                    assert_same(x.search(q, 10, tag_hashes=th, exhaustive=True), want_top)
        return found

    assert check([adopted, computed, ix]) > 100
    for d in range(3000, 3300):  # past the adopted arrays: coded as they grow
        add(d, (ix, tw, adopted, computed))
    assert check([adopted, computed, ix]) > 100
    with pytest.raises(ValueError, match="tagb"):
        compiled.SearchIndex.from_arrays({**arrays, **derived, "tagb": derived["tagb"][:-1]})

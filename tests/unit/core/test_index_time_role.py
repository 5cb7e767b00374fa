"""The index's time, role and doc-range filters and its frozen statistics (search cursors):
the compiled index against its twin and against a brute-force model, pruned against exhaustive,
edges exact to the millisecond."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import convmem._core.pyindex as twin

from test_index import Corpus, assert_same

compiled = importlib.import_module("convmem._core.index")


def build(seed: int, n: int, remove_rate: float = 0.1):
    """The same random history (roles and timestamps too) in a compiled index and a twin;
    returns the corpus, both indexes and each doc's (timestamp, role, live)."""
    c = Corpus(seed)
    ixs = (compiled.SearchIndex(), twin.SearchIndex())
    meta: list[list] = []
    for d in range(n):
        args = c.doc()
        ts, role = int(c.rng.integers(0, 5000)), int(c.rng.integers(0, 3))
        args = args[:8] + (ts,) + args[9:]
        for ix in ixs:
            ix.add(d, *args, role=role)
        meta.append([ts, role, True])
        if c.rng.random() < remove_rate:
            victim = int(c.rng.integers(0, d + 1))
            for ix in ixs:
                ix.remove(victim)
            meta[victim][2] = False
    return c, ixs[0], ixs[1], meta


def time_role_filters(rng) -> dict:
    kw: dict = {}
    if rng.random() < 0.6:
        kw["ts_lo"] = int(rng.integers(0, 4000))
    if rng.random() < 0.6:
        kw["ts_hi"] = int(rng.integers(kw.get("ts_lo", 0), 5001))
    if rng.random() < 0.5:
        kw["role_mask"] = int(rng.integers(1, 8))
    return kw


def model_passes(m: list, kw: dict) -> bool:
    ts, role, _ = m
    return (ts >= kw.get("ts_lo", -1) and ts < kw.get("ts_hi", 1 << 62)
            and (kw.get("role_mask", 7) >> role) & 1 == 1)


@pytest.mark.parametrize("seed", [1, 2])
def test_time_and_role_filters_match_the_twin_and_the_model(seed: int) -> None:
    c, ix, tw, meta = build(seed, 2600)       # segments and a live buffer
    ix._set_window((256, 64)[seed - 1])
    for _ in range(120):
        q, k = c.query(), int(c.rng.integers(1, 40))
        kw = {**c.filters(), **time_role_filters(c.rng)}
        got = ix.search(q, k, **kw)
        assert_same(got, tw.search(q, k, **kw))
        assert_same(got, ix.search(q, k, exhaustive=True, **kw))
        assert all(model_passes(meta[d], kw) and meta[d][2] for d in got[0].tolist())
        # filters never shorten the page: as many as the unfiltered top-everything has passing
        everything = tw.search(q, 10**6, **{x: y for x, y in kw.items()
                                             if x not in ("ts_lo", "ts_hi", "role_mask")})
        passing = [d for d in everything[0].tolist() if model_passes(meta[d], kw)]
        assert got[0].tolist() == passing[:k]


@pytest.mark.parametrize("mod", [compiled, twin])
@pytest.mark.parametrize("exhaustive", [False, True])
def test_time_edges_are_exact(mod, exhaustive: bool) -> None:
    ix = mod.SearchIndex()
    t = 1_720_843_200_123
    for d, ts in enumerate((t - 1, t, t + 1)):
        ix.add(d, [5, 6], [], [], [], 0, 0, 0, 50, ts, bytes([d]) * 16, role=d)

    def hits(**kw) -> list[int]:
        return sorted(ix.search([5], 10, exhaustive=exhaustive, **kw)[0].tolist())

    assert hits(ts_lo=t) == [1, 2]            # after: inclusive
    assert hits(ts_lo=t + 1) == [2]
    assert hits(ts_hi=t) == [0]               # before: exclusive
    assert hits(ts_hi=t + 1) == [0, 1]
    assert hits(ts_lo=t, ts_hi=t + 1) == [1]
    assert hits(ts_lo=t, ts_hi=t) == []
    assert hits(role_mask=0b001) == [0] and hits(role_mask=0b110) == [1, 2]


@pytest.mark.parametrize("seed", [3, 4])
def test_frozen_stats_and_doc_limit_reproduce_the_first_ranking(seed: int) -> None:
    """A search cursor's page: with the statistics of the first search and only the docs that
    existed then, the scores of the surviving docs are the first search's, to the bit, however
    the index changed since (adds, removes)."""
    c, ix, tw, meta = build(seed, 2300)
    for _ in range(40):
        q, kw = c.query(), c.filters()
        first = [m.search(q, 10**6, **kw) for m in (ix, tw)]
        stats = [m.last_stats for m in (ix, tw)]
        assert stats[0] == stats[1]
        n0 = ix.n_docs
        # the store changes: new docs, some removed
        for d in range(n0, n0 + 300):
            args = c.doc()
            ix.add(d, *args)
            tw.add(d, *args)
        for victim in c.rng.integers(0, n0, 30).tolist():
            ix.remove(victim)
            tw.remove(victim)
        gone = {d for d in range(n0) if not ix.is_live(d)}
        for m, f in ((ix, first[0]), (tw, first[1])):
            again = m.search(q, 10**6, doc_limit=n0, stats=stats[0], **kw)
            keep = [i for i, d in enumerate(f[0].tolist()) if d not in gone]
            assert_same(again, (f[0][keep], f[1][keep], f[2][keep]))
        assert_same(ix.search(q, 15, doc_limit=n0, stats=stats[0], **kw),
                    ix.search(q, 15, doc_limit=n0, stats=stats[0], exhaustive=True, **kw))


@pytest.mark.parametrize("mod", [compiled, twin])
def test_stats_must_fit_the_query(mod) -> None:
    ix = mod.SearchIndex()
    ix.add(0, [5, 6], [], [], [], 0, 0, 0, 50, 1, b"\x01" * 16)
    ix.search([5, 6], 3)
    assert ix.last_stats == (1, (2, 0, 0), (1, 1))
    with pytest.raises(ValueError):
        ix.search([5, 6], 3, stats=(1, (2, 0, 0), (1,)))
    with pytest.raises(ValueError):
        ix.search([5], 3, stats=(-1, (2, 0, 0), (1,)))


@pytest.mark.parametrize("mod", [compiled, twin])
def test_role_survives_arrays_and_compaction(mod) -> None:
    ix = mod.SearchIndex()
    for d in range(6):
        ix.add(d, [5], [], [], [], 0, 0, 0, 50, d, bytes([d]) * 16, role=d % 3)
    ix.remove(0)
    back = mod.SearchIndex.from_arrays(ix.to_arrays())
    assert back.search([5], 10, role_mask=0b100)[0].tolist() == [5, 2]
    comp, _ = ix.compacted()
    assert comp.search([5], 10, role_mask=0b100)[0].tolist() == [4, 1]
    with pytest.raises(ValueError):
        ix.add(6, [5], [], [], [], 0, 0, 0, 50, 6, b"\x07" * 16, role=3)


def test_an_older_arrays_format_is_refused() -> None:
    """Format 4 added the role to doc_meta, format 5 the content lead flags: an older snapshot
    is re-derived from the log."""
    ix = compiled.SearchIndex()
    ix.add(0, [5], [], [], [], 0, 0, 0, 50, 1, b"\x01" * 16)
    arrays = ix.to_arrays()
    assert int(arrays["format"]) == 5
    arrays["format"] = np.array(4, dtype=np.int64)
    for mod in (compiled, twin):
        with pytest.raises(ValueError, match="format"):
            mod.SearchIndex.from_arrays(arrays)


def test_a_format_3_snapshot_is_re_derived_from_the_log(tmp_path) -> None:
    """Snapshot sections with format-3 index arrays (no roles) are not current: the store then
    re-derives its state from the log (Catalog.snapshot_is_current, checked at open)."""
    from convmem import MemoryStore
    from convmem.catalog.catalog import Catalog

    path = tmp_path / "s"
    with MemoryStore.open(path) as store:
        for i in range(6):
            store.write_message(session_id="a", role=("user", "assistant", "system")[i % 3],
                                content="word")
        meta, arrays = store._catalog.snapshot_state()
    assert Catalog.snapshot_is_current(meta, arrays)
    arrays["ix.format"] = np.array(3, dtype=np.int64)
    assert not Catalog.snapshot_is_current(meta, arrays)

"""Search index (docs/SCORING.md): the compiled module against its pure-Python twin, pruning against
exhaustive scoring, filters, updates, determinism, snapshot arrays and memory accounting."""
from __future__ import annotations

import importlib

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import convmem
import convmem._core.pyindex as twin

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1
compiled_score = importlib.import_module("convmem._core.score")

CONTENT, SUMMARY, TAGS = 0, 1, 2
UNIGRAM, BIGRAM = 0b11 << 62, 0b10 << 62
CJK = [0x6771, 0x4EAC, 0x306E, 0x8A2D, 0x5B9A, 0x30C7]  # 東 京 の 設 定 デ


def uni(c: int) -> int:
    return UNIGRAM | c


def bi(c1: int, c2: int) -> int:
    return BIGRAM | (c1 << 21) | c2


class Corpus:
    """Seeded documents: Zipf-distributed word keys (top bits 00), CJK bigrams, small metadata
    vocabularies so that filters and ties are common."""

    def __init__(self, seed: int, vocab: int = 200, dup_rate: float = 0.05):
        self.rng = np.random.default_rng(seed)
        self.words = self.rng.integers(1, 2**62, vocab, dtype=np.uint64)
        self.bigrams = np.array([bi(a, b) for a in CJK for b in CJK], dtype=np.uint64)
        self.tags = np.array([101, 202, 303, 404], dtype=np.uint64)
        self.dup_rate = dup_rate
        self.made: list[tuple] = []

    def keys(self, n: int) -> np.ndarray:
        z = np.minimum(self.rng.zipf(1.3, n), len(self.words)) - 1
        keys = self.words[z]
        if self.rng.random() < 0.3:
            keys = np.concatenate([keys, self.rng.choice(self.bigrams, 3)])
        return keys

    def doc(self) -> tuple:
        """Arguments of add() after `doc`; sometimes a copy of an earlier doc (ties)."""
        r = self.rng
        if self.made and r.random() < self.dup_rate:
            old = self.made[int(r.integers(len(self.made)))]
            return old[:-1] + (r.bytes(16),)
        args = (self.keys(int(r.integers(0, 30))), self.keys(int(r.integers(0, 4))),
                self.keys(int(r.integers(0, 3))),
                np.array(r.choice(self.tags, int(r.integers(0, 3)), replace=False), dtype=np.uint64),
                int(r.integers(0, 4)), int(r.integers(0, 6)), int(r.integers(0, 4)),
                int(r.choice([0, 50, 50, 80, 100])), int(r.integers(0, 1000)), r.bytes(16))
        self.made.append(args)
        return args

    def query(self) -> np.ndarray:
        r = self.rng
        q = self.words[np.minimum(r.zipf(1.1, int(r.integers(1, 6))), len(self.words)) - 1]
        if r.random() < 0.2:
            q = np.append(q, np.uint64(uni(int(r.choice(CJK)))))
        if r.random() < 0.1:
            q = np.append(q, r.choice(self.bigrams))
        return q

    def filters(self) -> dict:
        r = self.rng
        kw: dict = {}
        if r.random() < 0.3:
            kw["session"] = int(r.integers(0, 4))
        if r.random() < 0.3:
            kw["kind_mask"] = int(r.integers(1, 64))
        if r.random() < 0.3:
            kw["tier_mask"] = int(r.integers(1, 16))
        if r.random() < 0.3:
            kw["min_importance"] = int(r.choice([1, 50, 80]))
        if r.random() < 0.2:
            kw["tag_hashes"] = np.array(r.choice(self.tags, int(r.integers(1, 3)), replace=False),
                                        dtype=np.uint64)
        return kw


def build(cls, corpus_docs: list[tuple], removes: set[int] = frozenset()):
    ix = cls()
    for d, args in enumerate(corpus_docs):
        ix.add(d, *args)
    for d in sorted(removes):
        ix.remove(d)
    return ix


def random_index(seed: int, n: int, remove_rate: float = 0.1):
    """The same random history applied to a compiled index and a twin. The compiled one prunes
    every query (prune_density 0), so the pruning tests reach the pruned scorer even with the
    sparse queries that the default density would score exhaustively."""
    c = Corpus(seed)
    ixs = (compiled.SearchIndex(), twin.SearchIndex())
    ixs[0]._set_prune_density(0)
    for d in range(n):
        args = c.doc()
        for ix in ixs:
            ix.add(d, *args)
        if c.rng.random() < remove_rate:
            victim = int(c.rng.integers(0, d + 1))
            for ix in ixs:
                ix.remove(victim)
    return c, ixs[0], ixs[1]


class Skipped:
    """Sums what the pruning of the compiled index skipped over several searches, and checks that
    an exhaustive search skips nothing: the counts a change that turns pruning off sets to 0."""

    def __init__(self) -> None:
        self.windows = self.blocks = self.docs = 0

    def add(self, ix) -> None:
        if not isinstance(ix, compiled.SearchIndex):
            return
        self.windows += ix.last_windows_skipped
        self.blocks += ix.last_blocks_skipped
        self.docs += ix.last_docs_skipped

    @staticmethod
    def check_none(ix) -> None:
        assert (ix.last_windows_skipped, ix.last_blocks_skipped, ix.last_docs_skipped) == (0, 0, 0)


def assert_same(a, b, exact: bool = True) -> None:
    assert np.array_equal(a[0], b[0]), (a[0], b[0])
    if exact:
        assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
    else:
        np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
        np.testing.assert_allclose(a[2], b[2], rtol=1e-6, atol=1e-12)


# ---- compiled against twin ---------------------------------------------------------------------

def test_compiled_module_is_the_extension() -> None:
    assert compiled.__file__.endswith((".so", ".pyd"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compiled_matches_twin(seed: int) -> None:
    c, ix, tw = random_index(seed, 2500)  # more than one buffer: segments and a live buffer
    assert (ix.n_docs, ix.n_live) == (tw.n_docs, tw.n_live)
    ix._set_window((4096, 256, 64)[seed - 1])  # one window per segment, or many (pruned)
    skipped = Skipped()
    for _ in range(120):
        q, kw, k = c.query(), c.filters(), int(c.rng.integers(1, 40))
        got, want = ix.search(q, k, **kw), tw.search(q, k, **kw)
        skipped.add(ix)
        assert_same(got, want, exact=False)  # the contract: relative 1e-6, same order ...
        assert_same(got, want)               # ... and in fact the same bits
    if ix.window < 4096:  # with one window a segment, the first segment is scored in full
        assert skipped.docs > 10_000
    if ix.window == 64:
        assert skipped.windows > 0
    ix.merge_segments()
    for _ in range(40):
        q, kw = c.query(), c.filters()
        assert_same(ix.search(q, 25, **kw), tw.search(q, 25, **kw))


def test_breakdown_adds_up_to_the_score_exactly() -> None:
    c, ix, _ = random_index(4, 1500)
    seen = 0
    for _ in range(100):
        docs, scores, bd = ix.search(c.query(), 30)
        for s, (bc, bs, bt) in zip(scores, bd):
            assert (bc + bs) + bt == s
            seen += 1
        assert np.all(scores[:-1] >= scores[1:])
    assert seen > 500


def test_score_matches_the_formula_on_a_hand_made_corpus() -> None:
    ix = compiled.SearchIndex()
    a, b_ = 11, 22
    ix.add(0, [a, a, b_], [a], [], [], 0, 0, 0, 50, 1, b"\x01" * 16)
    ix.add(1, [b_, b_, b_, b_], [], [b_], [], 0, 0, 0, 50, 2, b"\x02" * 16)
    ix.add(2, [7], [], [], [], 0, 0, 0, 50, 3, b"\x03" * 16)
    docs, scores, bd = ix.search([a], 5)
    n, df = 3, 1
    idf = math.log(1.0 + (float(n - df) + 0.5) / (float(df) + 0.5))
    avg_c, avg_s = 8 / 3, 1 / 3
    x_c = 1.0 * 2.0 / ((1.0 - 0.75) + 0.75 * 3.0 / avg_c)
    x_s = 1.5 * 1.0 / ((1.0 - 0.75) + 0.75 * 1.0 / avg_s)
    big_x = (x_c + x_s) + 0.0
    assert docs.tolist() == [0]
    # a is among doc 0's first 16 content keys: the lead bonus, 0.3 idf, joins the content part
    assert bd[0].tolist() == [idf * x_c / (1.2 + big_x) + 0.3 * idf, idf * x_s / (1.2 + big_x),
                              0.0]


@pytest.mark.parametrize("mod", [compiled, twin])
def test_the_lead_bonus_goes_to_keys_among_the_first_16_content_keys(mod) -> None:
    """Two docs of the same length and tf, the key 16th in one and 17th in the other: only
    the first gets the bonus; a key only in the summary gets none."""
    ix = mod.SearchIndex()
    a, fill = 11, list(range(100, 130))
    ix.add(0, fill[:15] + [a] + fill[15:20], [], [], [], 0, 0, 0, 50, 1, b"\x01" * 16)
    ix.add(1, fill[:16] + [a] + fill[16:20], [], [], [], 0, 0, 0, 50, 2, b"\x02" * 16)
    ix.add(2, fill[:21], [a], [], [], 0, 0, 0, 50, 3, b"\x03" * 16)
    docs, scores, bd = ix.search([a], 5)
    n, df = 3, 3
    idf = math.log(1.0 + (float(n - df) + 0.5) / (float(df) + 0.5))
    x = 1.0 / ((1.0 - 0.75) + 0.75 * 21.0 / 21.0)
    assert docs.tolist()[:2] == [0, 1]
    assert bd[0][0] == idf * x / (1.2 + x) + 0.3 * idf
    assert bd[1][0] == idf * x / (1.2 + x)
    assert bd[docs.tolist().index(2)][0] == 0.0
    ix._set_lead_weight(0.0)
    _, scores0, _ = ix.search([a], 5)
    assert scores0[0] == scores0[1]


# ---- pruning -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_pruned_equals_exhaustive(seed: int) -> None:
    # more than one buffer of docs (the buffer is always scored in full), a live buffer unless
    # merged; small windows: many windows, many skipped
    c, ix, _ = random_index(100 + seed, 2300 + 300 * seed, remove_rate=0.15)
    ix._set_window((64, 256, 1024)[seed % 3])
    if seed % 2:
        ix.merge_segments()
    skipped = Skipped()
    for _ in range(150):
        q, kw, k = c.query(), c.filters(), int(c.rng.choice([1, 3, 10, 50]))
        got = ix.search(q, k, **kw)
        skipped.add(ix)
        assert_same(got, ix.search(q, k, exhaustive=True, **kw))
        Skipped.check_none(ix)
    assert skipped.docs > 10_000
    if ix.window == 64:
        assert skipped.windows > 0


def test_scorer_chosen_by_postings_per_window() -> None:
    """By default a query is pruned when it has at least prune_min_postings postings and
    averages at least prune_density per 4096 doc ids, else scored exhaustively; the results are
    the same either way, prune_density 0 prunes every query and a huge one none."""
    c, ix, tw = random_index(7, 8000, remove_rate=0.0)
    default = compiled.SearchIndex()
    assert (default.prune_density, default.prune_min_postings) == (16, 3000)
    assert compiled.PRUNE_MIN_POSTINGS == twin.PRUNE_MIN_POSTINGS == 3000
    def postings(w: int) -> int:
        ix.search([w], 1, exhaustive=True)
        return ix.last_postings
    by_count = sorted((postings(int(w)), int(w)) for w in c.words)
    common = [by_count[-1][1]]
    rare = [next(w for n, w in by_count if n > 0)]
    least = by_count[-1][0]                           # the common word's postings
    chosen = []
    for q in (common, rare, common + rare):
        ix._set_prune_density(128, 0)                 # the density alone decides
        got = ix.search(q, 10)
        dense = ix.last_postings * 4096 >= 128 * ix.n_docs
        assert ix.last_pruned == dense
        chosen.append(dense)
        assert_same(got, ix.search(q, 10, exhaustive=True))
        assert_same(got, tw.search(q, 10))
        ix._set_prune_density(1, least + 1)           # the least postings alone decide
        assert_same(ix.search(q, 10), got)
        assert ix.last_pruned == (ix.last_postings >= least + 1)
        ix._set_prune_density(1, least)
        assert_same(ix.search(q, 10), got)
        assert ix.last_pruned == (ix.last_postings >= least)
        ix._set_prune_density(0)
        assert ix.prune_min_postings == 0
        assert_same(ix.search(q, 10), got)
        assert ix.last_pruned == (ix.last_postings > 0)
        ix._set_prune_density(1 << 40)
        assert ix.prune_min_postings == compiled.PRUNE_MIN_POSTINGS
        assert_same(ix.search(q, 10), got)
        assert not ix.last_pruned
    assert chosen == [True, False, True]
    with pytest.raises(ValueError):
        ix._set_prune_density(-1)
    with pytest.raises(ValueError):
        ix._set_prune_density(16, -1)


@pytest.mark.parametrize("short_first", [False, True])
def test_block_maxima_stay_bounds_when_avgdl_moves(short_first: bool) -> None:
    """Block maxima are taken with the statistics of the moment a segment is made; segments
    made when docs were long (or short) must still bound the scores after avgdl has moved."""
    rng = np.random.default_rng(7)
    ix = compiled.SearchIndex()
    ix._set_window(64)
    tw = twin.SearchIndex()
    lengths = (2, 60) if short_first else (60, 2)
    d = 0
    for length in lengths:
        for _ in range(3000):
            terms = rng.integers(1, 6, size=length).tolist()
            args = (terms, [], [], [], 0, 0, 0, int(rng.integers(0, 100)), d, d.to_bytes(16, "big"))
            ix.add(d, *args)
            tw.add(d, *args)
            d += 1
        if length == lengths[0]:
            ix.merge_segments()  # one segment made with the first avgdl
    skipped = Skipped()
    for q in ([1, 2], [3], [1, 4, 5], [2, 5]):
        for k in (1, 10, 50):
            got = ix.search(q, k)
            skipped.add(ix)
            assert_same(got, ix.search(q, k, exhaustive=True))
            assert_same(got, tw.search(q, k))
    assert skipped.windows > 0 and skipped.docs > 0


def test_one_byte_lengths_round_down_by_at_most_a_sixteenth() -> None:
    """The pruning bounds read content lengths from one byte: never above the true length
    (so the bound is not below the score), and close to it (so it prunes)."""
    for n in list(range(0, 5000)) + [2**17 - 1, 2**17, 2**18 - 1, 2**18, 10**7, 2**32 - 1]:
        got = compiled_score._qlen_floor(n)
        assert got <= n
        if n < 64:
            assert got == n
        elif n < 2**18:
            assert got > n - n / 16
    assert compiled_score._qlen_floor(2**32 - 1) == 31 << 13


@pytest.mark.parametrize("seed", range(3))
def test_two_threads_give_the_same_top_k(seed: int) -> None:
    """Large queries are split between two threads that share their k-th scores: the merged
    top k must be the one-thread (exhaustive) one, buffer and removed docs included."""
    rng = np.random.default_rng(seed)
    ix = compiled.SearchIndex()
    ix._set_window(512)
    tw = twin.SearchIndex()
    for d in range(9000):
        content = rng.integers(1, 9, size=int(rng.integers(1, 40))).tolist()
        args = (content, rng.integers(1, 9, size=int(rng.integers(0, 3))).tolist(), [], [],
                int(rng.integers(0, 4)), int(rng.integers(0, 6)), int(rng.integers(0, 4)),
                int(rng.integers(0, 101)), d, d.to_bytes(16, "big"))
        ix.add(d, *args)
        tw.add(d, *args)
        if rng.random() < 0.05:
            victim = int(rng.integers(0, d + 1))
            ix.remove(victim)
            tw.remove(victim)
    parallel = 0
    # Queries of 5+ common keys touch over 30000 postings (IX_PAR_MIN): two threads.
    for q in ([1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8], [1, 4, 5, 8, 2, 3], [2, 6, 1, 7, 5]):
        for k, kw in ((1, {}), (20, {}), (100, {}), (20, {"session": 2}), (10, {"min_importance": 90})):
            got = ix.search(q, k, **kw)
            parallel += ix.last_parallel
            assert_same(got, ix.search(q, k, exhaustive=True, **kw))
            assert_same(got, tw.search(q, k, **kw))
    assert parallel >= 15


@pytest.mark.parametrize("seed", range(2))
def test_two_threads_prune_with_the_kth_of_both_heaps_and_keep_every_tie(seed: int) -> None:
    """Each thread of a split query raises its k-th score to the k-th best of both threads'
    heaps (score.pyx _share_theta): exact scores of different docs, so a lower bound of the final
    k-th. The top k stays the exhaustive one, also where many docs tie on a score (a third of
    them copies of few contents; ties go by importance, time, then ulid), and for a k whose heap is shared only
    every few windows (1 + k // 64)."""
    rng = np.random.default_rng(100 + seed)
    ix = compiled.SearchIndex()
    ix._set_window(256)
    ix._set_prune_density(0)
    ix.parallel_min_postings = 0
    tw = twin.SearchIndex()
    shapes = [rng.integers(1, 7, size=int(rng.integers(1, 12))).tolist() for _ in range(40)]
    for d in range(12000):
        content = (shapes[int(rng.integers(0, len(shapes)))] if rng.random() < 0.3 else
                   rng.integers(1, 9, size=int(rng.integers(1, 30))).tolist())
        args = (content, [], [], [], 0, 0, 0,
                40 * int(rng.integers(0, 3)), int(rng.integers(0, 50)), d.to_bytes(16, "big"))
        ix.add(d, *args)
        tw.add(d, *args)
    shared = 0
    for q in ([1, 2, 3], [1, 2, 3, 4, 5, 6], [2, 5]):
        for k in (1, 20, 100, 700):
            got = ix.search(q, k)
            assert ix.last_parallel and ix.last_pruned
            shared += ix.last_theta_shared
            assert len(got[0]) == k
            assert_same(got, ix.search(q, k, exhaustive=True))
            assert ix.last_theta_shared == 0
            assert_same(got, tw.search(q, k))
    assert shared > 0


def test_the_least_postings_for_two_threads_is_a_setting_that_changes_no_result() -> None:
    """`parallel_min_postings` (benchmarks/scorer_choice.py --par-min) decides which pruned
    queries are split: a huge least keeps every one on one thread, 0 splits every pruned one,
    and the top k is the same either way."""
    rng = np.random.default_rng(11)
    ix = compiled.SearchIndex()
    ix._set_window(512)
    ix._set_prune_density(0)
    for d in range(6000):
        ix.add(d, rng.integers(1, 9, size=int(rng.integers(1, 30))).tolist(), [], [], [], 0, 0,
               0, 50, d, d.to_bytes(16, "big"))
    assert ix.parallel_min_postings == twin.SearchIndex().parallel_min_postings == 30000
    q = [1, 2, 3]
    ix.parallel_min_postings = 10**12
    alone = ix.search(q, 20)
    assert not ix.last_parallel and ix.last_pruned
    ix.parallel_min_postings = 0
    assert_same(ix.search(q, 20), alone)
    assert ix.last_parallel
    assert_same(ix.search(q, 20, exhaustive=True), alone)
    assert not ix.last_parallel  # (only a pruned query is split)


def test_session_docs_give_the_same_results() -> None:
    """A search given the session's docs scores only them; results equal the plain filter's."""
    c = Corpus(321)
    ix, tw = compiled.SearchIndex(), twin.SearchIndex()
    sessions = c.rng.integers(0, 200, 6000)
    for d in range(6000):
        args = list(c.doc())
        args[4] = int(sessions[d])
        for x in (ix, tw):
            x.add(d, *args)
        if c.rng.random() < 0.1:
            victim = int(c.rng.integers(0, d + 1))
            for x in (ix, tw):
                x.remove(victim)
    used = 0
    for _ in range(120):
        q, kw, k = c.query(), c.filters(), int(c.rng.choice([1, 5, 20]))
        s = int(c.rng.integers(0, sessions.max() + 1))
        kw["session"] = s
        docs = np.flatnonzero(sessions == s)
        got = ix.search(q, k, session_docs=docs, **kw)
        used += ix.last_session_docs
        assert_same(got, ix.search(q, k, **kw))
        assert_same(got, tw.search(q, k, **kw))
    assert used > 60
    assert_same(ix.search([1, 2], 5, session=0, session_docs=[]), ix.search([1, 2], 5, session=0))


def test_window_must_be_a_multiple_of_64() -> None:
    ix = compiled.SearchIndex()
    for bad in (0, 63, 100, 8192):
        with pytest.raises(ValueError, match="multiple of 64"):
            ix._set_window(bad)
    ix._set_window(128)
    assert ix.window == 128


def test_pruning_with_many_ties() -> None:
    """Identical docs tie on score: the order then comes from importance, timestamp and ulid."""
    ix = compiled.SearchIndex()
    ix._set_window(64)
    ix._set_prune_density(0)  # pruned: 600 docs are below the default least postings
    rare, common = 5, 6
    for d in range(600):
        keys = [common] * (1 + d % 3) + ([rare] if d % 7 == 0 else [])
        ix.add(d, keys, [], [], [], 0, d % 2, 0, 50 + d % 2, d % 5, d.to_bytes(16, "big"))
    ix.merge_segments()
    for d in range(600, 700):  # some in the summary and tags fields too, some in the buffer
        ix.add(d, [common] * (d % 2), [common], [common] * (d % 3), [], 0, 0, 0, 50, d % 5,
               d.to_bytes(16, "big"))
    skipped = Skipped()
    for q in ([rare, common], [common], [rare]):
        for k in (1, 5, 20, 200):
            got = ix.search(q, k)
            skipped.add(ix)
            assert_same(got, ix.search(q, k, exhaustive=True))
            filtered = ix.search(q, k, kind_mask=0b10, min_importance=51)
            assert_same(filtered, ix.search(q, k, kind_mask=0b10, min_importance=51, exhaustive=True))
    assert skipped.docs > 1000  # ties everywhere: windows stay open, docs are cut


def _runs_index(rng, n_docs: int, lengths: tuple[int, ...], run: int, key_hi: int,
                term_p: dict[int, float], short_tfs: list[int], summary: tuple[int, list, list],
                tags: tuple[int, list, list], sessions: int, imp_step: int, merge_at: int,
                removed: range) -> tuple:
    """Docs whose content length changes every `run` docs (so whole blocks hold long or short
    docs and their block maxima differ) of other keys below `key_hi`, with the terms of `term_p`
    added at those rates (tf drawn from `short_tfs` in short docs), some of them in summary/tags too (enough to lift a doc of a skipped block into
    the top k), some removed and the last ones left in the buffer. `summary`/`tags` are (every,
    keys for every second time, keys otherwise)."""
    ix, tw = compiled.SearchIndex(), twin.SearchIndex()
    for d in range(n_docs):
        n = lengths[(d // run) % len(lengths)]
        content = [int(x) for x in rng.integers(10, key_hi, n)]
        for t, p in term_p.items():
            if rng.random() < p:
                content += [t] * int(rng.choice(short_tfs if n < 100 else [1, 1, 2]))
        fields = [(every_keys[1] if d % (2 * every_keys[0]) == 0 else every_keys[2])
                  if d % every_keys[0] == 0 else [] for every_keys in (summary, tags)]
        args = (d, content, fields[0], fields[1], [], d % sessions, d % 6, d % 4,
                (d * imp_step) % 101, d, d.to_bytes(16, "big"))
        ix.add(*args)
        tw.add(*args)
        if d == merge_at:
            ix.merge_segments()
    for d in removed:
        ix.remove(d)
        tw.remove(d)
    return ix, tw


def _common_term_index(seed: int) -> tuple[compiled.SearchIndex, twin.SearchIndex]:
    """2500 docs where the terms 1-3 are very common (many blocks of 128 postings)."""
    return _runs_index(np.random.default_rng(seed), 2500, (3, 120, 8, 200, 30), 300, 400,
                       {1: 0.9, 2: 0.6, 3: 0.3}, [1, 1, 1, 2, 4, 9], (11, [1] * 20, [5] * 60),
                       (13, [2, 3] * 10, [8] * 30), 4, 13, 2000, range(0, 2500, 17))


def _similar_idf_index(seed: int) -> tuple[compiled.SearchIndex, twin.SearchIndex]:
    """3000 docs where the terms 1-5 each occur in about half the docs (similar, low idf, as the
    bigrams of a common katakana word): the essential groups stay dense in every window."""
    return _runs_index(np.random.default_rng(100 + seed), 3000, (4, 150, 10, 60, 25, 300), 250,
                       500, {t: 0.45 + 0.02 * t for t in (1, 2, 3, 4, 5)}, [1, 1, 2, 3, 7],
                       (19, [3, 4] * 6, [6] * 40),
                       (23, [5, 1] * 4, [7] * 20), 3, 29, 2600, range(5, 3000, 19))


def _assert_pruned_matches(build, queries: list, filters: list) -> None:
    """Pruned top k == exhaustive == twin, on the built index and on one restored from its
    arrays, for every query, k and filter set; none cut short. Windows of 64 and 256 docs (with
    the default 4096 each segment is one window, and the first one is scored in full): windows,
    blocks and docs are skipped on both. Every query is pruned (prune_density 0): these indexes
    are smaller than the default's least postings."""
    ix, tw = build()
    restored = compiled.SearchIndex.from_arrays(build()[0].to_arrays())
    ix._set_window(64)
    restored._set_window(256)
    for index in (ix, restored):
        index._set_prune_density(0)
        skipped = Skipped()
        for q in queries:
            for k in (1, 20, 100):
                for kw in filters:
                    got = index.search(q, k, **kw)
                    skipped.add(index)
                    assert len(got[0]) == min(k, len(tw.search(q, 10_000, **kw)[0]))
                    assert_same(got, index.search(q, k, exhaustive=True, **kw))
                    Skipped.check_none(index)
                    assert_same(got, tw.search(q, k, **kw))
        assert skipped.windows > 0 and skipped.blocks > 0 and skipped.docs > 0, vars(skipped)


@pytest.mark.parametrize("seed", range(3))
def test_block_max_skipping_keeps_results_on_common_terms(seed: int) -> None:
    _assert_pruned_matches(lambda: _common_term_index(seed),
                           [[1], [2], [3], [1, 2], [1, 2, 3], [2, 3, 77]],
                           [{}, {"session": 1}, {"kind_mask": 0b000110, "min_importance": 30}])


@pytest.mark.parametrize("seed", range(2))
def test_pruning_keeps_results_on_similar_idf_common_terms(seed: int) -> None:
    _assert_pruned_matches(lambda: _similar_idf_index(seed),
                           [[1, 2, 3, 4, 5], [1, 2, 3], [2, 4], [1, 3, 5, 600]],
                           [{}, {"session": 2}, {"kind_mask": 0b011010, "min_importance": 40}])


def _rare_among_common_index(seed: int) -> tuple[compiled.SearchIndex, twin.SearchIndex]:
    """12000 docs where the terms 1 and 2 are in most docs and 900 and 901 in a few dozen spread
    over all of them (in three segments and the buffer; some removed, some of other kinds)."""
    rng = np.random.default_rng(300 + seed)
    ix, tw = compiled.SearchIndex(), twin.SearchIndex()
    for d in range(12000):
        content = [int(x) for x in rng.integers(10, 400, int(rng.choice([4, 12, 40, 150])))]
        content += [1] * int(rng.random() < 0.8) + [2] * int(rng.choice([0, 1, 1, 3]))
        content += [900] * (d % 571 == 7) * int(rng.choice([1, 2])) + [901] * (d % 877 == 11)
        tags = [901] if d % 2999 == 5 else []
        args = (d, content, [], tags, [], d % 5, d % 6, d % 4, (d * 7) % 101, d,
                d.to_bytes(16, "big"))
        ix.add(*args)
        tw.add(*args)
        if d in (5000, 9000):
            ix.merge_segments()
    for d in range(7, 12000, 571 * 3):                # some of the rare word's docs removed
        ix.remove(d)
        tw.remove(d)
    return ix, tw


def _assert_priming_pays(ix, tw, queries, filters, settings: dict) -> None:
    """Each query, k 1 and 20, each filter, one thread and two, with the priming settings at
    their first values (on) and at their second (off): the same top k as exhaustive (and the
    twin, when given); on primes docs, off none; on skips more windows and cuts fewer docs
    (the k-th score known earlier)."""
    seen = {}
    for on in (True, False):
        for name, (value_on, value_off) in settings.items():
            setattr(ix, name, value_on if on else value_off)
        for par in (10 ** 9, 0):
            ix.parallel_min_postings = par
            for q in queries:
                for k in (1, 20):
                    for kw in filters:
                        got = ix.search(q, k, **kw)
                        seen[on, par, str(q), k, str(kw)] = (
                            ix.last_primed, ix.last_windows_skipped, ix.last_docs_skipped)
                        assert_same(got, ix.search(q, k, exhaustive=True, **kw))
                        assert ix.last_primed == 0
                        if tw is not None:
                            assert_same(got, tw.search(q, k, **kw))
    on = [v for key, v in seen.items() if key[0]]
    off = [v for key, v in seen.items() if not key[0]]
    assert all(n > 0 for n, _, _ in on) and all(n == 0 for n, _, _ in off)
    assert sum(w for _, w, _ in on) > sum(w for _, w, _ in off)
    assert sum(c for _, _, c in on) < sum(c for _, _, c in off)


@pytest.mark.parametrize("seed", range(2))
def test_priming_with_the_rare_groups_keeps_results(seed: int) -> None:
    """A query pairing rare words with common ones scores the rare words' docs first (_prime):
    the same top k as exhaustive and the twin, with and without priming, one thread or two, with
    filters; the windows without a rare doc are then skipped; and the bits it marks are cleared
    (a CJK unigram's df, counted on the same bitmap, stays right after it)."""
    ix, tw = _rare_among_common_index(seed)
    ix._set_window(64)
    ix._set_prune_density(0)
    queries = [[900, 1, 2], [1, 901, 2], [900, 901, 1], [2, 900]]
    filters = [{}, {"kind_mask": 0b000110}, {"session": 3}, {"min_importance": 40}]
    default = compiled.SearchIndex()
    _assert_priming_pays(ix, tw, queries, filters, {
        "prime_max_postings": (default.prime_max_postings, 0),
        "impact_prime_blocks": (default.impact_prime_blocks, 0)})
    assert default.prime_max_postings == 4096
    cjk = [uni(0x6771)]
    for d in range(12000, 12010):
        args = (d, [bi(0x6771, 0x4EAC)] * (1 + d % 2), [], [], [], 0, 0, 0, 50, d,
                d.to_bytes(16, "big"))
        ix.add(*args)
        tw.add(*args)
    ix.prime_max_postings = 4096
    ix.search([900, 1, 2], 20)
    assert ix.last_primed > 0
    got = ix.search(cjk, 5)
    assert ix.last_stats[2] == (10,)
    assert_same(got, tw.search(cjk, 5))


def test_priming_scores_only_the_best_estimated_rare_docs() -> None:
    """_prime scores exactly at most prime_docs_per_k * k of the rare groups' docs (those of
    largest estimate); the others are left to the sweep, which meets them in the rare lists: the
    same top k as exhaustive and the twin for every limit, k, filter and thread count; 0 scores
    them all, as before the limit (the twin, slow, is asked for the smallest limit)."""
    ix, tw = _rare_among_common_index(1)
    ix._set_window(64)
    ix._set_prune_density(0)
    ix.impact_prime_blocks = 0
    assert compiled.SearchIndex().prime_docs_per_k == 4
    filters = [{}, {"kind_mask": 0b000110}, {"session": 3}, {"min_importance": 40}]
    primed = {}
    for per_k in (0, 1, 4):
        ix.prime_docs_per_k = per_k
        for par in (10 ** 9, 0):
            ix.parallel_min_postings = par
            for q in ([900, 1, 2], [1, 901, 2], [900, 901, 1]):
                for k in (1, 3, 20):
                    for kw in filters:
                        got = ix.search(q, k, **kw)
                        primed[per_k, str(q), k, str(kw)] = ix.last_primed
                        assert_same(got, ix.search(q, k, exhaustive=True, **kw))
                        if per_k == 1 and par == 0:
                            assert_same(got, tw.search(q, k, **kw))
    for (per_k, q, k, kw), n in primed.items():
        every = primed[0, q, k, kw]
        assert n == (every if per_k == 0 else min(every, per_k * k)), (per_k, q, k, kw)
    assert all(primed[0, q, 1, kw] > 1 for _, q, k, kw in primed)


@pytest.fixture(scope="module")
def common_word_index() -> compiled.SearchIndex:
    """45500 docs: one segment of 45000 and the buffer. The term 1 is in 90% of them (a list of
    about 315 blocks in the segment: long enough to prime from), 2 in a third, the other words
    rare; lengths from 20 to 200 keys but for 0.3% of two keys (the docs that score best), tf
    1 to 3; some docs removed. Compiled only (the pruning
    is compiled only; exhaustive scoring is the oracle, checked against the twin elsewhere)."""
    rng = np.random.default_rng(11)
    ix = compiled.SearchIndex()
    for d in range(45500):
        n = int(rng.choice([2, 20, 60, 200], p=[0.003, 0.3, 0.4, 0.297]))
        content = [int(x) for x in rng.integers(10, 5000, n)]
        content += [1] * int(rng.choice([0, 1, 1, 1, 1, 1, 1, 1, 2, 3]))
        content += [2] * int(rng.random() < 0.33)
        ix.add(d, content, [], [1] if d % 997 == 3 else [], [], d % 5, d % 6, d % 4,
               (d * 7) % 101, d, d.to_bytes(16, "big"))
        if d == 44999:
            ix.merge_segments()
    for d in range(13, 45500, 1001):
        ix.remove(d)
    return ix


def test_priming_with_the_highest_blocks_keeps_results(common_word_index) -> None:
    """A query of one or two groups scores first, from each long list, the best doc of each of
    its blocks of highest maximum (_impact_docs): the same top k as exhaustive, with and without,
    one thread or two, with filters (a doc they drop is not primed); more windows are skipped
    and fewer docs cut. A query of three groups is not primed that way."""
    ix = common_word_index
    ix._set_window(256)
    ix._set_prune_density(0)
    ix.prime_max_postings = 0                         # (the rare groups' priming: tested above)
    filters = [{}, {"kind_mask": 0b000110}, {"min_importance": 60}, {"session": 2}]
    _assert_priming_pays(ix, None, [[1], [1, 2]], filters, {
        "impact_prime_blocks": (compiled.SearchIndex().impact_prime_blocks, 0)})
    assert compiled.SearchIndex().impact_prime_blocks == 32
    ix.impact_prime_blocks = 32
    got = ix.search([1, 2, 10], 20)
    assert ix.last_primed == 0
    assert_same(got, ix.search([1, 2, 10], 20, exhaustive=True))


def test_a_higher_merge_factor_merges_more_segments_at_once() -> None:
    """merge_factor F > 2 (a bulk import) merges the F newest segments once the oldest of them
    holds at most twice the newest's docs: more segments meanwhile, still bounded, the same
    results as the twin's at every step and after merging them all."""
    rng = np.random.default_rng(5)
    docs = [(d, [int(x) for x in rng.integers(1, 300, int(rng.integers(1, 12)))], [], [], [],
             d % 3, d % 6, d % 4, 50, d, d.to_bytes(16, "big")) for d in range(2048 * 40)]
    most = {}
    for factor in (2, 4):
        ix, tw = compiled.SearchIndex(), twin.SearchIndex()
        ix.merge_factor = factor
        most[factor] = 0
        for args in docs:
            ix.add(*args)
            tw.add(*args)
            most[factor] = max(most[factor], ix.n_segments)
            if args[0] % 20000 == 19999:
                assert_same(ix.search([5, 7, 250], 10), tw.search([5, 7, 250], 10))
        assert ix.n_segments >= 2
        ix.merge_segments()
        assert ix.n_segments == 1
        assert_same(ix.search([5, 7, 250], 10), tw.search([5, 7, 250], 10))
    assert most[2] <= 6                               # (40 flushes: a binary counter)
    assert most[2] < most[4] <= 9                     # (three a tier: 1, 4 and 16 flushes)


@pytest.fixture(scope="module")
def sparse_index() -> tuple[compiled.SearchIndex, twin.SearchIndex]:
    """40000 docs, the terms 1 and 2 in most, 900 in 9 (one block) and 902 in 133 (two blocks
    of ~20000 doc ids each: 0.2 docs a window of 64)."""
    rng = np.random.default_rng(7)
    ix, tw = compiled.SearchIndex(), twin.SearchIndex()
    for d in range(40000):
        content = [int(x) for x in rng.integers(10, 60, int(rng.choice([3, 8, 30])))]
        content += [1] * int(rng.random() < 0.8) + [2] * int(rng.choice([0, 1, 2]))
        content += [900] * (d % 4999 == 17) + [902] * (d % 300 == 41)
        args = (d, content, [], [], [], d % 3, d % 6, d % 4, (d * 7) % 101, d,
                d.to_bytes(16, "big"))
        ix.add(*args)
        tw.add(*args)
        if d == 30000:
            ix.merge_segments()
    return ix, tw


@pytest.mark.parametrize("rare", [900, 902])
def test_sparse_lists_are_bounded_by_their_docs_in_the_window(sparse_index, rare: int) -> None:
    """A rare word's block spans many windows: a window's bound looks at the block's docs, so
    the windows without them are skipped (sparse_block_span; 512 doc ids here, eight windows of
    64); the results do not change."""
    ix, tw = sparse_index
    ix._set_window(64)
    ix._set_prune_density(0)
    ix.prime_max_postings = 0
    skipped = {}
    for span in (512, 0):
        ix.sparse_block_span = span
        skipped[span] = 0
        for q in ([rare, 1, 2], [rare, 2], [1, rare]):
            for kw in ({}, {"kind_mask": 0b000110}):
                got = ix.search(q, 10, **kw)
                skipped[span] += ix.last_windows_skipped
                assert_same(got, ix.search(q, 10, exhaustive=True, **kw))
                assert_same(got, tw.search(q, 10, **kw))
    assert compiled.SearchIndex().sparse_block_span == 32768
    assert skipped[512] > skipped[0], skipped


# ---- filters -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def filter_corpus():
    """400 docs that all hold the term 9, with every combination of metadata."""
    ix, tw = compiled.SearchIndex(), twin.SearchIndex()
    meta = []
    rng = np.random.default_rng(7)
    for d in range(400):
        tags = [t for t in (1, 2, 3) if (d >> t) & 1]
        m = dict(session=d % 3, kind=d % 6, tier=(d // 6) % 4, importance=(d * 37) % 101,
                 tags=set(tags))
        meta.append(m)
        args = (d, [9] * (1 + d % 4) + [int(x) for x in rng.integers(100, 120, 5)], [], [],
                tags, m["session"], m["kind"], m["tier"], m["importance"], d, rng.bytes(16))
        ix.add(*args)
        tw.add(*args)
    return ix, tw, meta


FILTERS = [
    {"session": 1},
    {"kind_mask": 0b000100},
    {"kind_mask": 0b100001},
    {"tier_mask": 0b0010},
    {"tier_mask": 0b1001},
    {"min_importance": 90},
    {"tag_hashes": [2]},
    {"tag_hashes": [1, 3]},
    {"session": 2, "kind_mask": 0b010110, "tier_mask": 0b0110, "min_importance": 20},
    {"session": 0, "tag_hashes": [2, 3], "min_importance": 10},
]


def passes(m: dict, kw: dict) -> bool:
    return ((kw.get("session", -1) < 0 or m["session"] == kw["session"])
            and (kw.get("kind_mask", 0x3F) >> m["kind"]) & 1 == 1
            and (kw.get("tier_mask", 0x0F) >> m["tier"]) & 1 == 1
            and m["importance"] >= kw.get("min_importance", 0)
            and set(kw.get("tag_hashes", [])) <= m["tags"])


@pytest.mark.parametrize("kw", FILTERS)
@pytest.mark.parametrize("exhaustive", [False, True])
def test_filters_keep_k_results(filter_corpus, kw, exhaustive) -> None:
    ix, tw, meta = filter_corpus
    matching = [d for d, m in enumerate(meta) if passes(m, kw)]
    assert matching
    for k in (1, 7, len(matching), len(matching) + 10):
        docs, _, _ = ix.search([9, 100], k, exhaustive=exhaustive, **kw)
        assert len(docs) == min(k, len(matching))
        assert all(passes(meta[d], kw) for d in docs)
        assert_same((docs,) + ix.search([9, 100], k, exhaustive=exhaustive, **kw)[1:],
                    tw.search([9, 100], k, **kw))
    everything = ix.search([9], 1000, exhaustive=exhaustive, **kw)[0]
    assert sorted(everything.tolist()) == matching


def test_filters_do_not_change_the_scores(filter_corpus) -> None:
    """df counts live docs whatever the filters: a filtered doc keeps its unfiltered score."""
    ix, _, _ = filter_corpus
    docs, scores, _ = ix.search([9, 105], 400)
    full = dict(zip(docs.tolist(), scores.tolist()))
    fdocs, fscores, _ = ix.search([9, 105], 400, session=1, min_importance=30)
    assert len(fdocs) > 10
    assert all(full[d] == s for d, s in zip(fdocs.tolist(), fscores.tolist()))


# ---- removal and updates -----------------------------------------------------------------------

@pytest.mark.parametrize("mod", [compiled, twin])
def test_removed_docs_are_never_returned(mod) -> None:
    c = Corpus(11)
    docs = [c.doc() for _ in range(3000)]
    ix = build(mod.SearchIndex, docs)
    removed = set(range(0, 3000, 3))
    for d in removed:
        ix.remove(d)
        ix.remove(d)  # idempotent
    assert ix.n_live == 2000 and ix.n_docs == 3000
    assert not ix.is_live(0) and ix.is_live(1) and not ix.is_live(3000)
    for _ in range(60):
        got = ix.search(c.query(), 100)[0]
        assert not set(got.tolist()) & removed
    # the statistics forgot them as well: same scores as an index that never had them
    fresh = build(mod.SearchIndex, [docs[d] for d in range(3000) if d not in removed])
    for _ in range(30):
        q = c.query()
        a, b = ix.search(q, 50), fresh.search(q, 50)
        assert np.array_equal(a[1], b[1])
    with pytest.raises(ValueError):
        ix.remove(3000)


def test_remove_with_keys_equals_remove_without() -> None:
    """remove(doc, keys...) lowers df by the keys; remove(doc) finds the terms in the postings
    (buffer or segment): both leave the same index as the twin."""
    c = Corpus(13)
    docs = [c.doc() for _ in range(3000)]
    a, b, tw = build(compiled.SearchIndex, docs), build(compiled.SearchIndex, docs), \
        build(twin.SearchIndex, docs)
    victims = [int(v) for v in c.rng.choice(3000, 500, replace=False)] + [2999, 2998, 0]
    for d in victims:  # some in segments, some still in the buffer
        a.remove(d, *docs[d][:3])
        b.remove(d)
        tw.remove(d, *docs[d][:3])
    assert a.n_live == b.n_live == tw.n_live
    for _ in range(40):
        q, kw = c.query(), c.filters()
        want = tw.search(q, 20, **kw)
        assert_same(a.search(q, 20, **kw), want)
        assert_same(b.search(q, 20, **kw), want)
    arrays = [x.to_arrays() for x in (a, b, tw)]
    for key in arrays[0]:
        assert np.array_equal(arrays[0][key], arrays[1][key]), key
        assert np.array_equal(arrays[0][key], arrays[2][key]), key


@pytest.mark.parametrize("mod", [compiled, twin])
def test_remove_rejects_keys_that_were_not_added(mod) -> None:
    ix = mod.SearchIndex()
    ix.add(0, [1, 2, 2], [3], [], [], 0, 0, 0, 50, 0, b"a" * 16)
    ix.add(1, [1], [], [], [], 0, 0, 0, 50, 1, b"b" * 16)
    for bad in (([1, 2], [3], []), ([1, 2, 99], [3], []), ([1, 2, 2], [], [3])):
        with pytest.raises(ValueError):
            ix.remove(0, *bad)
    with pytest.raises(TypeError):
        ix.remove(0, [1, 2, 2], None, None)
    assert ix.is_live(0) and ix.n_live == 2  # nothing changed
    ix.remove(0, [2, 1, 2], [3], [])
    assert not ix.is_live(0) and ix.search([1], 5)[0].tolist() == [1]
    assert ix.search([2], 5)[0].size == 0


@pytest.mark.parametrize("mod", [compiled, twin])
def test_update_returns_only_the_new_version(mod) -> None:
    ix = mod.SearchIndex()
    for d in range(50):
        ix.add(d, [1000 + d, 5], [], [], [], 0, 0, 0, 50, d, d.to_bytes(16, "big"))
    ix.add(50, [7777, 5], [], [], [], 0, 0, 0, 50, 50, (50).to_bytes(16, "big"))
    ix.remove(50)
    ix.add(51, [8888, 5], [], [], [], 0, 0, 0, 50, 51, (50).to_bytes(16, "big"))  # same message
    assert ix.search([7777], 10)[0].tolist() == []
    assert ix.search([8888], 10)[0].tolist() == [51]
    assert 50 not in ix.search([5], 100)[0].tolist()
    assert ix.n_live == 51


def test_add_validates_its_arguments() -> None:
    for mod in (compiled, twin):
        ix = mod.SearchIndex()
        ok = dict(content_keys=[1], summary_keys=[], tag_keys=[], tag_hashes=[], session=0,
                  kind=0, tier=0, importance=50, timestamp=0, ulid=b"u" * 16)
        with pytest.raises(ValueError):
            ix.add(1, **ok)  # must be n_docs
        for bad in ({"kind": 6}, {"tier": 4}, {"importance": 101}, {"session": -1},
                    {"ulid": b"short"}):
            with pytest.raises(ValueError):
                ix.add(0, **{**ok, **bad})
        assert ix.n_docs == 0
        ix.add(0, **ok)
        assert ix.n_docs == 1
        with pytest.raises(ValueError):
            ix.search([1], -1)
        assert ix.search([], 5)[0].size == 0 and ix.search([1], 0)[0].size == 0


# ---- CJK unigram expansion ---------------------------------------------------------------------

@pytest.mark.parametrize("mod", [compiled, twin])
def test_unigram_query_finds_the_character_inside_bigrams(mod) -> None:
    to, kyo, no = CJK[0], CJK[1], CJK[2]
    ix = mod.SearchIndex()
    ulid = iter(range(100))
    add = lambda d, keys: ix.add(d, keys, [], [], [], 0, 0, 0, 50, d, next(ulid).to_bytes(16, "big"))
    add(0, [bi(to, kyo)])              # 東京
    add(1, [bi(kyo, to)])              # 京東
    add(2, [uni(to)])                  # 東 alone
    add(3, [bi(no, kyo)])              # の京: no 東
    add(4, [11, 12])
    assert sorted(ix.search([uni(to)], 10)[0].tolist()) == [0, 1, 2]
    assert sorted(ix.search([uni(kyo)], 10)[0].tolist()) == [0, 1, 3]
    assert ix.search([bi(to, kyo)], 10)[0].tolist() == [0]
    # 東 and 東京 are two groups: doc 0 matches both and comes first
    assert ix.search([uni(to), bi(to, kyo)], 10)[0].tolist()[0] == 0


def test_unigram_groups_count_df_once_per_doc() -> None:
    to, kyo = CJK[0], CJK[1]
    c, ix, tw = random_index(21, 600)
    for d in range(600, 700):
        args = ([bi(to, kyo), bi(kyo, to), bi(to, to)], [bi(to, kyo)], [], [], 0, 0, 0, 50, d,
                d.to_bytes(16, "big"))
        ix.add(d, *args)
        tw.add(d, *args)
    for q in ([uni(to)], [uni(to), uni(kyo)], [uni(to), 5]):
        assert_same(ix.search(q, 50), tw.search(q, 50))


def test_with_the_real_tokenizer() -> None:
    from convmem._core.tokenizer import token_keys
    texts = ["東京で会議を開催しました", "京都の設定を確認", "Python の設定", "database server"]
    ix = compiled.SearchIndex()
    for d, t in enumerate(texts):
        ix.add(d, token_keys(t), [], [], [], 0, 0, 0, 50, d, d.to_bytes(16, "big"))
    assert ix.search(token_keys("東"), 10)[0].tolist() == [0]
    assert sorted(ix.search(token_keys("京"), 10)[0].tolist()) == [0, 1]
    assert sorted(ix.search(token_keys("設定"), 10)[0].tolist()) == [1, 2]
    assert ix.search(token_keys("Database"), 10)[0].tolist() == [3]


# ---- determinism -------------------------------------------------------------------------------

def test_determinism_across_histories() -> None:
    """The same live docs give the same results to the last bit however the index was built."""
    c = Corpus(31, dup_rate=0.0)
    docs = [c.doc() for _ in range(2500)]
    queries = [(c.query(), c.filters()) for _ in range(60)]
    live = set(range(0, 2500)) - set(range(5, 2500, 9))

    def results(ix, ulid_of):
        out = []
        for q, kw in queries:
            d, s, b = ix.search(q, 20, **kw)
            out.append([(ulid_of(x), sc, tuple(bb)) for x, sc, bb in zip(d.tolist(), s.tolist(), b.tolist())])
        return out

    # history 1: in order, removing as we go
    a = compiled.SearchIndex()
    ua = []
    for d, args in enumerate(docs):
        a.add(d, *args)
        ua.append(args[-1])
        if d not in live:
            a.remove(d)
    ref = results(a, lambda x: ua[x])
    # history 2: reversed order, extra docs added then removed, merges in between
    b = compiled.SearchIndex()
    ub = []
    for i, d in enumerate(reversed(range(2500))):
        b.add(len(ub), *docs[d])
        ub.append(docs[d][-1])
        if d not in live:
            b.remove(len(ub) - 1)
        if i % 700 == 0:
            junk = c.doc()
            b.add(len(ub), *junk)
            ub.append(b"junk" + junk[-1][4:])
            b.remove(len(ub) - 1)
            b.merge_segments()
    assert results(b, lambda x: ub[x]) == ref
    # compacted, then saved and restored
    cb, old_to_new = b.compacted()
    new_to_old = {int(n): o for o, n in enumerate(old_to_new.tolist()) if n >= 0}
    assert cb.n_docs == cb.n_live == len(live)
    assert results(cb, lambda x: ub[new_to_old[x]]) == ref
    restored = compiled.SearchIndex.from_arrays(cb.to_arrays())
    assert results(restored, lambda x: ub[new_to_old[x]]) == ref
    restored_a = compiled.SearchIndex.from_arrays(a.to_arrays())
    assert results(restored_a, lambda x: ua[x]) == ref
    # and the twin agrees with all of them
    tw = build(twin.SearchIndex, [docs[d] for d in sorted(live)])
    kept = sorted(live)
    assert results(tw, lambda x: ua[kept[x]]) == ref


def test_compacted_renumbers_densely_in_order() -> None:
    c, ix, tw = random_index(41, 1800, remove_rate=0.3)
    new, old_to_new = ix.compacted()
    newt, old_to_new_t = tw.compacted()
    assert np.array_equal(old_to_new, old_to_new_t)
    live = [d for d in range(ix.n_docs) if ix.is_live(d)]
    assert old_to_new[live].tolist() == list(range(len(live)))
    assert all(old_to_new[d] == -1 for d in range(ix.n_docs) if not ix.is_live(d))
    assert new.n_docs == new.n_live == len(live)
    a, b = new.to_arrays(), newt.to_arrays()
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    # it stays usable: adds after compaction match the twin
    for d in range(new.n_docs, new.n_docs + 300):
        args = c.doc()
        new.add(d, *args)
        newt.add(d, *args)
    for _ in range(30):
        q = c.query()
        assert_same(new.search(q, 20), newt.search(q, 20))


# ---- snapshot arrays ---------------------------------------------------------------------------

def test_to_arrays_is_the_same_in_both_modules() -> None:
    _, ix, tw = random_index(51, 2200, remove_rate=0.2)
    a, b = ix.to_arrays(), tw.to_arrays()
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key
    assert int(a["format"]) == compiled.ARRAYS_FORMAT


def test_from_arrays_borrows_read_only_mmap_and_copies_on_write(tmp_path: Path) -> None:
    c, ix, tw = random_index(61, 2200, remove_rate=0.1)
    arrays = ix.to_arrays()
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr)
    mapped = {name: np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in arrays}
    loaded = compiled.SearchIndex.from_arrays(mapped)
    twin_loaded = twin.SearchIndex.from_arrays(tw.to_arrays())
    assert loaded.n_docs == ix.n_docs and loaded.n_live == ix.n_live
    for _ in range(30):
        q = c.query()
        assert_same(loaded.search(q, 20), ix.search(q, 20))
    # mutate the loaded index: the mapped files must not change
    before = {name: np.array(arr) for name, arr in mapped.items()}
    for d in range(loaded.n_docs, loaded.n_docs + 2500):
        args = c.doc()
        for x in (loaded, twin_loaded):
            x.add(d, *args)
    for d in range(0, loaded.n_docs, 5):
        loaded.remove(d)
        twin_loaded.remove(d)
    for _ in range(30):
        q, kw = c.query(), c.filters()
        assert_same(loaded.search(q, 20, **kw), twin_loaded.search(q, 20, **kw))
    for name, arr in mapped.items():
        assert np.array_equal(arr, before[name]), name


def test_from_arrays_rejects_inconsistent_arrays() -> None:
    _, ix, _ = random_index(71, 300)
    good = ix.to_arrays()
    bad_cases = {
        "format": np.array(99, dtype=np.int64),
        "doc_meta": good["doc_meta"][:-1],
        "term_table": np.zeros(100, dtype=np.uint32),
        "post_offsets_content": good["post_offsets_content"][::-1].copy(),
        "post_terms_summary": good["post_terms_summary"] + np.uint32(10**6),
        "tag_offsets": good["tag_offsets"] + 1,
        "doc_lens": good["doc_lens"].astype(np.int64),
    }
    for name, value in bad_cases.items():
        with pytest.raises(ValueError):
            compiled.SearchIndex.from_arrays({**good, name: value})
    compiled.SearchIndex.from_arrays(good)


def test_empty_index_round_trips() -> None:
    for mod in (compiled, twin):
        ix = mod.SearchIndex()
        ix.merge_segments()
        new, o2n = ix.compacted()
        assert o2n.shape == (0,) and new.n_docs == 0
        back = mod.SearchIndex.from_arrays(ix.to_arrays())
        assert back.n_docs == 0 and back.search([1], 5)[0].size == 0
        back.add(0, [1], [], [], [], 0, 0, 0, 50, 0, b"x" * 16)
        assert back.search([1], 5)[0].tolist() == [0]


# ---- memory accounting -------------------------------------------------------------------------

TRACE_SCRIPT = textwrap.dedent("""
    import gc, json, sys, tracemalloc
    import numpy as np
    from convmem._core.index import SearchIndex
    n = int(sys.argv[1])
    rng = np.random.default_rng(n)
    words = rng.integers(1, 2**62, 20000, dtype=np.uint64)
    docs = [words[np.minimum(rng.zipf(1.2, int(rng.integers(20, 60))), 20000) - 1]
            for _ in range(n)]
    ulids = [rng.bytes(16) for _ in range(n)]
    tags = [np.array([d % 7], dtype=np.uint64) for d in range(n)]
    for a in docs + tags:
        memoryview(a)  # numpy caches buffer info on each array at first export: not the index's
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ix = SearchIndex()
    for d in range(n):
        ix.add(d, docs[d], docs[d], [], tags[d], d % 5, d % 6, d % 4, 50, d, ulids[d])
        if d % 10 == 0:
            ix.remove(d // 2)
    ix.search(docs[0][:3], 20)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - base
    print(json.dumps({"traced": traced, "nbytes": ix.nbytes()}))
""")


@pytest.mark.parametrize("n", [3000, 20000, 60000])
def test_nbytes_matches_tracemalloc(n: int) -> None:
    root = str(Path(convmem.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", TRACE_SCRIPT, str(n)], capture_output=True,
                         text=True, env=env, check=True)
    rep = json.loads(out.stdout)
    total = sum(rep["nbytes"].values())
    assert set(rep["nbytes"]) == {"postings", "terms", "doc_columns", "scratch"}
    assert abs(total - rep["traced"]) <= 0.10 * rep["traced"], rep


def test_nbytes_grows_with_the_corpus_and_counts_scratch() -> None:
    _, ix, _ = random_index(81, 500)
    small = ix.nbytes()
    c = Corpus(82)
    for d in range(ix.n_docs, ix.n_docs + 5000):
        ix.add(d, *c.doc())
    big = ix.nbytes()
    assert big["postings"] > small["postings"] and big["doc_columns"] > small["doc_columns"]
    ix.search(c.query(), 10)
    assert ix.nbytes()["scratch"] >= 4 * 3 * ix.n_docs


# ---- state machine against the twin ------------------------------------------------------------

class IndexMachine(RuleBasedStateMachine):
    """Random interleavings of add, remove, search, merge, compaction and save/restore."""

    @initialize(seed=st.integers(0, 2**16))
    def setup(self, seed: int) -> None:
        self.corpus = Corpus(seed, vocab=40, dup_rate=0.2)
        self.ix = compiled.SearchIndex()
        self.ix._set_window(64 if seed % 2 else 4096)
        self.tw = twin.SearchIndex()

    @rule(n=st.integers(1, 400))
    def add(self, n: int) -> None:
        for _ in range(n):
            args = self.corpus.doc()
            d = self.ix.n_docs
            self.ix.add(d, *args)
            self.tw.add(d, *args)

    @precondition(lambda self: self.ix.n_docs > 0)
    @rule(data=st.data())
    def remove(self, data) -> None:
        for d in data.draw(st.lists(st.integers(0, self.ix.n_docs - 1), max_size=40)):
            self.ix.remove(d)
            self.tw.remove(d)

    @rule(k=st.sampled_from([1, 5, 20, 100]), exhaustive=st.booleans())
    def search(self, k: int, exhaustive: bool) -> None:
        for _ in range(5):
            q, kw = self.corpus.query(), self.corpus.filters()
            assert_same(self.ix.search(q, k, exhaustive=exhaustive, **kw), self.tw.search(q, k, **kw))

    @rule()
    def merge(self) -> None:
        self.ix.merge_segments()

    @rule()
    def compact(self) -> None:
        self.ix, o2n = self.ix.compacted()
        self.tw, o2n_t = self.tw.compacted()
        assert np.array_equal(o2n, o2n_t)

    @rule()
    def save_and_restore(self) -> None:
        arrays = self.ix.to_arrays()
        for a in arrays.values():
            a.flags.writeable = False
        self.ix = compiled.SearchIndex.from_arrays(arrays)
        self.tw = twin.SearchIndex.from_arrays(self.tw.to_arrays())

    @invariant()
    def counts_agree(self) -> None:
        assert (self.ix.n_docs, self.ix.n_live) == (self.tw.n_docs, self.tw.n_live)


IndexMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestIndexMachine = IndexMachine.TestCase


def test_threads_can_share_an_index() -> None:
    """Searches (which release the GIL) run while another thread adds, removes and merges."""
    import threading
    c = Corpus(91)
    docs = [c.doc() for _ in range(6000)]
    queries = [c.query() for _ in range(50)]
    ix = compiled.SearchIndex()
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                for q in queries:
                    d, s, b = ix.search(q, 10)
                    assert np.all(s[:-1] >= s[1:])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for d, args in enumerate(docs):
            ix.add(d, *args)
            if d % 50 == 0:
                ix.remove(d // 2)
            if d % 2000 == 1999:
                ix.merge_segments()
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not errors
    tw = build(twin.SearchIndex, docs, {d // 2 for d in range(0, 6000, 50)})
    for q in queries[:10]:
        assert_same(ix.search(q, 10), tw.search(q, 10))


def _bigram(a: str, b: str) -> int:
    return (0b10 << 62) | (ord(a) << 21) | ord(b)


@pytest.mark.parametrize("mod", [compiled, twin])
def test_a_cjk_bigram_counts_as_a_quarter_key_in_the_lead(mod) -> None:
    """60 CJK bigrams use 15 of the 16 keys of the lead: one more key fits, a second does not."""
    ix = mod.SearchIndex()
    cjk = [_bigram("日", chr(0x4E00 + i)) for i in range(60)]
    a, b_ = 11, 22
    ix.add(0, cjk + [a, b_], [], [], [], 0, 0, 0, 50, 1, b"\x01" * 16)
    ix.add(1, [7] * 62, [], [], [], 0, 0, 0, 50, 2, b"\x02" * 16)
    for key, lead in ((a, True), (b_, False), (cjk[59], True)):
        docs, _, bd = ix.search([key], 5)
        n, df = 2, 1
        idf = math.log(1.0 + (float(n - df) + 0.5) / (float(df) + 0.5))
        x = 1.0 / ((1.0 - 0.75) + 0.75 * 62.0 / 62.0)
        assert docs.tolist() == [0]
        assert bd[0][0] == idf * x / (1.2 + x) + (0.3 * idf if lead else 0.0)


def test_query_weights_follow_the_runs_and_the_seams() -> None:
    """ファイル: one run of 3 bigrams, all katakana (1/sqrt(3) each); の設 and ルの straddle
    scripts."""
    fa, ai, iru = _bigram("フ", "ァ"), _bigram("ァ", "イ"), _bigram("イ", "ル")
    runo, nose, settei = _bigram("ル", "の"), _bigram("の", "設"), _bigram("設", "定")
    alone = _bigram("東", "京")
    for mod in (compiled, twin):
        r3, r6 = 1 / math.sqrt(3), 1 / math.sqrt(6)
        assert mod.query_weights([fa, ai, iru]) == {fa: r3, ai: r3, iru: r3}
        w = mod.query_weights([fa, ai, iru, runo, nose, settei])
        assert w == {fa: r6, ai: r6, iru: r6, runo: r6 * 0.5, nose: r6 * 0.5, settei: r6}
        # a lone bigram weighs 1 (left out); a key given alone and in a run keeps the larger
        assert mod.query_weights([alone, 5]) == {}
        assert mod.query_weights([fa, 5, fa, ai]) == {ai: 1 / math.sqrt(2)}
        assert mod.query_weights([_bigram("東", "の")]) == {_bigram("東", "の"): 0.5}


@pytest.mark.parametrize("mod", [compiled, twin])
def test_a_weighted_group_scales_its_idf(mod) -> None:
    fa, ai = _bigram("フ", "ァ"), _bigram("ァ", "イ")
    ix = mod.SearchIndex()
    ix.add(0, [fa, ai, 9], [], [], [], 0, 0, 0, 50, 1, b"\x01" * 16)
    ix.add(1, [9, 9, 9], [], [], [], 0, 0, 0, 50, 2, b"\x02" * 16)
    _, s_weighted, _ = ix.search([fa, ai], 2)
    ix._set_cjk_weights(False)
    _, s_plain, _ = ix.search([fa, ai], 2)
    # both groups weigh 1/sqrt(2): the score (a sum of parts linear in idf) with them
    assert s_weighted[0] == pytest.approx(s_plain[0] / math.sqrt(2), rel=1e-12)
    assert s_weighted[0] < s_plain[0]


def test_every_doc_delta_and_tf_width_decodes_exactly() -> None:
    """A block's doc deltas and tfs are unpacked by a function per bit width (_common.h). Here
    each block of one word's list needs another width (one large gap or tf in the block sets
    it): 1 to 15 bits of doc delta, 0 to 7 bits of tf. The word alone, and beside a word every
    doc holds (so that pruning probes one list at the other's docs), gives the twin's results
    to the bit, with every doc of the word found."""
    rng = np.random.default_rng(7)
    word, common, extra = np.uint64(12345), np.uint64(777), np.uint64(999)
    tf_of: dict[int, int] = {}
    d = 0
    for b in range(1, 16):
        big, tb = int(rng.integers(128)), b % 8
        for i in range(128):
            d += int(rng.integers(2 ** (b - 1), 2 ** b)) if i == big else int(rng.integers(1, 4))
            tf_of[d] = 1 + (2 ** tb - 1 if i == 127 - big else int(rng.integers(0, 2 ** tb)))
    ixs = (compiled.SearchIndex(), twin.SearchIndex())
    ixs[0]._set_prune_density(0)
    none = np.zeros(0, dtype=np.uint64)
    for doc in range(d + 1):
        content = np.array([word] * tf_of.get(doc, 0) + [common] * (1 + doc % 3)
                           + [extra] * (doc % 5), dtype=np.uint64)
        for ix in ixs:
            ix.add(doc, content, none, none, none, 0, 0, 0, 50, doc, doc.to_bytes(16, "big"))
    ixs[0].merge_segments()
    assert ixs[0].n_segments == 1
    for q in ([word], [word, common], [word, common, extra]):
        q = np.array(q, dtype=np.uint64)
        for k in (len(tf_of), 10):
            got, want = ixs[0].search(q, k), ixs[1].search(q, k)
            assert_same(got, want)
        if len(q) == 1:
            assert set(ixs[0].search(q, len(tf_of))[0].tolist()) == set(tf_of)


@pytest.mark.parametrize("kwargs, message", [
    ({"weights": (1.0, 2.0)}, "one value per field"),
    ({"b": (0.5, 0.5, 1.5)}, "0 <= b <= 1"),
    ({"k1": 0.0}, "k1 > 0"),
    ({"weights": (1.0, -1.0, 1.0)}, "weights >= 0"),
])
def test_both_indexes_reject_a_bad_bm25f_configuration(kwargs: dict, message: str) -> None:
    for cls in (compiled.SearchIndex, twin.SearchIndex):
        with pytest.raises(ValueError, match=message):
            cls(**kwargs)

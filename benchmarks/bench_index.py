"""Search latency of the compiled index (convmem._core.index) on a synthetic corpus.

The corpus is built here, in memory, from keys directly (no tokenizer, no store): CONVMEM_BENCH_DOCS
docs (default CONVMEM_BENCH_SIZE, itself 100000 by default), 40-60 content keys each drawn from a Zipf law (s = 1.05) over a vocabulary
of 2 x docs words, a fifth of the docs Japanese-like (half of their keys CJK bigrams over 3000
characters, themselves Zipf), 10 % with a 5-15 key summary, 0-3 tags from 50.

Queries of 1-5 terms by class: `rare` (vocabulary ranks 20k-200k), `mid` (ranks 300-3000), `common`
(ranks 0-60 mixed with others), `mixed` (any of those).

    pytest benchmarks/bench_index.py                      # pytest-benchmark, one test per class
    python benchmarks/bench_index.py                      # p50/p99 per class over 2000 queries each
    CONVMEM_BENCH_DOCS=1000000 python benchmarks/bench_index.py
"""
from __future__ import annotations

import itertools
import os
import time
from typing import Any

import numpy as np
import pytest

import _paths  # noqa: F401  (convmem: installed, or the checkout built in place)
from convmem._core import index as _index  # the loaded core: the twin under CONVMEM_PURE=1

SearchIndex = _index.SearchIndex

DOCS = int(os.environ.get("CONVMEM_BENCH_DOCS") or os.environ.get("CONVMEM_BENCH_SIZE") or "100000")
SEED = 1
K = 20
CLASSES = ("rare", "mid", "common", "mixed")
_U62 = (1 << 62) - 1


def _zipf_ranks(rng: np.random.Generator, n_vocab: int, s: float, size: int) -> np.ndarray:
    cdf = np.cumsum(1.0 / np.arange(1, n_vocab + 1) ** s)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size)), n_vocab - 1)


class Corpus:
    def __init__(self, docs: int, seed: int = SEED):
        rng = np.random.default_rng(seed)
        self.n = docs
        self.vocab = max(50_000, 2 * docs)
        self.words = rng.integers(1, _U62, self.vocab, dtype=np.uint64)
        chars = rng.integers(0x4E00, 0x9FFF, 3000)
        lengths = rng.integers(40, 61, docs)
        self.offsets = np.concatenate(([0], np.cumsum(lengths)))
        keys = self.words[_zipf_ranks(rng, self.vocab, 1.05, int(self.offsets[-1]))]
        # Japanese-like docs: half of their keys become CJK bigrams (c1 << 21 | c2, top bits 10)
        ja = rng.random(docs) < 0.2
        mask = np.repeat(ja, lengths) & (rng.random(keys.shape[0]) < 0.5)
        c1 = chars[_zipf_ranks(rng, 3000, 1.0, int(mask.sum()))].astype(np.uint64)
        c2 = chars[_zipf_ranks(rng, 3000, 1.0, int(mask.sum()))].astype(np.uint64)
        keys[mask] = (np.uint64(2) << np.uint64(62)) | (c1 << np.uint64(21)) | c2
        self.keys = keys
        self.summary = rng.random(docs) < 0.1
        self.tag_vocab = rng.integers(1, _U62, 50, dtype=np.uint64)
        self.n_tags = rng.integers(0, 4, docs)
        self.kind = rng.integers(0, 6, docs)
        self.tier = rng.integers(0, 4, docs)
        self.importance = rng.integers(0, 101, docs)
        self.ulids = rng.bytes(16 * docs)
        self.rng = rng

    def add_args(self) -> list[tuple]:
        """The arguments of every add(), made before timing so that the build measures add()."""
        rng = self.rng
        empty = np.zeros(0, dtype=np.uint64)
        out = []
        for d in range(self.n):
            content = self.keys[self.offsets[d]:self.offsets[d + 1]]
            summary = content[:int(rng.integers(5, 16))] if self.summary[d] else empty
            tags = self.tag_vocab[rng.integers(0, 50, self.n_tags[d])]
            out.append((d, content, summary, tags, tags, d // 100, int(self.kind[d]),
                        int(self.tier[d]), int(self.importance[d]), 1_700_000_000_000 + d,
                        self.ulids[16 * d:16 * d + 16]))
        return out

    def build(self, args: list[tuple] | None = None) -> SearchIndex:
        ix = SearchIndex()
        for a in args if args is not None else self.add_args():
            ix.add(*a)
        return ix

    def queries(self, cls: str, count: int, seed: int = 2) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        ranges = {"rare": (20_000, 200_000), "mid": (300, 3000), "common": (0, 60)}
        out = []
        for _ in range(count):
            n = int(rng.integers(1, 6))
            c = cls if cls != "mixed" else str(rng.choice(["rare", "mid", "common"]))
            lo, hi = ranges[c]
            ranks = rng.integers(lo, min(hi, self.vocab), n)
            if c == "common":  # a very common word with others, as in real questions
                ranks[1:] = rng.integers(60, 20_000, n - 1)
            out.append(self.words[ranks])
        return out


def bytes_per_doc(ix: SearchIndex) -> dict[str, float]:
    nb = ix.nbytes()
    return {key: round(v / ix.n_docs, 1) for key, v in nb.items()} | {
        "total": round(sum(nb.values()) / ix.n_docs, 1)}


# ---- pytest-benchmark ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus(DOCS)


@pytest.fixture(scope="module")
def index(corpus: Corpus) -> SearchIndex:
    return corpus.build()


def _size_id(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


pytestmark = pytest.mark.benchmark(group="search")
SIZE_ID = f"{_size_id(DOCS)} docs"


def _label(benchmark: Any, what: str) -> None:
    benchmark.extra_info.update(size=f"{DOCS} synthetic docs, {what}, k={K}", index_docs=DOCS)


@pytest.mark.parametrize("cls", CLASSES, ids=[f"{c}-{SIZE_ID}" for c in CLASSES])
def test_index_search(benchmark: Any, corpus: Corpus, index: SearchIndex, cls: str) -> None:
    """SearchIndex.search as shipped (it picks the pruned or exhaustive scorer per query)."""
    _label(benchmark, f"{cls} queries")
    queries = itertools.cycle(corpus.queries(cls, 500))
    docs, scores, breakdown = benchmark(lambda: index.search(next(queries), K))
    assert len(docs) <= K and breakdown.shape == (len(docs), 3)


@pytest.mark.parametrize("cls", CLASSES, ids=[f"{c}-{SIZE_ID}" for c in CLASSES])
def test_index_search_exhaustive(benchmark: Any, corpus: Corpus, index: SearchIndex, cls: str) -> None:
    """The unpruned scorer forced, for comparison with test_index_search."""
    _label(benchmark, f"{cls} queries, exhaustive")
    queries = itertools.cycle(corpus.queries(cls, 500))
    benchmark(lambda: index.search(next(queries), K, exhaustive=True))
    assert not index.last_pruned


@pytest.mark.parametrize("cls", CLASSES, ids=[f"{c}-{SIZE_ID}" for c in CLASSES])
def test_index_search_always_pruned(benchmark: Any, corpus: Corpus, index: SearchIndex, cls: str) -> None:
    """The pruned scorer forced on every query (prune_density 0), for comparison."""
    _label(benchmark, f"{cls} queries, always pruned")
    queries = itertools.cycle(corpus.queries(cls, 500))
    default = index.prune_density
    index._set_prune_density(0)
    try:
        benchmark(lambda: index.search(next(queries), K))
        assert index.prune_density == 0
    finally:
        index._set_prune_density(default)


@pytest.mark.parametrize("size", [DOCS], ids=[SIZE_ID])
def test_index_search_filtered(benchmark: Any, corpus: Corpus, index: SearchIndex, size: int) -> None:
    _label(benchmark, "mixed queries, kinds 1-2 and importance >= 50")
    queries = itertools.cycle(corpus.queries("mixed", 500))
    docs, _, _ = benchmark(lambda: index.search(next(queries), K, kind_mask=0b000110,
                                                min_importance=50))
    assert len(docs) <= K


# ---- plain timing loop --------------------------------------------------------------------------

def _percentiles(ix: SearchIndex, queries: list[np.ndarray], **kw: Any) -> tuple[float, float, float]:
    times = np.empty(len(queries))
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        ix.search(q, K, **kw)
        times[i] = time.perf_counter() - t0
    ms = times * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), float(ms.mean())


def _pruned(ix: SearchIndex, q: np.ndarray) -> bool:
    ix.search(q, K)
    return bool(ix.last_pruned)


def main() -> int:
    t0 = time.perf_counter()
    corpus = Corpus(DOCS)
    args = corpus.add_args()
    t1 = time.perf_counter()
    ix = corpus.build(args)
    t2 = time.perf_counter()
    del args
    print(f"docs={DOCS} postings~{int(corpus.offsets[-1])} generate={t1 - t0:.1f}s "
          f"build={t2 - t1:.1f}s ({(t2 - t1) / DOCS * 1e6:.1f} us/doc)")
    print("bytes/doc (buffered, segments as built):", bytes_per_doc(ix))
    # Per class: the scorer as shipped (chosen per query by prune_density), the pruned one forced
    # on every query (the choice before it existed) and the exhaustive one forced, interleaved
    # query by query so that all three see the same noise.
    shipped = ix.prune_density
    modes: tuple[tuple[int, dict[str, Any]], ...] = ((shipped, {}), (0, {}), (shipped, {"exhaustive": True}))
    for cls in CLASSES:
        qs = corpus.queries(cls, 2000)
        times = np.empty((3, len(qs)))
        for rep in range(2):  # the first pass warms the scratch arrays and caches
            for i, q in enumerate(qs):
                # the first run of a query pays for bringing its lists into the cache: rotate
                for m in ((i + rep) % 3, (i + rep + 1) % 3, (i + rep + 2) % 3):
                    density, kw = modes[m]
                    ix._set_prune_density(density)
                    t0 = time.perf_counter()
                    ix.search(q, K, **kw)
                    times[m, i] = time.perf_counter() - t0
        ix._set_prune_density(shipped)
        pruned_share = sum(_pruned(ix, q) for q in qs) / len(qs)
        for m, mode in enumerate(("shipped", "pruned", "exhaustive")):
            ms = times[m] * 1e3
            print(f"{mode:10s} {cls:7s} p50={np.percentile(ms, 50):.4f} ms p99={np.percentile(ms, 99):.3f} ms "
                  f"mean={ms.mean():.4f} ms" + (f"  (pruned {pruned_share:.0%} of queries)" if m == 0 else ""))
    qs = corpus.queries("mixed", 2000)
    p50, p99, mean = _percentiles(ix, qs, kind_mask=0b000110, min_importance=50)
    print(f"filtered   mixed   p50={p50:.3f} ms p99={p99:.3f} ms mean={mean:.3f} ms")
    t3 = time.perf_counter()
    ix.merge_segments()
    t4 = time.perf_counter()
    arrays = ix.to_arrays()
    t5 = time.perf_counter()
    SearchIndex.from_arrays(arrays)
    t6 = time.perf_counter()
    print(f"merge_segments={t4 - t3:.2f}s to_arrays={t5 - t4:.3f}s from_arrays={(t6 - t5) * 1e3:.1f} ms")
    print("bytes/doc (one segment):", bytes_per_doc(ix))
    p50, p99, mean = _percentiles(ix, corpus.queries("mixed", 2000))
    print(f"merged     mixed   p50={p50:.3f} ms p99={p99:.3f} ms mean={mean:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""SearchIndex.add_batch (an import batch in one call): the same index as one add() a doc, in
both modules; nothing added for a bad argument; the compiled one lets other threads run Python
while it buffers postings."""
from __future__ import annotations

import importlib
import threading
import time

import numpy as np
import pytest

import convmem._core.pyindex as twin
from test_index import Corpus

compiled = importlib.import_module("convmem._core.index")  # the extension, even under CONVMEM_PURE=1
MODULES = [pytest.param(compiled, id="compiled"), pytest.param(twin, id="twin")]


def docs(seed: int, n: int) -> list[tuple]:
    c = Corpus(seed)
    rng = np.random.default_rng(seed)
    return [c.doc() + (int(rng.integers(0, 3)),) for _ in range(n)]


def batch_args(doc0: int, batch: list[tuple]) -> tuple:
    cols = list(zip(*batch))
    return (doc0, list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3]), list(cols[4]),
            list(cols[5]), list(cols[6]), list(cols[7]), list(cols[8]), b"".join(cols[9]),
            list(cols[10]))


def assert_same_arrays(a, b) -> None:
    xa, xb = a.to_arrays(), b.to_arrays()
    assert sorted(xa) == sorted(xb)
    for name in xa:
        assert np.array_equal(np.asarray(xa[name]), np.asarray(xb[name])), name


@pytest.mark.parametrize("mod", MODULES)
def test_add_batch_builds_what_one_add_a_doc_builds(mod) -> None:
    n = 5000 if mod is compiled else 600  # (compiled: past two buffer flushes and a merge)
    all_docs = docs(3, n)
    one = mod.SearchIndex()
    for d, args in enumerate(all_docs):
        one.add(d, *args)
    batched = mod.SearchIndex()
    sizes = [1, 7, 300, 2500, n]  # a batch may cross a flush, or hold a single doc
    d = 0
    for size in sizes:
        chunk = all_docs[d:d + size]
        if chunk:
            batched.add_batch(*batch_args(d, chunk))
            d += len(chunk)
    assert batched.n_docs == one.n_docs == n
    c = Corpus(9)
    for _ in range(30):
        q = c.query()
        r1, r2 = one.search(q, 20), batched.search(q, 20)
        assert np.array_equal(r1[0], r2[0]) and np.array_equal(r1[1], r2[1])
    for ix in (one, batched):
        ix.merge_segments()
    assert_same_arrays(one, batched)


@pytest.mark.parametrize("mod", MODULES)
def test_a_bad_argument_adds_nothing(mod) -> None:
    ix = mod.SearchIndex()
    first = docs(4, 10)
    ix.add_batch(*batch_args(0, first))
    before = ix.to_arrays()
    bad = [list(a) for a in docs(5, 8)]
    bad[5][5] = 6  # kind 6 does not exist
    with pytest.raises(ValueError, match="kind"):
        ix.add_batch(*batch_args(10, [tuple(a) for a in bad]))
    with pytest.raises(ValueError, match="doc must be 10"):
        ix.add_batch(*batch_args(11, docs(6, 3)))
    args = list(batch_args(10, docs(6, 3)))
    args[5] = args[5][:2]  # one session too few
    with pytest.raises(ValueError, match="one entry a doc"):
        ix.add_batch(*args)
    args = list(batch_args(10, docs(6, 3)))
    args[10] = args[10][:-1]  # a ulid one byte short
    with pytest.raises(ValueError, match="one entry a doc"):
        ix.add_batch(*args)
    assert ix.n_docs == 10
    after = ix.to_arrays()
    for name in before:
        assert np.array_equal(np.asarray(before[name]), np.asarray(after[name])), name


def test_the_compiled_add_batch_lets_another_thread_run_python() -> None:
    """While add_batch buffers postings, the GIL is free: the main thread's loop goes on through
    the call (measured: its longest pause is ~8% of the call; with the GIL held throughout it
    stops for ~80% of it). The
    docs are long and few, so that buffering them is most of the call and no flush (which
    takes the GIL back) comes in it. The best of three calls is judged: on a loaded 2-core
    machine the scheduler alone can stall the main thread for half of one call (seen once:
    0.105 s of 0.150), while a held GIL stalls it in every call."""
    rng = np.random.default_rng(8)
    n = 1200
    keys = [rng.integers(1, 2**62, 200, dtype=np.uint64) for _ in range(n)]
    empty = np.zeros(0, dtype=np.uint64)
    args = (0, keys, [empty] * n, [empty] * n, [empty] * n, [0] * n, [0] * n, [0] * n, [50] * n,
            list(range(n)), rng.bytes(16 * n), [0] * n)
    shares: list[tuple[float, float, int]] = []
    for _ in range(3):
        ix = compiled.SearchIndex()
        span: list[float] = []

        def run() -> None:
            span.append(time.perf_counter())
            ix.add_batch(*args)
            span.append(time.perf_counter())

        t = threading.Thread(target=run)
        ticks: list[float] = []
        t.start()
        while t.is_alive():
            ticks.append(time.perf_counter())
        t.join()
        assert ix.n_docs == n
        points = [span[0]] + [x for x in ticks if span[0] < x < span[1]] + [span[1]]
        longest = max(b - a for a, b in zip(points, points[1:]))
        shares.append((longest / (span[1] - span[0]), span[1] - span[0], len(points)))
        if shares[-1][0] < 0.5:
            break
    assert min(share for share, _, _ in shares) < 0.5, shares

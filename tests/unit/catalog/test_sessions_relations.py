"""SessionIndex and RelationIndex on their own: history order with ties, removal, the session
order, the relation edges in both directions, and the bytes they report."""
from __future__ import annotations

import os
import random
import tracemalloc

import numpy as np
import pytest

from convmem.catalog.relations import RelationIndex
from convmem.catalog.sessions import SessionIndex


def test_history_order_is_timestamp_then_id_and_removal_finds_the_entry():
    ids = [bytes([i]) * 16 for i in range(6)]
    si = SessionIndex(lambda slot: ids[slot])
    num = si.number("s")
    for slot, ts in [(3, 20), (1, 10), (5, 20), (0, 30), (2, 20)]:
        si.insert(num, ts, slot, ids[slot], kind=0)
    s = si.get("s")
    assert s.slots[: s.n].tolist() == [1, 2, 3, 5, 0]  # ts 10, then the ts-20 tie by id, then 30
    assert si.after(s, 20, ids[3]) == 3 and si.index_of(s, 20, 5, ids[5]) == 3
    si.remove(num, 20, 3, ids[3], kind=0)
    assert s.slots[: s.n].tolist() == [1, 2, 5, 0] and s.kind_counts[0] == 4
    with pytest.raises(RuntimeError):
        si.remove(num, 20, 3, ids[3], kind=0)  # not there any more


def test_session_order_and_live_count():
    ids = [os.urandom(16) for _ in range(4)]
    si = SessionIndex(lambda slot: ids[slot])
    for slot, (name, ts) in enumerate([("b", 5), ("a", 5), ("c", 1), ("b", 9)]):
        si.insert(si.number(name), ts, slot, ids[slot], kind=1)
    assert [name for _, name, _ in si.ordered()] == [b"c", b"a", b"b"]
    si.remove(si.get("c").num, 1, 2, ids[2], kind=1)
    assert si.live_sessions == 2 and [name for _, name, _ in si.ordered()] == [b"a", b"b"]


def test_relations_both_directions_replace_and_clear():
    t1, t2 = b"\x01" * 16, b"\x02" * 16
    r = RelationIndex()
    r.set(7, [(0, t1), (3, t2)])
    r.set(8, [(1, t1)])
    assert sorted(r.incoming_of(t1)) == [(0, 7), (1, 8)]
    r.set(7, [(2, t2)])  # replaces 7's edges
    assert r.incoming_of(t1) == [(1, 8)] and r.incoming_of(t2) == [(2, 7)]
    r.clear(8)
    assert r.incoming_of(t1) == []
    back = RelationIndex.from_arrays(**{k: v for k, v in zip(("src", "rtype", "target"),
                                                             r.arrays().values())})
    assert back.incoming_of(t2) == [(2, 7)]


def _traced(build):
    tracemalloc.start()
    try:
        obj = build()
        return obj, tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_relation_and_session_bytes_are_measured_not_guessed():
    rng = random.Random(3)
    targets = [os.urandom(16) for _ in range(500)]

    def relations():
        r = RelationIndex()
        for slot in range(5000):
            r.set(slot + 1000, [(rng.randrange(4), bytes(bytearray(rng.choice(targets))))
                                for _ in range(rng.randint(1, 4))])
        for slot in range(0, 5000, 3):
            r.clear(slot + 1000)
        return r

    r, traced = _traced(relations)
    assert 0.9 <= r.nbytes() / traced <= 1.1
    ids = [os.urandom(16) for _ in range(20000)]

    def sessions():
        si = SessionIndex(lambda slot: ids[slot])
        for slot in range(20000):
            si.insert(si.number(f"session-{slot // 37}"), 1000 + slot, slot, ids[slot], 0)
        si.ordered()
        return si

    si, traced = _traced(sessions)
    assert 0.9 <= si.nbytes() / traced <= 1.1
    empty = SessionIndex(lambda slot: ids[slot])
    assert empty.nbytes() < 1000 and RelationIndex().nbytes() < 1000


def test_a_run_of_equal_timestamps_is_searched_in_logarithmic_steps():
    ids = sorted(os.urandom(16) for _ in range(4096))
    order = list(range(4096))
    random.Random(5).shuffle(order)
    calls = [0]

    def ulid_of(slot):
        calls[0] += 1
        return ids[slot]

    si = SessionIndex(ulid_of)
    num = si.number("s")
    worst = 0
    for slot in order:  # one timestamp for all, ids in random order: every insert is in the run
        calls[0] = 0
        si.insert(num, 1000, slot, ids[slot], kind=0)
        worst = max(worst, calls[0])
    s = si.get("s")
    assert s.slots[: s.n].tolist() == list(range(4096))  # in id order
    assert worst <= 2 * 12 + 2  # ~log2(4096) comparisons (a linear walk needed thousands)
    calls[0] = 0
    si.remove(num, 1000, 2048, ids[2048], kind=0)
    assert calls[0] <= 2 * 12 + 2


def test_a_loaded_session_index_counts_its_bytes_as_objects_are_made():
    """SessionIndex.load makes no object per session; its bytes (what memory_estimate reports)
    follow the objects as they are made. Compared with tracemalloc's, plus the histories'
    entries, which a store holds mapped (here: allocated before tracing)."""
    n, per = 3000, 5
    ids = [os.urandom(16) for _ in range(n * per)]
    hist_off = np.arange(0, n * per + 1, per, dtype=np.int64)
    hist_ts = np.arange(n * per, dtype=np.int64) + 1000
    hist_slots = np.arange(n * per, dtype=np.int32)
    kind_counts = np.zeros((n, 6), dtype=np.int64)
    kind_counts[:, 0] = per
    mapped = hist_ts.nbytes + hist_slots.nbytes

    def loaded(make_every: int):
        def build():
            si = SessionIndex(lambda slot: ids[slot])
            si.load([f"session-{i}" for i in range(n)], hist_off, hist_ts, hist_slots,
                    kind_counts)
            for num in range(0, n, make_every):
                s = si.at(num)
                assert s.ts[0] == 1000 + per * num and s.kind_counts[0] == per
            if make_every == 7:  # the name -> number dict, made by the first lookup by name
                assert si.get(f"session-{n - 1}").num == n - 1
            return si
        return build

    for make_every in (n, 7, 1):  # one session made, a seventh of them, all
        si, traced = _traced(loaded(make_every))
        assert 0.9 <= si.nbytes() / (traced + mapped) <= 1.1, make_every
        assert si.live_sessions == n

"""IdMap (ids in slot order + id -> slot): the compiled table against its twin."""
from __future__ import annotations

import importlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem._core import pyidmap as twin

compiled = importlib.import_module("convmem._core.idmap")  # the extension, even under CONVMEM_PURE=1

MODULES = [compiled, twin]


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
def test_add_get_key_and_grow(mod):
    m = mod.IdMap(4)
    keys = [os.urandom(16) for _ in range(5000)]
    assert [m.add(k) for k in keys] == list(range(5000))
    assert len(m) == 5000
    assert all(m.get(k) == i and m.key(i) == k for i, k in enumerate(keys))
    missing = os.urandom(16)
    assert m.get(missing) is None and missing not in m and keys[0] in m
    with pytest.raises(KeyError):
        m[missing]
    with pytest.raises(ValueError):
        m.add(keys[7])  # already present
    with pytest.raises(IndexError):
        m.key(5000)


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
def test_rejects_wrong_sizes(mod):
    m = mod.IdMap()
    with pytest.raises(ValueError):
        m.get(b"short")
    with pytest.raises(ValueError):
        m.add(b"x" * 17)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=16, max_size=16), max_size=300, unique=True))
def test_round_trips_match_twin(ids):
    a, b = compiled.IdMap(), twin.IdMap()
    for k in ids:
        assert a.add(k) == b.add(k)
    keys = a.keys_array()
    assert keys.tobytes() == b.keys_array().tobytes() == b"".join(ids)
    table = a.table_array()
    table.flags.writeable = False  # as a snapshot's read-only view
    for restored in (compiled.IdMap.from_arrays(keys, table), compiled.IdMap.from_arrays(keys),
                     twin.IdMap.from_arrays(keys)):
        assert len(restored) == len(ids)
        assert all(restored.get(k) == i for i, k in enumerate(ids))
        restored.add(b"\xff" * 16 if b"\xff" * 16 not in ids else b"\xfe" * 16)  # stays writable


def test_table_naming_missing_slots_is_refused():
    m = compiled.IdMap()
    for _ in range(10):
        m.add(os.urandom(16))
    table = m.table_array()
    with pytest.raises(ValueError):
        compiled.IdMap.from_arrays(m.keys_array()[:5], table)
    with pytest.raises(ValueError):
        compiled.IdMap.from_arrays(m.keys_array(), np.zeros(10, dtype=np.int32))


def test_nbytes_counts_capacity():
    m = compiled.IdMap(1000)
    before = m.nbytes
    for _ in range(5000):
        m.add(os.urandom(16))
    assert m.nbytes > before and m.nbytes >= 5000 * (16 + 8)


def test_shared_keys_stay_as_they_were_until_released():
    """keys_array(share=True) views the ids' own memory (a background snapshot's slot_ulid):
    adds past the capacity leave the view unchanged, release keeps the memory while a view
    lives, and the map keeps working throughout."""
    import importlib

    compiled = importlib.import_module("convmem._core.idmap")
    m = compiled.IdMap(16)
    ids = [bytes([i % 256, i // 256]) + bytes(14) for i in range(40)]
    for k in ids[:20]:
        m.add(k)
    view = m.keys_array(share=True)
    assert not view.flags.writeable and view.tobytes() == b"".join(ids[:20])
    for k in ids[20:]:  # past the capacity: the ids are copied, the view keeps its memory
        m.add(k)
    m.release_frozen()
    assert view.tobytes() == b"".join(ids[:20])
    assert [m.get(k) for k in ids] == list(range(40))
    del view
    again = m.keys_array(share=True)
    ref = again.tobytes()
    del again
    m.release_frozen()  # no view left: the memory is the map's again
    m.add(bytes(15) + b"\x01")
    assert m.keys_array().tobytes() == ref + bytes(15) + b"\x01"


@pytest.mark.parametrize("grow_after", [0, 1, 5000])
def test_frozen_table_is_the_table_of_that_moment(grow_after):
    """frozen_table() builds, later and off the map, exactly the table table_array() copied
    at the call (the map filled in slot order, grown on the way, then more ids added after, up
    to past the next growth); a map restored from it finds every id."""
    m = compiled.IdMap(16)
    for _ in range(3000):
        m.add(os.urandom(16))
    want = m.table_array()
    keys = m.keys_array()
    build = m.frozen_table()
    for _ in range(grow_after):
        m.add(os.urandom(16))
    got = build()
    assert got.dtype == np.int32 and np.array_equal(got, want)
    restored = compiled.IdMap.from_arrays(keys, got)
    assert [restored.get(k.tobytes()) for k in keys] == list(range(len(keys)))
    m.release_frozen()


def test_frozen_table_of_a_map_restored_from_a_snapshot_table():
    m = compiled.IdMap()
    for _ in range(700):
        m.add(os.urandom(16))
    r = compiled.IdMap.from_arrays(m.keys_array(), m.table_array())  # (borrowed table)
    assert np.array_equal(r.frozen_table()(), m.table_array())
    r.release_frozen()


def test_the_twin_frozen_table_is_its_table_array():
    m = twin.IdMap()
    m.add(os.urandom(16))
    assert np.array_equal(m.frozen_table()(), m.table_array())

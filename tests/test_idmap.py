"""IdMap (16-byte id -> int): the compiled table against its dict twin."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem._core import idmap as compiled
from convmem._core import pyidmap as twin

MODULES = [compiled, twin]


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
def test_set_get_overwrite_and_grow(mod):
    m = mod.IdMap(4)
    keys = [os.urandom(16) for _ in range(5000)]
    for i, k in enumerate(keys):
        m[k] = i
    assert len(m) == 5000
    assert all(m.get(k) == i for i, k in enumerate(keys))
    m[keys[10]] = 99
    assert m[keys[10]] == 99 and len(m) == 5000
    missing = os.urandom(16)
    assert m.get(missing) is None and missing not in m and keys[0] in m
    with pytest.raises(KeyError):
        m[missing]


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
def test_rejects_wrong_sizes(mod):
    m = mod.IdMap()
    with pytest.raises(ValueError):
        m.get(b"short")
    with pytest.raises(ValueError):
        m[b"x" * 17] = 1
    with pytest.raises(ValueError):
        m[b"x" * 16] = -1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=16, max_size=16), max_size=300))
def test_from_column_matches_twin(ids):
    arr = np.frombuffer(b"".join(ids), dtype=np.uint8).reshape(-1, 16)
    a, b = compiled.IdMap.from_column(arr), twin.IdMap.from_column(arr)
    assert len(a) == len(b) == len(set(ids))
    for k in ids:
        assert a.get(k) == b.get(k)  # the last row of a repeated id wins in both


def test_nbytes_counts_capacity():
    m = compiled.IdMap(1000)
    before = m.nbytes
    for _ in range(5000):
        m[os.urandom(16)] = 1
    assert m.nbytes > before and m.nbytes >= 5000 * 2 * 24


def test_table_round_trip():
    m = compiled.IdMap()
    keys = [os.urandom(16) for _ in range(3000)]
    for i, k in enumerate(keys):
        m[k] = i
    table = m.to_array()
    table.flags.writeable = False  # as a snapshot's read-only view
    r = compiled.IdMap.from_array(table)
    assert len(r) == 3000 and all(r.get(k) == i for i, k in enumerate(keys))
    r[os.urandom(16)] = 7  # the restored map stays writable
    assert len(r) == 3001 and len(m) == 3000
    with pytest.raises(ValueError):
        compiled.IdMap.from_array(np.zeros((10, 3), dtype=np.uint64))

"""IdMap: the message ids in creation order ("slots") and a hash table from id to slot.

The ids are stored once, 16 bytes each in slot order, and the table holds only 4-byte slot
numbers (it compares against the stored ids). A dict of a million 16-byte keys costs ~100 bytes
an entry and seconds to rebuild at open; this costs 16 + 8 to 16 bytes an id and is restored from
a snapshot by two copies.
"""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from convmem._core.shared cimport garr_borrow, release_shared, room_base, share_garr
from convmem._core._common cimport (GArr, garr_bytes, garr_free, garr_init, garr_reserve,
                                    load_u64_be, mix64)

import functools

import numpy as np


cdef inline uint64_t _hash(const uint8_t* key) noexcept nogil:
    # Fold both halves and finalise (mix64): ids whose random part is not random still spread.
    return mix64(load_u64_be(key) ^ (load_u64_be(key + 8) * 0x9E3779B97F4A7C15ULL))


cdef inline uint8_t* _key(const GArr* keys, Py_ssize_t slot) noexcept nogil:
    return <uint8_t*>keys.data + 16 * slot


cdef inline void _put(int32_t* table, Py_ssize_t mask, const uint8_t* key,
                      Py_ssize_t slot) noexcept nogil:
    cdef Py_ssize_t i = <Py_ssize_t>(_hash(key) & <uint64_t>mask)
    while table[i] >= 0:
        i = (i + 1) & mask
    table[i] = <int32_t>slot


cdef void _fill(int32_t* table, Py_ssize_t capacity, const uint8_t* keys,
                Py_ssize_t n) noexcept nogil:
    """The table of `capacity` for the n ids at `keys`, placed in slot order: how every table
    of an IdMap comes to be (a growth or a restore places them all again, an add the next)."""
    cdef Py_ssize_t s
    memset(table, 0xFF, capacity * sizeof(int32_t))
    for s in range(n):
        _put(table, capacity - 1, keys + 16 * s, s)


def _table_of(const uint8_t[:, ::1] keys not None, Py_ssize_t capacity):
    """The table of an IdMap of `capacity` that holds `keys` (slot order): IdMap.frozen_table."""
    cdef Py_ssize_t n = keys.shape[0]
    if capacity < 2 * n or capacity < 16 or (capacity & (capacity - 1)) != 0:
        raise ValueError("capacity must be a power of two, at least twice the ids")
    out = np.empty(capacity, dtype=np.int32)
    cdef int32_t[::1] t = out
    cdef const uint8_t* k = &keys[0, 0] if n else NULL
    with nogil:  # (a background snapshot's thread: the GIL is not held for it)
        _fill(&t[0], capacity, k, n)
    return out


cdef class IdMap:
    def __cinit__(self, Py_ssize_t capacity=1024):
        cdef Py_ssize_t cap = 16
        while cap < capacity * 2:
            cap <<= 1
        # Keys: 16-byte elements, growth 1/4 (a long-lived column that is also appended to).
        garr_init(&self.keys, 16, 2)
        garr_reserve(&self.keys, max(16, capacity))
        self.table = <int32_t*>PyMem_Malloc(cap * sizeof(int32_t))
        if self.table == NULL:
            raise MemoryError()
        memset(self.table, 0xFF, cap * sizeof(int32_t))
        self.capacity = cap
        self.table_owned = True
        self.table_mapped = False
        self.n = 0
        self._shared = []

    def __dealloc__(self):
        if self.table_owned:
            PyMem_Free(self.table)
        garr_free(&self.keys)

    cdef int _own_table(self) except -1:
        """Copy a borrowed table (a snapshot's read-only view) before the first change."""
        cdef int32_t* table
        if self.table_owned or self.table_mapped:
            return 0
        table = <int32_t*>PyMem_Malloc(self.capacity * sizeof(int32_t))
        if table == NULL:
            raise MemoryError()
        memcpy(table, self.table, self.capacity * sizeof(int32_t))
        self.table = table
        self.table_owned = True
        return 0

    def __len__(self):
        return self.n

    cdef Py_ssize_t _find(self, const uint8_t* key) noexcept nogil:
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_hash(key) & <uint64_t>mask)
        cdef int32_t slot
        while True:
            slot = self.table[i]
            if slot < 0:
                return -1
            if memcmp(_key(&self.keys, slot), key, 16) == 0:
                return slot
            i = (i + 1) & mask

    cdef void _place(self, Py_ssize_t slot) noexcept nogil:
        _put(self.table, self.capacity - 1, _key(&self.keys, slot), slot)

    cdef int _grow_table(self) except -1:
        cdef Py_ssize_t cap = self.capacity * 2
        cdef int32_t* table = <int32_t*>PyMem_Malloc(cap * sizeof(int32_t))
        if table == NULL:
            raise MemoryError()
        _fill(table, cap, <const uint8_t*>self.keys.data, self.n)
        if self.table_owned:
            PyMem_Free(self.table)
        self.table = table
        self.table_owned = True
        self.table_mapped = False
        self.capacity = cap
        return 0

    def get(self, const uint8_t[::1] key not None, default=None):
        """The slot of `key`, or `default`."""
        if key.shape[0] != 16:
            raise ValueError("an id is 16 bytes")
        cdef Py_ssize_t slot = self._find(&key[0])
        return default if slot < 0 else slot

    def __contains__(self, key):
        return self.get(key) is not None

    def __getitem__(self, key):
        slot = self.get(key)
        if slot is None:
            raise KeyError("id not present")
        return slot

    def add(self, const uint8_t[::1] key not None) -> int:
        """Append a new id as the next slot; returns the slot. The id must not be present."""
        if key.shape[0] != 16:
            raise ValueError("an id is 16 bytes")
        if self._find(&key[0]) >= 0:
            raise ValueError("id already present")
        if self.n >= 0x7FFFFFFF:
            raise OverflowError("too many ids")
        garr_reserve(&self.keys, self.n + 1)
        if (self.n + 1) * 2 > self.capacity:
            self._grow_table()
        self._own_table()
        memcpy(_key(&self.keys, self.n), &key[0], 16)
        self.n += 1
        self.keys.len = self.n
        self._place(self.n - 1)
        return self.n - 1

    def key(self, Py_ssize_t slot) -> bytes:
        """The id of `slot`."""
        if slot < 0 or slot >= self.n:
            raise IndexError("slot out of range")
        return (<char*>_key(&self.keys, slot))[:16]

    def keys_array(self, bint share=False):
        """The ids in slot order, as an (n, 16) uint8 array: a copy, or with `share` a read-only
        view of their memory for a background snapshot (shared.pyx: ids only grow; until
        release_frozen, growing copies them instead of reallocating)."""
        if share:
            return share_garr(&self.keys, np.uint8, (self.n, 16), self._shared, self)
        out = np.empty((self.n, 16), dtype=np.uint8)
        cdef uint8_t[:, ::1] view = out
        if self.n:
            memcpy(&view[0, 0], self.keys.data, self.n * 16)
        return out

    def release_frozen(self) -> None:
        """The ids a keys_array(share=True) handed out are no longer viewed (shared.pyx)."""
        release_shared(self._shared)

    def frozen_table(self):
        """A function that returns, on any thread and while ids go on being added, what
        table_array() returns now. It places the ids of now (a shared keys_array view) in slot
        order into an empty table of this capacity, which is how the live table came to be
        (adds place slots in order; a growth places them all again in order), without the GIL:
        a background snapshot then copies no table under the store's lock."""
        return functools.partial(_table_of, self.keys_array(share=True), self.capacity)

    def table_array(self):
        """A copy of the hash table (int32), for snapshots."""
        out = np.empty(self.capacity, dtype=np.int32)
        cdef int32_t[::1] view = out
        memcpy(&view[0], self.table, self.capacity * sizeof(int32_t))
        return out

    @classmethod
    def from_arrays(cls, keys not None, table=None):
        """Restore from `keys_array()` (and `table_array()`, else the table is rebuilt). Given
        both, they are used in place (a snapshot's read-only views; checked: every table entry
        names a slot or is empty) and copied on the first add; writable views with room past
        them (growable sections, store/snapshot.py) are added to in place instead."""
        cdef const uint8_t[:, ::1] kv = keys
        cdef Py_ssize_t n = kv.shape[0], s, cap
        cdef const int32_t[::1] t
        cdef uint32_t bad = 0
        if n and kv.shape[1] != 16:
            raise ValueError("ids must be an (n, 16) array")
        cdef IdMap m
        if table is not None:
            t = table
            cap = t.shape[0]
            if cap < 16 or (cap & (cap - 1)) != 0 or cap < 2 * n:
                raise ValueError("not an IdMap table")
            # Every entry is -1 or a slot: t + 1 <= n as unsigned. No early exit, so that the
            # loop vectorises (a 1M-id table is 8 MB, checked at every open).
            with nogil:
                for s in range(cap):
                    bad |= <uint32_t>(<uint32_t>(t[s] + 1) > <uint32_t>n)
            if bad:
                raise ValueError("IdMap table names a slot that does not exist")
            m = cls(16)
            garr_free(&m.keys)
            kept = []
            if n:
                garr_borrow(&m.keys, np.asarray(keys), kept)  # (an (n, 16) uint8 array)
            PyMem_Free(m.table)
            m.table = <int32_t*>&t[0]
            m.table_owned = False
            m.table_mapped = room_base(table) is not None
            m.capacity = cap
            m.n = n
            m._keep = (kv, t, kept)
            return m
        m = cls(max(16, n))
        if n:
            memcpy(m.keys.data, &kv[0, 0], n * 16)
        m.n = n
        m.keys.len = n
        while m.capacity < 2 * n:
            m.capacity *= 2
        PyMem_Free(m.table)
        m.table = <int32_t*>PyMem_Malloc(m.capacity * sizeof(int32_t))
        if m.table == NULL:
            raise MemoryError()
        with nogil:
            _fill(m.table, m.capacity, <const uint8_t*>m.keys.data, n)
        return m

    @property
    def nbytes(self):
        return self.capacity * sizeof(int32_t) + garr_bytes(&self.keys)  # (borrowed: mapped bytes)


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

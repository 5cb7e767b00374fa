# cython: language_level=3
"""IdMap: 16-byte message id -> int, an open-addressing table (no Python object per entry).

A dict of 1M bytes keys costs ~100 bytes an entry and seconds to rebuild at open; this table
costs 24 bytes a slot at load factor <= 0.5 and is rebuilt from the id column in milliseconds.
"""
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint64_t, int64_t, uint8_t
from libc.string cimport memcpy

import numpy as np


cdef inline uint64_t _load_be(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


cdef inline uint64_t _mix(uint64_t hi, uint64_t lo) noexcept nogil:
    # The random part of a ULID is already uniform; fold both halves and finalise anyway so
    # that ids made with a non-random low half still spread.
    cdef uint64_t z = hi ^ (lo * 0x9E3779B97F4A7C15ULL)
    z ^= z >> 30
    z *= 0xbf58476d1ce4e5b9ULL
    z ^= z >> 27
    z *= 0x94d049bb133111ebULL
    z ^= z >> 31
    return z


cdef class IdMap:
    def __cinit__(self, Py_ssize_t capacity=1024):
        cdef Py_ssize_t cap = 16
        while cap < capacity * 2:
            cap <<= 1
        self.table = <IdSlot*>PyMem_Calloc(cap, sizeof(IdSlot))
        if self.table == NULL:
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(cap):
            self.table[i].value = -1
        self.capacity = cap
        self.count = 0

    def __dealloc__(self):
        PyMem_Free(self.table)

    def __len__(self):
        return self.count

    cdef int64_t _find(self, uint64_t hi, uint64_t lo) noexcept nogil:
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_mix(hi, lo) & <uint64_t>mask)
        while self.table[i].value >= 0:
            if self.table[i].hi == hi and self.table[i].lo == lo:
                return self.table[i].value
            i = (i + 1) & mask
        return -1

    cdef int _grow(self) except -1:
        cdef IdSlot* old = self.table
        cdef Py_ssize_t old_cap = self.capacity, i, j, mask
        cdef Py_ssize_t cap = old_cap * 2
        cdef IdSlot* table = <IdSlot*>PyMem_Calloc(cap, sizeof(IdSlot))
        if table == NULL:
            raise MemoryError()
        for i in range(cap):
            table[i].value = -1
        mask = cap - 1
        for i in range(old_cap):
            if old[i].value >= 0:
                j = <Py_ssize_t>(_mix(old[i].hi, old[i].lo) & <uint64_t>mask)
                while table[j].value >= 0:
                    j = (j + 1) & mask
                table[j] = old[i]
        self.table = table
        self.capacity = cap
        PyMem_Free(old)
        return 0

    def get(self, const uint8_t[::1] key not None, default=None):
        if key.shape[0] != 16:
            raise ValueError("an id is 16 bytes")
        cdef int64_t v = self._find(_load_be(&key[0]), _load_be(&key[8]))
        return default if v < 0 else v

    def __contains__(self, key):
        return self.get(key) is not None

    def __getitem__(self, key):
        v = self.get(key)
        if v is None:
            raise KeyError("id not present")
        return v

    def __setitem__(self, const uint8_t[::1] key not None, int64_t value):
        if key.shape[0] != 16 or value < 0:
            raise ValueError("an id is 16 bytes and its value is >= 0")
        cdef uint64_t hi = _load_be(&key[0]), lo = _load_be(&key[8])
        cdef Py_ssize_t mask, i
        if (self.count + 1) * 2 > self.capacity:
            self._grow()
        mask = self.capacity - 1
        i = <Py_ssize_t>(_mix(hi, lo) & <uint64_t>mask)
        while self.table[i].value >= 0:
            if self.table[i].hi == hi and self.table[i].lo == lo:
                self.table[i].value = value
                return
            i = (i + 1) & mask
        self.table[i].hi = hi
        self.table[i].lo = lo
        self.table[i].value = value
        self.count += 1

    @classmethod
    def from_column(cls, const uint8_t[:, ::1] ids not None):
        """Map row i of an (n, 16) uint8 array to i."""
        cdef Py_ssize_t n = ids.shape[0], r, i, mask
        cdef IdMap m = cls(max(1024, n))
        cdef uint64_t hi, lo
        if ids.shape[1] != 16 and n:
            raise ValueError("ids must be an (n, 16) array")
        mask = m.capacity - 1
        with nogil:
            for r in range(n):
                hi = _load_be(&ids[r, 0])
                lo = _load_be(&ids[r, 8])
                i = <Py_ssize_t>(_mix(hi, lo) & <uint64_t>mask)
                while m.table[i].value >= 0 and not (m.table[i].hi == hi and m.table[i].lo == lo):
                    i = (i + 1) & mask
                if m.table[i].value < 0:
                    m.count += 1
                m.table[i].hi = hi
                m.table[i].lo = lo
                m.table[i].value = r
        return m

    def to_array(self):
        """The table itself as an (capacity, 3) uint64 array (hi, lo, value), for snapshots."""
        out = np.empty((self.capacity, 3), dtype=np.uint64)
        cdef uint64_t[:, ::1] view = out
        if self.capacity:
            memcpy(&view[0, 0], self.table, self.capacity * sizeof(IdSlot))
        return out

    @classmethod
    def from_array(cls, const uint64_t[:, ::1] table not None):
        """Restore a table saved by to_array (copied: the map must stay writable)."""
        cdef Py_ssize_t cap = table.shape[0], i, count = 0
        if table.shape[1] != 3 or cap < 16 or (cap & (cap - 1)) != 0:
            raise ValueError("not an IdMap table")
        cdef IdMap m = cls(cap // 2)
        if m.capacity != cap:
            raise ValueError("not an IdMap table")
        memcpy(m.table, &table[0, 0], cap * sizeof(IdSlot))
        for i in range(cap):
            if m.table[i].value >= 0:
                count += 1
        m.count = count
        return m

    @property
    def nbytes(self):
        return self.capacity * sizeof(IdSlot)

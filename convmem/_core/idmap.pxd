from libc.stdint cimport uint8_t, uint64_t, int32_t

from convmem._core._common cimport GArr

cdef class IdMap:
    cdef GArr keys             # n x 16 bytes: the id of slot i at keys.data[16 * i]
    cdef Py_ssize_t n
    cdef int32_t* table        # open addressing: a slot number, or -1 for empty
    cdef Py_ssize_t capacity   # a power of two, at least 2 * n
    cdef bint table_owned      # False: a borrowed read-only table (copied before a change)
    cdef bint table_mapped     # (not owned) a private mapping's: changed in place, never freed
    cdef object _keep          # what borrowed memory belongs to (the snapshot's views)
    cdef list _shared          # the keys' memory while a frozen snapshot views it (shared.pyx)
    cdef int _own_table(self) except -1
    cdef int _grow_table(self) except -1
    cdef Py_ssize_t _find(self, const uint8_t* key) noexcept nogil
    cdef void _place(self, Py_ssize_t slot) noexcept nogil

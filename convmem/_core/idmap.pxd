from libc.stdint cimport uint64_t, int64_t

cdef struct IdSlot:
    uint64_t hi
    uint64_t lo
    int64_t value     # -1: empty

cdef class IdMap:
    cdef IdSlot* table
    cdef Py_ssize_t capacity   # a power of two
    cdef Py_ssize_t count
    cdef int _grow(self) except -1
    cdef int64_t _find(self, uint64_t hi, uint64_t lo) noexcept nogil

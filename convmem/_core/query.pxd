# What a query's keys stand for beyond themselves (query.pyx).
from libc.stdint cimport int64_t, uint32_t, uint64_t

cdef int64_t _scan_bigrams(const uint64_t* keys, int64_t pos, int64_t n, uint32_t c, uint32_t* out,
                           int64_t cap, int64_t* added) noexcept nogil

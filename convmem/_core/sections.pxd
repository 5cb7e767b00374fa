# The index's snapshot sections beside its posting lists (sections.pyx).
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from convmem._core.postings cimport _Segment

cdef enum:
    CP_MASK = 0x1FFFFF    # a code point in a CJK key (21 bits)

cdef dict _doc_code_sections(const uint32_t* ln, const uint32_t* tag_off, const uint64_t* tag_val,
                         int64_t n)
cdef void _code_lengths(const uint32_t* ln, int64_t lo, int64_t hi, uint8_t* q1,
                        uint8_t* q2) noexcept nogil
cdef void _code_tag_buckets(const uint32_t* tag_off, const uint64_t* tag_val, int64_t lo,
                            int64_t hi, uint8_t* out) noexcept nogil
cdef int _put_block_maxima(dict out, _Segment seg) except -1
cdef int _put_char_lists(dict out, object cx) except -1
cdef object _cx_chars(object arrays)
cdef _Segment _cx_segment(object arrays, uint32_t n)
cdef object _arr(object arrays, str name, object dtype, object shape)
cdef int _check_offsets(object off, int64_t total, str name) except -1


cdef class _FrozenIndex:
    cdef dict base          # the doc columns and term arrays copied (or shared) at the freeze
    cdef list segs          # the segments then (immutable)
    cdef double c0[3]       # the length normalisation then (SearchIndex._norm)
    cdef double cb[3]
    cdef bint need_merge
    cdef object cx          # the character lists of the one segment, when already built
    cdef int64_t cx_min     # IX_CX_MIN: a character's own lists from this many postings
    cdef int64_t table_len  # the term table's capacity then (arrays() builds the table)

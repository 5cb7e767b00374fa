# C-level contract of convmem._core.index: term dictionary, postings segments, BM25F scoring.
# Scoring: docs/SCORING.md. Structures: the docstring of index.pyx.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef enum:
    IX_ARRAYS_FORMAT = 3
    IX_BLOCK = 128          # postings per compressed block (docs/SCORING.md, index.pyx docstring)
    IX_TF_CAP = 255
    IX_ULID = 16
    IX_LIVE = 0x80          # doc_meta bit: the doc is live; bits 0-2 kind, bits 3-4 tier
    IX_TABLE_MIN = 1024     # smallest term hash table (slots)
    IX_BUF_DOCS = 2048      # the in-memory buffer becomes a segment at this many docs ...
    IX_BUF_POSTINGS = 1 << 18   # ... or this many postings
    IX_WINDOW = 4096        # largest scoring window (doc ids)
    IX_PAR_MIN = 30000      # queries touching this many postings are scored by two threads


# A growable array owned through PyMem_*, or borrowed from a numpy array (copy-on-write): `owned`
# is false while `data` points into memory someone else holds (e.g. an mmap'd snapshot).
cdef struct GArr:
    char* data
    int64_t len        # elements in use
    int64_t cap        # elements allocated (or borrowed)
    int64_t itemsize
    bint owned


# The postings of one field in one segment: terms[i] has the compressed list
# data[offsets[i]:offsets[i+1]] (format: index.pyx docstring). Memory is held by numpy arrays.
cdef struct FieldPostings:
    const uint32_t* terms
    const uint32_t* offsets
    const uint8_t* data
    int64_t n_terms
    int64_t n_bytes
    # Block maxima, computed when the segment is made (not stored): for the lists of more than
    # one block, bm_terms (ascending) holds their term index, bm_off the start of their blocks in
    # bm; per block, bm = the max over its postings of tf / ((1 - b) + bm_cb * len), rounded
    # up to float32, with bm_cb = b / avgdl of the index when the segment was made. With the
    # statistics of a later query, x = w * tf / ((1 - b) + cb * len) <= w * bm * max(1, bm_cb / cb).
    const uint32_t* bm_terms
    const uint32_t* bm_off
    const float* bm
    double bm_cb
    int64_t n_bm


# A segment covers docs [doc_lo, doc_hi), the three fields together.
cdef struct SegView:
    uint32_t doc_lo
    uint32_t doc_hi
    int64_t n_dead
    FieldPostings f[3]


# One compressed posting list (one term, one segment, one field), opened for reading:
# blocks of IX_BLOCK postings; `skip` (NULL when there is one block) holds per block the last
# doc id and the payload offset of the block.
cdef struct PList:
    const uint8_t* skip
    const uint8_t* payload
    const uint8_t* end      # end of the field's data: the fast decoder reads 8 bytes at a time
    const float* bm         # per block bound of tf / norm (FieldPostings), NULL: not known
    double bmf              # the factor that makes bm a bound of x_f now: w * max(1, bm_cb / cb)
    int64_t n
    int64_t nb
    uint32_t first
    int32_t seg
    int32_t field


# A growable byte/word buffer for nogil code (PyMem_Raw*: no GIL needed, traced by tracemalloc).
cdef struct RawBuf:
    char* p
    int64_t len
    int64_t cap


# One query group (docs/SCORING.md): its term ids are gterms[key_lo:key_hi], its segment lists
# plists[list_lo:list_hi].
cdef struct Group:
    uint64_t key
    double idf
    int64_t df
    int64_t key_lo
    int64_t key_hi
    int64_t list_lo
    int64_t list_hi
    int64_t n_postings


# A top-k heap entry: `i` is the slot of its breakdown (index.pyx: Eng.hbd).
cdef struct HeapItem:
    double s
    uint32_t d
    uint32_t i


# Everything the nogil scoring loops read: statistics, doc columns, filters, scratch.
cdef struct Query:
    double k1
    double w[3]
    double b[3]
    double avgdl[3]
    double c0[3]            # 1 - b and b / avgdl, for the approximate scores of the pruning
    double cb[3]
    int64_t n_live
    # doc columns
    const uint8_t* meta
    const uint8_t* imp
    const int32_t* sess
    const int64_t* ts
    const uint8_t* ulid
    const uint32_t* lens
    const uint32_t* tag_off
    const uint64_t* tag_val
    # filters
    uint8_t okmeta[256]
    bint extra              # session, importance or tag filters are active
    int64_t session
    int32_t min_imp
    const uint64_t* tags
    int64_t n_tags
    # buffer chains
    const uint32_t* b_doc
    const uint8_t* b_tf
    const uint8_t* b_field
    const int32_t* b_next
    const int32_t* head
    uint32_t buf_lo
    const SegView* views
    int64_t n_views
    int64_t n_docs
    const uint8_t* qlen     # one-byte content lengths, rounded down (index.pyx: _qlen_code)
    const uint8_t* qlen2    # the same for summary and tags, 2 a doc (apart: content is hot)
    double qnorm[768]       # per field, the norm (1 - b) + b * len / avgdl of each one-byte length
    # scratch
    uint64_t* gbits         # one bit per doc, all zero between uses (df of multi-key groups)


cdef class _Segment:
    cdef SegView v
    cdef list arrays        # numpy arrays that hold the memory, 3 per field
    cdef list bm_arrays     # numpy arrays of the block maxima, 3 per field


cdef class SearchIndex:
    cdef double _k1
    cdef double _w[3]
    cdef double _b[3]
    cdef int64_t _n_docs
    cdef int64_t _n_live
    cdef int64_t _sum_len[3]
    # term dictionary
    cdef GArr _t_keys       # uint64 by term id
    cdef GArr _t_df         # uint32 live docs per term (any field)
    cdef GArr _t_table      # uint32 slots: term id + 1, 0 = empty
    cdef GArr _t_head       # int32 first buffer posting of the term, -1 = none (lazy)
    # doc columns
    cdef GArr _meta, _imp, _sess, _ts, _ulid, _lens
    cdef GArr _tag_off, _tag_val
    # segments (list of _Segment, doc ranges ascending) and their views for nogil code
    cdef list _segs
    cdef SegView* _views
    cdef int64_t _n_views
    # buffer of new docs
    cdef GArr _b_doc, _b_tf, _b_field, _b_next, _b_terms, _b_tid
    cdef uint32_t _buf_lo
    cdef int64_t _buf_dead
    # per-add scratch and per-query scratch
    cdef GArr _a_keys, _a_tids
    cdef GArr _s_gbits
    cdef GArr _qlen         # uint8 a doc: content length code, filled up to n_docs at search
    cdef GArr _qlen2        # 2 uint8 a doc: summary and tags length codes
    cdef GArr _q_groups, _q_terms, _q_lists
    cdef list _scr          # one _Scratch per scoring thread
    cdef void* _worker      # the second scoring thread (index.pyx: cvm_worker), NULL until needed
    cdef list _keep         # arrays whose memory is borrowed (from_arrays)
    cdef object _lock       # RLock held by every public method that touches the index
    cdef readonly int64_t window        # doc ids per scoring window (a multiple of 64)
    cdef readonly bint last_pruned      # whether the last search used the pruned scorer
    cdef readonly bint last_parallel    # whether the last search used two threads
    cdef readonly bint last_session_docs    # whether it scored only the session's docs
    # What the pruning skipped in the last search (0 after an exhaustive one): windows not
    # decoded at all, blocks of essential lists passed over on their block maxima, and docs
    # reached by the essential lists but cut by the bounds before their exact score.
    cdef readonly int64_t last_windows_skipped
    cdef readonly int64_t last_blocks_skipped
    cdef readonly int64_t last_docs_skipped

    cdef int64_t _term_find(self, uint64_t key) noexcept nogil
    cdef int64_t _term_add(self, uint64_t key) except -1
    cdef int _table_rebuild(self, int64_t cap) except -1
    cdef int _add_field(self, uint32_t doc, int f, const uint64_t* keys, int64_t n) except -1
    cdef int64_t _doc_terms(self, int64_t doc) except -1
    cdef int _flush(self) except -1
    cdef void _norm(self, double* c0, double* cb) noexcept
    cdef int _set_segments(self, list segs) except -1
    cdef int _maybe_merge(self) except -1
    cdef int _grow_scratch(self) except -1
    cdef int _prepare(self, Query* q) except -1
    cdef int64_t _make_groups(self, Query* q, const uint64_t* qk, int64_t nqk) except -1


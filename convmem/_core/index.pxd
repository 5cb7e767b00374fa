# C-level contract of convmem._core.index: SearchIndex (term dictionary, doc columns, buffer,
# merge policy, query planning, snapshot arrays). Scoring: docs/SCORING.md and score.pxd; the
# postings format and segments: postings.pxd.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from convmem._core._common cimport GArr, cm_worker
from convmem._core.postings cimport DocCols, FieldPostings, SegView
from convmem._core.score cimport Group, Query


cdef enum:
    IX_ARRAYS_FORMAT = 5     # 4: doc_meta holds the role (bits 5-6); 5: content lead flags
    IX_TABLE_MIN = 1024     # smallest term hash table (slots)
    IX_BUF_DOCS = 2048      # the in-memory buffer becomes a segment at this many docs ...
    IX_BUF_POSTINGS = 1 << 18   # ... or this many postings
    IX_MAX_ARRS = 32        # room in SearchIndex's table of GArr fields
    IX_CX_MIN = 8192        # a CJK character gets its own lists from this many group postings


# The parts of SearchIndex.nbytes() (indexes into its sums).
cdef enum:
    PART_POSTINGS = 0
    PART_TERMS = 1
    PART_DOCS = 2
    PART_SCRATCH = 3


cdef class SearchIndex:
    cdef double _k1
    cdef double _lead
    cdef bint _cjk_weights
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
    cdef GArr _tagb         # uint8 a doc: its tags' buckets (bit _tag_bucket(h)), filled up to
                            # n_docs at a search with tags
    cdef GArr _q_groups, _q_terms, _q_lists
    cdef list _scr          # one _Scratch per scoring thread
    cdef cm_worker* _worker     # the second scoring thread (_common.h), NULL until needed
    cdef list _keep         # arrays whose memory is borrowed (from_arrays)
    cdef list _shared       # (GArr address, _SharedBlock): columns a freeze() shares (_column)
    # Character lists (docs/SCORING.md "Storage"): for the CJK characters whose group is large,
    # one list per field of the group's postings in segment _cx_for (tf summed, capped), as a
    # segment whose terms are code points; used while _segs[0] is _cx_for. None: none.
    cdef object _cx
    cdef object _cx_for
    # every GArr above, with its part of nbytes() (PART_*): freed and counted from this table
    cdef GArr* _arrs[IX_MAX_ARRS]
    cdef uint8_t _arr_part[IX_MAX_ARRS]
    cdef int _n_arrs
    cdef object _lock       # RLock held by every public method that touches the index
    cdef readonly int64_t window        # doc ids per scoring window (a multiple of 64)
    cdef readonly bint last_pruned      # whether the last search used the pruned scorer
    # Queries averaging fewer postings than this per window of 4096 doc ids, or holding fewer
    # than prune_min_postings, are scored exhaustively: there the pruned scorer's fixed and
    # per-window costs are more than it skips.
    cdef readonly int64_t prune_density
    cdef readonly int64_t prune_min_postings
    # Pruned queries with at least this many postings are scored by two threads (IX_PAR_MIN).
    # How many segments a flush merges at once (2; a bulk import raises it: _maybe_merge).
    cdef public int64_t merge_factor
    cdef public int64_t parallel_min_postings  # (benchmarks set it: scorer_choice.py --par-min)
    # A pruned query scores the docs of its rarest groups first when they hold at most this many
    # postings (and 1/64 of the query's), so that its k-th score is known before the sweep
    # (IX_PRIME_MAX; 0: never).
    cdef public int64_t prime_max_postings  # (benchmarks set it: scorer_choice.py --set)
    # ... and the docs of largest x_f of the blocks of highest maximum of its long lists, this
    # many blocks a list (IX_IMPACT_BLOCKS; 0: never).
    cdef public int64_t impact_prime_blocks  # (scorer_choice.py --set)
    cdef public int64_t prime_docs_per_k     # (scorer_choice.py --set)
    cdef readonly int64_t last_primed       # docs the last search scored first these ways
    # A list whose blocks span this many doc ids on average is sparse: a window's bound looks at
    # its block's docs, not only the block's maximum (IX_SPARSE_SPAN; 0: never).
    cdef public int64_t sparse_block_span   # (benchmarks set it: scorer_choice.py --set)
    # bound a filtered query's blocks by the filter maxima (docs/SCORING.md "Filter maxima"); False:
    # by the block maxima alone, as a snapshot written before them is (tests; filter_cost.py,
    # scorer_choice.py --set). Results are the same.
    cdef public bint filter_maxima
    cdef readonly int64_t last_postings    # postings the last search's query lists hold
    cdef readonly bint last_parallel    # whether the last search used two threads
    cdef readonly bint last_session_docs    # whether it scored only the session's docs
    # What the pruning skipped in the last search (0 after an exhaustive one): windows not
    # decoded at all, blocks of essential lists passed over on their block maxima, and docs
    # reached by the essential lists but cut by the bounds before their exact score.
    cdef readonly int64_t last_windows_skipped
    cdef readonly int64_t last_blocks_skipped
    cdef readonly int64_t last_docs_skipped
    # Times a thread of the last search raised its k-th score to the k-th of both threads' heaps
    cdef readonly int64_t last_theta_shared
    # The statistics the last search scored with (search's `stats` argument takes them back):
    # (n_live, (content, summary, tags token totals), df of each distinct query key ascending).
    cdef readonly object last_stats

    cdef void _own(self, GArr* a, int64_t itemsize, int part) noexcept
    cdef int64_t _term_find(self, uint64_t key) noexcept nogil
    cdef int64_t _term_add(self, uint64_t key) noexcept nogil
    cdef int _table_rebuild(self, int64_t cap) noexcept nogil
    cdef int _add_field(self, uint32_t doc, int f, const uint64_t* keys, int64_t n) noexcept nogil
    cdef bint _buffer_full(self) noexcept nogil
    cdef int _add_core(self, const uint64_t* ck, int64_t nck, const uint64_t* sk, int64_t nsk,
                       const uint64_t* tk, int64_t ntk, const uint64_t* th, int64_t nth,
                       int64_t session, int kind, int tier, int importance, int64_t timestamp,
                       const char* ulid, int role) noexcept nogil
    cdef int64_t _doc_terms(self, int64_t doc) except -1
    cdef int _flush(self) except -1
    cdef void _norm(self, double* c0, double* cb) noexcept
    cdef int _set_segments(self, list segs) except -1
    cdef int _maybe_merge(self) except -1
    cdef int _grow_scratch(self) except -1
    cdef int _grow_tag_buckets(self) except -1
    cdef int _prepare(self, Query* q, int64_t n, const int64_t* sum_len) except -1
    # weights: the query's CJK bigram weights by key (query_weights), {} for none
    cdef int64_t _make_groups(self, Query* q, const uint64_t* qk, int64_t nqk,
                              const int64_t* fdf, int64_t nfdf, list out_df,
                              dict weights) except -1
    cdef int _add_list(self, Query* q, Group* g, const FieldPostings* fp, int64_t li, int s,
                       int f) except -1
    cdef int _build_cx(self) except -1
    cdef dict _doc_arrays(self, bint share=*)
    cdef object _column(self, GArr* a, object dtype, tuple shape, bint share)


# The index's doc columns the block maxima of its segments are taken from (index.pyx).
cdef DocCols _doc_cols(SearchIndex ix, bint filters=*) noexcept

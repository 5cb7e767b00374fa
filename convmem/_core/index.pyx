"""Compiled search index: term dictionary, postings segments, BM25F with filters, top-k.

Scoring is defined in docs/SCORING.md; `pyindex` is the readable twin and the test oracle.
The compiled index is three modules: this one (SearchIndex: the term dictionary, doc columns,
add/remove, the buffer and when it becomes a segment, merge policy, query planning, compaction and
snapshot arrays), postings (the list format and its inline readers in postings.pxd, list checks,
segments, merges) and score (kernels, heap, window pruning, the second thread, scratch), on the
shared helpers of _common.pxd / _common.h. SearchIndex calls into the other two once per query,
per segment build and per merge.

Structures (all memory through PyMem_Raw* or numpy, so tracemalloc sees it; `nbytes()` sums
capacities):

- Term dictionary: `_t_keys` (uint64 by term id, ids in order of first appearance: doc by doc,
  field by field, key by key), `_t_df` (live
  docs per term, any field), `_t_table` (open addressing, linear probing over `mix64(key)`, slots
  hold term id + 1; at most half full).
- Doc columns (growable arrays): meta byte (live bit, kind, tier), importance, session (int32),
  timestamp, ulid, three field lengths, tag hashes (CSR, uint32 offsets). There is no forward
  index: `remove` gets the doc's keys from the caller (or reads the doc's terms from its
  postings when it cannot) to keep `_t_df` exact.
- Postings: segments, each covering a contiguous range of doc ids, one CSR per field (sorted term
  ids, uint32 byte offsets, compressed lists: format at the top of postings.pxd) held in numpy
  arrays. New docs go to a buffer (per-term linked chains of postings) that becomes a segment at
  IX_BUF_DOCS docs or IX_BUF_POSTINGS postings; the newest segments merge while the older one is
  not larger (a binary counter: O(log N) segments, each posting re-encoded O(log N) times; a list
  that only one of the merged segments holds is copied as it is). Merges drop dead docs.
- Derived columns for the pruning bounds, filled at search time for the docs added since: one-byte
  field length codes (content apart from summary and tags), and a one-bit-per-doc map used to
  count the df of multi-key groups.
- Scoring scratch (`_Scratch`, one per scoring thread): window-sized arrays (4096 docs) and
  arrays sized by the query; nothing grows with the corpus. Top k: score.pyx and
  docs/SCORING.md.

The scoring and merge loops run without the GIL; every public method that reads or changes the
index holds the index's own lock, so threads may share an index (one operation at a time).
"""
cimport numpy as cnp
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc
from libc.math cimport log, sqrt
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport qsort
from libc.string cimport memcpy, memset

import threading

import numpy as np

from convmem._core.shared cimport garr_borrow, garr_to_numpy, release_shared, share_garr
from convmem._core._common cimport (CM_ASSERT, GArr, __builtin_prefetch, cm_worker_alive, cm_worker_free,
                                    cm_worker_new, garr_bytes, garr_extend, garr_free, garr_init,
                                    garr_claim, garr_grow, garr_own, garr_reserve, mix64,
                                    term_table_fill, term_table_put)
from convmem._core.postings import DamagedPostings
from convmem._core.postings cimport (IX_BLOCK, IX_BX, IX_LEAD, IX_LEAD_KEYS, IX_LIVE, IX_TF_CAP,
                                     IX_ULID, DocCols, FieldPostings, PList,
                                     SegView, _block, _chains_segment, _cmp_u32, _cmp_u64,
                                     _empty_field_arrays, _find_block, _handed_out, _lists_ok,
                                     _merge, _merge_newest,
                                     _nonempty, _open_list, _segment, _Segment, _adopted_segment,
                                     _char_segment, _list_ready, _seg_check_all,
                                     _sort_unique_u32, _spill, _adopt_data, lower_bound_u32)
from convmem._core.sections cimport (CP_MASK, _arr, _code_lengths, _check_offsets, _cx_chars,
                                     _code_tag_buckets, _cx_segment, _FrozenIndex,
                                     _put_block_maxima,
                                     _put_char_lists, _doc_code_sections)
from convmem._core.query cimport _scan_bigrams
from convmem._core.query import SEAM_WEIGHT, query_weights
from convmem._core.bm25f import check_config
from convmem._core.sections import FIELDS
from convmem._core.score cimport (IX_IMPACT_BLOCKS, IX_PAR_MIN, IX_PRIME_MAX, IX_PRIME_PER_K,
                                  IX_PRUNE_DENSITY, IX_PRUNE_MIN_POSTINGS, IX_SPARSE_SPAN,
                                  IX_WINDOW, Eng, Group, Query, _group_df, _qlen_value,
                                  _score, _set_ctab, _set_filters, _Scratch)

cnp.import_array()

ARRAYS_FORMAT = IX_ARRAYS_FORMAT


# The lead bonus: a group found in a doc's lead (its first IX_LEAD_KEYS content keys) adds this times its
# idf to the content part (docs/SCORING.md "Per-document parts").
LEAD_WEIGHT = 0.3
LEAD_KEYS = IX_LEAD_KEYS

PRUNE_MIN_POSTINGS = IX_PRUNE_MIN_POSTINGS


# ---- the index ---------------------------------------------------------------------------------

# What the nogil parts of adding return on failure (_raise_add_error says it in Python).
cdef enum:
    ADD_NOMEM = -1
    ADD_TERMS = -2
    ADD_BUFFER = -3
    ADD_TAGS = -4
    ADD_DOCS = -5


cdef int _raise_add_error(int rc) except -1:
    if rc == ADD_NOMEM:
        raise MemoryError()
    raise OverflowError({ADD_TERMS: "too many distinct terms", ADD_BUFFER: "buffer too large",
                         ADD_TAGS: "too many tag hashes"}.get(rc, "too many docs"))


cdef int _check_doc(int64_t kind, int64_t tier, int64_t role, int64_t importance,
                    int64_t session) except -1:
    if not 0 <= kind <= 5 or not 0 <= tier <= 3 or not 0 <= role <= 2:
        raise ValueError("kind must be in 0..5, tier in 0..3 and role in 0..2")
    if not 0 <= importance <= 100 or not 0 <= session <= 0x7FFFFFFF:
        raise ValueError("importance must be in 0..100 and session in 0..2**31-1")
    return 0


cdef object _keys_array(object keys):
    if isinstance(keys, np.ndarray) and keys.dtype == np.uint64 and keys.ndim == 1 \
            and keys.flags.c_contiguous:
        return keys
    return np.ascontiguousarray(np.asarray(keys, dtype=np.uint64).reshape(-1))


cdef inline const uint64_t* _ptr(const uint64_t[::1] v) noexcept:
    return &v[0] if v.shape[0] > 0 else NULL


cdef class SearchIndex:
    """BM25F over (content, summary, tags) with filters and a deterministic top-k.

    See docs/SCORING.md for the exact definition; `pyindex.SearchIndex` is the readable twin.
    """

    ADD_BATCH_RELEASES_GIL = True  # (the catalog may index an import batch on another thread)

    def __cinit__(self):
        self._n_arrs = 0
        # Every GArr of the index, once: its item size and its part of nbytes(). __dealloc__
        # frees and nbytes() sums what this table lists, so a new array is one line here.
        self._own(&self._t_keys, 8, PART_TERMS)         # uint64 by term id
        self._own(&self._t_df, 4, PART_TERMS)           # uint32 live docs per term
        self._own(&self._t_table, 4, PART_TERMS)        # uint32 slots: term id + 1, 0 = empty
        self._own(&self._t_head, 4, PART_TERMS)         # int32 first buffer posting, -1 = none
        self._own(&self._meta, 1, PART_DOCS)
        self._own(&self._imp, 1, PART_DOCS)
        self._own(&self._sess, 4, PART_DOCS)
        self._own(&self._ts, 8, PART_DOCS)
        self._own(&self._ulid, IX_ULID, PART_DOCS)
        self._own(&self._lens, 12, PART_DOCS)
        self._own(&self._tag_off, 4, PART_DOCS)
        self._own(&self._tag_val, 8, PART_DOCS)
        self._own(&self._qlen, 1, PART_DOCS)
        self._own(&self._qlen2, 2, PART_DOCS)
        self._own(&self._tagb, 1, PART_DOCS)
        self._own(&self._b_doc, 4, PART_POSTINGS)
        self._own(&self._b_tf, 1, PART_POSTINGS)
        self._own(&self._b_field, 1, PART_POSTINGS)
        self._own(&self._b_next, 4, PART_POSTINGS)
        self._own(&self._b_terms, 4, PART_POSTINGS)
        self._own(&self._b_tid, 4, PART_POSTINGS)
        self._own(&self._a_keys, 8, PART_SCRATCH)
        self._own(&self._a_tids, 4, PART_SCRATCH)
        self._own(&self._s_gbits, 8, PART_SCRATCH)
        self._own(&self._q_groups, sizeof(Group), PART_SCRATCH)
        self._own(&self._q_terms, 4, PART_SCRATCH)
        self._own(&self._q_lists, sizeof(PList), PART_SCRATCH)
        self._scr = [_Scratch(), _Scratch()]
        self._worker = NULL
        self._segs = []
        self._keep = []
        self._shared = []
        self._cx = None
        self._cx_for = None
        self._views = NULL
        self._n_views = 0
        self.window = IX_WINDOW
        self.prune_density = IX_PRUNE_DENSITY
        self.prune_min_postings = IX_PRUNE_MIN_POSTINGS
        self.parallel_min_postings = IX_PAR_MIN
        self.prime_max_postings = IX_PRIME_MAX
        self.sparse_block_span = IX_SPARSE_SPAN
        self.impact_prime_blocks = IX_IMPACT_BLOCKS
        self.prime_docs_per_k = IX_PRIME_PER_K
        self.merge_factor = 2
        self._lock = threading.RLock()
        self.last_pruned = False
        self.last_postings = 0

    def __init__(self, k1: float = 1.2, weights=(1.0, 1.5, 2.0), b=(0.75, 0.75, 0.5)):
        k1, weights, b = check_config(k1, weights, b)
        self._k1 = k1
        self._lead = LEAD_WEIGHT
        self._cjk_weights = True
        self.filter_maxima = True
        for f in range(3):
            self._w[f] = weights[f]
            self._b[f] = b[f]
        if self._t_table.len == 0:
            if self._table_rebuild(IX_TABLE_MIN) < 0:
                raise MemoryError()
        garr_reserve(&self._tag_off, 1)
        (<uint32_t*>self._tag_off.data)[0] = 0
        self._tag_off.len = 1

    def __dealloc__(self):
        cdef int i
        for i in range(self._n_arrs):
            garr_free(self._arrs[i])
        cm_worker_free(self._worker)
        PyMem_RawFree(self._views)

    cdef void _own(self, GArr* a, int64_t itemsize, int part) noexcept:
        CM_ASSERT(self._n_arrs < IX_MAX_ARRS)
        garr_init(a, itemsize, 3)
        self._arrs[self._n_arrs] = a
        self._arr_part[self._n_arrs] = part
        self._n_arrs += 1

    @property
    def n_docs(self) -> int:
        return self._n_docs

    @property
    def n_live(self) -> int:
        return self._n_live

    # -- term dictionary ------------------------------------------------------------------------

    cdef int64_t _term_find(self, uint64_t key) noexcept nogil:
        cdef const uint32_t* table = <const uint32_t*>self._t_table.data
        cdef const uint64_t* keys = <const uint64_t*>self._t_keys.data
        cdef uint64_t mask = <uint64_t>self._t_table.len - 1
        cdef uint64_t slot = mix64(key) & mask
        cdef uint32_t v
        while True:
            v = table[slot]
            if v == 0:
                return -1
            if keys[v - 1] == key:
                return v - 1
            slot = (slot + 1) & mask

    cdef int _table_rebuild(self, int64_t cap) noexcept nogil:
        """Reinsert every term, in term-id order (so the layout depends only on the keys);
        ADD_NOMEM when memory runs out (the old table stays)."""
        cdef uint32_t* table = <uint32_t*>PyMem_RawMalloc(<size_t>(cap * 4))
        if table == NULL:
            return ADD_NOMEM
        term_table_fill(table, cap, <const uint64_t*>self._t_keys.data, self._t_keys.len)
        garr_free(&self._t_table)
        self._t_table.data = <char*>table
        self._t_table.len = cap
        self._t_table.cap = cap
        return 0

    cdef int64_t _term_add(self, uint64_t key) noexcept nogil:
        """The term id of `key`, added when new; a negative ADD_* code on failure."""
        cdef int64_t t = self._term_find(key), n = self._t_keys.len
        if t >= 0:
            return t
        if n >= <int64_t>0xFFFFFFFE:
            return ADD_TERMS
        if (garr_grow(&self._t_keys, n + 1) < 0 or garr_grow(&self._t_df, n + 1) < 0
                or garr_grow(&self._t_head, n + 1) < 0):
            return ADD_NOMEM
        (<uint64_t*>self._t_keys.data)[n] = key
        (<uint32_t*>self._t_df.data)[n] = 0
        (<int32_t*>self._t_head.data)[n] = -1
        self._t_keys.len = n + 1
        self._t_df.len = n + 1
        self._t_head.len = n + 1
        if 2 * (n + 1) > self._t_table.len:
            if self._table_rebuild(2 * self._t_table.len) < 0:
                return ADD_NOMEM
        else:
            if garr_claim(&self._t_table) < 0:
                return ADD_NOMEM
            term_table_put(<uint32_t*>self._t_table.data, <uint64_t>self._t_table.len - 1, key,
                           <uint32_t>n)
        return n

    # -- adding and removing --------------------------------------------------------------------

    def add(self, int64_t doc, content_keys, summary_keys, tag_keys, tag_hashes, int64_t session,
            int kind, int tier, int importance, int64_t timestamp, ulid, int role=0) -> None:
        """Add doc number `doc` (must be `n_docs`); keys are uint64 arrays (docs/DESIGN.md 1)."""
        with self._lock:
            self._add(doc, content_keys, summary_keys, tag_keys, tag_hashes, session, kind, tier,
                      importance, timestamp, ulid, role)

    def _add(self, int64_t doc, content_keys, summary_keys, tag_keys, tag_hashes,
             int64_t session, int kind, int tier, int importance, int64_t timestamp, ulid,
             int role):
        cdef const uint64_t[::1] ck = _keys_array(content_keys)
        cdef const uint64_t[::1] sk = _keys_array(summary_keys)
        cdef const uint64_t[::1] tk = _keys_array(tag_keys)
        cdef const uint64_t[::1] th = _keys_array(tag_hashes)
        cdef bytes ub = bytes(ulid)
        cdef int rc
        if doc != self._n_docs:
            raise ValueError(f"doc must be {self._n_docs} (the next doc id), got {doc}")
        _check_doc(kind, tier, role, importance, session)
        if len(ub) != IX_ULID:
            raise ValueError("ulid must be 16 bytes")
        rc = self._add_core(_ptr(ck), ck.shape[0], _ptr(sk), sk.shape[0], _ptr(tk), tk.shape[0],
                            _ptr(th), th.shape[0], session, kind, tier, importance, timestamp,
                            <const char*>ub, role)
        if rc < 0:
            _raise_add_error(rc)
        if self._buffer_full():
            self._flush()
            self._maybe_merge()

    def add_batch(self, int64_t doc0, list content_keys, list summary_keys, list tag_keys,
                  list tag_hashes, sessions, kinds, tiers, importances, timestamps,
                  bytes ulids, roles) -> None:
        """add() for docs doc0, doc0 + 1, ... (an import batch): list i of each key list and
        element i of each column is doc0 + i's; `ulids` holds the 16-byte ulids one after the
        other. The same index as one add() a doc. Everything is checked first, so a bad
        argument adds nothing; the postings are then buffered with the GIL released (the
        catalog goes on with its own work on another thread meanwhile), which only the
        buffer's flushes into segments take back."""
        with self._lock:
            self._add_batch(doc0, content_keys, summary_keys, tag_keys, tag_hashes, sessions,
                            kinds, tiers, importances, timestamps, ulids, roles)

    def _add_batch(self, int64_t doc0, list content_keys, list summary_keys, list tag_keys,
                   list tag_hashes, sessions, kinds, tiers, importances, timestamps,
                   bytes ulids, roles):
        cdef Py_ssize_t n = len(content_keys), i, j
        cdef list keep = []
        cdef const uint64_t[::1] a
        cdef const int64_t[::1] c_sess, c_ts
        cdef const int32_t[::1] c_kind, c_tier, c_imp, c_role
        cdef const uint64_t** ptrs
        cdef int64_t* lens
        cdef const char* ub = <const char*>ulids
        cdef int rc = 0
        cdef bint full = False
        if doc0 != self._n_docs:
            raise ValueError(f"doc must be {self._n_docs} (the next doc id), got {doc0}")
        if not (len(summary_keys) == len(tag_keys) == len(tag_hashes) == n
                and len(ulids) == IX_ULID * n):
            raise ValueError("add_batch: every list and column must have one entry a doc")
        c_sess = np.ascontiguousarray(sessions, dtype=np.int64)
        c_ts = np.ascontiguousarray(timestamps, dtype=np.int64)
        c_kind = np.ascontiguousarray(kinds, dtype=np.int32)
        c_tier = np.ascontiguousarray(tiers, dtype=np.int32)
        c_imp = np.ascontiguousarray(importances, dtype=np.int32)
        c_role = np.ascontiguousarray(roles, dtype=np.int32)
        if not (c_sess.shape[0] == c_ts.shape[0] == c_kind.shape[0] == c_tier.shape[0]
                == c_imp.shape[0] == c_role.shape[0] == n):
            raise ValueError("add_batch: every list and column must have one entry a doc")
        for i in range(n):
            _check_doc(c_kind[i], c_tier[i], c_role[i], c_imp[i], c_sess[i])
        ptrs = <const uint64_t**>PyMem_RawMalloc(<size_t>(4 * n * sizeof(uint64_t*) + 1))
        lens = <int64_t*>PyMem_RawMalloc(<size_t>(4 * n * sizeof(int64_t) + 1))
        try:
            if ptrs == NULL or lens == NULL:
                raise MemoryError()
            for j, part in enumerate((content_keys, summary_keys, tag_keys, tag_hashes)):
                for i in range(n):
                    a = _keys_array(part[i])
                    keep.append(a)                    # (alive while the GIL is released)
                    ptrs[4 * i + j] = _ptr(a)
                    lens[4 * i + j] = a.shape[0]
            i = 0
            while i < n:
                with nogil:
                    while i < n:
                        rc = self._add_core(ptrs[4 * i], lens[4 * i], ptrs[4 * i + 1],
                                            lens[4 * i + 1], ptrs[4 * i + 2], lens[4 * i + 2],
                                            ptrs[4 * i + 3], lens[4 * i + 3], c_sess[i],
                                            c_kind[i], c_tier[i], c_imp[i], c_ts[i],
                                            ub + IX_ULID * i, c_role[i])
                        if rc < 0:
                            break
                        i += 1
                        full = self._buffer_full()
                        if full:
                            break
                if rc < 0:
                    _raise_add_error(rc)
                if full:
                    self._flush()
                    self._maybe_merge()
                    full = False
        finally:
            PyMem_RawFree(ptrs)
            PyMem_RawFree(lens)

    cdef inline bint _buffer_full(self) noexcept nogil:
        return self._n_docs - self._buf_lo >= IX_BUF_DOCS or self._b_doc.len >= IX_BUF_POSTINGS

    cdef int _add_core(self, const uint64_t* ck, int64_t nck, const uint64_t* sk, int64_t nsk,
                       const uint64_t* tk, int64_t ntk, const uint64_t* th, int64_t nth,
                       int64_t session, int kind, int tier, int importance, int64_t timestamp,
                       const char* ulid, int role) noexcept nogil:
        """Doc n_docs with checked values (_check_doc): its columns, then its postings into
        the buffer; 0, or a negative ADD_* code (_raise_add_error)."""
        cdef int64_t n = self._n_docs, i, j, n0, nt
        cdef uint32_t* tids
        cdef uint32_t* df
        cdef int rc
        if n >= <int64_t>0xFFFFFFFE:
            return ADD_DOCS
        if self._t_head.len < self._t_keys.len:      # after from_arrays: the chains start empty
            if garr_grow(&self._t_head, self._t_keys.len) < 0:
                return ADD_NOMEM
            memset(self._t_head.data + 4 * self._t_head.len, 0xFF,
                   <size_t>(4 * (self._t_keys.len - self._t_head.len)))
            self._t_head.len = self._t_keys.len
        nt = self._tag_val.len
        if nt + nth > <int64_t>0xFFFFFFFF:
            return ADD_TAGS
        if (garr_grow(&self._meta, n + 1) < 0 or garr_grow(&self._imp, n + 1) < 0
                or garr_grow(&self._sess, n + 1) < 0 or garr_grow(&self._ts, n + 1) < 0
                or garr_grow(&self._ulid, n + 1) < 0 or garr_grow(&self._lens, n + 1) < 0
                or garr_grow(&self._tag_off, n + 2) < 0
                or garr_grow(&self._tag_val, nt + nth) < 0):
            return ADD_NOMEM
        (<uint8_t*>self._meta.data)[n] = IX_LIVE | kind | (tier << 3) | (role << 5)
        (<uint8_t*>self._imp.data)[n] = importance
        (<int32_t*>self._sess.data)[n] = <int32_t>session
        (<int64_t*>self._ts.data)[n] = timestamp
        memcpy(self._ulid.data + IX_ULID * n, ulid, IX_ULID)
        (<uint32_t*>self._lens.data)[3 * n] = <uint32_t>nck
        (<uint32_t*>self._lens.data)[3 * n + 1] = <uint32_t>nsk
        (<uint32_t*>self._lens.data)[3 * n + 2] = <uint32_t>ntk
        if nth > 0:
            memcpy(self._tag_val.data + 8 * nt, th, <size_t>(8 * nth))
        self._tag_val.len = nt + nth
        (<uint32_t*>self._tag_off.data)[n + 1] = <uint32_t>self._tag_val.len
        self._meta.len = self._imp.len = self._sess.len = self._ts.len = n + 1
        self._ulid.len = self._lens.len = n + 1
        self._tag_off.len = n + 2

        self._a_tids.len = 0
        rc = self._add_field(<uint32_t>n, 0, ck, nck)
        n0 = self._a_tids.len
        if rc == 0:
            rc = self._add_field(<uint32_t>n, 1, sk, nsk)
        if rc == 0:
            rc = self._add_field(<uint32_t>n, 2, tk, ntk)
        if rc == 0 and garr_claim(&self._t_df) < 0:
            rc = ADD_NOMEM
        if rc < 0:
            return rc

        # df counts the doc once per term: the content terms are unique, the few summary and
        # tag terms are looked up among the terms before them.
        tids = <uint32_t*>self._a_tids.data
        df = <uint32_t*>self._t_df.data
        for i in range(self._a_tids.len):
            if i >= n0:
                j = 0
                while j < i and tids[j] != tids[i]:
                    j += 1
                if j < i:
                    continue
            df[tids[i]] += 1

        self._sum_len[0] += nck
        self._sum_len[1] += nsk
        self._sum_len[2] += ntk
        self._n_docs = n + 1
        self._n_live += 1
        return 0

    cdef int _add_field(self, uint32_t doc, int f, const uint64_t* keys, int64_t n) noexcept nogil:
        """Buffer the postings of one field: count each distinct key in a small hash table (no
        sort: the order of a doc's terms does not matter), chain one posting per term.

        The dictionary probes of all the field's terms are prefetched first: at a million docs
        the table, the keys, df and the chain heads are each a cache miss a term, and the misses
        of different terms then overlap instead of following each other.
        """
        cdef uint64_t* sk
        cdef uint64_t* hk
        cdef int64_t i, m = 0, t, e, k, cap = 16, h
        cdef int32_t* head
        cdef const uint32_t* table
        cdef uint64_t mask, key
        cdef uint32_t v
        cdef uint8_t* hc
        cdef uint8_t* cnt
        cdef int64_t lead_used = 0, lead_cost
        cdef bint lead_open = f == 0
        if n == 0:
            return 0
        while cap < 2 * n:
            cap <<= 1
        # scratch: hash keys (cap), distinct keys (n), their counts (n bytes), hash counts (cap bytes)
        if garr_grow(&self._a_keys, cap + n + (n + cap) // 8 + 2) < 0:
            return ADD_NOMEM
        hk = <uint64_t*>self._a_keys.data
        sk = hk + cap
        cnt = <uint8_t*>(sk + n)
        hc = cnt + n
        memset(hc, 0, <size_t>cap)
        for i in range(n):
            key = keys[i]
            h = <int64_t>(mix64(key) & <uint64_t>(cap - 1))
            while hc[h] and hk[h] != key:
                h = (h + 1) & (cap - 1)
            if hc[h] == 0:
                hk[h] = key
                sk[m] = <uint64_t>h                   # the slot, for now
                m += 1
                hc[h] = 1
            elif (hc[h] & IX_TF_CAP) < IX_TF_CAP:
                hc[h] += 1
            if lead_open:                             # the tf byte's lead flag (docs/SCORING.md)
                lead_cost = 1 if key >> 62 == 2 else 4    # quarter keys: a CJK bigram is one
                if lead_used + lead_cost <= 4 * IX_LEAD_KEYS:
                    lead_used += lead_cost
                    hc[h] |= IX_LEAD
                else:
                    lead_open = False
        for i in range(m):
            h = <int64_t>sk[i]
            sk[i] = hk[h]
            cnt[i] = hc[h]
        table = <const uint32_t*>self._t_table.data
        mask = <uint64_t>self._t_table.len - 1
        for i in range(m):
            __builtin_prefetch(table + (mix64(sk[i]) & mask))
        for i in range(m):
            v = table[mix64(sk[i]) & mask]
            if v:
                __builtin_prefetch(<const uint64_t*>self._t_keys.data + v - 1)
                __builtin_prefetch(<const uint32_t*>self._t_df.data + v - 1)
                __builtin_prefetch(<const int32_t*>self._t_head.data + v - 1)
        e = self._b_doc.len
        if e + m >= 0x7FFFFFFF:
            return ADD_BUFFER
        if (garr_grow(&self._a_tids, self._a_tids.len + m) < 0 or garr_grow(&self._b_doc, e + m) < 0
                or garr_grow(&self._b_tf, e + m) < 0 or garr_grow(&self._b_field, e + m) < 0
                or garr_grow(&self._b_next, e + m) < 0 or garr_grow(&self._b_tid, e + m) < 0
                or garr_grow(&self._b_terms, self._b_terms.len + m) < 0):
            return ADD_NOMEM
        for k in range(m):
            t = self._term_add(sk[k])
            if t < 0:
                self._b_doc.len = self._b_tf.len = self._b_field.len = self._b_next.len = e
                self._b_tid.len = e
                return <int>t
            (<uint32_t*>self._a_tids.data)[self._a_tids.len] = <uint32_t>t
            self._a_tids.len += 1
            head = <int32_t*>self._t_head.data
            if head[t] < 0:
                (<uint32_t*>self._b_terms.data)[self._b_terms.len] = <uint32_t>t
                self._b_terms.len += 1
            (<uint32_t*>self._b_doc.data)[e] = doc
            (<uint8_t*>self._b_tf.data)[e] = cnt[k]
            (<uint8_t*>self._b_field.data)[e] = <uint8_t>f
            (<int32_t*>self._b_next.data)[e] = head[t]
            (<uint32_t*>self._b_tid.data)[e] = <uint32_t>t
            head[t] = <int32_t>e
            e += 1
        self._b_doc.len = self._b_tf.len = self._b_field.len = self._b_next.len = e
        self._b_tid.len = e
        return 0

    def remove(self, int64_t doc, content_keys=None, summary_keys=None, tag_keys=None) -> None:
        """Take doc out of results and statistics at once; removing a removed doc does nothing.

        Pass the three key arrays that `add` got for the doc: its terms' df then drops at the
        cost of one dictionary probe per key. Without them (e.g. the doc's text is lost) the
        doc's terms are found in the postings instead: exact, but it reads a whole segment.
        """
        with self._lock:
            self._remove(doc, content_keys, summary_keys, tag_keys)

    def _remove(self, int64_t doc, content_keys, summary_keys, tag_keys):
        cdef uint8_t* meta
        cdef const uint32_t* ln
        cdef uint32_t* df
        cdef const uint32_t* tids
        cdef const uint64_t[::1] keys
        cdef int64_t s, i, nt, t
        if not 0 <= doc < self._n_docs:
            raise ValueError(f"no doc {doc}")
        given = (content_keys, summary_keys, tag_keys)
        if any(k is not None for k in given) and any(k is None for k in given):
            raise TypeError("give all three key arrays or none")
        if not ((<uint8_t*>self._meta.data)[doc] & IX_LIVE):
            return
        ln = <const uint32_t*>self._lens.data + 3 * doc
        if content_keys is None:
            nt = self._doc_terms(doc)
        else:
            self._a_tids.len = 0
            for s in range(3):
                keys = _keys_array(given[s])
                if keys.shape[0] != ln[s]:
                    raise ValueError(f"the keys of doc {doc} do not match what was added")
                garr_reserve(&self._a_tids, self._a_tids.len + keys.shape[0])
                for i in range(keys.shape[0]):
                    t = self._term_find(keys[i])
                    if t < 0:
                        raise ValueError(f"the keys of doc {doc} do not match what was added")
                    (<uint32_t*>self._a_tids.data)[self._a_tids.len] = <uint32_t>t
                    self._a_tids.len += 1
            nt = _sort_unique_u32(<uint32_t*>self._a_tids.data, self._a_tids.len)
        tids = <const uint32_t*>self._a_tids.data
        df = <uint32_t*>self._t_df.data
        for i in range(nt):
            if df[tids[i]] == 0:
                raise ValueError(f"the keys of doc {doc} do not match what was added")
        garr_own(&self._meta)
        garr_own(&self._t_df)
        df = <uint32_t*>self._t_df.data
        for i in range(nt):
            df[tids[i]] -= 1
        meta = <uint8_t*>self._meta.data
        meta[doc] &= ~IX_LIVE
        self._n_live -= 1
        for s in range(3):
            self._sum_len[s] -= ln[s]
        if doc >= self._buf_lo:
            self._buf_dead += 1
            return
        for s in range(self._n_views):
            if self._views[s].doc_lo <= doc < self._views[s].doc_hi:
                self._views[s].n_dead += 1
                (<_Segment>self._segs[s]).v.n_dead += 1
                break

    cdef int64_t _doc_terms(self, int64_t doc) except -1:
        """The doc's unique term ids, sorted, in _a_tids, read from the buffer or its segment."""
        cdef int64_t lo, hi, e, s, f, i, blk, c
        cdef const uint32_t* b_doc = <const uint32_t*>self._b_doc.data
        cdef const uint32_t* b_tid = <const uint32_t*>self._b_tid.data
        cdef const FieldPostings* fp
        cdef PList L
        cdef uint32_t bd[IX_BLOCK]
        cdef uint32_t d = <uint32_t>doc
        self._a_tids.len = 0
        if doc >= self._buf_lo:                       # a doc's buffer postings are adjacent
            lo = lower_bound_u32(b_doc, 0, self._b_doc.len, d)
            hi = lower_bound_u32(b_doc, lo, self._b_doc.len, d + 1)
            garr_reserve(&self._a_tids, hi - lo)
            for e in range(lo, hi):
                (<uint32_t*>self._a_tids.data)[e - lo] = b_tid[e]
            self._a_tids.len = hi - lo
        else:
            for s in range(self._n_views):
                if not self._views[s].doc_lo <= doc < self._views[s].doc_hi:
                    continue
                _seg_check_all(<_Segment>self._segs[s])
                for f in range(3):
                    fp = &self._views[s].f[f]
                    for i in range(fp.n_terms):
                        _open_list(&L, fp.data + fp.offsets[i], fp.data + fp.n_bytes, f)
                        if d < L.first:
                            continue
                        blk = _find_block(&L, 0, d)
                        if blk >= L.nb:
                            continue
                        c = _block(&L, blk, bd, NULL)
                        e = lower_bound_u32(bd, 0, c, d)
                        if e >= c or bd[e] != d:
                            continue
                        garr_reserve(&self._a_tids, self._a_tids.len + 1)
                        (<uint32_t*>self._a_tids.data)[self._a_tids.len] = fp.terms[i]
                        self._a_tids.len += 1
        return _sort_unique_u32(<uint32_t*>self._a_tids.data, self._a_tids.len)

    def is_live(self, int64_t doc) -> bool:
        return 0 <= doc < self._n_docs and bool((<uint8_t*>self._meta.data)[doc] & IX_LIVE)

    # -- segments -------------------------------------------------------------------------------

    cdef int _set_segments(self, list segs) except -1:
        cdef SegView* views = <SegView*>PyMem_RawMalloc(<size_t>(len(segs) * sizeof(SegView) + 1))
        cdef int64_t s
        if views == NULL:
            raise MemoryError()
        for s in range(len(segs)):
            views[s] = (<_Segment>segs[s]).v
        PyMem_RawFree(self._views)
        self._views = views
        self._n_views = len(segs)
        self._segs = segs
        return 0

    cdef int _flush(self) except -1:
        """Turn the buffer into a segment (dead docs dropped) and empty it."""
        cdef uint32_t* terms = <uint32_t*>self._b_terms.data
        cdef int64_t nbt = self._b_terms.len, i
        cdef int32_t* head = <int32_t*>self._t_head.data
        cdef double c0[3]
        cdef double cb[3]
        cdef uint32_t lo = self._buf_lo
        cdef DocCols cols = _doc_cols(self, self.merge_factor <= 2)  # (_maybe_merge says why)
        if <int64_t>lo == self._n_docs:
            return 0
        if nbt > 1:
            qsort(terms, <size_t>nbt, 4, _cmp_u32)
        self._norm(c0, cb)
        seg = _chains_segment(terms, nbt, head, <const uint32_t*>self._b_doc.data,
                              <const uint8_t*>self._b_tf.data, <const uint8_t*>self._b_field.data,
                              <const int32_t*>self._b_next.data, <const uint8_t*>self._meta.data,
                              lo, <uint32_t>self._n_docs, &cols, c0, cb)
        for i in range(nbt):
            head[terms[i]] = -1
        self._b_terms.len = 0
        self._b_doc.len = self._b_tf.len = self._b_field.len = self._b_next.len = 0
        self._b_tid.len = 0
        self._buf_lo = <uint32_t>self._n_docs
        self._buf_dead = 0
        if seg is not None:
            self._set_segments(self._segs + [seg])
        return 0

    cdef void _norm(self, double* c0, double* cb) noexcept:
        """The length normalisation of the statistics now: norm_f = c0[f] + cb[f] * len."""
        cdef int f
        cdef double avgdl
        for f in range(3):
            avgdl = (<double>self._sum_len[f]) / (<double>self._n_live) if self._sum_len[f] != 0 else 1.0
            c0[f] = 1.0 - self._b[f]
            cb[f] = self._b[f] / avgdl

    cdef int _maybe_merge(self) except -1:
        """After a flush: the merge policy (postings._merge_newest, merge_factor at a time).
        During a bulk import (merge_factor > 2) the segments get no filter maxima: the import's
        checkpoint merges everything into one segment that gets them (merge_segments), so the
        ones taken at each flush and merge before would all be thrown away (with a per-posting
        loop over the columns, a 1M import took 20% longer for them)."""
        cdef double c0[3]
        cdef double cb[3]
        cdef DocCols cols = _doc_cols(self, self.merge_factor <= 2)
        self._norm(c0, cb)
        self._set_segments(_merge_newest(list(self._segs), max(self.merge_factor, 2),
                                         <const uint8_t*>self._meta.data, &cols, c0, cb))
        return 0

    @property
    def n_segments(self) -> int:
        return len(self._segs)

    def merge_segments(self) -> None:
        """Flush the buffer and merge everything into one segment, dropping dead docs."""
        with self._lock:
            self._merge_segments()

    def _merge_segments(self):
        cdef list segs
        cdef _Segment m
        cdef double c0[3]
        cdef double cb[3]
        cdef DocCols cols
        self._flush()
        self._norm(c0, cb)
        cols = _doc_cols(self)
        segs = self._segs
        if len(segs) > 1 or (len(segs) == 1 and (<_Segment>segs[0]).v.n_dead > 0):
            m = _merge(segs, <const uint8_t*>self._meta.data, NULL, NULL, &cols,
                       (<_Segment>segs[0]).v.doc_lo,
                       (<_Segment>segs[len(segs) - 1]).v.doc_hi, c0, cb, True)
            self._set_segments([m] if _nonempty(m) else [])

    def spill_postings(self, take, int64_t min_bytes) -> int:
        """The list bytes of each field of at least `min_bytes` moved out of this process's
        anonymous memory, in a merged index (one segment, built here and never handed out):
        `take(data)` returns an array of the same bytes held elsewhere, or None to keep them
        (store/spill.py: a file's read-only mapping). The bytes moved."""
        cdef int64_t moved
        with self._lock:
            if len(self._segs) != 1:
                return 0
            moved = _spill(<_Segment>self._segs[0], take, min_bytes)
            if moved:
                self._set_segments(self._segs)  # (the views hold the data's address)
            return moved

    def adopt_postings(self, data: dict, only) -> int:
        """The list bytes of each field of the one segment read from data[field name] instead
        (the same bytes, mapped from the snapshot just written), where `only(the array they are
        in now)` answers True (a spill's: store/spill.py) and no array views that one. For the
        store, under its lock, with no snapshot of the index being written. The bytes moved."""
        cdef _Segment seg
        cdef int f
        cdef int64_t moved = 0
        with self._lock:
            if len(self._segs) != 1:
                return 0
            seg = <_Segment>self._segs[0]
            for f, name in enumerate(FIELDS):
                new = data.get(name)
                if new is None or not only(seg.arrays[3 * f + 2]):
                    continue
                if _adopt_data(seg, f, new):
                    moved += seg.v.f[f].n_bytes
            if moved:
                self._set_segments(self._segs)
            return moved

    # -- search ---------------------------------------------------------------------------------

    cdef int _grow_scratch(self) except -1:
        """The one-bit-per-doc map (new words zeroed), the one-byte content lengths of the docs
        added since (docs never change) and the fixed window scratch (zeroed once)."""
        cdef int64_t i, n = self._n_docs
        cdef uint8_t* ql
        cdef uint8_t* ql2
        cdef const uint32_t* ln = <const uint32_t*>self._lens.data
        garr_extend(&self._s_gbits, (n + 63) >> 6, True)
        if self._qlen.len < n:
            i = self._qlen.len
            garr_reserve(&self._qlen, n)
            garr_reserve(&self._qlen2, n)
            ql = <uint8_t*>self._qlen.data
            ql2 = <uint8_t*>self._qlen2.data
            with nogil:
                _code_lengths(ln, i, n, ql, ql2)
            self._qlen.len = self._qlen2.len = n
        return 0

    cdef int _grow_tag_buckets(self) except -1:
        """The tag buckets of the docs added since (or of every doc, on a snapshot written
        without them: 50 ms at 10M messages), for a query with tags: only those read them."""
        cdef int64_t i = self._tagb.len, n = self._n_docs
        if i < n:
            garr_reserve(&self._tagb, n)
            with nogil:
                _code_tag_buckets(<const uint32_t*>self._tag_off.data,
                                  <const uint64_t*>self._tag_val.data, i, n,
                                  <uint8_t*>self._tagb.data)
            self._tagb.len = n
        return 0

    cdef int _prepare(self, Query* q, int64_t n, const int64_t* sum_len) except -1:
        """The query's statistics (n live docs and the fields' token totals: the index's own, or
        a search cursor's frozen ones), doc columns and buffer."""
        cdef int f, m
        q.k1 = self._k1
        q.lead = self._lead
        for f in range(3):
            q.w[f] = self._w[f]
            q.b[f] = self._b[f]
            q.avgdl[f] = (<double>sum_len[f]) / (<double>n) if sum_len[f] != 0 else 1.0
            q.c0[f] = 1.0 - q.b[f]
            q.cb[f] = q.b[f] / q.avgdl[f]
        q.n_live = n
        q.meta = <const uint8_t*>self._meta.data
        q.imp = <const uint8_t*>self._imp.data
        q.sess = <const int32_t*>self._sess.data
        q.ts = <const int64_t*>self._ts.data
        q.ulid = <const uint8_t*>self._ulid.data
        q.lens = <const uint32_t*>self._lens.data
        q.tag_off = <const uint32_t*>self._tag_off.data
        q.tag_val = <const uint64_t*>self._tag_val.data
        q.b_doc = <const uint32_t*>self._b_doc.data
        q.b_tf = <const uint8_t*>self._b_tf.data
        q.b_field = <const uint8_t*>self._b_field.data
        q.b_next = <const int32_t*>self._b_next.data
        q.head = <const int32_t*>self._t_head.data if self._b_doc.len > 0 else NULL
        q.buf_lo = self._buf_lo
        q.views = self._views
        q.n_views = self._n_views
        q.n_docs = self._n_docs
        q.gbits = <uint64_t*>self._s_gbits.data
        q.sparse_span = self.sparse_block_span
        q.impact_blocks = self.impact_prime_blocks
        q.qlen = <const uint8_t*>self._qlen.data
        q.qlen2 = <const uint8_t*>self._qlen2.data
        q.tagb = <const uint8_t*>self._tagb.data
        for f in range(3):
            for m in range(256):
                q.qnorm[256 * f + m] = q.c0[f] + q.cb[f] * <double>_qlen_value(m)
                q.wqinv[256 * f + m] = q.w[f] / q.qnorm[256 * f + m]
        return 0

    cdef int64_t _make_groups(self, Query* q, const uint64_t* qk, int64_t nqk,
                              const int64_t* fdf, int64_t nfdf, list out_df,
                              dict weights) except -1:
        """Resolve the query into groups (docs/SCORING.md) with their posting lists, df and idf.

        Groups that occur in no live doc are left out: they add nothing to any score, and their
        large idf would only loosen the pruning bounds. With fdf (nfdf values, one per distinct
        key ascending: a search cursor's frozen statistics) the groups take those df instead;
        out_df, when given, gets the df of every distinct key (0 for those left out).
        """
        cdef uint64_t* keys
        cdef int64_t nu = 0, i, ki, s, T = self._t_keys.len, pos, added, t, G = 0, li, df, bi
        cdef int f
        cdef uint64_t key
        cdef uint32_t c
        cdef Group* g
        cdef PList* L
        cdef const FieldPostings* fp
        cdef const uint64_t* tkeys = <const uint64_t*>self._t_keys.data
        cdef uint32_t tid
        cdef int s0                                   # the first segment read term by term
        cdef _Segment cxs = None
        cdef const uint32_t* cxc = NULL
        cdef const uint32_t* cxdf = NULL
        cdef int64_t n_cx = 0, ci = 0, df0
        cdef Group rest
        if self._cx is not None and self._n_views > 0 and self._segs[0] is self._cx_for:
            cxs = <_Segment>self._cx[2]
            n_cx = self._cx[0].shape[0]
            cxc = <const uint32_t*>cnp.PyArray_DATA(self._cx[0])
            cxdf = <const uint32_t*>cnp.PyArray_DATA(self._cx[1])
        garr_reserve(&self._a_keys, nqk)
        keys = <uint64_t*>self._a_keys.data
        memcpy(keys, qk, <size_t>(8 * nqk))
        qsort(keys, <size_t>nqk, 8, _cmp_u64)
        for i in range(nqk):
            if i == 0 or keys[i] != keys[i - 1]:
                keys[nu] = keys[i]
                nu += 1
        self._q_terms.len = 0
        self._q_lists.len = 0
        garr_reserve(&self._q_groups, nu)
        if nfdf >= 0 and nfdf != nu:
            raise ValueError(f"stats hold {nfdf} df values for {nu} distinct query keys")
        for i in range(nu):
            key = keys[i]
            g = <Group*>self._q_groups.data + G
            g.key = key
            g.key_lo = self._q_terms.len
            s0 = 0
            t = self._term_find(key)
            if t >= 0:
                garr_reserve(&self._q_terms, self._q_terms.len + 1)
                (<uint32_t*>self._q_terms.data)[self._q_terms.len] = <uint32_t>t
                self._q_terms.len += 1
            if key >> 62 == 3:                         # CJK unigram: add the bigrams holding it
                c = <uint32_t>(key & CP_MASK)
                ci = lower_bound_u32(cxc, 0, n_cx, c)
                if ci < n_cx and cxc[ci] == c:         # segment 0 by the character's lists
                    s0 = 1
                pos = 0
                while pos < T:
                    garr_reserve(&self._q_terms, self._q_terms.len + 4096)
                    with nogil:
                        pos = _scan_bigrams(tkeys, pos, T, c,
                                            <uint32_t*>self._q_terms.data + self._q_terms.len,
                                            4096, &added)
                    self._q_terms.len += added
            g.key_hi = self._q_terms.len
            g.list_lo = self._q_lists.len
            g.n_postings = 0
            df0 = -1
            if s0:
                if self._views[0].n_dead == 0:         # segment 0's part of df is stored
                    df0 = cxdf[ci]
                for f in range(3):
                    fp = &cxs.v.f[f]
                    li = lower_bound_u32(fp.terms, 0, fp.n_terms, c)
                    if li < fp.n_terms and fp.terms[li] == c:
                        self._add_list(q, g, fp, li, 0, f)
            rest.list_lo = self._q_lists.len             # (when df0 >= 0: the other lists)
            for ki in range(g.key_lo, g.key_hi):
                tid = (<uint32_t*>self._q_terms.data)[ki]
                for s in range(s0, self._n_views):
                    for f in range(3):
                        fp = &self._views[s].f[f]
                        li = lower_bound_u32(fp.terms, 0, fp.n_terms, tid)
                        if li >= fp.n_terms or fp.terms[li] != tid:
                            continue
                        self._add_list(q, g, fp, li, s, f)
            g.list_hi = self._q_lists.len
            if g.key_hi - g.key_lo == 0:
                if out_df is not None:
                    out_df.append(0)
                continue
            if fdf != NULL:
                df = fdf[i]
            elif g.key_hi - g.key_lo == 1:
                df = (<uint32_t*>self._t_df.data)[(<uint32_t*>self._q_terms.data)[g.key_lo]]
            elif df0 >= 0:                             # segments hold disjoint doc ranges
                rest.key_lo = g.key_lo
                rest.key_hi = g.key_hi
                rest.list_hi = g.list_hi
                with nogil:
                    df = df0 + _group_df(q, &rest, <const PList*>self._q_lists.data,
                                         <const uint32_t*>self._q_terms.data)
            else:
                with nogil:
                    df = _group_df(q, g, <const PList*>self._q_lists.data,
                                   <const uint32_t*>self._q_terms.data)
            if out_df is not None:
                out_df.append(df)
            if df == 0:
                continue
            g.df = df
            g.idf = log(1.0 + (<double>(q.n_live - df) + 0.5) / (<double>df + 0.5))
            if key in weights:
                g.idf = <double>weights[key] * g.idf
            G += 1
        self._q_groups.len = G
        return G

    cdef int _add_list(self, Query* q, Group* g, const FieldPostings* fp, int64_t li, int s,
                       int f) except -1:
        """Open list li of fp (segment s, field f) as the next list of group g."""
        cdef PList* L
        cdef int64_t bi
        if _list_ready(fp, li) < 0:
            raise DamagedPostings(f"damaged posting list {li} in field {f}")
        garr_reserve(&self._q_lists, self._q_lists.len + 1)
        L = <PList*>self._q_lists.data + self._q_lists.len
        _open_list(L, fp.data + fp.offsets[li], fp.data + fp.n_bytes, f)
        if L.nb > 1:
            bi = lower_bound_u32(fp.bm_terms, 0, fp.n_bm, <uint32_t>li)
            if bi < fp.n_bm and fp.bm_terms[bi] == <uint32_t>li:
                L.bm = fp.bm + fp.bm_off[bi]
                if fp.bx != NULL:
                    L.bx = fp.bx + <int64_t>IX_BX * fp.bm_off[bi]
                L.bmf = q.w[f] * (fp.bm_cb / q.cb[f] if fp.bm_cb > q.cb[f] else 1.0)
        L.seg = <int32_t>s
        L.field = f
        g.n_postings += L.n
        self._q_lists.len += 1
        return 0

    def search(self, query_keys, Py_ssize_t k, int64_t session=-1, int64_t kind_mask=0x3F,
               int64_t tier_mask=0x0F, int64_t min_importance=0, tag_hashes=None,
               bint exhaustive=False, session_docs=None, ts_lo=None, ts_hi=None,
               int64_t role_mask=0x07, int64_t doc_limit=-1, stats=None):
        """Top k live docs for the query keys, best first: (docs, scores, breakdown[n, 3]).

        `session_docs` (with session >= 0) may list the session's docs in ascending order, every
        one of them (others are ignored by the session filter anyway): when they are few next to
        the postings, only they are scored. The result is the same either way.
        `ts_lo` / `ts_hi`: only docs with ts_lo <= timestamp < ts_hi; `role_mask`: bit r for
        role r; `doc_limit` >= 0: only docs below it. `stats`: score with these statistics (a
        `last_stats` value of an earlier search of the same keys) instead of the index's own.
        Every filter is checked inside the scoring loops, so it never shortens the top k.
        """
        with self._lock:
            return self._search(query_keys, k, session, kind_mask, tier_mask, min_importance,
                                tag_hashes, exhaustive, session_docs, ts_lo, ts_hi, role_mask,
                                doc_limit, stats)

    def _search(self, query_keys, Py_ssize_t k, int64_t session, int64_t kind_mask,
                int64_t tier_mask, int64_t min_importance, tag_hashes, bint exhaustive,
                session_docs, ts_lo, ts_hi, int64_t role_mask, int64_t doc_limit, stats):
        cdef const uint64_t[::1] qk = _keys_array(query_keys)
        cdef const int64_t[::1] fdf = None
        cdef int64_t n_stat = self._n_live
        cdef int64_t sum_stat[3]
        cdef const uint32_t[::1] cand = None
        cdef const uint32_t* cand_p = NULL
        cdef const uint64_t[::1] tg = _keys_array(() if tag_hashes is None else tag_hashes)
        cdef Query q
        cdef Eng e, e2
        cdef bint parallel
        cdef int err
        cdef int64_t ncand
        cdef int64_t G, j, total = 0, m, li, most = 0, nl
        cdef const Group* groups
        cdef const PList* lists
        cdef const uint32_t* gterms
        cdef const double* a
        cdef uint32_t d
        cdef bint pruned
        if k < 0:
            raise ValueError("k must be >= 0")
        for j in range(3):
            sum_stat[j] = self._sum_len[j]
        if stats is not None:
            n_stat = int(stats[0])
            for j in range(3):
                sum_stat[j] = int(stats[1][j])
            fdf = np.ascontiguousarray(stats[2], dtype=np.int64)
            if n_stat < 0 or any(sum_stat[j] < 0 for j in range(3)) \
                    or (fdf.shape[0] and int(np.min(fdf)) < 0):
                raise ValueError("bad stats")
        self.last_stats = None
        self.last_pruned = False
        self.last_postings = 0
        self.last_parallel = False
        self.last_session_docs = False
        self.last_windows_skipped = 0
        self.last_blocks_skipped = 0
        self.last_docs_skipped = 0
        self.last_theta_shared = 0
        self.last_primed = 0
        if k > self._n_live:
            k = self._n_live
        if k == 0 or qk.shape[0] == 0:
            return _empty_result()
        self._grow_scratch()
        if tg.shape[0] > 0:
            self._grow_tag_buckets()
        self._prepare(&q, n_stat, sum_stat)
        _set_filters(&q, session, kind_mask, tier_mask, role_mask, min_importance, _ptr(tg),
                     tg.shape[0], INT64_MIN if ts_lo is None else <int64_t>ts_lo,
                     INT64_MAX if ts_hi is None else <int64_t>ts_hi,
                     <uint32_t>min(doc_limit, self._n_docs) if doc_limit >= 0 else 0xFFFFFFFF,
                     self.filter_maxima)
        out_df = []
        G = self._make_groups(&q, _ptr(qk), qk.shape[0],
                              &fdf[0] if fdf is not None and fdf.shape[0] else NULL,
                              fdf.shape[0] if fdf is not None else -1, out_df,
                              query_weights(qk) if self._cjk_weights else {})
        self.last_stats = (n_stat, (sum_stat[0], sum_stat[1], sum_stat[2]), tuple(out_df))
        if G == 0:
            return _empty_result()
        groups = <const Group*>self._q_groups.data
        lists = <const PList*>self._q_lists.data
        gterms = <const uint32_t*>self._q_terms.data
        for j in range(G):
            total += groups[j].n_postings
        self.last_postings = total
        # Prune only queries long and dense enough (total * 4096 / n_docs: postings per window).
        pruned = (not exhaustive and total >= self.prune_min_postings
                  and total * IX_WINDOW >= self.prune_density * self._n_docs)
        self.last_pruned = pruned
        _set_ctab(&q, pruned, total)
        # Scratch sized by the query: the lists of the segment that has the most of them.
        for m in range(self._n_views):
            nl = 0
            for li in range(self._q_lists.len):
                nl += lists[li].seg == m
            most = max(most, nl)
        (<_Scratch>self._scr[0]).engine(&e, &q, groups, G, gterms, most, k, self.prime_max_postings,
                                        self.prime_docs_per_k * k)
        if session >= 0 and session_docs is not None and not exhaustive:
            cand = np.ascontiguousarray(session_docs, dtype=np.uint32)
            if cand.shape[0] * 16 > total:             # postings are cheaper to scan
                cand = None
        self.last_session_docs = cand is not None
        if cand is not None and cand.shape[0] > 0:
            cand_p = &cand[0]
        parallel = (pruned and cand is None and total >= self.parallel_min_postings
                    and self._n_docs >= 4 * self.window)
        if parallel and not cm_worker_alive(self._worker):
            cm_worker_free(self._worker)              # a fork child's copy: only freed
            self._worker = cm_worker_new(&err)        # NULL (no thread): run alone
            parallel = self._worker != NULL
        self.last_parallel = parallel
        if parallel:
            (<_Scratch>self._scr[1]).engine(&e2, &q, groups, G, gterms, most, k, 0, 0)
        ncand = cand.shape[0] if cand is not None else -1
        with nogil:
            _score(&e, &e2 if parallel else NULL, self._worker if parallel else NULL, lists,
                   self.window, pruned, cand_p, ncand)
        self.last_windows_skipped = e.n_windows_skipped + (e2.n_windows_skipped if parallel else 0)
        self.last_blocks_skipped = e.n_blocks_skipped + (e2.n_blocks_skipped if parallel else 0)
        self.last_docs_skipped = e.n_docs_skipped + (e2.n_docs_skipped if parallel else 0)
        self.last_theta_shared = e.n_theta_shared + (e2.n_theta_shared if parallel else 0)
        self.last_primed = e.n_primed
        docs = np.empty(e.nh, dtype=np.int64)
        scores = np.empty(e.nh, dtype=np.float64)
        breakdown = np.empty((e.nh, 3), dtype=np.float64)
        cdef int64_t[::1] o_docs = docs
        cdef double[::1] o_scores = scores
        cdef double[:, ::1] o_bd = breakdown
        for j in range(e.nh):
            d = e.heap[j].d
            a = e.hbd + 3 * <int64_t>e.heap[j].i
            o_docs[j] = d
            o_scores[j] = e.heap[j].s
            o_bd[j, 0] = a[0]
            o_bd[j, 1] = a[1]
            o_bd[j, 2] = a[2]
        return docs, scores, breakdown

    def _set_prune_density(self, int64_t n, min_postings=None) -> None:
        """Tests and benchmarks: prune the queries that average at least n postings per window of
        4096 doc ids and have at least `min_postings` (by default IX_PRUNE_MIN_POSTINGS, or 0
        when n is 0: n = 0 prunes every query; a huge n none, the planted regression of the gate)."""
        cdef int64_t m = (IX_PRUNE_MIN_POSTINGS if n > 0 else 0) if min_postings is None \
            else min_postings
        if n < 0 or m < 0:
            raise ValueError("prune_density and min_postings must be >= 0")
        self.prune_density = n
        self.prune_min_postings = m

    def _set_lead_weight(self, double w) -> None:
        """Benchmarks: the lead bonus's weight (0: none; ranking_quality.py --lead)."""
        if not w >= 0:
            raise ValueError("the lead weight must be >= 0")
        self._lead = w

    def _set_cjk_weights(self, bint on) -> None:
        """Benchmarks: weigh the query's CJK bigrams (docs/SCORING.md "Query weights") or not."""
        self._cjk_weights = on

    def _set_window(self, int64_t n) -> None:
        """Tests and benchmarks: score in windows of n doc ids (a multiple of 64, at most 4096)."""
        if n <= 0 or n % 64 != 0 or n > IX_WINDOW:
            raise ValueError("window must be a positive multiple of 64, at most 4096")
        self.window = n

    # -- compaction, memory, snapshot arrays ----------------------------------------------------

    def compacted(self):
        """A new index holding only the live docs, renumbered densely in their old order, in one
        segment, without the terms no live doc holds; and old_to_new (int64, -1 for dead docs)."""
        from convmem._core.compact import compacted  # (its own module: a whole concern)
        with self._lock:
            return compacted(self)

    def nbytes(self) -> dict:
        """Bytes held (capacity, not length), by part; borrowed (mmap'd) arrays included."""
        cdef int64_t postings = 0
        for s in self._segs:
            for arr in (<_Segment>s).arrays + (<_Segment>s).bm_arrays + (<_Segment>s).bx_arrays:
                postings += arr.nbytes
        if self._cx is not None:
            postings += self._cx[0].nbytes + self._cx[1].nbytes
            for arr in (<_Segment>self._cx[2]).arrays + (<_Segment>self._cx[2]).bm_arrays:
                postings += arr.nbytes
        cdef int64_t part[4]
        cdef int i
        part[0] = part[1] = part[2] = part[3] = 0
        for i in range(self._n_arrs):
            part[self._arr_part[i]] += garr_bytes(self._arrs[i])
        postings += part[PART_POSTINGS]
        terms = part[PART_TERMS]
        doc_columns = part[PART_DOCS]
        scratch = (part[PART_SCRATCH]
                   + (<_Scratch>self._scr[0]).nbytes() + (<_Scratch>self._scr[1]).nbytes()
                   + self._n_views * <int64_t>sizeof(SegView))
        return {"postings": postings, "terms": terms, "doc_columns": doc_columns,
                "scratch": scratch}

    def block_max_arrays(self) -> dict:
        """The block maxima of the one segment `to_arrays` leaves (call it right after), for
        from_arrays to adopt instead of recomputing: per field bm_terms_*, bm_off_*, bm_*, and
        bm_cb (3,); none when there is not exactly one segment. With them the docs' length
        codes and tag buckets (qlen, qlen2, tagb: _doc_code_sections). Not part of to_arrays:
        the pure twin has no block maxima (it reads none of these)."""
        cdef _Segment seg
        cdef int f
        with self._lock:
            out = _doc_code_sections(<const uint32_t*>self._lens.data,
                                 <const uint32_t*>self._tag_off.data,
                                 <const uint64_t*>self._tag_val.data, self._n_docs)
            if len(self._segs) != 1:
                return out
            seg = <_Segment>self._segs[0]
            if len(seg.bm_arrays) != 9:
                return out
            _put_block_maxima(out, seg)
            self._build_cx()
            if self._cx is not None and self._cx_for is seg:
                _put_char_lists(out, self._cx)
            return out

    cdef int _build_cx(self) except -1:
        """The character lists of the one segment (kept while it is segment 0), unless they are
        there already."""
        cdef double c0[3]
        cdef double cb[3]
        cdef DocCols cols = _doc_cols(self)
        if len(self._segs) != 1 or (self._cx is not None and self._cx_for is self._segs[0]):
            return 0
        self._cx = self._cx_for = None
        self._norm(c0, cb)
        cx = _char_segment(<_Segment>self._segs[0], <const uint64_t*>self._t_keys.data,
                           self._t_keys.len, IX_CX_MIN, &cols, c0, cb)
        if cx is not None:
            self._cx = cx
            self._cx_for = self._segs[0]
        return 0

    def char_lists(self):
        """Tests: the characters that have lists, or None."""
        with self._lock:
            if self._cx is None or self._n_views == 0 or self._segs[0] is not self._cx_for:
                return None
            return self._cx[0].copy()

    def freeze(self):
        """The state to_arrays() + block_max_arrays() would return now, taken cheaply: the
        buffer flushed, the doc columns and terms copied, the segments kept (they never change;
        a later remove only counts a dead doc in them, which the copied doc_meta does not see).
        `.arrays()` then merges and derives the rest without the lock, on any thread, while the
        index goes on changing (it is not merged; if it is, its char lists are built and kept)."""
        cdef _FrozenIndex fz = _FrozenIndex()
        with self._lock:
            self._flush()
            fz.base = self._doc_arrays(True)
            fz.table_len = self._t_table.len  # (arrays() builds the term table: no copy here)
            fz.segs = _handed_out(list(self._segs))  # (fz merges them later, off the lock)
            self._norm(fz.c0, fz.cb)
            fz.need_merge = len(fz.segs) > 1 or (len(fz.segs) == 1
                                                  and (<_Segment>fz.segs[0]).v.n_dead > 0)
            fz.cx = None
            fz.cx_min = IX_CX_MIN
            if len(fz.segs) == 1 and not fz.need_merge:
                self._build_cx()  # (once: the foreground snapshot froze the index it merged)
                if self._cx is not None and self._cx_for is fz.segs[0]:
                    fz.cx = self._cx
        return fz

    def to_arrays(self) -> dict:
        """Everything `from_arrays` needs (merges the segments first). The postings arrays are
        the index's own read-only arrays; the rest are copies."""
        with self._lock:
            return self._to_arrays()

    def _to_arrays(self):
        cdef int f
        self._merge_segments()
        out = self._doc_arrays()
        segs = _handed_out(self._segs[:1])
        seg_arrays = (<_Segment>segs[0]).arrays if segs else _empty_field_arrays() * 3
        for f, name in enumerate(FIELDS):
            out[f"post_terms_{name}"] = seg_arrays[3 * f]
            out[f"post_offsets_{name}"] = seg_arrays[3 * f + 1]
            out[f"post_data_{name}"] = seg_arrays[3 * f + 2]
        return out

    cdef dict _doc_arrays(self, bint share=False):
        """to_arrays without the postings: copies; with `share`, the columns that only grow
        (nothing below their length changes: per-doc values set once, term keys) are instead
        views of their memory (shared.share_garr): the index goes on appending
        past them and copies only if it must grow meanwhile. The columns changed in place
        (doc flags, document frequencies) are copied, and so is the term table, except with
        `share`: its layout depends only on the term keys (_table_rebuild), so a frozen index
        builds it again from their shared view (sections._term_table) off the lock."""
        cdef int64_t n = self._n_docs, T = self._t_keys.len
        out = {
            "format": np.array(IX_ARRAYS_FORMAT, dtype=np.int64),
            "n_docs": np.array(n, dtype=np.int64),
            "n_live": np.array(self._n_live, dtype=np.int64),
            "sum_len": np.array([self._sum_len[0], self._sum_len[1], self._sum_len[2]],
                                dtype=np.int64),
            "term_keys": self._column(&self._t_keys, np.uint64, (T,), share),
            "term_df": garr_to_numpy(&self._t_df, np.uint32, (T,)),
        }
        if not share:
            out["term_table"] = garr_to_numpy(&self._t_table, np.uint32, (self._t_table.len,))
        out["doc_meta"] = garr_to_numpy(&self._meta, np.uint8, (n,))
        out["doc_importance"] = self._column(&self._imp, np.uint8, (n,), share)
        out["doc_session"] = self._column(&self._sess, np.int32, (n,), share)
        out["doc_timestamp"] = self._column(&self._ts, np.int64, (n,), share)
        out["doc_ulid"] = self._column(&self._ulid, np.uint8, (n, IX_ULID), share)
        out["doc_lens"] = self._column(&self._lens, np.uint32, (n, 3), share)
        out["tag_offsets"] = self._column(&self._tag_off, np.uint32, (n + 1,), share)
        out["tag_hashes"] = self._column(&self._tag_val, np.uint64, (self._tag_val.len,), share)
        return out

    cdef object _column(self, GArr* a, object dtype, tuple shape, bint share):
        """A copy of the GArr's elements, or with `share` a read-only view of them (shared.pyx)."""
        if share:
            return share_garr(a, dtype, shape, self._shared, self)
        return garr_to_numpy(a, dtype, shape)

    @property
    def shared_columns(self) -> int:
        """Columns whose memory a freeze() shares and release_frozen has not taken back."""
        return len(self._shared)

    def release_frozen(self) -> None:
        """The arrays of the last freeze() are gone (their snapshot is written): the columns
        take their shared memory back (shared.release_shared)."""
        with self._lock:
            release_shared(self._shared)

    @classmethod
    def from_arrays(cls, arrays, k1: float = 1.2, weights=(1.0, 1.5, 2.0),
                    b=(0.75, 0.75, 0.5)) -> SearchIndex:
        """Restore from `to_arrays` output without copying it (arrays may be read-only mmap
        views); what later changes is copied on first write. Sizes, offsets and term ids are
        checked; block maxima given with the lists (`block_max_arrays`) are adopted after a check
        of their shape against the lists' headers, else computed. Every posting list is decoded
        once before its first use (lazily: a query checks the lists it opens, a merge or scan
        all of them): canonical, within its bytes, doc ids ascending and below n_docs, tfs in
        range; a list that fails raises ValueError and is never read. Doc metadata values and
        the stored length codes (qlen, qlen2) are not checked beyond doc_meta's bits and their
        shapes (the snapshot is checksummed)."""
        cdef SearchIndex ix = cls(k1, weights, b)
        cdef int64_t n, T, nl, cap, nt
        cdef int f
        cdef double c0[3]
        cdef double cb[3]
        cdef DocCols cols
        if int(arrays["format"]) != IX_ARRAYS_FORMAT:
            raise ValueError(f"unknown index arrays format {int(arrays['format'])}")
        n = int(arrays["n_docs"])
        nl = int(arrays["n_live"])
        sum_len = _arr(arrays, "sum_len", np.int64, (3,))
        if not 0 <= nl <= n < 0xFFFFFFFE:
            raise ValueError("bad n_docs / n_live")
        keys = _arr(arrays, "term_keys", np.uint64, None)
        T = keys.shape[0]
        table = _arr(arrays, "term_table", np.uint32, None)
        cap = table.shape[0]
        if cap < IX_TABLE_MIN or cap & (cap - 1) or cap < 2 * T or int(table.max()) > T:
            raise ValueError("bad term table")
        meta = _arr(arrays, "doc_meta", np.uint8, (n,))
        if int(np.count_nonzero(meta & IX_LIVE)) != nl or (
                n and (int((meta & 7).max()) > 5 or int((meta & 0x60).max()) > 0x40)):
            raise ValueError("bad doc_meta")              # kind 0..5, role 0..2
        tag_off = _arr(arrays, "tag_offsets", np.uint32, (n + 1,))
        tag_val = _arr(arrays, "tag_hashes", np.uint64, None)
        _check_offsets(tag_off, tag_val.shape[0], "tag_offsets")
        garr_borrow(&ix._t_keys, keys, ix._keep)
        garr_borrow(&ix._t_df, _arr(arrays, "term_df", np.uint32, (T,)), ix._keep)
        garr_borrow(&ix._t_table, table, ix._keep)
        garr_free(&ix._t_head)
        garr_borrow(&ix._meta, meta, ix._keep)
        garr_borrow(&ix._imp, _arr(arrays, "doc_importance", np.uint8, (n,)), ix._keep)
        garr_borrow(&ix._sess, _arr(arrays, "doc_session", np.int32, (n,)), ix._keep)
        garr_borrow(&ix._ts, _arr(arrays, "doc_timestamp", np.int64, (n,)), ix._keep)
        garr_borrow(&ix._ulid, _arr(arrays, "doc_ulid", np.uint8, (n, IX_ULID)), ix._keep)
        garr_borrow(&ix._lens, _arr(arrays, "doc_lens", np.uint32, (n, 3)), ix._keep)
        garr_borrow(&ix._tag_off, tag_off, ix._keep)
        garr_borrow(&ix._tag_val, tag_val, ix._keep)
        if "qlen" in arrays:                         # the stored length codes (_doc_code_sections)
            garr_borrow(&ix._qlen, _arr(arrays, "qlen", np.uint8, (n,)), ix._keep)
            garr_borrow(&ix._qlen2, _arr(arrays, "qlen2", np.uint8, (n, 2)), ix._keep)
        if "tagb" in arrays:                         # the stored tag buckets (_doc_code_sections)
            garr_borrow(&ix._tagb, _arr(arrays, "tagb", np.uint8, (n,)), ix._keep)
        seg_arrays = []
        for f, name in enumerate(FIELDS):
            terms = _arr(arrays, f"post_terms_{name}", np.uint32, None)
            offsets = _arr(arrays, f"post_offsets_{name}", np.uint32, (terms.shape[0] + 1,))
            data = _arr(arrays, f"post_data_{name}", np.uint8, None)
            _check_offsets(offsets, data.shape[0], f"post_offsets_{name}")
            nt = terms.shape[0]
            if nt and (int(terms[nt - 1]) >= T or not bool(np.all(terms[1:] > terms[:nt - 1]))):
                raise ValueError(f"bad post_terms_{name}")
            seg_arrays += [terms, offsets, data]
        bm = bm_cb = bx = None
        if "bm_cb" not in arrays:                    # computing them decodes every list: check first
            for f, name in enumerate(FIELDS):
                if not _lists_ok(seg_arrays[3 * f + 1], seg_arrays[3 * f + 2], <uint32_t>n, f):
                    raise ValueError(f"bad post_data_{name}")
        if "bm_cb" in arrays:                        # block maxima stored with the lists
            bm_cb = _arr(arrays, "bm_cb", np.float64, (3,))
            bm = []
            for f, name in enumerate(FIELDS):
                bm += [_arr(arrays, f"bm_terms_{name}", np.uint32, None),
                       _arr(arrays, f"bm_off_{name}", np.uint32, None),
                       _arr(arrays, f"bm_{name}", np.float32, None)]
            if "bx_content" in arrays:               # (snapshots written before them: none)
                bx = [_arr(arrays, f"bx_{name}", np.uint8, None) for name in FIELDS]
        ix._n_docs = n
        ix._n_live = nl
        for f in range(3):
            ix._sum_len[f] = int(sum_len[f])
        ix._buf_lo = <uint32_t>n
        if any(seg_arrays[3 * f + 2].shape[0] for f in range(3)):
            ix._norm(c0, cb)
            cols = _doc_cols(ix)
            ix._set_segments([_adopted_segment(<uint32_t>n, seg_arrays, bm, bm_cb, bx, &cols,
                                               c0, cb)])
            if bm is not None and "cx_chars" in arrays:
                chars = _cx_chars(arrays)
                cx_df = _arr(arrays, "cx_df", np.uint32, chars.shape)
                if int(cx_df.max()) > nl:
                    raise ValueError("bad cx_df")
                ix._cx = (chars, cx_df, _cx_segment(arrays, <uint32_t>n))
                ix._cx_for = ix._segs[0]
        return ix


cdef DocCols _doc_cols(SearchIndex ix, bint filters=True) noexcept:
    """The index's doc columns the block maxima of its segments are taken from; without the
    filter maxima's (meta NULL) unless `filters`."""
    cdef DocCols c
    c.lens = <const uint32_t*>ix._lens.data
    c.meta = <const uint8_t*>ix._meta.data if filters else NULL
    c.imp = <const uint8_t*>ix._imp.data
    c.tag_off = <const uint32_t*>ix._tag_off.data
    c.tag_val = <const uint64_t*>ix._tag_val.data
    return c


cdef tuple _empty_result():
    return (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64),
            np.empty((0, 3), dtype=np.float64))


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

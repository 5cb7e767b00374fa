# C-level contract of convmem._core.postings: the compressed posting lists (format below),
# their validation, segments (block maxima included) and merges. No Python API.
#
# The per-posting primitives are `cdef inline` here, so score.pyx and index.pyx inline them as
# if they were written there (as pgproto's frb.pxd does); the functions of postings.pyx are
# called once per list check, once per segment build and once per merge.
#
# One posting list (one term, one field, one segment; doc ids ascending, tf 1..127; a content
# posting also carries its lead flag: the key is in its doc's lead, docs/SCORING.md):
#
#   varint n                      postings in the list (>= 1); LEB128, 7 bits a byte, low first
#   varint first                  the first doc id (absolute: a list reads the same in any segment)
#   skip[nb]                      only when nb = ceil(n / 128) > 1: per block, u32 last doc id and
#                                 u32 offset of the block from the start of the payload (LE)
#   payload: per block of 128 postings (the last one may be shorter):
#     u8 hdr                      bits 0-5: doc bits B (0..32); bits 6-7: tf code (0, 1, 2, 3 =
#                                 0, 1, 2, 8 tf bits T)
#     u8 lead                     content lists only: 0 no posting of the block is lead, 1 all
#                                 are, 2 some are (a bitmap follows the tfs)
#     docs                        cnt values of B bits, little-endian bit stream, byte-padded:
#                                 doc[i] - prev - 1, prev = the previous doc (first - 1 before the
#                                 list, the skip entry's last doc before a later block)
#     tfs                         cnt values of T bits (tf - 1), byte-padded; none when all are 1
#     leads                       lead 2 only: cnt bits, bit i (of byte i / 8, low bit first) set
#                                 when posting i is lead; the padding bits are 0
#
# Decoded, a posting's tf is one byte: bits 0-6 the tf, bit 7 (IX_LEAD) the lead flag.
#
# Two varint readers: varint_trusted for lists this process encoded or has validated (every
# list of a segment: _lists_ok runs on snapshot data before a segment is made from it), and
# varint_checked for untrusted bytes (stays before `end`, at most 5 bytes).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport qsort
from libc.string cimport memcpy, memset

from convmem._core._common cimport (CM_ASSERT, CM_DEBUG, GArr, cm_unpack_groups, __builtin_clz,
                                    load_u32, mix64)


cdef enum:
    IX_BLOCK = 128          # postings per compressed block
    IX_TF_CAP = 127         # tf saturates here (seven bits: the tf byte's bit 7 is IX_LEAD)
    IX_LEAD = 0x80          # a decoded tf byte's lead flag (content postings)
    IX_LEAD_KEYS = 16       # the lead: the first 16 content keys (a CJK bigram a quarter key)
    IX_ULID = 16
    IX_LIVE = 0x80          # doc_meta bit: the doc is live; bits 0-2 kind, 3-4 tier, 5-6 role
    # Filter maxima (FieldPostings.bx): IX_BX bytes a block, IX_BX_COLS columns of 4 bits (column
    # c in byte c / 2, the low half for even c): the block's maximum over its docs of one kind
    # (columns 0-5), one tier (6-9), importance >= IX_BX_IMP_FLOOR + 10 i (10-15), or holding a
    # tag of hash bucket b (16-23, _tag_bucket)
    IX_BX = 12
    IX_BX_COLS = 24
    IX_BX_KINDS = 6
    IX_BX_TIER = 6
    IX_BX_IMP = 10
    IX_BX_IMP_N = 6
    IX_BX_IMP_FLOOR = 40
    IX_BX_TAG = 16


# The postings of one field in one segment: terms[i] has the compressed list
# data[offsets[i]:offsets[i+1]]. Memory is held by numpy arrays.
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
    int64_t n_bmv           # values in bm (an adopted segment's last list's blocks end there)
    # Filter maxima: IX_BX bytes per value of bm, each column's maximum (see IX_BX) as a share
    # of bm rounded up, ceil(15 * max / bm) (0: no doc of the column in the block). NULL: not
    # known (a segment adopted from a snapshot written before them).
    const uint8_t* bx
    # Lists not yet decoded once (a segment adopted from a snapshot is checked lazily, each list
    # on its first use, see _list_ready): checked[i] is 1 once list i passed _list_check, with
    # doc ids below doc_hi. NULL when every list is known good (built here, or all checked).
    # The memory belongs to the _Segment (views share the pointer).
    uint8_t* checked
    uint32_t doc_hi
    int field               # 0 content (its blocks carry lead flags), 1 summary, 2 tags


# A segment covers docs [doc_lo, doc_hi), the three fields together.
cdef struct SegView:
    uint32_t doc_lo
    uint32_t doc_hi
    int64_t n_dead
    FieldPostings f[3]


# The per-doc columns block maxima are taken from, indexed by doc id: the field lengths (3 a
# doc) and, for the filter maxima, doc_meta (kind, tier), importance and the tag hashes of doc d
# (tag_val[tag_off[d]:tag_off[d + 1]]) (meta NULL: none).
cdef struct DocCols:
    const uint32_t* lens
    const uint8_t* meta
    const uint8_t* imp
    const uint32_t* tag_off
    const uint64_t* tag_val


# The filter maxima column bucket of a tag hash (of IX_BX_COLS - IX_BX_TAG).
cdef inline uint32_t _tag_bucket(uint64_t h) noexcept nogil:
    return <uint32_t>(mix64(h) >> 61)


# Doc d's tag buckets: bit b set when it holds a tag of bucket b (the filter maxima's columns,
# and the index's per-doc byte that tag-filtered queries test, sections.pyx _code_tag_buckets).
cdef inline uint32_t _doc_tag_buckets(const uint32_t* tag_off, const uint64_t* tag_val,
                                      uint32_t d) noexcept nogil:
    cdef uint32_t m = 0
    cdef int64_t j
    for j in range(tag_off[d], tag_off[d + 1]):
        m |= 1u << _tag_bucket(tag_val[j])
    return m


# Column c of a block's filter maxima (0..15).
cdef inline uint32_t _bx_col(const uint8_t* b, uint32_t c) noexcept nogil:
    return (b[c >> 1] >> ((c & 1) << 2)) & 15


# One compressed posting list (one term, one segment, one field), opened for reading:
# blocks of IX_BLOCK postings; `skip` (NULL when there is one block) holds per block the last
# doc id and the payload offset of the block.
cdef struct PList:
    const uint8_t* skip
    const uint8_t* payload
    const uint8_t* end      # end of the field's data: the fast decoder reads 8 bytes at a time
    const float* bm         # per block bound of tf / norm (FieldPostings), NULL: not known
    const uint8_t* bx       # per block IX_BX filter maxima (FieldPostings), NULL: not known
    double bmf              # the factor that makes bm a bound of x_f now: w * max(1, bm_cb / cb)
    int64_t n
    int64_t nb
    uint32_t first
    int32_t seg
    int32_t field


# Block j of a list, its header decoded (_block_header: the one place that reads it).
cdef struct BlockHdr:
    const uint8_t* dp       # the block's doc stream
    const uint8_t* tp       # its tf stream
    const uint8_t* lp       # its lead bitmap (lc 2)
    int64_t cnt             # postings in the block
    uint32_t prev           # the doc before the block (first - 1 for block 0)
    int db                  # doc bits
    int tb                  # tf bits
    int lc                  # lead code (0 none, 1 all, 2 bitmap; always 0 outside content)
    bint fast               # 8 bytes readable past both streams (the 64-bit-load decoder)


# One field of a segment being written: terms (u32), offsets (u32, starts with 0), list bytes;
# byte buffers (itemsize 1) grown without the GIL.
cdef struct FieldOut:
    GArr terms
    GArr offsets
    GArr data
    bint lead               # content: the blocks carry lead flags


cdef class _Segment:
    cdef SegView v
    cdef list arrays        # numpy arrays that hold the memory, 3 per field
    cdef list bm_arrays     # numpy arrays of the block maxima, 3 per field
    cdef list bx_arrays     # the filter maxima, 1 per field (empty: not known)
    cdef uint8_t* checked_mem   # the checked[] bytes of the three fields (NULL: none)
    # Built here (a flush or a merge) and never handed out since (SearchIndex.freeze, to_arrays):
    # a merge that replaces it may give its lists' pages back as it reads past them (_merge).
    cdef bint private


# ---- small helpers ---------------------------------------------------------------------------

cdef inline int _cmp_u32(const void* a, const void* b) noexcept nogil:
    cdef uint32_t x = (<const uint32_t*>a)[0]
    cdef uint32_t y = (<const uint32_t*>b)[0]
    return (x > y) - (x < y)

cdef inline int _cmp_u64(const void* a, const void* b) noexcept nogil:
    cdef uint64_t x = (<const uint64_t*>a)[0]
    cdef uint64_t y = (<const uint64_t*>b)[0]
    return (x > y) - (x < y)


cdef inline int64_t lower_bound_u32(const uint32_t* a, int64_t lo, int64_t n,
                                    uint32_t x) noexcept nogil:
    """First index in [lo, n) with a[i] >= x (n when none)."""
    cdef int64_t hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t _sort_unique_u32(uint32_t* a, int64_t n) noexcept nogil:
    """Sort ascending and drop repeats in place; returns the new length."""
    cdef int64_t i, m = 0
    if n > 1:
        qsort(a, <size_t>n, 4, _cmp_u32)
    for i in range(n):
        if i == 0 or a[i] != a[m - 1]:
            a[m] = a[i]
            m += 1
    return m


cdef inline int _nbits(uint32_t v) noexcept nogil:
    return 0 if v == 0 else 32 - __builtin_clz(v)


# ---- varints ---------------------------------------------------------------------------------

cdef inline int64_t _put_varint(uint8_t* out, int64_t o, uint64_t v) noexcept nogil:
    while v >= 0x80:
        out[o] = <uint8_t>((v & 0x7F) | 0x80)
        o += 1
        v >>= 7
    out[o] = <uint8_t>v
    return o + 1


cdef inline const uint8_t* varint_trusted(const uint8_t* p, uint64_t* v) noexcept nogil:
    """A varint of a list this process encoded or validated: no bound, no length limit."""
    cdef uint64_t x = 0
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        byte = p[0]
        x |= <uint64_t>(byte & 0x7F) << shift
        shift += 7
        p += 1
        if byte < 0x80:
            break
    v[0] = x
    return p


cdef inline const uint8_t* varint_checked(const uint8_t* p, const uint8_t* end,
                                          uint64_t* v) noexcept nogil:
    """A varint of untrusted bytes: stays before end and reads at most 5 bytes (NULL when it
    cannot)."""
    cdef uint64_t x = 0
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        if p >= end or shift > 28:
            return NULL
        byte = p[0]
        x |= <uint64_t>(byte & 0x7F) << shift
        shift += 7
        p += 1
        if byte < 0x80:
            break
    v[0] = x
    return p


# ---- bit streams -----------------------------------------------------------------------------

cdef inline const uint8_t* _unpack(const uint8_t* p, int64_t n, int bits,
                                   uint32_t* out) noexcept nogil:
    """n values of `bits` bits from a little-endian bit stream; returns the first byte after."""
    cdef uint64_t acc = 0, mask
    cdef int fill = 0
    cdef int64_t i
    if bits == 0:
        memset(out, 0, <size_t>(4 * n))
        return p
    mask = (<uint64_t>1 << bits) - 1
    for i in range(n):
        while fill < bits:
            acc |= <uint64_t>p[0] << fill
            p += 1
            fill += 8
        out[i] = <uint32_t>(acc & mask)
        acc >>= bits
        fill -= bits
    return p


cdef inline void _unpack_fast(const uint8_t* p, int64_t n, int bits, uint32_t* out) noexcept nogil:
    """_unpack with one unaligned 64-bit load a value: p must have 8 readable bytes past the
    stream."""
    cdef uint64_t w, mask = (<uint64_t>1 << bits) - 1
    cdef int64_t i, i0 = cm_unpack_groups(p, n, bits, out), bp = i0 * bits
    for i in range(i0, n):                            # (the last n % 8: one at a time)
        memcpy(&w, p + (bp >> 3), 8)
        out[i] = <uint32_t>((w >> (bp & 7)) & mask)
        bp += bits


# ---- reading a list --------------------------------------------------------------------------

cdef inline const uint8_t* _open_list(PList* L, const uint8_t* p, const uint8_t* end,
                                      int field) noexcept nogil:
    """Read a list's header; `end` is the end of the field's data (for the fast decoder)."""
    cdef uint64_t n, first
    p = varint_trusted(p, &n)
    p = varint_trusted(p, &first)
    L.n = <int64_t>n
    L.first = <uint32_t>first
    L.nb = (L.n + IX_BLOCK - 1) // IX_BLOCK
    if L.nb > 1:
        L.skip = p
        p += 8 * L.nb
    else:
        L.skip = NULL
    L.payload = p
    L.end = end
    L.bm = NULL
    L.bx = NULL
    L.field = field
    CM_ASSERT(L.n >= 1 and p <= end)
    return p


cdef inline uint32_t _block_last(const PList* L, int64_t j) noexcept nogil:
    """The last doc of block j (only for lists with a skip table)."""
    return load_u32(L.skip + 8 * j)


cdef inline void _block_header(const PList* L, int64_t j, BlockHdr* h) noexcept nogil:
    """Where block j starts, the doc before it, its size and its header byte."""
    cdef const uint8_t* p = L.payload
    cdef int code
    CM_ASSERT(0 <= j and j < L.nb)
    h.prev = L.first - 1                              # wraps at doc 0: the deltas still do
    h.cnt = IX_BLOCK
    if L.nb > 1:
        p = L.payload + load_u32(L.skip + 8 * j + 4)
        if j > 0:
            h.prev = load_u32(L.skip + 8 * (j - 1))
    if j == L.nb - 1:
        h.cnt = L.n - IX_BLOCK * j
    CM_ASSERT(p < L.end and 0 < h.cnt and h.cnt <= IX_BLOCK)
    h.db = p[0] & 63
    code = p[0] >> 6
    h.tb = 8 if code == 3 else code
    if L.field == 0:
        h.lc = p[1]
        h.dp = p + 2
    else:
        h.lc = 0
        h.dp = p + 1
    h.tp = h.dp + (h.cnt * h.db + 7) // 8
    h.lp = h.tp + (h.cnt * h.tb + 7) // 8
    h.fast = L.end - h.tp >= (h.cnt * h.tb + 7) // 8 + 8
    CM_ASSERT(h.db <= 32 and h.lc <= 2
              and h.lp + ((h.cnt + 7) // 8 if h.lc == 2 else 0) <= L.end)


cdef inline void _or_lead_bits(const uint8_t* lp, int64_t cnt, uint8_t* tfs) noexcept nogil:
    """Set IX_LEAD in tfs[i] for each bit i of the bitmap lp, eight at a time: the byte is copied
    into the eight bytes of a word, byte k keeps bit k, and adding 0x7F to each carries it into
    bit 7 (no carry crosses bytes). tfs has room for IX_BLOCK bytes: a last partial group writes
    only zeros' ORs past cnt (the bitmap's padding bits are 0)."""
    cdef uint64_t w, t
    cdef int64_t b
    for b in range((cnt + 7) >> 3):
        w = ((<uint64_t>lp[b] * <uint64_t>0x0101010101010101) & <uint64_t>0x8040201008040201)
        w = (w + <uint64_t>0x7F7F7F7F7F7F7F7F) & <uint64_t>0x8080808080808080
        memcpy(&t, tfs + 8 * b, 8)
        t |= w
        memcpy(tfs + 8 * b, &t, 8)


cdef inline int64_t _block(const PList* L, int64_t j, uint32_t* docs, uint8_t* tfs) noexcept nogil:
    """Decode block j of L into docs (and tfs unless NULL); returns its posting count."""
    cdef BlockHdr h
    cdef uint32_t tv[IX_BLOCK]
    cdef uint32_t prev
    cdef int64_t i, cnt
    _block_header(L, j, &h)
    cnt = h.cnt
    prev = h.prev
    if h.db == 0:
        for i in range(cnt):
            prev += 1
            docs[i] = prev
    else:
        if h.fast:
            _unpack_fast(h.dp, cnt, h.db, docs)
        else:
            _unpack(h.dp, cnt, h.db, docs)
        for i in range(cnt):
            prev += docs[i] + 1
            docs[i] = prev
    if CM_DEBUG:                                      # doc ids strictly ascending, block bounds
        for i in range(1, cnt):
            CM_ASSERT(docs[i] > docs[i - 1])
        CM_ASSERT(L.nb == 1 or docs[cnt - 1] == _block_last(L, j))
    if tfs != NULL:
        if h.tb == 0:
            # A loop, not memset(tfs, 1, cnt): a count that is not positive (which the
            # invariant above excludes, but the compiler cannot see through the inlined
            # callers) then writes nothing instead of becoming a huge size_t (gcc's
            # -Wstringop-overflow warned on that path). gcc vectorises the loop.
            for i in range(cnt):
                tfs[i] = 1
        else:
            if h.fast:
                _unpack_fast(h.tp, cnt, h.tb, tv)
            else:
                _unpack(h.tp, cnt, h.tb, tv)
            for i in range(cnt):
                tfs[i] = <uint8_t>(tv[i] + 1)
        if h.lc == 1:
            for i in range(cnt):
                tfs[i] |= IX_LEAD
        elif h.lc == 2:
            _or_lead_bits(h.lp, cnt, tfs)
    return cnt


cdef inline int64_t _find_block(const PList* L, int64_t lo, uint32_t d) noexcept nogil:
    """First block from lo whose last doc is >= d (nb when none); galloping over the skip table."""
    cdef int64_t step = 1, hi = lo, mid, n = L.nb
    if L.skip == NULL:
        return 0 if lo == 0 else n
    while hi < n and _block_last(L, hi) < d:
        lo = hi + 1
        hi = lo + step
        step <<= 1
    if hi > n:
        hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if _block_last(L, mid) < d:
            lo = mid + 1
        else:
            hi = mid
    return lo


# ---- postings.pyx: once per list check, segment build or merge -------------------------------

# Decode one whole list from untrusted bytes: its posting count when p..end is exactly one
# canonical list with doc ids below doc_hi, else -1.
cdef int64_t _list_check(const uint8_t* p, const uint8_t* end, uint32_t doc_hi,
                         int field) noexcept nogil
# 1 when every list of one field (offsets, data: numpy arrays) passes _list_check, else 0.
cdef int _lists_ok(object offsets, object data, uint32_t doc_hi, int field) except -1

# Whether list li of fp may be read: 0 when it passed _list_check (now or before), -1 when its
# bytes are damaged (it must not be read then).
cdef inline int _list_ready(const FieldPostings* fp, int64_t li) noexcept nogil:
    cdef int64_t n, bi, nb
    if fp.checked == NULL or fp.checked[li]:
        return 0
    n = _list_check(fp.data + fp.offsets[li], fp.data + fp.offsets[li + 1], fp.doc_hi,
                    fp.field)
    if n < 0:
        return -1
    if fp.n_bm:                                       # its stored block maxima: one per block
        bi = lower_bound_u32(fp.bm_terms, 0, fp.n_bm, <uint32_t>li)
        if bi < fp.n_bm and fp.bm_terms[bi] == <uint32_t>li:
            nb = (fp.bm_off[bi + 1] if bi + 1 < fp.n_bm else fp.n_bmv) - <int64_t>fp.bm_off[bi]
            if nb != (n + IX_BLOCK - 1) // IX_BLOCK:
                return -1
    fp.checked[li] = 1
    return 0

# Check every list of s not checked yet (before a merge or a scan of all lists); ValueError
# when one is damaged.
cdef int _seg_check_all(_Segment s) except -1
# The segment of from_arrays: 9 arrays, block maxima either given (bm: 9 arrays, bm_cb: 3
# values, validated against the lists' block counts) or computed as _segment does (bm None);
# its lists are checked lazily (_list_ready).
cdef _Segment _adopted_segment(uint32_t doc_hi, list arrays, object bm, object bm_cb, object bx,
                               const DocCols* cols, const double* c0, const double* cb)

# A segment of 9 arrays (terms, offsets, data for each field); the doc columns (every doc of
# the segment) and the index's length normalisation c0 + cb * len give the block maxima.
cdef _Segment _segment(uint32_t doc_lo, uint32_t doc_hi, list arrays, const DocCols* cols,
                       const double* c0, const double* cb)
cdef list _empty_field_arrays()
cdef bint _nonempty(_Segment s) noexcept
# The buffer's postings as a segment of docs [lo, hi) (dead docs dropped), or None when no live
# posting is left: terms (sorted) are the buffered term ids, each with a chain head[t] of
# postings newest first (b_doc, b_tf, b_field, next link b_next, -1 ends a chain).
cdef object _chains_segment(const uint32_t* terms, int64_t nbt, const int32_t* head,
                            const uint32_t* b_doc, const uint8_t* b_tf, const uint8_t* b_field,
                            const int32_t* b_next, const uint8_t* meta, uint32_t lo, uint32_t hi,
                            const DocCols* cols, const double* c0, const double* cb)
# One segment with the live postings of `segs` (ascending doc ranges); dmap/tmap (may be NULL)
# renumber docs/terms and must be increasing on what is kept. With `release` the caller drops
# `segs` once it returns: their private lists' pages go back to the kernel as the merge reads
# past them (DamagedPostings if anything then fails: they are unreadable; the store rebuilds its
# state from the log on it).
cdef _Segment _merge(list segs, const uint8_t* meta, const int64_t* dmap, const int64_t* tmap,
                     const DocCols* cols, uint32_t doc_lo, uint32_t doc_hi, const double* c0,
                     const double* cb, bint release=*)
# The segments, marked as no longer private (their arrays or the segments go out of the index).
cdef list _handed_out(list segs)
# Each field's list bytes of a private segment, of at least min_bytes and held by nothing else,
# replaced by take(data)'s array of the same bytes (a spill file's mapping) unless it answers
# None; the bytes moved. The caller copies the segment's views again.
cdef int64_t _spill(_Segment s, object take, int64_t min_bytes) except -1
# Field f's list bytes read from `new` instead (the same bytes mapped from the snapshot just
# written, in place of a spill's) when nothing but the segment holds the array they are in now:
# whether it did. The caller holds the index's lock, with no merge of the segment running, and
# copies the segment's views again.
cdef bint _adopt_data(_Segment s, int f, object new) except -1
# The merge policy after a flush: the newest segments merged, F at a time (2 a binary counter).
cdef list _merge_newest(list segs, int64_t F, const uint8_t* meta, const DocCols* cols,
                        const double* c0, const double* cb)
# Character lists of segment seg (every list is checked first: ValueError when one is damaged):
# for each code point c of the CJK unigram and bigram keys (keys[0:T], by term id) whose group
# (docs/SCORING.md "Term groups") has at least min_postings postings in seg, one list per field
# holding, per doc, the sum of the group's tfs capped at IX_TF_CAP. Returns (chars: uint32
# ascending, df: uint32 by char, the live docs (cols.meta) of seg holding the group in any
# field, a segment over seg's docs whose terms are those code points, its block maxima and
# filter maxima taken with cols and c0 / cb), or None when no character qualifies.
cdef object _char_segment(_Segment seg, const uint64_t* keys, int64_t T, int64_t min_postings,
                          const DocCols* cols, const double* c0, const double* cb)

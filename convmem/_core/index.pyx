"""Compiled search index: term dictionary, postings segments, BM25F with filters, top-k.

Scoring is defined in docs/SCORING.md; `pyindex` is the readable twin and the test oracle.

Structures (all memory through PyMem_* or numpy, so tracemalloc sees it; `nbytes()` sums
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
  ids, uint32 byte offsets, compressed lists: format in "postings codec" below) held in numpy
  arrays. New docs go to a buffer (per-term linked chains of postings) that becomes a segment at
  IX_BUF_DOCS docs or IX_BUF_POSTINGS postings; the newest segments merge while the older one is
  not larger (a binary counter: O(log N) segments, each posting re-encoded O(log N) times; a list
  that only one of the merged segments holds is copied as it is). Merges drop dead docs.
- Derived columns for the pruning bounds, filled at search time for the docs added since: one-byte
  field length codes (content apart from summary and tags), and a one-bit-per-doc map used to
  count the df of multi-key groups.
- Scoring scratch (`_Scratch`, one per scoring thread): window-sized arrays (4096 docs) and
  arrays sized by the query; nothing grows with the corpus. Top k: see "top k, document at a
  time in windows" below and docs/SCORING.md.

The scoring and merge loops run without the GIL; every public method that reads or changes the
index holds the index's own lock, so threads may share an index (one operation at a time).
"""
cimport numpy as cnp
from cpython.mem cimport (PyMem_Free, PyMem_Malloc, PyMem_RawFree, PyMem_RawRealloc,
                          PyMem_Realloc)
from libc.math cimport INFINITY, log, nextafterf
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport qsort
from libc.string cimport memcmp, memcpy, memset

import threading

import numpy as np

cnp.import_array()

ARRAYS_FORMAT = IX_ARRAYS_FORMAT
FIELDS = ("content", "summary", "tags")

cdef double EPS = 1e-9          # relative margin of the pruning bounds (docs/SCORING.md)
cdef uint32_t NO_DOC = 0xFFFFFFFF
cdef uint64_t CP_MASK = 0x1FFFFF


# ---- growable arrays ---------------------------------------------------------------------------

cdef inline void garr_init(GArr* a, int64_t itemsize) noexcept:
    a.data = NULL
    a.len = 0
    a.cap = 0
    a.itemsize = itemsize
    a.owned = True


cdef int garr_reserve(GArr* a, int64_t n) except -1:
    """Make room for `n` elements in owned memory (borrowed memory is copied first)."""
    cdef int64_t cap
    cdef char* p
    if n <= a.cap and a.owned:
        return 0
    if n <= a.len:
        cap = a.len                                   # copy-on-write without growth
    else:
        # 1/8 growth: large blocks are remapped by realloc, not copied, and capacity is memory
        cap = max(n, a.cap + a.cap // 8, 16)
    if a.owned:
        p = <char*>PyMem_Realloc(a.data, <size_t>(cap * a.itemsize))
    else:
        p = <char*>PyMem_Malloc(<size_t>(cap * a.itemsize))
        if p != NULL and a.len > 0:
            memcpy(p, a.data, <size_t>(a.len * a.itemsize))
    if p == NULL:
        raise MemoryError()
    a.data = p
    a.cap = cap
    a.owned = True
    return 0


cdef inline int garr_own(GArr* a) except -1:
    if not a.owned:
        garr_reserve(a, a.len)
    return 0


cdef void garr_free(GArr* a) noexcept:
    if a.owned and a.data != NULL:
        PyMem_Free(a.data)
    a.data = NULL
    a.len = 0
    a.cap = 0
    a.owned = True


cdef inline int64_t garr_bytes(const GArr* a) noexcept:
    return a.cap * a.itemsize


cdef int garr_borrow(GArr* a, cnp.ndarray arr, list keep) except -1:
    """Point at a contiguous numpy array's memory without copying it."""
    garr_free(a)
    a.data = <char*>cnp.PyArray_DATA(arr)
    a.len = arr.nbytes // a.itemsize
    a.cap = a.len
    a.owned = False
    keep.append(arr)
    return 0


cdef int garr_extend(GArr* a, int64_t n, bint zero) except -1:
    """Grow the length to n (capacity geometrically), zeroing the new elements if asked."""
    if a.len < n:
        garr_reserve(a, n)
        if zero:
            memset(a.data + a.len * a.itemsize, 0, <size_t>((n - a.len) * a.itemsize))
        a.len = n
    return 0


cdef object garr_to_numpy(const GArr* a, object dtype, tuple shape):
    out = np.empty(shape, dtype=dtype)
    if a.len > 0:
        memcpy(cnp.PyArray_DATA(out), a.data, <size_t>(a.len * a.itemsize))
    return out


# ---- small helpers -----------------------------------------------------------------------------

cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL
    return z ^ (z >> 31)


cdef int _cmp_u64(const void* a, const void* b) noexcept nogil:
    cdef uint64_t x = (<const uint64_t*>a)[0]
    cdef uint64_t y = (<const uint64_t*>b)[0]
    return (x > y) - (x < y)


cdef int _cmp_u32(const void* a, const void* b) noexcept nogil:
    cdef uint32_t x = (<const uint32_t*>a)[0]
    cdef uint32_t y = (<const uint32_t*>b)[0]
    return (x > y) - (x < y)


cdef inline int64_t lower_bound_u32(const uint32_t* a, int64_t lo, int64_t n, uint32_t x) noexcept nogil:
    """First index in [lo, n) with a[i] >= x (n when none)."""
    cdef int64_t hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef extern from *:
    void __builtin_prefetch(const void*) nogil


cdef int64_t _sort_unique_u32(uint32_t* a, int64_t n) noexcept nogil:
    """Sort ascending and drop repeats in place; returns the new length."""
    cdef int64_t i, m = 0
    if n > 1:
        qsort(a, <size_t>n, 4, _cmp_u32)
    for i in range(n):
        if i == 0 or a[i] != a[m - 1]:
            a[m] = a[i]
            m += 1
    return m


# ---- postings codec ----------------------------------------------------------------------------
# One posting list (one term, one field, one segment; doc ids ascending, tf 1..255):
#
#   varint n                      postings in the list (>= 1); LEB128, 7 bits a byte, low first
#   varint first                  the first doc id (absolute: a list reads the same in any segment)
#   skip[nb]                      only when nb = ceil(n / 128) > 1: per block, u32 last doc id and
#                                 u32 offset of the block from the start of the payload (LE)
#   payload: per block of 128 postings (the last one may be shorter):
#     u8 hdr                      bits 0-5: doc bits B (0..32); bits 6-7: tf code (0, 1, 2, 3 =
#                                 0, 1, 2, 8 tf bits T)
#     docs                        cnt values of B bits, little-endian bit stream, byte-padded:
#                                 doc[i] - prev - 1, prev = the previous doc (first - 1 before the
#                                 list, the skip entry's last doc before a later block)
#     tfs                         cnt values of T bits (tf - 1), byte-padded; none when all are 1

cdef extern from *:
    int __builtin_clz(unsigned int) nogil


cdef inline int _nbits(uint32_t v) noexcept nogil:
    return 0 if v == 0 else 32 - __builtin_clz(v)


cdef inline uint32_t _rd32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline void _wr32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>v
    p[1] = <uint8_t>(v >> 8)
    p[2] = <uint8_t>(v >> 16)
    p[3] = <uint8_t>(v >> 24)


cdef inline int64_t _put_varint(uint8_t* out, int64_t o, uint64_t v) noexcept nogil:
    while v >= 0x80:
        out[o] = <uint8_t>((v & 0x7F) | 0x80)
        o += 1
        v >>= 7
    out[o] = <uint8_t>v
    return o + 1


cdef inline const uint8_t* _get_varint(const uint8_t* p, uint64_t* v) noexcept nogil:
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


cdef int64_t _pack(const uint32_t* v, int64_t n, int bits, uint8_t* out) noexcept nogil:
    """n values of `bits` bits as a little-endian bit stream; returns the bytes written."""
    cdef uint64_t acc = 0
    cdef int fill = 0
    cdef int64_t o = 0, i
    if bits == 0:
        return 0
    for i in range(n):
        acc |= <uint64_t>v[i] << fill
        fill += bits
        while fill >= 8:
            out[o] = <uint8_t>acc
            o += 1
            acc >>= 8
            fill -= 8
    if fill > 0:
        out[o] = <uint8_t>acc
        o += 1
    return o


cdef const uint8_t* _unpack(const uint8_t* p, int64_t n, int bits, uint32_t* out) noexcept nogil:
    """The inverse of _pack; returns the first byte after the stream."""
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
    cdef int64_t i, bp = 0
    for i in range(n):
        memcpy(&w, p + (bp >> 3), 8)
        out[i] = <uint32_t>((w >> (bp & 7)) & mask)
        bp += bits


cdef inline int64_t _encode_bound(int64_t n) noexcept nogil:
    return 20 + 9 * ((n + IX_BLOCK - 1) // IX_BLOCK) + 5 * n


cdef int64_t _encode_list(const uint32_t* docs, const uint8_t* tfs, int64_t n,
                          uint8_t* out) noexcept nogil:
    """Encode one posting list (n >= 1) into out (_encode_bound(n) bytes); returns its size."""
    cdef uint32_t vals[IX_BLOCK]
    cdef int64_t o, skip, pay, nb, j, lo, cnt, i
    cdef uint32_t prev, maxv, maxt
    cdef int db, code
    o = _put_varint(out, 0, <uint64_t>n)
    o = _put_varint(out, o, docs[0])
    nb = (n + IX_BLOCK - 1) // IX_BLOCK
    skip = o
    if nb > 1:
        o += 8 * nb
    pay = o
    prev = docs[0] - 1                                # wraps at doc 0: the deltas still do
    for j in range(nb):
        lo = j * IX_BLOCK
        cnt = min(<int64_t>IX_BLOCK, n - lo)
        if nb > 1:
            _wr32(out + skip + 8 * j, docs[lo + cnt - 1])
            _wr32(out + skip + 8 * j + 4, <uint32_t>(o - pay))
        maxv = 0
        maxt = 0
        for i in range(cnt):
            vals[i] = docs[lo + i] - prev - 1
            prev = docs[lo + i]
            maxv |= vals[i]
            maxt |= <uint32_t>(tfs[lo + i] - 1)
        db = _nbits(maxv)
        code = 0 if maxt == 0 else (1 if maxt <= 1 else (2 if maxt <= 3 else 3))
        out[o] = <uint8_t>(db | (code << 6))
        o += 1
        o += _pack(vals, cnt, db, out + o)
        if code:
            for i in range(cnt):
                vals[i] = <uint32_t>(tfs[lo + i] - 1)
            o += _pack(vals, cnt, 8 if code == 3 else code, out + o)
    return o


cdef inline const uint8_t* _open_list(PList* L, const uint8_t* p, const uint8_t* end) noexcept nogil:
    """Read a list's header; `end` is the end of the field's data (for the fast decoder)."""
    cdef uint64_t n, first
    cdef const uint8_t* last
    p = _get_varint(p, &n)
    p = _get_varint(p, &first)
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
    return p


cdef int64_t _block(const PList* L, int64_t j, uint32_t* docs, uint8_t* tfs) noexcept nogil:
    """Decode block j of L into docs (and tfs unless NULL); returns its posting count."""
    cdef const uint8_t* p = L.payload
    cdef uint32_t prev = L.first - 1
    cdef uint32_t tv[IX_BLOCK]
    cdef int64_t cnt = IX_BLOCK, i
    cdef int code, db, tb
    cdef bint fast
    cdef uint8_t hdr
    if L.nb > 1:
        p = L.payload + _rd32(L.skip + 8 * j + 4)
        if j > 0:
            prev = _rd32(L.skip + 8 * (j - 1))
    if j == L.nb - 1:
        cnt = L.n - IX_BLOCK * j
    hdr = p[0]
    db = hdr & 63
    code = hdr >> 6
    tb = 8 if code == 3 else code
    p += 1
    fast = L.end - p >= (cnt * db + 7) // 8 + (cnt * tb + 7) // 8 + 8
    if db == 0:
        for i in range(cnt):
            prev += 1
            docs[i] = prev
    else:
        if fast:
            _unpack_fast(p, cnt, db, docs)
        else:
            _unpack(p, cnt, db, docs)
        for i in range(cnt):
            prev += docs[i] + 1
            docs[i] = prev
    if tfs != NULL:
        if code == 0:
            memset(tfs, 1, <size_t>cnt)
        else:
            p += (cnt * db + 7) // 8
            if fast:
                _unpack_fast(p, cnt, tb, tv)
            else:
                _unpack(p, cnt, tb, tv)
            for i in range(cnt):
                tfs[i] = <uint8_t>(tv[i] + 1)
    return cnt


# A position inside one block of a list, for probing docs in ascending order without decoding
# the whole block: values are read one at a time up to the doc looked for.
cdef struct Cursor:
    const uint8_t* dp       # the block's doc stream
    const uint8_t* tp       # its tf stream
    int64_t blk             # the block (-1: none yet)
    int64_t i               # values read
    int64_t cnt
    uint32_t prev           # the last doc read
    int db
    int tb
    bint fast               # 8 bytes readable past both streams


cdef inline uint32_t _bits_at(const uint8_t* p, int64_t i, int bits, bint fast) noexcept nogil:
    """Value i of a bit stream of `bits`-bit values."""
    cdef int64_t bp = i * bits
    cdef uint64_t w = 0
    cdef int k, nbytes
    if fast:
        memcpy(&w, p + (bp >> 3), 8)
    else:
        nbytes = ((bp & 7) + bits + 7) >> 3
        for k in range(nbytes):
            w |= <uint64_t>p[(bp >> 3) + k] << (8 * k)
    return <uint32_t>((w >> (bp & 7)) & ((<uint64_t>1 << bits) - 1))


cdef inline void _cur_open(const PList* L, Cursor* c, int64_t j) noexcept nogil:
    cdef const uint8_t* p = L.payload
    cdef int code
    c.prev = L.first - 1
    c.cnt = IX_BLOCK
    if L.nb > 1:
        p = L.payload + _rd32(L.skip + 8 * j + 4)
        if j > 0:
            c.prev = _rd32(L.skip + 8 * (j - 1))
    if j == L.nb - 1:
        c.cnt = L.n - IX_BLOCK * j
    c.db = p[0] & 63
    code = p[0] >> 6
    c.tb = 8 if code == 3 else code
    c.dp = p + 1
    c.tp = c.dp + (c.cnt * c.db + 7) // 8
    c.fast = L.end - c.tp >= (c.cnt * c.tb + 7) // 8 + 8
    c.blk = j
    c.i = 0


cdef inline uint32_t _seek(Cursor* c, uint32_t d) noexcept nogil:
    """Read on to doc d in the cursor's block: its tf, or 0 when the block does not hold it
    (then the cursor stays before the first doc above d)."""
    cdef uint32_t v
    while c.i < c.cnt:
        v = c.prev + 1 + (_bits_at(c.dp, c.i, c.db, c.fast) if c.db else 0)
        if v > d:
            return 0
        c.prev = v
        c.i += 1
        if v == d:
            return _bits_at(c.tp, c.i - 1, c.tb, c.fast) + 1 if c.tb else 1
    return 0


cdef inline uint32_t _block_last(const PList* L, int64_t j) noexcept nogil:
    """The last doc of block j (only for lists with a skip table)."""
    return _rd32(L.skip + 8 * j)


cdef int64_t _find_block(const PList* L, int64_t lo, uint32_t d) noexcept nogil:
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


cdef inline const uint8_t* _get_varint_in(const uint8_t* p, const uint8_t* end,
                                          uint64_t* v) noexcept nogil:
    """_get_varint that stays before end and reads at most 5 bytes (NULL when it cannot)."""
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


cdef int64_t _list_check(const uint8_t* p, const uint8_t* end, uint32_t doc_hi) noexcept nogil:
    """Decode one whole list from untrusted bytes: its posting count when p..end is exactly one
    canonical list with doc ids below doc_hi, else -1."""
    cdef PList L
    cdef uint64_t n, first
    cdef uint32_t docs[IX_BLOCK]
    cdef const uint8_t* q
    cdef const uint8_t* pay
    cdef int64_t j, cnt, need, nb
    cdef uint64_t prev, d
    cdef int db, tb, i
    q = _get_varint_in(p, end, &n)
    if q == NULL or n == 0 or n > <uint64_t>0xFFFFFFFF:
        return -1
    q = _get_varint_in(q, end, &first)
    if q == NULL or first >= doc_hi:
        return -1
    nb = (<int64_t>n + IX_BLOCK - 1) // IX_BLOCK
    if nb > 1 and end - q < 8 * nb:
        return -1
    _open_list(&L, p, end)
    pay = L.payload
    q = pay
    prev = <uint64_t>first
    for j in range(nb):
        cnt = min(<int64_t>IX_BLOCK, <int64_t>n - IX_BLOCK * j)
        if nb > 1 and _rd32(L.skip + 8 * j + 4) != <uint32_t>(q - pay):
            return -1
        if q >= end:
            return -1
        db = q[0] & 63
        tb = q[0] >> 6
        tb = 8 if tb == 3 else tb
        need = (cnt * db + 7) // 8 + (cnt * tb + 7) // 8
        if db > 32 or end - (q + 1) < need:
            return -1
        _unpack(q + 1, cnt, db, docs)
        for i in range(cnt):
            d = docs[i] + (prev + 1 if i > 0 or j > 0 else first)
            if (j == 0 and i == 0 and docs[i] != 0) or d >= doc_hi:
                return -1
            prev = d
        if nb > 1 and _rd32(L.skip + 8 * j) != <uint32_t>prev:
            return -1
        if tb == 8:                                   # tf - 1 must stay below 255
            _unpack(q + 1 + (cnt * db + 7) // 8, cnt, 8, docs)
            for i in range(cnt):
                if docs[i] >= IX_TF_CAP:
                    return -1
        q += 1 + need
    if q != end:
        return -1
    return <int64_t>n


# ---- segments ----------------------------------------------------------------------------------

cdef class _Segment:
    """One immutable postings segment; `arrays` holds its memory (numpy, maybe a read-only mmap),
    `bm_arrays` its block maxima."""

    def __cinit__(self):
        self.arrays = []
        self.bm_arrays = []


cdef int64_t _bm_fill(const FieldPostings* fp, const uint32_t* lens, int f, double c0, double cb,
                      uint32_t* bterms, uint32_t* boff, float* bm, int64_t* n_blocks) noexcept nogil:
    """The block maxima of one field's lists of more than one block (see FieldPostings); with
    bm NULL only counts. Returns the number of such lists; n_blocks gets their blocks."""
    cdef int64_t li, j, i, c, nl = 0, nbk = 0
    cdef PList L
    cdef uint32_t bd[IX_BLOCK]
    cdef uint8_t bt[IX_BLOCK]
    cdef double mx, v
    cdef float r
    for li in range(fp.n_terms):
        _open_list(&L, fp.data + fp.offsets[li], fp.data + fp.n_bytes)
        if L.nb < 2:
            continue
        if bm != NULL:
            bterms[nl] = <uint32_t>li
            boff[nl] = <uint32_t>nbk
            for j in range(L.nb):
                c = _block(&L, j, bd, bt)
                mx = 0.0
                for i in range(c):
                    v = <double>bt[i] / (c0 + cb * <double>lens[3 * <int64_t>bd[i] + f])
                    if v > mx:
                        mx = v
                r = <float>mx
                if <double>r < mx:                    # round up: it is a bound
                    r = nextafterf(r, INFINITY)
                bm[nbk + j] = r
        nl += 1
        nbk += L.nb
    n_blocks[0] = nbk
    return nl


cdef _Segment _segment(uint32_t doc_lo, uint32_t doc_hi, list arrays, const uint32_t* lens,
                       const double* c0, const double* cb):
    """Wrap 9 arrays (terms, offsets, data for each field) as a segment; `lens` (the doc field
    lengths, 3 a doc, for every doc of the segment) gives the block maxima, taken with the
    length normalisation 1 / (c0 + cb * len) of the index statistics now (see FieldPostings)."""
    cdef _Segment s = _Segment.__new__(_Segment)
    cdef cnp.ndarray terms, offsets, data, bterms, boff, bm
    cdef int64_t nl, nbk = 0
    cdef int f
    s.arrays = arrays
    s.v.doc_lo = doc_lo
    s.v.doc_hi = doc_hi
    s.v.n_dead = 0
    for f in range(3):
        terms = arrays[3 * f]
        offsets = arrays[3 * f + 1]
        data = arrays[3 * f + 2]
        s.v.f[f].terms = <const uint32_t*>cnp.PyArray_DATA(terms)
        s.v.f[f].offsets = <const uint32_t*>cnp.PyArray_DATA(offsets)
        s.v.f[f].data = <const uint8_t*>cnp.PyArray_DATA(data)
        s.v.f[f].n_terms = terms.shape[0]
        s.v.f[f].n_bytes = data.shape[0]
        with nogil:
            nl = _bm_fill(&s.v.f[f], lens, f, c0[f], cb[f], NULL, NULL, NULL, &nbk)
        bterms = np.empty(nl, dtype=np.uint32)
        boff = np.empty(nl, dtype=np.uint32)
        bm = np.empty(nbk, dtype=np.float32)
        with nogil:
            _bm_fill(&s.v.f[f], lens, f, c0[f], cb[f], <uint32_t*>cnp.PyArray_DATA(bterms),
                     <uint32_t*>cnp.PyArray_DATA(boff), <float*>cnp.PyArray_DATA(bm), &nbk)
        s.v.f[f].bm_terms = <const uint32_t*>cnp.PyArray_DATA(bterms)
        s.v.f[f].bm_off = <const uint32_t*>cnp.PyArray_DATA(boff)
        s.v.f[f].bm = <const float*>cnp.PyArray_DATA(bm)
        s.v.f[f].bm_cb = cb[f]
        s.v.f[f].n_bm = nl
        s.bm_arrays += [bterms, boff, bm]
    return s


cdef list _empty_field_arrays():
    return [np.empty(0, dtype=np.uint32), np.zeros(1, dtype=np.uint32), np.empty(0, dtype=np.uint8)]


# -- building segments without the GIL

cdef int rb_reserve(RawBuf* b, int64_t n) noexcept nogil:
    """Room for n bytes; -1 when memory runs out."""
    cdef int64_t cap
    cdef char* p
    if n <= b.cap:
        return 0
    cap = max(n, b.cap + b.cap // 2, 256)
    p = <char*>PyMem_RawRealloc(b.p, <size_t>cap)
    if p == NULL:
        return -1
    b.p = p
    b.cap = cap
    return 0


cdef void rb_free(RawBuf* b) noexcept nogil:
    PyMem_RawFree(b.p)
    b.p = NULL
    b.len = 0
    b.cap = 0


# One field of a segment being written: terms (u32), offsets (u32, starts with 0), list bytes.
cdef struct FieldOut:
    RawBuf terms
    RawBuf offsets
    RawBuf data


cdef int _out_init(FieldOut* o) noexcept nogil:
    memset(o, 0, sizeof(FieldOut))
    if rb_reserve(&o.offsets, 4) < 0:
        return -1
    (<uint32_t*>o.offsets.p)[0] = 0
    o.offsets.len = 4
    return 0


cdef void _out_free(FieldOut* o) noexcept nogil:
    rb_free(&o.terms)
    rb_free(&o.offsets)
    rb_free(&o.data)


cdef int _out_term(FieldOut* o, uint32_t tid) noexcept nogil:
    """Close the list just written to o.data as term tid's (-1: no memory, -2: over 4 GiB)."""
    if o.data.len > <int64_t>0xFFFFFFFF:
        return -2
    if rb_reserve(&o.terms, o.terms.len + 4) < 0 or rb_reserve(&o.offsets, o.offsets.len + 4) < 0:
        return -1
    (<uint32_t*>(o.terms.p + o.terms.len))[0] = tid
    (<uint32_t*>(o.offsets.p + o.offsets.len))[0] = <uint32_t>o.data.len
    o.terms.len += 4
    o.offsets.len += 4
    return 0


cdef int _out_list(FieldOut* o, uint32_t tid, const uint32_t* docs, const uint8_t* tfs,
                   int64_t n) noexcept nogil:
    if rb_reserve(&o.data, o.data.len + _encode_bound(n)) < 0:
        return -1
    o.data.len += _encode_list(docs, tfs, n, <uint8_t*>o.data.p + o.data.len)
    return _out_term(o, tid)


cdef list _out_arrays(FieldOut* o):
    """The field as three read-only numpy arrays (the raw buffers are freed)."""
    cdef int64_t nt = o.terms.len // 4
    terms = np.empty(nt, dtype=np.uint32)
    offsets = np.empty(nt + 1, dtype=np.uint32)
    data = np.empty(o.data.len, dtype=np.uint8)
    if nt:
        memcpy(cnp.PyArray_DATA(terms), o.terms.p, <size_t>o.terms.len)
    memcpy(cnp.PyArray_DATA(offsets), o.offsets.p, <size_t>o.offsets.len)
    if o.data.len:
        memcpy(cnp.PyArray_DATA(data), o.data.p, <size_t>o.data.len)
    _out_free(o)
    for a in (terms, offsets, data):
        a.flags.writeable = False
    return [terms, offsets, data]


cdef int _raise_build_error(int rc) except -1:
    if rc == -2:
        raise OverflowError("a segment field would hold more than 4 GiB of postings")
    raise MemoryError()


cdef int _merge_field(const SegView* views, int64_t k, int f, const uint8_t* meta,
                      const int64_t* dmap, const int64_t* tmap, int64_t* cur, FieldOut* out,
                      RawBuf* tdocs, RawBuf* ttfs) noexcept nogil:
    """k-way merge of one field of segments with ascending doc ranges, dropping dead docs.

    `dmap`/`tmap` (may be NULL) renumber docs/terms; both must be increasing on what is kept, so
    the output stays sorted. A list that only one segment holds, with nothing to drop or
    renumber, is copied as it is (lists hold absolute doc ids). Returns 0, -1 or -2 (_out_term).
    """
    cdef int64_t s, i, j, c, n, holders, only, lo, hi
    cdef uint32_t t, d
    cdef const FieldPostings* fp
    cdef PList L
    cdef uint32_t* od
    cdef uint8_t* ot
    cdef uint32_t bd[IX_BLOCK]
    cdef uint8_t bt[IX_BLOCK]
    cdef bint chk
    cdef int rc
    for s in range(k):
        cur[s] = 0
    while True:
        t = NO_DOC
        holders = 0
        only = 0
        for s in range(k):
            fp = &views[s].f[f]
            if cur[s] < fp.n_terms and fp.terms[cur[s]] <= t:
                if fp.terms[cur[s]] < t:
                    t = fp.terms[cur[s]]
                    holders = 0
                holders += 1
                only = s
        if holders == 0:
            break
        if holders == 1 and dmap == NULL and views[only].n_dead == 0:
            fp = &views[only].f[f]
            lo = fp.offsets[cur[only]]
            hi = fp.offsets[cur[only] + 1]
            cur[only] += 1
            if rb_reserve(&out.data, out.data.len + hi - lo) < 0:
                return -1
            memcpy(out.data.p + out.data.len, fp.data + lo, <size_t>(hi - lo))
            out.data.len += hi - lo
            rc = _out_term(out, <uint32_t>tmap[t] if tmap != NULL else t)
            if rc < 0:
                return rc
            continue
        n = 0
        for s in range(k):
            fp = &views[s].f[f]
            if cur[s] >= fp.n_terms or fp.terms[cur[s]] != t:
                continue
            chk = dmap != NULL or views[s].n_dead > 0
            _open_list(&L, fp.data + fp.offsets[cur[s]], fp.data + fp.n_bytes)
            cur[s] += 1
            if rb_reserve(tdocs, 4 * (n + L.n)) < 0 or rb_reserve(ttfs, n + L.n) < 0:
                return -1
            od = <uint32_t*>tdocs.p
            ot = <uint8_t*>ttfs.p
            for j in range(L.nb):
                c = _block(&L, j, bd, bt)
                for i in range(c):
                    d = bd[i]
                    if chk and not (meta[d] & IX_LIVE):
                        continue
                    od[n] = <uint32_t>dmap[d] if dmap != NULL else d
                    ot[n] = bt[i]
                    n += 1
        if n == 0:
            continue
        rc = _out_list(out, <uint32_t>tmap[t] if tmap != NULL else t, <uint32_t*>tdocs.p,
                       <uint8_t*>ttfs.p, n)
        if rc < 0:
            return rc
    return 0


cdef _Segment _merge(list segs, const uint8_t* meta, const int64_t* dmap, const int64_t* tmap,
                     const uint32_t* lens, uint32_t doc_lo, uint32_t doc_hi, const double* c0,
                     const double* cb):
    """One segment with the live postings of `segs` (ascending doc ranges)."""
    cdef int64_t k = len(segs), s
    cdef int f, rc = 0
    cdef SegView* views = <SegView*>PyMem_Malloc(<size_t>(k * sizeof(SegView) + 1))
    cdef int64_t* cur = <int64_t*>PyMem_Malloc(<size_t>(k * sizeof(int64_t) + 1))
    cdef list arrays = []
    cdef FieldOut out
    cdef RawBuf tdocs, ttfs
    memset(&out, 0, sizeof(FieldOut))
    memset(&tdocs, 0, sizeof(RawBuf))
    memset(&ttfs, 0, sizeof(RawBuf))
    try:
        if views == NULL or cur == NULL:
            raise MemoryError()
        for s in range(k):
            views[s] = (<_Segment>segs[s]).v
        for f in range(3):
            with nogil:
                rc = _out_init(&out)
                if rc == 0:
                    rc = _merge_field(views, k, f, meta, dmap, tmap, cur, &out, &tdocs, &ttfs)
            if rc < 0:
                _raise_build_error(rc)
            arrays += _out_arrays(&out)
    finally:
        _out_free(&out)
        rb_free(&tdocs)
        rb_free(&ttfs)
        PyMem_Free(views)
        PyMem_Free(cur)
    return _segment(doc_lo, doc_hi, arrays, lens, c0, cb)


# ---- scoring kernels (nogil) -------------------------------------------------------------------

cdef inline bint _extra_ok(const Query* q, uint32_t d) noexcept nogil:
    """Session, importance and tag filters (kind, tier and liveness are in q.okmeta)."""
    cdef int64_t i, j, lo, hi
    cdef bint found
    if q.imp[d] < q.min_imp:
        return False
    if q.session >= 0 and q.sess[d] != q.session:
        return False
    lo = q.tag_off[d]
    hi = q.tag_off[d + 1]
    for i in range(q.n_tags):
        found = False
        for j in range(lo, hi):
            if q.tag_val[j] == q.tags[i]:
                found = True
                break
        if not found:
            return False
    return True


cdef inline bint _doc_ok(const Query* q, uint32_t d) noexcept nogil:
    if not q.okmeta[q.meta[d]]:
        return False
    return not q.extra or _extra_ok(q, d)


cdef inline uint8_t _qlen_code(uint32_t n) noexcept nogil:
    """A field length in one byte, for bounds: exact below 64, then 4 significant bits,
    rounded down (_qlen_value(_qlen_code(n)) <= n)."""
    cdef int e
    if n < 64:
        return <uint8_t>n
    e = 31 - __builtin_clz(n)
    if e > 17:
        return 255
    return <uint8_t>(64 + (e - 6) * 16 + ((n >> (e - 4)) & 15))


cdef inline uint32_t _qlen_value(int c) noexcept nogil:
    if c < 64:
        return <uint32_t>c
    return <uint32_t>(16 + (c - 64) % 16) << ((c - 64) // 16 + 2)


def _qlen_floor(uint32_t n) -> int:
    """Tests: the length a content length of n is bounded with."""
    return _qlen_value(_qlen_code(n))


cdef inline uint32_t _tf_add(uint32_t w, int f, uint32_t tf) noexcept nogil:
    """Add tf to byte f of the packed group tfs, saturating at 255."""
    cdef int sh = 8 * f
    cdef uint32_t v = ((w >> sh) & 0xFF) + tf
    if v > IX_TF_CAP:
        v = IX_TF_CAP
    return (w & ~(<uint32_t>0xFF << sh)) | (v << sh)


cdef inline void _add_parts(const Query* q, uint32_t d, uint32_t w, double idf,
                            double* out) noexcept nogil:
    """Add one group's parts for doc d (packed tfs w) to out[0..2]: docs/SCORING.md, literally."""
    cdef double x[3]
    cdef double big_x, den
    cdef uint32_t tf
    cdef const uint32_t* ln = q.lens + 3 * <int64_t>d
    cdef int f
    for f in range(3):
        tf = (w >> (8 * f)) & 0xFF
        if tf:
            x[f] = q.w[f] * <double>tf / ((1.0 - q.b[f]) + q.b[f] * <double>ln[f] / q.avgdl[f])
        else:
            x[f] = 0.0
    big_x = (x[0] + x[1]) + x[2]
    den = q.k1 + big_x
    out[0] += idf * x[0] / den
    out[1] += idf * x[1] / den
    out[2] += idf * x[2] / den


# -- top-k

cdef inline bint _better(const Query* q, double sa, uint32_t a, double sb, uint32_t b) noexcept nogil:
    """The result order of docs/SCORING.md: score, importance, timestamp desc; ulid, doc asc."""
    cdef int c
    if sa != sb:
        return sa > sb
    if q.imp[a] != q.imp[b]:
        return q.imp[a] > q.imp[b]
    if q.ts[a] != q.ts[b]:
        return q.ts[a] > q.ts[b]
    c = memcmp(q.ulid + IX_ULID * <int64_t>a, q.ulid + IX_ULID * <int64_t>b, IX_ULID)
    if c != 0:
        return c < 0
    return a < b


cdef void _sift_down(const Query* q, HeapItem* h, int64_t n, int64_t i) noexcept nogil:
    """Heap with the worst item at the root."""
    cdef int64_t c
    cdef HeapItem tmp
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _better(q, h[c].s, h[c].d, h[c + 1].s, h[c + 1].d):
            c += 1
        if not _better(q, h[i].s, h[i].d, h[c].s, h[c].d):
            return
        tmp = h[i]
        h[i] = h[c]
        h[c] = tmp
        i = c


cdef inline int64_t _heap_offer(const Query* q, HeapItem* h, int64_t n, int64_t k, double s,
                                uint32_t d, uint32_t i) noexcept nogil:
    cdef int64_t c, p
    cdef HeapItem tmp
    if n < k:
        c = n
        h[c].s = s
        h[c].d = d
        h[c].i = i
        while c > 0:
            p = (c - 1) >> 1
            if not _better(q, h[p].s, h[p].d, h[c].s, h[c].d):
                break
            tmp = h[p]
            h[p] = h[c]
            h[c] = tmp
            c = p
        return n + 1
    if _better(q, s, d, h[0].s, h[0].d):
        h[0].s = s
        h[0].d = d
        h[0].i = i
        _sift_down(q, h, n, 0)
    return n


cdef void _heap_sort(const Query* q, HeapItem* h, int64_t n) noexcept nogil:
    """In place, best first."""
    cdef HeapItem tmp
    while n > 1:
        tmp = h[0]
        h[0] = h[n - 1]
        h[n - 1] = tmp
        n -= 1
        _sift_down(q, h, n, 0)


# -- top k, document at a time in windows (docs/SCORING.md "Pruning")
#
# A query is scored segment by segment, each segment in windows of at most `window` doc ids,
# with fixed-size scratch (nothing per query grows with the corpus). In a window every group gets
# an upper bound from the block maxima of its lists there. Once the heap holds k docs, the groups
# whose bounds together stay below the k-th score are "non-essential": the other groups are
# accumulated term-at-a-time inside the window, and each doc they touch is finished by probing
# the non-essential groups (highest bound first) only while it can still reach the k-th score.
# A window whose bounds sum below the k-th score is skipped without decoding anything. Every doc
# that can enter the heap gets its exact breakdown, groups in ascending key order.

cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil


cdef uint32_t NOT_PROBED = 0xFFFFFFFF


# A second thread for large queries: one persistent worker per index that runs half of each
# segment's windows while the calling thread runs the other half (see _run). It never touches
# Python objects. The two halves share only their k-th best scores (relaxed atomic loads and
# stores): either one is a lower bound of the final k-th best, so each half may prune with the
# larger one and the merged top k is the same as with one thread.
cdef extern from *:
    """
    #include <pthread.h>
    #include <stdlib.h>
    #include <unistd.h>
    typedef void (*cvm_job_fn)(void *);
    typedef struct {
        pthread_t th;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int state;              /* 0 idle, 1 job posted, 2 job done, 3 quit */
        cvm_job_fn fn;
        void *arg;
        pid_t pid;
    } cvm_worker;
    static void *cvm_worker_main(void *p) {
        cvm_worker *w = (cvm_worker *)p;
        pthread_mutex_lock(&w->mu);
        for (;;) {
            while (w->state != 1 && w->state != 3) pthread_cond_wait(&w->cv, &w->mu);
            if (w->state == 3) break;
            pthread_mutex_unlock(&w->mu);
            w->fn(w->arg);
            pthread_mutex_lock(&w->mu);
            w->state = 2;
            pthread_cond_broadcast(&w->cv);
        }
        pthread_mutex_unlock(&w->mu);
        return NULL;
    }
    /* A started worker, or NULL (then the caller runs everything itself). */
    static cvm_worker *cvm_worker_new(void) {
        cvm_worker *w = (cvm_worker *)calloc(1, sizeof(cvm_worker));
        if (w == NULL) return NULL;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        w->pid = getpid();
        if (pthread_create(&w->th, NULL, cvm_worker_main, w) != 0) {
            pthread_cond_destroy(&w->cv);
            pthread_mutex_destroy(&w->mu);
            free(w);
            return NULL;
        }
        return w;
    }
    /* After fork() the child has no worker thread: the struct is unusable there. */
    static int cvm_worker_alive(cvm_worker *w) { return w != NULL && w->pid == getpid(); }
    static void cvm_worker_post(cvm_worker *w, cvm_job_fn fn, void *arg) {
        pthread_mutex_lock(&w->mu);
        w->fn = fn;
        w->arg = arg;
        w->state = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    static void cvm_worker_wait(cvm_worker *w) {
        pthread_mutex_lock(&w->mu);
        while (w->state != 2) pthread_cond_wait(&w->cv, &w->mu);
        w->state = 0;
        pthread_mutex_unlock(&w->mu);
    }
    static void cvm_worker_free(cvm_worker *w) {
        if (w == NULL) return;
        if (cvm_worker_alive(w)) {
            pthread_mutex_lock(&w->mu);
            w->state = 3;
            pthread_cond_broadcast(&w->cv);
            pthread_mutex_unlock(&w->mu);
            pthread_join(w->th, NULL);
            pthread_cond_destroy(&w->cv);
            pthread_mutex_destroy(&w->mu);
        }
        free(w);
    }
    static inline double cvm_load(double *p) { double v; __atomic_load(p, &v, __ATOMIC_RELAXED); return v; }
    static inline void cvm_store(double *p, double v) { __atomic_store(p, &v, __ATOMIC_RELAXED); }
    """
    ctypedef struct cvm_worker:
        pass
    ctypedef void (*cvm_job_fn)(void*) noexcept nogil
    cvm_worker* cvm_worker_new() nogil
    bint cvm_worker_alive(cvm_worker* w) nogil
    void cvm_worker_post(cvm_worker* w, cvm_job_fn fn, void* arg) nogil
    void cvm_worker_wait(cvm_worker* w) nogil
    void cvm_worker_free(cvm_worker* w) nogil
    double cvm_load(double* p) nogil
    void cvm_store(double* p, double v) nogil


# One posting list of the current segment during a query: a term-at-a-time position (with the
# decoded block), a block position for the window bounds and a probe cursor.
cdef struct LState:
    const PList* L
    int64_t tblk            # term-at-a-time: the first block not finished
    int64_t cblk            # the block decoded in bd/bt (-1: none)
    int64_t cpos            # the next posting of the decoded block
    int64_t ccnt
    int64_t bblk            # bounds: the first block whose last doc is >= the window start
    int64_t pblk            # probes: the same for the doc probed
    uint32_t last1          # one-block lists (no skip table): the last doc, and the max of x_f
    double xm1              # over the block (a bound like bmf * bm)
    Cursor pc
    uint32_t bd[IX_BLOCK]
    uint8_t bt[IX_BLOCK]


cdef struct Eng:
    Query* q
    const Group* groups
    int64_t G
    const uint32_t* gterms
    LState* ls              # the lists of the current segment, by group: ls[goff[g]:goff[g+1]]
    int64_t* goff
    double* wub             # per group: its bound in the current window
    double* gx              # per group and field: the bound of x_f in the window
    int32_t* gnl            # per group and field: lists that may hold docs of the window
    int64_t* order          # groups by bound ascending
    uint32_t* gw            # per group: the packed tfs of the doc being finished
    uint32_t* wtf           # per window doc: packed tfs of the group being accumulated
    double* wacc            # per window doc: partial score
    double* wbd             # per window doc: breakdown (full windows)
    uint32_t* gl            # window docs touched by the group being accumulated
    uint64_t* wbits         # window docs touched by the query
    HeapItem* heap
    double* hbd             # the breakdowns of the heap's docs, 3 a slot (HeapItem.i)
    int64_t nh
    int64_t k
    double theta            # the k-th best score once the heap is full, else -1
    double* peer_theta      # the other half's theta when two threads share the query, else NULL
    # what the pruning skipped (SearchIndex.last_*_skipped; tests assert on them)
    int64_t n_windows_skipped   # windows whose bound stayed below the k-th score: not decoded
    int64_t n_blocks_skipped    # blocks of essential lists skipped on their block maxima
    int64_t n_docs_skipped      # docs reached by the essential lists but cut by the bounds


cdef void _ls_init(const Query* q, LState* s, const PList* L) noexcept nogil:
    cdef int64_t i
    cdef double mx = 0.0, v
    cdef int f = L.field
    s.L = L
    s.tblk = 0
    s.cblk = -1
    s.cpos = 0
    s.ccnt = 0
    s.bblk = 0
    s.pblk = 0
    s.pc.blk = -1
    s.last1 = 0
    s.xm1 = 0.0
    if L.skip == NULL and L.n > 0:                   # one block: decode it once, bound it exactly
        s.ccnt = _block(L, 0, s.bd, s.bt)
        s.cblk = 0
        s.last1 = s.bd[s.ccnt - 1]
        for i in range(s.ccnt):
            v = q.w[f] * <double>s.bt[i] / (q.c0[f] + q.cb[f] * <double>q.lens[3 * <int64_t>s.bd[i] + f])
            if v > mx:
                mx = v
        s.xm1 = mx


cdef inline double _ub(const Query* q, double idf, double big_x) noexcept nogil:
    if big_x == 0.0:
        return 0.0
    return idf * big_x / (q.k1 + big_x)


cdef inline double _block_x(const Query* q, const LState* s, int64_t j) noexcept nogil:
    """A bound of x_f over the docs of block j of the list."""
    cdef const PList* L = s.L
    if L.skip == NULL:
        return s.xm1
    if L.bm == NULL:
        return q.w[L.field] * IX_TF_CAP / q.c0[L.field] if q.c0[L.field] > 0.0 else INFINITY
    return L.bmf * <double>L.bm[j]


cdef bint _ls_bound(const Query* q, LState* s, uint32_t wlo, uint32_t whi,
                    double* xmax) noexcept nogil:
    """Whether the list may hold docs in [wlo, whi); if so, a bound of x_f there."""
    cdef const PList* L = s.L
    cdef int64_t j
    cdef double mx = 0.0, v
    if L.n == 0 or L.first >= whi:
        return False
    if L.skip == NULL:
        if s.last1 < wlo:
            return False
        xmax[0] = s.xm1
        return True
    j = _find_block(L, s.bblk, wlo)
    s.bblk = j
    if j >= L.nb or (j > 0 and _block_last(L, j - 1) >= whi - 1):
        return False
    while j < L.nb:
        v = _block_x(q, s, j)
        if v > mx:
            mx = v
        if _block_last(L, j) >= whi - 1:
            break
        j += 1
    xmax[0] = mx
    return True


cdef double _group_bound(Eng* e, int64_t g, uint32_t wlo, uint32_t whi) noexcept nogil:
    """The group's bound in the window (0.0: none of its lists holds a doc there). The x_f of a
    group is the sum of its keys' x_f at the same length, so the keys' bounds add up."""
    cdef const Query* q = e.q
    cdef int64_t i
    cdef int f
    cdef double xm = 0.0
    cdef double* gx = e.gx + 3 * g
    cdef int32_t* nl = e.gnl + 3 * g
    for f in range(3):
        gx[f] = 0.0
        nl[f] = 0
    for i in range(e.goff[g], e.goff[g + 1]):
        if _ls_bound(q, &e.ls[i], wlo, whi, &xm):
            f = e.ls[i].L.field
            gx[f] += xm
            nl[f] += 1
    return _ub(q, e.groups[g].idf, (gx[0] + gx[1]) + gx[2])


cdef int64_t _ls_taat(Eng* e, LState* s, uint32_t wlo, uint32_t whi, int64_t ng, int64_t g,
                      double others, double lb, bint extra) noexcept nogil:
    """Add the list's tfs of the window docs that are live and of the kinds and tiers asked (and
    pass the other filters if `extra`) to e.wtf (new docs to e.gl).

    With lb >= 0 (pruning), a block is skipped when no doc of it can reach lb: the block's own
    bound for this list, the group's bounds in the other fields and `others` (the bounds of the
    other groups) stay below it. Valid only when this is the group's one list in its field.
    """
    cdef const PList* L = s.L
    cdef const Query* q = e.q
    cdef int64_t j, i, cnt
    cdef uint32_t d, x, w
    cdef int f = L.field
    cdef double xo = 0.0, bx
    if L.n == 0 or L.first >= whi:
        return ng
    if lb >= 0.0:
        xo = 0.0
        if f != 0:
            xo += e.gx[3 * g]
        if f != 1:
            xo += e.gx[3 * g + 1]
        if f != 2:
            xo += e.gx[3 * g + 2]
    j = _find_block(L, s.tblk, wlo)
    while j < L.nb:
        if lb >= 0.0:
            bx = _block_x(q, s, j) + xo
            if (_ub(q, e.groups[g].idf, bx) + others) * (1.0 + EPS) < lb:
                e.n_blocks_skipped += 1
                if (_block_last(L, j) if L.skip != NULL else s.last1) >= whi:
                    s.tblk = j                        # the block goes on past the window
                    return ng
                j += 1
                continue
        if s.cblk != j:
            s.ccnt = _block(L, j, s.bd, s.bt)
            s.cblk = j
            s.cpos = 0
        i = s.cpos
        cnt = s.ccnt
        while i < cnt and s.bd[i] < wlo:
            i += 1
        while i < cnt:
            d = s.bd[i]
            if d >= whi:
                break
            i += 1
            if not q.okmeta[q.meta[d]]:
                continue
            if extra and q.extra and not _extra_ok(q, d):
                continue
            x = d - wlo
            w = e.wtf[x]
            if w == 0:
                e.gl[ng] = x
                ng += 1
            e.wtf[x] = _tf_add(w, f, s.bt[i - 1])
        s.cpos = i
        if i < cnt:
            s.tblk = j
            return ng
        j += 1
    s.tblk = j
    return ng


cdef int64_t _chains_taat(Eng* e, int64_t g, uint32_t wlo, uint32_t whi, int64_t ng) noexcept nogil:
    """The same as _ls_taat for the buffer's postings of the group's keys."""
    cdef const Query* q = e.q
    cdef int64_t ki
    cdef int32_t c
    cdef uint32_t d, x, w
    for ki in range(e.groups[g].key_lo, e.groups[g].key_hi):
        c = q.head[e.gterms[ki]]
        while c >= 0:
            d = q.b_doc[c]
            if wlo <= d < whi and _doc_ok(q, d):
                x = d - wlo
                w = e.wtf[x]
                if w == 0:
                    e.gl[ng] = x
                    ng += 1
                e.wtf[x] = _tf_add(w, q.b_field[c], q.b_tf[c])
            c = q.b_next[c]
    return ng


cdef uint32_t _probe_group(Eng* e, int64_t g, uint32_t d) noexcept nogil:
    """The group's packed tfs at doc d (probes move forward only: d never decreases)."""
    cdef int64_t i, blk, lo, hi, mid
    cdef uint32_t w = 0, tf
    cdef LState* s
    cdef const PList* L
    for i in range(e.goff[g], e.goff[g + 1]):
        s = &e.ls[i]
        L = s.L
        if L.n == 0 or d < L.first:
            continue
        if L.skip == NULL:
            if d > s.last1:
                continue
            lo = 0
            hi = s.ccnt
            while lo < hi:
                mid = (lo + hi) >> 1
                if s.bd[mid] < d:
                    lo = mid + 1
                else:
                    hi = mid
            tf = s.bt[lo] if lo < s.ccnt and s.bd[lo] == d else 0
        else:
            blk = _find_block(L, s.pblk, d)
            s.pblk = blk
            if blk >= L.nb:
                continue
            if s.pc.blk != blk:
                _cur_open(L, &s.pc, blk)
            tf = _seek(&s.pc, d)
        if tf:
            w = _tf_add(w, L.field, tf)
    return w


cdef inline double _approx_total(const Query* q, uint32_t d, uint32_t w, double idf) noexcept nogil:
    """An upper bound of a group's part sum (_add_parts summed; within a few ulps: the bounds carry a 1e-9 margin) with
    at most two divisions instead of five. The content length is read from the one-byte
    q.qlen, rounded down (so the norm is not larger); a content-only doc needs one division."""
    cdef const uint8_t* ql
    cdef double big_x, a
    cdef uint32_t tf
    cdef int f
    if w <= 0xFF:                                     # content only: X = a / norm
        a = q.w[0] * <double>w
        return idf * a / (q.k1 * q.qnorm[q.qlen[d]] + a)
    ql = q.qlen2 + 2 * <int64_t>d - 1                 # ql[1], ql[2]: summary, tags
    big_x = q.w[0] * <double>(w & 0xFF) / q.qnorm[q.qlen[d]]
    for f in range(1, 3):
        tf = (w >> (8 * f)) & 0xFF
        if tf:
            big_x += q.w[f] * <double>tf / q.qnorm[256 * f + ql[f]]
    return idf * big_x / (q.k1 + big_x)


cdef inline void _offer(Eng* e, const double* a, uint32_t d) noexcept nogil:
    """Offer doc d with its exact breakdown a[0..2]; a taken doc keeps its breakdown in the slot
    of e.hbd that its heap item names (the slot of the item it replaces)."""
    cdef double s = (a[0] + a[1]) + a[2]
    cdef int64_t slot
    if e.nh < e.k:
        slot = e.nh
    elif _better(e.q, s, d, e.heap[0].s, e.heap[0].d):
        slot = e.heap[0].i
    else:
        return
    memcpy(e.hbd + 3 * slot, a, 3 * sizeof(double))
    e.nh = _heap_offer(e.q, e.heap, e.nh, e.k, s, d, <uint32_t>slot)
    if e.nh == e.k:
        cvm_store(&e.theta, e.heap[0].s)


cdef inline double _theta(Eng* e) noexcept nogil:
    """The best known lower bound of the k-th score (-1: none yet)."""
    cdef double t = e.theta, p
    if e.peer_theta != NULL:
        p = cvm_load(e.peer_theta)
        if p > t:
            return p
    return t


cdef void _win_full(Eng* e, uint32_t wlo, uint32_t whi, bint buffer) noexcept nogil:
    """Every matching doc of the window, scored exactly (groups in ascending key order) and
    offered to the heap."""
    cdef const Query* q = e.q
    cdef int64_t g, i, j, ng, wi
    cdef uint32_t x, w
    cdef uint64_t bits
    cdef double* a
    for g in range(e.G):
        ng = 0
        if buffer:
            ng = _chains_taat(e, g, wlo, whi, ng)
        else:
            for i in range(e.goff[g], e.goff[g + 1]):
                ng = _ls_taat(e, &e.ls[i], wlo, whi, ng, g, 0.0, -1.0, True)
        for j in range(ng):
            x = e.gl[j]
            w = e.wtf[x]
            e.wtf[x] = 0
            a = e.wbd + 3 * <int64_t>x
            if not (e.wbits[x >> 6] >> (x & 63)) & 1:
                e.wbits[x >> 6] |= (<uint64_t>1) << (x & 63)
                a[0] = 0.0
                a[1] = 0.0
                a[2] = 0.0
            _add_parts(q, wlo + x, w, e.groups[g].idf, a)
    for wi in range((whi - wlo + 63) >> 6):
        bits = e.wbits[wi]
        e.wbits[wi] = 0
        while bits:
            x = <uint32_t>(wi * 64 + __builtin_ctzll(bits))
            bits &= bits - 1
            a = e.wbd + 3 * <int64_t>x
            _offer(e, a, wlo + x)


cdef void _sort_by_bound(Eng* e) noexcept nogil:
    """e.order: groups by window bound ascending (index ascending on ties)."""
    cdef int64_t i, j, t
    for i in range(e.G):
        t = i
        j = i - 1
        while j >= 0 and e.wub[e.order[j]] > e.wub[t]:
            e.order[j + 1] = e.order[j]
            j -= 1
        e.order[j + 1] = t


cdef void _win_pruned(Eng* e, uint32_t wlo, uint32_t whi) noexcept nogil:
    """A window once a k-th score is known (see "top k, document at a time" above). Liveness,
    kinds and tiers are checked while reading the postings; the session, importance and tag
    filters only for the docs that pass the first bound test."""
    cdef const Query* q = e.q
    cdef int64_t G = e.G, g, i, j, ng, wi, ne, g1 = -1
    cdef uint32_t x, w, d
    cdef uint64_t bits
    cdef double lb = _theta(e) * (1.0 - EPS), total = 0.0, cum = 0.0, s, r, t, xm = 0.0
    cdef double a[3]
    cdef bint alive
    for g in range(G):
        e.wub[g] = _group_bound(e, g, wlo, whi)
        total += e.wub[g]
    if total * (1.0 + EPS) < lb:
        e.n_windows_skipped += 1
        return
    _sort_by_bound(e)
    ne = 0
    while ne < G and (cum + e.wub[e.order[ne]]) * (1.0 + EPS) < lb:
        cum += e.wub[e.order[ne]]
        ne += 1
    if ne == G - 1:
        # One essential group: a doc passes the first test when its part s reaches
        # T = lb / (1 + EPS) - cum, that is when X >= k1 * u / (1 - u), u = T / idf (loosened by
        # 1e-10 against rounding); content-only docs are tested without a division.
        g1 = e.order[ne]
        t = (lb / (1.0 + EPS) - cum) / e.groups[g1].idf
        if t <= 0.0:
            xm = 0.0
        elif t >= 1.0:
            e.n_windows_skipped += 1
            return
        else:
            xm = q.k1 * t / (1.0 - t) * (1.0 - 1e-10)
    for i in range(ne, G):
        g = e.order[i]
        ng = 0
        for j in range(e.goff[g], e.goff[g + 1]):
            ng = _ls_taat(e, &e.ls[j], wlo, whi, ng, g, total - e.wub[g],
                          lb if e.gnl[3 * g + e.ls[j].L.field] == 1 else -1.0, False)
        if g1 >= 0:
            for j in range(ng):
                x = e.gl[j]
                e.wbits[x >> 6] |= (<uint64_t>1) << (x & 63)
            continue
        for j in range(ng):
            x = e.gl[j]
            w = e.wtf[x]
            e.wtf[x] = 0
            if not (e.wbits[x >> 6] >> (x & 63)) & 1:
                e.wbits[x >> 6] |= (<uint64_t>1) << (x & 63)
                e.wacc[x] = 0.0
            e.wacc[x] += _approx_total(q, wlo + x, w, e.groups[g].idf)
    for wi in range((whi - wlo + 63) >> 6):
        bits = e.wbits[wi]
        e.wbits[wi] = 0
        while bits:
            x = <uint32_t>(wi * 64 + __builtin_ctzll(bits))
            bits &= bits - 1
            d = wlo + x
            if g1 >= 0:
                w = e.wtf[x]
                e.wtf[x] = 0
                if w <= 0xFF and q.w[0] * <double>w < xm * q.qnorm[q.qlen[d]]:
                    e.n_docs_skipped += 1             # content only, below xm even rounded up
                    continue
                s = _approx_total(q, d, w, e.groups[g1].idf)
                if (s + cum) * (1.0 + EPS) < lb:
                    e.n_docs_skipped += 1
                    continue
            else:
                s = e.wacc[x]
                if (s + cum) * (1.0 + EPS) < lb:
                    e.n_docs_skipped += 1
                    continue
            if q.extra and not _extra_ok(q, d):
                continue
            r = cum
            for g in range(G):
                e.gw[g] = NOT_PROBED
            alive = True
            i = ne - 1
            while i >= 0:                             # non-essential groups, highest bound first
                g = e.order[i]
                if e.wub[g] == 0.0:
                    break
                w = _probe_group(e, g, d)
                e.gw[g] = w
                if w:
                    s += _approx_total(q, d, w, e.groups[g].idf)
                r -= e.wub[g]
                if (s + r) * (1.0 + EPS) < lb:
                    alive = False
                    break
                i -= 1
            if not alive:
                e.n_docs_skipped += 1
                continue
            a[0] = 0.0
            a[1] = 0.0
            a[2] = 0.0
            for g in range(G):                        # exact, in ascending key order
                w = e.gw[g]
                if w == NOT_PROBED:
                    w = _probe_group(e, g, d) if e.wub[g] != 0.0 else 0
                if w:
                    _add_parts(q, d, w, e.groups[g].idf, a)
            _offer(e, a, d)
            lb = _theta(e) * (1.0 - EPS)


cdef int64_t _open_segment(Eng* e, const PList* lists, int64_t sg) noexcept nogil:
    """Set up e.ls / e.goff with the query's lists of segment sg; returns how many."""
    cdef int64_t g, li, n = 0
    for g in range(e.G):
        e.goff[g] = n
        for li in range(e.groups[g].list_lo, e.groups[g].list_hi):
            if lists[li].seg == sg:
                _ls_init(e.q, &e.ls[n], &lists[li])
                n += 1
    e.goff[e.G] = n
    return n


cdef void _run_buffer(Eng* e, int64_t window) noexcept nogil:
    """The buffer's docs, window by window, scored in full."""
    cdef uint32_t wlo = e.q.buf_lo, whi, hi = <uint32_t>e.q.n_docs
    if e.q.head == NULL:
        return
    while wlo < hi:
        whi = wlo + <uint32_t>window if hi - wlo > <uint32_t>window else hi
        _win_full(e, wlo, whi, True)
        wlo = whi


cdef void _run(Eng* e, const PList* lists, int64_t window, bint prune, int part,
               int parts) noexcept nogil:
    """Segment by segment, window by window, then the buffer; e.heap gets the top k of what it
    scores. With parts == 2, part 0 scores the first half of each segment's windows and the
    buffer, part 1 the second half."""
    cdef Query* q = e.q
    cdef int64_t sg, nw, w0, w1, wi
    cdef uint32_t wlo, whi
    cdef const SegView* v
    for sg in range(q.n_views):
        v = &q.views[sg]
        nw = (<int64_t>v.doc_hi - v.doc_lo + window - 1) // window
        w0 = 0 if part == 0 else nw // 2
        w1 = nw if parts == 1 or part == 1 else nw // 2
        if w0 >= w1:
            continue
        if _open_segment(e, lists, sg) == 0:
            continue
        for wi in range(w0, w1):
            wlo = v.doc_lo + <uint32_t>(wi * window)
            whi = wlo + <uint32_t>window if v.doc_hi - wlo > <uint32_t>window else v.doc_hi
            if prune and _theta(e) >= 0.0:
                _win_pruned(e, wlo, whi)
            else:
                _win_full(e, wlo, whi, False)
    if part == 0:
        _run_buffer(e, window)


cdef void _run_docs(Eng* e, const PList* lists, const uint32_t* cand, int64_t nc) noexcept nogil:
    """Score only the candidate docs (ascending) that lie in segments, probing every group at
    each, then the buffer window by window (its docs are filtered like anywhere else)."""
    cdef Query* q = e.q
    cdef int64_t sg, g, ci = 0, c0, j
    cdef uint32_t d, w
    cdef const SegView* v
    cdef double a[3]
    cdef bint matched
    for sg in range(q.n_views):
        v = &q.views[sg]
        while ci < nc and cand[ci] < v.doc_lo:
            ci += 1
        c0 = ci
        while ci < nc and cand[ci] < v.doc_hi:
            ci += 1
        if c0 == ci:
            continue
        if _open_segment(e, lists, sg) == 0:
            continue
        for j in range(c0, ci):
            d = cand[j]
            if not _doc_ok(q, d):
                continue
            a[0] = 0.0
            a[1] = 0.0
            a[2] = 0.0
            matched = False
            for g in range(e.G):                      # ascending key order: exact
                w = _probe_group(e, g, d)
                if w:
                    _add_parts(q, d, w, e.groups[g].idf, a)
                    matched = True
            if matched:
                _offer(e, a, d)
    _run_buffer(e, IX_WINDOW)


cdef struct Job:
    Eng* e
    const PList* lists
    int64_t window
    bint prune


cdef void _run_second_half(void* arg) noexcept nogil:
    cdef Job* j = <Job*>arg
    _run(j.e, j.lists, j.window, j.prune, 1, 2)


cdef int64_t _group_df(Query* q, const Group* g, const PList* lists, const uint32_t* gterms) noexcept nogil:
    """Live docs holding any key of the group in any field (for groups of several keys); the
    bitmap q.gbits is all zero before and after."""
    cdef int64_t li, i, ki, j, c, df = 0
    cdef const PList* L
    cdef uint32_t d
    cdef int32_t e
    cdef uint32_t bd[IX_BLOCK]
    cdef uint64_t bit
    for li in range(g.list_lo, g.list_hi):
        L = &lists[li]
        for j in range(L.nb):
            c = _block(L, j, bd, NULL)
            for i in range(c):
                d = bd[i]
                bit = (<uint64_t>1) << (d & 63)
                if (q.meta[d] & IX_LIVE) and not (q.gbits[d >> 6] & bit):
                    q.gbits[d >> 6] |= bit
                    df += 1
    if q.head != NULL:
        for ki in range(g.key_lo, g.key_hi):
            e = q.head[gterms[ki]]
            while e >= 0:
                d = q.b_doc[e]
                bit = (<uint64_t>1) << (d & 63)
                if (q.meta[d] & IX_LIVE) and not (q.gbits[d >> 6] & bit):
                    q.gbits[d >> 6] |= bit
                    df += 1
                e = q.b_next[e]
    memset(q.gbits, 0, <size_t>(8 * ((q.n_docs + 63) >> 6)))
    return df


cdef class _Scratch:
    """The scratch of one scoring thread: fixed window arrays and per-query arrays sized by the
    query (never by the corpus)."""
    cdef GArr w_tf, w_acc, w_bd, w_gl, w_bits
    cdef GArr ls, goff, wub, gx, gnl, gw, order, heap, hbd

    def __cinit__(self):
        garr_init(&self.w_tf, 4)
        garr_init(&self.w_acc, 8)
        garr_init(&self.w_bd, 24)
        garr_init(&self.w_gl, 4)
        garr_init(&self.w_bits, 8)
        garr_init(&self.ls, sizeof(LState))
        garr_init(&self.goff, 8)
        garr_init(&self.wub, 8)
        garr_init(&self.gx, 24)
        garr_init(&self.gnl, 12)
        garr_init(&self.gw, 4)
        garr_init(&self.order, 8)
        garr_init(&self.heap, sizeof(HeapItem))
        garr_init(&self.hbd, 24)

    def __dealloc__(self):
        garr_free(&self.w_tf)
        garr_free(&self.w_acc)
        garr_free(&self.w_bd)
        garr_free(&self.w_gl)
        garr_free(&self.w_bits)
        garr_free(&self.ls)
        garr_free(&self.goff)
        garr_free(&self.wub)
        garr_free(&self.gx)
        garr_free(&self.gnl)
        garr_free(&self.gw)
        garr_free(&self.order)
        garr_free(&self.heap)
        garr_free(&self.hbd)

    cdef int engine(self, Eng* e, Query* q, const Group* groups, int64_t G,
                    const uint32_t* gterms, int64_t n_lists, int64_t k) except -1:
        """Size the arrays for the query and point e at them."""
        if self.w_tf.len == 0:                        # zeroed once; the loops leave them zero
            garr_extend(&self.w_tf, IX_WINDOW, True)
            garr_extend(&self.w_acc, IX_WINDOW, False)
            garr_extend(&self.w_bd, IX_WINDOW, False)
            garr_extend(&self.w_gl, IX_WINDOW, False)
            garr_extend(&self.w_bits, IX_WINDOW // 64, True)
        garr_reserve(&self.ls, n_lists + 1)
        garr_reserve(&self.goff, G + 1)
        garr_reserve(&self.wub, G)
        garr_reserve(&self.gx, G)
        garr_reserve(&self.gnl, G)
        garr_reserve(&self.gw, G)
        garr_reserve(&self.order, G)
        garr_reserve(&self.heap, k + 1)
        garr_reserve(&self.hbd, k + 1)
        e.q = q
        e.groups = groups
        e.G = G
        e.gterms = gterms
        e.ls = <LState*>self.ls.data
        e.goff = <int64_t*>self.goff.data
        e.wub = <double*>self.wub.data
        e.gx = <double*>self.gx.data
        e.gnl = <int32_t*>self.gnl.data
        e.order = <int64_t*>self.order.data
        e.gw = <uint32_t*>self.gw.data
        e.wtf = <uint32_t*>self.w_tf.data
        e.wacc = <double*>self.w_acc.data
        e.wbd = <double*>self.w_bd.data
        e.gl = <uint32_t*>self.w_gl.data
        e.wbits = <uint64_t*>self.w_bits.data
        e.heap = <HeapItem*>self.heap.data
        e.hbd = <double*>self.hbd.data
        e.nh = 0
        e.k = k
        e.theta = -1.0
        e.peer_theta = NULL
        e.n_windows_skipped = 0
        e.n_blocks_skipped = 0
        e.n_docs_skipped = 0
        return 0

    cdef int64_t nbytes(self) noexcept:
        return (garr_bytes(&self.w_tf) + garr_bytes(&self.w_acc) + garr_bytes(&self.w_bd)
                + garr_bytes(&self.w_gl) + garr_bytes(&self.w_bits) + garr_bytes(&self.ls)
                + garr_bytes(&self.goff) + garr_bytes(&self.wub) + garr_bytes(&self.gx)
                + garr_bytes(&self.gnl) + garr_bytes(&self.gw) + garr_bytes(&self.order)
                + garr_bytes(&self.heap) + garr_bytes(&self.hbd))


# ---- the index ---------------------------------------------------------------------------------

cdef object _keys_array(object keys):
    if isinstance(keys, np.ndarray) and keys.dtype == np.uint64 and keys.ndim == 1 \
            and keys.flags.c_contiguous:
        return keys
    return np.ascontiguousarray(np.asarray(keys, dtype=np.uint64).reshape(-1))


cdef inline const uint64_t* _ptr(const uint64_t[::1] v) noexcept:
    return &v[0] if v.shape[0] > 0 else NULL


cdef tuple _check_config(k1, weights, b):
    weights = tuple(float(w) for w in weights)
    b = tuple(float(x) for x in b)
    if len(weights) != 3 or len(b) != 3:
        raise ValueError("weights and b need one value per field (content, summary, tags)")
    if not k1 > 0 or any(not w >= 0 for w in weights) or any(not 0 <= x <= 1 for x in b):
        raise ValueError("need k1 > 0, weights >= 0 and 0 <= b <= 1")
    return float(k1), weights, b


cdef class SearchIndex:
    """BM25F over (content, summary, tags) with filters and a deterministic top-k.

    See docs/SCORING.md for the exact definition; `pyindex.SearchIndex` is the readable twin.
    """

    def __cinit__(self):
        garr_init(&self._t_keys, 8)
        garr_init(&self._t_df, 4)
        garr_init(&self._t_table, 4)
        garr_init(&self._t_head, 4)
        garr_init(&self._meta, 1)
        garr_init(&self._imp, 1)
        garr_init(&self._sess, 4)
        garr_init(&self._ts, 8)
        garr_init(&self._ulid, IX_ULID)
        garr_init(&self._lens, 12)
        garr_init(&self._tag_off, 4)
        garr_init(&self._tag_val, 8)
        garr_init(&self._b_doc, 4)
        garr_init(&self._b_tf, 1)
        garr_init(&self._b_field, 1)
        garr_init(&self._b_next, 4)
        garr_init(&self._b_terms, 4)
        garr_init(&self._b_tid, 4)
        garr_init(&self._a_keys, 8)
        garr_init(&self._a_tids, 4)
        garr_init(&self._s_gbits, 8)
        self._scr = [_Scratch(), _Scratch()]
        self._worker = NULL
        garr_init(&self._qlen, 1)
        garr_init(&self._qlen2, 2)
        garr_init(&self._q_groups, sizeof(Group))
        garr_init(&self._q_terms, 4)
        garr_init(&self._q_lists, sizeof(PList))
        self._segs = []
        self._keep = []
        self._views = NULL
        self._n_views = 0
        self.window = IX_WINDOW
        self._lock = threading.RLock()
        self.last_pruned = False

    def __init__(self, k1: float = 1.2, weights=(1.0, 1.5, 2.0), b=(0.75, 0.75, 0.5)):
        k1, weights, b = _check_config(k1, weights, b)
        self._k1 = k1
        for f in range(3):
            self._w[f] = weights[f]
            self._b[f] = b[f]
        if self._t_table.len == 0:
            self._table_rebuild(IX_TABLE_MIN)
        garr_reserve(&self._tag_off, 1)
        (<uint32_t*>self._tag_off.data)[0] = 0
        self._tag_off.len = 1

    def __dealloc__(self):
        garr_free(&self._t_keys)
        garr_free(&self._t_df)
        garr_free(&self._t_table)
        garr_free(&self._t_head)
        garr_free(&self._meta)
        garr_free(&self._imp)
        garr_free(&self._sess)
        garr_free(&self._ts)
        garr_free(&self._ulid)
        garr_free(&self._lens)
        garr_free(&self._tag_off)
        garr_free(&self._tag_val)
        garr_free(&self._b_doc)
        garr_free(&self._b_tf)
        garr_free(&self._b_field)
        garr_free(&self._b_next)
        garr_free(&self._b_terms)
        garr_free(&self._b_tid)
        garr_free(&self._a_keys)
        garr_free(&self._a_tids)
        garr_free(&self._s_gbits)
        cvm_worker_free(<cvm_worker*>self._worker)
        garr_free(&self._qlen)
        garr_free(&self._qlen2)
        garr_free(&self._q_groups)
        garr_free(&self._q_terms)
        garr_free(&self._q_lists)
        PyMem_Free(self._views)

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

    cdef int _table_rebuild(self, int64_t cap) except -1:
        """Reinsert every term, in term-id order (so the layout depends only on the keys)."""
        cdef uint32_t* table = <uint32_t*>PyMem_Malloc(<size_t>(cap * 4))
        cdef const uint64_t* keys = <const uint64_t*>self._t_keys.data
        cdef uint64_t mask = <uint64_t>cap - 1, slot
        cdef int64_t t
        if table == NULL:
            raise MemoryError()
        memset(table, 0, <size_t>(cap * 4))
        for t in range(self._t_keys.len):
            slot = mix64(keys[t]) & mask
            while table[slot] != 0:
                slot = (slot + 1) & mask
            table[slot] = <uint32_t>(t + 1)
        garr_free(&self._t_table)
        self._t_table.data = <char*>table
        self._t_table.len = cap
        self._t_table.cap = cap
        return 0

    cdef int64_t _term_add(self, uint64_t key) except -1:
        cdef int64_t t = self._term_find(key), n = self._t_keys.len
        cdef uint64_t mask, slot
        cdef uint32_t* table
        if t >= 0:
            return t
        if n >= 0xFFFFFFFE:
            raise OverflowError("too many distinct terms")
        garr_reserve(&self._t_keys, n + 1)
        garr_reserve(&self._t_df, n + 1)
        garr_reserve(&self._t_head, n + 1)
        (<uint64_t*>self._t_keys.data)[n] = key
        (<uint32_t*>self._t_df.data)[n] = 0
        (<int32_t*>self._t_head.data)[n] = -1
        self._t_keys.len = n + 1
        self._t_df.len = n + 1
        self._t_head.len = n + 1
        if 2 * (n + 1) > self._t_table.len:
            self._table_rebuild(2 * self._t_table.len)
        else:
            garr_own(&self._t_table)
            table = <uint32_t*>self._t_table.data
            mask = <uint64_t>self._t_table.len - 1
            slot = mix64(key) & mask
            while table[slot] != 0:
                slot = (slot + 1) & mask
            table[slot] = <uint32_t>(n + 1)
        return n

    # -- adding and removing --------------------------------------------------------------------

    def add(self, int64_t doc, content_keys, summary_keys, tag_keys, tag_hashes, int64_t session,
            int kind, int tier, int importance, int64_t timestamp, ulid) -> None:
        """Add doc number `doc` (must be `n_docs`); keys are uint64 arrays (docs/DESIGN.md 1)."""
        with self._lock:
            self._add(doc, content_keys, summary_keys, tag_keys, tag_hashes, session, kind, tier,
                      importance, timestamp, ulid)

    def _add(self, int64_t doc, content_keys, summary_keys, tag_keys, tag_hashes,
             int64_t session, int kind, int tier, int importance, int64_t timestamp, ulid):
        cdef const uint64_t[::1] ck = _keys_array(content_keys)
        cdef const uint64_t[::1] sk = _keys_array(summary_keys)
        cdef const uint64_t[::1] tk = _keys_array(tag_keys)
        cdef const uint64_t[::1] th = _keys_array(tag_hashes)
        cdef bytes ub = bytes(ulid)
        cdef int64_t n = self._n_docs, i, j, n0, nt
        cdef uint32_t* tids
        cdef uint32_t* df
        if doc != n:
            raise ValueError(f"doc must be {n} (the next doc id), got {doc}")
        if not 0 <= kind <= 5 or not 0 <= tier <= 3:
            raise ValueError("kind must be in 0..5 and tier in 0..3")
        if not 0 <= importance <= 100 or not 0 <= session <= 0x7FFFFFFF:
            raise ValueError("importance must be in 0..100 and session in 0..2**31-1")
        if len(ub) != IX_ULID:
            raise ValueError("ulid must be 16 bytes")
        if n >= 0xFFFFFFFE:
            raise OverflowError("too many docs")
        if self._t_head.len < self._t_keys.len:      # after from_arrays: the chains start empty
            garr_reserve(&self._t_head, self._t_keys.len)
            memset(self._t_head.data + 4 * self._t_head.len, 0xFF,
                   <size_t>(4 * (self._t_keys.len - self._t_head.len)))
            self._t_head.len = self._t_keys.len
        garr_reserve(&self._meta, n + 1)
        garr_reserve(&self._imp, n + 1)
        garr_reserve(&self._sess, n + 1)
        garr_reserve(&self._ts, n + 1)
        garr_reserve(&self._ulid, n + 1)
        garr_reserve(&self._lens, n + 1)
        garr_reserve(&self._tag_off, n + 2)
        nt = self._tag_val.len
        if nt + th.shape[0] > 0xFFFFFFFF:
            raise OverflowError("too many tag hashes")
        garr_reserve(&self._tag_val, nt + th.shape[0])
        (<uint8_t*>self._meta.data)[n] = IX_LIVE | kind | (tier << 3)
        (<uint8_t*>self._imp.data)[n] = importance
        (<int32_t*>self._sess.data)[n] = <int32_t>session
        (<int64_t*>self._ts.data)[n] = timestamp
        memcpy(self._ulid.data + IX_ULID * n, <const char*>ub, IX_ULID)
        (<uint32_t*>self._lens.data)[3 * n] = <uint32_t>ck.shape[0]
        (<uint32_t*>self._lens.data)[3 * n + 1] = <uint32_t>sk.shape[0]
        (<uint32_t*>self._lens.data)[3 * n + 2] = <uint32_t>tk.shape[0]
        if th.shape[0] > 0:
            memcpy(self._tag_val.data + 8 * nt, &th[0], <size_t>(8 * th.shape[0]))
        self._tag_val.len = nt + th.shape[0]
        (<uint32_t*>self._tag_off.data)[n + 1] = <uint32_t>self._tag_val.len
        self._meta.len = self._imp.len = self._sess.len = self._ts.len = n + 1
        self._ulid.len = self._lens.len = n + 1
        self._tag_off.len = n + 2

        self._a_tids.len = 0
        self._add_field(<uint32_t>n, 0, _ptr(ck), ck.shape[0])
        n0 = self._a_tids.len
        self._add_field(<uint32_t>n, 1, _ptr(sk), sk.shape[0])
        self._add_field(<uint32_t>n, 2, _ptr(tk), tk.shape[0])

        # df counts the doc once per term: the content terms are unique, the few summary and
        # tag terms are looked up among the terms before them.
        tids = <uint32_t*>self._a_tids.data
        garr_own(&self._t_df)
        df = <uint32_t*>self._t_df.data
        for i in range(self._a_tids.len):
            if i >= n0:
                j = 0
                while j < i and tids[j] != tids[i]:
                    j += 1
                if j < i:
                    continue
            df[tids[i]] += 1

        self._sum_len[0] += ck.shape[0]
        self._sum_len[1] += sk.shape[0]
        self._sum_len[2] += tk.shape[0]
        self._n_docs = n + 1
        self._n_live += 1
        if self._n_docs - self._buf_lo >= IX_BUF_DOCS or self._b_doc.len >= IX_BUF_POSTINGS:
            self._flush()
            self._maybe_merge()

    cdef int _add_field(self, uint32_t doc, int f, const uint64_t* keys, int64_t n) except -1:
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
        if n == 0:
            return 0
        while cap < 2 * n:
            cap <<= 1
        # scratch: hash keys (cap), distinct keys (n), their counts (n bytes), hash counts (cap bytes)
        garr_reserve(&self._a_keys, cap + n + (n + cap) // 8 + 2)
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
            elif hc[h] < IX_TF_CAP:
                hc[h] += 1
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
            raise OverflowError("buffer too large")
        garr_reserve(&self._a_tids, self._a_tids.len + m)
        garr_reserve(&self._b_doc, e + m)
        garr_reserve(&self._b_tf, e + m)
        garr_reserve(&self._b_field, e + m)
        garr_reserve(&self._b_next, e + m)
        garr_reserve(&self._b_tid, e + m)
        garr_reserve(&self._b_terms, self._b_terms.len + m)
        for k in range(m):
            t = self._term_add(sk[k])
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
                for f in range(3):
                    fp = &self._views[s].f[f]
                    for i in range(fp.n_terms):
                        _open_list(&L, fp.data + fp.offsets[i], fp.data + fp.n_bytes)
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
        cdef SegView* views = <SegView*>PyMem_Malloc(<size_t>(len(segs) * sizeof(SegView) + 1))
        cdef int64_t s
        if views == NULL:
            raise MemoryError()
        for s in range(len(segs)):
            views[s] = (<_Segment>segs[s]).v
        PyMem_Free(self._views)
        self._views = views
        self._n_views = len(segs)
        self._segs = segs
        return 0

    cdef int _flush(self) except -1:
        """Turn the buffer into a segment (dead docs dropped) and empty it."""
        cdef uint32_t* terms = <uint32_t*>self._b_terms.data
        cdef int64_t nbt = self._b_terms.len, i, f
        cdef int64_t cnt[3]
        cdef int32_t* head = <int32_t*>self._t_head.data
        cdef const uint32_t* b_doc = <const uint32_t*>self._b_doc.data
        cdef const uint8_t* b_tf = <const uint8_t*>self._b_tf.data
        cdef const uint8_t* b_field = <const uint8_t*>self._b_field.data
        cdef const int32_t* b_next = <const int32_t*>self._b_next.data
        cdef const uint8_t* meta = <const uint8_t*>self._meta.data
        cdef int32_t e
        cdef double c0[3]
        cdef double cb[3]
        cdef FieldOut outs[3]
        cdef RawBuf tdocs[3]
        cdef RawBuf ttfs[3]
        cdef int rc = 0
        cdef list arrays = []
        cdef uint32_t lo = self._buf_lo
        if <int64_t>lo == self._n_docs:
            return 0
        if nbt > 1:
            qsort(terms, <size_t>nbt, 4, _cmp_u32)
        memset(outs, 0, sizeof(outs))
        memset(tdocs, 0, sizeof(tdocs))
        memset(ttfs, 0, sizeof(ttfs))
        try:
            with nogil:
                for f in range(3):
                    if rc == 0:
                        rc = _out_init(&outs[f])
                i = 0
                while i < nbt and rc == 0:
                    # chains run newest first: count, then fill each field's list from its end
                    cnt[0] = cnt[1] = cnt[2] = 0
                    e = head[terms[i]]
                    while e >= 0:
                        if meta[b_doc[e]] & IX_LIVE:
                            cnt[b_field[e]] += 1
                        e = b_next[e]
                    for f in range(3):
                        if rb_reserve(&tdocs[f], 4 * cnt[f]) < 0 or rb_reserve(&ttfs[f], cnt[f]) < 0:
                            rc = -1
                    if rc < 0:
                        break
                    e = head[terms[i]]
                    while e >= 0:
                        if meta[b_doc[e]] & IX_LIVE:
                            f = b_field[e]
                            cnt[f] -= 1
                            (<uint32_t*>tdocs[f].p)[cnt[f]] = b_doc[e]
                            (<uint8_t*>ttfs[f].p)[cnt[f]] = b_tf[e]
                            tdocs[f].len += 1
                        e = b_next[e]
                    for f in range(3):
                        if tdocs[f].len > 0 and rc == 0:
                            rc = _out_list(&outs[f], terms[i], <uint32_t*>tdocs[f].p,
                                           <uint8_t*>ttfs[f].p, tdocs[f].len)
                        tdocs[f].len = 0
                    i += 1
            if rc < 0:
                _raise_build_error(rc)
            for i in range(nbt):
                head[terms[i]] = -1
            for f in range(3):
                arrays += _out_arrays(&outs[f])
        finally:
            for f in range(3):
                _out_free(&outs[f])
                rb_free(&tdocs[f])
                rb_free(&ttfs[f])
        self._b_terms.len = 0
        self._b_doc.len = self._b_tf.len = self._b_field.len = self._b_next.len = 0
        self._b_tid.len = 0
        self._buf_lo = <uint32_t>self._n_docs
        self._buf_dead = 0
        if any(arrays[3 * f + 2].shape[0] for f in range(3)):
            self._norm(c0, cb)
            self._set_segments(self._segs + [_segment(lo, <uint32_t>self._n_docs, arrays,
                                                      <const uint32_t*>self._lens.data, c0, cb)])
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
        """Merge the two newest segments while the older is not larger (counting live docs)."""
        cdef list segs = list(self._segs)
        cdef _Segment a, b, m
        cdef const uint8_t* meta = <const uint8_t*>self._meta.data
        cdef double c0[3]
        cdef double cb[3]
        self._norm(c0, cb)
        while len(segs) >= 2:
            a = segs[len(segs) - 2]
            b = segs[len(segs) - 1]
            if (a.v.doc_hi - a.v.doc_lo - a.v.n_dead) > (b.v.doc_hi - b.v.doc_lo - b.v.n_dead):
                break
            m = _merge([a, b], meta, NULL, NULL, <const uint32_t*>self._lens.data, a.v.doc_lo,
                       b.v.doc_hi, c0, cb)
            segs = segs[:len(segs) - 2] + ([m] if _nonempty(m) else [])
        self._set_segments(segs)
        return 0

    def merge_segments(self) -> None:
        """Flush the buffer and merge everything into one segment, dropping dead docs."""
        with self._lock:
            self._merge_segments()

    def _merge_segments(self):
        cdef list segs
        cdef _Segment m
        cdef double c0[3]
        cdef double cb[3]
        self._flush()
        self._norm(c0, cb)
        segs = self._segs
        if len(segs) > 1 or (len(segs) == 1 and (<_Segment>segs[0]).v.n_dead > 0):
            m = _merge(segs, <const uint8_t*>self._meta.data, NULL, NULL,
                       <const uint32_t*>self._lens.data, (<_Segment>segs[0]).v.doc_lo,
                       (<_Segment>segs[len(segs) - 1]).v.doc_hi, c0, cb)
            self._set_segments([m] if _nonempty(m) else [])

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
                while i < n:
                    ql[i] = _qlen_code(ln[3 * i])
                    ql2[2 * i] = _qlen_code(ln[3 * i + 1])
                    ql2[2 * i + 1] = _qlen_code(ln[3 * i + 2])
                    i += 1
            self._qlen.len = self._qlen2.len = n
        return 0

    cdef int _prepare(self, Query* q) except -1:
        cdef int f, m
        cdef int64_t n = self._n_live
        q.k1 = self._k1
        for f in range(3):
            q.w[f] = self._w[f]
            q.b[f] = self._b[f]
            q.avgdl[f] = (<double>self._sum_len[f]) / (<double>n) if self._sum_len[f] != 0 else 1.0
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
        q.qlen = <const uint8_t*>self._qlen.data
        q.qlen2 = <const uint8_t*>self._qlen2.data
        for f in range(3):
            for m in range(256):
                q.qnorm[256 * f + m] = q.c0[f] + q.cb[f] * <double>_qlen_value(m)
        return 0

    cdef int64_t _make_groups(self, Query* q, const uint64_t* qk, int64_t nqk) except -1:
        """Resolve the query into groups (docs/SCORING.md) with their posting lists, df and idf.

        Groups that occur in no live doc are left out: they add nothing to any score, and their
        large idf would only loosen the pruning bounds.
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
        for i in range(nu):
            key = keys[i]
            g = <Group*>self._q_groups.data + G
            g.key = key
            g.key_lo = self._q_terms.len
            t = self._term_find(key)
            if t >= 0:
                garr_reserve(&self._q_terms, self._q_terms.len + 1)
                (<uint32_t*>self._q_terms.data)[self._q_terms.len] = <uint32_t>t
                self._q_terms.len += 1
            if key >> 62 == 3:                         # CJK unigram: add the bigrams holding it
                c = <uint32_t>(key & CP_MASK)
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
            for ki in range(g.key_lo, g.key_hi):
                tid = (<uint32_t*>self._q_terms.data)[ki]
                for s in range(self._n_views):
                    for f in range(3):
                        fp = &self._views[s].f[f]
                        li = lower_bound_u32(fp.terms, 0, fp.n_terms, tid)
                        if li >= fp.n_terms or fp.terms[li] != tid:
                            continue
                        garr_reserve(&self._q_lists, self._q_lists.len + 1)
                        L = <PList*>self._q_lists.data + self._q_lists.len
                        _open_list(L, fp.data + fp.offsets[li], fp.data + fp.n_bytes)
                        if L.nb > 1:
                            bi = lower_bound_u32(fp.bm_terms, 0, fp.n_bm, <uint32_t>li)
                            if bi < fp.n_bm and fp.bm_terms[bi] == <uint32_t>li:
                                L.bm = fp.bm + fp.bm_off[bi]
                                L.bmf = q.w[f] * (fp.bm_cb / q.cb[f] if fp.bm_cb > q.cb[f] else 1.0)
                        L.seg = <int32_t>s
                        L.field = f
                        g.n_postings += L.n
                        self._q_lists.len += 1
            g.list_hi = self._q_lists.len
            if g.key_hi - g.key_lo == 0:
                continue
            if g.key_hi - g.key_lo == 1:
                df = (<uint32_t*>self._t_df.data)[(<uint32_t*>self._q_terms.data)[g.key_lo]]
            else:
                with nogil:
                    df = _group_df(q, g, <const PList*>self._q_lists.data,
                                   <const uint32_t*>self._q_terms.data)
            if df == 0:
                continue
            g.df = df
            g.idf = log(1.0 + (<double>(q.n_live - df) + 0.5) / (<double>df + 0.5))
            G += 1
        self._q_groups.len = G
        return G

    def search(self, query_keys, Py_ssize_t k, int64_t session=-1, int64_t kind_mask=0x3F,
               int64_t tier_mask=0x0F, int64_t min_importance=0, tag_hashes=None,
               bint exhaustive=False, session_docs=None):
        """Top k live docs for the query keys, best first: (docs, scores, breakdown[n, 3]).

        `session_docs` (with session >= 0) may list the session's docs in ascending order, every
        one of them (others are ignored by the session filter anyway): when they are few next to
        the postings, only they are scored. The result is the same either way.
        """
        with self._lock:
            return self._search(query_keys, k, session, kind_mask, tier_mask, min_importance,
                                tag_hashes, exhaustive, session_docs)

    def _search(self, query_keys, Py_ssize_t k, int64_t session, int64_t kind_mask,
                int64_t tier_mask, int64_t min_importance, tag_hashes, bint exhaustive,
                session_docs):
        cdef const uint64_t[::1] qk = _keys_array(query_keys)
        cdef const uint32_t[::1] cand = None
        cdef const uint32_t* cand_p = NULL
        cdef const uint64_t[::1] tg = _keys_array(() if tag_hashes is None else tag_hashes)
        cdef Query q
        cdef Eng e, e2
        cdef Job job
        cdef bint parallel
        cdef int64_t G, j, total = 0, m, li, most = 0, nl
        cdef const Group* groups
        cdef const PList* lists
        cdef const uint32_t* gterms
        cdef const double* a
        cdef uint32_t d
        cdef bint pruned
        if k < 0:
            raise ValueError("k must be >= 0")
        self.last_pruned = False
        self.last_parallel = False
        self.last_session_docs = False
        self.last_windows_skipped = 0
        self.last_blocks_skipped = 0
        self.last_docs_skipped = 0
        if k > self._n_live:
            k = self._n_live
        if k == 0 or qk.shape[0] == 0:
            return _empty_result()
        self._grow_scratch()
        self._prepare(&q)
        for m in range(256):
            q.okmeta[m] = ((m & IX_LIVE) != 0 and (kind_mask >> (m & 7)) & 1 == 1
                           and (tier_mask >> ((m >> 3) & 3)) & 1 == 1)
        q.session = session
        q.min_imp = <int32_t>max(-1, min(min_importance, 101))
        q.tags = _ptr(tg)
        q.n_tags = tg.shape[0]
        q.extra = session >= 0 or min_importance > 0 or tg.shape[0] > 0
        G = self._make_groups(&q, _ptr(qk), qk.shape[0])
        if G == 0:
            return _empty_result()
        groups = <const Group*>self._q_groups.data
        lists = <const PList*>self._q_lists.data
        gterms = <const uint32_t*>self._q_terms.data
        for j in range(G):
            total += groups[j].n_postings
        pruned = not exhaustive
        self.last_pruned = pruned
        # Scratch sized by the query: the lists of the segment that has the most of them.
        for m in range(self._n_views):
            nl = 0
            for li in range(self._q_lists.len):
                nl += lists[li].seg == m
            most = max(most, nl)
        (<_Scratch>self._scr[0]).engine(&e, &q, groups, G, gterms, most, k)
        if session >= 0 and session_docs is not None and not exhaustive:
            cand = np.ascontiguousarray(session_docs, dtype=np.uint32)
            if cand.shape[0] * 16 > total:             # postings are cheaper to scan
                cand = None
        self.last_session_docs = cand is not None
        if cand is not None and cand.shape[0] > 0:
            cand_p = &cand[0]
        parallel = (pruned and cand is None and total >= IX_PAR_MIN
                    and self._n_docs >= 4 * self.window)
        if parallel and not cvm_worker_alive(<cvm_worker*>self._worker):
            self._worker = cvm_worker_new()           # NULL (no thread): run alone
            parallel = self._worker != NULL
        self.last_parallel = parallel
        if parallel:
            (<_Scratch>self._scr[1]).engine(&e2, &q, groups, G, gterms, most, k)
            e.peer_theta = &e2.theta
            e2.peer_theta = &e.theta
            job.e = &e2
            job.lists = lists
            job.window = self.window
            job.prune = pruned
        with nogil:
            if cand is not None:
                _run_docs(&e, lists, cand_p, cand.shape[0])
            elif parallel:
                cvm_worker_post(<cvm_worker*>self._worker, _run_second_half, &job)
                _run(&e, lists, self.window, pruned, 0, 2)
                cvm_worker_wait(<cvm_worker*>self._worker)
                for j in range(e2.nh):
                    _offer(&e, e2.hbd + 3 * <int64_t>e2.heap[j].i, e2.heap[j].d)
            else:
                _run(&e, lists, self.window, pruned, 0, 1)
            _heap_sort(&q, e.heap, e.nh)
        self.last_windows_skipped = e.n_windows_skipped + (e2.n_windows_skipped if parallel else 0)
        self.last_blocks_skipped = e.n_blocks_skipped + (e2.n_blocks_skipped if parallel else 0)
        self.last_docs_skipped = e.n_docs_skipped + (e2.n_docs_skipped if parallel else 0)
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

    def _set_window(self, int64_t n) -> None:
        """Tests and benchmarks: score in windows of n doc ids (a multiple of 64, at most 4096)."""
        if n <= 0 or n % 64 != 0 or n > IX_WINDOW:
            raise ValueError("window must be a positive multiple of 64, at most 4096")
        self.window = n

    # -- compaction, memory, snapshot arrays ----------------------------------------------------

    def compacted(self):
        """A new index holding only the live docs, renumbered densely in their old order, in one
        segment, without the terms no live doc holds; and old_to_new (int64, -1 for dead docs)."""
        with self._lock:
            return self._compacted()

    def _compacted(self):
        cdef SearchIndex out = type(self)(self._k1, (self._w[0], self._w[1], self._w[2]),
                                          (self._b[0], self._b[1], self._b[2]))
        cdef int64_t n = self._n_docs, T = self._t_keys.len, nl = self._n_live, t, nk = 0
        cdef int64_t i, j, o, nt, cap
        cdef cnp.ndarray old_to_new = np.full(n, -1, dtype=np.int64)
        cdef cnp.ndarray tmap = np.full(T, -1, dtype=np.int64)
        cdef int64_t* o2n = <int64_t*>cnp.PyArray_DATA(old_to_new)
        cdef int64_t* tm = <int64_t*>cnp.PyArray_DATA(tmap)
        cdef const uint32_t* df = <const uint32_t*>self._t_df.data
        cdef const uint8_t* meta = <const uint8_t*>self._meta.data
        cdef const uint32_t* toff = <const uint32_t*>self._tag_off.data
        cdef _Segment m
        cdef double c0[3]
        cdef double cb[3]
        self._flush()
        for t in range(T):
            if df[t] > 0:
                tm[t] = nk
                nk += 1
        garr_reserve(&out._t_keys, nk)
        garr_reserve(&out._t_df, nk)
        for t in range(T):
            if tm[t] >= 0:
                (<uint64_t*>out._t_keys.data)[tm[t]] = (<const uint64_t*>self._t_keys.data)[t]
                (<uint32_t*>out._t_df.data)[tm[t]] = df[t]
        out._t_keys.len = out._t_df.len = nk
        cap = IX_TABLE_MIN
        while cap < 2 * nk:
            cap *= 2
        out._table_rebuild(cap)

        garr_reserve(&out._meta, nl)
        garr_reserve(&out._imp, nl)
        garr_reserve(&out._sess, nl)
        garr_reserve(&out._ts, nl)
        garr_reserve(&out._ulid, nl)
        garr_reserve(&out._lens, nl)
        garr_reserve(&out._tag_off, nl + 1)
        nt = 0
        for i in range(n):
            if meta[i] & IX_LIVE:
                nt += toff[i + 1] - toff[i]
        garr_reserve(&out._tag_val, nt)
        o = 0
        nt = 0
        for i in range(n):
            if not (meta[i] & IX_LIVE):
                continue
            o2n[i] = o
            (<uint8_t*>out._meta.data)[o] = meta[i]
            (<uint8_t*>out._imp.data)[o] = (<const uint8_t*>self._imp.data)[i]
            (<int32_t*>out._sess.data)[o] = (<const int32_t*>self._sess.data)[i]
            (<int64_t*>out._ts.data)[o] = (<const int64_t*>self._ts.data)[i]
            memcpy(out._ulid.data + IX_ULID * o, self._ulid.data + IX_ULID * i, IX_ULID)
            memcpy(out._lens.data + 12 * o, self._lens.data + 12 * i, 12)
            j = toff[i + 1] - toff[i]
            memcpy(out._tag_val.data + 8 * nt, self._tag_val.data + 8 * toff[i], <size_t>(8 * j))
            nt += j
            (<uint32_t*>out._tag_off.data)[o + 1] = <uint32_t>nt
            o += 1
        out._meta.len = out._imp.len = out._sess.len = out._ts.len = nl
        out._ulid.len = out._lens.len = nl
        out._tag_off.len = nl + 1
        out._tag_val.len = nt
        out._n_docs = out._n_live = nl
        for i in range(3):
            out._sum_len[i] = self._sum_len[i]
        out._buf_lo = <uint32_t>nl
        if self._segs:
            out._norm(c0, cb)
            m = _merge(self._segs, meta, o2n, tm, <const uint32_t*>out._lens.data, 0, <uint32_t>nl,
                       c0, cb)
            if _nonempty(m):
                out._set_segments([m])
        return out, old_to_new

    def nbytes(self) -> dict:
        """Bytes held (capacity, not length), by part; borrowed (mmap'd) arrays included."""
        cdef int64_t postings = 0
        for s in self._segs:
            for arr in (<_Segment>s).arrays + (<_Segment>s).bm_arrays:
                postings += arr.nbytes
        postings += (garr_bytes(&self._b_doc) + garr_bytes(&self._b_tf) + garr_bytes(&self._b_field)
                     + garr_bytes(&self._b_next) + garr_bytes(&self._b_terms)
                     + garr_bytes(&self._b_tid))
        terms = (garr_bytes(&self._t_keys) + garr_bytes(&self._t_df) + garr_bytes(&self._t_table)
                 + garr_bytes(&self._t_head))
        doc_columns = (garr_bytes(&self._meta) + garr_bytes(&self._imp) + garr_bytes(&self._sess)
                       + garr_bytes(&self._ts) + garr_bytes(&self._ulid) + garr_bytes(&self._lens)
                       + garr_bytes(&self._qlen) + garr_bytes(&self._qlen2)
                       + garr_bytes(&self._tag_off) + garr_bytes(&self._tag_val))
        scratch = (garr_bytes(&self._a_keys) + garr_bytes(&self._a_tids)
                   + garr_bytes(&self._s_gbits)
                   + (<_Scratch>self._scr[0]).nbytes() + (<_Scratch>self._scr[1]).nbytes()
                   + garr_bytes(&self._q_groups) + garr_bytes(&self._q_terms)
                   + garr_bytes(&self._q_lists)
                   + self._n_views * <int64_t>sizeof(SegView))
        return {"postings": postings, "terms": terms, "doc_columns": doc_columns,
                "scratch": scratch}

    def to_arrays(self) -> dict:
        """Everything `from_arrays` needs (merges the segments first). The postings arrays are
        the index's own read-only arrays; the rest are copies."""
        with self._lock:
            return self._to_arrays()

    def _to_arrays(self):
        cdef int64_t n = self._n_docs, T = self._t_keys.len
        cdef int f
        self._merge_segments()
        out = {
            "format": np.array(IX_ARRAYS_FORMAT, dtype=np.int64),
            "n_docs": np.array(n, dtype=np.int64),
            "n_live": np.array(self._n_live, dtype=np.int64),
            "sum_len": np.array([self._sum_len[0], self._sum_len[1], self._sum_len[2]],
                                dtype=np.int64),
            "term_keys": garr_to_numpy(&self._t_keys, np.uint64, (T,)),
            "term_df": garr_to_numpy(&self._t_df, np.uint32, (T,)),
            "term_table": garr_to_numpy(&self._t_table, np.uint32, (self._t_table.len,)),
        }
        seg_arrays = (<_Segment>self._segs[0]).arrays if self._segs else \
            _empty_field_arrays() * 3
        for f, name in enumerate(FIELDS):
            out[f"post_terms_{name}"] = seg_arrays[3 * f]
            out[f"post_offsets_{name}"] = seg_arrays[3 * f + 1]
            out[f"post_data_{name}"] = seg_arrays[3 * f + 2]
        out["doc_meta"] = garr_to_numpy(&self._meta, np.uint8, (n,))
        out["doc_importance"] = garr_to_numpy(&self._imp, np.uint8, (n,))
        out["doc_session"] = garr_to_numpy(&self._sess, np.int32, (n,))
        out["doc_timestamp"] = garr_to_numpy(&self._ts, np.int64, (n,))
        out["doc_ulid"] = garr_to_numpy(&self._ulid, np.uint8, (n, IX_ULID))
        out["doc_lens"] = garr_to_numpy(&self._lens, np.uint32, (n, 3))
        out["tag_offsets"] = garr_to_numpy(&self._tag_off, np.uint32, (n + 1,))
        out["tag_hashes"] = garr_to_numpy(&self._tag_val, np.uint64, (self._tag_val.len,))
        return out

    @classmethod
    def from_arrays(cls, arrays, k1: float = 1.2, weights=(1.0, 1.5, 2.0),
                    b=(0.75, 0.75, 0.5)) -> "SearchIndex":
        """Restore from `to_arrays` output without copying it (arrays may be read-only mmap
        views); what later changes is copied on first write. Sizes, offsets and term ids are
        checked, and every posting list is decoded once (_lists_ok): canonical, within its
        bytes, doc ids ascending and below n_docs, tfs in range. Doc metadata values are not
        checked beyond doc_meta's bits (the snapshot is checksummed)."""
        cdef SearchIndex ix = cls(k1, weights, b)
        cdef int64_t n, T, nl, cap, nt
        cdef int f
        cdef double c0[3]
        cdef double cb[3]
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
        if int(np.count_nonzero(meta & IX_LIVE)) != nl or (n and int(meta.max() & 0x7F) > 0x1D):
            raise ValueError("bad doc_meta")
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
        seg_arrays = []
        for f, name in enumerate(FIELDS):
            terms = _arr(arrays, f"post_terms_{name}", np.uint32, None)
            offsets = _arr(arrays, f"post_offsets_{name}", np.uint32, (terms.shape[0] + 1,))
            data = _arr(arrays, f"post_data_{name}", np.uint8, None)
            _check_offsets(offsets, data.shape[0], f"post_offsets_{name}")
            nt = terms.shape[0]
            if nt and (int(terms[nt - 1]) >= T or not bool(np.all(terms[1:] > terms[:nt - 1]))):
                raise ValueError(f"bad post_terms_{name}")
            if not _lists_ok(offsets, data, <uint32_t>n):
                raise ValueError(f"bad post_data_{name}")
            seg_arrays += [terms, offsets, data]
        ix._n_docs = n
        ix._n_live = nl
        for f in range(3):
            ix._sum_len[f] = int(sum_len[f])
        ix._buf_lo = <uint32_t>n
        if any(seg_arrays[3 * f + 2].shape[0] for f in range(3)):
            ix._norm(c0, cb)
            ix._set_segments([_segment(0, <uint32_t>n, seg_arrays,
                                       <const uint32_t*>ix._lens.data, c0, cb)])
        return ix


cdef bint _nonempty(_Segment s) noexcept:
    return s.v.f[0].n_bytes + s.v.f[1].n_bytes + s.v.f[2].n_bytes > 0


cdef tuple _empty_result():
    return (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64),
            np.empty((0, 3), dtype=np.float64))


cdef object _arr(object arrays, str name, object dtype, object shape):
    """arrays[name] as a C-contiguous array of exactly this dtype (and shape, if given)."""
    a = arrays[name]
    if not isinstance(a, np.ndarray) or a.dtype != dtype:
        raise ValueError(f"{name}: expected a numpy array of {np.dtype(dtype)}")
    if shape is None and a.ndim != 1 or shape is not None and a.shape != tuple(shape):
        raise ValueError(f"{name}: bad shape {a.shape}")
    return np.ascontiguousarray(a)


cdef int _check_offsets(object off, int64_t total, str name) except -1:
    # (no negative indexes: the module is compiled with wraparound off)
    cdef int64_t n = off.shape[0]
    if n == 0 or int(off[0]) != 0 or int(off[n - 1]) != total \
            or not bool(np.all(off[1:] >= off[:n - 1])):
        raise ValueError(f"bad {name}")
    return 0


cdef int64_t _scan_bigrams(const uint64_t* keys, int64_t pos, int64_t n, uint32_t c, uint32_t* out,
                           int64_t cap, int64_t* added) noexcept nogil:
    """Term ids of the CJK bigram keys holding code point c, from pos on, at most cap of them;
    returns where the scan stopped."""
    cdef int64_t m = 0
    cdef uint64_t key
    while pos < n and m < cap:
        key = keys[pos]
        if key >> 62 == 2 and ((key >> 21) & CP_MASK == c or key & CP_MASK == c):
            out[m] = <uint32_t>pos
            m += 1
        pos += 1
    added[0] = m
    return pos


cdef int _lists_ok(object offsets, object data, uint32_t doc_hi) except -1:
    """1 when every list of one field decodes within its bounds, with doc ids below doc_hi,
    else 0 (-1: an exception, e.g. a non-contiguous array)."""
    cdef const uint32_t[::1] off = offsets
    cdef const uint8_t[::1] dat = data
    cdef int64_t i, nt = off.shape[0] - 1
    cdef const uint8_t* base
    cdef bint ok = True
    if dat.shape[0] == 0:
        return nt == 0
    base = &dat[0]
    with nogil:
        for i in range(nt):
            if _list_check(base + off[i], base + off[i + 1], doc_hi) < 0:
                ok = False
                break
    return ok

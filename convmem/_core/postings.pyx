"""Posting lists, their validation, segments and merges of the compiled index.

The list format and the inline primitives that read lists are in postings.pxd (so the scoring
kernels in score.pyx inline them); this module encodes lists, checks untrusted ones, makes
segments (with their block maxima) from the index's buffer or from snapshot arrays, and merges
segments. It has no Python API; index.pyx is its only user. Memory: numpy arrays for what a
segment holds, _common's GArr (PyMem_Raw*, grown without the GIL) while one is being written.
"""
cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_RawCalloc, PyMem_RawFree
from libc.math cimport INFINITY, ceil, nextafterf
from libc.stdlib cimport free, malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np

from convmem._core.shared cimport garr_take
from convmem._core._common cimport (CM_ASSERT, CM_DEBUG, GArr, __builtin_ctz, cm_give_back,
                                    garr_free, garr_grow, garr_init, load_u32, store_u32)
from cpython.ref cimport Py_REFCNT

cnp.import_array()

# A releasing merge (_merge) gives its inputs' pages back each time it has read this many bytes
# past the last give-back of an input: a syscall per few hundred lists at most.
cdef int64_t _give_back_step = 1 << 20
# ... and only where the field's merged lists stay well under the 4 GiB a field may hold: a merge
# that fails on that limit leaves its inputs readable (OverflowError, nothing lost).
cdef int64_t GIVE_BACK_MAX = 0xE0000000


cdef int64_t _given_back = 0                 # bytes given back since the module loaded


def _set_give_back_step(int64_t n) -> None:
    """Tests: a step of one page lets small segments exercise the give-back."""
    global _give_back_step
    _give_back_step = max(n, 1)


def _given_back_bytes() -> int:
    """Tests: the bytes of merged lists given back so far (at most what they held)."""
    return _given_back


cdef int64_t _merge_fault = 0


def _plant_merge_fault(int64_t n) -> None:
    """Tests: the n-th releasing merge from now raises MemoryError once its first field has been
    merged (0: none)."""
    global _merge_fault
    _merge_fault = n


class DamagedPostings(ValueError):
    """A posting list of a mapped snapshot failed its check when first used: it is never read.
    (Its own type, so that callers tell this damage from a bad argument.)"""


cdef uint32_t NO_DOC = 0xFFFFFFFF
cdef uint64_t CX_CP = 0x1FFFFF          # a code point in a CJK key
cdef uint64_t CX_LO = 0xFFFFFFFF


# ---- encoding ----------------------------------------------------------------------------------

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




cdef inline int64_t _encode_bound(int64_t n) noexcept nogil:
    return 20 + 10 * ((n + IX_BLOCK - 1) // IX_BLOCK) + 6 * n




cdef int64_t _encode_list(const uint32_t* docs, const uint8_t* tfs, int64_t n, uint8_t* out,
                          bint lead) noexcept nogil:
    """Encode one posting list (n >= 1; tf bytes, their lead flags written when `lead`: a content
    list) into out (_encode_bound(n) bytes); returns its size."""
    cdef uint32_t vals[IX_BLOCK]
    cdef int64_t o, skip, pay, nb, j, lo, cnt, i, nl
    cdef uint32_t prev, maxv, maxt
    cdef int db, code, lc
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
            store_u32(out + skip + 8 * j, docs[lo + cnt - 1])
            store_u32(out + skip + 8 * j + 4, <uint32_t>(o - pay))
        maxv = 0
        maxt = 0
        nl = 0
        for i in range(cnt):
            vals[i] = docs[lo + i] - prev - 1
            prev = docs[lo + i]
            maxv |= vals[i]
            maxt |= <uint32_t>((tfs[lo + i] & IX_TF_CAP) - 1)
            nl += tfs[lo + i] >> 7
        db = _nbits(maxv)
        code = 0 if maxt == 0 else (1 if maxt <= 1 else (2 if maxt <= 3 else 3))
        lc = 0 if nl == 0 else (1 if nl == cnt else 2)
        out[o] = <uint8_t>(db | (code << 6))
        o += 1
        if lead:
            out[o] = <uint8_t>lc
            o += 1
        o += _pack(vals, cnt, db, out + o)
        if code:
            for i in range(cnt):
                vals[i] = <uint32_t>((tfs[lo + i] & IX_TF_CAP) - 1)
            o += _pack(vals, cnt, 8 if code == 3 else code, out + o)
        if lead and lc == 2:
            for i in range(cnt):
                vals[i] = tfs[lo + i] >> 7
            o += _pack(vals, cnt, 1, out + o)
    return o




# ---- checking untrusted lists ----------------------------------------------------------------

cdef int64_t _list_check(const uint8_t* p, const uint8_t* end, uint32_t doc_hi,
                         int field) noexcept nogil:
    """Decode one whole list from untrusted bytes: its posting count when p..end is exactly one
    canonical list with doc ids below doc_hi, else -1. The varints and the skip table's size are
    checked before the list is opened, and each block's skip entry before its header is read
    (by _block_header, like any list's)."""
    cdef PList L
    cdef BlockHdr h
    cdef uint64_t n, first
    cdef uint32_t docs[IX_BLOCK]
    cdef const uint8_t* q
    cdef int64_t j, nb, lb
    cdef uint64_t prev, d
    cdef int i
    q = varint_checked(p, end, &n)
    if q == NULL or n == 0 or n > <uint64_t>0xFFFFFFFF:
        return -1
    q = varint_checked(q, end, &first)
    if q == NULL or first >= doc_hi:
        return -1
    nb = (<int64_t>n + IX_BLOCK - 1) // IX_BLOCK
    if nb > 1 and end - q < 8 * nb:
        return -1
    _open_list(&L, p, end, field)
    q = L.payload
    prev = <uint64_t>first
    for j in range(nb):
        if nb > 1 and load_u32(L.skip + 8 * j + 4) != <uint32_t>(q - L.payload):
            return -1
        if end - q < (2 if field == 0 else 1):
            return -1
        _block_header(&L, j, &h)                       # the block starts at q: checked above
        lb = (h.cnt + 7) // 8 if h.lc == 2 else 0
        if (h.db > 32 or h.lc > 2
                or end - h.dp < (h.cnt * h.db + 7) // 8 + (h.cnt * h.tb + 7) // 8 + lb):
            return -1
        _unpack(h.dp, h.cnt, h.db, docs)
        for i in range(h.cnt):
            d = docs[i] + (prev + 1 if i > 0 or j > 0 else first)
            if (j == 0 and i == 0 and docs[i] != 0) or d >= doc_hi:
                return -1
            prev = d
        if nb > 1 and load_u32(L.skip + 8 * j) != <uint32_t>prev:
            return -1
        if h.tb == 8:                                 # tf - 1 must stay below IX_TF_CAP
            _unpack(h.tp, h.cnt, 8, docs)
            for i in range(h.cnt):
                if docs[i] >= IX_TF_CAP:
                    return -1
        if h.lc == 2:                                 # some lead, not all; padding bits 0
            d = 0
            for i in range(h.cnt):
                d += (h.lp[i >> 3] >> (i & 7)) & 1
            if d == 0 or d >= <uint64_t>h.cnt or (h.cnt & 7 and h.lp[lb - 1] >> (h.cnt & 7)):
                return -1
        q = h.lp + lb
    if q != end:
        return -1
    return <int64_t>n


cdef int _lists_ok(object offsets, object data, uint32_t doc_hi, int field) except -1:
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
            if _list_check(base + off[i], base + off[i + 1], doc_hi, field) < 0:
                ok = False
                break
    return ok


# ---- segments ----------------------------------------------------------------------------------

cdef class _Segment:
    """One immutable postings segment; `arrays` holds its memory (numpy, maybe a read-only mmap),
    `bm_arrays` its block maxima."""

    def __cinit__(self):
        self.arrays = []
        self.bm_arrays = []
        self.bx_arrays = []
        self.checked_mem = NULL

    def __dealloc__(self):
        PyMem_RawFree(self.checked_mem)


cdef inline void _bx_block(uint8_t* out, const double* vv, const uint32_t* bd, int64_t c,
                           const uint32_t* dcols, uint32_t doc_lo, double r) noexcept nogil:
    """A block's filter maxima from its postings' x (vv) and its bound r: each column's share of
    r in fifteenths, rounded up, ceil(15 * max / r), two columns a byte. Each posting's level
    ceil(15 * x / r) ORs its doc's columns into that level's mask, and a column gets the highest
    level whose mask holds it: one OR a posting, no branch (ceil is monotone, so the level of
    the maximum is the maximum of the levels). The 1e-12 covers the rounding of the product
    with 15 / r against the quotient."""
    cdef uint32_t at[16]
    cdef double inv = 15.0 / r * (1.0 + 1e-12) if r > 0.0 else 0.0
    cdef int64_t i
    cdef int l
    cdef uint32_t m, done = 0, k
    memset(at, 0, sizeof(at))
    memset(out, 0, IX_BX)
    for i in range(c):
        l = <int>ceil(vv[i] * inv)
        at[l if l < 15 else 15] |= dcols[bd[i] - doc_lo]
    for l in range(15, 0, -1):
        m = at[l] & ~done
        done |= m
        while m:
            k = <uint32_t>__builtin_ctz(m)
            m &= m - 1
            out[k >> 1] |= <uint8_t>(l << ((k & 1) << 2))


cdef uint32_t* _doc_columns(const DocCols* cols, uint32_t doc_lo, uint32_t doc_hi) noexcept nogil:
    """Per doc of [doc_lo, doc_hi), the filter maxima columns it counts in (bit c: column c): its
    kind, its tier, the importance floors it reaches, its tags' buckets (_doc_tag_buckets). Taken once
    a segment, so that _bm_fill reads one word a posting; NULL when out of memory."""
    cdef uint32_t* out = <uint32_t*>malloc(sizeof(uint32_t) * (<size_t>(doc_hi - doc_lo) + 1))
    cdef uint32_t d, m
    cdef uint8_t meta
    cdef int t
    if out == NULL:
        return NULL
    for d in range(doc_lo, doc_hi):
        meta = cols.meta[d]
        m = (1u << (meta & 7)) if (meta & 7) < IX_BX_KINDS else 0
        m |= 1u << (IX_BX_TIER + ((meta >> 3) & 3))
        for t in range(IX_BX_IMP_N):
            if cols.imp[d] >= IX_BX_IMP_FLOOR + 10 * t:
                m |= 1u << (IX_BX_IMP + t)
        m |= _doc_tag_buckets(cols.tag_off, cols.tag_val, d) << IX_BX_TAG
        out[d - doc_lo] = m
    return out


cdef int64_t _bm_fill(const FieldPostings* fp, const DocCols* cols, const uint32_t* dcols,
                      uint32_t doc_lo, int f, double c0, double cb, uint32_t* bterms,
                      uint32_t* boff, float* bm, uint8_t* bx, int64_t* n_blocks) noexcept nogil:
    """The block maxima of one field's lists of more than one block (see FieldPostings), and
    their filter maxima when bx is given (dcols: the docs' columns from doc_lo, _doc_columns);
    with bm NULL only counts. Returns the number of such lists; n_blocks gets their blocks."""
    cdef int64_t li, j, i, c, nl = 0, nbk = 0
    cdef PList L
    cdef uint32_t bd[IX_BLOCK]
    cdef uint8_t bt[IX_BLOCK]
    cdef double vv[IX_BLOCK]
    cdef double mx, v
    cdef float r
    for li in range(fp.n_terms):
        _open_list(&L, fp.data + fp.offsets[li], fp.data + fp.n_bytes, f)
        if L.nb < 2:
            continue
        if bm != NULL:
            bterms[nl] = <uint32_t>li
            boff[nl] = <uint32_t>nbk
            for j in range(L.nb):
                c = _block(&L, j, bd, bt)
                mx = 0.0
                for i in range(c):
                    v = <double>(bt[i] & IX_TF_CAP) / (
                        c0 + cb * <double>cols.lens[3 * <int64_t>bd[i] + f])
                    vv[i] = v
                    if v > mx:
                        mx = v
                r = <float>mx
                if <double>r < mx:                    # round up: it is a bound
                    r = nextafterf(r, INFINITY)
                bm[nbk + j] = r
                if bx != NULL:
                    _bx_block(bx + IX_BX * (nbk + j), vv, bd, c, dcols, doc_lo, <double>r)
        nl += 1
        nbk += L.nb
    n_blocks[0] = nbk
    return nl


cdef _Segment _segment(uint32_t doc_lo, uint32_t doc_hi, list arrays, const DocCols* cols,
                       const double* c0, const double* cb):
    """Wrap 9 arrays (terms, offsets, data for each field) as a segment; `cols` (the doc field
    lengths, 3 a doc, for every doc of the segment, and their kinds, tiers, importance and
    tags) give the block maxima, taken with the length normalisation 1 / (c0 + cb * len) of the
    index statistics now, and their filter maxima (see FieldPostings)."""
    cdef _Segment s = _Segment.__new__(_Segment)
    cdef cnp.ndarray terms, offsets, data, bterms, boff, bm, bx = None
    cdef uint8_t* bxp = NULL
    cdef uint32_t* dcols = NULL
    cdef int64_t nl, nbk = 0
    cdef int f
    s.arrays = arrays
    s.v.doc_lo = doc_lo
    s.v.doc_hi = doc_hi
    s.v.n_dead = 0
    if cols.meta != NULL:
        with nogil:
            dcols = _doc_columns(cols, doc_lo, doc_hi)
        if dcols == NULL:
            raise MemoryError()
    try:
        for f in range(3):
            terms = arrays[3 * f]
            offsets = arrays[3 * f + 1]
            data = arrays[3 * f + 2]
            s.v.f[f].terms = <const uint32_t*>cnp.PyArray_DATA(terms)
            s.v.f[f].offsets = <const uint32_t*>cnp.PyArray_DATA(offsets)
            s.v.f[f].data = <const uint8_t*>cnp.PyArray_DATA(data)
            s.v.f[f].n_terms = terms.shape[0]
            s.v.f[f].n_bytes = data.shape[0]
            s.v.f[f].checked = NULL
            s.v.f[f].doc_hi = doc_hi
            s.v.f[f].field = f
            with nogil:
                nl = _bm_fill(&s.v.f[f], cols, dcols, doc_lo, f, c0[f], cb[f], NULL, NULL, NULL,
                              NULL, &nbk)
            bterms = np.empty(nl, dtype=np.uint32)
            boff = np.empty(nl, dtype=np.uint32)
            bm = np.empty(nbk, dtype=np.float32)
            bxp = NULL
            if dcols != NULL:
                bx = np.empty(IX_BX * nbk, dtype=np.uint8)
                bxp = <uint8_t*>cnp.PyArray_DATA(bx)
            with nogil:
                _bm_fill(&s.v.f[f], cols, dcols, doc_lo, f, c0[f], cb[f],
                         <uint32_t*>cnp.PyArray_DATA(bterms), <uint32_t*>cnp.PyArray_DATA(boff),
                         <float*>cnp.PyArray_DATA(bm), bxp, &nbk)
            s.v.f[f].bm_terms = <const uint32_t*>cnp.PyArray_DATA(bterms)
            s.v.f[f].bm_off = <const uint32_t*>cnp.PyArray_DATA(boff)
            s.v.f[f].bm = <const float*>cnp.PyArray_DATA(bm)
            s.v.f[f].bx = bxp
            s.v.f[f].bm_cb = cb[f]
            s.v.f[f].n_bm = nl
            s.v.f[f].n_bmv = nbk
            s.bm_arrays += [bterms, boff, bm]
            if bxp != NULL:
                s.bx_arrays.append(bx)
    finally:
        free(dcols)
    return s


cdef int _seg_check_all(_Segment s) except -1:
    cdef int f
    cdef int64_t li
    cdef bint bad = False
    cdef FieldPostings* fp
    for f in range(3):
        fp = &s.v.f[f]
        if fp.checked == NULL:
            continue
        with nogil:
            for li in range(fp.n_terms):
                if _list_ready(fp, li) < 0:
                    bad = True
                    break
        if bad:
            raise DamagedPostings(f"damaged posting list {li} in field {f}")
    return 0


cdef int _bm_given(_Segment s, int f, object bterms, object boff, object bm, double bm_cb,
                   object bx) except -1:
    """Adopt stored block maxima for field f after checking their shape: bm_terms ascending,
    each naming a list, bm_off their first blocks in bm, from 0, at least two blocks each
    (only lists of more than one block have maxima) and within bm. Whether a list has as many
    blocks as its entry says is checked with the list itself, on its first use (_list_ready):
    reading every list's header here touched a page of the data per list, and the kernel maps
    the pages around each (at 1M messages 117 of the 173 MB of content postings were resident
    after an open)."""
    cdef const uint32_t[::1] t = bterms
    cdef const uint32_t[::1] o = boff
    cdef const float[::1] m = bm
    cdef FieldPostings* fp = &s.v.f[f]
    cdef int64_t i, nl = t.shape[0], nbv = m.shape[0]
    cdef bint bad = False
    if o.shape[0] != nl:
        raise ValueError("bad block maxima")
    with nogil:
        for i in range(nl):
            if (t[i] >= fp.n_terms or (i > 0 and t[i] <= t[i - 1])
                    or (o[i] != 0 if i == 0 else <int64_t>o[i] < <int64_t>o[i - 1] + 2)):
                bad = True
                break
    if bad or (nl == 0 and nbv != 0) or (nl > 0 and <int64_t>o[nl - 1] + 2 > nbv):
        raise ValueError("bad block maxima")
    if bx is not None and bx.shape[0] != IX_BX * nbv:
        raise ValueError("bad filter maxima")
    fp.bm_terms = &t[0] if nl else NULL
    fp.bm_off = &o[0] if nl else NULL
    fp.bm = &m[0] if nbv else NULL
    fp.bx = NULL
    if bx is not None and nbv:
        fp.bx = <const uint8_t*>cnp.PyArray_DATA(bx)
    fp.bm_cb = bm_cb
    fp.n_bm = nl
    fp.n_bmv = nbv
    s.bm_arrays += [bterms, boff, bm]
    if bx is not None:
        s.bx_arrays.append(bx)
    return 0


cdef _Segment _adopted_segment(uint32_t doc_hi, list arrays, object bm, object bm_cb, object bx,
                               const DocCols* cols, const double* c0, const double* cb):
    cdef _Segment s
    cdef int f
    cdef int64_t total = 0, at = 0
    if bm is None:
        s = _segment(0, doc_hi, arrays, cols, c0, cb)
    else:
        s = _Segment.__new__(_Segment)
        s.arrays = arrays
        s.v.doc_lo = 0
        s.v.doc_hi = doc_hi
        s.v.n_dead = 0
        for f in range(3):
            s.v.f[f].terms = <const uint32_t*>cnp.PyArray_DATA(arrays[3 * f])
            s.v.f[f].offsets = <const uint32_t*>cnp.PyArray_DATA(arrays[3 * f + 1])
            s.v.f[f].data = <const uint8_t*>cnp.PyArray_DATA(arrays[3 * f + 2])
            s.v.f[f].n_terms = arrays[3 * f].shape[0]
            s.v.f[f].n_bytes = arrays[3 * f + 2].shape[0]
            s.v.f[f].doc_hi = doc_hi
            s.v.f[f].field = f
            s.v.f[f].checked = NULL
            s.v.f[f].n_bm = 0
            s.v.f[f].n_bmv = 0
            s.v.f[f].bm_terms = NULL
            s.v.f[f].bm_off = NULL
            s.v.f[f].bm = NULL
            s.v.f[f].bx = NULL
            s.v.f[f].bm_cb = 0.0
        for f in range(3):
            _bm_given(s, f, bm[3 * f], bm[3 * f + 1], bm[3 * f + 2], float(bm_cb[f]),
                      bx[f] if bx is not None else None)
    for f in range(3):
        total += s.v.f[f].n_terms
    s.checked_mem = <uint8_t*>PyMem_RawCalloc(<size_t>(total + 1), 1)
    if s.checked_mem == NULL:
        raise MemoryError()
    for f in range(3):
        s.v.f[f].checked = s.checked_mem + at
        at += s.v.f[f].n_terms
    return s


cdef list _empty_field_arrays():
    return [np.empty(0, dtype=np.uint32), np.zeros(1, dtype=np.uint32), np.empty(0, dtype=np.uint8)]


# -- building segments without the GIL

cdef int _out_init(FieldOut* o, bint lead) noexcept nogil:
    o.lead = lead
    garr_init(&o.terms, 1, 1)
    garr_init(&o.offsets, 1, 1)
    garr_init(&o.data, 1, 1)
    if garr_grow(&o.offsets, 4) < 0:
        return -1
    (<uint32_t*>o.offsets.data)[0] = 0
    o.offsets.len = 4
    return 0


cdef void _out_free(FieldOut* o) noexcept nogil:
    garr_free(&o.terms)
    garr_free(&o.offsets)
    garr_free(&o.data)


cdef int _out_term(FieldOut* o, uint32_t tid) noexcept nogil:
    """Close the list just written to o.data as term tid's (-1: no memory, -2: over 4 GiB)."""
    if o.data.len > <int64_t>0xFFFFFFFF:
        return -2
    if garr_grow(&o.terms, o.terms.len + 4) < 0 or garr_grow(&o.offsets, o.offsets.len + 4) < 0:
        return -1
    (<uint32_t*>(o.terms.data + o.terms.len))[0] = tid
    (<uint32_t*>(o.offsets.data + o.offsets.len))[0] = <uint32_t>o.data.len
    o.terms.len += 4
    o.offsets.len += 4
    return 0


cdef int _out_list(FieldOut* o, uint32_t tid, const uint32_t* docs, const uint8_t* tfs,
                   int64_t n) noexcept nogil:
    if garr_grow(&o.data, o.data.len + _encode_bound(n)) < 0:
        return -1
    o.data.len += _encode_list(docs, tfs, n, <uint8_t*>o.data.data + o.data.len, o.lead)
    return _out_term(o, tid)


cdef list _out_arrays(FieldOut* o):
    """The field as three read-only numpy arrays that take over the raw buffers (o is left
    empty)."""
    cdef int64_t nt = o.terms.len // 4
    terms = garr_take(&o.terms, np.uint32, (nt,))
    offsets = garr_take(&o.offsets, np.uint32, (nt + 1,))
    data = garr_take(&o.data, np.uint8, (o.data.len,))
    return [terms, offsets, data]


cdef int _raise_build_error(int rc) except -1:
    if rc == -2:
        raise OverflowError("a segment field would hold more than 4 GiB of postings")
    raise MemoryError()


cdef int _merge_field(const SegView* views, int64_t k, int f, const uint8_t* meta,
                      const int64_t* dmap, const int64_t* tmap, int64_t* cur, FieldOut* out,
                      GArr* tdocs, GArr* ttfs, int64_t* given) noexcept nogil:
    """k-way merge of one field of segments with ascending doc ranges, dropping dead docs.

    `dmap`/`tmap` (may be NULL) renumber docs/terms; both must be increasing on what is kept, so
    the output stays sorted. A list that only one segment holds, with nothing to drop or
    renumber, is copied as it is (lists hold absolute doc ids). `given[s]` >= 0: segment s's
    lists are read once, in order, and nothing reads them after: the pages read past go back
    to the kernel, `given[s]` the offset up to which they went. Returns 0, -1 or -2 (_out_term).
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
        for s in range(k):
            if given[s] >= 0:
                fp = &views[s].f[f]
                if fp.offsets[cur[s]] - given[s] >= _give_back_step:
                    given[s] = cm_give_back(fp.data, given[s], fp.offsets[cur[s]])
        if holders == 1 and dmap == NULL and views[only].n_dead == 0:
            fp = &views[only].f[f]
            lo = fp.offsets[cur[only]]
            hi = fp.offsets[cur[only] + 1]
            cur[only] += 1
            if garr_grow(&out.data, out.data.len + hi - lo) < 0:
                return -1
            memcpy(out.data.data + out.data.len, fp.data + lo, <size_t>(hi - lo))
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
            _open_list(&L, fp.data + fp.offsets[cur[s]], fp.data + fp.n_bytes, f)
            cur[s] += 1
            if garr_grow(tdocs, 4 * (n + L.n)) < 0 or garr_grow(ttfs, n + L.n) < 0:
                return -1
            od = <uint32_t*>tdocs.data
            ot = <uint8_t*>ttfs.data
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
        rc = _out_list(out, <uint32_t>tmap[t] if tmap != NULL else t, <uint32_t*>tdocs.data,
                       <uint8_t*>ttfs.data, n)
        if rc < 0:
            return rc
    for s in range(k):
        if given[s] >= 0:
            given[s] = cm_give_back(views[s].f[f].data, given[s], views[s].f[f].n_bytes)
    return 0


cdef bint _held_only_by(list arrays, Py_ssize_t i):
    """Whether arrays[i], and the arrays and block under it, are held by nothing but the list
    and each other: no view of its memory is left anywhere else."""
    cdef object o = arrays[i]
    if Py_REFCNT(o) != 2:                     # (the list, o)
        return False
    cdef object b = o.base
    while b is not None:
        if Py_REFCNT(b) != 2:                 # (what it is the base of, b)
            return False
        if not isinstance(b, np.ndarray):
            break
        b = b.base
    return True


cdef _Segment _merge(list segs, const uint8_t* meta, const int64_t* dmap, const int64_t* tmap,
                     const DocCols* cols, uint32_t doc_lo, uint32_t doc_hi, const double* c0,
                     const double* cb, bint release=False):
    """One segment with the live postings of `segs` (ascending doc ranges); see postings.pxd
    for `release`. A merge of the segments of millions of messages would otherwise hold its
    output beside all of its inputs (the peak of a bulk import's memory): with it, about one of
    them."""
    global _given_back, _merge_fault
    cdef int64_t k = len(segs), s, total
    cdef int f, rc = 0
    cdef bint gave = False, planted = False
    cdef SegView* views = <SegView*>PyMem_Malloc(<size_t>(k * sizeof(SegView) + 1))
    cdef int64_t* cur = <int64_t*>PyMem_Malloc(<size_t>(k * sizeof(int64_t) + 1))
    cdef int64_t* given = <int64_t*>PyMem_Malloc(<size_t>(k * sizeof(int64_t) + 1))
    cdef list arrays = []
    cdef FieldOut out
    cdef GArr tdocs, ttfs
    cdef _Segment m
    _out_init_empty(&out)
    garr_init(&tdocs, 1, 1)
    garr_init(&ttfs, 1, 1)
    if release and _merge_fault > 0:
        _merge_fault -= 1
        planted = _merge_fault == 0
    try:
        if views == NULL or cur == NULL or given == NULL:
            raise MemoryError()
        for s in range(k):
            _seg_check_all(<_Segment>segs[s])     # (raw list bytes may be copied as they are)
            views[s] = (<_Segment>segs[s]).v
        for f in range(3):
            total = 0
            for s in range(k):
                total += views[s].f[f].n_bytes
            for s in range(k):
                given[s] = 0 if (release and total <= GIVE_BACK_MAX
                                 and (<_Segment>segs[s]).private
                                 and _held_only_by((<_Segment>segs[s]).arrays, 3 * f + 2)) else -1
            with nogil:
                rc = _out_init(&out, f == 0)
                if rc == 0:
                    rc = _merge_field(views, k, f, meta, dmap, tmap, cur, &out, &tdocs, &ttfs,
                                      given)
            for s in range(k):
                gave = gave or given[s] > 0
                _given_back += max(given[s], 0)
            if rc < 0:
                _raise_build_error(rc)
            if planted:
                raise MemoryError("a planted fault (tests)")
            arrays += _out_arrays(&out)
        m = _segment(doc_lo, doc_hi, arrays, cols, c0, cb)
    except BaseException as exc:
        if gave:  # (whatever failed: the inputs can no longer be read, nor kept)
            raise DamagedPostings("a merge failed after giving back the memory of the lists it "
                                  f"had read ({type(exc).__name__}): its segments are lost") from exc
        raise
    finally:
        _out_free(&out)
        garr_free(&tdocs)
        garr_free(&ttfs)
        PyMem_Free(views)
        PyMem_Free(cur)
        PyMem_Free(given)
    m.private = True
    return m




cdef list _handed_out(list segs):
    cdef _Segment s
    for s in segs:
        s.private = False
    return segs


cdef int _check_same_size(_Segment s, int f, object new) except -1:
    cdef cnp.ndarray a = new
    if (a.ndim != 1 or a.dtype != np.uint8 or not a.flags.c_contiguous
            or a.shape[0] != s.v.f[f].n_bytes):
        raise ValueError("posting data can only be replaced by an array of as many bytes")
    return 0


cdef int _swap_data(_Segment s, int f, object new) except -1:
    """Field f's list bytes read from `new` from now on: the same bytes, elsewhere (the caller
    has checked them with _check_same_size)."""
    s.v.f[f].data = <const uint8_t*>cnp.PyArray_DATA(new)
    s.arrays[3 * f + 2] = new
    return 0


cdef int64_t _spill(_Segment s, object take, int64_t min_bytes) except -1:
    """(postings.pxd) Private only: a segment handed out may be read, off the index's lock, by a
    frozen index or a snapshot through pointers into the data it has now."""
    cdef int f
    cdef int64_t moved = 0
    if not s.private:
        return 0
    for f in range(3):
        if s.v.f[f].n_bytes < min_bytes or not _held_only_by(s.arrays, 3 * f + 2):
            continue
        new = take(s.arrays[3 * f + 2])
        if new is not None:
            _check_same_size(s, f, new)
            _swap_data(s, f, new)  # (the old array goes: its memory back to the kernel)
            moved += s.v.f[f].n_bytes
    return moved


cdef bint _adopt_data(_Segment s, int f, object new) except -1:
    """(postings.pxd)"""
    _check_same_size(s, f, new)
    if not _held_only_by(s.arrays, 3 * f + 2):
        return False
    _swap_data(s, f, new)
    return True


cdef list _merge_newest(list segs, int64_t F, const uint8_t* meta, const DocCols* cols,
                        const double* c0, const double* cb):
    """The merge policy after a flush (counting live docs): the two newest segments while the
    older is not larger (F == 2, a binary counter: a posting is rewritten about log2 of the
    flushes times); with F > 2 (a bulk import), the F newest while the oldest of them holds at
    most twice the newest's (log_F times; its checkpoint merges what is left into one). The
    slack of two is for F > 2 only: flushes vary in live docs, and without it a run of newer
    segments each a little smaller than the one before would never merge."""
    cdef _Segment a, b, m
    while len(segs) >= F:
        a = segs[len(segs) - F]
        b = segs[len(segs) - 1]
        if (a.v.doc_hi - a.v.doc_lo - a.v.n_dead) > (1 if F == 2 else 2) * (
                b.v.doc_hi - b.v.doc_lo - b.v.n_dead):
            break
        m = _merge(segs[len(segs) - F:], meta, NULL, NULL, cols, a.v.doc_lo, b.v.doc_hi, c0, cb,
                   True)
        segs = segs[:len(segs) - F] + ([m] if _nonempty(m) else [])
    return segs


cdef void _out_init_empty(FieldOut* o) noexcept nogil:
    garr_init(&o.terms, 1, 1)
    garr_init(&o.offsets, 1, 1)
    garr_init(&o.data, 1, 1)


cdef object _chains_segment(const uint32_t* terms, int64_t nbt, const int32_t* head,
                            const uint32_t* b_doc, const uint8_t* b_tf, const uint8_t* b_field,
                            const int32_t* b_next, const uint8_t* meta, uint32_t lo, uint32_t hi,
                            const DocCols* cols, const double* c0, const double* cb):
    """The buffer's live postings as a segment of docs [lo, hi), or None when none is left."""
    cdef int64_t i, f
    cdef int64_t cnt[3]
    cdef int32_t e
    cdef _Segment seg
    cdef FieldOut outs[3]
    cdef GArr tdocs[3]
    cdef GArr ttfs[3]
    cdef int rc = 0
    cdef list arrays = []
    for f in range(3):
        _out_init_empty(&outs[f])
        garr_init(&tdocs[f], 1, 1)
        garr_init(&ttfs[f], 1, 1)
    try:
        with nogil:
            for f in range(3):
                if rc == 0:
                    rc = _out_init(&outs[f], f == 0)
            i = 0
            while i < nbt and rc == 0:
                CM_ASSERT(i == 0 or terms[i] > terms[i - 1])
                # chains run newest first: count, then fill each field's list from its end
                cnt[0] = cnt[1] = cnt[2] = 0
                e = head[terms[i]]
                while e >= 0:
                    if meta[b_doc[e]] & IX_LIVE:
                        cnt[b_field[e]] += 1
                    e = b_next[e]
                for f in range(3):
                    if garr_grow(&tdocs[f], 4 * cnt[f]) < 0 or garr_grow(&ttfs[f], cnt[f]) < 0:
                        rc = -1
                if rc < 0:
                    break
                e = head[terms[i]]
                while e >= 0:
                    if meta[b_doc[e]] & IX_LIVE:
                        f = b_field[e]
                        cnt[f] -= 1
                        (<uint32_t*>tdocs[f].data)[cnt[f]] = b_doc[e]
                        (<uint8_t*>ttfs[f].data)[cnt[f]] = b_tf[e]
                        tdocs[f].len += 1
                    e = b_next[e]
                for f in range(3):
                    if tdocs[f].len > 0 and rc == 0:
                        rc = _out_list(&outs[f], terms[i], <uint32_t*>tdocs[f].data,
                                       <uint8_t*>ttfs[f].data, tdocs[f].len)
                    tdocs[f].len = 0
                i += 1
        if rc < 0:
            _raise_build_error(rc)
        for f in range(3):
            arrays += _out_arrays(&outs[f])
    finally:
        for f in range(3):
            _out_free(&outs[f])
            garr_free(&tdocs[f])
            garr_free(&ttfs[f])
    if not any(arrays[3 * f + 2].shape[0] for f in range(3)):
        return None
    seg = _segment(lo, hi, arrays, cols, c0, cb)
    seg.private = True
    return seg


cdef bint _nonempty(_Segment s) noexcept:
    return s.v.f[0].n_bytes + s.v.f[1].n_bytes + s.v.f[2].n_bytes > 0


# -- character lists (docs/SCORING.md "Storage")

cdef int64_t _cx_pairs(const uint64_t* keys, int64_t T, uint64_t* out) noexcept nogil:
    """(code point << 32 | term id) for each CJK unigram and each code point of each CJK bigram
    (once when both are the same); out NULL: only counts."""
    cdef int64_t t, m = 0
    cdef uint64_t key, a, b
    for t in range(T):
        key = keys[t]
        if key >> 62 == 3:
            if out != NULL:
                out[m] = ((key & CX_CP) << 32) | <uint64_t>t
            m += 1
        elif key >> 62 == 2:
            a = (key >> 21) & CX_CP
            b = key & CX_CP
            if out != NULL:
                out[m] = (a << 32) | <uint64_t>t
            m += 1
            if b != a:
                if out != NULL:
                    out[m] = (b << 32) | <uint64_t>t
                m += 1
    return m


cdef int _cx_field(const FieldPostings* fp, const uint64_t* pairs, int64_t lo, int64_t hi,
                   uint32_t doc_lo, uint32_t doc_hi, uint8_t* acc, uint32_t* touched,
                   uint8_t* tfs, FieldOut* o, uint32_t c, const uint8_t* meta, uint16_t* seen,
                   uint16_t stamp, int64_t* df) noexcept nogil:
    """One field's list of character c: the postings of the terms pairs[lo:hi] in fp, tf summed
    per doc and capped at IX_TF_CAP (acc: zero before and after, by doc id); df counts the live
    docs not seen (seen[d] != stamp) in an earlier field."""
    cdef int64_t i, li, j, k, cnt, nt = 0
    cdef uint32_t t, d
    cdef uint32_t bd[IX_BLOCK]
    cdef uint8_t bt[IX_BLOCK]
    cdef uint32_t s
    cdef PList L
    for i in range(lo, hi):
        t = <uint32_t>(pairs[i] & CX_LO)
        li = lower_bound_u32(fp.terms, 0, fp.n_terms, t)
        if li >= fp.n_terms or fp.terms[li] != t:
            continue
        _open_list(&L, fp.data + fp.offsets[li], fp.data + fp.n_bytes, fp.field)
        for j in range(L.nb):
            cnt = _block(&L, j, bd, bt)
            for k in range(cnt):
                d = bd[k]
                if acc[d] == 0:
                    touched[nt] = d
                    nt += 1
                    if seen[d] != stamp:
                        seen[d] = stamp
                        df[0] += (meta[d] & IX_LIVE) != 0
                # the group's tfs add up (capped), its lead flags OR together
                s = <uint32_t>(acc[d] & IX_TF_CAP) + (bt[k] & IX_TF_CAP)
                acc[d] = <uint8_t>((s if s < IX_TF_CAP else IX_TF_CAP) | ((acc[d] | bt[k]) & IX_LEAD))
    if nt == 0:
        return 0
    if nt * 16 >= <int64_t>(doc_hi - doc_lo):     # dense: read the docs off acc in order
        k = 0
        for d in range(doc_lo, doc_hi):
            if acc[d]:
                touched[k] = d
                k += 1
    else:
        qsort(touched, <size_t>nt, 4, _cmp_u32)
    for i in range(nt):
        tfs[i] = acc[touched[i]]
        acc[touched[i]] = 0
    return _out_list(o, c, touched, tfs, nt)


cdef object _char_segment(_Segment seg, const uint64_t* keys, int64_t T, int64_t min_postings,
                          const DocCols* cols, const double* c0, const double* cb):
    cdef int64_t np_, i, lo, f, li, total, df
    cdef uint16_t* seen = NULL
    cdef uint16_t stamp = 0
    cdef GArr dfs
    cdef uint64_t* pairs = NULL
    cdef uint8_t* acc = NULL
    cdef uint32_t* touched = NULL
    cdef uint8_t* tfs = NULL
    cdef uint32_t c, t, doc_lo = seg.v.doc_lo, doc_hi = seg.v.doc_hi
    cdef uint64_t n
    cdef const FieldPostings* fp
    cdef const uint8_t* meta = cols.meta
    cdef FieldOut outs[3]
    cdef GArr chars
    cdef int rc = 0
    cdef list arrays = []
    _seg_check_all(seg)                           # every list is decoded below
    for f in range(3):
        _out_init_empty(&outs[f])
    garr_init(&chars, 1, 1)
    garr_init(&dfs, 1, 1)
    with nogil:
        np_ = _cx_pairs(keys, T, NULL)
    try:
        pairs = <uint64_t*>PyMem_RawCalloc(<size_t>(np_ + 1), 8)
        acc = <uint8_t*>PyMem_RawCalloc(<size_t>doc_hi + 1, 1)
        touched = <uint32_t*>PyMem_RawCalloc(<size_t>(doc_hi - doc_lo) + 1, 4)
        tfs = <uint8_t*>PyMem_RawCalloc(<size_t>(doc_hi - doc_lo) + 1, 1)
        seen = <uint16_t*>PyMem_RawCalloc(<size_t>doc_hi + 1, 2)
        if pairs == NULL or acc == NULL or touched == NULL or tfs == NULL or seen == NULL:
            raise MemoryError()
        with nogil:
            for f in range(3):
                if rc == 0:
                    rc = _out_init(&outs[f], f == 0)
            _cx_pairs(keys, T, pairs)
            qsort(pairs, <size_t>np_, 8, _cmp_u64)
            i = 0
            while i < np_ and rc == 0:
                lo = i
                c = <uint32_t>(pairs[i] >> 32)
                total = 0
                while i < np_ and <uint32_t>(pairs[i] >> 32) == c:
                    t = <uint32_t>(pairs[i] & CX_LO)
                    for f in range(3):
                        fp = &seg.v.f[f]
                        li = lower_bound_u32(fp.terms, 0, fp.n_terms, t)
                        if li < fp.n_terms and fp.terms[li] == t:
                            varint_trusted(fp.data + fp.offsets[li], &n)
                            total += <int64_t>n
                    i += 1
                if total < min_postings:
                    continue
                if garr_grow(&chars, chars.len + 4) < 0 or garr_grow(&dfs, dfs.len + 4) < 0:
                    rc = -1
                    break
                (<uint32_t*>(chars.data + chars.len))[0] = c
                chars.len += 4
                stamp += 1
                if stamp == 0:                        # wrapped: no doc holds stamp 1 then
                    memset(seen, 0, <size_t>(2 * (doc_hi + 1)))
                    stamp = 1
                df = 0
                for f in range(3):
                    if rc == 0:
                        rc = _cx_field(&seg.v.f[f], pairs, lo, i, doc_lo, doc_hi, acc, touched,
                                       tfs, &outs[f], c, meta, seen, stamp, &df)
                (<uint32_t*>(dfs.data + dfs.len))[0] = <uint32_t>df
                dfs.len += 4
        if rc < 0:
            _raise_build_error(rc)
        out_chars = np.empty(chars.len // 4, dtype=np.uint32)
        out_df = np.empty(dfs.len // 4, dtype=np.uint32)
        if chars.len:
            memcpy(cnp.PyArray_DATA(out_chars), chars.data, <size_t>chars.len)
            memcpy(cnp.PyArray_DATA(out_df), dfs.data, <size_t>dfs.len)
        for f in range(3):
            arrays += _out_arrays(&outs[f])
    finally:
        for f in range(3):
            _out_free(&outs[f])
        garr_free(&chars)
        garr_free(&dfs)
        PyMem_RawFree(seen)
        PyMem_RawFree(pairs)
        PyMem_RawFree(acc)
        PyMem_RawFree(touched)
        PyMem_RawFree(tfs)
    if out_chars.shape[0] == 0:
        return None
    return out_chars, out_df, _segment(doc_lo, doc_hi, arrays, cols, c0, cb)


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

"""Scoring of the compiled index: BM25F kernels, filters, the top-k heap, window pruning, the
second scoring thread and the per-thread scratch (docs/SCORING.md; `pyindex` is the oracle).

Everything here runs without the GIL and allocates nothing per posting; lists are read with the
inline primitives of postings.pxd. index.pyx calls _score once per query.

Top k, document at a time in windows (docs/SCORING.md "Pruning"): a query is scored segment by
segment, each segment in windows of at most `window` doc ids, with fixed-size scratch (nothing per
query grows with the corpus). In a window every group gets an upper bound from the block maxima
of its lists there. Once the heap holds k docs, the groups whose bounds together stay below the
k-th score are "non-essential": the other groups are accumulated term-at-a-time inside the window,
and each doc they touch is finished by probing the non-essential groups (highest bound first)
only while it can still reach the k-th score. A window whose bounds sum below the k-th score is
skipped without decoding anything. Every doc that can enter the heap gets its exact breakdown,
groups in ascending key order.

Large queries are split between two threads: one persistent worker per index (_common.h's
cm_worker) runs half of each segment's windows while the calling thread runs the other half.
The two halves share only their heaps' scores (a seqlock) and k-th best scores (relaxed atomic
loads and stores): the k-th best of both heaps' scores is a lower bound of the final k-th best, so
each half may prune with it, and the merged top k is the same as with one thread.
"""
from libc.math cimport INFINITY
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport qsort
from libc.string cimport memcmp, memcpy, memset

from convmem._core._common cimport (CM_ASSERT, CM_DEBUG, GArr, __builtin_ctzll, cm_load_relaxed,
                                    cm_seq_now, cm_seq_read, cm_seq_write, cm_store_relaxed,
                                    cm_worker, cm_worker_post, cm_worker_wait, garr_bytes,
                                    garr_extend, garr_free, garr_init, garr_reserve)
from convmem._core.postings cimport (IX_BLOCK, IX_BX, IX_BX_IMP, IX_BX_IMP_FLOOR, IX_BX_IMP_N,
                                     IX_BX_KINDS, IX_BX_TAG, IX_BX_TIER, IX_LEAD, IX_LIVE,
                                     IX_TF_CAP, IX_ULID, PList, _bx_col, _tag_bucket,
                                     SegView, _block, _block_last, _cmp_u32,
                                     _find_block)

cdef double EPS = 1e-9          # relative margin of the pruning bounds (docs/SCORING.md)


# ---- scoring kernels (nogil) -------------------------------------------------------------------

cdef inline bint _extra_ok(const Query* q, uint32_t d) noexcept nogil:
    """Session, importance, tag, time and doc-range filters (kind, tier, role and liveness are
    in q.okmeta). Each per-doc column is read only when its filter is asked: at 10M messages a
    doc's timestamp is a cache miss of its own (80 MB of them), a tenth of a filtered query's
    time when it was read for every doc that reached this test."""
    cdef int64_t i, j, lo, hi, ts
    cdef bint found
    if d >= q.doc_hi:
        return False
    if q.min_imp > 0 and q.imp[d] < q.min_imp:
        return False
    if q.session >= 0 and q.sess[d] != q.session:
        return False
    if q.ts_lo != INT64_MIN or q.ts_hi != INT64_MAX:
        ts = q.ts[d]
        if ts < q.ts_lo or ts >= q.ts_hi:
            return False
    if q.n_tags == 0:
        return True
    if q.tagb[d] & q.bx_tagb != q.bx_tagb:
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


cdef inline uint32_t _tf_add(uint32_t w, int f, uint32_t tf) noexcept nogil:
    """Add the tf byte `tf` to byte f of the packed group tfs: the tfs add up, saturating at
    IX_TF_CAP, the lead flags (bit 7, content only) OR together."""
    cdef int sh = 8 * f
    cdef uint32_t old = (w >> sh) & 0xFF
    cdef uint32_t v = (old & IX_TF_CAP) + (tf & IX_TF_CAP)
    if v > IX_TF_CAP:
        v = IX_TF_CAP
    v |= (old | tf) & IX_LEAD
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
        tf = (w >> (8 * f)) & IX_TF_CAP
        if tf:
            x[f] = q.w[f] * <double>tf / ((1.0 - q.b[f]) + q.b[f] * <double>ln[f] / q.avgdl[f])
        else:
            x[f] = 0.0
    big_x = (x[0] + x[1]) + x[2]
    den = q.k1 + big_x
    out[0] += idf * x[0] / den
    if w & IX_LEAD:
        out[0] += q.lead * idf
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
# (see the module docstring)

cdef uint32_t NOT_PROBED = 0xFFFFFFFF
cdef uint32_t PAST_ALL = 0xFFFFFFFF  # LState.pnext of a list with no doc left to probe


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
    s.pnext = L.first if L.n > 0 else PAST_ALL
    s.ppblk = -1
    s.ppos = 0
    s.last1 = 0
    s.xm1 = 0.0
    # blocks spanning q.sparse_span doc ids or more on average (_ls_bound); a one-block list is
    # decoded here anyway, so its docs bound every window
    s.sparse = q.sparse_span > 0 and (L.skip == NULL or (
        <int64_t>_block_last(L, L.nb - 1) - L.first >= q.sparse_span * L.nb))
    if L.skip == NULL and L.n > 0:                   # one block: decode it once, bound it exactly
        s.ccnt = _block(L, 0, s.bd, s.bt)
        s.cblk = 0
        s.last1 = s.bd[s.ccnt - 1]
        for i in range(s.ccnt):
            if not q.okmeta[q.meta[s.bd[i]]]:          # (never scored: no bound from it)
                continue
            v = q.w[f] * <double>(s.bt[i] & IX_TF_CAP) / (q.c0[f] + q.cb[f] * <double>q.lens[3 * <int64_t>s.bd[i] + f])
            if v > mx:
                mx = v
        s.xm1 = mx


cdef inline double _ub(const Query* q, double idf, double big_x) noexcept nogil:
    """A bound of a group's parts at X <= big_x, the lead bonus included (a block or window
    bound does not know which docs are lead)."""
    if big_x == 0.0:
        return 0.0
    return idf * big_x / (q.k1 + big_x) + q.lead * idf


def _qlen_floor(uint32_t n) -> int:
    """Tests: the length a content length of n is bounded with."""
    return _qlen_value(_qlen_code(n))


cdef void _set_bx_columns(Query* q, int64_t kind_mask, int64_t tier_mask,
                          int64_t min_importance, const uint64_t* tags, int64_t n_tags) noexcept:
    """The filter maxima columns a block bound takes for these filters (Query.bx_*): a kind
    mask that leaves some kind out and asks no kind past the six, a tier mask that leaves some
    tier out, an importance floor of at least IX_BX_IMP_FLOOR (the highest floor not above it),
    the bucket of each tag asked (a doc holds every tag asked, so a doc of each bucket)."""
    cdef int i
    q.bx_nk = 0
    q.bx_nt = 0
    q.bx_imp = -1
    q.bx_tagb = 0
    if (kind_mask & 0xFF) >> IX_BX_KINDS == 0 and (kind_mask & 0x3F) != 0x3F:
        for i in range(IX_BX_KINDS):
            if (kind_mask >> i) & 1:
                q.bx_kinds[q.bx_nk] = <uint8_t>i
                q.bx_nk += 1
        if q.bx_nk == 0:                             # no kind asked: no doc passes anyway
            q.bx_kinds[0] = 0
            q.bx_nk = 1
    if (tier_mask & 0x0F) != 0x0F:
        for i in range(4):
            if (tier_mask >> i) & 1:
                q.bx_tiers[q.bx_nt] = <uint8_t>i
                q.bx_nt += 1
        if q.bx_nt == 0:
            q.bx_tiers[0] = 0
            q.bx_nt = 1
    if min_importance >= IX_BX_IMP_FLOOR:
        q.bx_imp = IX_BX_IMP + <int32_t>min(IX_BX_IMP_N - 1,
                                            (min_importance - IX_BX_IMP_FLOOR) // 10)
    for i in range(n_tags):
        q.bx_tagb |= <uint8_t>(1 << _tag_bucket(tags[i]))
    q.bx_on = q.bx_nk > 0 or q.bx_nt > 0 or q.bx_imp >= 0 or q.bx_tagb != 0


cdef void _set_filters(Query* q, int64_t session, int64_t kind_mask, int64_t tier_mask,
                       int64_t role_mask, int64_t min_importance, const uint64_t* tags,
                       int64_t n_tags, int64_t ts_lo, int64_t ts_hi, uint32_t doc_hi,
                       bint filter_maxima) noexcept:
    """What the query keeps: its okmeta table (liveness, kinds, tiers, roles), the filters
    _extra_ok checks, and the filter maxima columns its block bounds take (_set_bx_columns,
    none unless `filter_maxima`)."""
    cdef int m
    for m in range(256):
        q.okmeta[m] = ((m & IX_LIVE) != 0 and (kind_mask >> (m & 7)) & 1 == 1
                       and (tier_mask >> ((m >> 3) & 3)) & 1 == 1
                       and (role_mask >> ((m >> 5) & 3)) & 1 == 1)
    q.session = session
    q.min_imp = <int32_t>max(-1, min(min_importance, 101))
    q.tags = tags
    q.n_tags = n_tags
    q.ts_lo = ts_lo
    q.ts_hi = ts_hi
    q.doc_hi = doc_hi
    q.extra = (session >= 0 or min_importance > 0 or n_tags > 0 or ts_lo != INT64_MIN
               or ts_hi != INT64_MAX or doc_hi != 0xFFFFFFFF)
    _set_bx_columns(q, kind_mask, tier_mask, min_importance, tags, n_tags)
    q.bx_on = q.bx_on and filter_maxima


cdef inline double _bx_share(const Query* q, const uint8_t* b) noexcept nogil:
    """The share of a block's maximum that bounds the docs the kind, tier, importance and tag
    filters keep: the smallest of the largest kind column asked, the largest tier column asked,
    the importance column and each asked tag's bucket column, each rounded up
    (FieldPostings.bx)."""
    cdef uint32_t m = 15, v, t, tb
    cdef int32_t i
    if q.bx_nk:
        v = 0
        for i in range(q.bx_nk):
            t = _bx_col(b, q.bx_kinds[i])
            if t > v:
                v = t
        m = v
    if q.bx_nt:
        v = 0
        for i in range(q.bx_nt):
            t = _bx_col(b, IX_BX_TIER + q.bx_tiers[i])
            if t > v:
                v = t
        if v < m:
            m = v
    if q.bx_imp >= 0:
        t = _bx_col(b, q.bx_imp)
        if t < m:
            m = t
    tb = q.bx_tagb
    i = 0
    while tb:
        if tb & 1:
            t = _bx_col(b, IX_BX_TAG + i)
            if t < m:
                m = t
        tb >>= 1
        i += 1
    return <double>m * (1.0 / 15.0)


cdef inline double _block_x(const Query* q, const LState* s, int64_t j) noexcept nogil:
    """A bound of x_f over the docs of block j of the list that the filters keep."""
    cdef const PList* L = s.L
    if L.skip == NULL:
        return s.xm1
    if L.bm == NULL:
        return q.w[L.field] * IX_TF_CAP / q.c0[L.field] if q.c0[L.field] > 0.0 else INFINITY
    if q.bx_on and L.bx != NULL:
        return L.bmf * <double>L.bm[j] * _bx_share(q, L.bx + <int64_t>IX_BX * j)
    return L.bmf * <double>L.bm[j]


cdef inline bint _decoded_in(LState* s, int64_t j, uint32_t wlo, uint32_t whi) noexcept nogil:
    """Whether the decoded block (s.cblk == j) holds a doc in [wlo, whi); its docs before wlo
    are passed over for good (windows only move forward, as s.cpos does)."""
    cdef int64_t i = s.cpos
    while i < s.ccnt and s.bd[i] < wlo:
        i += 1
    s.cpos = i
    return i < s.ccnt and s.bd[i] < whi


cdef bint _ls_bound(const Query* q, LState* s, uint32_t wlo, uint32_t whi,
                    double* xmax) noexcept nogil:
    """Whether the list may hold docs in [wlo, whi); if so, a bound of x_f there."""
    cdef const PList* L = s.L
    cdef int64_t j
    cdef double mx = 0.0, v
    if L.n == 0 or L.first >= whi:
        return False
    if L.skip == NULL:
        if s.last1 < wlo or (s.sparse and not _decoded_in(s, 0, wlo, whi)):
            return False
        xmax[0] = s.xm1
        return True
    j = _find_block(L, s.bblk, wlo)
    s.bblk = j
    if j >= L.nb or (j > 0 and _block_last(L, j - 1) >= whi - 1):
        return False
    if s.sparse and _block_last(L, j) >= whi:
        # A sparse list's block spans many windows, so it may hold none of this window's docs;
        # its docs say, decoded once for all the windows it spans (into the buffer the
        # term-at-a-time reads). Without this a rare word's block bounded every window, and
        # no window was ever skipped. (A denser list's block is not decoded for this: most of
        # its windows hold docs of it, and a non-essential list is never decoded otherwise.)
        if s.cblk != j:
            s.ccnt = _block(L, j, s.bd, s.bt)
            s.cblk = j
            s.cpos = 0
        if not _decoded_in(s, j, wlo, whi):
            return False
        xmax[0] = _block_x(q, s, j)
        return True
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
    cdef uint8_t tb = q.bx_tagb
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
            if tb and q.tagb[d] & tb != tb:
                continue                              # (a tag asked is not among its tags)
            if extra and q.extra and not _extra_ok(q, d):
                continue
            x = d - wlo
            CM_ASSERT(x < IX_WINDOW and (i < 2 or s.bd[i - 2] < d))
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
    """The group's packed tfs at doc d (probes move forward only: d never decreases). Each list
    keeps its next doc past the last probe (pnext): most probes of a sparse list (a common
    word's summary or tags, a rare key of a CJK group) end at that one comparison."""
    cdef int64_t i, j, blk, lo, hi, mid
    cdef uint32_t w = 0, tf
    cdef LState* s
    cdef const PList* L
    for i in range(e.goff[g], e.goff[g + 1]):
        s = &e.ls[i]
        if d < s.pnext:
            continue
        L = s.L
        if L.skip == NULL:
            if d > s.last1:
                s.pnext = PAST_ALL
                continue
            lo = 0
            hi = s.ccnt
            while lo < hi:
                mid = (lo + hi) >> 1
                if s.bd[mid] < d:
                    lo = mid + 1
                else:
                    hi = mid
            if s.bd[lo] != d:                           # (lo < ccnt: d <= last1)
                s.pnext = s.bd[lo]
                continue
            tf = s.bt[lo]
            s.pnext = d
        else:
            blk = _find_block(L, s.pblk, d)
            s.pblk = blk
            if blk >= L.nb:
                s.pnext = PAST_ALL
                continue
            if s.cblk != blk:                           # decoded whole, into the buffer the
                s.ccnt = _block(L, blk, s.bd, s.bt)    # term-at-a-time reads (it starts over)
                s.cblk = blk
                s.cpos = 0
            j = s.ppos if s.ppblk == blk else 0
            while s.bd[j] < d:                          # (its last doc is >= d)
                j += 1
            s.ppblk = blk
            s.ppos = j
            if s.bd[j] != d:
                s.pnext = s.bd[j]
                continue
            tf = s.bt[j]
            s.pnext = d
        if tf:
            w = _tf_add(w, L.field, tf)
    return w


cdef void _set_ctab(Query* q, bint pruned, int64_t postings) noexcept nogil:
    cdef int64_t t, m
    cdef double a
    q.ctab_on = pruned and postings >= IX_CTAB_MIN
    if not q.ctab_on:
        return
    for t in range(1, IX_CTAB_TF + 1):
        a = q.w[0] * <double>t
        for m in range(256):
            q.ctab[(t - 1) * 256 + m] = a / (q.k1 * q.qnorm[m] + a)


cdef inline double _approx_total(const Query* q, uint32_t d, uint32_t w, double idf) noexcept nogil:
    """An upper bound of a group's part sum (_add_parts summed; within a few ulps: the bounds
    carry a 1e-9 margin) with one division instead of five. The content length is read
    from the one-byte q.qlen, rounded down (so the norm is not larger); a content-only doc needs
    one division, or none when its tf is in q.ctab: at 10M messages, queries of several common
    words spent about a tenth of their time on that division, once a doc and essential group."""
    cdef const uint8_t* ql
    cdef double big_x, a, bonus = q.lead * idf if w & IX_LEAD else 0.0
    cdef uint32_t tf
    cdef int f
    if w <= 0xFF:                                     # content only: X = a / norm
        tf = w & IX_TF_CAP
        if q.ctab_on and tf - 1 < <uint32_t>IX_CTAB_TF:  # (tf 1..IX_CTAB_TF; 0 wraps past)
            return idf * q.ctab[(tf - 1) * 256 + q.qlen[d]] + bonus
        a = q.w[0] * <double>tf
        return idf * a / (q.k1 * q.qnorm[q.qlen[d]] + a) + bonus
    ql = q.qlen2 + 2 * <int64_t>d - 1                 # ql[1], ql[2]: summary, tags
    # w_f / norm from a table: a multiplication where there were two divisions (a doc whose
    # summary or tags hold the key; within an ulp of the quotient, inside the bounds' margin)
    big_x = <double>(w & IX_TF_CAP) * q.wqinv[q.qlen[d]]
    for f in range(1, 3):
        tf = (w >> (8 * f)) & IX_TF_CAP
        if tf:
            big_x += <double>tf * q.wqinv[256 * f + ql[f]]
    return idf * big_x / (q.k1 + big_x) + bonus


cdef void _heap_check(const Eng* e) noexcept nogil:
    """Debug builds: at most k items, none better than its parent (the worst is at the root),
    and each item's score is the sum of the breakdown in its slot."""
    cdef int64_t i
    cdef const double* a
    CM_ASSERT(0 <= e.nh and e.nh <= e.k)
    for i in range(e.nh):
        CM_ASSERT(i == 0 or not _better(e.q, e.heap[(i - 1) >> 1].s, e.heap[(i - 1) >> 1].d,
                                        e.heap[i].s, e.heap[i].d))
        CM_ASSERT(e.heap[i].i < e.k)
        a = e.hbd + 3 * <int64_t>e.heap[i].i
        CM_ASSERT((a[0] + a[1]) + a[2] == e.heap[i].s)


cdef inline void _offer(Eng* e, const double* a, uint32_t d) noexcept nogil:
    """Offer doc d with its exact breakdown a[0..2]; a taken doc keeps its breakdown in the slot
    of e.hbd that its heap item names (the slot of the item it replaces)."""
    cdef double s = (a[0] + a[1]) + a[2]
    cdef int64_t slot
    if e.q.primed and (e.q.gbits[d >> 6] >> (d & 63)) & 1:
        return                                        # offered once already, by _prime
    if e.nh < e.k:
        slot = e.nh
    elif _better(e.q, s, d, e.heap[0].s, e.heap[0].d):
        slot = e.heap[0].i
    else:
        return
    memcpy(e.hbd + 3 * slot, a, 3 * sizeof(double))
    e.nh = _heap_offer(e.q, e.heap, e.nh, e.k, s, d, <uint32_t>slot)
    e.n_taken += 1
    if CM_DEBUG:
        _heap_check(e)
    if e.nh == e.k and e.heap[0].s > e.theta:         # (theta may be the two heaps' k-th)
        cm_store_relaxed(&e.theta, e.heap[0].s)


cdef double _kth_largest(double* a, int64_t m, int64_t k) noexcept nogil:
    """The k-th largest of a[0:m] (1 <= k <= m), reordering a (quickselect)."""
    cdef int64_t lo = 0, hi = m - 1, i, j, want = k - 1
    cdef double p, t
    while lo < hi:
        p = a[(lo + hi) >> 1]
        i = lo
        j = hi
        while i <= j:
            while a[i] > p:
                i += 1
            while a[j] < p:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
        if want <= j:
            hi = j
        elif want >= i:
            lo = i
        else:
            return a[want]
    return a[want]


cdef void _share_theta(Eng* e) noexcept nogil:
    """Two threads: publish this heap's scores if it took docs since, and raise theta to the k-th
    best of both heaps' scores. The heaps hold different docs (each window is one thread's, a
    primed doc is offered once), and each score is an exact score, so that k-th is a lower bound
    of the final k-th score, and a better one than either heap's own: each thread has seen only
    half the docs (the threads' tail queries took 0.60 of one thread's time, 0.56 when both were
    given the final k-th score). Every share_every windows; the peer's scores are skipped when it
    is writing them."""
    cdef int64_t i, n = e.nh, m, seen
    cdef double t
    if e.share_wait > 0:
        e.share_wait -= 1
        return
    seen = cm_seq_now(&e.peer.pub_seq)
    if e.n_taken == e.n_taken_pub and seen == e.peer_seen:
        return                                        # (most windows: nothing new)
    e.share_wait = e.share_every - 1
    for i in range(n):
        e.ubuf[i] = e.heap[i].s
    if e.n_taken != e.n_taken_pub:
        cm_seq_write(&e.pub_seq, e.pub, &e.pub_n, e.ubuf, n)
        e.n_taken_pub = e.n_taken
    m = cm_seq_read(&e.peer.pub_seq, e.peer.pub, &e.peer.pub_n, e.ubuf + n, e.k)
    if m < 0:
        return
    e.peer_seen = seen
    if n + m < e.k:
        return
    t = _kth_largest(e.ubuf, n + m, e.k)
    if t > e.theta:
        cm_store_relaxed(&e.theta, t)
        e.n_theta_shared += 1


cdef inline double _theta(Eng* e) noexcept nogil:
    """The best known lower bound of the k-th score (-1: none yet)."""
    cdef double t = e.theta, p
    if e.peer != NULL:
        p = cm_load_relaxed(&e.peer.theta)
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


cdef inline double _x_needed(const Query* q, double u) noexcept nogil:
    """The X at which idf * X / (k1 + X) reaches u * idf (0 when u <= 0, infinite when u >= 1),
    a little low against rounding."""
    if u <= 0.0:
        return 0.0
    if u >= 1.0:
        return INFINITY
    return q.k1 * u / (1.0 - u) * (1.0 - 1e-10)


cdef void _win_pruned(Eng* e, uint32_t wlo, uint32_t whi) noexcept nogil:
    """A window once a k-th score is known (see "top k, document at a time" above). Liveness,
    kinds and tiers are checked while reading the postings; the session, importance and tag
    filters only for the docs that pass the first bound test."""
    cdef const Query* q = e.q
    cdef int64_t G = e.G, g, i, j, ng, wi, ne, g1 = -1
    cdef uint32_t x, w, d
    cdef uint64_t bits
    cdef double lb = _theta(e) * (1.0 - EPS), total = 0.0, cum = 0.0, s, t, c, xm = 0.0, xl = 0.0
    cdef int64_t nsv
    cdef uint64_t pb, ok
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
        # 1e-10 against rounding), or u - lead_w for a lead doc (its bonus is lead_w * idf);
        # content-only docs are tested without a division, against xm (not lead) or xl (lead).
        g1 = e.order[ne]
        t = (lb / (1.0 + EPS) - cum) / e.groups[g1].idf
        if t >= 1.0 + q.lead:
            e.n_windows_skipped += 1
            return
        xm = _x_needed(q, t)
        xl = _x_needed(q, t - q.lead)
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
    if g1 < 0:
        # Several essential groups: first the docs whose essential part, with the others'
        # window bounds, reaches lb, without a branch per doc: most of a common-word query's
        # docs fail the test, in no order a branch predictor learns (the tail's queries about
        # 4% faster so, timed in one process). e.gl, free once the groups are accumulated,
        # holds the docs that pass.
        nsv = 0
        c = 1.0 + EPS
        for wi in range((whi - wlo + 63) >> 6):
            bits = e.wbits[wi]
            e.wbits[wi] = 0
            while bits:
                x = <uint32_t>(wi * 64 + __builtin_ctzll(bits))
                bits &= bits - 1
                d = wlo + x
                pb = (q.gbits[d >> 6] >> (d & 63)) & 1 if q.primed else 0  # scored by _prime
                ok = (e.wacc[x] + cum) * c >= lb
                e.gl[nsv] = x
                nsv += <int64_t>(ok & (pb ^ 1))
                e.n_docs_skipped += <int64_t>((ok ^ 1) & (pb ^ 1))
        for j in range(nsv):
            x = e.gl[j]
            s = e.wacc[x]
            if (s + cum) * (1.0 + EPS) < lb:          # lb rose since (offers, the other thread)
                e.n_docs_skipped += 1
                continue
            lb = _finish_doc(e, wlo + x, s, cum, ne, lb)
        return
    # One essential group: the same walk, kept apart (one walk for both paths, the test behind
    # a branch, was 1.6-2.2% slower: benchmarks/README.md "The tail, 2026-12-06").
    for wi in range((whi - wlo + 63) >> 6):
        bits = e.wbits[wi]
        e.wbits[wi] = 0
        while bits:
            x = <uint32_t>(wi * 64 + __builtin_ctzll(bits))
            bits &= bits - 1
            d = wlo + x
            w = e.wtf[x]
            e.wtf[x] = 0
            if q.primed and (q.gbits[d >> 6] >> (d & 63)) & 1:
                continue                              # scored and offered by _prime
            if w <= 0xFF and q.w[0] * <double>(w & IX_TF_CAP) < (
                    xl if w & IX_LEAD else xm) * q.qnorm[q.qlen[d]]:
                e.n_docs_skipped += 1                 # content only, below its x even rounded up
                continue
            s = _approx_total(q, d, w, e.groups[g1].idf)
            if (s + cum) * (1.0 + EPS) < lb:
                e.n_docs_skipped += 1
                continue
            lb = _finish_doc(e, d, s, cum, ne, lb)


cdef inline double _finish_doc(Eng* e, uint32_t d, double s, double cum, int64_t ne,
                               double lb) noexcept nogil:
    """A doc that passed the first bound test (s: its essential groups' part, cum: the
    non-essential groups' window bounds): the other filters, then the non-essential groups
    probed, highest bound first, while the doc can still reach lb; if it can, scored exactly
    and offered. Returns lb, raised by the offer."""
    cdef const Query* q = e.q
    cdef int64_t G = e.G, g, i
    cdef uint32_t w
    cdef double r = cum
    cdef double a[3]
    if q.extra and not _extra_ok(q, d):
        return lb
    for g in range(G):
        e.gw[g] = NOT_PROBED
    i = ne - 1
    while i >= 0:                                     # non-essential groups, highest bound first
        g = e.order[i]
        if e.wub[g] == 0.0:
            break
        w = _probe_group(e, g, d)
        e.gw[g] = w
        if w:
            s += _approx_total(q, d, w, e.groups[g].idf)
        r -= e.wub[g]
        if (s + r) * (1.0 + EPS) < lb:
            e.n_docs_skipped += 1
            return lb
        i -= 1
    a[0] = 0.0
    a[1] = 0.0
    a[2] = 0.0
    for g in range(G):                                # exact, in ascending key order
        w = e.gw[g]
        if w == NOT_PROBED:
            w = _probe_group(e, g, d) if e.wub[g] != 0.0 else 0
        if w:
            _add_parts(q, d, w, e.groups[g].idf, a)
    _offer(e, a, d)
    return _theta(e) * (1.0 - EPS)


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
            if e.peer != NULL:
                _share_theta(e)
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
    _score_docs(e, lists, cand, nc)
    _run_buffer(e, IX_WINDOW)


cdef void _score_docs(Eng* e, const PList* lists, const uint32_t* cand, int64_t nc) noexcept nogil:
    """Score the candidate docs (ascending, distinct) that lie in segments exactly, probing
    every group at each, and offer them."""
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


cdef int64_t _impact_list(const Query* q, const PList* L, int64_t per, uint32_t* buf,
                          int64_t n) noexcept nogil:
    """_impact_docs for one list: its `per` blocks of highest maximum (per <= IX_IMPACT_MAX),
    from each of them its doc of largest x_f among those the filters keep, appended to buf[n:].
    Returns the new count."""
    cdef int64_t top[IX_IMPACT_MAX]
    cdef float tv[IX_IMPACT_MAX]
    cdef uint32_t bd[IX_BLOCK]
    cdef uint8_t bt[IX_BLOCK]
    cdef int64_t j, i, c, cnt = 0, best
    cdef int f = L.field
    cdef double v, vb, c0 = q.c0[f], cb = q.cb[f]
    cdef float x
    for j in range(L.nb):
        x = L.bm[j]
        if q.bx_on and L.bx != NULL:                   # the blocks best for the docs asked
            x = <float>(<double>x * _bx_share(q, L.bx + <int64_t>IX_BX * j))
        if cnt == per and x <= tv[cnt - 1]:
            continue
        i = cnt if cnt < per else cnt - 1             # insert, dropping the lowest when full
        while i > 0 and tv[i - 1] < x:
            tv[i] = tv[i - 1]
            top[i] = top[i - 1]
            i -= 1
        tv[i] = x
        top[i] = j
        if cnt < per:
            cnt += 1
    for j in range(cnt):
        c = _block(L, top[j], bd, bt)
        best = -1
        vb = -1.0
        for i in range(c):
            v = <double>(bt[i] & IX_TF_CAP) / (c0 + cb * <double>q.lens[3 * <int64_t>bd[i] + f])
            if v > vb and _doc_ok(q, bd[i]):          # (a doc the filters drop primes nothing)
                best = i
                vb = v
        if best >= 0:
            buf[n] = bd[best]
            n += 1
    return n


cdef int64_t _impact_docs(Eng* e, const PList* lists, uint32_t* buf, int64_t n) noexcept nogil:
    """Append to buf[n:] the docs of largest x_f of the query's long lists: from each list of at
    least IX_IMPACT_MIN_NB blocks, its q.impact_blocks blocks of highest block maximum (at most
    IX_IMPACT_MAX over the lists, shared), and from each such block its doc of largest x_f.
    Returns the new count.

    They are the docs most likely to hold the k-th score of a query of common words: without
    them its k-th score is learnt only as the sweep meets such docs, window after window, and
    until then few windows are skipped (a single common word at 10M messages: about 500 of
    2441 windows skipped; 1300-1700 with the final k-th score known from the start)."""
    cdef int64_t g, li, nl = 0, per = e.q.impact_blocks, cnt, budget = IX_IMPACT_MAX
    cdef const PList* L
    if per <= 0 or e.G > IX_IMPACT_MAX_G:
        return n
    for g in range(e.G):
        for li in range(e.groups[g].list_lo, e.groups[g].list_hi):
            if lists[li].bm != NULL and lists[li].nb >= IX_IMPACT_MIN_NB:
                nl += 1
    if nl == 0:
        return n
    if per * nl > budget:
        per = budget // nl if budget >= nl else 1
    for g in range(e.G):
        for li in range(e.groups[g].list_lo, e.groups[g].list_hi):
            L = &lists[li]
            if L.bm == NULL or L.nb < IX_IMPACT_MIN_NB or budget <= 0:
                continue
            cnt = per if per <= budget else budget
            n = _impact_list(e.q, L, cnt, buf, n)
            budget -= cnt
    return n


cdef int _cmp_pdoc_doc(const void* a, const void* b) noexcept nogil:
    cdef uint32_t x = (<const PrimeDoc*>a).d, y = (<const PrimeDoc*>b).d
    return (x > y) - (x < y)


cdef int _cmp_pdoc_est(const void* a, const void* b) noexcept nogil:
    """Estimate descending, doc ascending on ties (qsort is not stable)."""
    cdef const PrimeDoc* x = <const PrimeDoc*>a
    cdef const PrimeDoc* y = <const PrimeDoc*>b
    if x.est != y.est:
        return -1 if x.est > y.est else 1
    return (x.d > y.d) - (x.d < y.d)


cdef int64_t _prime(Eng* e, const PList* lists) noexcept nogil:
    """Score first some docs likely to be among the top k, so that the sweep starts with the
    k-th score already high (docs/SCORING.md "Pruning"), and mark them in q.gbits; the sweep
    skips marked docs (each doc is offered once). Returns how many docs were scored. They are
    taken among:
    - the docs of the query's rarest groups, when they are few: the groups of fewest postings
      while their postings add up to at most e.prime_max and to 1/IX_PRIME_SHARE of the
      query's. Without them a query that pairs a rare word with common ones finds its k-th
      score only as the sweep meets the rare word's docs, and until then the common words'
      lists are essential in every window: at 10M messages, 'nagemouce config tests
      zapoushaibre' (465 postings of the rare words, 1.4M in all) decoded about 190,000 docs
      of the common lists;
    - the docs of largest x_f of its long lists (_impact_docs).
    Of the rare groups' docs only the e.prime_docs of largest estimate (the sum of their
    postings' bounds) are scored: scoring one probes every group, and at 10M
    messages 'should posting stevaizadi stailousaiche' spent more time scoring its 3330 rare
    docs than the sweep took (3.7 ms against 2.2 with its best 80 scored, the same windows
    skipped). The docs left unscored are not marked: the sweep meets them in the rare groups'
    lists like any other."""
    cdef Query* q = e.q
    cdef const Group* groups = e.groups
    cdef int64_t G = e.G, i, j, t, c, li, p, n = 0, m = 0, cum = 0, total = 0
    cdef int64_t prime_max = e.prime_max
    cdef uint32_t* buf = e.pbuf
    cdef PrimeDoc* pd = e.pdocs
    cdef uint32_t d
    cdef uint32_t bd[IX_BLOCK]
    cdef uint8_t bt[IX_BLOCK]
    cdef double idf
    cdef const PList* L
    if G < 1 or buf == NULL:
        return 0
    if prime_max > 0 and G >= 2:
        for i in range(G):                            # groups by postings, fewest first
            total += groups[i].n_postings
            t = i
            j = i - 1
            while j >= 0 and groups[e.order[j]].n_postings > groups[t].n_postings:
                e.order[j + 1] = e.order[j]
                j -= 1
            e.order[j + 1] = t
        while m < G and cum + groups[e.order[m]].n_postings <= prime_max and \
                (cum + groups[e.order[m]].n_postings) * IX_PRIME_SHARE <= total:
            cum += groups[e.order[m]].n_postings
            m += 1
        if cum > 0:
            for i in range(m):                        # their segment docs (cum >= their count)
                t = e.order[i]
                idf = groups[t].idf
                for li in range(groups[t].list_lo, groups[t].list_hi):
                    L = &lists[li]
                    for j in range(L.nb):
                        c = _block(L, j, bd, bt)
                        for p in range(c):
                            pd[n].d = bd[p]
                            pd[n].est = <float>_approx_total(
                                q, bd[p], (<uint32_t>bt[p]) << (8 * L.field), idf)
                            n += 1
    if n > 0:
        qsort(pd, <size_t>n, sizeof(PrimeDoc), _cmp_pdoc_doc)
        j = 0
        for i in range(n):                            # one entry a doc, its estimates summed
            if j > 0 and pd[i].d == pd[j - 1].d:
                pd[j - 1].est = pd[j - 1].est + pd[i].est
            else:
                pd[j] = pd[i]
                j += 1
        n = j
        if 0 < e.prime_docs < n:
            qsort(pd, <size_t>n, sizeof(PrimeDoc), _cmp_pdoc_est)
            n = e.prime_docs
    for i in range(n):
        buf[i] = pd[i].d
    n = _impact_docs(e, lists, buf, n)
    if n == 0:
        return 0
    qsort(buf, <size_t>n, 4, _cmp_u32)
    j = 0
    for i in range(n):
        if i == 0 or buf[i] != buf[i - 1]:
            buf[j] = buf[i]
            j += 1
    n = j
    _score_docs(e, lists, buf, n)
    for i in range(n):
        d = buf[i]
        q.gbits[d >> 6] |= (<uint64_t>1) << (d & 63)
    q.primed = True
    e.n_primed = n
    return n


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

    def __cinit__(self):
        garr_init(&self.w_tf, 4)
        garr_init(&self.w_acc, 8)
        garr_init(&self.w_bd, 24)
        garr_init(&self.w_gl, 4)
        garr_init(&self.w_bits, 8)
        garr_init(&self.w_prime, 4)
        garr_init(&self.w_pdocs, sizeof(PrimeDoc))
        garr_init(&self.ls, sizeof(LState))
        garr_init(&self.goff, 8)
        garr_init(&self.wub, 8)
        garr_init(&self.gx, 24)
        garr_init(&self.gnl, 12)
        garr_init(&self.gw, 4)
        garr_init(&self.order, 8)
        garr_init(&self.heap, sizeof(HeapItem))
        garr_init(&self.hbd, 24)
        garr_init(&self.pub, 8)
        garr_init(&self.ubuf, 8)

    def __dealloc__(self):
        garr_free(&self.w_tf)
        garr_free(&self.w_acc)
        garr_free(&self.w_bd)
        garr_free(&self.w_gl)
        garr_free(&self.w_bits)
        garr_free(&self.w_prime)
        garr_free(&self.w_pdocs)
        garr_free(&self.ls)
        garr_free(&self.goff)
        garr_free(&self.wub)
        garr_free(&self.gx)
        garr_free(&self.gnl)
        garr_free(&self.gw)
        garr_free(&self.order)
        garr_free(&self.heap)
        garr_free(&self.hbd)
        garr_free(&self.pub)
        garr_free(&self.ubuf)

    cdef int engine(self, Eng* e, Query* q, const Group* groups, int64_t G,
                    const uint32_t* gterms, int64_t n_lists, int64_t k,
                    int64_t prime_max, int64_t prime_docs) except -1:
        """Size the arrays for the query and point e at them (room for prime_max primed docs,
        a setting, never the corpus: _prime decodes whole blocks, so IX_BLOCK more)."""
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
        garr_reserve(&self.pub, k)
        garr_reserve(&self.ubuf, 2 * k)
        garr_reserve(&self.w_prime, max(prime_max, 0) + IX_BLOCK + IX_IMPACT_MAX)
        garr_reserve(&self.w_pdocs, max(prime_max, 0) + IX_BLOCK + IX_IMPACT_MAX)
        e.q = q
        q.primed = False                              # (_prime marks q.gbits, _score clears it)
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
        CM_ASSERT(self.ls.cap >= n_lists + 1 and self.heap.cap >= k + 1 and self.hbd.cap >= k + 1)
        CM_ASSERT(self.w_tf.len == IX_WINDOW and self.w_bits.len == IX_WINDOW // 64)
        e.theta = -1.0
        e.peer = NULL
        e.pub = <double*>self.pub.data
        e.pub_n = 0
        e.pub_seq = 0
        e.ubuf = <double*>self.ubuf.data
        e.n_taken = 0
        e.n_taken_pub = 0
        e.peer_seen = 0
        e.share_every = 1 + k // 64
        e.share_wait = 0
        e.n_windows_skipped = 0
        e.n_blocks_skipped = 0
        e.n_docs_skipped = 0
        e.n_theta_shared = 0
        e.n_primed = 0
        e.prime_max = max(prime_max, 0)
        e.pbuf = <uint32_t*>self.w_prime.data
        e.pdocs = <PrimeDoc*>self.w_pdocs.data
        e.prime_docs = max(prime_docs, 0)
        return 0

    cdef int64_t nbytes(self) noexcept:
        return (garr_bytes(&self.w_tf) + garr_bytes(&self.w_acc) + garr_bytes(&self.w_bd)
                + garr_bytes(&self.w_gl) + garr_bytes(&self.w_bits) + garr_bytes(&self.w_prime)
                + garr_bytes(&self.w_pdocs)
                + garr_bytes(&self.ls)
                + garr_bytes(&self.goff) + garr_bytes(&self.wub) + garr_bytes(&self.gx)
                + garr_bytes(&self.gnl) + garr_bytes(&self.gw) + garr_bytes(&self.order)
                + garr_bytes(&self.heap) + garr_bytes(&self.hbd) + garr_bytes(&self.pub)
                + garr_bytes(&self.ubuf))


cdef void _score(Eng* e, Eng* e2, cm_worker* w, const PList* lists, int64_t window, bint prune,
                 const uint32_t* cand, int64_t nc) noexcept nogil:
    cdef Job job
    cdef int64_t j, n_primed = 0
    cdef uint32_t d
    if nc < 0 and prune:
        n_primed = _prime(e, lists)
    if nc >= 0:
        _run_docs(e, lists, cand, nc)
    elif e2 != NULL and w != NULL:
        e.peer = e2
        e2.peer = e
        job.e = e2
        job.lists = lists
        job.window = window
        job.prune = prune
        cm_worker_post(w, _run_second_half, &job)
        _run(e, lists, window, prune, 0, 2)
        cm_worker_wait(w)
        for j in range(e2.nh):
            _offer(e, e2.hbd + 3 * <int64_t>e2.heap[j].i, e2.heap[j].d)
    else:
        _run(e, lists, window, prune, 0, 1)
    if n_primed:                                      # gbits all zero again
        for j in range(n_primed):
            d = e.pbuf[j]
            e.q.gbits[d >> 6] = 0
        e.q.primed = False
    _heap_sort(e.q, e.heap, e.nh)


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

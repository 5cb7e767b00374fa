"""SearchIndex.compacted: a new index of the live docs alone, renumbered densely in their old
order, in one segment, without the terms no live doc holds (rebuild_index's new index). Its own
module: it reads every column of the index and writes every column of another, and shares
nothing with adding, searching or snapshotting."""
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

import numpy as np

from convmem._core._common cimport garr_reserve
from convmem._core.index cimport IX_TABLE_MIN, SearchIndex, _doc_cols
from convmem._core.postings cimport IX_LIVE, IX_ULID, DocCols, _merge, _nonempty, _Segment

cnp.import_array()


def compacted(SearchIndex ix):
    """(SearchIndex.compacted, under the index's lock) The new index and old_to_new (int64, -1
    for dead docs)."""
    cdef SearchIndex out = type(ix)(ix._k1, (ix._w[0], ix._w[1], ix._w[2]),
                                      (ix._b[0], ix._b[1], ix._b[2]))
    out._lead = ix._lead
    out._cjk_weights = ix._cjk_weights
    out.filter_maxima = ix.filter_maxima
    cdef int64_t n = ix._n_docs, T = ix._t_keys.len, nl = ix._n_live, t, nk = 0
    cdef int64_t i, j, o, nt, cap
    cdef DocCols cols
    cdef cnp.ndarray old_to_new = np.full(n, -1, dtype=np.int64)
    cdef cnp.ndarray tmap = np.full(T, -1, dtype=np.int64)
    cdef int64_t* o2n = <int64_t*>cnp.PyArray_DATA(old_to_new)
    cdef int64_t* tm = <int64_t*>cnp.PyArray_DATA(tmap)
    cdef const uint32_t* df = <const uint32_t*>ix._t_df.data
    cdef const uint8_t* meta = <const uint8_t*>ix._meta.data
    cdef const uint32_t* toff = <const uint32_t*>ix._tag_off.data
    cdef _Segment m
    cdef double c0[3]
    cdef double cb[3]
    ix._flush()
    for t in range(T):
        if df[t] > 0:
            tm[t] = nk
            nk += 1
    garr_reserve(&out._t_keys, nk)
    garr_reserve(&out._t_df, nk)
    for t in range(T):
        if tm[t] >= 0:
            (<uint64_t*>out._t_keys.data)[tm[t]] = (<const uint64_t*>ix._t_keys.data)[t]
            (<uint32_t*>out._t_df.data)[tm[t]] = df[t]
    out._t_keys.len = out._t_df.len = nk
    cap = IX_TABLE_MIN
    while cap < 2 * nk:
        cap *= 2
    if out._table_rebuild(cap) < 0:
        raise MemoryError()

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
        (<uint8_t*>out._imp.data)[o] = (<const uint8_t*>ix._imp.data)[i]
        (<int32_t*>out._sess.data)[o] = (<const int32_t*>ix._sess.data)[i]
        (<int64_t*>out._ts.data)[o] = (<const int64_t*>ix._ts.data)[i]
        memcpy(out._ulid.data + IX_ULID * o, ix._ulid.data + IX_ULID * i, IX_ULID)
        memcpy(out._lens.data + 12 * o, ix._lens.data + 12 * i, 12)
        j = toff[i + 1] - toff[i]
        memcpy(out._tag_val.data + 8 * nt, ix._tag_val.data + 8 * toff[i], <size_t>(8 * j))
        nt += j
        (<uint32_t*>out._tag_off.data)[o + 1] = <uint32_t>nt
        o += 1
    out._meta.len = out._imp.len = out._sess.len = out._ts.len = nl
    out._ulid.len = out._lens.len = nl
    out._tag_off.len = nl + 1
    out._tag_val.len = nt
    out._n_docs = out._n_live = nl
    for i in range(3):
        out._sum_len[i] = ix._sum_len[i]
    out._buf_lo = <uint32_t>nl
    if ix._segs:
        out._norm(c0, cb)
        cols = _doc_cols(out)
        m = _merge(ix._segs, meta, o2n, tm, &cols, 0, <uint32_t>nl, c0, cb)
        if _nonempty(m):
            out._set_segments([m])
    return out, old_to_new


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

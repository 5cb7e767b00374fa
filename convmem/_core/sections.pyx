"""The search index's snapshot sections beside its posting lists (docs/SCORING.md "Storage"):
what SearchIndex.from_arrays checks as it adopts them (dtypes, shapes, offsets, the character
lists' segment) and what block_max_arrays and a frozen index's arrays() (_FrozenIndex, the
state of SearchIndex.freeze) store with the lists (block maxima, character lists, the docs'
length codes). The lists themselves: postings.pyx."""

cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

import numpy as np

from convmem._core.postings cimport (DocCols, _Segment, _adopted_segment, _char_segment,
                                     _doc_tag_buckets, _empty_field_arrays, _merge, _nonempty)
from convmem._core.score cimport _qlen_code
from convmem._core._common cimport term_table_fill

cnp.import_array()

FIELDS = ("content", "summary", "tags")  # the index's fields, in their order


cdef object _term_table(object keys, int64_t cap):
    """The index's term table of capacity `cap` for these term keys (term-id order), as the
    live index lays it out (_common.term_table_fill): a frozen index builds it from the
    shared keys instead of the freeze copying the live table under the lock."""
    cdef int64_t n = keys.shape[0]
    if cap < 2 * n or (cap & (cap - 1)) != 0:
        raise ValueError("the term table's capacity must be a power of two, at least twice the terms")
    table = np.empty(cap, dtype=np.uint32)
    cdef uint32_t* t = <uint32_t*>cnp.PyArray_DATA(table)
    cdef const uint64_t* k = <const uint64_t*>cnp.PyArray_DATA(keys)
    with nogil:
        term_table_fill(t, cap, k, n)
    return table


cdef dict _doc_code_sections(const uint32_t* ln, const uint32_t* tag_off, const uint64_t* tag_val,
                         int64_t n):
    """Every doc's one-byte field length codes (_qlen_code of doc_lens: qlen the content's,
    qlen2 the summary's and the tags', as _grow_scratch makes them) and its tag buckets (tagb)
    as snapshot sections: an index opened adopts them (from_arrays) instead of coding every
    doc's lengths at its first query (~5 ms at 1M messages, ten times that at 10M) and every
    doc's tags at its first query with a tag filter (50 ms at 10M)."""
    q1 = np.empty(n, dtype=np.uint8)
    q2 = np.empty((n, 2), dtype=np.uint8)
    tb = np.empty(n, dtype=np.uint8)
    cdef uint8_t* a = <uint8_t*>cnp.PyArray_DATA(q1)
    cdef uint8_t* b = <uint8_t*>cnp.PyArray_DATA(q2)
    cdef uint8_t* c = <uint8_t*>cnp.PyArray_DATA(tb)
    with nogil:
        _code_lengths(ln, 0, n, a, b)
        _code_tag_buckets(tag_off, tag_val, 0, n, c)
    return {"qlen": q1, "qlen2": q2, "tagb": tb}


cdef void _code_tag_buckets(const uint32_t* tag_off, const uint64_t* tag_val, int64_t lo,
                            int64_t hi, uint8_t* out) noexcept nogil:
    """out[d] for docs lo..hi-1: bit b set when the doc holds a tag of bucket b (_tag_bucket,
    the buckets of the filter maxima). A tag-filtered query drops a doc lacking a bucket it
    asks as the doc's postings are read, before looking up its tags: at 10M messages that
    lookup, two cache misses a doc, was half of _finish_doc's time on the slowest queries."""
    cdef int64_t d
    for d in range(lo, hi):
        out[d] = <uint8_t>_doc_tag_buckets(tag_off, tag_val, <uint32_t>d)


cdef void _code_lengths(const uint32_t* ln, int64_t lo, int64_t hi, uint8_t* q1,
                        uint8_t* q2) noexcept nogil:
    """The length codes of docs lo..hi-1 from their doc_lens rows (3 a doc): q1[d] the
    content's, q2[2d], q2[2d + 1] the summary's and the tags'."""
    cdef int64_t d
    for d in range(lo, hi):
        q1[d] = _qlen_code(ln[3 * d])
        q2[2 * d] = _qlen_code(ln[3 * d + 1])
        q2[2 * d + 1] = _qlen_code(ln[3 * d + 2])


cdef int _put_block_maxima(dict out, _Segment seg) except -1:
    """A segment's stored block maxima as snapshot sections (bm_cb, bm_terms_*, bm_off_*, bm_*)."""
    out["bm_cb"] = np.array([seg.v.f[f].bm_cb for f in range(3)], dtype=np.float64)
    for f, name in enumerate(FIELDS):
        out[f"bm_terms_{name}"] = seg.bm_arrays[3 * f]
        out[f"bm_off_{name}"] = seg.bm_arrays[3 * f + 1]
        out[f"bm_{name}"] = seg.bm_arrays[3 * f + 2]
        if len(seg.bx_arrays) == 3:
            out[f"bx_{name}"] = seg.bx_arrays[f]
    return 0


cdef int _put_char_lists(dict out, object cx) except -1:
    """The per-character CJK lists (chars, df, the lists' segment) as snapshot sections cx_*."""
    cdef _Segment seg = <_Segment>cx[2]
    out["cx_chars"] = cx[0]
    out["cx_df"] = cx[1]
    out["cx_cb"] = np.array([seg.v.f[f].bm_cb for f in range(3)], dtype=np.float64)
    for f, name in enumerate(FIELDS):
        out[f"cx_terms_{name}"] = seg.arrays[3 * f]
        out[f"cx_offsets_{name}"] = seg.arrays[3 * f + 1]
        out[f"cx_data_{name}"] = seg.arrays[3 * f + 2]
        out[f"cx_bm_terms_{name}"] = seg.bm_arrays[3 * f]
        out[f"cx_bm_off_{name}"] = seg.bm_arrays[3 * f + 1]
        out[f"cx_bm_{name}"] = seg.bm_arrays[3 * f + 2]
        if len(seg.bx_arrays) == 3:
            out[f"cx_bx_{name}"] = seg.bx_arrays[f]
    return 0


cdef object _cx_chars(object arrays):
    chars = _arr(arrays, "cx_chars", np.uint32, None)
    nc = chars.shape[0]
    if nc == 0 or int(chars[nc - 1]) > CP_MASK or not bool(np.all(chars[1:] > chars[:nc - 1])):
        raise ValueError("bad cx_chars")
    return chars


cdef _Segment _cx_segment(object arrays, uint32_t n):
    """The stored character lists (from_arrays): checked as the postings are (offsets and terms
    now, block maxima against the lists' headers, each list lazily on first use)."""
    arrs = []
    bm = []
    for name in FIELDS:
        terms = _arr(arrays, f"cx_terms_{name}", np.uint32, None)
        offsets = _arr(arrays, f"cx_offsets_{name}", np.uint32, (terms.shape[0] + 1,))
        data = _arr(arrays, f"cx_data_{name}", np.uint8, None)
        _check_offsets(offsets, data.shape[0], f"cx_offsets_{name}")
        nt = terms.shape[0]
        if nt and (int(terms[nt - 1]) > CP_MASK or not bool(np.all(terms[1:] > terms[:nt - 1]))):
            raise ValueError(f"bad cx_terms_{name}")
        arrs += [terms, offsets, data]
        bm += [_arr(arrays, f"cx_bm_terms_{name}", np.uint32, None),
               _arr(arrays, f"cx_bm_off_{name}", np.uint32, None),
               _arr(arrays, f"cx_bm_{name}", np.float32, None)]
    bx = None
    if "cx_bx_content" in arrays:                 # (snapshots written before them: none)
        bx = [_arr(arrays, f"cx_bx_{name}", np.uint8, None) for name in FIELDS]
    return _adopted_segment(n, arrs, bm, _arr(arrays, "cx_cb", np.float64, (3,)), bx, NULL, NULL,
                            NULL)


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


cdef class _FrozenIndex:
    """SearchIndex.freeze(): the copied columns and the segments of one moment (fields:
    sections.pxd)."""

    def arrays(self) -> dict:
        """What to_arrays() + block_max_arrays() returned at the freeze (merges the segments
        into a new one: ValueError if a list of them is damaged)."""
        cdef _Segment m = None
        cdef _Segment seg
        cdef int f
        cdef DocCols cols
        base = self.base
        meta = base["doc_meta"]
        lens = base["doc_lens"]
        keys = base["term_keys"]
        segs = self.segs
        cols.lens = <const uint32_t*>cnp.PyArray_DATA(lens)
        cols.meta = <const uint8_t*>cnp.PyArray_DATA(meta)
        cols.imp = <const uint8_t*>cnp.PyArray_DATA(base["doc_importance"])
        cols.tag_off = <const uint32_t*>cnp.PyArray_DATA(base["tag_offsets"])
        cols.tag_val = <const uint64_t*>cnp.PyArray_DATA(base["tag_hashes"])
        if self.need_merge:
            m = _merge(segs, <const uint8_t*>cnp.PyArray_DATA(meta), NULL, NULL, &cols,
                       (<_Segment>segs[0]).v.doc_lo,
                       (<_Segment>segs[len(segs) - 1]).v.doc_hi, self.c0, self.cb)
            if not _nonempty(m):
                m = None
        elif segs:
            m = <_Segment>segs[0]
        out = dict(base)
        out["term_table"] = _term_table(keys, self.table_len)
        out.update(_doc_code_sections(<const uint32_t*>cnp.PyArray_DATA(lens), cols.tag_off,
                                  cols.tag_val, lens.shape[0]))
        seg_arrays = m.arrays if m is not None else _empty_field_arrays() * 3
        for f, name in enumerate(FIELDS):
            out[f"post_terms_{name}"] = seg_arrays[3 * f]
            out[f"post_offsets_{name}"] = seg_arrays[3 * f + 1]
            out[f"post_data_{name}"] = seg_arrays[3 * f + 2]
        if m is None or len(m.bm_arrays) != 9:
            return out
        _put_block_maxima(out, m)
        cx = self.cx
        if cx is None:
            cx = _char_segment(m, <const uint64_t*>cnp.PyArray_DATA(keys), keys.shape[0],
                               self.cx_min, &cols, self.c0, self.cb)
        if cx is not None:
            _put_char_lists(out, cx)
        return out


# The build this module comes from ("debug" or "release"), read by convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

"""What a query's keys stand for beyond themselves (docs/SCORING.md): the weights of its CJK
bigrams (runs and script seams, "Query weights") and the bigram terms that hold a lone CJK
character (the character's expansion when it has no lists of its own)."""
from libc.math cimport sqrt
from libc.stdint cimport int64_t, uint32_t, uint64_t

import numpy as np

from convmem._core.sections cimport CP_MASK

SEAM_WEIGHT = 0.5


cdef inline int _cjk_script(uint64_t cp) noexcept:
    return 1 if 0x3040 <= cp <= 0x309F else (2 if 0x30A0 <= cp <= 0x30FF else 0)


def query_weights(keys) -> dict:
    """The weights of the query's CJK bigram keys (docs/SCORING.md "Query weights"), by key;
    a key not in the dict weighs 1. `keys`: the query keys in query order."""
    cdef const uint64_t[::1] qk = np.ascontiguousarray(np.asarray(keys, dtype=np.uint64).reshape(-1))
    cdef int64_t n = qk.shape[0], i = 0, j, r
    cdef uint64_t a, b
    cdef double w
    cdef dict out = {}
    while i < n:
        if qk[i] >> 62 != 2:
            i += 1
            continue
        j = i + 1                                     # the run: each bigram starts where the last ended
        while j < n and qk[j] >> 62 == 2 and (qk[j] >> 21) & CP_MASK == qk[j - 1] & CP_MASK:
            j += 1
        for r in range(i, j):
            w = 1.0 / sqrt(<double>(j - i))
            a = (qk[r] >> 21) & CP_MASK
            b = qk[r] & CP_MASK
            if _cjk_script(a) != _cjk_script(b):
                w = w * SEAM_WEIGHT
            if out.get(qk[r], 0.0) < w:               # a key given twice: its larger weight
                out[qk[r]] = w
        i = j
    return {key: w for key, w in out.items() if w != 1.0}


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


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

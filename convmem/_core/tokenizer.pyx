"""Japanese-aware tokenizer: text -> uint64 term keys (docs/DESIGN.md section 1, the rules in
docs/SCORING.md "Analyzer").

The hot path, `token_keys`, creates no Python object per token: it reads the code points of the
normalized str in place (1-, 2- or 4-byte kind), classifies them (ASCII table, CJK ranges, then
the interpreter's Unicode tables), hashes words and joined identifiers while scanning (the UTF-8
bytes are fed to FNV-1a as they are produced, so no buffer is needed) and packs CJK
bigrams/unigrams into the key bits. A word that Snowball may stem gets its stem's key from a
fixed table while the text is scanned (when the GIL is held: texts below NOGIL_MIN, queries
aside); a word not in the table, or any in a long text scanned without the GIL, leaves a
placeholder that a second pass (with the GIL) resolves, calling PyStemmer only for a word not
seen yet. Keys go to a buffer sized by an upper bound (every key
consumes at least one code point of its own) and are copied into an exact-size numpy array.

Normalization is the expensive part (CPython's NFKC runs at 20-50 MB/s on text that is not
already normalized), so token_keys passes to NFKC + casefold only the spans that can change
(see _is_inert); ASCII upper case, full-width ASCII and U+3000 are folded by the scanner itself.

`convmem._core.pytokenizer` is the readable twin; the two give identical results.
"""
import threading
import unicodedata

import Stemmer as _Stemmer

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.string cimport memcpy, memset
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

from convmem._core._common cimport GArr, garr_free, garr_init, garr_reserve, mix64

cnp.import_array()

cdef extern from "Python.h":
    # The interpreter's own Unicode tables (what str.isalpha / str.isdigit use); pure lookups,
    # safe without the GIL.
    bint Py_UNICODE_ISALPHA(uint32_t ch) nogil
    bint Py_UNICODE_ISDIGIT(uint32_t ch) nogil
    int PyUnicode_READY(object o) except -1
    int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    bint PyUnicode_IS_ASCII(object o)
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND

TOKENIZER_VERSION = 2
UNICODE_VERSION = unicodedata.unidata_version

cdef object _unicodedata_normalize = unicodedata.normalize

cdef extern from *:
    # Compile-time constants (a module-level cdef variable would be loaded from memory).
    """
    #define CONVMEM_FNV_OFFSET 0xcbf29ce484222325ULL
    #define CONVMEM_FNV_PRIME 0x100000001b3ULL
    #define CONVMEM_MASK62 0x3fffffffffffffffULL
    #define CONVMEM_STEM_TAG 0x4000000000000000ULL
    #define CONVMEM_STEM_POS_MASK 0x3fffffffffffff80ULL
    """
    const uint64_t FNV_OFFSET "CONVMEM_FNV_OFFSET"
    const uint64_t FNV_PRIME "CONVMEM_FNV_PRIME"
    const uint64_t MASK62 "CONVMEM_MASK62"
    const uint64_t STEM_TAG "CONVMEM_STEM_TAG"
    const uint64_t STEM_POS_MASK "CONVMEM_STEM_POS_MASK"

cdef enum:
    # Below this many code points the GIL is kept: releasing it costs more than the scan.
    NOGIL_MIN = 4096
    # Texts up to this many code points (most chat messages) are scanned into a stack buffer
    # and copied into an exact-size array: cheaper than a heap buffer or a numpy resize, and
    # safe if allocating the array runs a finalizer that tokenizes in turn.
    STACK_KEYS = 1024

# ASCII fast path: class and case fold of each byte (ASCII text skips normalize(), whose only
# effect on it would be lower-casing).
cdef uint8_t ASCII_CLASS[128]
cdef uint8_t ASCII_FOLD[128]


cdef void _init_ascii_tables() noexcept:
    cdef int c
    for c in range(128):
        ASCII_FOLD[c] = c + 32 if 65 <= c <= 90 else c
        if 48 <= c <= 57:
            ASCII_CLASS[c] = CLS_DIGIT
        elif 65 <= c <= 90 or 97 <= c <= 122:
            ASCII_CLASS[c] = CLS_ALPHA
        else:
            ASCII_CLASS[c] = CLS_SEP


_init_ascii_tables()

ctypedef fused ucs_t:
    uint8_t
    uint16_t
    uint32_t


cdef inline uint64_t _mix_finish(uint64_t h) noexcept nogil:
    # splitmix64 finaliser, then keep 62 bits so the top two bits say "word"; 0 is reserved.
    h = mix64(h) & MASK62
    return h if h != 0 else 1


cdef inline uint64_t _fnv_byte(uint64_t h, uint32_t b) noexcept nogil:
    return (h ^ b) * FNV_PRIME


cdef inline uint64_t _fnv_code_point(uint64_t h, uint32_t c) noexcept nogil:
    # FNV-1a over the UTF-8 encoding of one code point (never a surrogate: those are separators).
    if c < 0x80:
        return _fnv_byte(h, c)
    if c < 0x800:
        h = _fnv_byte(h, 0xC0 | (c >> 6))
        return _fnv_byte(h, 0x80 | (c & 0x3F))
    if c < 0x10000:
        h = _fnv_byte(h, 0xE0 | (c >> 12))
        h = _fnv_byte(h, 0x80 | ((c >> 6) & 0x3F))
        return _fnv_byte(h, 0x80 | (c & 0x3F))
    h = _fnv_byte(h, 0xF0 | (c >> 18))
    h = _fnv_byte(h, 0x80 | ((c >> 12) & 0x3F))
    h = _fnv_byte(h, 0x80 | ((c >> 6) & 0x3F))
    return _fnv_byte(h, 0x80 | (c & 0x3F))


cdef uint64_t word_key(const unsigned char* utf8, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = FNV_OFFSET
    cdef Py_ssize_t i
    for i in range(n):
        h = _fnv_byte(h, utf8[i])
    return _mix_finish(h)


cdef inline bint _is_cjk(uint32_t c) noexcept nogil:
    # Ordered so that the common Japanese ranges are decided in a few comparisons.
    if c < 0x3005:
        return 0x1100 <= c <= 0x11FF                # Hangul Jamo
    if c <= 0x9FFF:
        if c >= 0x4E00:                             # CJK Unified Ideographs
            return True
        if c <= 0x3007:                             # 々 〆 〇
            return True
        if c < 0x3041:
            return False
        if c <= 0x30FF:                             # Hiragana, Katakana except U+30FB (・)
            return c != 0x30FB
        if c < 0x3130:
            return False
        if c <= 0x318F:                             # Hangul Compatibility Jamo
            return True
        if c < 0x31F0:
            return False
        if c <= 0x31FF:                             # Katakana Phonetic Extensions
            return True
        return 0x3400 <= c <= 0x4DBF                # CJK Extension A
    if c < 0xA960:
        return False
    if c <= 0xA97F:                                 # Hangul Jamo Extended-A
        return True
    if c < 0xAC00:
        return False
    if c <= 0xD7FF:                                 # Hangul Syllables, Jamo Extended-B
        return True
    if c < 0xF900:
        return False
    if c <= 0xFAFF:                                 # CJK Compatibility Ideographs
        return True
    return 0x20000 <= c <= 0x3FFFF                  # Ideographic planes 2 and 3


cdef inline CharClass _char_class(uint32_t c) noexcept nogil:
    if c < 128:
        return <CharClass>ASCII_CLASS[c]
    if _is_cjk(c):                                  # first: most CJK characters are alphabetic
        return CLS_CJK
    if Py_UNICODE_ISALPHA(c):
        return CLS_ALPHA
    if Py_UNICODE_ISDIGIT(c):
        return CLS_DIGIT
    return CLS_SEP


cdef inline uint32_t _simple_map(uint32_t c) noexcept nogil:
    # The compatibility forms that Japanese chat text is full of, normalized inline so that
    # they do not send their text through a Python-level NFKC call: the ideographic space and
    # full-width ASCII (NFKC maps U+FF01-FF5E to U+0021-007E; the ASCII fold does the rest).
    if c < 0x3000 or c > 0xFF5E:
        return c
    if c == 0x3000:
        return 0x20
    return c - 0xFEE0 if c >= 0xFF01 else c


cdef inline bint _is_alnum(CharClass cls) noexcept nogil:
    return cls == CLS_ALPHA or cls == CLS_DIGIT


cdef inline bint _is_joiner(uint32_t c) noexcept nogil:
    # _ - . / : between two letter-or-digit runs join them into an identifier.
    return c == 0x5F or c == 0x2D or c == 0x2E or c == 0x2F or c == 0x3A


cdef inline bint _is_apostrophe(uint32_t c) noexcept nogil:
    return c == 0x27 or c == 0x2019


# -- stems ------------------------------------------------------------------------------------
# Snowball's English stemmer (PyStemmer) is a Python call per word; its answers are cached in a
# fixed table keyed by the word's key (62-bit hash: a collision among the words cached is far
# less likely than a bit flip), so a word already seen costs one probe and no Python object.
# The table is only touched with the GIL held; it starts zeroed (empty).
cdef enum:
    STEM_SLOTS = 1 << 18                 # 4 MiB; emptied when 3/4 full
    STEM_MAX_USED = (STEM_SLOTS * 3) // 4

cdef struct StemSlot:
    uint64_t word                        # the word's key; 0 = empty
    uint64_t stem                        # the stem's key; 0 = the stem is the word

# A static table (like the ASCII tables): a fixed cost of the process, not of a store, so no
# store's memory_estimate counts it; its pages are touched as words arrive.
cdef StemSlot _stem_table[STEM_SLOTS]
cdef Py_ssize_t _stem_used = 0
# PyStemmer's own cache is off (size 0): only words missing from the table above reach it, and
# its purges cost more than the stemming when the words do not repeat (measured: 100k distinct
# words stem 4x faster without it).
cdef object _stem_word = _Stemmer.Stemmer("english", 0).stemWord
# A Stemmer object is not documented as thread-safe: one call at a time (only new words get here).
cdef object _stem_lock = threading.Lock()


cdef uint64_t _hash_chain(const ucs_t* s, Py_ssize_t start, Py_ssize_t stop) noexcept nogil:
    """FNV-1a of the UTF-8 of a joined identifier s[start:stop], folded, apostrophes left out
    (everything else in it is a letter, a digit or a joiner). Computed only for a chain of two
    parts or more, so that a plain word is hashed once."""
    cdef uint64_t h = FNV_OFFSET
    cdef uint32_t c
    cdef Py_ssize_t i
    for i in range(start, stop):
        c = _simple_map(s[i])
        if c < 128:
            if c != 0x27:
                h = _fnv_byte(h, ASCII_FOLD[c])
        elif c != 0x2019:
            h = _fnv_code_point(h, c)
    return h


cdef Py_ssize_t _scan(const ucs_t* s, Py_ssize_t n, uint64_t* keys,
                      Py_ssize_t* spans, bint probe, Py_ssize_t* places) noexcept nogil:
    """Write the key of every token of s[0:n] to keys (capacity >= n: every key consumes a code
    point of its own) and, unless spans is NULL, its [start, stop) code point span to
    spans[2k], spans[2k+1]. Returns the count.

    A word that Snowball may stem (3 to 64 ASCII letters) is followed by a placeholder
    `STEM_TAG | start << 7 | length`, which _resolve_stems replaces by the stem's key or drops;
    with `probe` (only when the GIL is held: the stem table is read here) a word already in the
    table gets its stem's key at once. The number of placeholders left goes to *places."""
    cdef Py_ssize_t i = 0, k = 0, start, cstart, pstart, pend, run_end, kept, parts, slot
    cdef uint32_t c, prev, c2
    cdef CharClass cls
    cdef uint64_t h, h2, sk
    cdef bint ascii_alpha, possessive
    places[0] = 0
    while i < n:
        c = _simple_map(s[i])
        cls = _char_class(c)
        if cls == CLS_SEP:
            i += 1
            continue
        start = i
        i += 1
        if cls == CLS_CJK:
            prev = c
            while i < n:
                c = s[i]
                if c < 0x1100 or not _is_cjk(c):
                    break
                keys[k] = bigram_key(prev, c)
                if spans != NULL:
                    spans[2 * k] = i - 1
                    spans[2 * k + 1] = i + 1
                k += 1
                prev = c
                i += 1
            if i - start == 1:
                keys[k] = unigram_key(prev)
                if spans != NULL:
                    spans[2 * k] = start
                    spans[2 * k + 1] = i
                k += 1
            continue
        # An identifier: parts (maximal runs of letters and digits, apostrophes inside a word
        # dropped, a possessive 's cut off) joined by single joiners. ASCII is folded here
        # because ASCII input skips normalize().
        i = start
        cstart = start
        parts = 0
        while True:
            pstart = i
            pend = i
            h = FNV_OFFSET
            kept = 0
            ascii_alpha = True
            possessive = False
            while i < n:
                c = s[i]
                if c < 128:                         # ASCII: one table lookup
                    cls = <CharClass>ASCII_CLASS[c]
                    if cls != CLS_SEP:
                        if kept < MAX_WORD:
                            h = _fnv_byte(h, ASCII_FOLD[c])
                            if cls != CLS_ALPHA:
                                ascii_alpha = False
                            kept += 1
                            pend = i + 1
                        i += 1
                        continue
                else:
                    c = _simple_map(c)
                    cls = _char_class(c)
                    if _is_alnum(cls):
                        if kept < MAX_WORD:
                            if c < 128:             # full-width ASCII
                                h = _fnv_byte(h, ASCII_FOLD[c])
                                if cls != CLS_ALPHA:
                                    ascii_alpha = False
                            else:
                                h = _fnv_code_point(h, c)
                                ascii_alpha = False
                            kept += 1
                            pend = i + 1
                        i += 1
                        continue
                # Not a letter or digit (c mapped).
                if (c == 0x27 or c == 0x2019) and i + 1 < n:
                    c2 = _simple_map(s[i + 1])
                    if _char_class(c2) == CLS_ALPHA:
                        if (c2 == 0x73 or c2 == 0x53) and (
                                i + 2 >= n or not _is_alnum(_char_class(_simple_map(s[i + 2])))):
                            possessive = True       # Caroline's, it's: the 's is not indexed
                        else:
                            i += 1                  # don't -> dont
                            continue
                break
            h2 = _mix_finish(h)
            keys[k] = h2
            if spans != NULL:
                spans[2 * k] = pstart
                spans[2 * k + 1] = pend
            k += 1
            if ascii_alpha and kept >= 3:
                sk = STEM_TAG | (<uint64_t>pstart << 7) | <uint64_t>kept
                if probe:
                    slot = <Py_ssize_t>(h2 & (STEM_SLOTS - 1))
                    while _stem_table[slot].word != 0:
                        if _stem_table[slot].word == h2:
                            sk = _stem_table[slot].stem      # 0: the stem is the word
                            break
                        slot = (slot + 1) & (STEM_SLOTS - 1)
                if sk != 0:
                    keys[k] = sk
                    if spans != NULL:
                        spans[2 * k] = pstart
                        spans[2 * k + 1] = pend
                    k += 1
                    if (sk >> 62) == 1:
                        places[0] += 1
            parts += 1
            run_end = i
            if possessive:
                i += 2
                break
            if i + 1 < n:
                c = _simple_map(s[i])
                if _is_joiner(c) and _is_alnum(_char_class(_simple_map(s[i + 1]))):
                    i += 1
                    continue
            break
        if parts > 1:
            keys[k] = _mix_finish(_hash_chain(s, cstart, run_end))
            if spans != NULL:
                spans[2 * k] = cstart
                spans[2 * k + 1] = run_end
            k += 1
    return k


cdef str _ascii_word(str norm, Py_ssize_t start, Py_ssize_t length):
    """The folded ASCII word of `length` letters starting at `start` (apostrophes skipped)."""
    cdef int kind = PyUnicode_KIND(norm)
    cdef void* data = PyUnicode_DATA(norm)
    cdef char buf[MAX_WORD]
    cdef Py_ssize_t m = 0, i = start
    cdef uint32_t c
    while m < length:
        if kind == PyUnicode_1BYTE_KIND:
            c = (<const uint8_t*>data)[i]
        elif kind == PyUnicode_2BYTE_KIND:
            c = (<const uint16_t*>data)[i]
        else:
            c = (<const uint32_t*>data)[i]
        c = _simple_map(c)
        i += 1
        if c < 128 and ASCII_CLASS[c] == CLS_ALPHA:
            buf[m] = <char>ASCII_FOLD[c]
            m += 1
    return buf[:length].decode("ascii")


cdef uint64_t _stem_miss(str norm, uint64_t word, uint64_t place) except? 0:
    """Stem a word not in the table (keyed `word`, placeholder `place`) and add it; returns
    the stem's key, 0 if the stem is the word."""
    global _stem_used
    cdef Py_ssize_t slot
    cdef str w, stem
    cdef bytes b
    cdef uint64_t sk
    w = _ascii_word(norm, <Py_ssize_t>((place & STEM_POS_MASK) >> 7), <Py_ssize_t>(place & 0x7F))
    with _stem_lock:
        stem = _stem_word(w)
    if stem == w:
        sk = 0
    else:
        b = stem.encode("utf-8")
        sk = word_key(b, len(b))
    if _stem_used >= STEM_MAX_USED:
        memset(_stem_table, 0, sizeof(_stem_table))
        _stem_used = 0
    slot = <Py_ssize_t>(word & (STEM_SLOTS - 1))
    while _stem_table[slot].word != 0 and _stem_table[slot].word != word:
        slot = (slot + 1) & (STEM_SLOTS - 1)
    if _stem_table[slot].word == 0:
        _stem_used += 1
    _stem_table[slot].word = word
    _stem_table[slot].stem = sk
    return sk


cdef Py_ssize_t _resolve_stems(str norm, uint64_t* keys, Py_ssize_t k, bint query) except -1:
    """Replace each stem placeholder of keys[0:k] by its stem's key, or drop it when the stem is
    the word itself; returns the new count. For a query of more than one token (placeholders
    aside) the stem's key replaces the word's instead of following it (docs/SCORING.md)."""
    cdef Py_ssize_t j, out = 0, words = 0, slot
    cdef uint64_t key, sk, word
    if query:
        for j in range(k):
            words += (keys[j] >> 62) != 1
        query = words > 1
    for j in range(k):
        key = keys[j]
        if (key >> 62) == 1:
            word = keys[j - 1]
            slot = <Py_ssize_t>(word & (STEM_SLOTS - 1))
            while True:
                if _stem_table[slot].word == word:
                    sk = _stem_table[slot].stem
                    break
                if _stem_table[slot].word == 0:
                    sk = _stem_miss(norm, word, key)
                    break
                slot = (slot + 1) & (STEM_SLOTS - 1)
            if sk == 0:
                continue
            if query:
                keys[out - 1] = sk
                continue
            key = sk
        keys[out] = key
        out += 1
    return out


cdef Py_ssize_t _scan_str(str norm, uint64_t* keys, Py_ssize_t* spans, bint probe,
                          Py_ssize_t* places) except -1:
    """Dispatch on the storage kind of an already-normalized (or pure ASCII) str. `probe` is
    honoured only when the GIL is kept (short texts)."""
    cdef Py_ssize_t n = len(norm), k
    PyUnicode_READY(norm)
    cdef int kind = PyUnicode_KIND(norm)
    cdef void* data = PyUnicode_DATA(norm)
    if n < NOGIL_MIN:
        if kind == PyUnicode_1BYTE_KIND:
            return _scan(<const uint8_t*>data, n, keys, spans, probe, places)
        if kind == PyUnicode_2BYTE_KIND:
            return _scan(<const uint16_t*>data, n, keys, spans, probe, places)
        return _scan(<const uint32_t*>data, n, keys, spans, probe, places)
    # `norm` is immutable and referenced by the caller, so its buffer outlives the scan. The
    # stem table is not read without the GIL (a miss elsewhere may be writing it).
    with nogil:
        if kind == PyUnicode_1BYTE_KIND:
            k = _scan(<const uint8_t*>data, n, keys, spans, False, places)
        elif kind == PyUnicode_2BYTE_KIND:
            k = _scan(<const uint16_t*>data, n, keys, spans, False, places)
        else:
            k = _scan(<const uint32_t*>data, n, keys, spans, False, places)
    return k


cdef inline bint _is_inert(uint32_t c) noexcept nogil:
    """True if normalize() maps c to itself or to _simple_map(c) (ASCII upper case aside: the
    scanner folds it) and c is a starter that never composes with the character before it (NFKC_QC=Yes, ccc=0, not the
    second character of any canonical pair). Text can then be cut before c and normalized piece
    by piece with the same result. tests/test_tokenizer.py re-derives these ranges."""
    if c < 0x80:
        return True
    if c < 0x3000:
        return 0xE0 <= c <= 0xFF                    # Latin-1 lower case (not ß, not µ)
    if c <= 0x30FE:
        if c <= 0x3029:                             # U+3000 (mapped), 、。「」 etc.
            return True
        if c < 0x303B:
            return False
        if c <= 0x3098:                             # Hiragana (before the combining marks)
            return True
        if c < 0x309D:
            return False
        return c <= 0x309E or c >= 0x30A0           # ゝゞ, Katakana up to ヾ
    if c < 0x3400:
        return False
    if c <= 0xA63F:                                 # CJK Ext A, Unified Ideographs, Yi, ...
        return True
    if c < 0xAC00:
        return False
    if c <= 0xD7FF:                                 # Hangul syllables, Jamo Extended-B
        return True
    return 0xFF01 <= c <= 0xFF5E                    # full-width ASCII (mapped)


# Inert characters between two pieces that need normalizing: a gap shorter than this is
# normalized along with them, because a call per piece costs more than normalizing the gap.
cdef Py_ssize_t MERGE_GAP = 16


cdef Py_ssize_t _find_pieces(const ucs_t* s, Py_ssize_t n, GArr* bounds) except -1:
    """Append to `bounds` (a GArr of [start, stop) pairs of Py_ssize_t) the spans of s that need
    normalize(); everything outside them is inert. Each span starts one character before its
    first non-inert character, which may combine with that preceding starter. Returns the
    number of spans."""
    cdef Py_ssize_t i = 0, j, start, count = 0
    cdef Py_ssize_t* b
    while i < n:
        if _is_inert(s[i]):
            i += 1
            continue
        start = i - 1 if i > 0 else 0
        j = i + 1
        while j < n and not _is_inert(s[j]):
            j += 1
        b = <Py_ssize_t*>bounds.data
        if count > 0 and start - b[2 * count - 1] < MERGE_GAP:
            b[2 * count - 1] = j
        else:
            garr_reserve(bounds, count + 1)
            b = <Py_ssize_t*>bounds.data
            b[2 * count] = start
            b[2 * count + 1] = j
            count += 1
            bounds.len = count
        i = j
    return count


cdef str _normalized_for_keys(str text):
    """`text` normalized for the scanner: normalize(text) equals it after _simple_map and the
    ASCII fold, which the scanner applies to each code point as it reads it.

    Only the spans holding characters that normalize() may change are passed through NFKC and
    casefold. Already-normalized text (plain Japanese, English) is returned as is, and text with
    a few full-width or half-width forms does not pay for a slow NFKC pass over all of it."""
    if PyUnicode_IS_ASCII(text):
        return text
    PyUnicode_READY(text)
    cdef Py_ssize_t n = len(text), count, j, done = 0
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef GArr spans
    cdef Py_ssize_t* bounds
    cdef list pieces
    garr_init(&spans, 2 * sizeof(Py_ssize_t), 0)   # a temporary: doubles
    try:
        if kind == PyUnicode_1BYTE_KIND:
            count = _find_pieces(<const uint8_t*>data, n, &spans)
        elif kind == PyUnicode_2BYTE_KIND:
            count = _find_pieces(<const uint16_t*>data, n, &spans)
        else:
            count = _find_pieces(<const uint32_t*>data, n, &spans)
        bounds = <Py_ssize_t*>spans.data
        if count == 0:
            return text
        if count == 1 and bounds[0] == 0 and bounds[1] == n:
            return _unicodedata_normalize("NFKC", text).casefold()
        pieces = []
        for j in range(count):
            if bounds[2 * j] > done:
                pieces.append(text[done:bounds[2 * j]])
            pieces.append(_unicodedata_normalize("NFKC", text[bounds[2 * j]:bounds[2 * j + 1]]).casefold())
            done = bounds[2 * j + 1]
        if done < n:
            pieces.append(text[done:])
        return "".join(pieces)
    finally:
        garr_free(&spans)


cpdef str normalize(str text):
    """NFKC, then casefold."""
    if text is None:
        raise TypeError("normalize() argument must be str, not None")
    if PyUnicode_IS_ASCII(text):
        return text.lower()
    return _unicodedata_normalize("NFKC", text).casefold()


cdef cnp.ndarray _keys(str text, bint query):
    cdef str norm = _normalized_for_keys(text)
    # Every key consumes at least one code point of its own, so len(norm) bounds the count.
    cdef Py_ssize_t n = len(norm), k
    cdef uint64_t local[STACK_KEYS]
    cdef uint64_t* keys
    cdef cnp.npy_intp size
    cdef cnp.ndarray arr
    cdef Py_ssize_t places
    if n <= STACK_KEYS:
        # A query keeps its placeholders: _resolve_stems tells its words from their stems.
        k = _scan_str(norm, local, NULL, not query, &places)
        if places:
            k = _resolve_stems(norm, local, k, query)
        size = k
        arr = cnp.PyArray_EMPTY(1, &size, cnp.NPY_UINT64, 0)
        memcpy(cnp.PyArray_DATA(arr), local, k * sizeof(uint64_t))
        return arr
    keys = <uint64_t*>PyMem_Malloc(n * sizeof(uint64_t))
    if keys == NULL:
        raise MemoryError()
    try:
        k = _scan_str(norm, keys, NULL, not query, &places)
        if places:
            k = _resolve_stems(norm, keys, k, query)
        size = k
        arr = cnp.PyArray_EMPTY(1, &size, cnp.NPY_UINT64, 0)
        memcpy(cnp.PyArray_DATA(arr), keys, k * sizeof(uint64_t))
        return arr
    finally:
        PyMem_Free(keys)


def token_keys(str text not None):
    """The uint64 keys of all tokens of `text`, in text order, duplicates kept."""
    return _keys(text, False)


def query_keys(str text not None):
    """The keys a search for `text` looks up: token_keys(text), except that in a query of more
    than one token a stemmed word is looked up by its stem alone (docs/SCORING.md)."""
    return _keys(text, True)


def tokenize(str text not None):
    """The tokens of `text` as readable strings, in the order of `token_keys(text)`."""
    cdef str norm = normalize(text)
    cdef Py_ssize_t n = len(norm), k, j
    cdef list out = []
    cdef str tok
    cdef Py_ssize_t places
    if n == 0:
        return out
    cdef uint64_t* keys = <uint64_t*>PyMem_Malloc(n * sizeof(uint64_t))
    cdef Py_ssize_t* spans = <Py_ssize_t*>PyMem_Malloc(2 * n * sizeof(Py_ssize_t))
    try:
        if keys == NULL or spans == NULL:
            raise MemoryError()
        k = _scan_str(norm, keys, spans, False, &places)
        for j in range(k):
            tok = norm[spans[2 * j]:spans[2 * j + 1]].replace("'", "").replace("\u2019", "")
            if (keys[j] >> 62) == 1:
                with _stem_lock:
                    tok = _stem_word(tok)
                if tok == out[len(out) - 1]:
                    continue
            out.append(tok)
        return out
    finally:
        PyMem_Free(keys)
        PyMem_Free(spans)


def key_of_token(str token not None):
    """Key of one already-normalized token: a CJK pair or single CJK character gets its packed
    bigram/unigram key, anything else the word hash of its UTF-8 bytes (lone surrogates are
    encoded with `surrogatepass`, so every str has a key)."""
    cdef Py_ssize_t n = len(token)
    cdef uint32_t c1, c2
    if n == 2:
        c1 = ord(token[0])
        c2 = ord(token[1])
        if _is_cjk(c1) and _is_cjk(c2):
            return bigram_key(c1, c2)
    elif n == 1:
        c1 = ord(token)
        if _is_cjk(c1):
            return unigram_key(c1)
    cdef bytes utf8 = token.encode("utf-8", "surrogatepass")
    return word_key(utf8, len(utf8))


def hash_utf8(const unsigned char[::1] data):
    """62-bit word key of UTF-8 bytes: splitmix64(fnv1a64(data)) with the top bits cleared,
    0 -> 1. Accepts any contiguous bytes-like object."""
    if data.shape[0] == 0:
        return word_key(NULL, 0)
    return word_key(&data[0], data.shape[0])


def _inert_code_points(uint32_t stop=0x110000):
    """Test hook: (code point, what the scanner reads it as) for the code points below `stop`
    that token_keys leaves out of the Python-level normalization."""
    cdef uint32_t c
    return [(c, _simple_map(c)) for c in range(stop) if _is_inert(c)]


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"

# C-level contract of convmem._core.tokenizer (see docs/DESIGN.md section 1).
# Other compiled modules `cimport` these to key tokens without going through Python objects
# (the index gets its keys from Python arrays today: the key layout is what it relies on).
from libc.stdint cimport uint32_t, uint64_t

cdef enum:
    MAX_WORD = 64            # code points kept from a word (a joined identifier keeps all)

cdef enum CharClass:
    CLS_SEP = 0              # separator: space, punctuation, symbol, emoji, lone surrogate
    CLS_CJK = 1              # Han, Hiragana, Katakana, Hangul (bigrammed)
    CLS_ALPHA = 2            # other alphabetic character (part of a word)
    CLS_DIGIT = 3            # digit (part of a word too: python3 is one word)


# Key kinds live in the top two bits: 00 word (a word, its stem or a joined identifier), 10 CJK
# bigram, 11 CJK unigram; 01 is the tokenizer's internal stem placeholder, never returned.
cdef inline uint64_t bigram_key(uint32_t c1, uint32_t c2) noexcept nogil:
    return (<uint64_t>2 << 62) | (<uint64_t>c1 << 21) | c2


cdef inline uint64_t unigram_key(uint32_t c) noexcept nogil:
    return (<uint64_t>3 << 62) | c


# The word/number key: splitmix64(fnv1a64(utf8[0:n])) masked to 62 bits, 0 -> 1.
cdef uint64_t word_key(const unsigned char* utf8, Py_ssize_t n) noexcept nogil

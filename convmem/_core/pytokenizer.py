"""Readable pure-Python twin of `convmem._core.tokenizer` (test oracle, CONVMEM_PURE=1).

It gives bit-identical results to the compiled module. The rules (docs/DESIGN.md section 1,
docs/SCORING.md "Analyzer"), applied to `normalize(text)`:

- a maximal run of CJK characters (Han, kana, Hangul: `_CJK_RANGES`) of length n >= 2 gives its
  n-1 overlapping bigrams; a run of length 1 gives one unigram;
- otherwise a maximal run of letters and digits (`str.isalpha`, `str.isdigit`, not CJK) is a word
  (`python3`, `w65bcd49z`); an apostrophe (' or U+2019) between a letter or digit and a letter
  is dropped (`don't` -> `dont`), and a possessive `'s` ending the word is cut off
  (`caroline's` -> `caroline`); a word longer than 64 code points keeps its first 64;
- a word of 3 to 64 ASCII letters is followed by its Snowball English stem when that differs
  (`deploying` -> `deploying`, `deploy`);
- words joined by single joiners `_ - . / :` (`v2.3.1`, `src/config.ts`) are followed by the
  joined form, whole (`v2`, `3`, `1`, `v2.3.1`); a possessive ends the chain;
- everything else (spaces, punctuation, symbols, emoji, lone surrogates) separates tokens.

Keys carry their kind in the top two bits: 00 word (62-bit hash of the UTF-8 bytes),
10 CJK bigram `(c1 << 21) | c2`, 11 CJK unigram `c`.
"""
from __future__ import annotations

import functools
import threading
import unicodedata

import numpy as np
import Stemmer
import numpy.typing as npt

TOKENIZER_VERSION = 2
UNICODE_VERSION: str = unicodedata.unidata_version

MAX_WORD = 64  # code points kept from a word
_JOINERS = frozenset("_-./:")
_APOSTROPHES = frozenset("'\u2019")

# The compiled module caches stems in a table keyed by the word's key; the same answers. A
# Stemmer object is not documented as thread-safe: one call at a time.
_stemmer = Stemmer.Stemmer("english")
_stem_lock = threading.Lock()


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    with _stem_lock:
        return _stemmer.stemWord(word)

_MASK64 = (1 << 64) - 1
_MASK62 = (1 << 62) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_BIGRAM_TAG = 0b10 << 62
_UNIGRAM_TAG = 0b11 << 62

# Inclusive code point ranges treated as CJK (Han, Hiragana, Katakana, Hangul). U+30FB (katakana
# middle dot) is punctuation and deliberately left out; U+30FC (long vowel mark) is inside.
_CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3041, 0x309F),  # Hiragana
    (0x30A0, 0x30FA),  # Katakana
    (0x30FC, 0x30FF),  # Katakana: long vowel mark, iteration marks, digraph koto
    (0x3130, 0x318F),  # Hangul Compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xA960, 0xA97F),  # Hangul Jamo Extended-A
    (0xAC00, 0xD7AF),  # Hangul Syllables
    (0xD7B0, 0xD7FF),  # Hangul Jamo Extended-B
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x3FFFF),  # Supplementary and Tertiary Ideographic Planes
)

_SEP, _CJK, _ALPHA, _DIGIT = 0, 1, 2, 3


def is_cjk(cp: int) -> bool:
    """True if the code point `cp` belongs to one of the CJK ranges."""
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _char_class(ch: str) -> int:
    # CJK first: most CJK characters are also alphabetic.
    if is_cjk(ord(ch)):
        return _CJK
    if ch.isalpha():
        return _ALPHA
    if ch.isdigit():
        return _DIGIT
    return _SEP


def normalize(text: str) -> str:
    """NFKC, then casefold. ASCII text is already NFKC and casefolds like `lower()`."""
    if not isinstance(text, str):
        raise TypeError(f"expected str, not {type(text).__name__}")
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", text).casefold()


def hash_utf8(data: bytes) -> int:
    """62-bit word key of UTF-8 bytes: splitmix64(fnv1a64(data)) with the top bits cleared, 0 -> 1."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _MASK64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _MASK64
    h ^= h >> 31
    h &= _MASK62
    return h or 1


def key_of_token(token: str) -> int:
    """Key of one already-normalized token: a CJK pair or single CJK character gets its packed
    bigram/unigram key, anything else the word hash of its UTF-8 bytes (lone surrogates are
    encoded with `surrogatepass`, so every str has a key)."""
    if len(token) == 2 and is_cjk(ord(token[0])) and is_cjk(ord(token[1])):
        return _BIGRAM_TAG | (ord(token[0]) << 21) | ord(token[1])
    if len(token) == 1 and is_cjk(ord(token)):
        return _UNIGRAM_TAG | ord(token)
    return hash_utf8(token.encode("utf-8", "surrogatepass"))


def _is_alnum(ch: str) -> bool:
    return _char_class(ch) in (_ALPHA, _DIGIT)


def tokenize(text: str) -> list[str]:
    """The tokens of `text` as readable strings, in the order of `token_keys(text)`."""
    return [t for t, _ in _tokens(text)]


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(token, whether it is the stem of the token before it) for every token of `text`."""
    norm = normalize(text)
    out: list[tuple[str, bool]] = []
    n = len(norm)
    i = 0
    while i < n:
        cls = _char_class(norm[i])
        if cls == _SEP:
            i += 1
            continue
        if cls == _CJK:
            start = i
            while i < n and _char_class(norm[i]) == _CJK:
                i += 1
            if i - start == 1:
                out.append((norm[start], False))
            else:
                out.extend((norm[j:j + 2], False) for j in range(start, i - 1))
            continue
        joined: list[str] = []  # the chain's characters, apostrophes left out
        parts = 0
        while True:
            word: list[str] = []
            possessive = False
            while i < n:
                ch = norm[i]
                if _is_alnum(ch):
                    joined.append(ch)
                    if len(word) < MAX_WORD:
                        word.append(ch)
                    i += 1
                    continue
                if ch in _APOSTROPHES and i + 1 < n and _char_class(norm[i + 1]) == _ALPHA:
                    if norm[i + 1] == "s" and (i + 2 == n or not _is_alnum(norm[i + 2])):
                        possessive = True  # caroline's -> caroline
                        i += 2
                        break
                    i += 1  # don't -> dont
                    continue
                break
            w = "".join(word)
            out.append((w, False))
            if len(w) >= 3 and w.isascii() and w.isalpha():
                stem = _stem(w)
                if stem != w:
                    out.append((stem, True))
            parts += 1
            if not possessive and i + 1 < n and norm[i] in _JOINERS and _is_alnum(norm[i + 1]):
                joined.append(norm[i])
                i += 1
                continue
            break
        if parts > 1:
            out.append(("".join(joined), False))
    return out


def token_keys(text: str) -> npt.NDArray[np.uint64]:
    """The uint64 keys of all tokens of `text`, in text order, duplicates kept."""
    return np.array([key_of_token(t) for t in tokenize(text)], dtype=np.uint64)


def query_keys(text: str) -> npt.NDArray[np.uint64]:
    """The keys a search for `text` looks up: token_keys(text), except that in a query of more
    than one token (stems aside) a stemmed word is looked up by its stem alone: an exact form
    counted beside its stem would weigh the stemmable words of a query double."""
    toks = _tokens(text)
    if sum(1 for _, stem in toks if not stem) > 1:
        out: list[str] = []
        for t, stem in toks:
            if stem:
                out[-1] = t
            else:
                out.append(t)
        return np.array([key_of_token(t) for t in out], dtype=np.uint64)
    return np.array([key_of_token(t) for t, _ in toks], dtype=np.uint64)

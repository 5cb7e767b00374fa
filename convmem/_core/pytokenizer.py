"""Readable pure-Python twin of `convmem._core.tokenizer` (test oracle, CONVMEM_PURE=1).

It gives bit-identical results to the compiled module. The rules (docs/DESIGN.md section 1),
applied to `normalize(text)`:

- a maximal run of CJK characters (Han, kana, Hangul: `_CJK_RANGES`) of length n >= 2 gives its
  n-1 overlapping bigrams; a run of length 1 gives one unigram;
- otherwise a maximal run of alphabetic characters (`str.isalpha`) is a word and a maximal run
  of digits (`str.isdigit`) is a number; a run longer than 64 code points keeps its first 64;
- everything else (spaces, punctuation, symbols, emoji, lone surrogates) separates tokens.

Keys carry their kind in the top two bits: 00 word/number (62-bit hash of the UTF-8 bytes),
10 CJK bigram `(c1 << 21) | c2`, 11 CJK unigram `c`.
"""
from __future__ import annotations

import unicodedata

import numpy as np
import numpy.typing as npt

TOKENIZER_VERSION = 1
UNICODE_VERSION: str = unicodedata.unidata_version

MAX_WORD = 64  # code points kept from a word or number run

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


def _spans(norm: str) -> list[tuple[int, int]]:
    """(start, stop) of every token of an already-normalized string, in text order."""
    spans: list[tuple[int, int]] = []
    n = len(norm)
    i = 0
    while i < n:
        cls = _char_class(norm[i])
        if cls == _SEP:
            i += 1
            continue
        start = i
        i += 1
        while i < n and _char_class(norm[i]) == cls:
            i += 1
        if cls == _CJK:
            if i - start == 1:
                spans.append((start, start + 1))
            else:
                spans.extend((j, j + 2) for j in range(start, i - 1))
        else:
            spans.append((start, min(i, start + MAX_WORD)))
    return spans


def tokenize(text: str) -> list[str]:
    """The tokens of `text` as readable strings, in the order of `token_keys(text)`."""
    norm = normalize(text)
    return [norm[a:b] for a, b in _spans(norm)]


def token_keys(text: str) -> npt.NDArray[np.uint64]:
    """The uint64 keys of all tokens of `text`, in text order, duplicates kept."""
    return np.array([key_of_token(t) for t in tokenize(text)], dtype=np.uint64)

"""Token estimates for answers sized to an agent's context (recall, start_session).

convmem has no model tokenizer (and must not guess which model reads its answers), so a token is
estimated from the text's script, the way BPE tokenizers of current models come out on average:

- CJK characters count one token each: Han ideographs (U+3400-4DBF, U+4E00-9FFF, U+F900-FAFF,
  U+20000-3FFFF), the iteration marks U+3005-3007, Hiragana, Katakana (with the phonetic
  extensions), Hangul (jamo and syllables), CJK symbols and punctuation (U+3000-303F: 、。「」)
  and the half- and full-width forms (U+FF00-FFEF). Tokenizers give these about one token per
  character, often more than one per character for rare ideographs merged from bytes; one is the
  documented estimate.
- Everything else counts by its UTF-8 bytes, four bytes per token, rounded up: Latin text and
  code (~4 characters per token), Cyrillic and Greek (2 bytes per character: ~2 per token),
  scripts of 3-byte characters (~1.3 per token), emoji (one token each).

The estimate of a text is monotone in its prefixes and never more than the sum of the estimates
of its parts, so a bundle whose parts are each measured, with one token per separator, stays
within what the parts sum to. A JSON answer is measured as its JSON text (escapes included).
"""
from __future__ import annotations

import re
from typing import Any

import orjson

BYTES_PER_TOKEN = 4  # non-CJK text, in UTF-8 bytes
_CJK = re.compile("[\u3000-\u303f\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
                  "\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef\u1100-\u11ff\u3130-\u318f"
                  "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\U00020000-\U0003ffff]")


def estimate_tokens(text: str) -> int:
    """The estimated token count of `text` (see the module docstring)."""
    if text.isascii():
        return -(-len(text) // BYTES_PER_TOKEN)
    rest = _CJK.sub("", text)
    other = len(rest.encode("utf-8", "surrogatepass"))
    return (len(text) - len(rest)) + -(-other // BYTES_PER_TOKEN)


def json_tokens(value: Any) -> int:
    """The estimate of a value's compact JSON text (as the tools send it: UTF-8, not escaped)."""
    return estimate_tokens(orjson.dumps(value).decode("utf-8"))


def trim_text(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` (whole code points) within `max_tokens`."""
    if max_tokens <= 0:
        return ""
    if estimate_tokens(text) <= max_tokens:
        return text
    # Every character is at least a quarter of a token, so no longer prefix can fit.
    lo, hi = 0, min(len(text), BYTES_PER_TOKEN * max_tokens)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def fit_item(item: dict[str, Any], field: str, max_tokens: int) -> dict[str, Any] | None:
    """`item` with its text `field` cut (a prefix of whole code points) so that the item's JSON
    is within `max_tokens`, marked `<field>_truncated`; None when not even an empty field fits.
    The item is changed in place (and returned)."""
    full = item[field]
    item[f"{field}_truncated"] = False
    if json_tokens(item) <= max_tokens:
        return item
    item[field] = ""
    item[f"{field}_truncated"] = True
    room = max_tokens - json_tokens(item)
    if room < 0:
        item[field] = full
        return None
    # The field's own JSON text (escapes included) is what grows: search its prefix by that.
    lo, hi = 0, min(len(full), BYTES_PER_TOKEN * (room + 1))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        item[field] = full[:mid]
        if json_tokens(item) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    item[field] = full[:lo]
    return item

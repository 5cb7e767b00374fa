"""Token estimates for answers sized to an agent's context (recall, start_session).

convmem has no model tokenizer (and must not guess which model reads its answers), so a token is
estimated from the text's script, the way BPE tokenizers of current models come out on average,
with the length of each character in UTF-8 standing for its script:

- 1-byte characters (ASCII: English and other Latin-script text without accents, code, JSON
  syntax): four bytes per token.
- 2-byte characters (Latin with accents, Greek, Cyrillic, Hebrew, Arabic, ...): two characters
  per token.
- 3-byte characters (CJK ideographs, kana, Hangul, CJK punctuation and full-width forms; also
  Thai, Devanagari and the other scripts of the Basic Multilingual Plane above U+07FF): one token
  each. Tokenizers give CJK text about one token per character (rare ideographs more, merged from
  bytes); for the other scripts here it overestimates, which keeps answers inside the budget.
- 4-byte characters (emoji, rare ideographs of the supplementary planes): one token each.

Each class is rounded up on its own. The estimate of a text is monotone in its prefixes and never more than the sum of the estimates
of its parts, so a bundle whose parts are each measured, with one token per separator, stays
within what the parts sum to. A JSON answer is measured as its JSON text (escapes included).
"""
from __future__ import annotations

from typing import Any

import orjson

BYTES_PER_TOKEN = 4  # of 1-byte characters; no character is less than a quarter of a token
# UTF-8 lead bytes by sequence length ("2", "3", "4"); ASCII and continuation bytes are "."
_LEAD_CLASS = bytes(ord("2") if 0xC0 <= b < 0xE0 else ord("3") if 0xE0 <= b < 0xF0
                    else ord("4") if b >= 0xF0 else ord(".") for b in range(256))


def estimate_tokens(text: str) -> int:
    """The estimated token count of `text` (see the module docstring)."""
    if text.isascii():
        return -(-len(text) // BYTES_PER_TOKEN)
    data = text.encode("utf-8", "surrogatepass")
    classes = data.translate(_LEAD_CLASS)
    two, three, four = classes.count(b"2"), classes.count(b"3"), classes.count(b"4")
    one = len(data) - 2 * two - 3 * three - 4 * four
    return -(-one // BYTES_PER_TOKEN) + -(-two // 2) + three + four


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
    # The field's own JSON text (escapes included) is what grows: search its prefix by that. A
    # proper prefix only: the whole text did not fit marked false, and "true" is a byte shorter,
    # so the whole text marked truncated could fit and would be a lie.
    lo, hi = 0, min(len(full) - 1, BYTES_PER_TOKEN * (room + 1))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        item[field] = full[:mid]
        if json_tokens(item) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    item[field] = full[:lo]
    return item


SUMMARY_CHARS = 512  # of a message's summary in a budgeted part (the bundle, start_session)


def with_text(part: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
    """`part` with message `m`'s tags and summary (when it has them), `total_bytes` and its
    content last (the field fit_item cuts): a part of a budgeted answer."""
    meta = m["metadata"]
    if meta["tags"]:
        part["tags"] = meta["tags"]
    if "summary" in meta:
        part["summary"] = meta["summary"][:SUMMARY_CHARS]
    part["total_bytes"] = len(m["content"].encode("utf-8"))
    part["content"] = m["content"]
    return part

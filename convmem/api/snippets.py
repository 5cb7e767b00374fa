"""Snippets: a message's content cut to a byte budget around the query's best matches.

A snippet is at most `budget` UTF-8 bytes, the "…" marks (3 bytes each) included; it never
splits a character. The content is split into blocks of about a quarter of the budget (cut after
white space when there is some nearby, else on a character boundary); each block's tokens are
keyed as the index keys them, and the run of blocks that holds the most distinct query keys
(then the most occurrences; the earliest on ties) is kept. Without any match, the start is kept.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .._core import tokenizer

ELLIPSIS = "…"
_MARK = len(ELLIPSIS.encode("utf-8"))
_SPACE_LOOKBACK = 32  # bytes searched back for white space to cut a block at


def _boundary_back(data: bytes, i: int) -> int:
    """The largest character boundary <= i."""
    while 0 < i < len(data) and (data[i] & 0xC0) == 0x80:
        i -= 1
    return i


def _blocks(data: bytes, size: int) -> list[int]:
    """Block starts (the first is 0), every block at most `size` bytes."""
    starts = [0]
    n = len(data)
    while starts[-1] + size < n:
        end = _boundary_back(data, starts[-1] + size)
        space = max(data.rfind(b" ", end - _SPACE_LOOKBACK, end), data.rfind(b"\n", end - _SPACE_LOOKBACK, end))
        if space > starts[-1]:
            end = space + 1
        if end <= starts[-1]:  # (a block smaller than a character cannot be: size >= 16)
            end = starts[-1] + size
        starts.append(end)
    return starts


def _best_start(data: bytes, starts: list[int], span: int, query: Collection[int]) -> int:
    """The byte where the run of `span` blocks with the best matches starts."""
    hits: list[dict[int, int]] = []
    for i, lo in enumerate(starts):
        hi = starts[i + 1] if i + 1 < len(starts) else len(data)
        keys = tokenizer.token_keys(data[lo:hi].decode("utf-8")).tolist()
        counts: dict[int, int] = {}
        for k in keys:
            if k in query:
                counts[k] = counts.get(k, 0) + 1
        hits.append(counts)
    best, best_score = 0, (0, 0)
    for i in range(max(1, len(starts) - span + 1)):
        merged: dict[int, int] = {}
        for counts in hits[i:i + span]:
            for k, c in counts.items():
                merged[k] = merged.get(k, 0) + c
        score = (len(merged), sum(merged.values()))
        if score > best_score:
            best, best_score = i, score
    return starts[best]


def snippet(content: str, budget: int, query: Collection[int]) -> tuple[str, bool, int]:
    """(text, truncated, total bytes of the content) for `content` cut to `budget` bytes around
    the best matches of the query keys."""
    data = content.encode("utf-8")
    total = len(data)
    if total <= budget:
        return content, False, total
    size = max(16, budget // 4)
    starts = _blocks(data, size)
    start = _best_start(data, starts, 3, query) if query else 0
    # room for the text between the marks: a leading mark unless the snippet starts at 0
    room = budget - _MARK - (_MARK if start > 0 else 0)
    if start + room >= total:  # near the end: take the tail, one mark only
        start = total - (budget - _MARK)
        while start < total and (data[start] & 0xC0) == 0x80:
            start += 1
        return ELLIPSIS + data[start:].decode("utf-8"), True, total
    end = _boundary_back(data, start + room)
    text = data[start:end].decode("utf-8")
    return (ELLIPSIS if start > 0 else "") + text + ELLIPSIS, True, total


def apply(item: dict[str, Any], budget: int, query: Collection[int]) -> None:
    """Replace a message dict's content by its snippet, with content_truncated and total_bytes."""
    text, cut, total = snippet(item["content"], budget, query)
    item["content"] = text
    item["content_truncated"] = cut
    item["total_bytes"] = total

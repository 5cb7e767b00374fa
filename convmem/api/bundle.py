"""Answers within a token budget: the parts of a bundle, cut to share the budget fairly.

A bundle is a list of parts (dicts with a `content` text), most relevant first. `pack` keeps the
parts in that order and cuts their contents so that the estimate (api/budget.py) of the list's
JSON text never exceeds the budget: each part first gets room for its fields and a little of its
text (parts that cannot are left out, the least relevant first), then the rest of the budget is
shared out as one cap per part (water-filling: a part shorter than the cap keeps its whole text
and leaves its room to the others).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .budget import BYTES_PER_TOKEN, fit_item, json_tokens

MIN_TEXT_TOKENS = 8  # a part is worth sending only with this much of its text (or all of it)
_LIST_TOKENS = 1  # "[" and "]" (a token), and one per part for its separator


class Packed:
    def __init__(self, parts: list[dict[str, Any]], left_out: int, trimmed: int) -> None:
        self.parts = parts
        self.left_out = left_out  # parts that did not fit at all
        self.trimmed = trimmed  # parts sent with their text cut


def pack(parts: list[dict[str, Any]], budget: int, text_cap: int | None = None) -> Packed:
    """Fit `parts` (changed in place: `content` cut, `content_truncated` set) into `budget`
    tokens; `text_cap`: no part's JSON above this many tokens (one part may not take it all)."""
    room = budget - _LIST_TOKENS
    full: list[int] = []
    least: list[int] = []
    kept: list[dict[str, Any]] = []
    dropped: set[str] = set()  # parts left out: their neighbours (anchored to them) go too
    for part in parts:
        anchor = part.get("anchor")
        if anchor is not None and anchor in dropped:
            dropped.add(part["message_id"])
            continue
        text = part["content"]
        # No part can use more characters than 4 per token of the budget: cut before measuring.
        if len(text) > BYTES_PER_TOKEN * budget:
            part["content"] = text[: BYTES_PER_TOKEN * budget]
            part["content_truncated"] = True
        else:
            part["content_truncated"] = False
        whole = json_tokens(part)
        bare = json_tokens({**part, "content": "", "content_truncated": True})
        need = min(whole, bare + MIN_TEXT_TOKENS)
        if text_cap is not None:
            whole = min(whole, max(text_cap, need))
        if sum(least) + need + len(kept) + 1 > room:
            if "message_id" in part:
                dropped.add(part["message_id"])
            continue  # (a later, smaller part may still fit)
        kept.append(part)
        full.append(whole)
        least.append(need)
    # The largest cap c with sum(clamp(c, least, full)) + separators <= room.
    avail = room - len(kept)
    full_a, least_a = np.array(full, dtype=np.int64), np.array(least, dtype=np.int64)
    lo, hi = 0, max(full, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(np.minimum(full_a, np.maximum(least_a, mid)).sum()) <= avail:
            lo = mid
        else:
            hi = mid - 1
    out: list[dict[str, Any]] = []
    trimmed = 0
    for part, f, least_i in zip(kept, full, least):
        cap = min(f, max(least_i, lo))
        was_cut = part["content_truncated"]
        fitted = fit_item(part, "content", cap)
        if fitted is None:  # (cannot happen: cap >= the bare part's cost; kept for safety)
            continue
        fitted["content_truncated"] = fitted["content_truncated"] or was_cut
        trimmed += fitted["content_truncated"]
        out.append(fitted)
    return Packed(out, len(parts) - len(out), trimmed)


def used_tokens(parts: list[dict[str, Any]]) -> int:
    return json_tokens(parts)

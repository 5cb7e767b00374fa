"""One response budget for every answer that lists items (history, sessions, search, context),
and the signed cursors that page through them."""
from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import orjson

from ..domain import MAX_CURSOR_CHARS, RESPONSE_BUDGET
from ..validation import fail

_MAC_BYTES = 12


class Budget:
    """The ~8 MiB response budget: items are taken while they fit; the first always fits.

    `take(item, bound)` with an upper bound of the item's JSON size skips serialising it while
    the bounds taken so far still fit; the first time they would not, the items taken so far
    (`taken`) are measured exactly and measuring goes on from there. The answer is the same.
    `max_items` caps the count as well; `truncated` says whether an item was refused.
    """

    def __init__(self, taken: list[dict[str, Any]] | None = None, *, used: int = 0,
                 count: int = 0, max_items: int | None = None) -> None:
        self.used = used
        self.count = count
        self.exact = bool(used or count)  # given a measured start, measure from there
        self.max_items = max_items
        self.truncated = False
        self._taken = taken

    def take(self, item: dict[str, Any], bound: int | None = None) -> bool:
        if self.max_items is not None and self.count >= self.max_items:
            self.truncated = True
            return False
        if not self.exact:
            if bound is not None and self.used + bound <= RESPONSE_BUDGET:
                self.used += bound
                self.count += 1
                return True
            self.exact = True
            self.used = sum(len(orjson.dumps(it)) + 1 for it in self._taken or ())
        return self.take_size(len(orjson.dumps(item)) + 1)

    def take_size(self, size: int) -> bool:
        """Take an item of a known JSON size (a separator included)."""
        if self.max_items is not None and self.count >= self.max_items or (
                self.count and self.used + size > RESPONSE_BUDGET):
            self.truncated = True
            return False
        self.used += size
        self.count += 1
        return True


def json_bound(record_bytes: int) -> int:
    """An upper bound of the JSON size of a search result built from a log record of this many
    bytes (without context_preview): a byte of stored text takes at most 6 in JSON (an escape),
    ids, numbers and relations less than that; the keys, enums and scores fit in the rest."""
    return 6 * record_bytes + 2048


class Cursors:
    """Opaque cursors: a kind byte and a payload, signed with the store's key (HMAC-SHA256,
    truncated), so that a client can neither forge one nor reuse one for another listing."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def make(self, kind: bytes, payload: bytes) -> str:
        raw = kind + payload
        mac = hmac.new(self._key, raw, hashlib.sha256).digest()[:_MAC_BYTES]
        return base64.urlsafe_b64encode(raw + mac).rstrip(b"=").decode("ascii")

    def open(self, cursor: Any, kind: bytes, max_chars: int = MAX_CURSOR_CHARS) -> bytes:
        """The payload of a cursor made by `make(kind, ...)`; VALIDATION_ERROR otherwise."""
        if not isinstance(cursor, str) or not cursor or len(cursor) > max_chars:
            raise fail("cursor must be a nextCursor value from an earlier response")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (ValueError, TypeError):
            raise fail("cursor is not valid") from None
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        good = hmac.new(self._key, payload, hashlib.sha256).digest()[:_MAC_BYTES]
        if len(raw) < _MAC_BYTES + 1 or not hmac.compare_digest(mac, good) or payload[:1] != kind:
            raise fail("cursor is not valid for this request")
        return payload[1:]

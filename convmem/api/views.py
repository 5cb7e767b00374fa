"""The four views of read_messages: a session's history, the session list, a byte range of one
message's content, and one message in its context (neighbours and the relation graph).

Each takes a RecordReader (the catalog and the log it was built from) and answers the tool's
dict; the caller holds the store's lock.
"""
from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from ..catalog.docs import FLAG_HAS_SUMMARY, R_CONTENT, R_RELATIONS, R_SUMMARY, R_ULID, Record
from ..catalog.sessions import Session
from .. import validation as v
from ..domain import (CONTENT_LIMIT, CONTENT_OFFSET, CONTEXT_AFTER, CONTEXT_BEFORE,
                      CONTEXT_MESSAGE_CAP, HISTORY_LIMIT, KINDS, MAX_SESSION_BYTES, ORDERS,
                      RELATION_DEPTH, RELATION_TYPES, SNIPPET_BYTES, VIEWS)
from ..errors import CONFLICT, ConvMemError
from .._core import codec
from ..validation import fail, ulid_str
from .paging import Budget, Cursors
from .snippets import snippet
from .records import RecordReader, message

_TS = struct.Struct("<q")
_DELETED_ENTRY_BYTES = 80  # a relation entry for a deleted message, within the budget


# -- arguments --------------------------------------------------------------------------------
Read = Callable[[RecordReader, Cursors], dict[str, Any]]


def request(view: Any, limit: Any, cursor: Any, session_id: Any, message_id: Any,
            content_offset: Any, content_limit: Any, expected_revision: Any, before: Any,
            after: Any, relation_depth: Any, relation_types_json: Any, order: Any = None,
            snippet_bytes: Any = None) -> Read:
    """read_messages' arguments checked (VALIDATION_ERROR naming the first one at fault, or what
    the view needs and was not given), as the view to run with the store's lock held. `order`
    (history, sessions) and `snippet_bytes` (sessions) are the extended schema's."""
    view = v.choice("view", view, VIEWS, default=VIEWS[0])
    lim = v.ranged("limit", limit, HISTORY_LIMIT)
    desc = v.choice("order", order, ORDERS, default=ORDERS[0]) == "desc"
    if view == "sessions":
        snip = v.integer("snippet_bytes", snippet_bytes, lo=SNIPPET_BYTES[0],
                         hi=SNIPPET_BYTES[1], default=None)
        return lambda reader, cursors: session_list(reader, cursors, lim, cursor, desc, snip)
    v.view_argument(view, session_id if view == "history" else message_id)
    if view == "history":
        name = v.string("session_id", session_id, min_bytes=1, max_bytes=MAX_SESSION_BYTES)
        return lambda reader, cursors: history(reader, cursors, name, lim, cursor, desc)
    ulid = v.ulid("message_id", message_id)
    if view == "content":
        off = v.ranged("content_offset", content_offset, CONTENT_OFFSET)
        clim = v.ranged("content_limit", content_limit, CONTENT_LIMIT)
        expected = v.integer("expected_revision", expected_revision, lo=1, hi=None, default=None)
        return lambda reader, cursors: content_range(reader, ulid, off, clim, expected)
    nb = v.ranged("before", before, CONTEXT_BEFORE)
    na = v.ranged("after", after, CONTEXT_AFTER)
    depth = v.ranged("relation_depth", relation_depth, RELATION_DEPTH)
    types = v.relation_types(relation_types_json)
    return lambda reader, cursors: context(reader, ulid, nb, na, depth, types)


# -- history ----------------------------------------------------------------------------------
def history(reader: RecordReader, cursors: Cursors, name: str, limit: int,
            cursor: Any, desc: bool = False) -> dict[str, Any]:
    """A session's live messages in history order (newest first with `desc`), from the
    cursor's position on. A cursor holds the last message returned (time and id), so the next
    page starts right after it even if messages were written or deleted meanwhile."""
    cat = reader.catalog
    kind = b"h" if desc else b"H"  # a cursor of one order is refused by the other
    scope = hashlib.sha256(name.encode("utf-8")).digest()[:8]
    s = cat.sessions.get(name)
    start = s.n - 1 if desc and s is not None else 0
    if cursor is not None:
        raw = cursors.open(cursor, kind)
        if len(raw) != 32 or raw[:8] != scope:
            raise fail("cursor does not belong to this session's history")
        (ts,) = _TS.unpack(raw[8:16])
        if s is not None:
            start = (cat.sessions.before(s, ts, raw[16:32]) if desc
                     else cat.sessions.after(s, ts, raw[16:32]))
    out: list[dict[str, Any]] = []
    result: dict[str, Any] = {"history": out}
    if s is None:
        return result
    budget = Budget()
    step = -1 if desc else 1
    i = start
    while 0 <= i < s.n and len(out) < limit:
        msg = reader.message_of_slot(int(s.slots[i]))
        if not budget.take(msg):
            break
        out.append(msg)
        i += step
    if 0 <= i < s.n and out:
        last = i - step
        payload = scope + _TS.pack(int(s.ts[last])) + cat.ulid_of(int(s.slots[last]))
        result["nextCursor"] = cursors.make(kind, payload)
    return result


# -- sessions ---------------------------------------------------------------------------------
def session_list(reader: RecordReader, cursors: Cursors, limit: int, cursor: Any,
                 desc: bool = False, snippet_bytes: int | None = None) -> dict[str, Any]:
    """Sessions with live messages by (start time, session id), ascending or (`desc`) the most
    recently started first, from the cursor's position on. `snippet_bytes` cuts each
    representative_summary to that many bytes (from its start, "…" marking the cut)."""
    cat = reader.catalog
    kind = b"s" if desc else b"S"
    order = cat.sessions.ordered()
    start = len(order) - 1 if desc else 0
    if cursor is not None:
        raw = cursors.open(cursor, kind)
        if len(raw) < 8:
            raise fail("cursor is not valid for this request")
        (started,) = _TS.unpack(raw[:8])
        start = (bisect.bisect_left(order, (started, raw[8:], -1)) - 1 if desc
                 else bisect.bisect_right(order, (started, raw[8:], 1 << 62)))
    out: list[dict[str, Any]] = []
    budget = Budget()
    step = -1 if desc else 1
    i = start
    while 0 <= i < len(order) and len(out) < limit:
        s = cat.sessions.at(order[i][2])
        item = {
            "session_id": s.name,
            "message_count": s.n,
            "kind_counts": dict(zip(KINDS, s.kind_counts)),
            "representative_summary": representative(reader, s),
            "started_at": s.started_at,
            "last_message_at": s.last_message_at,
        }
        if snippet_bytes is not None:
            text, cut, total = snippet(item["representative_summary"], snippet_bytes, ())
            item["representative_summary"] = text
            item["representative_summary_truncated"] = cut
            item["representative_summary_bytes"] = total
        if not budget.take(item):
            break
        out.append(item)
        i += step
    result: dict[str, Any] = {"sessions": out}
    if 0 <= i < len(order) and out:
        started, name_bytes, _ = order[i - step]
        result["nextCursor"] = cursors.make(kind, _TS.pack(started) + name_bytes)
    return result


def representative(reader: RecordReader, s: Session) -> str:
    """The latest summary in the session, else the latest message's full content."""
    cat = reader.catalog
    flags = cat.doc_flags.data
    slot_doc = cat.slot_doc.data
    # Backwards from the newest, in growing chunks checked by numpy: a session of many messages
    # without a summary costs one vectorised pass, not a Python loop over all of them.
    end, step = s.n, 64
    while end > 0:
        start = max(0, end - step)
        docs = slot_doc[s.slots[start:end]]
        hits = np.flatnonzero(flags[docs] & FLAG_HAS_SUMMARY)
        if len(hits):
            return reader.record(int(docs[hits[-1]]))[R_SUMMARY]
        end, step = start, step * 8
    return reader.record(int(slot_doc[int(s.slots[s.n - 1])]))[R_CONTENT]


# -- content ----------------------------------------------------------------------------------
def content_range(reader: RecordReader, ulid: bytes, off: int, limit: int,
                  expected: int | None) -> dict[str, Any]:
    """Up to `limit` bytes of a message's content from byte `off`, cut on code point bounds."""
    _, doc = reader.catalog.live_doc(ulid)

    def content_bytes(data: bytes, poff: int, plen: int) -> tuple[int, bytes]:
        start, length = codec.message_content_span(data, poff, plen)
        return codec.message_revision(data, poff, plen), data[start:start + length]

    revision, data = reader.read_doc(doc, content_bytes)
    if expected is not None and expected != revision:
        raise ConvMemError(CONFLICT, "expected_revision does not match the current revision")
    total = len(data)
    if off > total:
        raise fail("content_offset is past the end of the content")
    if off < total and (data[off] & 0xC0) == 0x80:
        raise fail("content_offset is not on a UTF-8 code point boundary")
    end = min(off + limit, total)
    while end < total and end > off and (data[end] & 0xC0) == 0x80:
        end -= 1
    if end == off and off < total:
        # The limit is smaller than one code point: return that code point whole.
        lead = data[off]
        end = off + (1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4)
    return {
        "content_range": {
            "message_id": ulid_str(ulid),
            "revision": revision,
            "total_bytes": total,
            "content_offset": off,
            "next_content_offset": end,
            "complete": end == total,
            "content": data[off:end].decode("utf-8"),
        }
    }


# -- context ----------------------------------------------------------------------------------
def context(reader: RecordReader, ulid: bytes, before: int, after: int, depth: int,
            types: int) -> dict[str, Any]:
    """A message, its neighbours in the session and the messages related to it, within one
    budget of CONTEXT_MESSAGE_CAP messages and the response size."""
    cat = reader.catalog
    slot, doc = cat.live_doc(ulid)
    rec = reader.record(doc)
    earlier, later, s = cat.neighbours(slot, before, after)
    anchor = message(rec)
    budget = Budget(used=len(orjson.dumps(anchor)), count=1, max_items=CONTEXT_MESSAGE_CAP)
    before_msgs = [m for m in map(reader.message_of_slot, earlier) if budget.take(m)]
    after_msgs = [m for m in map(reader.message_of_slot, later) if budget.take(m)]
    relations: list[dict[str, Any]] = []
    if depth >= 1 and not budget.truncated:
        _walk_relations(reader, rec, depth, types, relations, budget)
    return {
        "message": anchor,
        "chronological_context": {"before": before_msgs, "after": after_msgs},
        "relations": relations,
        "session": {"session_id": s.name, "message_count": s.n},
        "truncated": budget.truncated,
    }


def _walk_relations(reader: RecordReader, rec: Record, depth: int, types: int,
                    out: list[dict[str, Any]], budget: Budget) -> None:
    """Breadth-first: depth 1 outgoing then incoming, then depth 2 in the same directions."""
    cat = reader.catalog
    me = rec[R_ULID]
    seen: set[tuple[str, int, bytes]] = set()
    # frontier entries: (direction, record of the message whose edges we follow)
    frontier: list[tuple[str, Record]] = [("outgoing", rec), ("incoming", rec)]
    for d in range(1, depth + 1):
        next_frontier: list[tuple[str, Record]] = []
        for direction, src in frontier:
            if direction == "outgoing":
                edges = [(t, u) for t, u in src[R_RELATIONS]]
            else:
                incoming = sorted(cat.relations.incoming_of(src[R_ULID]), key=lambda e: e[1])
                edges = [(t, cat.ulid_of(source)) for t, source in incoming]
            for rtype, other in edges:
                if not (types >> rtype) & 1 or other == me:
                    continue
                key = (direction, rtype, other)
                if key in seen:
                    continue
                seen.add(key)
                oslot = cat.ids.get(other)
                odoc = cat.current_doc(oslot) if oslot is not None else -1
                entry: dict[str, Any] = {"type": RELATION_TYPES[rtype], "direction": direction,
                                         "depth": d}
                if odoc < 0:
                    entry["message_id"] = ulid_str(other)
                    entry["status"] = "deleted"
                    if not budget.take_size(_DELETED_ENTRY_BYTES):
                        return
                    out.append(entry)
                    continue
                orec = reader.record(odoc)
                msg = message(orec)
                if not budget.take(msg):
                    return
                entry["message"] = msg
                out.append(entry)
                next_frontier.append((direction, orec))
        frontier = next_frontier

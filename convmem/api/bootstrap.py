"""start_session: what an agent should know when it starts, within a token budget, and what
changed since it last asked. Reads only: no record is written, no counter changes.

The answer's sections share the budget in this order: long-term memories (up to 40 %), changes
since the `since` cursor (half of what is left), the most recent sessions (half of what is left
then), and the vocabulary (kinds, tiers and tags in use, with counts: the rest). Each section's
JSON list is within its share by the estimate of api/budget.py; their sum within the budget.

The cursor ("since") is a checked log position, signed with the store's cursor key (so a cursor
of another store is refused): the log's id, the byte offset of its end and the sequence number of
its last record when the cursor was made. Records after that offset are the changes. The log only
grows until rebuild_index replaces it with a new one (a new id): a cursor of the old log is then
too old to list changes ("status": "reset", with the reason), and so is one whose position no
longer matches the log (a store restored from an older backup).
"""
from __future__ import annotations

import heapq
import struct
from typing import Any

import numpy as np

from .._core import codec
from ..catalog.docs import R_CONTENT, R_REVISION, R_SESSION_ID, R_SUMMARY
from ..catalog.recall_keys import LONG_TERM, N_TIERS
from ..domain import KINDS, TIERS
from ..errors import ConvMemError
from ..store.logfile import LogFile
from ..validation import fail, ulid_str
from .budget import json_tokens, with_text
from .bundle import pack
from .paging import Cursors
from .records import RecordReader, message
from .views import representative

SINCE_CURSOR = b"B"  # (H and S are the history and sessions views')
_POSITION = struct.Struct("<QQ")  # log end offset, last sequence number
MEMORY_CANDIDATES = 64
RECENT_SESSIONS = 20
LINE_CHARS = 160  # a one-line summary: the first line, at most this many characters
MAX_CHANGE_RECORDS = 20_000  # records after the cursor looked at; beyond, complete is false
MAX_CHANGE_SCAN_BYTES = 16 * 1024 * 1024


def start_session(reader: RecordReader, log: LogFile, cursors: Cursors, budget: int,
                  since: str | None) -> dict[str, Any]:
    cat = reader.catalog
    left = budget
    omitted: dict[str, int] = {}

    share = budget * 2 // 5
    # (no more than could fit: a memory's fields alone are some 40 tokens)
    want = min(MEMORY_CANDIDATES, max(1, share // 32))
    candidates = cat.recall.long_term(cat.slot_doc.view(), MEMORY_CANDIDATES)[:want]
    mems = pack([_memory(message(reader.record(cat.current_doc(s)))) for s in candidates],
                share, text_cap=max(48, budget // 10))
    memories = mems.parts
    left -= section_tokens(memories)
    omitted["memories"] = int(_count_long_term(cat)) - len(memories)
    omitted["memories_trimmed"] = mems.trimmed

    answer_changes: dict[str, Any] | None = None
    if since is not None:
        status, reason, found, complete = _changes(reader, log, cursors, since)
        items = _take(found, left // 2)
        left -= section_tokens(items)
        answer_changes = {"status": status}
        if reason:
            answer_changes["reason"] = reason
        answer_changes["counts"] = {c: sum(1 for f in found if f["change"] == c)
                                    for c in ("new", "updated", "deleted")}
        answer_changes["complete"] = complete
        answer_changes["items"] = items
        omitted["changes"] = len(found) - len(items)

    recent = _recent_sessions(reader)
    sessions = pack(recent, left // 2).parts
    left -= section_tokens(sessions)
    omitted["sessions"] = max(0, cat.sessions.live_sessions - len(sessions))

    kinds_tiers = _facets(cat.recall.facet_counts)
    tag_counts = cat.recall.tag_counts
    by_count = heapq.nlargest(200, tag_counts.items(), key=lambda kv: (kv[1], kv[0]))
    vocab = _take(kinds_tiers + [{"tag": t, "count": n} for t, n in by_count], left, lists=3)
    kinds = [x for x in vocab if "kind" in x]
    tiers = [x for x in vocab if "tier" in x]
    tags = [x for x in vocab if "tag" in x]
    omitted["tags"] = len(tag_counts) - len(tags)

    out: dict[str, Any] = {"status": "OK", "budget_tokens": budget}
    out["used_tokens"] = sum(map(section_tokens, (memories, sessions, kinds, tiers, tags))) + (
        section_tokens(answer_changes["items"]) if answer_changes else 0)
    out["memories"] = memories
    out["recent_sessions"] = sessions
    if answer_changes is not None:
        out["changes"] = answer_changes
    out["kinds"] = kinds
    out["tiers"] = tiers
    out["tags"] = tags
    out["omitted"] = omitted
    out["cursor"] = make_cursor(cursors, log, cat.last_seq)
    return out


def _count_long_term(cat: Any) -> int:
    counts = cat.recall.facet_counts  # (the rule long_term applies, on the live counts)
    return int(counts[LONG_TERM[: len(counts)]].sum())


def section_tokens(items: list[dict[str, Any]]) -> int:
    """What a section of the answer costs: its JSON list's estimate (nothing when empty)."""
    return json_tokens(items) if items else 0


def _take(items: list[dict[str, Any]], allot: int, lists: int = 1) -> list[dict[str, Any]]:
    """Items in order while the estimate of their JSON, cut into `lists` lists, stays within
    `allot` (a token for each list's brackets, one per separator: the estimate of the whole is
    at most the sum of the parts')."""
    used = lists
    out = []
    for item in items:
        cost = json_tokens(item) + 1
        if used + cost > allot:
            break
        used += cost
        out.append(item)
    return out


def _facets(counts: np.ndarray) -> list[dict[str, Any]]:
    by_kind = counts.reshape(len(KINDS), N_TIERS).sum(axis=1)
    by_tier = counts.reshape(len(KINDS), N_TIERS).sum(axis=0)
    out: list[dict[str, Any]] = [{"kind": k, "count": int(n)} for k, n in zip(KINDS, by_kind) if n]
    out += [{"tier": t, "count": int(n)} for t, n in zip(TIERS, by_tier) if n]
    return out


def _memory(m: dict[str, Any]) -> dict[str, Any]:
    meta = m["metadata"]
    part: dict[str, Any] = {"message_id": m["message_id"], "session_id": m["session_id"],
                            "memory_kind": meta["memory_kind"], "memory_tier": meta["memory_tier"],
                            "importance": meta["importance"], "updated_at": m["updated_at"]}
    return with_text(part, m)


def one_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line[:LINE_CHARS]


def _recent_sessions(reader: RecordReader) -> list[dict[str, Any]]:
    cat = reader.catalog
    out = []
    for num in cat.recall.recent_sessions(RECENT_SESSIONS):
        s = cat.sessions.at(num)
        out.append({"session_id": s.name, "message_count": s.n, "last_message_at": s.last_message_at,
                    "content": one_line(representative(reader, s))})
    return out


# -- the since cursor ---------------------------------------------------------------------------
def make_cursor(cursors: Cursors, log: LogFile, last_seq: int) -> str:
    return cursors.make(SINCE_CURSOR, log.log_id + _POSITION.pack(log.size, last_seq))


def _changes(reader: RecordReader, log: LogFile, cursors: Cursors, since: str,
             ) -> tuple[str, str, list[dict[str, Any]], bool]:
    """(status, reason, change items, complete): the messages created, updated and deleted by
    the records after the cursor's position, each once, by its state now."""
    try:
        payload = cursors.open(since, SINCE_CURSOR)
    except ConvMemError:
        raise fail("since is not a start_session cursor of this store") from None
    if len(payload) != len(log.log_id) + _POSITION.size:
        raise fail("since is not a start_session cursor of this store")
    log_id, (offset, seq) = payload[: len(log.log_id)], _POSITION.unpack(payload[len(log.log_id):])
    cat = reader.catalog
    if log_id != log.log_id:
        return ("reset", "the store was compacted by rebuild_index after this cursor was made; "
                "the changes since cannot be listed", [], False)
    if not _position_matches(log, offset, seq, cat.last_seq):
        return ("reset", "this cursor does not match the store's log (restored from an older "
                "copy?); the changes since cannot be listed", [], False)
    if offset == log.size:
        return "OK", "", [], True
    mm = log.map()
    if mm is None:
        return "OK", "", [], True
    try:
        end = min(log.size, offset + MAX_CHANGE_SCAN_BYTES)
        res = codec.scan_log(mm, offset, end)
        n = min(len(res), MAX_CHANGE_RECORDS)
        complete = n == len(res) and res.stop == log.size
        first: dict[bytes, int] = {}  # ulid -> revision of its first record here (0: a delete)
        header = codec.RECORD_HEADER_SIZE
        for off, rtype, plen in zip(res.offsets[:n].tolist(), res.types[:n].tolist(),
                                    res.lengths[:n].tolist()):
            if rtype == codec.REC_MESSAGE:
                rec = codec.decode_message(mm, off + header, plen)
                first.setdefault(rec[0], rec[R_REVISION])
            elif rtype == codec.REC_DELETE:
                first.setdefault(codec.decode_delete(mm, off + header, plen), 0)
    finally:
        mm.close()
    items = []
    for ulid, rev in first.items():
        slot = cat.ids.get(ulid)
        doc = cat.current_doc(slot) if slot is not None else -1
        created = rev == 1
        if doc < 0:
            if not created:  # (made and deleted since: the agent never saw it)
                items.append({"change": "deleted", "message_id": ulid_str(ulid)})
            continue
        rec = reader.record(doc)
        items.append({"change": "new" if created else "updated", "message_id": ulid_str(ulid),
                      "session_id": rec[R_SESSION_ID],
                      "line": one_line(rec[R_SUMMARY] or rec[R_CONTENT])})
    return "OK", "", items, complete


def _position_matches(log: LogFile, offset: int, seq: int, last_seq: int) -> bool:
    """Whether (offset, seq) is a record boundary of this log: its end with the last sequence
    number, or the start of the record numbered seq + 1."""
    if offset < codec.LOG_HEADER_SIZE or offset > log.size:
        return False
    if offset == log.size:
        return seq == last_seq
    try:
        header = log.read(offset, codec.RECORD_HEADER_SIZE)
        rtype, next_seq, *_ = codec.read_record(header + log.read(offset + codec.RECORD_HEADER_SIZE,
                                                                  _payload_len(header)), 0)
    except (codec.CorruptRecord, ConvMemError, ValueError):
        return False
    return next_seq == seq + 1


def _payload_len(header: bytes) -> int:
    return min(int.from_bytes(header[4:8], "little"), codec.MAX_PAYLOAD)

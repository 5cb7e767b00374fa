"""The trash tools of the admin toolset: list_deleted and restore_message (MemoryStore methods).

A deleted message stays restorable until rebuild_index compacts the log: its last version's
record is still in the log and the catalog's trash points at it (catalog/trash.py).

restore_message appends that version again as a MESSAGE record (no new record type: an older
convmem replays it as what it is, a version of a message that had been deleted) with the same
content, metadata, relations and sources, the next revision and updated_at = now (a restore is a
change that clients syncing by revision or updated_at must see). The write protocol is
write_message's: acknowledged once the record is fdatasync'ed, replayed at open.

list_deleted pages through the trash, most recently deleted first. The log's DELETE record
(format 2, which the contract's get_system_health reports) holds only the message id, so the
time of a delete is not known; each entry carries `deleted_seq`, the DELETE record's sequence
number, which orders deletions exactly and is what the cursor pages by (so pages stay stable
while messages are deleted or restored meanwhile).
"""
from __future__ import annotations

import hashlib
import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import validation as v
from .._core import codec
from ..catalog.docs import (R_CONTENT, R_REVISION, R_ROLE, R_SESSION_ID, R_SUMMARY, R_TIMESTAMP,
                            R_ULID, R_UPDATED_AT, Prepared, Record, prepare)
from ..domain import LIST_DELETED_LIMIT, MAX_REVISION, MAX_SESSION_BYTES, ROLES
from ..errors import INTERNAL_ERROR, NOT_FOUND, ConvMemError
from ..ids import now_ms
from .guards import once_more
from .paging import Budget
from .records import message

if TYPE_CHECKING:
    from .store import MemoryStore

SNIPPET_BYTES = 200  # the start of each deleted message's content, in UTF-8 bytes at most
_CURSOR = b"T"
_SEQ = struct.Struct("<q")
_ALL_SESSIONS = b"\0" * 8  # a cursor's scope when no session_id was given


def _scope(name: str | None) -> bytes:
    return _ALL_SESSIONS if name is None else hashlib.sha256(name.encode("utf-8")).digest()[:8]


def snippet(content: str, limit: int = SNIPPET_BYTES) -> str:
    """The first `limit` UTF-8 bytes of content, cut back to a whole code point."""
    data = content.encode("utf-8")
    if len(data) <= limit:
        return content
    return data[:limit].decode("utf-8", "ignore")


def deleted_entry(rec: Record, seq: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "message_id": v.ulid_str(rec[R_ULID]),
        "session_id": rec[R_SESSION_ID],
        "role": ROLES[rec[R_ROLE]],
        "timestamp": rec[R_TIMESTAMP],
        "revision": rec[R_REVISION],
        "deleted_seq": seq,
    }
    if rec[R_SUMMARY] is not None:
        item["summary"] = rec[R_SUMMARY]
    item["content_bytes"] = len(rec[R_CONTENT].encode("utf-8"))
    item["snippet"] = snippet(rec[R_CONTENT])
    return item


class TrashTools:
    """list_deleted and restore_message, as methods of MemoryStore (which this is mixed into)."""

    def list_deleted(self: "MemoryStore", *, limit: int | None = None, cursor: str | None = None,
                     session_id: str | None = None) -> dict[str, Any]:
        """Deleted messages that restore_message can bring back, most recently deleted first:
        {"deleted": [...], "total_deleted": n, "nextCursor"?}; `session_id` keeps one session's."""
        lim = v.ranged("limit", limit, LIST_DELETED_LIMIT)
        name = None
        if session_id is not None:
            name = v.string("session_id", session_id, min_bytes=1, max_bytes=MAX_SESSION_BYTES)
        scope = _scope(name)
        with self._mutex:
            self._check_open()
            cat, reader = self._catalog, self._reader
            trash = cat.trash
            seqs = trash.seqs.view()
            end = len(seqs)
            if cursor is not None:
                raw = self._cursors.open(cursor, _CURSOR)
                if len(raw) != 16 or raw[:8] != scope:
                    raise v.fail("cursor does not belong to this listing of deleted messages")
                end = int(np.searchsorted(seqs, _SEQ.unpack(raw[8:])[0], side="left"))
            if name is None:
                total = len(seqs)
                chosen = range(end - 1, -1, -1)
            else:
                s = cat.sessions.get(name)
                if s is None:
                    return {"deleted": [], "total_deleted": 0}
                in_session = cat.slot_session.data[trash.slots.view()] == s.num
                total = int(np.count_nonzero(in_session))
                chosen = np.flatnonzero(in_session[:end])[::-1].tolist()
            out: list[dict[str, Any]] = []
            budget = Budget(out, max_items=lim)
            docs = trash.docs.view()
            last = -1
            for i in chosen:
                item = deleted_entry(reader.record(int(docs[i])), int(seqs[i]))
                if not budget.take(item):
                    break
                out.append(item)
                last = i
            result: dict[str, Any] = {"deleted": out, "total_deleted": total}
            if budget.truncated and last >= 0:
                result["nextCursor"] = self._cursors.make(_CURSOR, scope + _SEQ.pack(int(seqs[last])))
            return result

    @once_more
    def restore_message(self: "MemoryStore", *, message_id: str) -> dict[str, Any]:
        """Bring a deleted message back as it was when deleted (a new revision of it):
        {"status": "OK", "message": {...}}. NOT_FOUND for an id the trash does not hold (never
        stored, or removed for good by rebuild_index); VALIDATION_ERROR for a live message."""
        ulid = v.ulid("message_id", message_id)
        with self._mutex:
            self._check_open()
            cat = self._catalog
            slot = cat.ids.get(ulid)
            if slot is not None and cat.current_doc(slot) >= 0:
                raise v.fail("message_id names a message that is not deleted")
            entry = -1 if slot is None else cat.trash.find(slot)
            if entry < 0:
                raise ConvMemError(NOT_FOUND, "no deleted message has this message_id (deleted "
                                              "messages are removed for good by rebuild_index)")
            rec = self._reader.record(int(cat.trash.docs.data[entry]))
            if rec[R_REVISION] >= MAX_REVISION:
                raise ConvMemError(INTERNAL_ERROR, f"the message is at the highest revision the "
                                                   f"format stores ({MAX_REVISION})")
            cat.check_room(0, 1)
            fields = list(rec)
            fields[R_REVISION] = rec[R_REVISION] + 1
            fields[R_UPDATED_AT] = max(now_ms(), rec[R_UPDATED_AT])
            new: Record = tuple(fields)  # type: ignore[assignment]
            frame = self._frame(codec.REC_MESSAGE, codec.encode_message(*new))

            def stage(offset: int) -> tuple[int, Prepared, dict[str, Any]]:
                prep = prepare(new)
                answer = {"status": "OK", "message": message(new)}
                return cat.stage_version(new, offset, len(frame), slot, prep), prep, answer

            _, (doc, _, answer) = self._append_overlapped(
                frame, stage, lambda staged: cat.unstage(staged[0], staged[1]))
            with self._applying("a restore was interrupted after its record was durable"):
                cat.commit_version(new, slot, doc, len(frame))
            self._after_write()
            return answer

"""Stored records as the tools show them: the message dict of the contract, and reading a
version back from the log through the catalog (every read checks the record's checksum)."""
from __future__ import annotations

from typing import Any, TypeVar

from .._core import codec
from ..catalog.catalog import Catalog
from ..catalog.docs import (R_CONTENT, R_IMPORTANCE, R_KIND, R_RELATIONS, R_REVISION, R_ROLE,
                            R_SESSION_ID, R_SOURCES, R_SUMMARY, R_TAGS, R_TIER, R_TIMESTAMP,
                            R_TOOL_CALL_ID, R_ULID, R_UPDATED_AT, Record)
from ..domain import KINDS, RELATION_TYPES, ROLES, TIERS
from ..store.logfile import LogFile
from ..store.records import Decode, read_message_at
from ..validation import Metadata, ulid_str

_T = TypeVar("_T")



class RecordReader:
    """Reads the versions the catalog points at from the log it was built from."""

    __slots__ = ("log", "catalog")

    def __init__(self, log: LogFile, catalog: Catalog) -> None:
        self.log = log
        self.catalog = catalog

    def record(self, doc: int) -> Record:
        cat = self.catalog
        return read_message_at(self.log, int(cat.doc_offset.data[doc]), int(cat.doc_len.data[doc]),
                               codec.decode_message)

    def read_doc(self, doc: int, decode: Decode[_T]) -> _T:
        """`decode(data, payload offset, payload length)` of a stored version's checked record;
        damage is CORRUPT_STORE with the byte offset."""
        return read_message_at(self.log, *self.catalog.doc_span(doc), decode)

    def at(self, offset: int, length: int, decode: Decode[_T] = codec.decode_message) -> _T:
        return read_message_at(self.log, offset, length, decode)

    def message_of_slot(self, slot: int) -> dict[str, Any]:
        """The message dict of a slot's current version (a page of history reads many: the
        lookups are inlined)."""
        cat = self.catalog
        doc = int(cat.slot_doc.data[slot])
        return message(read_message_at(self.log, int(cat.doc_offset.data[doc]),
                                       int(cat.doc_len.data[doc]), codec.decode_message))


def new_record(ulid: bytes, timestamp: int, updated_at: int, revision: int, role: int,
               session_id: str, content: str, meta: Metadata) -> Record:
    """A record tuple in codec order, its metadata fields taken from `meta`."""
    return (ulid, timestamp, updated_at, revision, role, meta.kind, meta.tier, meta.importance,
            session_id, content, meta.tool_call_id, meta.summary, meta.tags, meta.relations,
            meta.sources)


def metadata_of(rec: Record) -> Metadata:
    return Metadata(rec[R_TOOL_CALL_ID], list(rec[R_TAGS]), rec[R_TIER], rec[R_KIND],
                    rec[R_IMPORTANCE], rec[R_SUMMARY], list(rec[R_RELATIONS]),
                    list(rec[R_SOURCES]))


def message(rec: Record) -> dict[str, Any]:
    """The contract's message object (key order is part of the answer's bytes)."""
    meta: dict[str, Any] = {}
    if rec[R_TOOL_CALL_ID] is not None:
        meta["tool_call_id"] = rec[R_TOOL_CALL_ID]
    meta["tags"] = list(rec[R_TAGS])
    meta["memory_tier"] = TIERS[rec[R_TIER]]
    meta["memory_kind"] = KINDS[rec[R_KIND]]
    meta["importance"] = rec[R_IMPORTANCE]
    if rec[R_SUMMARY] is not None:
        meta["summary"] = rec[R_SUMMARY]
    meta["relations"] = [{"type": RELATION_TYPES[t], "message_id": ulid_str(u)}
                         for t, u in rec[R_RELATIONS]]
    meta["source_message_ids"] = [ulid_str(u) for u in rec[R_SOURCES]]
    return {
        "message_id": ulid_str(rec[R_ULID]),
        "session_id": rec[R_SESSION_ID],
        "timestamp": rec[R_TIMESTAMP],
        "role": ROLES[rec[R_ROLE]],
        "content": rec[R_CONTENT],
        "revision": rec[R_REVISION],
        "updated_at": rec[R_UPDATED_AT],
        "metadata": meta,
    }

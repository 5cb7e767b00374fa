"""Bulk import and export: one imported item (an import_messages dict, a JSON Lines line) as a
record, a live message as the item that imports it back identically, and the comparison that
tells an item already stored ("present") from a real conflict."""
from __future__ import annotations

import itertools
from collections.abc import Iterable

from typing import Any

from .. import validation as v
from ..catalog.docs import (R_ULID, R_CONTENT, R_IMPORTANCE, R_KIND, R_RELATIONS, R_REVISION, R_ROLE,
                            R_SESSION_ID, R_SOURCES, R_SUMMARY, R_TAGS, R_TIER, R_TIMESTAMP,
                            R_TOOL_CALL_ID, R_UPDATED_AT, Record)
from ..domain import MAX_CONTENT_BYTES, MAX_REVISION, MAX_SESSION_BYTES, MAX_TIMESTAMP_MS
from ..ids import UlidClock
from ..errors import CONFLICT, ConvMemError
from .records import message, new_record
from ..typed import _Marker

EXPORT_FIELDS = ("message_id", "session_id", "timestamp", "role", "content", "metadata",
                 "revision", "updated_at")


def prepare_import(item: Any, clock: UlidClock) -> Record:
    """The record of an imported item (VALIDATION_ERROR naming the field otherwise); an item
    without message_id gets a new id from `clock`."""
    if not isinstance(item, dict):
        raise v.fail("each imported item must be a JSON object")
    if not v.IMPORT_FIELDS.issuperset(item):
        raise v.fail(f"unknown field; allowed fields are {', '.join(sorted(v.IMPORT_FIELDS))}")
    get = item.get
    session = v.string("session_id", get("session_id"), min_bytes=1, max_bytes=MAX_SESSION_BYTES)
    role = v.role(get("role"))
    body = v.string("content", get("content"), min_bytes=1, max_bytes=MAX_CONTENT_BYTES)
    raw_meta = get("metadata")
    fields = {} if raw_meta is None else v.metadata_fields(raw_meta, "metadata")
    meta = v.apply_metadata(None, fields)
    ts = v.integer("timestamp", get("timestamp"), lo=0, hi=MAX_TIMESTAMP_MS, default=None)
    message_id = get("message_id")
    if message_id is not None:
        ulid = v.ulid("message_id", message_id)
        if ts is None:
            ts = int.from_bytes(ulid[:6], "big")
    else:
        ulid, now = clock.new()
        ts = now if ts is None else ts
    revision = v.integer("revision", get("revision"), lo=1, hi=MAX_REVISION, default=1)
    updated = v.integer("updated_at", get("updated_at"), lo=0, hi=MAX_TIMESTAMP_MS, default=ts)
    return new_record(ulid, ts, updated, revision, role, session, body, meta)


def export_item(message: dict[str, Any]) -> dict[str, Any]:
    """The import item of a message dict (records.message)."""
    return {name: message[name] for name in EXPORT_FIELDS}


PRESENT = _Marker("PRESENT")  # the id is stored and every field the item gives is equal
DELETED = _Marker("DELETED")  # the id was stored and deleted since: not imported again

_META_FIELDS = (("tool_call_id", R_TOOL_CALL_ID), ("tags", R_TAGS), ("memory_tier", R_TIER),
                ("memory_kind", R_KIND), ("importance", R_IMPORTANCE), ("summary", R_SUMMARY),
                ("relations", R_RELATIONS), ("source_message_ids", R_SOURCES))


def same_message(item: dict[str, Any], new: Record, stored: Record) -> bool:
    """Whether the stored record equals the item in every field the item gives (session,
    role and content always; timestamp, revision, updated_at and metadata fields when given)."""
    if (new[R_SESSION_ID] != stored[R_SESSION_ID] or new[R_ROLE] != stored[R_ROLE]
            or new[R_CONTENT] != stored[R_CONTENT]):
        return False
    for name, pos in (("timestamp", R_TIMESTAMP), ("revision", R_REVISION),
                      ("updated_at", R_UPDATED_AT)):
        if item.get(name) is not None and new[pos] != stored[pos]:
            return False
    meta = item.get("metadata")
    if meta:
        for name, pos in _META_FIELDS:
            if name in meta and _plain(new[pos]) != _plain(stored[pos]):
                return False
    return True


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def import_all(store: Any, items: Iterable[Any], batch_size: int = 1000) -> int:
    """import_messages for any store with import_message_batch and checkpoint (MemoryStore,
    SharedStore): groups of `batch_size`, all or nothing each; the first invalid item raises its
    ConvMemError (earlier groups stay imported); no periodic snapshot meanwhile, one at the end.
    Returns the count."""
    total = 0
    batch: list[Any] = []
    with store.deferring_snapshots():
        for item in itertools.chain(items, [None]):
            if item is not None:
                batch.append(item)
            if batch and (item is None or len(batch) >= batch_size):
                for err in store.import_message_batch(batch, all_or_nothing=True):
                    if err is not None:
                        raise err
                total += len(batch)
                batch = []
    store.checkpoint()
    return total


def compare_existing(reader: Any, item: Any, rec: Record, earlier: Record | None) -> Any:
    """import_message_batch(existing="compare")'s answer for an id already taken: PRESENT when
    the stored message (or `earlier` in the same batch) equals the item in every field it gives,
    DELETED when it was deleted, else a CONFLICT whose `.existing` is the stored message."""
    if earlier is None:
        cat = reader.catalog
        doc = cat.current_doc(cat.ids.get(rec[R_ULID]))
        if doc < 0:
            return DELETED
        earlier = reader.record(doc)
    if same_message(item, rec, earlier):
        return PRESENT
    err = ConvMemError(CONFLICT, "message_id already exists with other content")
    err.existing = message(earlier)  # type: ignore[attr-defined]
    return err

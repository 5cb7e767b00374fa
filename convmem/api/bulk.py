"""Bulk import and export: one imported item (an import_messages dict, a JSON Lines line) as a
record, and a live message as the item that imports it back identically."""
from __future__ import annotations

from typing import Any

from .. import validation as v
from ..catalog.docs import Record
from ..domain import MAX_CONTENT_BYTES, MAX_REVISION, MAX_SESSION_BYTES, MAX_TIMESTAMP_MS
from ..ids import UlidClock
from .records import new_record

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

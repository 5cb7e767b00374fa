"""The admin toolset's tools (list_deleted, restore_message): names, descriptions, input schemas.
Listed only with `--toolsets admin` (or `all`)."""
from __future__ import annotations

from ..domain import LIST_DELETED_LIMIT, MAX_SESSION_BYTES
from .schemas import ToolSpec, _integer, _message_id, _object, _string

ADMIN_TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="list_deleted",
        description=(
            "The trash: deleted messages that restore_message can still bring back (until the next "
            "rebuild_index removes them for good), most recently deleted first, paged with nextCursor. "
            "Each entry: message_id, session_id, role, timestamp, revision, deleted_seq (the order of "
            "deletion), summary if set, content_bytes and a snippet of the content's start. Optional "
            "session_id keeps one session's."
        ),
        input_schema=_object(
            {
                "limit": _integer("Page size.", *LIST_DELETED_LIMIT),
                "cursor": _string("nextCursor from the previous page (opaque)."),
                "session_id": _string("Only messages deleted from this session.", minLength=1,
                                      maxLength=MAX_SESSION_BYTES),
            }
        ),
        writes=False,
    ),
    ToolSpec(
        name="restore_message",
        description=(
            "Bring a deleted message back with the content, metadata and relations it had when it was "
            "deleted, as its next revision; flushed to disk before the call returns "
            '{"status":"OK","message":{...}}. NOT_FOUND if the trash has no such message (never stored, '
            "or removed by rebuild_index); VALIDATION_ERROR if the message is not deleted."
        ),
        input_schema=_object(
            {"message_id": _message_id("ULID of the deleted message to restore.")},
            ("message_id",),
        ),
        writes=True,
    ),
)

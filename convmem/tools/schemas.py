"""The seven MCP tools: static names, descriptions and input JSON Schemas (the spec's tables).

Nothing here depends on stored data, so tools/list never carries message content. Ranges are
declared so hosts can show them; MemoryStore enforces them (and the UTF-8 byte limits, which JSON
Schema cannot express: `maxLength` counts code points, a weaker bound than the byte limit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..domain import (CONTENT_LIMIT, CONTENT_OFFSET, CONTEXT_AFTER, CONTEXT_BEFORE,
                      HISTORY_LIMIT, MAX_CONTENT_BYTES, MAX_QUERY_BYTES, MAX_SESSION_BYTES,
                      MIN_IMPORTANCE, RELATION_DEPTH, ROLES, SEARCH_CONTEXT_SIZE, SEARCH_LIMIT,
                      VIEWS)

ULID_PATTERN = "^[0-7][0-9A-HJKMNP-TV-Z]{25}$"  # canonical Crockford base32, 26 characters


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    writes: bool  # True: needs a write token over HTTP
    destructive: bool = False

    @property
    def parameters(self) -> frozenset[str]:
        return frozenset(self.input_schema["properties"])

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.input_schema.get("required", ()))


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def _string(description: str, **limits: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **limits}


def _integer(description: str, minimum: int, maximum: int | None = None,
             default: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "description": description, "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    if default is not None:
        schema["default"] = default
    return schema


def _message_id(description: str) -> dict[str, Any]:
    return _string(description, minLength=26, maxLength=26, pattern=ULID_PATTERN)


_SESSION_ID = _string(f"Conversation/session identifier, 1-{MAX_SESSION_BYTES} UTF-8 bytes.",
                      minLength=1, maxLength=MAX_SESSION_BYTES)
_METADATA_JSON = _string(
    "A JSON object encoded as a string. Fields: tool_call_id (string), tags (string array, max 32), "
    "memory_tier (short|mid|long|discard), memory_kind (conversation|episode|semantic|procedure|"
    "preference|summary), importance (integer 0-100), summary (string), relations (array of "
    '{"type": depends_on|derived_from|supersedes|related_to, "message_id": ULID}, max 32), '
    "source_message_ids (ULID array, max 64)."
)

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="write_message",
        description=(
            "Store a new message in conversation memory. The message is flushed to disk before the "
            'call returns {"status":"OK","message":{...}} with the server-assigned message_id, '
            "timestamp and revision 1."
        ),
        input_schema=_object(
            {
                "session_id": _SESSION_ID,
                "role": {"type": "string", "enum": list(ROLES), "description": "Author role."},
                "content": _string("Message text, 1 byte to 1 MiB of UTF-8.", minLength=1, maxLength=MAX_CONTENT_BYTES),
                "metadata_json": _METADATA_JSON,
            },
            ("session_id", "role", "content"),
        ),
        writes=True,
    ),
    ToolSpec(
        name="update_message",
        description=(
            "Update the content and/or metadata of an existing message (identity, session, role and "
            "creation time are kept). Metadata fields not given are kept. Pass expected_revision to "
            "fail with CONFLICT if the message changed meanwhile. Returns changed=false for a no-op."
        ),
        input_schema=_object(
            {
                "message_id": _message_id("ULID of the message to update."),
                "content": _string("New content, up to 1 MiB of UTF-8.", minLength=1, maxLength=MAX_CONTENT_BYTES),
                "metadata_json": _METADATA_JSON,
                "expected_revision": _integer("Required current revision.", 1),
            },
            ("message_id",),
        ),
        writes=True,
    ),
    ToolSpec(
        name="read_messages",
        description=(
            "Read memory. view=history (default): a session's messages in creation order, paged with "
            "nextCursor (needs session_id). view=content: a byte range of one message's content "
            "(message_id, content_offset, content_limit); repeat with next_content_offset and "
            "expected_revision until complete. view=context: one message with its neighbours in the "
            "session and its relation graph (message_id, before, after, relation_depth, "
            "relation_types_json). view=sessions: the list of sessions, paged with nextCursor."
        ),
        input_schema=_object(
            {
                "view": {
                    "type": "string",
                    "enum": list(VIEWS),
                    "default": VIEWS[0],
                    "description": "Which view to return.",
                },
                "limit": _integer("Page size for history and sessions.", *HISTORY_LIMIT),
                "cursor": _string("nextCursor from the previous page (opaque)."),
                "session_id": _SESSION_ID,
                "message_id": _message_id("ULID of the message (content and context views)."),
                "content_offset": _integer("UTF-8 byte offset to start at (content view).", *CONTENT_OFFSET),
                "content_limit": _integer("Target chunk size in bytes (content view).", *CONTENT_LIMIT),
                "expected_revision": _integer("Required current revision (content view).", 1),
                "before": _integer("Earlier messages of the same session (context view).", *CONTEXT_BEFORE),
                "after": _integer("Later messages of the same session (context view).", *CONTEXT_AFTER),
                "relation_depth": _integer("Relation traversal depth (context view).", *RELATION_DEPTH),
                "relation_types_json": _string(
                    'JSON array of relation types to follow, e.g. "[\\"derived_from\\"]" (context view). '
                    "Default: all types."
                ),
            }
        ),
        writes=False,
    ),
    ToolSpec(
        name="search_messages",
        description=(
            "Full-text search over content, summary and tags (Japanese-aware), best score first. "
            'filters_json is a JSON object string {"kinds": [...], "tiers": [...], "tags": [...]}: '
            "kinds and tiers match any listed value, tags must all be present. context_size adds "
            "neighbouring messages to each result."
        ),
        input_schema=_object(
            {
                "query": _string(f"Search text, 1-{MAX_QUERY_BYTES} UTF-8 bytes.", minLength=1,
                                 maxLength=MAX_QUERY_BYTES),
                "session_id": _SESSION_ID,
                "filters_json": _string("Filter object as a JSON string. Default {}."),
                "min_importance": _integer("Only messages with at least this importance.", *MIN_IMPORTANCE),
                "context_size": _integer("Messages before and after each result to include.",
                                         *SEARCH_CONTEXT_SIZE),
                "limit": _integer("Maximum number of results.", *SEARCH_LIMIT),
            },
            ("query",),
        ),
        writes=False,
    ),
    ToolSpec(
        name="delete_message",
        description=(
            'Delete a message (it disappears from reads and searches at once). Returns {"status":"OK"}, '
            'or {"status":"NOT_FOUND"} (not an error) if there is no such live message or the '
            "session_id guard does not match. The text leaves the log file at the next rebuild_index."
        ),
        input_schema=_object(
            {
                "message_id": _message_id("ULID of the message to delete."),
                "session_id": _string("Delete only if the message belongs to this session.", minLength=1,
                                  maxLength=MAX_SESSION_BYTES),
            },
            ("message_id",),
        ),
        writes=True,
        destructive=True,
    ),
    ToolSpec(
        name="rebuild_index",
        description=(
            "Compact the log to live messages only and rebuild the snapshot and in-memory index. "
            "Runs to completion before any other request is served."
        ),
        input_schema=_object({}),
        writes=True,
    ),
    ToolSpec(
        name="get_system_health",
        description="Storage state, logical I/O counters and memory estimate of the memory store.",
        input_schema=_object({}),
        writes=False,
    ),
)

# The seven tools as `--toolsets core` lists them: the contract's schemas plus optional arguments
# that an old client, not sending them, never notices (docs/SERVER.md lists each one).
from .extended import extend  # noqa: E402 (builds on the definitions above)

EXTENDED_TOOL_SPECS: tuple[ToolSpec, ...] = extend(TOOL_SPECS)

TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOL_SPECS}
READ_TOOL_NAMES: frozenset[str] = frozenset(spec.name for spec in TOOL_SPECS if not spec.writes)

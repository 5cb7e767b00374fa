"""The seven MCP tools: static names, descriptions and input JSON Schemas (the spec's tables).

Nothing here depends on stored data, so tools/list never carries message content. Ranges are
declared so hosts can show them; MemoryStore enforces them (and the UTF-8 byte limits, which JSON
Schema cannot express: `maxLength` counts code points, a weaker bound than the byte limit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..domain import (CONTENT_LIMIT, CONTENT_OFFSET, CONTEXT_AFTER, CONTEXT_BEFORE,
                      HISTORY_LIMIT, IMPORTANCE, KINDS, MAX_CONTENT_BYTES, MAX_QUERY_BYTES,
                      MAX_RELATIONS, MAX_SESSION_BYTES, MAX_SOURCES, MAX_SUMMARY_BYTES,
                      MAX_TAG_BYTES, MAX_TAGS, MAX_TOOL_CALL_ID_BYTES, MIN_IMPORTANCE,
                      RELATION_DEPTH, RELATION_TYPES, ROLES, SEARCH_CONTEXT_SIZE, SEARCH_LIMIT,
                      TIERS, VIEWS)

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


def _either(options: tuple[str, ...]) -> str:
    return "|".join(options)


def _bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def _range(bounds: tuple[int, int | None, int]) -> str:
    lo, hi, default = bounds
    return f"{lo}-{hi}, default {default}" if hi is not None else f"at least {lo}, default {default}"


# The keys of search_messages' filters_json, each with what it takes and how it matches: the one
# place to add a key (the argument's description and the tool's are built from this table).
FILTER_KEYS: tuple[tuple[str, str], ...] = (
    ("kinds", f"array of memory kinds ({_either(KINDS)}), any of which a message may have"),
    ("tiers", f"array of memory tiers ({_either(TIERS)}), any of which a message may have"),
    ("tags", f"array of up to {MAX_TAGS} tags, all of which a message must carry, compared "
             "exactly (case-sensitive, unlike the query)"),
    ("after", "a time, epoch milliseconds or ISO-8601 with a time zone (2026-01-31T09:00:00Z): "
              "messages created at or after it"),
    ("before", "a time as for after: messages created before it (exclusive)"),
    ("roles", f"array of roles ({_either(ROLES)}), any of which a message may have"),
)


def filters_description() -> str:
    keys = "; ".join(f"{key}: {what}" for key, what in FILTER_KEYS)
    example = '{"kinds":["semantic"],"tags":["project"]}'
    return (f"A JSON object encoded as a string (default {{}}), with any of these keys: {keys}. "
            "Keys combine with AND; an empty array does not filter. Example: "
            f"{orjson.dumps(example).decode()}.")


_QUERY = _string(f"Search text, 1-{MAX_QUERY_BYTES} UTF-8 bytes.", minLength=1,
                 maxLength=MAX_QUERY_BYTES)
_SESSION_ID = _string(f"Conversation/session identifier, 1-{MAX_SESSION_BYTES} UTF-8 bytes.",
                      minLength=1, maxLength=MAX_SESSION_BYTES)
_METADATA_JSON = _string(
    "A JSON object encoded as a string, every field optional: "
    f"tool_call_id (string, up to {MAX_TOOL_CALL_ID_BYTES} bytes); "
    f"tags (array of up to {MAX_TAGS} non-empty strings of up to {MAX_TAG_BYTES} bytes); "
    f"memory_kind ({_either(KINDS)}, default {KINDS[0]}): what sort of memory this is; "
    f"memory_tier ({_either(TIERS)}, default {TIERS[0]}): how long you mean to keep it, a label "
    "that search can filter on (convmem never drops a message by itself); "
    f"importance (integer {IMPORTANCE[0]}-{IMPORTANCE[1]}, default {IMPORTANCE[2]}): "
    "search_messages can require a minimum and ranks the more important first among equal scores; "
    f"summary (string, up to {MAX_SUMMARY_BYTES} bytes, searched too); relations (up to "
    f'{MAX_RELATIONS} objects {{"type": {_either(RELATION_TYPES)}, "message_id": ULID}}); '
    f"source_message_ids (up to {MAX_SOURCES} ULIDs). "
    'Example: "{\\"tags\\":[\\"project\\"],\\"importance\\":80}".'
)

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="write_message",
        description=(
            "Store a new message in conversation memory. The message is flushed to disk before the "
            'call returns {"status":"OK","message":{...}} with the server-assigned message_id, '
            "timestamp and revision 1. Give metadata_json to tag and classify it for later "
            "searches (see that argument)."
        ),
        input_schema=_object(
            {
                "session_id": _SESSION_ID,
                "role": {"type": "string", "enum": list(ROLES),
                         "description": f"Author role: {_either(ROLES)}."},
                "content": _string(f"Message text, 1 byte to {_bytes(MAX_CONTENT_BYTES)} of UTF-8.",
                                   minLength=1, maxLength=MAX_CONTENT_BYTES),
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
            "creation time are kept); give content, metadata_json or both. Metadata fields not "
            "given are kept. Pass expected_revision to fail with CONFLICT if the message changed "
            "meanwhile. Returns changed=false (and keeps the revision) for a no-op."
        ),
        input_schema=_object(
            {
                "message_id": _message_id("ULID of the message to update."),
                "content": _string(f"New content, up to {_bytes(MAX_CONTENT_BYTES)} of UTF-8.",
                                   minLength=1, maxLength=MAX_CONTENT_BYTES),
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
            "Read memory; view picks what (default history). view=history needs session_id: that "
            "session's messages in creation order, paged with nextCursor. view=sessions: the list "
            "of sessions (oldest first), paged with nextCursor; use it to find a session_id. "
            "view=content needs message_id: a byte range of its content (content_offset, "
            "content_limit); repeat with next_content_offset and expected_revision until "
            "complete. view=context needs message_id: the message with its neighbours in the "
            "session (before, after) and its relation graph (relation_depth, "
            "relation_types_json). A cursor works only with the view (and, for history, the "
            "session_id) that returned it; pass limit as before."
        ),
        input_schema=_object(
            {
                "view": {
                    "type": "string",
                    "enum": list(VIEWS),
                    "default": VIEWS[0],
                    "description": f"Which view to return: {_either(VIEWS)}.",
                },
                "limit": _integer(f"Page size for history and sessions ({_range(HISTORY_LIMIT)}).",
                                  *HISTORY_LIMIT),
                "cursor": _string("nextCursor from the previous page of the same view and session "
                                  "(opaque)."),
                "session_id": _SESSION_ID,
                "message_id": _message_id("ULID of the message (content and context views)."),
                "content_offset": _integer("UTF-8 byte offset to start at (content view).", *CONTENT_OFFSET),
                "content_limit": _integer("Target chunk size in bytes (content view).", *CONTENT_LIMIT),
                "expected_revision": _integer("Required current revision (content view).", 1),
                "before": _integer("Earlier messages of the same session (context view).", *CONTEXT_BEFORE),
                "after": _integer("Later messages of the same session (context view).", *CONTEXT_AFTER),
                "relation_depth": _integer("Relation traversal depth (context view).", *RELATION_DEPTH),
                "relation_types_json": _string(
                    f"JSON array of relation types to follow ({_either(RELATION_TYPES)}), "
                    'e.g. "[\\"derived_from\\"]" (context view). Default: all types.'
                ),
            }
        ),
        writes=False,
    ),
    ToolSpec(
        name="search_messages",
        description=(
            "Full-text search over content, summary and tags (English and Japanese), best score "
            "first. A message matches if it holds any query word; more and rarer words rank "
            "higher (BM25F). Query text is case-folded and width-normalised. filters_json narrows "
            f"by {', '.join(key for key, _ in FILTER_KEYS)} (see that argument); min_importance "
            "keeps messages whose importance is at least that value (inclusive); session_id keeps "
            "one session. context_size adds neighbouring messages to each result."
        ),
        input_schema=_object(
            {
                "query": _QUERY,
                "session_id": _SESSION_ID,
                "filters_json": _string(filters_description()),
                "min_importance": _integer("Only messages with at least this importance (inclusive).",
                                           *MIN_IMPORTANCE),
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
            "Compact the log to live messages only and rebuild the snapshot and in-memory index "
            "(removes deleted text from disk). No arguments. Runs to completion before any other "
            "request is served: an operator's maintenance call, not needed for normal use."
        ),
        input_schema=_object({}),
        writes=True,
    ),
    ToolSpec(
        name="get_system_health",
        description=("Storage state, logical I/O counters and memory estimate of the memory store. "
                     "No arguments. status is DEGRADED when last_error holds a diagnostic."),
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

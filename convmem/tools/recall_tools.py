"""The recall toolset's tools (recall, start_session, list_tags, remember): names, descriptions,
input schemas. Listed only with `--toolsets recall` (or `all`)."""
from __future__ import annotations

from ..domain import (BUDGET_TOKENS, LIST_TAGS_LIMIT, MAX_CONTENT_BYTES,
                      MIN_IMPORTANCE, RECALL_LIMIT, RECALL_NEIGHBOURS, RECALL_RELATION_DEPTH,
                      ROLES)
from .schemas import _METADATA_JSON, _QUERY, _SESSION_ID, ToolSpec, _integer, _object, _string

_BUDGET = _integer("Token budget of the answer (estimated: ~4 UTF-8 bytes per token, one per CJK "
                   "character).", BUDGET_TOKENS[0], BUDGET_TOKENS[1])

RECALL_TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="recall",
        description=(
            "One bundle of what memory holds on a topic, within budget_tokens: the best search hits, "
            "each followed by its neighbours in its session and its related messages, each message "
            "once, most relevant first, texts cut to fit (content_truncated, total_bytes; read the "
            "rest with read_messages view=content). omitted says what was left out. Takes the "
            "filters of search_messages."
        ),
        input_schema=_object(
            {
                "query": _QUERY,
                "budget_tokens": _BUDGET,
                "session_id": _SESSION_ID,
                "filters_json": _string("Filter object as a JSON string, as search_messages takes. "
                                        "Default {}."),
                "min_importance": _integer("Only hits with at least this importance.", *MIN_IMPORTANCE),
                "limit": _integer("Search hits to start from.", *RECALL_LIMIT),
                "neighbours": _integer("Messages before and after each hit in its session.",
                                       *RECALL_NEIGHBOURS),
                "relation_depth": _integer("Related messages of each hit (0: none).",
                                           *RECALL_RELATION_DEPTH),
            },
            ("query", "budget_tokens"),
        ),
        writes=False,
    ),
    ToolSpec(
        name="start_session",
        description=(
            "Call first in a new session: within budget_tokens, the long-term memories (kinds "
            "preference and semantic, tier long; highest importance first), what changed since "
            "the cursor of your last start_session (pass it as since), the most recent sessions "
            "with a one-line summary, and the kinds, tiers and tags in use with counts. Keep the "
            "returned cursor for next time. Reads only; calling it twice gives the same answer."
        ),
        input_schema=_object(
            {
                "budget_tokens": _BUDGET,
                "since": _string("cursor from an earlier start_session (opaque)."),
            },
            ("budget_tokens",),
        ),
        writes=False,
    ),
    ToolSpec(
        name="list_tags",
        description="Tags in use (on live messages) with their message counts, in code point "
                    "order, paged with nextCursor.",
        input_schema=_object(
            {
                "cursor": _string("nextCursor from the previous page (opaque)."),
                "limit": _integer("Page size.", *LIST_TAGS_LIMIT),
            }
        ),
        writes=False,
    ),
    ToolSpec(
        name="remember",
        description=(
            "Store a memory unless it is already stored: the same content in the same session "
            "(compared after NFKC, case folding and whitespace collapsing) or the same summary "
            "and tags in any session return the stored message with duplicate: true and write "
            "nothing. Otherwise writes as write_message does. near_duplicates lists similar "
            "stored messages either way. role defaults to assistant."
        ),
        input_schema=_object(
            {
                "content": _string("Message text, 1 byte to 1 MiB of UTF-8.", minLength=1,
                                   maxLength=MAX_CONTENT_BYTES),
                "session_id": _SESSION_ID,
                "role": {"type": "string", "enum": list(ROLES), "description": "Author role."},
                "metadata_json": _METADATA_JSON,
            },
            ("content", "session_id"),
        ),
        writes=True,
    ),
)

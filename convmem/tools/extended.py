"""The optional arguments that `--toolsets` adds to the seven tools' schemas (docs/SERVER.md).

An old client never sends them, so with or without them its answers are the contract's; the
contract's own schemas (TOOL_SPECS) stay exactly as they are.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..domain import ORDERS, SNIPPET_BYTES
from .schemas import ToolSpec, _integer, _string

_SNIPPET = _integer("Cut each result's content to at most this many UTF-8 bytes around the best "
                    "match (… marks a cut; content_truncated and total_bytes tell; the whole "
                    "content stays readable with view=content).", *SNIPPET_BYTES[:2])
_ORDER = {"type": "string", "enum": list(ORDERS), "default": ORDERS[0],
          "description": "history and sessions views: asc (oldest first, the default) or desc "
                         "(newest first; cursors continue in the same order)."}

EXTRA_ARGUMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "search_messages": {
        "snippet_bytes": _SNIPPET,
        "cursor": _string('Paging: "" for the first page of a paged search, then the nextCursor '
                          "of the previous page (same query, session_id, filters_json and "
                          "min_importance)."),
    },
    "read_messages": {
        "order": _ORDER,
        "snippet_bytes": _integer("sessions view: cut each representative_summary to at most "
                                  "this many UTF-8 bytes.", *SNIPPET_BYTES[:2]),
    },
}
EXTRA_DESCRIPTIONS = {
    "search_messages": (' filters_json also takes "after" / "before" (epoch ms or ISO-8601 with '
                        'a timezone; created_at >= after and < before) and "roles" '
                        '(user/assistant/system).'),
    "read_messages": " order=desc gives the newest first (history: the last messages of a session).",
}


def extend(specs: tuple[ToolSpec, ...]) -> tuple[ToolSpec, ...]:
    """The specs with their extra arguments and description sentences (new objects: the
    contract's specs are not changed)."""
    out = []
    for spec in specs:
        extra = EXTRA_ARGUMENTS.get(spec.name)
        if extra is None:
            out.append(spec)
            continue
        schema = dict(spec.input_schema)
        schema["properties"] = {**spec.input_schema["properties"], **extra}
        out.append(dataclasses.replace(spec, input_schema=schema,
                                       description=spec.description + EXTRA_DESCRIPTIONS[spec.name]))
    return tuple(out)

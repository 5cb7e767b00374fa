"""Tool calls over a MemoryStore as every MCP server of convmem runs them, without the MCP SDK:
the server's name and instructions, the wire form of each tool and of a tool result, and where a
call runs (`ToolCalls`). The SDK's server (app.py) and the SDK-free stdio server (fast.py) share it.

Where tool calls run: a read whose cost is small by a bound computed from its arguments (see
`cheap_read`: a short search query with the default limit and no context, a content or context
view, a history page of at most 100 messages, health) runs on the event loop itself, sparing a
worker-thread round trip (~0.07 ms). Every other read (a long query: ~70 ms for 4 KB of common
terms at 100k messages; the sessions view, whose representative scan walks back through each
session), every write (fdatasync) and rebuild_index (seconds) runs in a worker thread, so the
loop keeps reading and answering other clients meanwhile. The store serialises calls with one
lock; a read that arrives while a threaded call is in flight also goes to a thread, so the loop
never waits for that lock.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio.to_thread

from convmem.errors import INTERNAL_ERROR, VALIDATION_ERROR
from convmem.tools import CONTRACT, ToolCatalog, ToolOutcome, ToolSpec, error_outcome, run_tool

logger = logging.getLogger("convmem.server.app")

SERVER_NAME = "convmem"
# What a host shows the model about the server as a whole. Static text (never stored content);
# a test checks that every tool and argument it names exists in tools/list.
INSTRUCTIONS = (
    "Conversation memory that outlives the conversation. Save what is worth remembering with "
    "write_message (one session_id per conversation; metadata_json adds tags, memory_kind, "
    "memory_tier and importance). Find it again with search_messages: any query word matches, "
    "best match first; filters_json narrows by kind, tier or tag. read_messages pages through "
    "one session (view=history with session_id), lists the sessions (view=sessions), reads a "
    "long message in parts (view=content) or shows a message with its neighbours and relations "
    "(view=context). update_message changes a message and delete_message removes it; "
    "get_system_health and rebuild_index are for maintenance. Every result is one JSON text; an "
    'error is {"status":"ERROR","error":{"code","message"}}, and a VALIDATION_ERROR names the '
    "argument at fault."
)

# The protocol versions a client can reach with `initialize` (the SDK's
# mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS; a test checks they are the same), oldest first.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def tool_wire(spec: ToolSpec) -> dict[str, Any]:
    """One tools/list entry as the SDK writes it on a handshake-era connection (its per-version
    result models put the keys in this order and leave out a hint that is None)."""
    annotations: dict[str, Any] = {"readOnlyHint": not spec.writes}
    if spec.writes:
        annotations = {"destructiveHint": spec.destructive, "readOnlyHint": False}
    return {"annotations": annotations, "description": spec.description, "inputSchema": spec.input_schema,
            "name": spec.name}


def plain_result(outcome: ToolOutcome) -> dict[str, Any]:
    """The wire dict of a tools/call result on a handshake-era connection."""
    return {"content": [{"text": outcome.text, "type": "text"}], "isError": outcome.is_error}


# Bounds under which a read runs on the event loop. Search costs grow with the number of query
# terms (each term's postings are walked): at 100k messages 64 bytes of the most common words
# (18 terms) take ~4 ms, 4 KB (670 terms) ~70 ms. Results are bounded by the 8 MiB response
# budget whatever the arguments.
LOOP_QUERY_BYTES = 64
LOOP_SEARCH_LIMIT = 20  # the default
LOOP_HISTORY_LIMIT = 100  # the default
_LOOP_VIEWS = frozenset({"content", "context"})  # at most 64 KiB / 50 messages


def _small_int(value: object, default: int, bound: int) -> bool:
    if value is None:
        return default <= bound
    return type(value) is int and value <= bound


def cheap_read(name: str, arguments: Mapping[str, Any] | None) -> bool:
    """Whether read tool `name` is cheap enough for the event loop, judged from its arguments
    alone (anything unexpected counts as not cheap: it then costs one thread round trip)."""
    if name == "get_system_health":
        return True
    args: Mapping[str, Any] = arguments if arguments is not None else {}
    if not isinstance(args, Mapping):
        return False
    if name == "search_messages":
        query = args.get("query")
        return (
            isinstance(query, str)
            and len(query) <= LOOP_QUERY_BYTES
            and len(query.encode("utf-8", "surrogatepass")) <= LOOP_QUERY_BYTES
            and _small_int(args.get("limit"), 20, LOOP_SEARCH_LIMIT)
            and _small_int(args.get("context_size"), 0, 0)
        )
    if name == "read_messages":
        view = args.get("view")
        if view is None or view == "history":
            return _small_int(args.get("limit"), 100, LOOP_HISTORY_LIMIT)
        return isinstance(view, str) and view in _LOOP_VIEWS
    return False


class ToolCalls:
    """Runs tool calls on the store: cheap reads on the event loop while no call is in a worker
    thread, everything else in worker threads (see the module docstring)."""

    def __init__(self, store: Any, catalog: ToolCatalog = CONTRACT) -> None:
        self._store = store
        self._catalog = catalog
        self._threaded = 0  # calls handed to worker threads and not finished yet

    def _owns_store(self) -> bool:
        """A store relayed to another process's owner (convmem/owner) waits on that process,
        which may be busy (a rebuild): then every call runs in a thread."""
        return getattr(self._store, "is_owner", True)

    async def run(self, name: str, arguments: Mapping[str, Any] | None, may_write: bool = True) -> ToolOutcome:
        """The outcome of one tools/call; never raises (failures become INTERNAL_ERROR).
        `may_write` is False for a caller that authenticated with a read-only token."""
        try:
            catalog = self._catalog
            read_only = name in catalog.read_names
            if name in catalog.by_name and not read_only and not may_write:
                return error_outcome(VALIDATION_ERROR, f"{name} needs a write token; this token may only read")
            if read_only and not self._threaded and self._owns_store() and cheap_read(name, arguments):
                return run_tool(self._store, name, arguments, catalog)
            self._threaded += 1
            try:
                return await anyio.to_thread.run_sync(run_tool, self._store, name, arguments, catalog)
            finally:
                self._threaded -= 1
        except Exception:
            logger.exception("tools/call failed unexpectedly")
            return error_outcome(INTERNAL_ERROR, "internal error")

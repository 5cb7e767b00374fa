"""The MCP server object: tools/list and tools/call over a MemoryStore, transport-agnostic.

Where tool calls run: a read whose cost is small by a bound computed from its arguments (see
`cheap_read`: a short search query with the default limit and no context, a content or context
view, a history page of at most 100 messages, health) runs on the event loop itself, sparing a
worker-thread round trip (~0.07 ms). Every other read (a long query: ~70 ms for 4 KB of common
terms at 100k messages; the sessions view, whose representative scan walks back through each
session), every write (fdatasync) and rebuild_index (seconds) runs in a worker thread, so the
loop keeps reading and answering other clients meanwhile. The store serialises calls with one
lock; a read that arrives while a threaded call is in flight also goes to a thread, so the loop
never waits for that lock.

How a tools/call answer is built: on handshake-era connections (protocol versions up to
2025-11-25, what hosts use with `initialize`) a server middleware answers well-formed calls with
the result dict directly, skipping the SDK's request-params and result model round trips; the
dict is the one the SDK's own serialisation produces (checked against it at import). Anything
else (2026-07-28 connections, calls carrying `_meta` or other fields, malformed params) takes the
SDK's ordinary path through `on_call_tool`.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import anyio.to_thread
import mcp.types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from convmem.errors import INTERNAL_ERROR, VALIDATION_ERROR
from convmem.tools import CONTRACT, ToolCatalog, ToolOutcome, ToolSpec, error_outcome, run_tool

from .tokens import WRITE_SCOPE

logger = logging.getLogger(__name__)

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

def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=not spec.writes,
            destructive_hint=spec.destructive if spec.writes else None,
        ),
    )


def _may_write(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the caller may use write tools: always, unless it authenticated with a read token.

    The HTTP request of this very message is read first (a session's task may have been started
    under another request's context); the auth context variable is the fallback.
    """
    scope = getattr(ctx.request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    token = user.access_token if isinstance(user, AuthenticatedUser) else get_access_token()
    return token is None or WRITE_SCOPE in token.scopes


def _result(outcome: ToolOutcome) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=outcome.text)], is_error=outcome.is_error)


def _plain_result(outcome: ToolOutcome) -> dict[str, Any]:
    """The wire dict of `_result(outcome)` on a handshake-era connection, built directly."""
    return {"content": [{"text": outcome.text, "type": "text"}], "isError": outcome.is_error}


def _versions_answered_plainly() -> frozenset[str]:
    """Handshake-era protocol versions whose tools/call result, as the SDK serialises it (dump,
    then the version's result surface), is exactly `_plain_result`, key order included."""
    same = set()
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        for outcome in (ToolOutcome('{"status":"OK"}', False), ToolOutcome('{"status":"ERROR"}', True)):
            dumped = _result(outcome).model_dump(by_alias=True, mode="json", exclude_none=True)
            sdk = serialize_server_result("tools/call", version, dumped)
            if json.dumps(sdk) != json.dumps(_plain_result(outcome)):
                break
        else:
            same.add(version)
    return frozenset(same)


_PLAIN_VERSIONS = _versions_answered_plainly()
_PLAIN_PARAMS = frozenset({"name", "arguments"})


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

    async def run(self, ctx: ServerRequestContext[Any, Any], name: str, arguments: Mapping[str, Any] | None) -> ToolOutcome:
        """The outcome of one tools/call; never raises (failures become INTERNAL_ERROR)."""
        try:
            catalog = self._catalog
            read_only = name in catalog.read_names
            if name in catalog.by_name and not read_only and not _may_write(ctx):
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

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Answers a plain tools/call of an initialized handshake-era connection without the SDK's
        params and result models; every other message goes down the SDK's chain unchanged."""
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and ctx.protocol_version in _PLAIN_VERSIONS
            and ctx.session.client_params is not None  # `initialize` has been answered
            and isinstance(params, dict)
            and params.keys() <= _PLAIN_PARAMS
        ):
            name, arguments = params.get("name"), params.get("arguments")
            if isinstance(name, str) and (arguments is None or isinstance(arguments, dict)):
                return _plain_result(await self.run(ctx, name, arguments))
        return await call_next(ctx)


def build_server(store: Any, version: str, catalog: ToolCatalog = CONTRACT) -> Server[Any]:
    """A low-level MCP server whose tools (the contract's seven unless `catalog` has toolsets)
    call `store` (a MemoryStore)."""
    calls = ToolCalls(store, catalog)
    tools = [_tool(spec) for spec in catalog.specs]
    read_tools = [tool for tool in tools if tool.name in catalog.read_names]

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools if _may_write(ctx) else read_tools)

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return _result(await calls.run(ctx, params.name, params.arguments))

    server = Server(
        SERVER_NAME,
        version=version,
        instructions=INSTRUCTIONS,
        # Lets the SDK check Mcp-Param headers without running tools/list for every HTTP call.
        get_tool_input_schema=lambda name: catalog.by_name[name].input_schema if name in catalog.by_name else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    # After the SDK's own middleware (OpenTelemetry spans), so tracing still sees every call.
    server.middleware.append(calls.middleware)
    return server

"""The MCP SDK's server object: tools/list and tools/call over a MemoryStore, transport-agnostic.

Where a call runs and what it answers is calls.py (shared with the SDK-free stdio server).

How a tools/call answer is built: on handshake-era connections (protocol versions up to
2025-11-25, what hosts use with `initialize`) a server middleware answers well-formed calls with
the result dict directly, skipping the SDK's request-params and result model round trips; the
dict is the one the SDK's own serialisation produces (checked against it at import). Anything
else (2026-07-28 connections, calls carrying `_meta` or other fields, malformed params) takes the
SDK's ordinary path through `on_call_tool`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp.types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from convmem.tools import CONTRACT, ToolCatalog, ToolOutcome, ToolSpec

from .calls import INSTRUCTIONS, LOOP_QUERY_BYTES, SERVER_NAME, cheap_read, plain_result
from .calls import ToolCalls as SharedToolCalls
from .tokens import WRITE_SCOPE

__all__ = ["INSTRUCTIONS", "LOOP_QUERY_BYTES", "SERVER_NAME", "ToolCalls", "build_server", "cheap_read"]


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


_plain_result = plain_result  # the wire dict of `_result(outcome)` on a handshake-era connection


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


class ToolCalls(SharedToolCalls):
    """calls.ToolCalls, with the caller's write permission read from the SDK's request context,
    and the middleware that answers plain calls directly."""

    async def run_in(self, ctx: ServerRequestContext[Any, Any], name: str, arguments: Mapping[str, Any] | None) -> ToolOutcome:
        return await self.run(name, arguments, _may_write(ctx))

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
                return _plain_result(await self.run_in(ctx, name, arguments))
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
        return _result(await calls.run_in(ctx, params.name, params.arguments))

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

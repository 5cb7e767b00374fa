"""The MCP server object: tools/list and tools/call over a MemoryStore, transport-agnostic."""
from __future__ import annotations

import logging
from typing import Any

import anyio.to_thread
import mcp.types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from convmem.errors import INTERNAL_ERROR, VALIDATION_ERROR
from convmem.tools import READ_TOOL_NAMES, TOOL_SPECS, TOOLS_BY_NAME, ToolOutcome, error_outcome, run_tool

from .tokens import WRITE_SCOPE

logger = logging.getLogger(__name__)

SERVER_NAME = "convmem"
INSTRUCTIONS = (
    "Conversation memory. Store messages with write_message, find them with search_messages, "
    "page through a session or the session list with read_messages. Every result is a JSON text."
)

_TOOLS = [
    types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=not spec.writes,
            destructive_hint=spec.destructive if spec.writes else None,
        ),
    )
    for spec in TOOL_SPECS
]


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


def build_server(store: Any, version: str) -> Server[Any]:
    """A low-level MCP server whose seven tools call `store` (a MemoryStore) in worker threads."""

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if _may_write(ctx):
            return types.ListToolsResult(tools=_TOOLS)
        return types.ListToolsResult(tools=[tool for tool in _TOOLS if tool.name in READ_TOOL_NAMES])

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            if params.name in TOOLS_BY_NAME and params.name not in READ_TOOL_NAMES and not _may_write(ctx):
                return _result(error_outcome(VALIDATION_ERROR, f"{params.name} needs a write token; this token may only read"))
            # The store is synchronous and serialises calls itself; a worker thread keeps the event
            # loop free to read, queue and answer other requests meanwhile.
            outcome = await anyio.to_thread.run_sync(run_tool, store, params.name, params.arguments)
        except Exception:
            logger.exception("tools/call failed unexpectedly")
            outcome = error_outcome(INTERNAL_ERROR, "internal error")
        return _result(outcome)

    return Server(
        SERVER_NAME,
        version=version,
        instructions=INSTRUCTIONS,
        # Lets the SDK check Mcp-Param headers without running tools/list for every HTTP call.
        get_tool_input_schema=lambda name: TOOLS_BY_NAME[name].input_schema if name in TOOLS_BY_NAME else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )

"""MCP over stdio: the process's stdin/stdout carry JSON-RPC lines, nothing else."""
from __future__ import annotations

import json
from types import TracebackType
from typing import Any

import anyio
import mcp.types as types
import pydantic
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .app import build_server


def _recover_lone_surrogates(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """Turn a line the SDK refused as invalid JSON back into a message if only strictness failed.

    The SDK's parser rejects `"\\ud800"` (a lone surrogate escape, which RFC 8259 permits) and
    then drops the line without an answer, so the caller would wait forever. Python's json module
    accepts it; the tool layer then answers VALIDATION_ERROR like for any other bad string.
    """
    if not isinstance(item, pydantic.ValidationError):
        return item
    errors = item.errors()
    if len(errors) != 1 or errors[0]["type"] != "json_invalid" or not isinstance(errors[0].get("input"), str):
        return item
    try:
        message = types.jsonrpc_message_adapter.validate_python(json.loads(errors[0]["input"]), by_name=False)
    except (ValueError, RecursionError, pydantic.ValidationError):
        return item  # not JSON-RPC after all: the SDK logs and drops it
    return SessionMessage(message)


class _LenientReadStream:
    """The SDK's stdio read stream with `_recover_lone_surrogates` applied to each item."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return _recover_lone_surrogates(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _LenientReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _LenientReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def serve_stdio(store: Any, version: str) -> None:
    """Serve until stdin closes. While serving, the SDK points fd 1 at stderr, so stray output
    from any library cannot corrupt the JSON-RPC stream."""
    server = build_server(store, version)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(_LenientReadStream(read_stream), write_stream, server.create_initialization_options())

"""Transports (stdio, Streamable HTTP, legacy HTTP+SSE): the only place that speaks MCP.

The names below are imported when first asked for (PEP 562): a stdio server, which a host spawns
for every session, then never imports the HTTP stack (uvicorn, starlette, h11) before its first
answer, nor the MCP SDK when the session stays on what server/fast.py answers."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "build_server": "app",
    "InsecureBindError": "http", "build_http_app": "http", "check_bind": "http",
    "is_loopback": "http", "serve_http": "http",
    "build_sse_app": "sse", "serve_sse": "sse",
    "serve_stdio": "stdio", "serve_stdio_fast": "fast",
    "StaticTokenVerifier": "tokens", "Token": "tokens", "TokensFileError": "tokens",
    "load_tokens": "tokens", "parse_tokens": "tokens",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # (asked for once)
    return value

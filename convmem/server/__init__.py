"""Transports (stdio, Streamable HTTP, legacy HTTP+SSE): the only place that speaks MCP."""
from __future__ import annotations

from .app import build_server
from .http import InsecureBindError, build_http_app, check_bind, is_loopback, serve_http
from .sse import build_sse_app, serve_sse
from .stdio import serve_stdio
from .tokens import StaticTokenVerifier, Token, TokensFileError, load_tokens, parse_tokens

__all__ = [
    "InsecureBindError",
    "StaticTokenVerifier",
    "Token",
    "TokensFileError",
    "build_http_app",
    "build_sse_app",
    "check_bind",
    "build_server",
    "is_loopback",
    "load_tokens",
    "parse_tokens",
    "serve_http",
    "serve_sse",
    "serve_stdio",
]

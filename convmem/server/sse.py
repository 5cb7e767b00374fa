"""MCP over the legacy HTTP+SSE transport (protocol 2024-11-05), as TelosDB and older hosts use it.

`GET /sse` opens the event stream; its first event (`endpoint`) announces where to post:
`/messages?session_id=<hex>`. Each `POST /messages?session_id=...` carries one JSON-RPC message
(answered 202 Accepted); the answers travel back as `message` events on the stream. The SDK's
`SseServerTransport` does the framing and binds each session to the credential that opened it.

Everything around it is the Streamable HTTP server's (server/http.py), reused rather than
re-implemented: the bind check (no non-loopback address without tokens), bearer tokens with read
and write scopes (a read token lists and calls only read tools: app.py reads the token of the
POST that carried each call), DNS-rebinding protection (Host and Origin) on loopback, the
connection cap and deadlines (`guarded_protocol`), the bound on request bodies held at once
(`BodyBudget`) and per request (MAX_REQUEST_BODY, 413), SIGTERM's bounded graceful shutdown
(`serve_asgi`). What SSE adds: a cap on the event streams open per token (`StreamCap`), since each
holds a connection and a server task for as long as the client keeps it, and the end of a stream
nothing was posted to for SESSION_IDLE_TIMEOUT (as the SDK does for Streamable HTTP sessions).

A client-side limit to know of: the SDK's SSE client (mcp.client.sse) refuses events over 1 MiB,
and every answer is an event here (no JSON response mode as on /mcp), so a read of a large page
may fail in that client; page with smaller limits, or use Streamable HTTP.
"""
from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

import anyio
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.sse import SseServerTransport
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from convmem.tools import CONTRACT, ToolCatalog

from . import http
from .app import build_server
from .http import (MAX_SESSIONS_PER_PRINCIPAL, BodyBudget, SessionGuard, _json_error,
                   _transport_security, _url_host, bind_socket, check_bind,
                   rate_limit_client_triggered_logs, serve_asgi, _LOG_LIMIT)
from .limits import MAX_REQUEST_BODY
from .tokens import StaticTokenVerifier, Token

logger = logging.getLogger(__name__)

SSE_PATH = "/sse"
MESSAGES_PATH = "/messages"
DEFAULT_PORT = 3001  # TelosDB's
_SESSION_ID = re.compile(rb"session_id=([0-9a-f]{32})")


class StreamCap:
    """ASGI middleware around GET /sse, inside the bearer authentication: at most
    `per_principal` event streams open at once per token (without tokens: for everyone)."""

    def __init__(self, app: Any, per_principal: int = MAX_SESSIONS_PER_PRINCIPAL) -> None:
        self.app = app
        self.per_principal = per_principal
        self.open: Counter[str | None] = Counter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        principal = SessionGuard.principal(scope)
        if self.open[principal] >= self.per_principal:
            logger.warning("refusing an event stream: this token has %d open", self.per_principal)
            await _json_error(429, f"too many open event streams for this token ({self.per_principal}): "
                                   "close one first", headers={"retry-after": "60"})(scope, receive, send)
            return
        self.open[principal] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open[principal] -= 1
            if not self.open[principal]:
                del self.open[principal]


class _Asgi:
    """An ASGI callable as a Starlette endpoint (a bare function or bound method would be taken for
    a request handler)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class _Stream:
    """The GET /sse endpoint (an ASGI app): one MCP session for as long as the stream is open, or
    until no message was posted to it for `idle_timeout` seconds (as Streamable HTTP's sessions)."""

    def __init__(self, server: Any, transport: SseServerTransport, idle_timeout: float) -> None:
        self.server = server
        self.transport = transport
        self.idle_timeout = idle_timeout
        self.last_post: dict[str, float] = {}  # session id (hex) -> when it was last posted to

    def posted(self, scope: Any) -> None:
        """Note a POST naming a session (the stream's idle clock starts again)."""
        sid = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_id", [""])[0]
        try:  # the SDK reads the id as a UUID (any case, hyphens allowed): so must its idle clock
            sid = UUID(hex=sid).hex
        except ValueError:
            return
        if sid in self.last_post:
            self.last_post[sid] = time.monotonic()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        connected = False
        started = ended = False
        session: list[str] = []

        async def tracking_send(message: Any) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body":
                if not session:  # the first event announces the session's endpoint
                    found = _SESSION_ID.search(message.get("body", b""))
                    if found:
                        session.append(found.group(1).decode("ascii"))
                        self.last_post[session[0]] = time.monotonic()
                ended = not message.get("more_body", False)
            await send(message)

        async def idle_watch(scope_to_cancel: anyio.CancelScope) -> None:
            while True:
                await anyio.sleep(max(0.05, min(self.idle_timeout / 4, 30.0)))
                if session and time.monotonic() - self.last_post.get(session[0], 0.0) > self.idle_timeout:
                    logger.info("closing an event stream: no message posted for %.0f s", self.idle_timeout)
                    scope_to_cancel.cancel()
                    return

        try:
            async with self.transport.connect_sse(scope, receive, tracking_send) as (read, write):
                connected = True
                async with anyio.create_task_group() as tg:
                    tg.start_soon(idle_watch, tg.cancel_scope)
                    await self.server.run(read, write, self.server.create_initialization_options())
                    tg.cancel_scope.cancel()
                await write.aclose()  # (ends the SDK's event writer, and so the stream)
        except ValueError:
            if connected:
                raise
            # The SDK refused the request (DNS rebinding: a foreign Host or Origin) and has
            # answered it already; it raises to end the handler.
        finally:
            if session:
                self.last_post.pop(session[0], None)
        if started and not ended:
            # A stream ended by the server's shutdown (SIGTERM) is left open by the SDK's event
            # source; end the response, so the client sees the end of the stream (and uvicorn
            # does not report an incomplete response).
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def build_sse_app(store: Any, version: str, host: str, port: int, tokens: list[Token] | None,
                  catalog: ToolCatalog = CONTRACT) -> Any:
    """The ASGI app: GET /sse and POST /messages behind the bearer authentication (with tokens),
    wrapped in BodyBudget."""
    check_bind(host, tokens)
    server = build_server(store, version, catalog)
    transport = SseServerTransport(MESSAGES_PATH, security_settings=_transport_security(host),
                                   max_request_body_size=MAX_REQUEST_BODY)
    # (the limits are read from http's module when the app is built: tests lower them there)
    streams = _Stream(server, transport, http.SESSION_IDLE_TIMEOUT)
    stream: Any = StreamCap(streams, http.MAX_SESSIONS_PER_PRINCIPAL)

    async def post_message(scope: Any, receive: Any, send: Any) -> None:
        streams.posted(scope)
        try:
            await transport.handle_post_message(scope, receive, send)
        except ClientDisconnect:
            # The body ended early: the client went away mid-body (there is no one to answer),
            # or BodyBudget cut it off (it answers 503 itself once this returns). The SDK lets
            # the exception out, which Starlette would turn into a 500 and a logged traceback.
            logger.debug("a POST ended before its body did")

    post: Any = _Asgi(post_message)
    middleware: list[Middleware] = []
    if tokens:
        middleware = [
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(StaticTokenVerifier(tokens))),
            Middleware(AuthContextMiddleware),
        ]
        stream = RequireAuthMiddleware(stream, [])
        post = RequireAuthMiddleware(post, [])
    routes = [Route(SSE_PATH, endpoint=stream, methods=["GET"]),
              Route(MESSAGES_PATH, endpoint=post, methods=["POST"])]
    return BodyBudget(Starlette(routes=routes, middleware=middleware), http.MAX_BUFFERED_BODIES)


def serve_sse(
    store: Any,
    version: str,
    host: str,
    port: int,
    tokens: list[Token] | None,
    log_level: str,
    announce: Callable[[str], None],
    catalog: ToolCatalog = CONTRACT,
) -> int | None:
    """Serve until SIGINT/SIGTERM (as serve_http; returns the signal that stopped it).
    `announce` receives the stream's URL."""
    check_bind(host, tokens)
    rate_limit_client_triggered_logs()
    sse_log = logging.getLogger("mcp.server.sse")  # (bad session ids: a client can make it write)
    if _LOG_LIMIT not in sse_log.filters:
        sse_log.addFilter(_LOG_LIMIT)
    sock = bind_socket(host, port)
    actual_port = sock.getsockname()[1]
    app = build_sse_app(store, version, host, actual_port, tokens, catalog)
    return serve_asgi(app, sock, log_level, lambda: announce(f"http://{_url_host(host)}:{actual_port}{SSE_PATH}"))

"""MCP over Streamable HTTP at /mcp, served by uvicorn, with optional bearer tokens.

Limits (docs/SERVER.md lists them): uvicorn bounds a request head's size and times out idle
keep-alive connections, but has no deadline for a request head or body, no connection cap (its
limit_concurrency answers 503 only once a request head is complete, after the descriptor is
taken) and waits forever for a client that does not read. `guarded_protocol` adds those at the
protocol level; `BodyBudget` bounds the request bodies held at once; `SessionGuard` bounds
MCP sessions per token and keeps each session to the token that opened it.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.middleware import Middleware
from starlette.responses import Response
from uvicorn.protocols.http.h11_impl import H11Protocol

from convmem.tools import CONTRACT, ToolCatalog

from .app import build_server
from .limits import MAX_REQUEST_BODY
from .tokens import StaticTokenVerifier, Token

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"


# --- limits ------------------------------------------------------------------------------------

HEADER_TIMEOUT = 10.0  # seconds from connect (or the end of the previous response) to a complete request head
BODY_TIMEOUT = 60.0  # seconds from the request head to the end of its body
IDLE_TIMEOUT = 15.0  # seconds a keep-alive connection may sit idle between requests (uvicorn's timeout_keep_alive)
WRITE_STALL_TIMEOUT = 30.0  # seconds a response may wait for a client that does not read it
MAX_HEADER_BYTES = 16 * 1024  # h11's bound on a request head (uvicorn's default, set explicitly)
MAX_BUFFERED_BODIES = 2 * MAX_REQUEST_BODY  # request body bytes held at once, over all requests
MAX_SESSIONS_PER_PRINCIPAL = 64  # open MCP sessions per token (or for everyone, without tokens)
SESSION_IDLE_TIMEOUT = 30 * 60.0  # seconds without a request before a session is closed (the SDK's default)
SHUTDOWN_GRACE = 5.0  # seconds SIGTERM waits for requests in progress before cancelling them
FORCE_EXIT_AFTER = 15.0  # seconds after SIGTERM after which the process exits whatever is running
MAX_CONNECTIONS_CEILING = 1000
# asyncio accepts up to `backlog` connections per wake-up before any of them reaches the protocol
# (where the cap is applied), and an aborted connection's descriptor closes one loop iteration
# later: the accept burst is kept small and the descriptors reserved above the cap cover a few
# bursts plus the store, logs and the listening socket. The kernel's listen queue stays long.
ACCEPT_BURST = 32
LISTEN_BACKLOG = 2048
_FD_RESERVE_MIN = 64 + 3 * ACCEPT_BURST


def connection_cap(soft_limit: int | None = None) -> int:
    """Open connections served at once: below the descriptor limit (RLIMIT_NOFILE), so accept()
    never fails for want of a descriptor, and at most MAX_CONNECTIONS_CEILING."""
    if soft_limit is None:
        try:
            import resource

            soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (ImportError, OSError, ValueError):
            soft_limit = 1024
        if soft_limit < 0:  # RLIM_INFINITY
            soft_limit = 1 << 20
    reserve = max(_FD_RESERVE_MIN, soft_limit // 4)
    return max(8, min(MAX_CONNECTIONS_CEILING, soft_limit - reserve))


class RateLimitedLog(logging.Filter):
    """A logging filter letting through `burst` records per `interval` seconds per message
    template; the number suppressed is appended to the next record let through."""

    def __init__(self, burst: int = 5, interval: float = 10.0) -> None:
        super().__init__()
        self.burst = burst
        self.interval = interval
        self._windows: dict[tuple[str, Any], list[float | int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg if isinstance(record.msg, str) else type(record.msg))
        now = time.monotonic()
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.interval:
            suppressed = int(window[2]) if window is not None else 0
            self._windows[key] = [now, 1, 0]
            if len(self._windows) > 256:
                self._windows = {k: v for k, v in self._windows.items() if now - v[0] < self.interval}
            if suppressed:
                record.msg = f"{record.msg} ({suppressed} similar messages suppressed)"
            return True
        if window[1] < self.burst:
            window[1] += 1
            return True
        window[2] += 1
        return False


_LOG_LIMIT = RateLimitedLog()
# Loggers a client can make write: uvicorn's per-connection warnings, asyncio's accept() errors,
# the SDK's session refusals and this module's own refusals.
_RATE_LIMITED_LOGGERS = ("uvicorn.error", "asyncio", "mcp.server.streamable_http_manager", "mcp.server.streamable_http", __name__)


def rate_limit_client_triggered_logs() -> None:
    for name in _RATE_LIMITED_LOGGERS:
        log = logging.getLogger(name)
        if _LOG_LIMIT not in log.filters:
            log.addFilter(_LOG_LIMIT)


def _json_error(status: int, message: str, code: int = INVALID_REQUEST, headers: dict[str, str] | None = None) -> Response:
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


class ConnectionGuard:
    """Connection-level limits shared by every connection of one server (see `guarded_protocol`)."""

    def __init__(
        self,
        max_connections: int,
        header_timeout: float = HEADER_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
        write_stall_timeout: float = WRITE_STALL_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.body_timeout = body_timeout
        self.write_stall_timeout = write_stall_timeout
        self.open: set[Any] = set()
        # Connections waiting for a request head (fresh or idle between requests), oldest first:
        # the first to go when a new connection needs a slot.
        self.waiting: dict[Any, None] = {}
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's h11 protocol with what uvicorn lacks: a connection cap, a deadline for the
    request head (uvicorn has none: a connection that never completes its headers lives
    forever), a deadline for the body, a bound on how long a response may wait for a client
    that does not read, and no waiting for the unread body of a request already answered."""

    class GuardedH11Protocol(H11Protocol):
        _admitted = False
        _deadline: asyncio.TimerHandle | None = None
        _phase = ""
        _write_stall: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(guard.open) >= guard.max_connections and not self._evict_one():
                guard.refused += 1
                logger.warning(
                    "refusing a connection: %d connections are open (the cap, from RLIMIT_NOFILE)", guard.max_connections
                )
                transport.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\nretry-after: 1\r\n"
                    b"content-type: text/plain; charset=utf-8\r\ncontent-length: 20\r\n\r\ntoo many connections"
                )
                transport.close()
                return
            self._admitted = True
            guard.open.add(self)
            super().connection_made(transport)
            self._track()

        def _evict_one(self) -> bool:
            for victim in guard.waiting:
                guard.evicted += 1
                victim._close_waiting()
                return True
            return False

        def _close_waiting(self) -> None:
            guard.waiting.pop(self, None)
            guard.open.discard(self)
            self._set_deadline("", None)
            self.transport.abort()

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._admitted:
                return
            guard.open.discard(self)
            guard.waiting.pop(self, None)
            self._set_deadline("", None)
            if self._write_stall is not None:
                self._write_stall.cancel()
                self._write_stall = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            # A request answered before its body was read (401, 413, ...): the rest of the body
            # is not wanted, so the connection ends instead of waiting for it.
            if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
                self.transport.close()
            super().on_response_complete()
            self._track()

        def _track(self) -> None:
            """Arm the deadline of the phase the connection is in."""
            if self.transport is None or self.transport.is_closing():
                return
            state = self.conn.their_state
            if state is h11.IDLE and (self.cycle is None or self.cycle.response_complete):
                guard.waiting.setdefault(self, None)
                if self.conn.trailing_data[0]:  # part of a request head is in
                    self._set_deadline("head", guard.header_timeout)
                else:
                    self._set_deadline("idle", guard.idle_timeout)
                return
            guard.waiting.pop(self, None)
            if state is h11.SEND_BODY:
                self._set_deadline("body", guard.body_timeout)
            else:  # the request is in; the app answers in its own time
                self._set_deadline("", None)

        def _set_deadline(self, phase: str, seconds: float | None) -> None:
            if phase == self._phase and (self._deadline is not None) == (seconds is not None):
                return
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._phase = phase
            if seconds is not None:
                self._deadline = self.loop.call_later(seconds, self._expired, phase)

        def _expired(self, phase: str) -> None:
            self._deadline = None
            if self.transport is None or self.transport.is_closing():
                return
            guard.waiting.pop(self, None)
            if phase != "idle":
                guard.timed_out += 1
                logger.warning("closing a connection: its request %s did not arrive in time", phase)
            if phase != "idle" and (self.cycle is None or self.cycle.response_complete or not self.cycle.response_started):
                self.transport.write(
                    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
                )
            self.transport.close()
            # close() waits for the write buffer to drain; a client that reads nothing must not
            # keep the descriptor.
            self.loop.call_later(1.0, self.transport.abort)

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._write_stall is None:
                self._check_progress(None)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._write_stall is not None:
                self._write_stall.cancel()
                self._write_stall = None

        def _check_progress(self, before: int | None) -> None:
            """While writing is paused: abort if the client took nothing of the response for
            WRITE_STALL_TIMEOUT (a slow reader that makes progress is left alone)."""
            self._write_stall = None
            if self.transport is None:
                return
            pending = self.transport.get_write_buffer_size()
            if before is not None and pending >= before:
                guard.timed_out += 1
                logger.warning(
                    "closing a connection: the client has not read its response for %.0f s", guard.write_stall_timeout
                )
                self.transport.abort()
                return
            self._write_stall = self.loop.call_later(guard.write_stall_timeout, self._check_progress, pending)

        def timeout_keep_alive_handler(self) -> None:
            guard.waiting.pop(self, None)
            super().timeout_keep_alive_handler()
            if self.transport is not None:
                self.loop.call_later(1.0, self.transport.abort)

    return GuardedH11Protocol


class BodyBudget:
    """ASGI middleware bounding the request body bytes held at once over all requests.

    A request declaring a Content-Length reserves it before the app runs and gets 503 (with
    Retry-After) if the reservation does not fit; a chunked body is counted as it arrives and cut
    off (503) once it does not fit. Reservations end with the request. One body may be as large
    as MAX_REQUEST_BODY (larger ones get the SDK's 413), so `limit` must be at least that.
    """

    def __init__(self, app: Any, limit: int = MAX_BUFFERED_BODIES) -> None:
        self.app = app
        self.limit = limit
        self.held = 0
        self.refused = 0

    def _refusal(self) -> Response:
        self.refused += 1
        logger.warning("refusing a request: %d bytes of request bodies are being received already", self.held)
        return _json_error(503, "server busy: too many large requests at once, retry shortly", INTERNAL_ERROR, {"retry-after": "1"})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        declared: int | None = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
                break
        if declared is not None and declared > MAX_REQUEST_BODY:
            await self.app(scope, receive, send)  # the SDK answers 413 without reading it
            return
        reserved = declared or 0
        if self.held + reserved > self.limit:
            await self._refusal()(scope, receive, send)
            return
        self.held += reserved
        counted = 0  # bytes of a body without Content-Length counted so far
        cut_off = False
        started = False

        async def counting_receive() -> Any:
            nonlocal counted, cut_off
            message = await receive()
            if declared is None and message["type"] == "http.request":
                size = len(message.get("body", b""))
                if self.held + size > self.limit:
                    cut_off = True
                    return {"type": "http.disconnect"}
                self.held += size
                counted += size
            return message

        async def watching_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
            if cut_off and not started:
                await self._refusal()(scope, receive, send)
        finally:
            self.held -= reserved + counted


class SessionGuard:
    """ASGI middleware, inside the bearer authentication and before the SDK's session manager:
    at most `per_principal` open MCP sessions per token (without tokens: for everyone), and a
    session may only be used with the token that opened it.

    The SDK (2.3.0) binds sessions to the token's client_id too; this is the same check in
    convmem's own layer, so it holds whatever the SDK does. Sessions end when the SDK forgets
    them (DELETE, the idle timeout); the live set is read from the session manager (a private
    attribute of the pinned SDK). Should it be missing, a session is forgotten after a DELETE
    answered 2xx or `idle_timeout` seconds without a request, so a token is never locked out
    for good.
    """

    def __init__(
        self, app: Any, manager: Any, per_principal: int = MAX_SESSIONS_PER_PRINCIPAL, idle_timeout: float = SESSION_IDLE_TIMEOUT
    ) -> None:
        self.app = app
        self.manager = manager
        self.per_principal = per_principal
        self.idle_timeout = idle_timeout
        self.owners: dict[str, str | None] = {}
        self.last_seen: dict[str, float] = {}

    @staticmethod
    def principal(scope: Any) -> str | None:
        user = scope.get("user")
        if isinstance(user, AuthenticatedUser):
            return user.access_token.client_id
        return None

    def _forget(self, sid: str) -> None:
        self.owners.pop(sid, None)
        self.last_seen.pop(sid, None)

    def _prune(self) -> None:
        live = getattr(self.manager, "_server_instances", None)
        if isinstance(live, dict):
            gone = [sid for sid in self.owners if sid not in live]
        else:
            cutoff = time.monotonic() - self.idle_timeout
            gone = [sid for sid in self.owners if self.last_seen.get(sid, 0.0) < cutoff]
        for sid in gone:
            self._forget(sid)

    def open_sessions(self, principal: str | None) -> int:
        self._prune()
        return sum(1 for owner in self.owners.values() if owner == principal)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        if user is not None and not isinstance(user, AuthenticatedUser):
            await self.app(scope, receive, send)  # no valid token: the SDK answers 401
            return
        principal = self.principal(scope)
        session_id = None
        version = None
        for name, value in scope["headers"]:
            if name == b"mcp-session-id":
                session_id = value.decode("latin-1")
            elif name == b"mcp-protocol-version":
                version = value.decode("latin-1")
        if session_id is not None:
            if session_id in self.owners and self.owners[session_id] != principal:
                logger.warning("refusing a request for a session opened with another token")
                # Answered exactly as for a session that does not exist.
                await _json_error(404, "Session not found")(scope, receive, send)
                return
            if session_id not in self.owners:
                await self.app(scope, receive, send)
                return
            self.last_seen[session_id] = time.monotonic()
            status = 0

            async def watching_send(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await self.app(scope, receive, watching_send)
            finally:
                self.last_seen[session_id] = time.monotonic()
                if scope.get("method") == "DELETE" and 200 <= status < 300:
                    self._forget(session_id)
            return
        if scope.get("method") != "POST" or (version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS):
            # Only a POST of the handshake era opens a session (2026-07-28 requests have none).
            await self.app(scope, receive, send)
            return
        if self.open_sessions(principal) >= self.per_principal:
            logger.warning("refusing a new session: this token has %d open sessions", self.per_principal)
            await _json_error(
                429,
                f"too many open sessions for this token ({self.per_principal}): end one (HTTP DELETE) or wait "
                "for an idle one to expire",
                headers={"retry-after": "60"},
            )(scope, receive, send)
            return

        async def registering_send(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        sid = value.decode("latin-1")
                        self.owners[sid] = principal
                        self.last_seen[sid] = time.monotonic()
            await send(message)

        await self.app(scope, receive, registering_send)


class InsecureBindError(ValueError):
    """Serving a non-loopback address without tokens would expose the memory to the network."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _transport_security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for loopback binds: a web page in the user's browser must not
    reach the local server under a hostile Host name. Non-loopback binds need tokens instead."""
    if not is_loopback(host):
        return None
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    bare = host.strip("[]")
    own = f"[{bare}]" if ":" in bare else bare
    if own not in hosts:
        hosts.append(own)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in hosts],
        allowed_origins=[f"http://{h}:*" for h in hosts],
    )


def check_bind(host: str, tokens: list[Token] | None) -> None:
    if not tokens and not is_loopback(host):
        raise InsecureBindError(
            f"refusing to serve on {host} without --tokens-file: anyone who can reach the port "
            "could read and change the memory; bind to 127.0.0.1 or give a tokens file"
        )


def build_http_app(store: Any, version: str, host: str, port: int, tokens: list[Token] | None,
                   catalog: ToolCatalog = CONTRACT) -> Any:
    """The ASGI app: the SDK's Starlette app with SessionGuard inside its bearer authentication,
    wrapped in BodyBudget."""
    check_bind(host, tokens)
    server = build_server(store, version, catalog)
    auth: dict[str, Any] = {}
    if tokens:
        auth = {
            "token_verifier": StaticTokenVerifier(tokens),
            # The SDK only enforces tokens with AuthSettings present; convmem issues no tokens
            # itself, so the issuer URL is this server and no OAuth routes are added.
            "auth": AuthSettings(issuer_url=f"http://{_url_host(host)}:{port}", resource_server_url=None),
        }
    principals = len(tokens) if tokens else 1
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        max_request_body_size=MAX_REQUEST_BODY,
        session_idle_timeout=SESSION_IDLE_TIMEOUT,
        # Never reached: SessionGuard refuses a token's sessions beyond its share first.
        max_sessions=MAX_SESSIONS_PER_PRINCIPAL * principals + 1,
        transport_security=_transport_security(host),
        host=host,
        **auth,
    )
    # Appended, so it runs after the authentication middleware has set scope["user"].
    manager = server._session_manager  # type: ignore[attr-defined]
    app.user_middleware.append(
        Middleware(SessionGuard, manager=manager, per_principal=MAX_SESSIONS_PER_PRINCIPAL, idle_timeout=SESSION_IDLE_TIMEOUT)
    )
    return BodyBudget(app, MAX_BUFFERED_BODIES)


def _url_host(host: str) -> str:
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving so port 0 works and the real port can be announced."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    # Listen now: the URL is announced before uvicorn starts, and a client that connects at
    # once must wait in the backlog instead of being refused.
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server where SIGTERM always ends the process: requests in progress get
    SHUTDOWN_GRACE seconds (then they are cancelled), a second SIGTERM stops waiting at once, and
    a watchdog exits the process FORCE_EXIT_AFTER seconds after the first signal whatever still
    runs (the store's log is append-only and fsynced per write, so nothing acknowledged is lost)."""

    watchdog: threading.Timer | None = None
    stopped_by: int | None = None  # the first signal received (the caller's exit status)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        # asyncio listened with the accept burst as backlog; give the kernel queue its length back.
        for sock in sockets or []:
            sock.listen(LISTEN_BACKLOG)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.should_exit:
            self.force_exit = True
        if self.stopped_by is None:
            self.stopped_by = sig
        super().handle_exit(sig, frame)
        if self.watchdog is None:
            self.watchdog = threading.Timer(FORCE_EXIT_AFTER, _force_exit)
            self.watchdog.daemon = True
            self.watchdog.start()


def _force_exit() -> None:
    logger.error("the server did not stop within %.0f s of SIGTERM; exiting now", FORCE_EXIT_AFTER)
    logging.shutdown()
    os._exit(1)


def serve_http(
    store: Any,
    version: str,
    host: str,
    port: int,
    tokens: list[Token] | None,
    log_level: str,
    announce: Callable[[str], None],
    catalog: ToolCatalog = CONTRACT,
) -> int | None:
    """Serve until SIGINT/SIGTERM (uvicorn's graceful shutdown, bounded); returns the signal that
    stopped it (None: stopped otherwise). `announce` receives the URL."""
    check_bind(host, tokens)
    rate_limit_client_triggered_logs()
    sock = bind_socket(host, port)
    actual_port = sock.getsockname()[1]
    app = build_http_app(store, version, host, actual_port, tokens, catalog)
    return serve_asgi(app, sock, log_level, lambda: announce(f"http://{_url_host(host)}:{actual_port}{MCP_PATH}"))


def serve_asgi(app: Any, sock: socket.socket, log_level: str, announce: Callable[[], None]) -> int | None:
    """Serve an ASGI app on a bound socket with the connection limits above until SIGINT/SIGTERM
    (also the SSE transport's, server/sse.py); `announce()` once the signals are handled. Returns
    the signal that stopped it (None: stopped otherwise)."""
    guard = ConnectionGuard(connection_cap(), HEADER_TIMEOUT, BODY_TIMEOUT, WRITE_STALL_TIMEOUT, IDLE_TIMEOUT)
    # log_config=None: uvicorn's own config would send access logs to stdout.
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level=log_level.lower(),
        access_log=False,
        lifespan="on",
        http=guarded_protocol(guard),
        timeout_keep_alive=max(1, int(IDLE_TIMEOUT)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_graceful_shutdown=max(1, int(SHUTDOWN_GRACE)),
        backlog=ACCEPT_BURST,
    )
    server = _Server(config)
    # Before the URL is announced: a signal that arrives before uvicorn installs its own handlers
    # must still stop the server. uvicorn re-raises the signal that stopped it once it is done;
    # with this handler that returns here, so the caller closes the store and exits normally.
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in (signal.SIGTERM, signal.SIGINT)}
    announce()
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        if server.watchdog is not None:
            server.watchdog.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return server.stopped_by

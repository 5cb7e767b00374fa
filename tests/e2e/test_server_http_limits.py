"""HTTP under hostile clients: slow or never-finished requests, connection floods, large bodies,
session floods, a session used with another token, SIGTERM while clients hang on, loose files.

Each test starts a real `convmem serve --transport http` child; limits are lowered in the child
(a Python prelude) so the faults show within seconds. All traffic stays on loopback.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest
from e2e_helpers import ANSWER_TIMEOUT, HttpServer, run_cli

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "limits", "version": "0"}},
}
JSON_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
READ_TOKEN = "read-token-limits-0123456789"
WRITE_TOKEN = "write-token-limits-9876543210"

# Small limits, so that every deadline passes within the test.
FAST = """
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
import convmem.server.http as h
h.HEADER_TIMEOUT = 1.5
h.BODY_TIMEOUT = 2.0
h.IDLE_TIMEOUT = 2.0
h.SHUTDOWN_GRACE = 1.0
h.WRITE_STALL_TIMEOUT = 1.0
h.FORCE_EXIT_AFTER = 6.0
h.MAX_SESSIONS_PER_PRINCIPAL = 8
"""


def address(server: HttpServer) -> tuple[str, int]:
    url = urlsplit(server.url)
    return url.hostname or "127.0.0.1", url.port or 80


def partial_head(server: HttpServer) -> bytes:
    host, port = address(server)
    return f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n".encode()


def connect(server: HttpServer) -> socket.socket:
    sock = socket.create_connection(address(server), timeout=ANSWER_TIMEOUT)
    return sock


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed (s)."""
    start = time.monotonic()
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data, time.monotonic() - start


def initialize(server: HttpServer, token: str | None = None, timeout: float = 10) -> httpx2.Response:
    headers = dict(JSON_HEADERS)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.post(server.url, json=INITIALIZE, headers=headers, timeout=timeout)


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def fast_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path / "data", prelude=FAST)
    yield server
    server.close()


def test_request_head_and_body_deadlines(fast_server: HttpServer) -> None:
    """uvicorn has no deadline for a request head: a connection that never finishes its headers
    was kept forever. Now the head has HEADER_TIMEOUT and the body BODY_TIMEOUT (408, closed)."""
    slow_head = connect(fast_server)
    slow_head.sendall(partial_head(fast_server))
    slow_body = connect(fast_server)
    slow_body.sendall(partial_head(fast_server) + b"Content-Length: 1000\r\n\r\n{\"jsonrpc\"")
    with slow_head, slow_body:
        data, took = read_until_closed(slow_head, 10)
        assert data.startswith(b"HTTP/1.1 408") and took < 5, (data, took)
        data, took = read_until_closed(slow_body, 10)
        assert b"408" in data.split(b"\r\n", 1)[0] and took < 5, (data, took)
    idle = connect(fast_server)  # says nothing at all: closed silently after IDLE_TIMEOUT
    with idle:
        data, took = read_until_closed(idle, 10)
        assert data == b"" and took < 6


def test_a_flood_of_slow_connections_does_not_lock_out_clients(fast_server: HttpServer) -> None:
    """Issue 15: 1,100 slow-header connections under a 1,024 descriptor limit locked out every
    client and wrote 8 MB of log. Here 400 under a 256 limit: the connection cap stays below the
    limit, the oldest connections still waiting for a request head make room, and the log stays
    small."""
    pid = fast_server.proc.pid
    socks = []
    try:
        for _ in range(400):
            sock = socket.socket()
            sock.settimeout(5)
            try:
                sock.connect(address(fast_server))
                sock.sendall(partial_head(fast_server))
            except OSError:
                pass
            socks.append(sock)
        assert fd_count(pid) < 256
        started = time.monotonic()
        response = initialize(fast_server)
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < 3
    finally:
        for sock in socks:
            sock.close()
    time.sleep(0.5)
    log = b"".join(fast_server.stderr_lines)
    assert len(log) < 20_000, log[-2000:]
    assert b"Traceback" not in log


def test_sigterm_ends_the_server_while_clients_hang_on(tmp_path: Path) -> None:
    """Issue 15: the server once stayed up, deaf to SIGTERM. With slow connections open and a
    request whose body never ends in progress, SIGTERM still ends it, with status 0 and the store
    closed."""
    server = HttpServer(tmp_path / "data", prelude=FAST.replace("h.BODY_TIMEOUT = 2.0", "h.BODY_TIMEOUT = 60.0"))
    socks = []
    try:
        for _ in range(50):
            sock = connect(server)
            sock.sendall(partial_head(server))
            socks.append(sock)
        stuck = connect(server)
        stuck.sendall(partial_head(server) + b"Content-Length: 100000\r\n\r\n{")
        socks.append(stuck)
        time.sleep(0.3)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
        server.close()
    assert code == 0, b"".join(server.stderr_lines).decode(errors="replace")[-2000:]
    assert took < 5, took
    from convmem import MemoryStore

    with MemoryStore.open(tmp_path / "data") as store:  # the directory lock was released
        assert store.get_system_health()["status"] == "OK"


def open_session(server: HttpServer) -> dict[str, str]:
    opened = initialize(server)
    headers = {**JSON_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    httpx2.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=10)
    return headers


def test_a_client_that_does_not_read_its_response_is_cut_off(fast_server: HttpServer) -> None:
    """A response waiting for a client that reads nothing held its buffer and descriptor
    forever; now the connection is aborted once it made no progress for WRITE_STALL_TIMEOUT."""
    headers = open_session(fast_server)
    write = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "write_message", "arguments": {"session_id": "big", "role": "user", "content": "z" * 1_000_000}}}
    for _ in range(7):  # a 7 MB answer: more than the kernel's socket buffers hold
        assert httpx2.post(fast_server.url, json=write, headers=headers, timeout=30).status_code == 200
    read = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "read_messages", "arguments": {"session_id": "big"}}}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(address(fast_server))
    host, port = address(fast_server)
    head = f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(read)}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with sock:
        sock.sendall(head.encode() + read)
        time.sleep(3)  # read nothing meanwhile (the stall is noticed after 1 s, acted on after 2 s)
        data, _ = read_until_closed(sock, 10)
    assert data.startswith(b"HTTP/1.1 200")
    assert len(data) < 7_000_000  # cut off: the whole answer never left the server


def test_request_bodies_held_at_once_are_bounded(fast_server: HttpServer) -> None:
    """Issue 15: 20 connections holding 16 MiB bodies took RSS from 80 to 405 MB. Bodies being
    received are bounded in total (two maximal ones); a request that does not fit gets 503 at once."""
    from convmem.server.http import MAX_BUFFERED_BODIES
    from convmem.server.limits import MAX_REQUEST_BODY

    size = MAX_REQUEST_BODY - 1024
    fits = MAX_BUFFERED_BODIES // size
    socks = []
    try:
        for _ in range(20):
            sock = connect(fast_server)
            sock.sendall(partial_head(fast_server) + f"Content-Length: {size}\r\n\r\n".encode() + b"[" + b" " * 65536)
            socks.append(sock)
        refused = 0
        for sock in socks:
            sock.settimeout(0.5)
            try:
                head = sock.recv(65536)
            except TimeoutError:
                continue  # admitted: waiting for the rest of its body
            if head.startswith(b"HTTP/1.1 503"):
                refused += 1
                assert b"retry-after" in head.lower()
        assert refused == 20 - fits
    finally:
        for sock in socks:
            sock.close()
    assert initialize(fast_server).status_code == 200  # the reservations ended with their requests


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[HttpServer]:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {READ_TOKEN}\nwrite {WRITE_TOKEN}\n")
    tokens.chmod(0o600)
    server = HttpServer(tmp_path / "data", "--tokens-file", str(tokens), prelude=FAST)
    yield server
    server.close()


def test_one_token_cannot_starve_another_of_sessions(token_server: HttpServer) -> None:
    """Issue 15: a read token opened 10,000 sessions and the write token then got 503 for up to
    30 minutes. Sessions are bounded per token (8 here): the read token's ninth is refused with
    429, the write token still opens sessions and works."""
    for _ in range(8):
        assert initialize(token_server, READ_TOKEN).status_code == 200
    refused = initialize(token_server, READ_TOKEN)
    assert refused.status_code == 429
    assert refused.json()["error"]["message"].startswith("too many open sessions for this token")
    opened = initialize(token_server, WRITE_TOKEN)
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    headers = {**JSON_HEADERS, "Authorization": f"Bearer {WRITE_TOKEN}", "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    httpx2.post(token_server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=10)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_system_health", "arguments": {}}}
    answer = httpx2.post(token_server.url, json=call, headers=headers, timeout=10)
    assert answer.status_code == 200 and not answer.json()["result"]["isError"]
    # Ending a session makes room again.
    second = initialize(token_server, WRITE_TOKEN).headers["mcp-session-id"]
    assert httpx2.delete(token_server.url, headers={**headers, "mcp-session-id": second}, timeout=10).status_code == 200


def test_a_session_is_refused_to_another_token(token_server: HttpServer) -> None:
    """Issue 15 / CVE-2026-52869: a request carrying the read token and naming the write token's
    session must be refused (404, as for an unknown session), and writes nothing."""
    opened = initialize(token_server, WRITE_TOKEN)
    session = opened.headers["mcp-session-id"]
    writer = {**JSON_HEADERS, "Authorization": f"Bearer {WRITE_TOKEN}", "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    httpx2.post(token_server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=writer, timeout=10)
    reader = {**writer, "Authorization": f"Bearer {READ_TOKEN}"}
    write = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "write_message", "arguments": {"session_id": "stolen", "role": "user", "content": "via a foreign session"}}}
    assert httpx2.post(token_server.url, json=write, headers=reader, timeout=10).status_code == 404
    assert httpx2.delete(token_server.url, headers=reader, timeout=10).status_code == 404
    health = {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "get_system_health", "arguments": {}}}
    answer = httpx2.post(token_server.url, json=health, headers=writer, timeout=10)
    assert answer.status_code == 200  # the owner's session survived the foreign DELETE
    assert json.loads(answer.json()["result"]["content"][0]["text"])["active_messages"] == 0


def test_session_guard_refuses_a_foreign_principal_by_itself() -> None:
    """convmem's own check, independent of the SDK's: a session registered for one principal is
    answered 404 for another, before the SDK sees the request."""
    import anyio

    from convmem.server.http import SessionGuard

    reached = []

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        reached.append(scope["headers"])
        await send({"type": "http.response.start", "status": 200, "headers": [(b"mcp-session-id", b"s-1")]})
        await send({"type": "http.response.body", "body": b"{}"})

    class Manager:
        _server_instances = {"s-1": object()}

    guard = SessionGuard(app, Manager(), per_principal=1)

    async def request(principal: str | None, session: bytes | None) -> int:
        headers = [(b"mcp-session-id", session)] if session else []
        sent = []

        async def send(message):  # type: ignore[no-untyped-def]
            sent.append(message)

        async def receive():  # type: ignore[no-untyped-def]
            return {"type": "http.request", "body": b"", "more_body": False}

        guard.principal = lambda scope: principal  # type: ignore[method-assign]
        await guard({"type": "http", "method": "POST", "headers": headers}, receive, send)
        return sent[0]["status"]

    async def scenario() -> None:
        assert await request("write", None) == 200  # opens s-1 for "write"
        assert await request("write", b"s-1") == 200
        assert await request("read", b"s-1") == 404
        assert await request("write", None) == 429  # its one session is open
        assert await request("read", None) == 200  # another principal is not affected

    anyio.run(scenario)
    assert len(reached) == 3  # the refused two never reached the SDK


def test_session_guard_forgets_sessions_without_the_sdk_attribute() -> None:
    """Should the SDK's session table be missing, a DELETE answered 2xx or the idle timeout ends
    a session in SessionGuard's count, so a token is never locked out for good."""
    import anyio

    from convmem.server.http import SessionGuard

    ids = iter(f"s-{n}".encode() for n in range(100))

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        headers = [] if any(k == b"mcp-session-id" for k, _ in scope["headers"]) else [(b"mcp-session-id", next(ids))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = SessionGuard(app, object(), per_principal=2, idle_timeout=0.3)

    async def request(method: str, session: bytes | None = None) -> int:
        sent = []

        async def send(message):  # type: ignore[no-untyped-def]
            sent.append(message)

        async def receive():  # type: ignore[no-untyped-def]
            return {"type": "http.request", "body": b"", "more_body": False}

        headers = [(b"mcp-session-id", session)] if session else []
        await guard({"type": "http", "method": method, "headers": headers}, receive, send)
        return sent[0]["status"]

    async def scenario() -> None:
        assert [await request("POST") for _ in range(3)] == [200, 200, 429]
        assert await request("DELETE", b"s-0") == 200
        assert await request("POST") == 200  # s-2
        assert await request("POST") == 429
        await anyio.sleep(0.2)
        assert await request("POST", b"s-2") == 200  # keeps s-2 alive
        await anyio.sleep(0.2)
        assert await request("POST") == 200  # s-1 expired, s-2 did not
        assert await request("POST") == 429

    anyio.run(scenario)


def test_loopback_with_tokens_does_not_warn(token_server: HttpServer) -> None:
    assert b"user boundary" not in b"".join(token_server.stderr_lines)


def test_connection_cap_stays_below_the_descriptor_limit() -> None:
    from convmem.server.http import MAX_CONNECTIONS_CEILING, connection_cap

    for soft in (64, 256, 1024, 4096, 65536):
        cap = connection_cap(soft)
        assert 8 <= cap <= min(soft - 160, MAX_CONNECTIONS_CEILING) or soft <= 168
    assert connection_cap(1024) == 768


def test_client_triggered_logs_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    """Accept errors (asyncio) and per-connection warnings (uvicorn) are written at most 5 times
    per message per 10 s; the next one let through counts those suppressed."""
    import logging

    from convmem.server.http import _LOG_LIMIT, _RATE_LIMITED_LOGGERS, RateLimitedLog, rate_limit_client_triggered_logs

    rate_limit_client_triggered_logs()
    rate_limit_client_triggered_logs()  # idempotent
    try:
        log = logging.getLogger("asyncio")
        assert sum(isinstance(f, RateLimitedLog) for f in log.filters) == 1
        with caplog.at_level(logging.WARNING):
            for _ in range(1000):
                log.error("socket.accept() out of system resource")
                logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
        assert len(caplog.records) == 10
    finally:  # this process is the test runner: leave its loggers as they were
        for name in _RATE_LIMITED_LOGGERS:
            logging.getLogger(name).removeFilter(_LOG_LIMIT)

    limiter = RateLimitedLog(burst=2, interval=0.2)
    record = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "accept failed", None, None)
    assert [limiter.filter(record) for _ in range(5)] == [True, True, False, False, False]
    time.sleep(0.25)
    assert limiter.filter(record) and "3 similar messages suppressed" in record.msg


def test_sigterm_right_after_the_banner_ends_the_server(tmp_path: Path) -> None:
    """A signal that arrives before uvicorn installs its handlers (just after the URL is
    announced) must not be lost: the server once ran on, deaf, until killed."""
    for attempt in range(3):
        server = HttpServer(tmp_path / f"data{attempt}", prelude=FAST)
        server.proc.send_signal(signal.SIGTERM)
        try:
            assert server.proc.wait(timeout=10) == 0
        finally:
            server.close()

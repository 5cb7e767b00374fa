"""End-to-end: `convmem serve --transport sse` (the legacy HTTP+SSE layout: GET /sse, POST
/messages?session_id=...) with the SDK's SSE client, and the Streamable HTTP server's guards on
it: tokens and scopes, DNS rebinding, body and stream limits, SIGTERM."""
from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from e2e_helpers import (ANSWER_TIMEOUT, READ_TOOLS, TOOL_NAMES, HttpServer, assert_error, call,
                         exercise_all_tools, ok, run_cli)

READ_TOKEN = "read-token-sse-0123456789abcdef"
WRITE_TOKEN = "write-token-sse-fedcba9876543210"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
FAST = """
import convmem.server.http as h
h.SHUTDOWN_GRACE = 1.0
h.FORCE_EXIT_AFTER = 6.0
h.MAX_SESSIONS_PER_PRINCIPAL = 2
"""


@asynccontextmanager
async def sse(server: HttpServer, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with Client(sse_client(server.url, headers=headers, sse_read_timeout=ANSWER_TIMEOUT),
                      mode="legacy") as client:
        yield client


def base(server: HttpServer) -> str:
    url = urlsplit(server.url)
    return f"{url.scheme}://{url.netloc}"


def address(server: HttpServer) -> tuple[str, int]:
    url = urlsplit(server.url)
    return url.hostname or "127.0.0.1", url.port or 80


class RawStream:
    """GET /sse on a raw socket: the endpoint event's path, and the stream held open."""

    def __init__(self, server: HttpServer, token: str | None = None) -> None:
        host, port = address(server)
        self.sock = socket.create_connection((host, port), timeout=ANSWER_TIMEOUT)
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.sock.sendall(f"GET /sse HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n{auth}\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data or (data.startswith(b"HTTP/1.1 200") and b"session_id=" not in data):
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        self.head = data
        self.status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1") else 0
        self.endpoint = None
        if b"event: endpoint" in data:
            line = data.split(b"event: endpoint", 1)[1].split(b"data: ", 1)[1]
            self.endpoint = line.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path_factory.mktemp("sse") / "data", "--toolsets", "admin", transport="sse")
    yield server
    assert server.close() == b""  # nothing on stdout, ever


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("sse-tokens")
    tokens = root / "tokens"
    tokens.write_text(f"read {READ_TOKEN}\nwrite {WRITE_TOKEN}\n")
    tokens.chmod(0o600)
    server = HttpServer(root / "data", "--tokens-file", str(tokens), transport="sse")
    yield server
    assert server.close() == b""


def test_the_banner_and_the_endpoint_event(open_server: HttpServer) -> None:
    assert open_server.url.endswith("/sse")
    assert b"HTTP+SSE (legacy)" in b"".join(open_server.stderr_lines)
    stream = RawStream(open_server)
    try:
        assert stream.status == 200 and b"text/event-stream" in stream.head
        assert stream.endpoint is not None and stream.endpoint.startswith("/messages?session_id=")
        # A request posted to it is accepted (202); its answer comes on the stream.
        response = httpx2.post(base(open_server) + stream.endpoint, json=INITIALIZE, timeout=30)
        assert response.status_code == 202
        data = b""
        while b"serverInfo" not in data:
            data += stream.sock.recv(65536)
        assert b"event: message" in data and b'"name":"convmem"' in data
    finally:
        stream.close()


def test_every_tool_over_sse(tmp_path: Path) -> None:
    server = HttpServer(tmp_path / "data", transport="sse")  # the contract's seven, exactly
    try:
        async def scenario() -> None:
            async with sse(server) as client:
                await exercise_all_tools(client, tuple(TOOL_NAMES))

        anyio.run(scenario)
    finally:
        assert server.close() == b""


def test_the_admin_tools_over_sse(open_server: HttpServer) -> None:
    async def scenario() -> None:
        async with sse(open_server) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert set(names) == TOOL_NAMES | {"list_deleted", "restore_message"}
            m = (await ok(client, "write_message", {"session_id": "sse-admin", "role": "user",
                                                    "content": "東京で会議 over SSE"}))["message"]
            await ok(client, "delete_message", {"message_id": m["message_id"]})
            listed = await ok(client, "list_deleted", {"session_id": "sse-admin"})
            assert [e["message_id"] for e in listed["deleted"]] == [m["message_id"]]
            assert listed["deleted"][0]["snippet"] == "東京で会議 over SSE"
            restored = await ok(client, "restore_message", {"message_id": m["message_id"]})
            assert restored["message"]["content"] == m["content"] and restored["message"]["revision"] == 2
            assert_error(*await call(client, "restore_message", {"message_id": m["message_id"]}), "VALIDATION_ERROR")

    anyio.run(scenario)


def test_foreign_host_or_origin_is_refused(open_server: HttpServer) -> None:
    assert httpx2.get(open_server.url, headers={"Host": "attacker.example:80"}, timeout=30).status_code == 421
    assert httpx2.get(open_server.url, headers={"Origin": "http://attacker.example"}, timeout=30).status_code == 403
    stream = RawStream(open_server)
    try:
        url = base(open_server) + stream.endpoint
        assert httpx2.post(url, json=INITIALIZE, headers={"Host": "attacker.example:80"}, timeout=30).status_code == 421
        assert httpx2.post(url, json=INITIALIZE, headers={"Origin": "http://attacker.example"}, timeout=30).status_code == 403
    finally:
        stream.close()


def test_unknown_paths_methods_and_sessions(open_server: HttpServer) -> None:
    root = base(open_server)
    assert httpx2.get(root + "/mcp", timeout=30).status_code == 404
    assert httpx2.post(root + "/sse", json=INITIALIZE, timeout=30).status_code == 405
    assert httpx2.post(root + "/messages", json=INITIALIZE, timeout=30).status_code == 400  # no session_id
    gone = root + "/messages?session_id=" + "0" * 32
    assert httpx2.post(gone, json=INITIALIZE, timeout=30).status_code == 404


def test_an_oversized_body_gets_413(open_server: HttpServer) -> None:
    from convmem.server.limits import MAX_REQUEST_BODY

    stream = RawStream(open_server)
    host, port = address(open_server)
    try:
        with socket.create_connection((host, port), timeout=ANSWER_TIMEOUT) as sock:
            sock.sendall(f"POST {stream.endpoint} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {MAX_REQUEST_BODY + 1}\r\n\r\n{{".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 413")
    finally:
        stream.close()


def test_tokens_are_required_on_both_endpoints(token_server: HttpServer) -> None:
    for headers in ({}, {"Authorization": "Bearer not-a-known-token"}, {"Authorization": f"Basic {WRITE_TOKEN}"}):
        assert httpx2.get(token_server.url, headers=headers, timeout=30).status_code == 401, headers
        post = httpx2.post(base(token_server) + "/messages?session_id=" + "0" * 32, json=INITIALIZE,
                           headers=headers, timeout=30)
        assert post.status_code == 401, headers


def test_a_session_is_refused_to_another_token(token_server: HttpServer) -> None:
    stream = RawStream(token_server, READ_TOKEN)
    try:
        assert stream.status == 200 and stream.endpoint
        url = base(token_server) + stream.endpoint
        other = httpx2.post(url, json=INITIALIZE, headers={"Authorization": f"Bearer {WRITE_TOKEN}"}, timeout=30)
        assert other.status_code == 404  # as if the session did not exist
        own = httpx2.post(url, json=INITIALIZE, headers={"Authorization": f"Bearer {READ_TOKEN}"}, timeout=30)
        assert own.status_code == 202
    finally:
        stream.close()


def test_write_and_read_tokens(token_server: HttpServer) -> None:
    async def scenario() -> None:
        async with sse(token_server, WRITE_TOKEN) as writer:
            await exercise_all_tools(writer, tuple(TOOL_NAMES))
            written = await ok(writer, "write_message", {"session_id": "scoped", "role": "user", "content": "readable"})
            message_id = written["message"]["message_id"]
        async with sse(token_server, READ_TOKEN) as reader:
            assert {tool.name for tool in (await reader.list_tools()).tools} == READ_TOOLS
            before = await ok(reader, "get_system_health")
            for name, arguments in (("write_message", {"session_id": "scoped", "role": "user", "content": "x"}),
                                    ("delete_message", {"message_id": message_id}),
                                    ("rebuild_index", {})):
                payload, is_error = await call(reader, name, arguments)
                assert_error(payload, is_error, "VALIDATION_ERROR")
                assert "write token" in payload["error"]["message"]
            after = await ok(reader, "get_system_health")
            assert (after["log_size"], after["last_sequence"]) == (before["log_size"], before["last_sequence"])
            history = await ok(reader, "read_messages", {"session_id": "scoped"})
            assert [m["message_id"] for m in history["history"]] == [message_id]

    anyio.run(scenario)


def test_event_streams_are_capped_per_token(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {READ_TOKEN}\nwrite {WRITE_TOKEN}\n")
    tokens.chmod(0o600)
    server = HttpServer(tmp_path / "data", "--tokens-file", str(tokens), prelude=FAST, transport="sse")
    streams: list[RawStream] = []
    try:
        streams = [RawStream(server, READ_TOKEN) for _ in range(2)]
        assert [s.status for s in streams] == [200, 200]
        third = RawStream(server, READ_TOKEN)
        streams.append(third)
        assert third.status == 429 and b"retry-after" in third.head.lower()
        other = RawStream(server, WRITE_TOKEN)  # another token's share is untouched
        streams.append(other)
        assert other.status == 200
        streams[0].close()
        deadline = time.monotonic() + 10
        while True:  # the server notices the closed stream at its next write (a ping at worst)
            again = RawStream(server, READ_TOKEN)
            streams.append(again)
            if again.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert again.status == 200
    finally:
        for s in streams:
            s.close()
        server.close()


def test_an_idle_stream_is_closed_and_a_busy_one_is_not(tmp_path: Path) -> None:
    """As Streamable HTTP's sessions: a stream nobody posts to for SESSION_IDLE_TIMEOUT (1.5 s
    here) is ended, so that idle clients cannot hold the per-token share for good."""
    server = HttpServer(tmp_path / "data", prelude=FAST + "h.SESSION_IDLE_TIMEOUT = 1.5\n", transport="sse")
    idle = busy = None
    try:
        idle, busy = RawStream(server), RawStream(server)
        busy_url = base(server) + busy.endpoint
        ping = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # the busy one posts twice a second
            assert httpx2.post(busy_url, json=ping, timeout=30).status_code == 202
            time.sleep(0.5)
        idle.sock.settimeout(5)
        rest = b""
        while not rest.endswith(b"0\r\n\r\n"):  # the end of the chunked response: the stream ended
            chunk = idle.sock.recv(65536)
            assert chunk, rest
            rest += chunk
        gone = base(server) + idle.endpoint
        assert httpx2.post(gone, json=ping, timeout=30).status_code == 404  # its session is gone
        assert httpx2.post(busy_url, json=ping, timeout=30).status_code == 202
    finally:
        for s in (idle, busy):
            if s is not None:
                s.close()
        server.close()


def test_sigterm_ends_the_server_with_streams_open(tmp_path: Path) -> None:
    server = HttpServer(tmp_path / "data", prelude=FAST, transport="sse")
    streams: list[RawStream] = []
    try:
        streams = [RawStream(server) for _ in range(2)]  # (the cap, in FAST)
        assert all(s.status == 200 for s in streams)
        response = httpx2.post(base(server) + streams[0].endpoint, json=INITIALIZE, timeout=30)
        assert response.status_code == 202
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        for s in streams:
            s.close()
        server.close()
    log = b"".join(server.stderr_lines)
    assert code == 0, log.decode(errors="replace")[-2000:]
    assert took < 5, took
    # The streams were ended, not dropped: no incomplete response reported, no traceback.
    assert b"without completing response" not in log and b"Traceback" not in log, log[-2000:]
    from convmem import MemoryStore

    with MemoryStore.open(tmp_path / "data") as store:  # the directory lock was released
        assert store.get_system_health()["status"] == "OK"


def test_non_loopback_without_tokens_and_tokens_on_stdio_are_refused(tmp_path: Path) -> None:
    done = run_cli("serve", "--data-dir", str(tmp_path / "d"), "--transport", "sse", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2 and b"--tokens-file" in done.stderr and done.stdout == b""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {READ_TOKEN}\n")
    tokens.chmod(0o600)
    done = run_cli("serve", "--data-dir", str(tmp_path / "d"), "--tokens-file", str(tokens))
    assert done.returncode == 2 and b"http and sse only" in done.stderr
    assert not (tmp_path / "d").exists()


def test_raw_answers_are_utf8_json_text(open_server: HttpServer) -> None:
    stream = RawStream(open_server)
    try:
        url = base(open_server) + stream.endpoint
        httpx2.post(url, json=INITIALIZE, timeout=30)
        httpx2.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=30)
        call_message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "write_message", "arguments": {"session_id": "raw-sse", "role": "user", "content": "東京で会議"}}}
        assert httpx2.post(url, json=call_message, timeout=30).status_code == 202
        data = b""
        while b'"id":2' not in data:
            data += stream.sock.recv(65536)
        assert "東京で会議".encode() in data  # not \\u-escaped anywhere on the wire
        event = data[data.index(b'{"jsonrpc":"2.0","id":2'):].split(b"\r\n", 1)[0]
        text = json.loads(event)["result"]["content"][0]["text"]
        assert json.loads(text)["message"]["content"] == "東京で会議"
    finally:
        stream.close()

"""`convmem serve --transport sse` against hostile clients: bodies too large or not JSON, streams
opened and dropped by the dozen, posts to a session whose stream is gone. Each gets a 4xx answer
and the server keeps serving the well-behaved client alongside."""
from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from uuid import UUID

import anyio
import httpx2
import pytest

from convmem.server.sse import _Stream
from e2e_helpers import ANSWER_TIMEOUT, HttpServer, ok
from test_server_sse import FAST, RawStream, address, base, sse


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    # FAST: two streams at most per token (here: for everyone), so a leaked slot shows at once.
    srv = HttpServer(tmp_path_factory.mktemp("sse-hostile") / "data", "--toolsets", "all",
                     prelude=FAST, transport="sse")
    yield srv
    assert srv.close() == b""


def _still_serving(server: HttpServer) -> None:
    async def scenario() -> None:
        async with sse(server) as client:
            health = await ok(client, "get_system_health")
            assert health["status"] in ("OK", "DEGRADED")

    anyio.run(scenario)


def _log_size(server: HttpServer) -> int:
    async def scenario() -> int:
        async with sse(server) as client:
            return (await ok(client, "get_system_health"))["log_size"]

    return anyio.run(scenario)


def _open_stream_until_ok(server: HttpServer, seconds: float = 20.0) -> RawStream:
    """A stream slot freed by a dropped client comes back once the server notices the drop."""
    deadline = time.monotonic() + seconds
    while True:
        stream = RawStream(server)
        if stream.status == 200 or time.monotonic() > deadline:
            return stream
        stream.close()
        time.sleep(0.2)


def test_a_chunked_body_over_the_limit_gets_413(server: HttpServer) -> None:
    from convmem.server.limits import MAX_REQUEST_BODY

    before = _log_size(server)
    stream = _open_stream_until_ok(server)
    assert stream.status == 200 and stream.endpoint
    host, port = address(server)
    try:
        with socket.create_connection((host, port), timeout=ANSWER_TIMEOUT) as sock:
            sock.sendall(f"POST {stream.endpoint} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                         "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
            chunk = b"x" * (1 << 20)
            sent = 0
            answer = b""
            try:
                while sent <= MAX_REQUEST_BODY + len(chunk):
                    sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed before the body ended
            try:
                answer = sock.recv(65536)
            except ConnectionResetError:
                answer = b""
            assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    finally:
        stream.close()
    _still_serving(server)
    assert _log_size(server) == before


@pytest.mark.parametrize("body", [b"{not json", b"", b"[]", b'{"jsonrpc":"2.0"}', b"\xff\xfe\x00",
                                  b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b"[" * 5000])
def test_a_body_that_is_not_a_json_rpc_message_gets_400(server: HttpServer, body: bytes) -> None:
    before = _log_size(server)
    stream = _open_stream_until_ok(server)
    assert stream.status == 200 and stream.endpoint
    try:
        answer = httpx2.post(base(server) + stream.endpoint, content=body,
                             headers={"Content-Type": "application/json"}, timeout=30)
        assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:200])
    finally:
        stream.close()
    _still_serving(server)
    assert _log_size(server) == before


def test_many_streams_opened_and_dropped_leave_the_server_serving(server: HttpServer) -> None:
    statuses = []
    for _ in range(40):
        stream = RawStream(server)
        statuses.append(stream.status)
        stream.close()
    # Past the cap a stream is refused with 429, never an error of the server's.
    assert set(statuses) <= {200, 429} and statuses[0] == 200
    stream = _open_stream_until_ok(server)
    try:
        assert stream.status == 200  # the dropped streams' slots came back
    finally:
        stream.close()
    _still_serving(server)


def test_a_post_to_a_closed_session_gets_404(server: HttpServer) -> None:
    stream = _open_stream_until_ok(server)
    assert stream.status == 200 and stream.endpoint
    endpoint = stream.endpoint
    stream.close()
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2024-11-05", "capabilities": {},
                             "clientInfo": {"name": "raw", "version": "0"}}}
    deadline = time.monotonic() + 20
    while True:  # the server forgets the session once it notices the stream is gone
        answer = httpx2.post(base(server) + endpoint, json=initialize, timeout=30)
        assert answer.status_code < 500, answer.text[:200]
        if answer.status_code != 202 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert answer.status_code == 404, answer.status_code
    _still_serving(server)


def test_a_client_gone_mid_body_leaves_no_traceback_and_others_are_served(tmp_path) -> None:
    srv = HttpServer(tmp_path / "data", transport="sse")
    try:
        stream = RawStream(srv)
        host, port = address(srv)
        for _ in range(3):  # Content-Length promises more than is sent, then the client is gone
            with socket.create_connection((host, port), timeout=ANSWER_TIMEOUT) as sock:
                sock.sendall(f"POST {stream.endpoint} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                             "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode())
        stream.close()
        _still_serving(srv)
    finally:
        assert srv.close() == b""
    assert "Traceback" not in b"".join(srv.stderr_lines).decode()


def test_bodies_over_the_shared_budget_get_503_not_500(tmp_path) -> None:
    """BodyBudget cuts a body off once the bodies being received at once pass its limit; over SSE
    the SDK let the cut-off escape as a 500 with a traceback instead of the 503 to retry."""
    srv = HttpServer(tmp_path / "data", prelude="import convmem.server.http as h\nh.MAX_BUFFERED_BODIES = 4000\n",
                     transport="sse")
    try:
        stream = RawStream(srv)
        host, port = address(srv)
        with socket.create_connection((host, port), timeout=ANSWER_TIMEOUT) as sock:
            sock.sendall(f"POST {stream.endpoint} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                         "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
            try:
                for _ in range(5):
                    sock.sendall(b"%x\r\n" % 2000 + b" " * 2000 + b"\r\n")
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered and closed before the body ended
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 503") and b"retry-after" in answer.lower(), answer[:200]
        stream.close()
        _still_serving(srv)
    finally:
        assert srv.close() == b""
    assert "Traceback" not in b"".join(srv.stderr_lines).decode()


@pytest.mark.parametrize("spelling", [str.upper, lambda h: str(UUID(hex=h)), lambda h: "{" + h + "}"])
def test_a_post_to_another_spelling_of_the_session_id_keeps_the_stream_alive(spelling) -> None:
    """The SDK takes the session id as a UUID in any spelling; the idle clock must too, or a
    client spelling it differently is cut off as idle while it posts."""
    streams = _Stream(server=None, transport=None, idle_timeout=60.0)
    sid = "0123456789abcdef0123456789abcdef"
    streams.last_post[sid] = 0.0
    streams.posted({"query_string": f"session_id={spelling(sid)}".encode()})
    assert streams.last_post[sid] > 0.0
    streams.posted({"query_string": b"session_id=not-a-uuid"})  # ignored, as the SDK refuses it
    assert set(streams.last_post) == {sid}

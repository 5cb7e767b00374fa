"""The stdio transport's pieces and the server's tool-call paths, in process.

The transport must write the very bytes the SDK's stdio transport writes and read lines as it
does; the tool-call fast path must answer what the SDK's own path answers; read tools run on the
event loop only while no call is in a worker thread.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import termios
import textwrap
import threading
from typing import Any

import anyio
import mcp.types as types
import pydantic
import pytest
from e2e_helpers import PACKAGE_ROOT, child_env, ok
from mcp import Client
from mcp.shared.message import SessionMessage
from mcp.types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from convmem.server import build_server
from convmem.server.app import _PLAIN_VERSIONS, _plain_result, _result
from convmem.server.stdio import PipeReadStream, PipeWriteStream, encode_message, parse_line
from convmem.tools import ToolOutcome


def sdk_bytes(message: Any) -> bytes:
    """What the SDK's stdio transport writes for `message`."""
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"


def plain_response(request_id: Any, text: str, is_error: bool = False) -> types.JSONRPCResponse:
    result = {"content": [{"text": text, "type": "text"}], "isError": is_error}
    return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)


# --- encode_message: the SDK's bytes ----------------------------------------------------------


def test_plain_results_encode_to_the_sdk_bytes_for_every_code_point() -> None:
    code_points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(code_points), 8192):
        text = "".join(map(chr, code_points[start : start + 8192]))
        message = plain_response(7, text)
        assert encode_message(SessionMessage(message)) == sdk_bytes(message)


@pytest.mark.parametrize("request_id", [0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, 10**30, "", "id \"\\\n日本"])
def test_ids_encode_to_the_sdk_bytes(request_id: Any) -> None:
    for is_error in (False, True):
        message = plain_response(request_id, '{"status":"OK"}', is_error)
        assert encode_message(SessionMessage(message)) == sdk_bytes(message)


def test_other_messages_encode_to_the_sdk_bytes() -> None:
    messages: list[Any] = [
        types.JSONRPCResponse(jsonrpc="2.0", id=1, result={}),
        types.JSONRPCResponse(jsonrpc="2.0", id=2, result={"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}),
        types.JSONRPCResponse(jsonrpc="2.0", id=3, result={"content": [{"text": "x", "type": "text"}], "isError": 0}),
        types.JSONRPCResponse(jsonrpc="2.0", id=4, result={"content": [{"text": "x", "type": "text"}], "isError": False, "x": 1.5}),
        types.JSONRPCResponse(jsonrpc="2.0", id=5, result={"content": [{"text": 1e300, "type": "text"}], "isError": False}),
        types.JSONRPCError(jsonrpc="2.0", id=6, error=types.ErrorData(code=-32602, message="Invalid request parameters", data="")),
        types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"level": "info", "data": 0.1}),
        types.JSONRPCRequest(jsonrpc="2.0", id=8, method="ping"),
    ]
    for message in messages:
        assert encode_message(SessionMessage(message)) == sdk_bytes(message)


# --- parse_line: the SDK's reading ------------------------------------------------------------


def test_lines_parse_as_the_sdk_parses_them() -> None:
    line = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search_messages","arguments":{"query":"\xe6\x9d\xb1\xe4\xba\xac"}}}'
    for variant in (line, line + b"\r", b"  " + line):
        item = parse_line(variant)
        assert isinstance(item, SessionMessage)
        assert item.message == types.jsonrpc_message_adapter.validate_json(line.decode(), by_name=False)


@pytest.mark.parametrize("bad", [b"\xff", b"\xed\xa0\x80", b"\xc3", b"\xe6\x9d"])
def test_invalid_utf8_is_refused_not_replaced(bad: bytes) -> None:
    """(The SDK replaces it with U+FFFD, which would then be stored as if the client had sent it.)
    Raw surrogate bytes (ED A0 80) are invalid UTF-8 too, unlike a `\\ud800` escape."""
    item = parse_line(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"q":"a' + bad + b'b"}}}')
    assert isinstance(item, UnicodeDecodeError)


def test_lone_surrogate_escape_is_recovered() -> None:
    item = parse_line(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"q":"\\ud800"}}}')
    assert isinstance(item, SessionMessage)
    assert item.message.params["arguments"]["q"] == "\ud800"  # type: ignore[union-attr]


@pytest.mark.parametrize("line", [b"", b"garbage", b'{"jsonrpc": "2.0", "id": ', b'[1, 2]', b'{"jsonrpc":"1.0","id":1,"method":"ping"}'])
def test_lines_that_are_not_messages_come_back_as_errors(line: bytes) -> None:
    assert isinstance(parse_line(line), pydantic.ValidationError)


# --- the pipe streams -------------------------------------------------------------------------


def nonblocking_pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def drain_in_thread(fd: int, received: bytearray, chunk: int = 1 << 16, after: threading.Event | None = None) -> threading.Thread:
    """A started thread that reads `fd` (blocking, `chunk` bytes at a time, once `after` is set)
    into `received` until end of input."""

    def read() -> None:
        if after is not None:
            assert after.wait(60)
        os.set_blocking(fd, True)
        while data := os.read(fd, chunk):
            received.extend(data)

    thread = threading.Thread(target=read)
    thread.start()
    return thread


def test_read_stream_splits_lines_across_chunks_and_ends_at_eof() -> None:
    ping = b'{"jsonrpc":"2.0","id":%d,"method":"ping"}'
    chunks = [ping % 1 + b"\n" + (ping % 2)[:10], (ping % 2)[10:] + b"\n\n" + ping % 3 + b"\n" + ping % 4, b""]

    async def scenario() -> list[Any]:
        r, w = nonblocking_pipe()
        stream = PipeReadStream(r)
        got: list[Any] = []

        async def feed() -> None:
            for chunk in chunks:
                if chunk:
                    os.write(w, chunk)
                else:
                    os.close(w)
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            async for item in stream:
                got.append(item)
        os.close(r)
        return got

    got = anyio.run(scenario)
    ids = [item.message.id for item in got if isinstance(item, SessionMessage)]
    assert ids == [1, 2, 3, 4]  # the last one arrived without a newline, before end of input
    assert len(got) == 4  # the empty line is skipped (a line that is not a message is answered
    # with a JSON-RPC error by the stream itself: tests/e2e/test_transport_differential.py)


def test_write_stream_delivers_a_large_message_whole_to_a_slow_reader() -> None:
    text = "日本語 and \"quotes\"\n" * 300_000  # ~7 MB of JSON, far beyond the pipe buffer
    message = plain_response(1, text)
    received = bytearray()

    async def scenario() -> None:
        r, w = nonblocking_pipe()
        reader = drain_in_thread(r, received, chunk=1 << 14)  # slow: a quarter of the pipe a read
        stream = PipeWriteStream(w)
        async with stream:
            await stream.send(SessionMessage(message))
            await stream.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=2, result={})))
        os.close(w)
        await anyio.to_thread.run_sync(reader.join)
        os.close(r)

    anyio.run(scenario)
    assert bytes(received) == sdk_bytes(message) + b'{"jsonrpc":"2.0","id":2,"result":{}}\n'


def bytes_waiting(fd: int) -> int:
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def test_cancelled_send_still_finishes_its_line() -> None:
    big = plain_response(1, "x" * 300_000)  # more than the pipe holds
    received = bytearray()
    drain = threading.Event()

    async def scenario() -> None:
        r, w = nonblocking_pipe()
        thread = drain_in_thread(r, received, after=drain)
        stream = PipeWriteStream(w)
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream.send, SessionMessage(big))
            while not bytes_waiting(r):  # part of the line is out, the rest waits for room
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()
            drain.set()
        await stream.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=2, result={})))
        await stream.aclose()
        os.close(w)
        await anyio.to_thread.run_sync(thread.join)
        os.close(r)

    anyio.run(scenario)
    lines = bytes(received).split(b"\n")
    assert lines[0] + b"\n" == sdk_bytes(big)
    assert lines[1:] == [b'{"jsonrpc":"2.0","id":2,"result":{}}', b""]


def test_send_to_a_closed_reader_is_a_broken_resource() -> None:
    async def scenario() -> None:
        r, w = nonblocking_pipe()
        os.close(r)
        stream = PipeWriteStream(w)
        for _ in range(2):
            with pytest.raises(anyio.BrokenResourceError):
                await stream.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=1, result={})))
        os.close(w)

    anyio.run(scenario)


# --- which stdio the event loop drives ---------------------------------------------------------

_PROBE = textwrap.dedent(
    """
    import os, sys
    from convmem.server.stdio import _ClaimedStdio, loop_pipes_usable
    usable = loop_pipes_usable()
    if usable:
        ids = [os.fstat(fd)[1:3] for fd in (0, 1, 2)]
        flags = [os.get_blocking(fd) for fd in (0, 1)]
        with _ClaimedStdio() as (in_fd, out_fd):
            assert os.fstat(0)[1:3] == os.stat(os.devnull)[1:3]
            assert os.fstat(1)[1:3] == ids[2]          # stray output goes to stderr
            assert os.fstat(in_fd)[1:3] == ids[0] and os.fstat(out_fd)[1:3] == ids[1]
            assert not os.get_blocking(in_fd) and not os.get_blocking(out_fd)
            print("stray")
        assert [os.fstat(fd)[1:3] for fd in (0, 1, 2)] == ids
        assert [os.get_blocking(fd) for fd in (0, 1)] == flags
    sys.stderr.write(f"usable={usable}\\n")
    """
)


def probe(stdin: Any, stdout: Any, stderr: Any) -> tuple[bytes, bytes]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], stdin=stdin, stdout=stdout, stderr=stderr, env=child_env(), cwd=PACKAGE_ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout or b"", proc.stderr or b""


def test_pipes_are_driven_by_the_loop_and_restored(tmp_path: Any) -> None:
    out, err = probe(subprocess.PIPE, subprocess.PIPE, subprocess.PIPE)
    assert b"usable=True" in err
    assert b"stray" in err and out == b""  # printed while claimed: on stderr, not on the wire


def test_sockets_are_driven_by_the_loop() -> None:
    a_in, b_in = socket.socketpair()
    a_out, b_out = socket.socketpair()
    with a_in, b_in, a_out, b_out:
        _, err = probe(b_in.fileno(), b_out.fileno(), subprocess.PIPE)
    assert b"usable=True" in err


def test_files_terminals_and_shared_streams_use_the_sdk_transport(tmp_path: Any) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(b"")
    with open(requests, "rb") as regular:
        assert b"usable=False" in probe(regular, subprocess.PIPE, subprocess.PIPE)[1]
    assert b"usable=False" in probe(subprocess.DEVNULL, subprocess.PIPE, subprocess.PIPE)[1]
    out, _ = probe(subprocess.PIPE, subprocess.PIPE, subprocess.STDOUT)  # stdout is stderr
    assert b"usable=False" in out


# --- tool calls: fast path and threads ---------------------------------------------------------


def test_plain_answers_cover_every_handshake_version() -> None:
    assert _PLAIN_VERSIONS == frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
    outcome = ToolOutcome('{"text":"日本\\u0000"}', True)
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        dumped = _result(outcome).model_dump(by_alias=True, mode="json", exclude_none=True)
        assert json.dumps(serialize_server_result("tools/call", version, dumped)) == json.dumps(_plain_result(outcome))


class BlockingStore:
    """Answers every read at once; rebuild_index waits for `release`. Records the thread of each call."""

    def __init__(self) -> None:
        self.rebuild_started = threading.Event()
        self.release = threading.Event()
        self.threads: list[tuple[str, str]] = []

    def _note(self, name: str) -> None:
        self.threads.append((name, threading.current_thread().name))

    def rebuild_index(self) -> dict[str, Any]:
        self._note("rebuild_index")
        self.rebuild_started.set()
        assert self.release.wait(60)
        return {"status": "OK"}

    def search_messages(self, **kwargs: Any) -> dict[str, Any]:
        self._note("search_messages")
        return {"results": [], "query": kwargs["query"]}

    def get_system_health(self) -> dict[str, Any]:
        self._note("get_system_health")
        return {"status": "OK"}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_reads_answer_while_rebuild_index_runs_in_a_thread(mode: str) -> None:
    store = BlockingStore()
    loop_thread = threading.current_thread().name

    async def scenario() -> None:
        async with Client(build_server(store, "test"), mode=mode) as client:  # type: ignore[arg-type]
            assert await ok(client, "search_messages", {"query": "before"}) == {"results": [], "query": "before"}
            async with anyio.create_task_group() as tg:
                rebuilt: list[dict[str, Any]] = []

                async def rebuild() -> None:
                    rebuilt.append(await ok(client, "rebuild_index", {}))

                tg.start_soon(rebuild)
                await anyio.to_thread.run_sync(store.rebuild_started.wait)
                # The rebuild holds its worker thread; the loop still answers, and reads go to threads.
                assert {t.name for t in (await client.list_tools()).tools} >= {"search_messages"}
                assert await ok(client, "search_messages", {"query": "during"}) == {"results": [], "query": "during"}
                assert await ok(client, "get_system_health", {}) == {"status": "OK"}
                assert not rebuilt
                store.release.set()
            assert rebuilt == [{"status": "OK"}]
            assert await ok(client, "search_messages", {"query": "after"}) == {"results": [], "query": "after"}

    anyio.run(scenario)
    names = [name for name, _ in store.threads]
    assert names == ["search_messages", "rebuild_index", "search_messages", "get_system_health", "search_messages"]
    threads = [thread for _, thread in store.threads]
    assert threads[0] == loop_thread and threads[-1] == loop_thread  # nothing else in flight: on the loop
    assert all(thread != loop_thread for thread in threads[1:4])  # the rebuild and the reads meanwhile

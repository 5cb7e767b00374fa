"""stdio under hostile or careless clients: input closed early, output not read, overlong lines.

Each test injects the fault from outside, on a real `convmem serve` child process: a batch of
requests followed at once by the end of stdin, a client that stops reading stdout, a line longer
than the cap. The in-process tests drive the transport streams over plain pipes.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from e2e_helpers import ANSWER_TIMEOUT, PACKAGE_ROOT, child_env, convmem_cmd, raw_payload_of
from mcp.shared.message import SessionMessage

from convmem.server.limits import MAX_REQUEST_BODY
from convmem.server.stdio import (
    MAX_IN_FLIGHT,
    MAX_LINE_BYTES,
    PipeReadStream,
    PipeWriteStream,
    StdioFlow,
    request_id_from_prefix,
)

INIT = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "limits-test", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode() + b"\n"


def write_request(request_id: int, session: str = "batch") -> bytes:
    return line(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "write_message", "arguments": {"session_id": session, "role": "user", "content": f"m{request_id}"}},
        }
    )


def spawn(data_dir: Path, stderr: Any = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        convmem_cmd("serve", "--data-dir", str(data_dir)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=child_env(),
        cwd=PACKAGE_ROOT,
    )


def answers_by_id(stdout: bytes) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for raw in stdout.splitlines():
        message = json.loads(raw)
        assert message.get("jsonrpc") == "2.0", raw[:200]
        if "id" in message:
            assert message["id"] not in out, f"answered twice: {message['id']!r}"
            out[message["id"]] = message
    return out


def test_requests_received_before_stdin_closes_are_all_run_and_answered(tmp_path: Path) -> None:
    """Issue 15: of 500 writes sent and then stdin closed, 137-184 ran and 97-144 were answered."""
    count = 300
    batch = line(INIT) + line(INITIALIZED) + b"".join(write_request(i) for i in range(count))
    proc = spawn(tmp_path / "data")
    stdout, stderr = proc.communicate(batch, timeout=ANSWER_TIMEOUT)  # writes it all, then closes stdin
    assert proc.returncode == 0, stderr.decode(errors="replace")
    answers = answers_by_id(stdout)
    assert set(answers) == {"init", *range(count)}
    for i in range(count):
        payload, is_error = raw_payload_of(answers[i])
        assert not is_error and payload["status"] == "OK", answers[i]

    from convmem import MemoryStore

    with MemoryStore.open(tmp_path / "data") as store:
        assert store.get_system_health()["active_messages"] == count


def test_requests_from_a_regular_file_are_all_answered(tmp_path: Path) -> None:
    """`convmem serve < requests.jsonl`: stdin ends at once; every request is still answered."""
    count = 50
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(line(INIT) + line(INITIALIZED) + b"".join(write_request(i) for i in range(count)))
    with open(requests, "rb") as stdin:
        done = subprocess.run(
            convmem_cmd("serve", "--data-dir", str(tmp_path / "data")),
            stdin=stdin,
            capture_output=True,
            env=child_env(),
            cwd=PACKAGE_ROOT,
            timeout=ANSWER_TIMEOUT,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert set(answers_by_id(done.stdout)) == {"init", *range(count)}


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for row in f:
            if row.startswith("VmRSS:"):
                return int(row.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_stops_reading_stdout_stops_the_server_reading_stdin(tmp_path: Path) -> None:
    """Issue 15: 3,000 pipelined requests with stdout unread took RSS from 80 MB to 1.09 GB.

    The client writes requests whose answers are large (a 16 KiB content view each) without
    reading any; the server must stop reading once its output is blocked, so most of the
    requests stay unread in the pipe and the server's memory stays flat.
    """
    proc = spawn(tmp_path / "data", stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(line(INIT) + line(INITIALIZED))
        proc.stdin.write(line({"jsonrpc": "2.0", "id": "w", "method": "tools/call", "params": {
            "name": "write_message", "arguments": {"session_id": "big", "role": "user", "content": "x" * 65536}}}))
        proc.stdin.flush()
        first = [proc.stdout.readline(), proc.stdout.readline()]  # the initialize and write answers
        message_id = json.loads(json.loads(first[1])["result"]["content"][0]["text"])["message"]["message_id"]
        baseline = rss_kib(proc.pid)

        read_request = {"jsonrpc": "2.0", "method": "tools/call", "params": {
            "name": "read_messages", "arguments": {"view": "content", "message_id": message_id, "content_limit": 16384}}}
        sent = 0
        stalled = threading.Event()

        def writer() -> None:
            nonlocal sent
            try:
                for i in range(3000):
                    proc.stdin.write(line({**read_request, "id": i}))  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
                    sent = i + 1
            except (BrokenPipeError, ValueError, OSError):
                pass
            stalled.set()

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline and not stalled.is_set():
            if sent != last:
                last, since = sent, time.monotonic()
            elif time.monotonic() - since > 1.5:
                break  # the writer has been stuck for a while: the server stopped reading
            time.sleep(0.05)
        grown_mib = (rss_kib(proc.pid) - baseline) / 1024
        assert sent < 3000, "the server read every request although nobody reads its answers"
        assert grown_mib < 60, f"RSS grew by {grown_mib:.0f} MiB while stdout was not read"

        # Reading again lets everything through: every request is answered.
        got: set[Any] = set()
        while len(got) < 3000:
            answer = proc.stdout.readline()
            assert answer, "stdout ended early"
            got.add(json.loads(answer)["id"])
        thread.join(timeout=ANSWER_TIMEOUT)
        assert sent == 3000 and got == set(range(3000))
    finally:
        proc.kill()
        proc.wait()


def test_an_overlong_line_is_refused_with_an_error_and_the_server_keeps_serving(tmp_path: Path) -> None:
    """Issue 15: one 100 MB line peaked at 4.8x its size. A line beyond the cap gets a JSON-RPC
    error naming the limit (with the request's id when it comes before the params) and is
    discarded without being buffered; the next request is served."""
    proc = spawn(tmp_path / "data")
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(line(INIT) + line(INITIALIZED))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == "init"
        baseline = rss_kib(proc.pid)
        head = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_message","arguments":{"session_id":"s","role":"user","content":"'
        chunk = b"y" * (1 << 20)
        proc.stdin.write(head)
        for _ in range(MAX_LINE_BYTES // len(chunk) * 3):  # three times the cap, 48 MiB
            proc.stdin.write(chunk)
        proc.stdin.write(b'"}}}\n')
        proc.stdin.write(write_request(8))
        proc.stdin.flush()
        peak = rss_kib(proc.pid)
        refused = json.loads(proc.stdout.readline())
        assert refused["id"] == 7
        assert refused["error"]["code"] == -32600
        assert str(MAX_LINE_BYTES) in refused["error"]["message"]
        served = json.loads(proc.stdout.readline())
        assert served["id"] == 8 and not served["result"]["isError"]
        assert (max(peak, rss_kib(proc.pid)) - baseline) / 1024 < 3 * MAX_LINE_BYTES / (1 << 20)
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=ANSWER_TIMEOUT) == 0
        stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
        proc.stdout.close()
        proc.stderr.close()  # type: ignore[union-attr]
    assert "longer than" in stderr and "Traceback" not in stderr


def test_the_line_cap_admits_every_valid_request() -> None:
    # A 1 MiB content of control characters is ~6 MiB escaped; the cap is HTTP's body limit.
    assert MAX_LINE_BYTES == MAX_REQUEST_BODY >= 6 * 1024 * 1024 + 1024 * 1024


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":"', 7),
        (b'{"id":"abc","params":{', "abc"),
        (b'  { "method" : "x" , "params" : {"id": 1, "s": "}\\"{"}, "id" : 9 , "params2":"', 9),
        (b'{"params":{"id":3,"content":"', None),  # the top-level id comes after the params
        (b'{"id":null,', None),
        (b'{"id":true,', None),
        (b'{"id":1.5,', None),
        (b'[{"id":1}', None),
        (b"garbage", None),
        (b'{"id":12', None),  # cut inside the value
    ],
)
def test_request_id_is_found_in_the_prefix_of_an_overlong_line(prefix: bytes, expected: Any) -> None:
    assert request_id_from_prefix(prefix) == expected


def nonblocking_pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def test_in_flight_requests_are_bounded_and_eof_waits_for_their_answers() -> None:
    """The read stream hands out at most MAX_IN_FLIGHT unanswered requests, and reports the end
    of input only once every request it handed out has been answered."""

    async def scenario() -> None:
        r, w = nonblocking_pipe()
        out_r, out_w = nonblocking_pipe()
        flow = StdioFlow()
        reader = PipeReadStream(r, flow=flow)
        writer = PipeWriteStream(out_w, flow=flow)
        total = MAX_IN_FLIGHT + 5
        os.write(w, b"".join(line({"jsonrpc": "2.0", "id": i, "method": "ping"}) for i in range(total)))
        os.close(w)
        got = []
        with anyio.move_on_after(0.5):
            while True:
                got.append(await reader.receive())
        assert len(got) == MAX_IN_FLIGHT  # no more until one is answered
        for item in got:
            await writer.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=item.message.id, result={})))
        rest = []
        eof = anyio.Event()

        async def drain() -> None:
            try:
                while True:
                    rest.append(await reader.receive())
            except anyio.EndOfStream:
                eof.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            while len(rest) < 5:
                await anyio.sleep(0.01)
            await anyio.sleep(0.1)
            assert not eof.is_set()  # answers are still owed
            for item in rest[:4]:
                await writer.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=item.message.id, result={})))
            await anyio.sleep(0.1)
            assert not eof.is_set()
            await writer.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rest[4].message.id, error=types.ErrorData(code=1, message="x"))))
            with anyio.fail_after(5):
                await eof.wait()
        for fd in (r, out_r, out_w):
            os.close(fd)

    anyio.run(scenario)


def test_eof_does_not_wait_for_answers_that_cannot_be_written() -> None:
    async def scenario() -> None:
        r, w = nonblocking_pipe()
        out_r, out_w = nonblocking_pipe()
        flow = StdioFlow()
        reader = PipeReadStream(r, flow=flow)
        writer = PipeWriteStream(out_w, flow=flow)
        os.write(w, line({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        os.close(w)
        await reader.receive()
        os.close(out_r)
        with pytest.raises(anyio.BrokenResourceError):
            await writer.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=2, result={})))
        with anyio.fail_after(5), pytest.raises(anyio.EndOfStream):
            await reader.receive()
        os.close(r)
        os.close(out_w)

    anyio.run(scenario)

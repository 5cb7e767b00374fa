"""End-to-end: `convmem serve` over stdio, driven by the SDK client and by raw JSON-RPC lines."""
from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from e2e_helpers import (
    ANSWER_TIMEOUT,
    PACKAGE_ROOT,
    TOOL_NAMES,
    RawStdioServer,
    assert_error,
    child_env,
    convmem_cmd,
    exercise_all_tools,
    raw_payload_of,
    stdio_client,
)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_sdk_client_drives_every_tool(tmp_path: Path, mode: str) -> None:
    async def scenario() -> None:
        async with stdio_client(tmp_path / "data", mode) as client:
            await exercise_all_tools(client)

    anyio.run(scenario)


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawStdioServer]:
    server = RawStdioServer(tmp_path_factory.mktemp("raw") / "data", "--log-level", "debug")
    init = server.initialize()
    assert init["result"]["serverInfo"]["name"] == "convmem"
    yield server
    assert server.close() == 0
    assert "Traceback" not in server.stderr_text()


def test_tools_list_is_static_and_complete(raw: RawStdioServer) -> None:
    tools = raw.request("tools/list")["result"]["tools"]
    assert {t["name"] for t in tools} == TOOL_NAMES
    for tool in tools:
        assert "outputSchema" not in tool
        assert tool["inputSchema"]["additionalProperties"] is False
    assert raw.request("tools/list")["result"]["tools"] == tools


def test_missing_or_null_arguments_are_an_empty_object(raw: RawStdioServer) -> None:
    for kwargs in ({"omit_arguments": True}, {"arguments": None}, {"arguments": {}}):
        payload, is_error = raw.call("get_system_health", **kwargs)
        assert not is_error and payload["status"] == "OK"
        payload, is_error = raw.call("write_message", **kwargs)
        assert_error(payload, is_error, "VALIDATION_ERROR")
        assert "session_id" in payload["error"]["message"]


def test_unknown_tool_is_an_error_result_without_echo(raw: RawStdioServer) -> None:
    payload, is_error = raw.call("drop_everything_xyz", {})
    assert_error(payload, is_error, "VALIDATION_ERROR")
    assert "drop_everything_xyz" not in payload["error"]["message"]


def test_arguments_that_are_not_an_object_get_a_jsonrpc_error(raw: RawStdioServer) -> None:
    response = raw.request("tools/call", {"name": "get_system_health", "arguments": [1, 2]})
    assert response["error"]["code"] == -32602


def test_lone_surrogate_is_answered_not_dropped(raw: RawStdioServer) -> None:
    before = raw.health()
    payload, is_error = raw.call_raw_arguments(
        "write_message", b'{"session_id":"s","role":"user","content":"a\\ud800b"}'
    )
    assert_error(payload, is_error, "VALIDATION_ERROR")
    assert "content" in payload["error"]["message"]
    after = raw.health()
    assert (after["log_size"], after["last_sequence"]) == (before["log_size"], before["last_sequence"])


def test_garbage_line_is_skipped_and_server_keeps_answering(raw: RawStdioServer) -> None:
    raw.send_line(b"this is not json")
    raw.send_line(b'{"jsonrpc": "2.0", "id": ')
    assert raw.health()["status"] == "OK"


def test_pipelined_requests_are_all_answered(raw: RawStdioServer) -> None:
    session = "pipelined"
    ids = []
    for i in range(40):
        request_id = raw.next_id()
        ids.append(request_id)
        raw.send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "write_message", "arguments": {"session_id": session, "role": "user", "content": f"n{i}"}},
            }
        )
    written = [raw_payload_of(raw.answer(i)) for i in ids]
    assert all(not is_error and p["status"] == "OK" for p, is_error in written)
    payload, _ = raw.call("read_messages", {"session_id": session, "limit": 1000})
    assert sorted(m["content"] for m in payload["history"]) == sorted(f"n{i}" for i in range(40))


def test_one_mebibyte_content_round_trips(raw: RawStdioServer) -> None:
    content = ("日本語とEnglish\x01\"\\" * 60000)[: 1024 * 1024 // 3]
    assert len(content.encode()) <= 1024 * 1024
    payload, is_error = raw.call("write_message", {"session_id": "big", "role": "user", "content": content})
    assert not is_error, payload
    history, _ = raw.call("read_messages", {"session_id": "big"})
    assert history["history"][0]["content"] == content


def test_stdout_carries_only_jsonrpc(raw: RawStdioServer) -> None:
    raw.health()
    assert raw.stdout_lines
    raw.assert_clean_stdout()


def test_terminal_start_explains_itself_on_stderr(tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            convmem_cmd("serve", "--data-dir", str(tmp_path / "tty")),
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            cwd=PACKAGE_ROOT,
        )
        os.close(terminal)
        terminal = -1
        os.write(controller, b"\x04")  # Ctrl-D: end of input in canonical mode
        stdout, stderr = proc.communicate(timeout=ANSWER_TIMEOUT)
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert proc.returncode == 0
    assert stdout == b""
    text = stderr.decode()
    assert str(tmp_path / "tty") in text
    snippet = json.loads(text[text.index("{") : text.index("}}}") + 3])
    entry = snippet["mcpServers"]["convmem"]
    # The absolute command of this very convmem (here: this Python with -m convmem), not "convmem".
    assert entry["command"] == sys.executable and os.path.isabs(entry["command"])
    assert entry["args"] == ["-m", "convmem", "serve", "--data-dir", str(tmp_path / "tty")]


def _inherit_sigint(state: str) -> None:
    """(preexec_fn) SIGINT as a server may inherit it: a background job of a shell without job
    control starts with it ignored, and a mask is inherited across exec."""
    if state == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elif state == "blocked":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@pytest.mark.parametrize("inherited", ["default", "ignored", "blocked"])
def test_ctrl_c_on_a_terminal_stops_at_once_with_130(tmp_path: Path, inherited: str) -> None:
    """The handlers are in place before the banner: CI once saw a Ctrl-C sent right after it,
    with SIGINT inherited ignored, lost (the server ran on; a sleep planted between the banner
    and the handlers made that happen every time)."""
    from convmem import MemoryStore

    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(convmem_cmd("serve", "--data-dir", str(tmp_path / "tty")), stdin=terminal,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), cwd=PACKAGE_ROOT,
                                preexec_fn=lambda: _inherit_sigint(inherited))
        assert proc.stderr is not None
        seen = b""
        while b"Press Ctrl-C" not in seen:  # serving: the banner is out
            chunk = proc.stderr.read1(4096)
            assert chunk, seen
            seen += chunk
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends; nothing is typed on the terminal
        proc.wait(timeout=ANSWER_TIMEOUT)
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 130
    with MemoryStore.open(tmp_path / "tty"):  # the store was closed and the lock freed
        pass


def test_sigterm_stops_the_server_and_frees_the_directory(tmp_path: Path) -> None:
    from convmem import MemoryStore

    server = RawStdioServer(tmp_path / "data")
    server.initialize()
    assert not server.call("write_message", {"session_id": "t", "role": "user", "content": "kept"})[1]
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=ANSWER_TIMEOUT) == 0  # stdin is still open: the signal alone ends it
    assert server.close() == 0
    with MemoryStore.open(tmp_path / "data") as store:
        assert [m["content"] for m in store.read_messages(session_id="t")["history"]] == ["kept"]


def test_plain_and_sdk_paths_answer_the_same_bytes(raw: RawStdioServer) -> None:
    """A plain tools/call is answered by convmem's middleware; with `_meta` it takes the SDK's
    params and result models. Both must put the same bytes on the wire."""
    content = "日本語\x00\x1f\x7f\u2028\"\\ \U0001F600 " + "".join(map(chr, range(0x20)))
    payload, is_error = raw.call("write_message", {"session_id": "bytes", "role": "user", "content": content})
    assert not is_error, payload
    calls = [
        ("read_messages", {"session_id": "bytes"}),
        ("search_messages", {"query": "日本語"}),
        ("read_messages", {"view": "bogus"}),  # an error result
        ("no_such_tool", {}),
    ]
    first: list[bytes] = []
    for n, (name, arguments) in enumerate(calls):
        lines = []
        for path, extra in (("plain", {}), ("sdk", {"_meta": {"progressToken": f"t{n}"}})):
            request_id = f"{path}-{n}"
            raw.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                      "params": {"name": name, "arguments": arguments, **extra}})
            raw.answer(request_id)
            (line,) = [x for x in raw.stdout_lines if x.startswith(b'{"jsonrpc":"2.0","id":"%s"' % request_id.encode())]
            lines.append(line.replace(request_id.encode(), b"ID", 1))
        assert lines[0] == lines[1]
        first.append(lines[0])
    history = json.loads(json.loads(first[0])["result"]["content"][0]["text"])["history"]
    assert [m["content"] for m in history] == [content]
    assert "日本語".encode() in first[0]  # UTF-8 on the wire, not \u-escaped


def test_the_stdio_transport_leaves_the_http_stack_unimported() -> None:
    """A stdio server (spawned per session) imports neither convmem's HTTP nor its SSE transport
    before it answers; asking the package for an HTTP name still imports it."""
    code = ("import sys\n"
            "from convmem.server import build_server, serve_stdio\n"
            "print(sorted(m for m in ('convmem.server.http', 'convmem.server.sse') if m in sys.modules))\n"
            "from convmem.server import serve_http, check_bind\n"
            "print('convmem.server.http' in sys.modules, callable(serve_http) and callable(check_bind))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True True"]

"""The SDK-free stdio server (convmem/server/fast.py) against the MCP SDK's (CONVMEM_STDIO_SDK=1):
the same scripted sessions, line by line, get the same answers in the same order, whether the
SDK-free server answers them itself or hands the session over to the SDK mid-way; and the first
answers of a session come without importing the SDK.

Each script runs twice on a fresh store at the same path (so that paths in answers agree): once
with the SDK's server, once with the default. After every step the runner waits for the answers
the step owes, then (once `initialize` is answered) sends a sentinel `ping` and waits for it, so
that every answer a step causes is recorded with that step and nothing else is. Values the
store draws afresh in every run (message ids, timestamps, cursors, health figures) are renamed
consistently, so a reference to an earlier answer's value must still agree.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e_helpers import ANSWER_TIMEOUT, PACKAGE_ROOT, child_env, convmem_cmd

INIT_PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "diff", "version": "1"}}
# Drawn afresh in every run: ids and cursors (renamed one to one), times (compared as a type).
FRESH_IDS = {"message_id", "message_ids", "source_message_ids", "target_message_id", "anchor", "cursor",
             "next_cursor"}
TIMES = {"timestamp", "since"}  # and every key ending in _at


def line(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")


def request(request_id: Any, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return line(message)


def call(request_id: Any, name: str, arguments: Any = None) -> bytes:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return request(request_id, "tools/call", params)


def notify(method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return line(message)


@dataclass
class Step:
    """Lines sent at once (bytes, or built from the values captured so far) and the ids whose
    answers they owe; `unordered`: answers of several concurrent calls, compared sorted by id."""

    lines: list[bytes | Callable[[dict[str, Any]], bytes]]
    owes: tuple[Any, ...] = ()
    unordered: bool = False
    capture: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None


def send(raw: bytes | Callable[[dict[str, Any]], bytes], *owes: Any, **kw: Any) -> Step:
    return Step([raw], owes, **kw)


def opening(version: str = "2025-06-18", **params: Any) -> list[Step]:
    init = {**INIT_PARAMS, "protocolVersion": version, **params}
    return [send(request(1, "initialize", init), 1), send(notify("notifications/initialized"))]


@dataclass
class Session:
    """One `convmem serve` child and every stdout message, in order."""

    data_dir: Path
    sdk: bool
    args: tuple[str, ...] = ()
    messages: queue.Queue[dict[str, Any] | None] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        env = child_env(CONVMEM_STDIO_TRACE="1")
        env.pop("CONVMEM_STDIO_SDK", None)
        if self.sdk:
            env["CONVMEM_STDIO_SDK"] = "1"
        self.stderr_path = self.data_dir.parent / f"stderr-{'sdk' if self.sdk else 'fast'}-{uuid.uuid4().hex[:8]}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(convmem_cmd("serve", "--data-dir", str(self.data_dir), *self.args),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env=env, cwd=PACKAGE_ROOT)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.messages.put(json.loads(raw))  # (a line that is not JSON fails the test here)
        self.messages.put(None)

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def until(self, ids: set[Any]) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        while ids:
            message = self.messages.get(timeout=ANSWER_TIMEOUT)
            if message is None:
                raise AssertionError(f"the server ended with answers owed to {ids}: {self.stderr()[-2000:]}")
            got.append(message)
            ids.discard(message.get("id", object()))
        return got

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=ANSWER_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._reader.join(timeout=ANSWER_TIMEOUT)
            self._stderr.close()


class Renamer:
    """Values drawn afresh in every run, renamed in order of first appearance."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if key in FRESH_IDS and isinstance(value, str):
            return self.names.setdefault(value, f"<id#{len(self.names)}>")
        if key is not None and (key in TIMES or key.endswith("_at")) and isinstance(value, int | float):
            return "<time>"
        return value


def normalise(message: dict[str, Any], rename: Renamer) -> dict[str, Any]:
    """The message with the tool payload parsed (and its fresh values renamed); health's numbers
    become their type (sizes and counters depend on the ids written)."""
    result = message.get("result")
    if not (isinstance(result, dict) and isinstance(result.get("content"), list) and result["content"]):
        return message
    block = result["content"][0]
    payload = json.loads(block["text"])
    if isinstance(payload, dict) and "memory_estimate" in payload:
        payload = _types_of_numbers(payload)
    return {**message, "result": {**result, "content": [{**block, "text": rename(payload)}]}}


def _types_of_numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _types_of_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types_of_numbers(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return type(value).__name__
    return value


SENTINEL = "sentinel"


def run(data_dir: Path, steps: list[Step], sdk: bool, args: tuple[str, ...]) -> tuple[list[list[Any]], str, int]:
    """Each step's answers (raw and normalised), the server's stderr and its exit status."""
    session = Session(data_dir, sdk, args)
    captured: dict[str, Any] = {}
    rename = Renamer()
    record: list[list[Any]] = []
    initialized = False
    try:
        for n, step in enumerate(steps):
            data = b"".join((raw(captured) if callable(raw) else raw) + b"\n" for raw in step.lines)
            session.write(data)
            got = session.until(set(step.owes))
            if not initialized:
                initialized = any(m.get("id") == 1 and "result" in m for m in got)
            if initialized:
                session.write(request(f"{SENTINEL}-{n}", "ping") + b"\n")
                got += session.until({f"{SENTINEL}-{n}"})
            got = [m for m in got if not str(m.get("id", "")).startswith(SENTINEL)]
            if step.capture is not None:
                step.capture(captured, got)
            if step.unordered:  # (before renaming, which numbers values in order of appearance)
                got.sort(key=lambda m: json.dumps(m.get("id")))
            answers = [normalise(m, rename) for m in got]
            record.append(answers)
    finally:
        status = session.close()
    return record, session.stderr(), status


def differential(tmp_path: Path, steps: list[Step], args: tuple[str, ...] = ("--toolsets", "all"),
                 setup: Callable[[Path], None] | None = None) -> str:
    """Runs `steps` against both servers, asserts the same answers; returns the fast run's stderr."""
    data = tmp_path / "data"
    outcomes = []
    for sdk in (True, False):
        if data.exists():
            shutil.rmtree(data)
        if setup is not None:
            setup(data)
        outcomes.append(run(data, steps, sdk, args))
    (sdk_record, sdk_err, sdk_status), (fast_record, fast_err, fast_status) = outcomes
    for n, (a, b) in enumerate(zip(sdk_record, fast_record, strict=True)):
        assert a == b, f"step {n} ({steps[n].lines[0] if not callable(steps[n].lines[0]) else 'built'}):\nsdk:  {a}\nfast: {b}"
    assert sdk_status == fast_status == 0
    assert "handing over" not in sdk_err and "without the SDK" not in sdk_err  # (the SDK ran throughout)
    return fast_err


def _first_result(got: list[dict[str, Any]]) -> dict[str, Any]:
    return json.loads(got[0]["result"]["content"][0]["text"])


def _capture_id(name: str) -> Callable[[dict[str, Any], list[dict[str, Any]]], None]:
    def capture(captured: dict[str, Any], got: list[dict[str, Any]]) -> None:
        captured[name] = _first_result(got)["message"]["message_id"]
    return capture


def every_tool_steps() -> list[Step]:
    """A session that calls every tool of `--toolsets all`, with valid arguments and with each
    kind of tool error, plus pings and tools/list."""
    steps = opening()
    steps += [
        send(request(2, "tools/list"), 2),
        send(request(3, "ping"), 3),
        send(request("str-id", "ping", {}), "str-id"),
        send(request(-4, "tools/list", {}), -4),
        send(request("", "ping"), ""),
        send(request(0, "ping"), 0),
        send(request(2**64 - 1, "ping"), 2**64 - 1),
        send(request(-2**63, "ping"), -2**63),
        send(call(4, "search_messages", {"query": "x", "limit": 2**63}), 4),  # (64 bits: orjson's integer)
        send(call(5, "write_message", {"session_id": "s1", "role": "user", "content": "the database migration plan",
                                       "metadata_json": json.dumps({"tags": ["db", "plan"], "memory_kind": "semantic",
                                                                    "importance": 8})}), 5,
             capture=_capture_id("m1")),
        send(call(6, "write_message", {"session_id": "s1", "role": "assistant", "content": "東京 migration 会議"}), 6,
             capture=_capture_id("m2")),
        send(call(7, "write_message", {"session_id": "s2", "role": "user", "content": "another session " * 50}), 7,
             capture=_capture_id("m3")),
        send(call(8, "search_messages", {"query": "migration"}), 8),
        send(call(9, "search_messages", {"query": "migration", "filters_json": json.dumps({"tags": ["db"]}),
                                         "limit": 5}), 9),
        send(call(10, "search_messages", {"query": "migration", "context_size": 1}), 10),  # (a thread)
        send(call(11, "search_messages", {"query": "東"}), 11),
        send(call(12, "read_messages", {"session_id": "s1"}), 12),
        send(call(13, "read_messages", {"view": "sessions"}), 13),
        send(lambda c: call(14, "read_messages", {"view": "content", "message_id": c["m3"], "content_limit": 100}), 14),
        send(lambda c: call(15, "read_messages", {"view": "context", "message_id": c["m2"]}), 15),
        send(lambda c: call(16, "update_message", {"message_id": c["m1"], "content": "the revised plan"}), 16),
        send(lambda c: call(17, "update_message", {"message_id": c["m1"], "content": "x", "expected_revision": 1}), 17),
        send(call(18, "recall", {"query": "plan", "budget_tokens": 200}), 18),
        send(call(19, "start_session", {"budget_tokens": 300}), 19),
        send(call(20, "list_tags", {}), 20),
        send(call(21, "remember", {"content": "remember this", "session_id": "s3"}), 21),
        send(lambda c: call(22, "delete_message", {"message_id": c["m2"]}), 22),
        send(call(23, "list_deleted", {}), 23),
        send(lambda c: call(24, "restore_message", {"message_id": c["m2"]}), 24),
        send(call(25, "rebuild_index"), 25),
        send(call(26, "get_system_health", {}), 26),
        # tool errors: unknown tool, missing and wrong arguments, arguments null, bad JSON in a field
        send(call(27, "no_such_tool", {}), 27),
        send(call(28, "search_messages", {}), 28),
        send(call(29, "search_messages", {"query": 5}), 29),
        send(call(30, "write_message", {"session_id": "", "role": "user", "content": "x"}), 30),
        send(call(31, "search_messages", None), 31),
        send(request(32, "tools/call", {"name": "search_messages", "arguments": None}), 32),
        send(call(33, "write_message", {"session_id": "s", "role": "user", "content": "x", "metadata_json": "{bad"}), 33),
        send(call(34, "search_messages", {"query": "x", "unexpected": 1}), 34),
        send(request(35, "tools/call", {"name": "search_messages", "arguments": {"query": "plan"},
                                        "_meta": {"progressToken": "p1"}}), 35),
        # several calls at once, more than are answered concurrently (threaded ones among them)
        Step([call(100 + i, "search_messages", {"query": "migration", "context_size": i % 2}) for i in range(20)],
             tuple(100 + i for i in range(20)), unordered=True),
        Step([call(200 + i, "write_message", {"session_id": "p", "role": "user", "content": f"w{i}"}) for i in range(5)],
             tuple(200 + i for i in range(5)), unordered=True),
        # cancelling a request that is not in flight changes nothing
        send(notify("notifications/cancelled", {"requestId": 999, "reason": "gone"})),
        send(notify("notifications/initialized")),
        # lines both servers answer without the SDK's parser: invalid UTF-8, empty lines
        send(b'{"jsonrpc":"2.0","id":40,"method":"ping","params":{"x":"\xff"}}', 40),
        send(b"   "),
        send(call(41, "search_messages", {"query": "revised"}), 41),
    ]
    return steps


def test_every_tool_same_answers_and_no_sdk(tmp_path: Path) -> None:
    steps = every_tool_steps()
    err = differential(tmp_path, steps)
    assert "handing over" not in err, err[-2000:]
    traces = [t for t in err.splitlines() if t.startswith("convmem stdio trace:")]
    calls = sum(1 for step in steps for raw in step.lines if not callable(raw) and b'"tools/call"' in raw)
    calls += sum(1 for step in steps for raw in step.lines if callable(raw))  # (all of them are calls)
    assert len([t for t in traces if "tools/call" in t]) == calls  # every call answered without the SDK
    assert all(t.endswith("mcp imported: False") for t in traces), traces[-3:]


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28",
                                     "1999-01-01", ""])
def test_protocol_versions(tmp_path: Path, version: str) -> None:
    """Old, new and unknown versions (the newest handshake version answered for the unknown)."""
    steps = opening(version) + [send(request(2, "tools/list"), 2), send(call(3, "get_system_health"), 3)]
    err = differential(tmp_path, steps, args=())
    assert "handing over" not in err


@pytest.mark.parametrize("extra", [
    {"capabilities": {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {"form": {}, "url": {}}}},
    {"capabilities": {"experimental": {"x": {}}}, "clientInfo": {"name": "host", "version": "2", "title": "Host"}},
    {"capabilities": {"sampling": {"context": {}, "tools": {}}, "tasks": {}, "extensions": {}}},
    {"capabilities": {"roots": {"listChanged": False, "other": {}}, "elicitation": {"listChanged": True}}},
    {"capabilities": {"unknown": {}}, "clientInfo": {"name": "", "version": ""}},
])
def test_host_initialize_shapes_stay_without_sdk(tmp_path: Path, extra: dict[str, Any]) -> None:
    steps = opening(**extra) + [send(call(2, "search_messages", {"query": "x"}), 2)]
    err = differential(tmp_path, steps, args=())
    assert "handing over" not in err


def after_handover() -> list[Step]:
    """What follows a hand-over: a call, a ping, the tool list, a write and its search."""
    return [
        send(call(90, "write_message", {"session_id": "h", "role": "user", "content": "after the hand-over"}), 90),
        send(call(91, "search_messages", {"query": "hand"}), 91),
        send(request(92, "ping"), 92),
        send(request(93, "tools/list"), 93),
    ]


HANDOVERS: dict[str, Step] = {
    "unknown-method": send(request(50, "resources/list"), 50),
    "logging": send(request(50, "logging/setLevel", {"level": "debug"}), 50),
    "completion": send(request(50, "completion/complete", {"ref": {"type": "ref/prompt", "name": "x"},
                                                           "argument": {"name": "a", "value": "b"}}), 50),
    "call-without-name": send(request(50, "tools/call", {"arguments": {}}), 50),
    "call-name-not-string": send(request(50, "tools/call", {"name": 5}), 50),
    "arguments-array": send(request(50, "tools/call", {"name": "search_messages", "arguments": []}), 50),
    "params-not-object": send(request(50, "tools/call", "x"), 50),
    "call-extra-params": send(request(50, "tools/call", {"name": "search_messages", "arguments": {"query": "x"},
                                                         "extra": 1}), 50),
    "meta-not-object": send(request(50, "tools/call", {"name": "search_messages", "arguments": {"query": "x"},
                                                       "_meta": 5}), 50),
    "list-cursor": send(request(50, "tools/list", {"cursor": "abc"}), 50),
    "ping-params": send(request(50, "ping", {"x": 1}), 50),
    "reinitialize": send(request(50, "initialize", INIT_PARAMS), 50),
    "batch": send(line([{"jsonrpc": "2.0", "id": 50, "method": "ping"}]), None),
    "not-jsonrpc": send(line({"id": 50, "method": "ping"}), 50),
    "invalid-json": send(b'{"jsonrpc":"2.0","id":50,"method":', 50),
    "float-id": send(b'{"jsonrpc":"2.0","id":50.5,"method":"ping"}'),
    "null-id": send(b'{"jsonrpc":"2.0","id":null,"method":"ping"}'),
    "bool-id": send(b'{"jsonrpc":"2.0","id":true,"method":"ping"}'),
    "lone-surrogate": send(b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"write_message",'
                           b'"arguments":{"session_id":"s","role":"user","content":"\\ud800 lone"}}}', 50),
    "huge-number": send(b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"search_messages",'
                        b'"arguments":{"query":"x","limit":1e400}}}', 50),
    "integer-beyond-64-bits": send(b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"update_message",'
                                   b'"arguments":{"message_id":"x","content":"y","expected_revision":1180591620717411303424}}}', 50),
    "negative-beyond-64-bits": send(b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"search_messages",'
                                    b'"arguments":{"query":"x","limit":-9223372036854775809}}}', 50),
    "large-float": send(b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"search_messages",'
                        b'"arguments":{"query":"x","limit":1.8e19}}}', 50),
    "duplicate-keys": send(b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"write_message",'
                           b'"arguments":{"session_id":"a","session_id":"b","role":"user","content":"dup"}}}', 50),
    "client-response": send(b'{"jsonrpc":"2.0","id":50,"result":{}}'),
    "other-notification": send(notify("notifications/roots/list_changed")),
    "cancel-malformed": send(notify("notifications/cancelled", {"requestId": True})),
}


@pytest.mark.parametrize("kind", sorted(HANDOVERS))
def test_handover_same_answers(tmp_path: Path, kind: str) -> None:
    """Each kind of message the SDK-free server leaves to the SDK, after a call it answered
    itself; the SDK then serves the rest of the session as if it had served all of it."""
    steps = opening() + [send(call(2, "write_message", {"session_id": "h", "role": "user", "content": "before"}), 2),
                         HANDOVERS[kind]] + after_handover()
    err = differential(tmp_path, steps)
    if kind != "duplicate-keys":  # (orjson reads that one itself, as the SDK does: last key wins)
        assert "handing over to the MCP SDK" in err, err[-2000:]


@pytest.mark.parametrize("first", [
    request(0, "tools/list"),
    request(0, "ping"),
    request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {"roots": 5},
                              "clientInfo": {"name": "x", "version": "1"}}),
    request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}}),
    request(0, "initialize"),
])
def test_before_initialize_same_answers(tmp_path: Path, first: bytes) -> None:
    """A session that does not begin with a plain `initialize` is the SDK's from its first line."""
    steps = [send(first, 0)] + opening() + after_handover()
    err = differential(tmp_path, steps, args=())
    assert "handing over to the MCP SDK" in err


def test_overlong_line_same_answer(tmp_path: Path) -> None:
    from convmem.server.lines import MAX_LINE_BYTES

    big = b'{"jsonrpc":"2.0","id":60,"method":"tools/call","params":{"name":"search_messages","arguments":{"query":"' \
        + b"a" * (MAX_LINE_BYTES + 10) + b'"}}}'
    steps = opening() + [send(big, 60), send(call(61, "search_messages", {"query": "x"}), 61)]
    err = differential(tmp_path, steps, args=())
    assert "handing over" not in err


def test_first_answers_do_not_import_the_sdk(tmp_path: Path) -> None:
    """A host's first exchange (initialize, initialized, a search, all at once) is answered
    before `mcp` is imported; a line left to the SDK imports it then, and the session goes on."""
    session = Session(tmp_path / "data", sdk=False)
    try:
        session.write(request(1, "initialize", INIT_PARAMS) + b"\n" + notify("notifications/initialized") + b"\n"
                      + call(2, "search_messages", {"query": "x", "limit": 20}) + b"\n")
        got = session.until({1, 2})
        assert [m["id"] for m in got] == [1, 2] and "result" in got[1]
        session.write(request(3, "resources/list") + b"\n" + call(4, "get_system_health") + b"\n")
        got = session.until({3, 4})
        assert got[0]["error"]["code"] == -32601 and json.loads(got[1]["result"]["content"][0]["text"])["status"]
    finally:
        assert session.close() == 0
    traces = [t for t in session.stderr().splitlines() if t.startswith("convmem stdio trace:")]
    assert traces[0] == "convmem stdio trace: answered initialize (id 1) without the SDK; mcp imported: False"
    assert traces[1] == ("convmem stdio trace: answered tools/call search_messages (id 2) without the SDK; "
                         "mcp imported: False")
    assert traces[2].startswith("convmem stdio trace: handing over to the MCP SDK at the line")
    assert len(traces) == 3  # (the SDK answered the rest)


def test_fast_modules_import_no_sdk() -> None:
    code = ("import sys, convmem.server.fast, convmem.cli_serve\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'pydantic')))\n")
    out = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True, env=child_env(),
                         cwd=PACKAGE_ROOT, check=True, timeout=ANSWER_TIMEOUT)
    assert out.stdout.strip() == "[]"


def test_handshake_versions_are_the_sdks() -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    from convmem.server.app import _PLAIN_VERSIONS
    from convmem.server.calls import HANDSHAKE_VERSIONS

    assert HANDSHAKE_VERSIONS == tuple(HANDSHAKE_PROTOCOL_VERSIONS)
    assert _PLAIN_VERSIONS == frozenset(HANDSHAKE_VERSIONS)  # (fast.py answers calls plainly on each)


def test_cancelled_call_is_not_answered(tmp_path: Path) -> None:
    """A call cancelled in the same write as its request is neither run nor answered (the SDK's
    server does the same for it); a cancel of a call already answered changes nothing. Which
    calls have started when a cancel arrives depends on scheduling in both servers, so this is
    checked here on the SDK-free server alone rather than side by side."""
    session = Session(tmp_path / "data", sdk=False)
    try:
        session.write(request(1, "initialize", INIT_PARAMS) + b"\n")
        session.until({1})
        session.write(call(2, "write_message", {"session_id": "c", "role": "user", "content": "cancelled"}) + b"\n"
                      + notify("notifications/cancelled", {"requestId": 2, "reason": "changed my mind"}) + b"\n"
                      + call(3, "write_message", {"session_id": "c", "role": "user", "content": "kept"}) + b"\n")
        got = session.until({3})
        assert [m["id"] for m in got] == [3]
        session.write(notify("notifications/cancelled", {"requestId": 3}) + b"\n"
                      + call(4, "read_messages", {"session_id": "c"}) + b"\n")
        got = session.until({4})
        assert [m["id"] for m in got] == [4]
        history = json.loads(got[0]["result"]["content"][0]["text"])["history"]
        assert [m["content"] for m in history] == ["kept"]
    finally:
        assert session.close() == 0
    assert "handing over" not in session.stderr()


def test_relayed_session_answered_without_sdk(tmp_path: Path) -> None:
    """A second `convmem serve` on the same store relays to the first (convmem/owner/relay.py);
    the owner answers the relayed session's first messages without importing the SDK either."""
    data = tmp_path / "data"
    owner = Session(data, sdk=False)
    relay = None
    try:
        owner.write(request(1, "initialize", INIT_PARAMS) + b"\n"
                    + call(2, "write_message", {"session_id": "r", "role": "user", "content": "owned"}) + b"\n")
        owner.until({1, 2})
        relay = Session(data, sdk=False)
        relay.write(request(1, "initialize", INIT_PARAMS) + b"\n" + notify("notifications/initialized") + b"\n"
                    + call(7, "search_messages", {"query": "owned"}) + b"\n")
        got = relay.until({1, 7})
        assert len(json.loads(got[-1]["result"]["content"][0]["text"])["results"]) == 1
        assert relay.close() == 0
    finally:
        assert owner.close() == 0
    traces = [t for t in owner.stderr().splitlines() if t.startswith("convmem stdio trace:")]
    assert ("convmem stdio trace: answered tools/call search_messages (id 7) without the SDK; "
            "mcp imported: False") in traces
    assert relay is not None and "trace" not in relay.stderr()  # (the relay process serves nothing itself)

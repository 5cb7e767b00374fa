"""Shared helpers for the end-to-end tests: spawn `convmem serve`, talk to it, check every tool.

The server always runs as a separate process (`python -m convmem`), exactly as an MCP host starts
it. Environment variables starting with CONVMEM_ (e.g. CONVMEM_PURE) are passed through.
"""
from __future__ import annotations

import itertools
import json
import os
import queue
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import convmem

# Children import the same convmem as this process: the checkout when run from it, the installed
# package when CI runs the suite against the installed artefact.
PACKAGE_ROOT = Path(convmem.__file__).resolve().parents[1]
TOOL_NAMES = {
    "write_message",
    "update_message",
    "read_messages",
    "search_messages",
    "delete_message",
    "rebuild_index",
    "get_system_health",
}
READ_TOOLS = {"read_messages", "search_messages", "get_system_health"}
ANSWER_TIMEOUT = 60.0  # seconds to wait for one answer before declaring the server hung


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a convmem child process: the same convmem as the tests, no stray state."""
    env = {k: v for k, v in os.environ.items() if k in ("HOME", "PATH", "LANG", "LC_ALL") or k.startswith("CONVMEM_")}
    env.pop("CONVMEM_DATA_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def convmem_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "convmem", *args]


def run_cli(*args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        convmem_cmd(*args), input=input, capture_output=True, env=env or child_env(), cwd=PACKAGE_ROOT, timeout=ANSWER_TIMEOUT
    )


# --- payloads -------------------------------------------------------------------------------


def payload_of(result: Any) -> tuple[dict[str, Any], bool]:
    """(parsed JSON text, isError) of an SDK CallToolResult; asserts the one-TextContent shape."""
    assert len(result.content) == 1, result
    block = result.content[0]
    assert block.type == "text"
    return json.loads(block.text), bool(result.is_error)


def raw_payload_of(response: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The same for a raw JSON-RPC response line."""
    assert "result" in response, response
    content = response["result"]["content"]
    assert len(content) == 1 and content[0]["type"] == "text", response
    return json.loads(content[0]["text"]), bool(response["result"].get("isError", False))


def assert_error(payload: dict[str, Any], is_error: bool, code: str) -> None:
    assert is_error, payload
    assert payload["status"] == "ERROR", payload
    assert payload["error"]["code"] == code, payload
    assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]


# --- raw JSON-RPC over stdio ----------------------------------------------------------------


class RawStdioServer:
    """`convmem serve` driven with hand-written JSON-RPC lines.

    A reader thread collects every stdout line; each must be a JSON-RPC 2.0 message (checked in
    `close`). stdin stays open until `close`, because the SDK cancels in-flight requests on EOF.
    """

    def __init__(self, data_dir: Path, *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.stderr_path = data_dir.parent / f"{data_dir.name}-stderr-{uuid.uuid4().hex[:8]}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            convmem_cmd("serve", "--data-dir", str(data_dir), *extra_args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env or child_env(),
            cwd=PACKAGE_ROOT,
        )
        self.stdout_lines: list[bytes] = []
        self._answers: dict[Any, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _queue(self, request_id: Any) -> queue.Queue[dict[str, Any]]:
        with self._lock:
            return self._answers.setdefault(request_id, queue.Queue())

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout_lines.append(line)
            try:
                message = json.loads(line)
            except ValueError:
                continue  # reported by assert_clean_stdout
            if isinstance(message, dict) and "id" in message:
                self._queue(message["id"]).put(message)

    def send_line(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_line(json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass"))

    def next_id(self) -> int:
        return next(self._ids)

    def answer(self, request_id: Any) -> dict[str, Any]:
        try:
            return self._queue(request_id).get(timeout=ANSWER_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no answer to request {request_id!r}; stderr:\n{self.stderr_text()[-3000:]}") from None

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id = self.next_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.answer(request_id)

    def initialize(self) -> dict[str, Any]:
        response = self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "0"}},
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response

    def call(self, name: str, arguments: Any = None, *, omit_arguments: bool = False) -> tuple[dict[str, Any], bool]:
        params: dict[str, Any] = {"name": name}
        if not omit_arguments:
            params["arguments"] = arguments
        return raw_payload_of(self.request("tools/call", params))

    def call_raw_arguments(self, name: str, arguments_json: bytes) -> tuple[dict[str, Any], bool]:
        """A tools/call whose `arguments` is given as raw JSON text (lone surrogates, huge numbers)."""
        request_id = self.next_id()
        line = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%s,"arguments":%s}}'
            % (request_id, json.dumps(name).encode(), arguments_json)
        )
        self.send_line(line)
        return raw_payload_of(self.answer(request_id))

    def health(self) -> dict[str, Any]:
        payload, is_error = self.call("get_system_health", {})
        assert not is_error, payload
        return payload

    def stderr_text(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def assert_clean_stdout(self) -> None:
        """Every stdout line so far is one JSON-RPC 2.0 message."""
        for line in list(self.stdout_lines):
            message = json.loads(line)
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line[:200]
            assert ("id" in message and ("result" in message or "error" in message)) or "method" in message, line[:200]

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=ANSWER_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=ANSWER_TIMEOUT)
            self._stderr.close()
        self.assert_clean_stdout()
        return code


# --- HTTP -----------------------------------------------------------------------------------

_URL_LINE = re.compile(rb"(?:Streamable HTTP|HTTP\+SSE \(legacy\)) at (http://\S+)")


class HttpServer:
    """`convmem serve --transport http --port 0` (or `transport="sse"`); the URL is read from its
    stderr banner."""

    def __init__(self, data_dir: Path, *extra_args: str, env: dict[str, str] | None = None, prelude: str = "",
                 transport: str = "http") -> None:
        """`prelude`: Python run in the child before the command line (to lower limits in tests)."""
        args = ("serve", "--data-dir", str(data_dir), "--transport", transport, "--port", "0", *extra_args)
        command = convmem_cmd(*args)
        if prelude:
            script = f"{prelude}\nimport sys\nfrom convmem.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
            command = [sys.executable, "-c", script, *args]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env or child_env(),
            cwd=PACKAGE_ROOT,
        )
        self.stderr_lines: list[bytes] = []
        found: queue.Queue[str | None] = queue.Queue()

        def drain() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.stderr_lines.append(line)
                match = _URL_LINE.search(line)
                if match:
                    found.put(match.group(1).decode())
            found.put(None)

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        try:
            url = found.get(timeout=ANSWER_TIMEOUT)
        except queue.Empty:
            url = None
        if url is None:
            self.close()
            raise AssertionError(f"HTTP server did not start: {b''.join(self.stderr_lines).decode(errors='replace')}")
        self.url: str = url

    @asynccontextmanager
    async def client(self, token: str | None = None, mode: str = "auto"):  # type: ignore[no-untyped-def]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
            async with Client(streamable_http_client(self.url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
                yield client

    def close(self) -> bytes:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=ANSWER_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=ANSWER_TIMEOUT)
        assert self.proc.stdout is not None
        stdout = self.proc.stdout.read()
        self.proc.stdout.close()
        return stdout


def stdio_client(data_dir: Path, mode: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "convmem", "serve", "--data-dir", str(data_dir)],
        env=child_env(),
        cwd=str(PACKAGE_ROOT),
    )
    return Client(params, mode=mode)  # type: ignore[arg-type]


# --- the full tour of the seven tools through an SDK client -------------------------------


async def call(client: Client, name: str, arguments: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
    return payload_of(await client.call_tool(name, arguments))


async def ok(client: Client, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    payload, is_error = await call(client, name, arguments)
    assert not is_error, (name, payload)
    return payload


async def exercise_all_tools(client: Client, expected_tools: Sequence[str] = tuple(TOOL_NAMES)) -> None:
    """Drive every tool once through `client` and check the spec's result shapes.

    Uses a session id of its own, so several runs can share one data directory.
    """
    session = f"tour-{uuid.uuid4().hex[:12]}"
    marker = "マーカー" + uuid.uuid4().hex[:8]

    listing = await client.list_tools()
    assert {tool.name for tool in listing.tools} == set(expected_tools)
    schemas = {tool.name: tool.input_schema for tool in listing.tools}
    for tool in listing.tools:
        assert tool.description
        assert tool.output_schema is None
        assert tool.input_schema["type"] == "object"
    assert schemas["write_message"]["required"] == ["session_id", "role", "content"]
    assert schemas["search_messages"]["properties"]["limit"]["maximum"] == 100
    assert schemas["read_messages"]["properties"]["content_limit"]["maximum"] == 65536

    first = await ok(
        client,
        "write_message",
        {
            "session_id": session,
            "role": "user",
            "content": f"データベースは PostgreSQL に決定 {marker}",
            "metadata_json": json.dumps({"tags": ["project", "decision"], "memory_kind": "semantic", "importance": 80}),
        },
    )
    assert first["status"] == "OK"
    message = first["message"]
    assert message["revision"] == 1 and message["session_id"] == session and message["role"] == "user"
    assert message["metadata"]["tags"] == ["project", "decision"] and message["metadata"]["importance"] == 80
    first_id = message["message_id"]
    assert re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", first_id)

    # The result text is UTF-8 JSON, not ASCII-escaped.
    raw = await client.call_tool("read_messages", {"view": "history", "session_id": session})
    assert marker in raw.content[0].text

    second = (
        await ok(
            client,
            "write_message",
            {
                "session_id": session,
                "role": "assistant",
                "content": "了解しました、記録します。",
                "metadata_json": json.dumps({"relations": [{"type": "derived_from", "message_id": first_id}]}),
            },
        )
    )["message"]

    # Stored content never appears in tools/list.
    assert marker not in (await client.list_tools()).model_dump_json()

    updated = await ok(
        client, "update_message", {"message_id": second["message_id"], "content": "記録しました。", "expected_revision": 1}
    )
    assert updated["changed"] is True and updated["message"]["revision"] == 2
    same = await ok(client, "update_message", {"message_id": second["message_id"], "content": "記録しました。"})
    assert same["changed"] is False and same["message"]["revision"] == 2
    assert_error(*await call(client, "update_message", {"message_id": second["message_id"], "content": "x", "expected_revision": 1}), "CONFLICT")

    history = await ok(client, "read_messages", {"view": "history", "session_id": session, "limit": 10})
    assert [m["message_id"] for m in history["history"]] == [first_id, second["message_id"]]
    default_view = await ok(client, "read_messages", {"session_id": session})
    assert [m["message_id"] for m in default_view["history"]] == [first_id, second["message_id"]]

    chunk = await ok(client, "read_messages", {"view": "content", "message_id": first_id, "content_limit": 8})
    content_range = chunk["content_range"]
    assert content_range["message_id"] == first_id and content_range["content_offset"] == 0
    # 8 bytes would end inside "タ": the chunk is cut back to the code point boundary at 6.
    assert content_range["complete"] is False and content_range["content"] == "デー"
    assert content_range["next_content_offset"] == 6

    context = await ok(client, "read_messages", {"view": "context", "message_id": second["message_id"]})
    assert context["message"]["message_id"] == second["message_id"]
    assert [m["message_id"] for m in context["chronological_context"]["before"]] == [first_id]
    assert any(r["type"] == "derived_from" and r["message"]["message_id"] == first_id for r in context["relations"])

    sessions = await ok(client, "read_messages", {"view": "sessions", "limit": 1000})
    assert session in {s["session_id"] for s in sessions["sessions"]}

    found = await ok(client, "search_messages", {"query": "PostgreSQL", "session_id": session, "limit": 5})
    assert [r["message_id"] for r in found["results"]] == [first_id]
    assert found["results"][0]["score"] > 0
    tagged = await ok(
        client, "search_messages", {"query": "データベース", "filters_json": json.dumps({"tags": ["decision"]}), "session_id": session}
    )
    assert [r["message_id"] for r in tagged["results"]] == [first_id]

    assert_error(*await call(client, "write_message", {"session_id": session, "role": "user", "content": "x", "colour": "red"}), "VALIDATION_ERROR")
    unknown, _ = await call(client, "write_message", {"session_id": session, "role": "user", "content": "x", "colour": "red"})
    assert "colour" in unknown["error"]["message"]

    deleted, is_error = await call(client, "delete_message", {"message_id": second["message_id"]})
    assert (deleted, is_error) == ({"status": "OK"}, False)
    again, is_error = await call(client, "delete_message", {"message_id": second["message_id"]})
    assert (again, is_error) == ({"status": "NOT_FOUND"}, False)

    rebuilt = await ok(client, "rebuild_index", {})
    assert rebuilt["status"] == "OK" and rebuilt["messages_indexed"] >= 1

    health = await ok(client, "get_system_health")  # no arguments at all
    assert health["status"] == "OK" and health["active_messages"] >= 1 and health["session_count"] >= 1

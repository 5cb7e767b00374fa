"""End-to-end: `convmem serve --transport http` (Streamable HTTP at /mcp), with and without tokens."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest

from e2e_helpers import (
    READ_TOOLS,
    HttpServer,
    assert_error,
    call,
    exercise_all_tools,
    ok,
    run_cli,
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
JSON_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
READ_TOKEN = "read-token-0123456789abcdef"
WRITE_TOKEN = "write-token-fedcba9876543210"


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path_factory.mktemp("http") / "data")
    yield server
    assert server.close() == b""  # nothing on stdout, ever


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    base = tmp_path_factory.mktemp("http-tokens")
    tokens = base / "tokens"
    tokens.write_text(f"# who may do what\n\nread {READ_TOKEN}\n  write   {WRITE_TOKEN}  \n")
    tokens.chmod(0o600)
    server = HttpServer(base / "data", "--tokens-file", str(tokens))
    yield server
    assert server.close() == b""


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_every_tool_over_http(open_server: HttpServer, mode: str) -> None:
    async def scenario() -> None:
        async with open_server.client(mode=mode) as client:
            await exercise_all_tools(client)

    anyio.run(scenario)


def test_one_mebibyte_of_escaped_content_passes_both_ways(open_server: HttpServer) -> None:
    # Control characters travel as \u0001: about 6 MiB of request body for 1 MiB of content.
    content = "\x01" * (1024 * 1024 - 3) + "終"

    async def scenario() -> None:
        async with open_server.client() as client:
            written = await ok(client, "write_message", {"session_id": "big-http", "role": "user", "content": content})
            assert written["message"]["content"] == content
            history = await ok(client, "read_messages", {"session_id": "big-http"})
            assert history["history"][0]["content"] == content

    anyio.run(scenario)


def test_foreign_host_header_is_refused(open_server: HttpServer) -> None:
    headers = {**JSON_HEADERS, "Host": "attacker.example:80"}
    response = httpx2.post(open_server.url, json=INITIALIZE, headers=headers, timeout=30)
    assert response.status_code == 421


def test_missing_or_unknown_token_gets_401(token_server: HttpServer) -> None:
    for headers in ({}, {"Authorization": "Bearer not-a-known-token"}, {"Authorization": f"Basic {WRITE_TOKEN}"}):
        response = httpx2.post(token_server.url, json=INITIALIZE, headers={**JSON_HEADERS, **headers}, timeout=30)
        assert response.status_code == 401, headers
    response = httpx2.post(
        token_server.url, json=INITIALIZE, headers={**JSON_HEADERS, "Authorization": f"Bearer {READ_TOKEN}"}, timeout=30
    )
    assert response.status_code == 200
    assert response.json()["result"]["serverInfo"]["name"] == "convmem"


def test_write_token_sees_and_uses_every_tool(token_server: HttpServer) -> None:
    async def scenario() -> None:
        async with token_server.client(WRITE_TOKEN) as client:
            await exercise_all_tools(client)

    anyio.run(scenario)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_read_token_sees_only_read_tools_and_cannot_write(token_server: HttpServer, mode: str) -> None:
    async def scenario() -> None:
        async with token_server.client(WRITE_TOKEN, mode=mode) as writer:
            written = await ok(writer, "write_message", {"session_id": "scoped", "role": "user", "content": "readable"})
            message_id = written["message"]["message_id"]
        async with token_server.client(READ_TOKEN, mode=mode) as reader:
            assert {tool.name for tool in (await reader.list_tools()).tools} == READ_TOOLS
            before = await ok(reader, "get_system_health")
            attempts = [
                ("write_message", {"session_id": "scoped", "role": "user", "content": "sneaky"}),
                ("update_message", {"message_id": message_id, "content": "changed"}),
                ("delete_message", {"message_id": message_id}),
                ("rebuild_index", {}),
            ]
            for name, arguments in attempts:
                payload, is_error = await call(reader, name, arguments)
                assert_error(payload, is_error, "VALIDATION_ERROR")
                assert "write token" in payload["error"]["message"]
            after = await ok(reader, "get_system_health")
            assert (after["log_size"], after["last_sequence"]) == (before["log_size"], before["last_sequence"])
            history = await ok(reader, "read_messages", {"session_id": "scoped"})
            assert message_id in [m["message_id"] for m in history["history"]]
            assert (await ok(reader, "search_messages", {"query": "readable", "session_id": "scoped"}))["results"]

    anyio.run(scenario)


def test_non_loopback_bind_without_tokens_is_refused(tmp_path: Path) -> None:
    done = run_cli("serve", "--data-dir", str(tmp_path / "d"), "--transport", "http", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode != 0
    assert b"--tokens-file" in done.stderr and b"0.0.0.0" in done.stderr
    assert done.stdout == b""
    assert not (tmp_path / "d").exists()  # refused before the store was opened


def test_malformed_tokens_file_is_a_startup_error(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("read good-token\nadmin secret-value\n")
    tokens.chmod(0o600)
    done = run_cli("serve", "--data-dir", str(tmp_path / "d"), "--transport", "http", "--port", "0", "--tokens-file", str(tokens))
    assert done.returncode != 0
    assert b"line 2" in done.stderr
    assert b"secret-value" not in done.stderr


def test_tokens_file_parsing_rules() -> None:
    from convmem.server import TokensFileError, parse_tokens

    tokens = parse_tokens("# comment\n\nread a1\nwrite  b2\n")
    assert [(t.scope, t.token, t.line) for t in tokens] == [("read", "a1", 3), ("write", "b2", 4)]
    for bad in ("read", "read a b", "owner x", "read a\nwrite a", "", "# only a comment\n"):
        with pytest.raises(TokensFileError):
            parse_tokens(bad)


def test_raw_tools_call_result_is_utf8_json_text(open_server: HttpServer) -> None:
    with httpx2.Client(headers=JSON_HEADERS, timeout=30) as http:
        init = http.post(open_server.url, json=INITIALIZE)
        session = init.headers.get("mcp-session-id")
        headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"} if session else {}
        http.post(open_server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        call_message = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "write_message", "arguments": {"session_id": "raw", "role": "user", "content": "東京で会議"}},
        }
        response = http.post(open_server.url, json=call_message, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert "東京で会議".encode() in response.content  # not \u-escaped anywhere on the wire
    text = response.json()["result"]["content"][0]["text"]
    assert json.loads(text)["message"]["content"] == "東京で会議"


def test_a_read_token_gets_the_recall_toolsets_read_tools_only(tmp_path: Path) -> None:
    """--toolsets recall over HTTP: a read token lists recall, start_session and list_tags (not
    remember) and cannot call remember; a write token remembers."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {READ_TOKEN}\nwrite {WRITE_TOKEN}\n")
    tokens.chmod(0o600)
    server = HttpServer(tmp_path / "data", "--tokens-file", str(tokens), "--toolsets", "recall")

    async def scenario() -> None:
        async with server.client(WRITE_TOKEN) as writer:
            names = {tool.name for tool in (await writer.list_tools()).tools}
            assert {"recall", "start_session", "list_tags", "remember"} <= names
            first = await ok(writer, "remember", {"session_id": "s", "content": "tabs, not spaces"})
            assert first["duplicate"] is False
        async with server.client(READ_TOKEN) as reader:
            names = {tool.name for tool in (await reader.list_tools()).tools}
            assert names == READ_TOOLS | {"recall", "start_session", "list_tags"}
            payload, is_error = await call(reader, "remember", {"session_id": "s", "content": "x"})
            assert_error(payload, is_error, "VALIDATION_ERROR")
            assert "write token" in payload["error"]["message"]
            bundle = await ok(reader, "recall", {"query": "tabs", "budget_tokens": 300})
            assert [i["message_id"] for i in bundle["items"]] == [first["message"]["message_id"]]

    try:
        anyio.run(scenario)
    finally:
        assert server.close() == b""

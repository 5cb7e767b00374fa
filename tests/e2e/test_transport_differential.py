"""The same tools/call bytes over stdio and over Streamable HTTP get the same answer: both
transports parse JSON the same way (duplicate keys, huge and non-finite numbers, lone
surrogates, control characters, deep nesting, a BOM), so no request means one thing on one and
another thing on the other."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from e2e_helpers import HttpServer, RawStdioServer

# `arguments` JSON texts for tools/call, as raw bytes (so that the oddities reach the parsers).
CASES: list[tuple[str, bytes]] = [
    ("write_message", b'{"session_id":"a","session_id":"b","role":"user","content":"dup keys"}'),
    ("search_messages", b'{"query":"dup","limit":100000000000000000000000000000}'),
    ("search_messages", b'{"query":"dup","limit":1e400}'),
    ("search_messages", b'{"query":"dup","limit":20.0}'),
    ("search_messages", b'{"query":"dup","limit":true}'),
    ("search_messages", b'{"query":"dup","limit":-0}'),
    ("search_messages", b'{"query":"dup","limit":NaN}'),
    ("write_message", b'{"session_id":"s","role":"user","content":"\\ud800 lone"}'),
    ("write_message", b'{"session_id":"s\\u0000z","role":"user","content":"nul in id"}'),
    ("write_message", b'{"session_id":"s","role":"user","content":"x","metadata_json":"{\\"tags\\":[\\"a\\",\\"a\\"]}"}'),
    ("search_messages", b'{"query":' + b'[' * 2000 + b']' * 2000 + b'}'),
    ("read_messages", b'null'),
    ("read_messages", b'[]'),
    ("search_messages", b'{"query":"\\u00e9t\\u00e9"}'),
    # invalid UTF-8: stdio used to store U+FFFD in its place, HTTP refuses the body (-32700)
    ("write_message", b'{"session_id":"s","role":"user","content":"a\xffb"}'),
    ("write_message", b'{"session_id":"s\xed\xa0\x80","role":"user","content":"raw surrogate bytes"}'),
]


class RawHttp:
    """tools/call over Streamable HTTP with hand-written bodies (one initialized session)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = ""
        self.ids = 0
        answer = self.post(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{'
                           b'"protocolVersion":"2025-06-18","capabilities":{},'
                           b'"clientInfo":{"name":"diff","version":"0"}}}')
        assert "result" in answer, answer
        self.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def post(self, body: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                self.session = resp.headers.get("Mcp-Session-Id") or self.session
                text = resp.read().decode("utf-8")
        except urllib.error.HTTPError as exc:  # a 4xx carries the JSON-RPC error as its body
            text = exc.read().decode("utf-8")
        if not text.strip():
            return {}
        if text.lstrip().startswith("{"):
            return json.loads(text)
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])

    def call_raw(self, name: str, arguments: bytes) -> dict[str, Any]:
        self.ids += 1
        return self.post(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%s,'
                         b'"arguments":%s}}' % (self.ids, json.dumps(name).encode(), arguments))


# stdio reads a lone surrogate escape (RFC 8259 allows it) and answers the tool's
# VALIDATION_ERROR naming the field; the SDK's HTTP parser refuses the body (-32700). Both refuse
# the request and write nothing; that is the one difference, and it is deliberate.
SAME_REFUSAL = {("tool-error", "VALIDATION_ERROR"), ("jsonrpc-error", -32700)}


def outcome(response: dict[str, Any]) -> tuple[str, Any]:
    """What a client learns: a JSON-RPC error code, or the tool's status / error code."""
    if "error" in response:
        return "jsonrpc-error", response["error"]["code"]
    content = response["result"]["content"][0]["text"]
    payload = json.loads(content)
    if response["result"].get("isError"):
        return "tool-error", payload["error"]["code"]
    if "message" in payload:
        return "ok", (payload["message"]["session_id"], payload["message"]["content"])
    return "ok", sorted(payload)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("diff")
    stdio = RawStdioServer(base / "stdio")
    stdio.initialize()
    http = HttpServer(base / "http")
    try:
        yield stdio, RawHttp(http.url)
    finally:
        stdio.close()
        http.close()


@pytest.mark.parametrize("name, arguments", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_the_same_bytes_get_the_same_answer_on_both_transports(servers, name: str, arguments: bytes) -> None:
    """Including the JSON-RPC errors for what is not a request (the deep nesting): stdio used to
    drop such a line without an answer."""
    stdio, http = servers
    request_id = stdio.next_id()
    stdio.send_line(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%s,"arguments":%s}}'
                    % (request_id, json.dumps(name).encode(), arguments))
    over_stdio = outcome(stdio.answer(request_id))
    over_http = outcome(http.call_raw(name, arguments))
    if b"\\ud800" in arguments:
        assert {over_stdio, over_http} == SAME_REFUSAL
    else:
        assert over_stdio == over_http


def test_lines_that_are_not_requests_are_answered_not_dropped(servers) -> None:
    stdio, _ = servers
    stdio.send_line(b"garbage")
    assert stdio.answer(None)["error"]["code"] == -32700
    stdio.send_line(b'{"id": 77, "params": 1}')  # JSON, but no JSON-RPC message
    assert stdio.answer(77)["error"]["code"] == -32600
    assert stdio.health()["status"] == "OK"  # and the session goes on

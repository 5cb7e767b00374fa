"""Issue 12 over MCP: with `--toolsets core` the search and read tools list and take their new
optional arguments (through a relayed session too); without it they are unknown parameters."""
from __future__ import annotations

from pathlib import Path

from e2e_helpers import RawStdioServer, assert_error


def start(data: Path, *args: str) -> RawStdioServer:
    server = RawStdioServer(data, *args)
    server.initialize()
    return server


def schema_of(server: RawStdioServer, name: str) -> dict:
    tools = server.request("tools/list", {})["result"]["tools"]
    return next(t["inputSchema"] for t in tools if t["name"] == name)


def test_core_lists_and_takes_the_new_arguments(tmp_path: Path) -> None:
    data = tmp_path / "d"
    owner = start(data, "--toolsets", "core")
    attached = start(data, "--toolsets", "core")  # relayed to the owner with its own catalog
    plain = start(data)
    try:
        search = schema_of(owner, "search_messages")["properties"]
        assert search["snippet_bytes"]["minimum"] == 64 and search["snippet_bytes"]["maximum"] == 65536
        assert "cursor" in search
        assert schema_of(owner, "read_messages")["properties"]["order"]["enum"] == ["asc", "desc"]
        assert "snippet_bytes" not in schema_of(plain, "search_messages")["properties"]
        for i in range(6):
            payload, err = owner.call("write_message", {"session_id": "s", "role": "user",
                                                        "content": f"needle {i} " + "x " * 200})
            assert not err, payload
        for server in (owner, attached):
            payload, err = server.call("search_messages", {"query": "needle", "limit": 4,
                                                           "snippet_bytes": 64, "cursor": ""})
            assert not err, payload
            assert len(payload["results"]) == 4 and "nextCursor" in payload
            assert all(len(r["content"].encode()) <= 64 and r["content_truncated"]
                       for r in payload["results"])
            rest, err = server.call("search_messages", {"query": "needle", "limit": 4,
                                                        "cursor": payload["nextCursor"]})
            assert not err and len(rest["results"]) == 2 and "nextCursor" not in rest
            hist, err = server.call("read_messages", {"session_id": "s", "limit": 2, "order": "desc"})
            assert not err and [m["content"][:8] for m in hist["history"]] == ["needle 5", "needle 4"]
        payload, err = plain.call("search_messages", {"query": "needle", "snippet_bytes": 64})
        assert_error(payload, err, "VALIDATION_ERROR")
        payload, err = plain.call("search_messages", {"query": "needle",
                                                      "filters_json": '{"roles":["assistant"]}'})
        assert not err and payload == {"results": []}
    finally:
        assert plain.close() == 0
        assert attached.close() == 0
        assert owner.close() == 0

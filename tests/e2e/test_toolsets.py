"""`--toolsets`: with no option the server is the contract exactly (the seven tools, today's input
schemas); naming toolsets adds groups. An attached process gets its own toolsets from the owner."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e_helpers import RawStdioServer, run_cli

from convmem.owner.listener import _stream_catalog
from convmem.tools import CONTRACT, TOOL_SPECS, ToolCatalog, ToolsetError, parse_toolsets
from convmem.tools.toolsets import EVERY_TOOL, TOOLSET_NAMES

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "contract_tool_schemas.json"


def without_descriptions(value: Any) -> Any:
    """A schema's structure: names, types, ranges, enums, required. Descriptions are the tools'
    documentation (docs/TOOLS.md and the descriptions improve; the arguments stay exact)."""
    if isinstance(value, dict):
        return {k: without_descriptions(v) for k, v in value.items() if k != "description"}
    if isinstance(value, list):
        return [without_descriptions(v) for v in value]
    return value


def listing(server: RawStdioServer) -> list[dict]:
    response = server.request("tools/list", {})
    return response["result"]["tools"]


def start(data: Path, *args: str) -> RawStdioServer:
    server = RawStdioServer(data, *args)
    server.initialize()
    return server


def test_parse_toolsets() -> None:
    assert parse_toolsets(None) == ()
    assert parse_toolsets("all") == TOOLSET_NAMES
    assert parse_toolsets("core") == ("core",)
    assert parse_toolsets("admin, recall") == ("core", "recall", "admin")  # core implied, fixed order
    assert parse_toolsets("admin,admin") == ("core", "admin")
    for bad in ("", " , ", "bogus", "core,all", "recall,x"):
        try:
            parse_toolsets(bad)
        except ToolsetError as exc:
            assert "toolset" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")


def test_the_contract_catalog_is_todays_seven_tools() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert [s.name for s in CONTRACT.specs] == [g["name"] for g in golden]
    for spec, g in zip(CONTRACT.specs, golden):
        assert without_descriptions(spec.input_schema) == g["inputSchema"], spec.name
        assert (spec.writes, spec.destructive) == (g["writes"], g["destructive"]), spec.name
    assert CONTRACT.specs == TOOL_SPECS
    every = [s.name for s in EVERY_TOOL.specs]
    assert every[:7] == [g["name"] for g in golden]  # the seven first, in the contract's order
    assert len(every) == len(set(every))


def test_no_option_lists_the_contract_and_all_adds_the_toolsets(tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    plain = start(tmp_path / "a")
    try:
        tools = listing(plain)
        assert [t["name"] for t in tools] == [g["name"] for g in golden]
        assert [without_descriptions(t["inputSchema"]) for t in tools] == [g["inputSchema"] for g in golden]
        assert [t["inputSchema"] for t in tools] == [s.input_schema for s in TOOL_SPECS]
    finally:
        assert plain.close() == 0
    full = start(tmp_path / "b", "--toolsets", "all")
    try:
        assert [t["name"] for t in listing(full)] == [s.name for s in EVERY_TOOL.specs]
    finally:
        assert full.close() == 0


def test_an_attached_process_gets_its_own_toolsets(tmp_path: Path) -> None:
    data = tmp_path / "data"
    owner = start(data)  # the contract
    attached = start(data, "--toolsets", "all")
    try:
        assert [t["name"] for t in listing(attached)] == [s.name for s in EVERY_TOOL.specs]
        assert [t["name"] for t in listing(owner)] == [s.name for s in TOOL_SPECS]
    finally:
        assert attached.close() == 0
        assert owner.close() == 0


def test_the_owner_builds_an_attached_sessions_catalog_from_its_request() -> None:
    assert _stream_catalog({}) == CONTRACT
    assert _stream_catalog(None) == CONTRACT
    assert _stream_catalog({"toolsets": list(TOOLSET_NAMES)}) == EVERY_TOOL
    assert _stream_catalog({"toolsets": ["core"]}) == ToolCatalog.of(("core",))
    assert _stream_catalog({"toolsets": ["nope"]}) is None
    assert _stream_catalog({"toolsets": "core"}) is None


def test_an_unknown_toolset_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli("serve", "--data-dir", str(tmp_path / "d"), "--toolsets", "bogus")
    assert done.returncode == 2
    assert b"unknown toolset 'bogus'" in done.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was created


def test_the_recall_tools_over_stdio_and_through_an_attached_process(tmp_path: Path) -> None:
    """The recall toolset served by the owner and relayed for an attached process: remember
    writes once, the attached process finds the owner's memory, list_tags and start_session
    see it, recall bundles it; the contract server does not list them."""
    data = tmp_path / "data"
    owner = start(data, "--toolsets", "recall")
    attached = start(data, "--toolsets", "all")
    try:
        assert {"recall", "start_session", "list_tags", "remember"} <= {t["name"] for t in listing(owner)}
        args = {"session_id": "s", "content": "The user prefers tabs over spaces.",
                "metadata_json": json.dumps({"tags": ["style"], "memory_kind": "preference"})}
        first, err = owner.call("remember", args)
        assert not err and first["duplicate"] is False
        again, err = attached.call("remember", {**args, "content": "the user prefers TABS over spaces."})
        assert not err and again["duplicate"] is True
        assert again["message"]["message_id"] == first["message"]["message_id"]
        tags, _ = attached.call("list_tags", {})
        assert tags == {"tags": [{"tag": "style", "count": 1}]}
        boot, _ = attached.call("start_session", {"budget_tokens": 500})
        assert [m["message_id"] for m in boot["memories"]] == [first["message"]["message_id"]]
        bundle, _ = owner.call("recall", {"query": "tabs", "budget_tokens": 200})
        assert [i["message_id"] for i in bundle["items"]] == [first["message"]["message_id"]]
        assert owner.health()["active_messages"] == 1
    finally:
        assert attached.close() == 0
        assert owner.close() == 0
    plain = start(tmp_path / "plain")
    try:
        answer, err = plain.call("recall", {"query": "x", "budget_tokens": 10})
        assert err and answer["error"]["code"] == "VALIDATION_ERROR"
    finally:
        assert plain.close() == 0

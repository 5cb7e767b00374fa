"""docs/TOOLS.md, the tool reference in the repository, against the code: every tool, every
argument with its type, requirement, default and range as tools/list declares them, every output
field the tools really return, and every error code."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from convmem.errors import CODES
from convmem.tools.schemas import FILTER_KEYS, TOOL_SPECS
from convmem.validation import METADATA_FIELDS

DOC = (Path(__file__).resolve().parents[3] / "docs" / "TOOLS.md").read_text(encoding="utf-8")


def argument_rows(text: str) -> dict[str, list[str]]:
    """name -> [type, required, default, range] of each row of a six-column arguments table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().split("|")[1:-1]]
        if len(cells) == 6 and re.fullmatch(r"`[a-z_]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1:5]
    return rows


def section(title: str) -> str:
    match = re.search(rf"^##+ {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.S | re.M)
    assert match, f"no section {title!r} in docs/TOOLS.md"
    return match.group(1)


@pytest.mark.parametrize("spec", TOOL_SPECS, ids=lambda s: s.name)
def test_every_argument_is_documented_as_the_schema_declares_it(spec):
    text = section(spec.name)
    rows = argument_rows(text)
    props = spec.input_schema["properties"]
    if not props:
        assert rows == {} and "No arguments" in text
        return
    assert set(rows) == set(props)
    for name, schema in props.items():
        kind, required, default, bounds = rows[name]
        assert kind == schema["type"], name
        assert (required == "yes") == (name in spec.required), name
        if "default" in schema:
            assert default.strip("`") == str(schema["default"]), name
        if "enum" in schema:
            assert bounds == ", ".join(f"`{v}`" for v in schema["enum"]), name
        if schema["type"] == "integer":
            lo, hi = schema["minimum"], schema.get("maximum")
            assert bounds.startswith(f"{lo}-{hi}" if hi is not None else f"at least {lo}"), name


def test_every_error_code_is_explained():
    table = section("Error codes")
    assert {m for m in re.findall(r"^\| `([A-Z_]+)` \|", table, re.M)} == set(CODES)


def test_metadata_fields_and_filter_keys_are_listed():
    assert re.findall(r"^\| `([a-z_]+)` \|", section("Metadata"), re.M) == list(METADATA_FIELDS)
    search = section("search_messages")
    for key, _ in FILTER_KEYS:
        assert re.search(rf"^\| `{key}` \|", search, re.M), key


def keys_of(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | set().union(*(keys_of(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(keys_of(v) for v in value)) if value else set()
    return set()


def test_every_output_field_the_tools_return_is_documented(store):
    shared = section("The message object") + section("Metadata")
    a = store.write_message(session_id="s", role="user", content="alpha",
                            metadata_json='{"summary":"sum","tool_call_id":"t1","tags":["x"]}')
    b = store.write_message(session_id="s", role="user", content="beta", metadata_json=(
        '{"relations":[{"type":"related_to","message_id":"%s"}]}' % a["message"]["message_id"]))
    gone = store.write_message(session_id="s", role="user", content="gamma")["message"]["message_id"]
    store.update_message(message_id=b["message"]["message_id"], metadata_json=(
        '{"relations":[{"type":"related_to","message_id":"%s"},{"type":"supersedes","message_id":"%s"}]}'
        % (a["message"]["message_id"], gone)))
    for _ in range(2):
        store.write_message(session_id="s", role="user", content="filler")
    answers = {
        "write_message": [a],
        "update_message": [store.update_message(message_id=a["message"]["message_id"], content="alpha2")],
        "read_messages": [store.read_messages(session_id="s", limit=1),
                          store.read_messages(view="sessions"),
                          store.read_messages(view="content", message_id=a["message"]["message_id"]),
                          store.delete_message(message_id=gone) and
                          store.read_messages(view="context", message_id=b["message"]["message_id"])],
        "search_messages": [store.search_messages(query="beta", context_size=1)],
        "rebuild_index": [store.rebuild_index()],
        "get_system_health": [store.get_system_health()],
        "delete_message": [store.delete_message(message_id=gone)],
    }
    assert answers["read_messages"][0].get("nextCursor")  # (the optional fields are there)
    assert answers["read_messages"][3]["relations"][-1].get("status") == "deleted"
    assert "context_preview" in answers["search_messages"][0]["results"][0]
    for tool, outputs in answers.items():
        text = section(tool) + shared
        missing = {k for out in outputs for k in keys_of(out) if f"`{k}`" not in text
                   and f'"{k}"' not in text}
        assert missing == set(), (tool, missing)

"""Fuzzing every tool of every toolset (`EVERY_TOOL`: the seven with their `core` extensions,
`recall`, `admin`), in-process through `run_tool` for speed (on the store's owner and through an
attached SharedStore, whose arguments travel over the owner's socket), then a smaller run over
stdio of `convmem serve --toolsets all`.

For every refused call: the spec's error shape exactly (`{"status":"ERROR","error":{"code":...,
"message":...}}`), never INTERNAL_ERROR, a VALIDATION_ERROR names the argument, and nothing is
written (the log's size and last sequence number are compared before and after). Hypothesis
runs FUZZ_EXAMPLES examples per test (default 150; set CONVMEM_FUZZ_EXAMPLES for more).
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import MemoryStore
from convmem.owner import SharedStore
from convmem.tools import run_tool
from convmem.tools.toolsets import EVERY_TOOL
from e2e_helpers import RawStdioServer

FUZZ_EXAMPLES = int(os.environ.get("CONVMEM_FUZZ_EXAMPLES", "150"))
SPEC_CODES = {"VALIDATION_ERROR", "NOT_FOUND", "CONFLICT", "BUSY", "IO_ERROR", "CORRUPT_STORE"}
BIG = "x" * 2_000_000
CURSOR_PARAMS = {("read_messages", "cursor"), ("search_messages", "cursor"), ("start_session", "since"),
                 ("list_tags", "cursor"), ("list_deleted", "cursor")}

# filters_json values with odd times, roles and shapes: each must be refused.
BAD_FILTERS = [
    '{"after":"2026-13-01"}', '{"after":"1e3"}', '{"after":1e3}', '{"after":1.5}', '{"after":-1}',
    '{"before":-86400000}', '{"after":99999999999999999999}', '{"after":281474976710656}',
    '{"after":"2026-01-01T00:00:00"}', '{"before":"2026-01-01"}', '{"after":"0001-01-01T00:00:00Z"}',
    '{"after":"2026-02-30T00:00:00Z"}', '{"after":"2026-01-01T24:00:00Z"}', '{"after":"2026-01-01T00:00:00+25:00"}',
    '{"after":true}', '{"after":[0]}', '{"after":{}}', '{"after":""}', '{"after":"1000"}', '{"after":"１０００"}',
    '{"after":"2026-01-01T00:00:00Z\\u0000"}', '{"after":"\\u0000"}', '{"after":"x' + "9" * 100 + '"}',
    '{"after":"2026-01-02T00:00:00Z","before":"2026-01-01T00:00:00Z"}', '{"after":2,"before":1}',
    '{"roles":"user"}', '{"roles":["bogus"]}', '{"roles":[1]}', '{"roles":[null]}', '{"roles":[["user"]]}',
    '{"kinds":"semantic"}', '{"tiers":["forever"]}', '{"tags":[""]}', '{"tags":[1]}', '{"tags":"t"}',
    '{"colour":"red"}', '[]', '"after"', "1", "null", "{not json", '{"after":' + "[" * 5000 + "]" * 5000 + "}",
    '{"after":"\\ud800"}',
]
FAR_TIMES_THAT_ARE_FINE = [  # accepted: well-formed instants, far in the past or future
    '{"after":0}', '{"before":281474976710655}', '{"after":"9999-12-31T23:59:59Z"}',
    '{"after":"1970-01-01T00:00:00Z","roles":["user","system"]}', '{"before":"2026-01-01T09:00:00+09:00"}',
]


class Harness:
    """A store with sessions, tags, relations and deleted messages, and a real cursor of each
    kind (to truncate, tamper with and use in the wrong place)."""

    def __init__(self, directory: Path) -> None:
        self.store = SharedStore.open(directory)
        self.relay = SharedStore.open(directory)
        assert self.store.is_owner and not self.relay.is_owner
        self.ids: list[str] = []
        for i in range(24):
            meta: dict[str, Any] = {"tags": [f"t{i % 7}", "shared"], "memory_kind": ("semantic", "preference")[i % 2],
                                    "memory_tier": "long", "importance": 10 * (i % 10)}
            if self.ids:
                meta["relations"] = [{"type": "derived_from", "message_id": self.ids[-1]}]
            ok = self.ok("write_message", {"session_id": f"s{i % 3}", "role": ("user", "assistant", "system")[i % 3],
                                           "content": f"fuzz target word{i} 東京 " * (i + 1),
                                           "metadata_json": json.dumps(meta)})
            self.ids.append(ok["message"]["message_id"])
        for mid in self.ids[:6]:
            self.ok("delete_message", {"message_id": mid})
        self.deleted = self.ids[:6]
        self.live = self.ids[6:]
        self.cursors = {
            "history asc": self.ok("read_messages", {"session_id": "s1", "limit": 2})["nextCursor"],
            "history desc": self.ok("read_messages", {"session_id": "s1", "limit": 2, "order": "desc"})["nextCursor"],
            "sessions": self.ok("read_messages", {"view": "sessions", "limit": 1})["nextCursor"],
            "search": self.ok("search_messages", {"query": "fuzz", "limit": 2, "cursor": ""})["nextCursor"],
            "since": self.ok("start_session", {"budget_tokens": 200})["cursor"],
            "tags": self.ok("list_tags", {"limit": 2})["nextCursor"],
            "deleted": self.ok("list_deleted", {"limit": 2})["nextCursor"],
        }

    def call(self, name: str, arguments: Any, via: str = "owner") -> tuple[dict[str, Any], bool]:
        outcome = run_tool(self.store if via == "owner" else self.relay, name, arguments, EVERY_TOOL)
        return json.loads(outcome.text), outcome.is_error

    def ok(self, name: str, arguments: Any) -> dict[str, Any]:
        payload, is_error = self.call(name, arguments)
        assert not is_error, (name, payload)
        return payload

    def log_state(self) -> tuple[int, int]:
        health = self.store.get_system_health()
        return health["log_size"], health["last_sequence"]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(tmp_path_factory.mktemp("every-tool") / "data")
    yield h
    h.relay.close()
    h.store.close()


def _bases(h: Harness) -> dict[str, dict[str, Any]]:
    """For each tool (and read_messages parameter), valid arguments in which a parameter matters:
    read_messages validates only the parameters of the requested view."""
    mid = h.live[-1]
    history = {"view": "history", "session_id": "s1"}
    content = {"view": "content", "message_id": mid}
    context = {"view": "context", "message_id": mid}
    return {
        "write_message": {"session_id": "fuzz", "role": "user", "content": "base"},
        "update_message": {"message_id": mid},
        "search_messages": {"query": "fuzz"},
        "delete_message": {"message_id": mid},
        "rebuild_index": {},
        "get_system_health": {},
        "recall": {"query": "fuzz", "budget_tokens": 300},
        "start_session": {"budget_tokens": 300},
        "list_tags": {},
        "remember": {"content": "remember base", "session_id": "fuzz"},
        "list_deleted": {},
        "restore_message": {"message_id": h.deleted[0]},
        **{f"read_messages.{p}": history for p in ("view", "limit", "cursor", "session_id", "order")},
        "read_messages.snippet_bytes": {"view": "sessions"},
        **{f"read_messages.{p}": content for p in ("message_id", "content_offset", "content_limit", "expected_revision")},
        **{f"read_messages.{p}": context for p in ("before", "after", "relation_depth", "relation_types_json")},
    }


def _wrong_values(h: Harness, tool: str, param: str, schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, value) pairs that must all be refused with a VALIDATION_ERROR naming `param`."""
    values: list[tuple[str, Any]] = [("array", []), ("array of one", [1]), ("object", {"a": 1}),
                                     ("nested object", {"a": {"b": [None]}})]
    if schema["type"] == "integer":
        values += [("string", "5"), ("empty string", ""), ("float", 5.0), ("fraction", 1.5), ("true", True),
                   ("false", False), ("below minimum", schema["minimum"] - 1), ("negative", -1 if schema["minimum"] >= 0 else -(2**40)),
                   ("huge negative", -(2**70)), ("nan", float("nan")), ("inf", float("inf"))]
        if "maximum" in schema:
            values += [("above maximum", schema["maximum"] + 1), ("2**63", 2**63), ("huge", 2**70)]
        return values
    values += [("integer", 12345), ("zero", 0), ("float", 1.5), ("true", True), ("false", False)]
    if "enum" in schema:
        values += [("not in enum", "bogus"), ("enum upper-case", schema["enum"][0].upper()), ("lone surrogate", "\ud800")]
    if schema.get("minLength", 0) >= 1:
        values.append(("empty", ""))
    if param == "message_id":
        values += [("not a ULID", "not-a-ulid"), ("lower-case ULID", h.live[0].lower()), ("27 chars", h.live[0] + "0"),
                   ("overflowing ULID", "8" + h.live[0][1:]), ("lone surrogate", "\udc00" * 26)]
    if param in ("session_id", "content", "query"):
        values += [("lone surrogate", "ok \ud800"), ("huge", BIG)]
    if param.endswith("_json"):
        values += [("invalid JSON", "{not json"), ("truncated JSON", '{"tags": ['), ("deep nesting", "[" * 100_000 + "]" * 100_000),
                   ("lone surrogate in the JSON", '{"summary": "\\ud800"}' if param != "relation_types_json" else '["\\udc00"]'),
                   ("unescaped lone surrogate", "\ud800"), ("huge", BIG)]
        values.append(("wrong JSON type", "{}" if param == "relation_types_json" else "[]"))
    if param == "metadata_json":
        values += [("unknown field", '{"colour": "red"}'), ("importance float", '{"importance": 50.0}'),
                   ("importance string", '{"importance": "50"}'), ("importance huge", '{"importance": 1e400}'),
                   ("tags not an array", '{"tags": "t"}'), ("relation to a bad id", '{"relations":[{"type":"derived_from","message_id":"x"}]}')]
    if param == "filters_json":
        values += [(f"filter {text[:40]}", text) for text in BAD_FILTERS]
    if (tool, param) in CURSOR_PARAMS:
        values += [("forged", "AAAA"), ("forged long", "QUFB" * 100), ("not base64", "!!!!"), ("huge", BIG),
                   ("lone surrogate", "\ud800")]
        for kind, cursor in h.cursors.items():
            values += [(f"{kind} cursor truncated", cursor[:-3]), (f"{kind} cursor tampered", _tamper(cursor)),
                       (f"{kind} cursor doubled", cursor + cursor)]
    if param == "relation_types_json":
        values += [("unknown type", '["bogus"]'), ("not strings", "[1]")]
    return values


def _tamper(cursor: str) -> str:
    i = len(cursor) // 2
    return cursor[:i] + ("A" if cursor[i] != "A" else "B") + cursor[i + 1:]


def _cases(h: Harness) -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """(tool, label, arguments, field the error must name)."""
    bases = _bases(h)
    for spec in EVERY_TOOL.specs:
        base = bases.get(spec.name, {})
        yield spec.name, "extra field", {**base, "unexpected": 1}, "unexpected"
        for param in spec.required:
            args = dict(base)
            del args[param]
            yield spec.name, f"missing {param}", args, param
            yield spec.name, f"null {param}", {**args, param: None}, param
        for param, schema in spec.input_schema["properties"].items():
            for label, value in _wrong_values(h, spec.name, param, schema):
                yield spec.name, f"{param}: {label}", {**bases.get(f"{spec.name}.{param}", base), param: value}, param
    # Cursors of one listing in another: each listing refuses every other kind's cursor.
    uses = {"history asc": ("read_messages", {"session_id": "s1", "limit": 2}, "cursor"),
            "sessions": ("read_messages", {"view": "sessions", "limit": 1}, "cursor"),
            "search": ("search_messages", {"query": "fuzz", "limit": 2}, "cursor"),
            "since": ("start_session", {"budget_tokens": 200}, "since"),
            "tags": ("list_tags", {"limit": 2}, "cursor"),
            "deleted": ("list_deleted", {"limit": 2}, "cursor")}
    for owner, (tool, args, param) in uses.items():
        for kind, cursor in h.cursors.items():
            if kind != owner and not {kind, owner} <= {"history asc", "history desc"}:
                yield tool, f"{kind} cursor given to {owner}", {**args, param: cursor}, param
    yield "read_messages", "history cursor of another session", {"session_id": "s2", "cursor": h.cursors["history asc"]}, "cursor"
    yield "read_messages", "history asc cursor in desc order", {"session_id": "s1", "order": "desc", "cursor": h.cursors["history asc"]}, "cursor"
    yield "read_messages", "history desc cursor in asc order", {"session_id": "s1", "cursor": h.cursors["history desc"]}, "cursor"
    yield "read_messages", "sessions asc cursor in desc order", {"view": "sessions", "order": "desc", "cursor": h.cursors["sessions"]}, "cursor"
    yield "search_messages", "search cursor for another query", {"query": "word3", "cursor": h.cursors["search"]}, "cursor"
    yield "search_messages", "search cursor with other filters", {"query": "fuzz", "filters_json": '{"roles":["user"]}', "cursor": h.cursors["search"]}, "cursor"
    yield "list_deleted", "deleted cursor for one session", {"session_id": "s0", "cursor": h.cursors["deleted"]}, "cursor"
    # Well-typed but refused.
    yield "restore_message", "a live message", {"message_id": h.live[0]}, "message_id"
    yield "read_messages", "content_offset inside a character", {"view": "content", "message_id": h.live[0], "content_offset": 19}, "content_offset"


def _check_error(payload: dict[str, Any]) -> str:
    """The spec's error shape, exactly; returns the code."""
    assert set(payload) == {"status", "error"} and payload["status"] == "ERROR", payload
    error = payload["error"]
    assert set(error) == {"code", "message"} and isinstance(error["message"], str) and error["message"], payload
    assert error["code"] in SPEC_CODES, payload  # never INTERNAL_ERROR
    assert len(error["message"]) < 1000  # a huge argument is never echoed back
    return error["code"]


@pytest.mark.parametrize("via", ["owner", "relay"])
def test_every_wrong_argument_of_every_tool_is_refused_and_writes_nothing(harness: Harness, via: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    failures = []
    count = 0
    with caplog.at_level(logging.ERROR):
        for tool, label, arguments, field in _cases(harness):
            count += 1
            before = harness.log_state()
            payload, is_error = harness.call(tool, arguments, via)
            after = harness.log_state()
            try:
                assert is_error
                assert _check_error(payload) == "VALIDATION_ERROR"
                assert field in payload["error"]["message"]
                assert before == after
            except AssertionError:
                failures.append((tool, label, json.dumps(payload)[:300], before, after))
    assert not failures, "\n".join(map(str, failures))
    assert count > 800  # the generator really produced the matrix (12 tools, every argument)
    assert "Traceback" not in caplog.text
    # The cursors and data are untouched by all of it: every listing still pages.
    assert harness.ok("read_messages", {"session_id": "s1", "limit": 2, "cursor": harness.cursors["history asc"]})["history"]
    assert harness.ok("list_tags", {"cursor": harness.cursors["tags"]})["tags"]
    assert len(harness.ok("list_deleted", {})["deleted"]) == len(harness.deleted)


@pytest.mark.parametrize("filters", FAR_TIMES_THAT_ARE_FINE)
@pytest.mark.parametrize("tool", ["search_messages", "recall"])
def test_far_but_well_formed_times_are_accepted(harness: Harness, tool: str, filters: str) -> None:
    args = {"query": "fuzz", "filters_json": filters}
    if tool == "recall":
        args["budget_tokens"] = 500
    harness.ok(tool, args)


@pytest.mark.parametrize("budget", [1, 2, 500_000])
@pytest.mark.parametrize("tool", ["recall", "start_session"])
def test_budget_tokens_at_the_edges(harness: Harness, tool: str, budget: int) -> None:
    args: dict[str, Any] = {"budget_tokens": budget}
    if tool == "recall":
        args["query"] = "fuzz"
    before = harness.log_state()
    payload = harness.ok(tool, args)
    assert len(json.dumps(payload, ensure_ascii=False).encode()) < max(4096, budget * 4 * 2)
    assert harness.log_state() == before  # both only read


# --- Hypothesis: random arguments -------------------------------------------------------------

def _surrogates() -> st.SearchStrategy[str]:
    return st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)


def _hostile(h: Harness) -> st.SearchStrategy[Any]:
    scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**80), max_value=2**80)
               | st.sampled_from([0, 1, -1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**30])
               | st.floats() | st.text(max_size=30) | _surrogates()
               | st.builds(lambda a, b: a + b, st.text(max_size=5), _surrogates())
               | st.sampled_from(["", "5", "-1", "1e3", "null", "{}", "[]", "asc", "desc", "history", "sessions",
                                  "content", "context", "user", "bogus", *BAD_FILTERS, *FAR_TIMES_THAT_ARE_FINE])
               | st.sampled_from([*h.live, *h.deleted, *h.cursors.values()])
               | st.sampled_from(list(h.cursors.values())).map(lambda c: c[: len(c) // 2]))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _random_call(h: Harness, data: st.DataObject, tool: str) -> None:
    spec = EVERY_TOOL.by_name[tool]
    params = sorted(spec.parameters)
    arguments = data.draw(st.dictionaries(st.sampled_from([*params, "junk"]), _hostile(h), max_size=5))
    # Half the time start from valid required arguments, so that the later checks are reached.
    if data.draw(st.booleans()):
        arguments = {**_bases(h).get(tool, {}), **arguments}
    via = data.draw(st.sampled_from(["owner", "relay"]))
    before = h.log_state()
    payload, is_error = h.call(tool, arguments, via)
    if is_error:
        _check_error(payload)
        assert h.log_state() == before, (tool, arguments, payload)
    else:
        # (search_messages and read_messages answer without a status, as the contract has it)
        assert payload.get("status") in ("OK", "NOT_FOUND", None) and "error" not in payload, payload


RANDOM_TOOLS = [name for name in EVERY_TOOL.by_name if name != "rebuild_index"]


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tool=st.sampled_from(RANDOM_TOOLS), data=st.data())
def test_random_arguments_to_every_tool(harness: Harness, tool: str, data: st.DataObject) -> None:
    _random_call(harness, data, tool)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_search_and_recall_filters(harness: Harness, data: st.DataObject) -> None:
    """filters_json built key by key from odd values: refused cleanly or answered."""
    times = st.integers(min_value=-(2**64), max_value=2**64) | st.floats() | st.text(max_size=30) | st.sampled_from(
        ["2026-13-01", "1e3", "2026-01-01T00:00:00", "2026-01-01T00:00:00Z", "9999-12-31T23:59:59+14:00",
         "1969-12-31T23:59:59Z", "2026-06-01T12:00:00.999999-23:59", "2026-01-01T00:00:00Z\x00"])
    flt = data.draw(st.dictionaries(st.sampled_from(["after", "before", "roles", "kinds", "tiers", "tags"]),
                                    times | st.lists(st.sampled_from(["user", "assistant", "system", "x", "semantic", "long"])
                                                     | times, max_size=3) | st.none(), max_size=4))
    tool = data.draw(st.sampled_from(["search_messages", "recall"]))
    args: dict[str, Any] = {"query": "fuzz", "filters_json": json.dumps(flt)}
    if tool == "recall":
        args["budget_tokens"] = 300
    if data.draw(st.booleans()):
        args["cursor" if tool == "search_messages" else "limit"] = "" if tool == "search_messages" else 3
    before = harness.log_state()
    payload, is_error = harness.call(tool, args)
    if is_error:
        assert _check_error(payload) == "VALIDATION_ERROR" and "filters_json" in payload["error"]["message"]
        assert harness.log_state() == before


# --- over stdio: convmem serve --toolsets all -------------------------------------------------

@pytest.fixture(scope="module")
def stdio_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawStdioServer]:
    raw = RawStdioServer(tmp_path_factory.mktemp("fuzz-all") / "data", "--toolsets", "all")
    raw.initialize()
    yield raw
    assert raw.close() == 0
    assert "Traceback" not in raw.stderr_text()


def _call_escaped(server: RawStdioServer, name: str, arguments: Any) -> dict[str, Any]:
    """tools/call with the JSON ASCII-escaped, so that a lone surrogate travels as `\\ud800` (valid
    JSON) rather than as bytes that are not UTF-8."""
    request_id = server.next_id()
    server.send_line(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                                 "params": {"name": name, "arguments": arguments}}).encode("ascii"))
    return server.answer(request_id)


def _stdio_log_state(server: RawStdioServer) -> tuple[int, int]:
    health = server.health()
    return health["log_size"], health["last_sequence"]


def test_the_matrix_over_stdio_with_every_toolset(stdio_server: RawStdioServer, harness: Harness) -> None:
    """A sample of the matrix over MCP (the same store cannot be shared, so ids and cursors are
    the harness's: foreign cursors are as invalid here as forged ones)."""
    _, is_error = stdio_server.call("write_message", {"session_id": "s1", "role": "user", "content": "fuzz"})
    assert not is_error
    failures = []
    sampled = 0
    for tool, label, arguments, field in list(_cases(harness))[::5]:
        if "huge" in label or "deep nesting" in label:
            continue  # (the stdio limits have their own tests)
        if label.startswith(("a live", "content_offset inside")):
            continue  # (these name messages of the harness's store)
        sampled += 1
        before = _stdio_log_state(stdio_server)
        response = _call_escaped(stdio_server, tool, arguments)
        after = _stdio_log_state(stdio_server)
        try:
            payload = json.loads(response["result"]["content"][0]["text"])
            assert response["result"]["isError"] is True
            assert _check_error(payload) == "VALIDATION_ERROR" and field in payload["error"]["message"]
            assert before == after
        except (AssertionError, KeyError):
            failures.append((tool, label, json.dumps(response)[:300]))
    assert not failures, "\n".join(map(str, failures))
    assert sampled > 150
    stdio_server.assert_clean_stdout()


@pytest.mark.parametrize("tool, arguments", [
    ("remember", b'{"content":"a\xffb","session_id":"s"}'),
    ("write_message", b'{"content":"raw surrogate \xed\xa0\x80","session_id":"s","role":"user"}'),
    ("list_deleted", b'{"session_id":"\xc3"}'),
    ("recall", b'{"query":"\xe6\x9d","budget_tokens":10}'),
])
def test_invalid_utf8_over_stdio_is_refused_writes_nothing_and_names_the_request(
        stdio_server: RawStdioServer, tool: str, arguments: bytes) -> None:
    before = _stdio_log_state(stdio_server)
    request_id = stdio_server.next_id()
    stdio_server.send_line(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
                           % (request_id, tool.encode(), arguments))
    response = stdio_server.answer(request_id)
    assert response["error"]["code"] == -32700 and "UTF-8" in response["error"]["message"]
    assert _stdio_log_state(stdio_server) == before


# --- Hypothesis: sequences, with every cursor replayed later --------------------------------

_STEP = st.sampled_from(["write", "remember", "delete", "restore", "update", "rebuild", "reopen", "read"])


@settings(max_examples=max(10, FUZZ_EXAMPLES // 6), deadline=None)
@given(steps=st.lists(st.tuples(_STEP, st.integers(0, 2**16)), min_size=5, max_size=40))
def test_sequences_with_stale_cursors_never_fail_internally(tmp_path_factory: pytest.TempPathFactory,
                                                            steps: list[tuple[str, int]]) -> None:
    """Writes, deletes, restores, rebuilds and reopenings, each followed by listings that replay
    cursors made before them (stale, from another listing or from before a rebuild): every
    answer is a result or a clean refusal, and a refusal writes nothing."""
    directory = tmp_path_factory.mktemp("sequence") / "data"
    store = MemoryStore.open(directory)
    ids: list[str] = []
    cursors: list[str] = []
    sessions = ("a", "b")

    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        before = store.get_system_health()["log_size"]
        outcome = run_tool(store, name, args, EVERY_TOOL)
        payload = json.loads(outcome.text)
        if outcome.is_error:
            assert _check_error(payload) in ("VALIDATION_ERROR", "NOT_FOUND", "CONFLICT"), (name, args, payload)
            assert store.get_system_health()["log_size"] == before, (name, args)
        for key in ("nextCursor", "cursor"):
            if isinstance(payload.get(key), str):
                cursors.append(payload[key])
        return payload

    try:
        for step, n in steps:
            pick = ids[n % len(ids)] if ids else "0" * 26
            if step in ("write", "remember"):
                meta = {"tags": [("t1", "t2", "é")[n % 3]], "summary": "" if n % 2 else "s"}
                if ids and n % 4 == 0:
                    meta["relations"] = [{"type": "derived_from", "message_id": pick}]
                args = {"session_id": sessions[n % 2], "content": ("x", "東京 y", "dup")[n % 3] * (1 + n % 3),
                        "metadata_json": json.dumps(meta)}
                if step == "write":
                    args["role"] = "user"
                payload = call("write_message" if step == "write" else "remember", args)
                if "message" in payload:
                    ids.append(payload["message"]["message_id"])
            elif step == "delete":
                call("delete_message", {"message_id": pick})
            elif step == "restore":
                call("restore_message", {"message_id": pick})
            elif step == "update":
                call("update_message", {"message_id": pick, "content": "u" * (1 + n % 2), "expected_revision": 1 + n % 3})
            elif step == "rebuild":
                call("rebuild_index", {})
            elif step == "reopen":
                store.close()
                store = MemoryStore.open(directory)
            old = cursors[n % len(cursors)] if cursors else None
            for name, args, param in (
                    ("read_messages", {"session_id": sessions[n % 2], "limit": 1, "order": ("asc", "desc")[n % 2]}, "cursor"),
                    ("read_messages", {"view": "sessions", "limit": 1}, "cursor"),
                    ("search_messages", {"query": "x 東京", "limit": 1}, "cursor"),
                    ("start_session", {"budget_tokens": 1 + n % 300}, "since"),
                    ("list_tags", {"limit": 1}, "cursor"),
                    ("list_deleted", {"limit": 1}, "cursor"),
                    ("recall", {"query": "dup", "budget_tokens": 1 + n % 500}, None)):
                if param is not None:
                    args = {**args, param: old if old is not None and n % 3 else ("" if name == "search_messages" else None)}
                    args = {k: v for k, v in args.items() if v is not None}
                call(name, args)
    finally:
        store.close()

"""Fuzzing the seven tools' arguments, end to end over stdio, plus the tool layer in-process.

Every malformed call must be answered with the right error code, must write nothing (the log's
size and last sequence number are compared before and after), and must leave the server serving.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from convmem.errors import ConvMemError
from convmem.server import build_server
from convmem.tools import TOOL_SPECS, TOOLS_BY_NAME, check_arguments, run_tool
from e2e_helpers import RawStdioServer, assert_error, payload_of

TEN_MB = 10 * 1000 * 1000
DEEP = 100_000
SPEC_CODES = {"VALIDATION_ERROR", "NOT_FOUND", "CONFLICT", "BUSY", "IO_ERROR", "CORRUPT_STORE", "INTERNAL_ERROR"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawStdioServer]:
    raw = RawStdioServer(tmp_path_factory.mktemp("fuzz") / "data")
    raw.initialize()
    yield raw
    assert raw.close() == 0
    assert "Traceback" not in raw.stderr_text()


@pytest.fixture(scope="module")
def message_id(server: RawStdioServer) -> str:
    payload, is_error = server.call(
        "write_message",
        {"session_id": "fuzz", "role": "user", "content": "fuzz target 東京", "metadata_json": '{"tags":["t"]}'},
    )
    assert not is_error, payload
    return payload["message"]["message_id"]


def _bases(mid: str) -> dict[str, dict[str, Any]]:
    """For each tool and parameter, valid arguments in which that parameter matters.

    read_messages validates only the parameters of the requested view, so a mutation of a
    content-view parameter is made on a content-view call, and so on.
    """
    history = {"view": "history", "session_id": "fuzz"}
    content = {"view": "content", "message_id": mid}
    context = {"view": "context", "message_id": mid}
    return {
        "write_message": {"session_id": "fuzz", "role": "user", "content": "base"},
        "update_message": {"message_id": mid, "content": "fuzz target 東京"},  # same content: a no-op
        "search_messages": {"query": "fuzz"},
        "delete_message": {"message_id": mid},
        "rebuild_index": {},
        "get_system_health": {},
        **{f"read_messages.{p}": history for p in ("view", "limit", "cursor", "session_id")},
        **{f"read_messages.{p}": content for p in ("message_id", "content_offset", "content_limit", "expected_revision")},
        **{f"read_messages.{p}": context for p in ("before", "after", "relation_depth", "relation_types_json")},
    }


def _base_for(bases: dict[str, dict[str, Any]], tool: str, param: str | None) -> dict[str, Any]:
    return dict(bases.get(f"{tool}.{param}", bases.get(tool, {})))


def _bad_values(tool: str, param: str, schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, value) pairs that must all be refused with VALIDATION_ERROR."""
    values: list[tuple[str, Any]] = [("list", []), ("object", {"a": 1})]
    if schema["type"] == "integer":
        values += [("string", "5"), ("float", 5.0), ("fraction", 1.5), ("true", True), ("false", False)]
        values += [("below minimum", schema["minimum"] - 1), ("huge negative", -(2**70))]
        if "maximum" in schema:
            values += [("above maximum", schema["maximum"] + 1), ("huge", 2**70)]
    else:
        values += [("integer", 12345), ("float", 1.5), ("true", True)]
        if "enum" in schema:
            values.append(("not in enum", "bogus"))
        if schema.get("minLength", 0) >= 1:
            values.append(("empty", ""))
        if param == "message_id":
            values += [("not a ULID", "not-a-ulid"), ("lower-case ULID", "01arz3ndektsv4rrffq69g5fav")]
        if param.endswith("_json"):
            values += [("invalid JSON", "{not json"), ("truncated JSON", '{"tags": ['), ("deep nesting", "[" * DEEP + "]" * DEEP)]
            values.append(("JSON lone surrogate", '{"summary": "\\ud800"}' if param != "relation_types_json" else '["\\udc00"]'))
            values.append(("wrong JSON type", "{}" if param == "relation_types_json" else "[]"))
        if param == "metadata_json":
            values += [
                ("unknown metadata field", '{"colour": "red"}'),
                ("importance float", '{"importance": 50.0}'),
                ("importance bool", '{"importance": true}'),
                ("importance huge", '{"importance": 100000000000000000000000}'),
                ("deeply nested metadata", '{"tags": ' + "[" * 5000 + "]" * 5000 + "}"),
            ]
        if param in ("session_id", "content", "query", "metadata_json", "filters_json", "cursor", "message_id"):
            values.append(("10 MB string", "x" * TEN_MB))
    if param in TOOLS_BY_NAME[tool].required:
        values.append(("null for a required parameter", None))
    return values


def _cases(mid: str) -> Iterator[tuple[str, str, dict[str, Any], set[str]]]:
    bases = _bases(mid)
    for spec in TOOL_SPECS:
        yield spec.name, "extra field", {**_base_for(bases, spec.name, None), "unexpected": 1}, {"VALIDATION_ERROR"}
        for param in spec.required:
            args = _base_for(bases, spec.name, param)
            del args[param]
            yield spec.name, f"missing {param}", args, {"VALIDATION_ERROR"}
        for param, schema in spec.input_schema["properties"].items():
            for label, value in _bad_values(spec.name, param, schema):
                yield spec.name, f"{param}: {label}", {**_base_for(bases, spec.name, param), param: value}, {"VALIDATION_ERROR"}
    # Well-typed but impossible values.
    yield "update_message", "expected_revision: huge", {"message_id": mid, "content": "x", "expected_revision": 2**70}, {"CONFLICT"}
    yield "read_messages", "content_offset: huge", {"view": "content", "message_id": mid, "content_offset": 2**70}, {"VALIDATION_ERROR"}
    yield "read_messages", "content_offset: inside a character", {"view": "content", "message_id": mid, "content_offset": 13}, {"VALIDATION_ERROR"}
    yield "read_messages", "cursor: forged", {"view": "history", "session_id": "fuzz", "cursor": "AAAA"}, {"VALIDATION_ERROR"}


def _log_state(server: RawStdioServer) -> tuple[int, int]:
    health = server.health()
    return health["log_size"], health["last_sequence"]


def test_every_malformed_argument_is_refused_and_writes_nothing(server: RawStdioServer, message_id: str) -> None:
    failures = []
    count = 0
    for tool, label, arguments, codes in _cases(message_id):
        count += 1
        before = _log_state(server)
        payload, is_error = server.call(tool, arguments)
        after = _log_state(server)
        code = payload.get("error", {}).get("code")
        if not is_error or code not in codes or before != after:
            failures.append((tool, label, payload if len(json.dumps(payload)) < 500 else "<large>", before, after))
        elif label.startswith(("10 MB", "JSON lone")):
            assert "x" * 100 not in payload["error"]["message"]
    assert not failures, failures
    assert count > 150  # the generator really produced the matrix
    # The target message is untouched by all of it.
    history, _ = server.call("read_messages", {"session_id": "fuzz"})
    assert [(m["message_id"], m["revision"]) for m in history["history"]] == [(message_id, 1)]


@pytest.mark.parametrize(
    ("tool", "arguments_json"),
    [
        ("write_message", b'{"session_id":"\\ud800","role":"user","content":"x"}'),
        ("write_message", b'{"session_id":"s","role":"user","content":"ok \\udfff then"}'),
        ("update_message", b'{"message_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","content":"\\ud83d"}'),
        ("search_messages", b'{"query":"\\udc00\\ud800"}'),
        ("read_messages", b'{"view":"history","session_id":"a\\ud800"}'),
        ("delete_message", b'{"message_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","session_id":"\\udead"}'),
        ("get_system_health", b'{"\\ud800":1}'),
        ("write_message", b'{"session_id":"s","role":"user","content":1e400}'),
        ("read_messages", b'{"view":"history","session_id":"fuzz","limit":1e400}'),
        ("read_messages", b'{"view":"history","session_id":"fuzz","limit":-0.0}'),
        ("search_messages", b'{"query":"fuzz","limit":' + b"9" * 500 + b"}"),
        ("write_message", b'{"session_id":"s","role":"user","content":' + b"[" * 300 + b"]" * 300 + b"}"),
    ],
)
def test_raw_json_edge_cases(server: RawStdioServer, tool: str, arguments_json: bytes) -> None:
    before = _log_state(server)
    payload, is_error = server.call_raw_arguments(tool, arguments_json)
    assert_error(payload, is_error, "VALIDATION_ERROR")
    assert "\\ud" not in payload["error"]["message"]
    assert _log_state(server) == before


def test_unknown_parameter_names_are_named_but_never_huge_or_unencodable(server: RawStdioServer) -> None:
    payload, is_error = server.call("get_system_health", {"verbose": True})
    assert_error(payload, is_error, "VALIDATION_ERROR")
    assert "'verbose'" in payload["error"]["message"]
    payload, is_error = server.call("get_system_health", {"n" * TEN_MB: 1})
    assert_error(payload, is_error, "VALIDATION_ERROR")
    assert len(payload["error"]["message"]) < 300


def test_server_still_answers_after_the_fuzzing(server: RawStdioServer) -> None:
    payload, is_error = server.call("write_message", {"session_id": "after-fuzz", "role": "system", "content": "alive"})
    assert not is_error and payload["message"]["content"] == "alive"
    server.assert_clean_stdout()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tool=st.sampled_from([spec.name for spec in TOOL_SPECS if spec.name != "rebuild_index"]),
    data=st.data(),
)
def test_random_arguments_never_crash_and_errors_write_nothing(server: RawStdioServer, tool: str, data: st.DataObject) -> None:
    params = sorted(TOOLS_BY_NAME[tool].parameters | {"junk"})
    arguments = data.draw(st.dictionaries(st.sampled_from(params), json_values, max_size=4))
    before = _log_state(server)
    payload, is_error = server.call(tool, arguments)
    if is_error:
        assert payload["status"] == "ERROR" and payload["error"]["code"] in SPEC_CODES - {"INTERNAL_ERROR"}
        assert _log_state(server) == before
    else:
        assert payload.get("status") in ("OK", "NOT_FOUND", None)


# --- the tool layer in-process ----------------------------------------------------------------


class ExplodingStore:
    """A store whose every method fails the way a bug would."""

    def __getattr__(self, name: str) -> Any:
        def method(**kwargs: Any) -> Any:
            raise RuntimeError("secret internal state /home/user/.local/share/convmem")

        return method


class EchoStore:
    def __getattr__(self, name: str) -> Any:
        return lambda **kwargs: {"status": "OK", "tool": name, "kwargs": kwargs}


def test_unexpected_exception_is_internal_error_without_details(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        outcome = run_tool(ExplodingStore(), "get_system_health", {})
    assert outcome.is_error
    assert json.loads(outcome.text) == {"status": "ERROR", "error": {"code": "INTERNAL_ERROR", "message": "internal error"}}
    assert "secret" in caplog.text and "Traceback" in caplog.text  # the log keeps the details


def test_unencodable_store_result_is_internal_error() -> None:
    class Surrogate:
        def get_system_health(self) -> dict[str, Any]:
            return {"status": "OK", "bad": "\ud800"}

    outcome = run_tool(Surrogate(), "get_system_health", None)
    assert outcome.is_error and json.loads(outcome.text)["error"]["code"] == "INTERNAL_ERROR"


def test_results_are_compact_utf8_json() -> None:
    outcome = run_tool(EchoStore(), "search_messages", {"query": "東京", "limit": 3})
    assert not outcome.is_error
    assert outcome.text == '{"status":"OK","tool":"search_messages","kwargs":{"query":"東京","limit":3}}'


def test_check_arguments_rules() -> None:
    spec = TOOLS_BY_NAME["delete_message"]
    assert check_arguments(spec, {"message_id": "X", "session_id": None}) == {"message_id": "X", "session_id": None}
    with pytest.raises(ConvMemError) as missing:
        check_arguments(spec, None)
    assert missing.value.code == "VALIDATION_ERROR" and "message_id" in missing.value.message
    with pytest.raises(ConvMemError) as unknown:
        check_arguments(spec, {"message_id": "X", "b": 1, "a": 2, "\ud800": 3})
    assert "'a', 'b'" in unknown.value.message and "1 more" in unknown.value.message
    assert check_arguments(TOOLS_BY_NAME["rebuild_index"], None) == {}


@pytest.mark.parametrize("arguments", [[1, 2], "abc", 5, {1: 2}, {None: 1}, {("a",): 1}, {1: 2, "limit": 3}])
def test_arguments_that_are_not_an_object_of_names_are_refused_in_process(arguments: Any) -> None:
    """In-process callers of run_tool are not behind the SDK's check that arguments is an object:
    a list, a string or a number, or keys that are not strings, are a VALIDATION_ERROR."""
    outcome = run_tool(EchoStore(), "get_system_health", arguments)
    payload = json.loads(outcome.text)
    assert outcome.is_error and payload["error"]["code"] == "VALIDATION_ERROR"
    assert "get_system_health" in payload["error"]["message"]


def test_in_process_server_keeps_serving_after_an_internal_error() -> None:
    class FailsOnce(EchoStore):
        failed = False

        def get_system_health(self) -> dict[str, Any]:
            if not self.failed:
                self.failed = True
                raise MemoryError
            return {"status": "OK"}

    async def scenario() -> None:
        async with Client(build_server(FailsOnce(), "test")) as client:
            payload, is_error = payload_of(await client.call_tool("get_system_health", {}))
            assert is_error and payload["error"] == {"code": "INTERNAL_ERROR", "message": "internal error"}
            payload, is_error = payload_of(await client.call_tool("get_system_health", {}))
            assert (payload, is_error) == ({"status": "OK"}, False)
            payload, is_error = payload_of(await client.call_tool("delete_message", {"message_id": "X"}))
            assert not is_error and payload["kwargs"] == {"message_id": "X"}

    anyio.run(scenario)

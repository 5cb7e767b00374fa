"""The Python API as an editor and a type checker see it: real parameter and return types on
every public method of MemoryStore and SharedStore (the same signatures on both), `metadata`
as a dict beside metadata_json, and the run-time checks still answering wrong types."""
from __future__ import annotations

import importlib.resources
import inspect
import json
import typing
from typing import Any

import pytest

from convmem import MemoryStore
from convmem.errors import ConvMemError
from convmem.owner import SharedStore

TOOLS = ("write_message", "update_message", "read_messages", "search_messages",
         "delete_message", "rebuild_index", "get_system_health")
SHARED_API = TOOLS + ("import_messages", "import_message_batch", "export_messages", "checkpoint",
                      "verify", "backup", "close")


def public_methods(cls: type) -> list[str]:
    return sorted(name for name, value in vars(cls).items()
                  if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, classmethod)))


def mentions_any(hint: Any) -> bool:
    """Whether `hint` is Any or has Any anywhere inside (dict[str, Any], Iterable[Any], ...)."""
    if hint is Any:
        return True
    if typing.is_typeddict(hint):
        return False  # (a TypedDict's own fields may hold JSON values)
    return any(mentions_any(arg) for arg in typing.get_args(hint))


@pytest.mark.parametrize("cls", [MemoryStore, SharedStore], ids=lambda c: c.__name__)
def test_every_public_method_has_real_types(cls):
    assert set(TOOLS) <= set(public_methods(cls))
    for name in public_methods(cls):
        func = getattr(cls, name)
        hints = typing.get_type_hints(func)  # (resolves every annotation: none is a stale name)
        assert "return" in hints, f"{cls.__name__}.{name} has no return type"
        for param in inspect.signature(func).parameters.values():
            if param.name in ("self", "cls"):
                continue
            assert param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL), (name, param)
            assert param.name in hints, f"{cls.__name__}.{name}({param.name}) is not annotated"
            assert not mentions_any(hints[param.name]), f"{cls.__name__}.{name}({param.name}): {hints[param.name]}"


def test_the_any_check_sees_through_generics():
    assert mentions_any(Any) and mentions_any(dict[str, Any]) and mentions_any(list[Any] | None)
    assert not mentions_any(str | None) and not mentions_any(dict[str, int])


def test_required_tool_arguments_have_no_default():
    """An editor flags a call without them; MCP's tools/list required lists say the same."""
    from convmem.tools.toolsets import EVERY_TOOL

    TOOLS_BY_NAME = EVERY_TOOL.by_name  # the seven as --toolsets lists them, and every toolset's
    for tool in TOOLS_BY_NAME:
        params = inspect.signature(getattr(MemoryStore, tool)).parameters
        required = {n for n, p in params.items() if n != "self" and p.default is inspect.Parameter.empty}
        assert required == set(TOOLS_BY_NAME[tool].required), tool
        # every tools/list argument is a keyword of the method, and only metadata is extra
        assert set(params) - {"self"} - TOOLS_BY_NAME[tool].parameters <= {"metadata"}, tool
        assert TOOLS_BY_NAME[tool].parameters <= set(params), tool


@pytest.mark.parametrize("name", SHARED_API)
def test_shared_store_is_call_compatible(name):
    assert inspect.signature(getattr(SharedStore, name)) == inspect.signature(getattr(MemoryStore, name))
    assert typing.get_type_hints(getattr(SharedStore, name)) == typing.get_type_hints(getattr(MemoryStore, name))


def test_py_typed_is_shipped():
    assert importlib.resources.files("convmem").joinpath("py.typed").is_file()


# -- metadata as a dict -------------------------------------------------------------------------
META = {"tags": ["project", "決定"], "memory_kind": "semantic", "importance": 80,
        "relations": [{"type": "related_to", "message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}]}


def test_metadata_dict_is_the_same_as_its_json(store):
    a = store.write_message(session_id="s", role="user", content="x", metadata=META)["message"]
    b = store.write_message(session_id="s", role="user", content="x",
                            metadata_json=json.dumps(META))["message"]
    assert a["metadata"] == b["metadata"]
    assert a["metadata"]["tags"] == ["project", "決定"] and a["metadata"]["importance"] == 80
    updated = store.update_message(message_id=a["message_id"], metadata={"importance": 10})
    assert updated["changed"] and updated["message"]["metadata"]["importance"] == 10
    assert updated["message"]["metadata"]["tags"] == ["project", "決定"]  # other fields kept


@pytest.mark.parametrize("call", [
    lambda s: s.write_message(session_id="s", role="user", content="x", metadata={"importance": 1},
                              metadata_json='{"importance": 2}'),
    lambda s: s.write_message(session_id="s", role="user", content="x", metadata=[("importance", 1)]),
    lambda s: s.write_message(session_id="s", role="user", content="x", metadata='{"importance": 1}'),
    lambda s: s.write_message(session_id="s", role="user", content="x", metadata={"importance": "high"}),
    lambda s: s.write_message(session_id="s", role="user", content="x", metadata={3: "x"}),
    lambda s: s.write_message(session_id=5, role="user", content="x"),  # annotations do not check
    lambda s: s.write_message(session_id="s", role="robot", content="x"),
    lambda s: s.search_messages(query=b"bytes"),
    lambda s: s.read_messages(view="history", session_id="s", limit="10"),
])
def test_wrong_types_are_validation_errors_and_write_nothing(store, call):
    before = store.get_system_health()["last_sequence"]
    with pytest.raises(ConvMemError) as info:
        call(store)
    assert info.value.code == "VALIDATION_ERROR"
    assert store.get_system_health()["last_sequence"] == before


def test_both_metadata_forms_is_an_error_that_says_so(store):
    m = store.write_message(session_id="s", role="user", content="x")["message"]
    with pytest.raises(ConvMemError) as info:
        store.update_message(message_id=m["message_id"], metadata={"importance": 1},
                             metadata_json='{"importance": 2}')
    assert info.value.message == "give metadata or metadata_json, not both"
    with pytest.raises(ConvMemError) as info:
        store.write_message(session_id="s", role="user", content="x", metadata={"importance": "high"})
    assert info.value.message.startswith("metadata.importance ")


def test_metadata_dict_through_a_relayed_shared_store(tmp_path):
    with SharedStore.open(tmp_path) as owner, SharedStore.open(tmp_path) as relay:
        assert owner.is_owner and not relay.is_owner
        m = relay.write_message(session_id="s", role="user", content="x", metadata=META)["message"]
        assert m["metadata"]["memory_kind"] == "semantic"
        with pytest.raises(ConvMemError) as info:
            relay.write_message(session_id="s", role="user", content="x", metadata={}, metadata_json="{}")
        assert info.value.code == "VALIDATION_ERROR"
        found = owner.search_messages(query="x", filters_json='{"tags":["決定"]}')["results"]
        assert [r["message_id"] for r in found] == [m["message_id"]]


# -- read_messages: what each view needs ---------------------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    ({}, "view=history needs session_id (or use view=sessions to list sessions)"),
    ({"view": "history"}, "view=history needs session_id (or use view=sessions to list sessions)"),
    ({"view": "content"}, "view=content needs message_id (a message's id, from search_messages or view=history)"),
    ({"view": "context"}, "view=context needs message_id (a message's id, from search_messages or view=history)"),
])
def test_each_view_names_its_missing_argument(store, args, message):
    with pytest.raises(ConvMemError) as info:
        store.read_messages(**args)
    assert (info.value.code, info.value.message) == ("VALIDATION_ERROR", message)


def test_the_view_hint_reaches_mcp_clients(store):
    from convmem.tools import run_tool

    outcome = run_tool(store, "read_messages", {})
    assert outcome.is_error
    assert json.loads(outcome.text)["error"] == {
        "code": "VALIDATION_ERROR",
        "message": "view=history needs session_id (or use view=sessions to list sessions)"}
    # a value of the wrong type is still named as before
    outcome = run_tool(store, "read_messages", {"session_id": 7})
    assert json.loads(outcome.text)["error"]["message"] == "session_id must be a string"
    assert not run_tool(store, "read_messages", {"view": "sessions"}).is_error


# -- bulk import, as the README describes it ------------------------------------------------------
def _item(i: int, **extra: Any) -> dict[str, Any]:
    return {"session_id": "bulk", "role": "user", "content": f"item {i}", **extra}


def test_import_messages_returns_the_count_and_stops_at_the_first_bad_group(store):
    assert store.import_messages([_item(i) for i in range(5)], batch_size=2) == 5
    read: list[int] = []

    def items():
        for i in range(10):
            read.append(i)
            yield _item(i, role="robot") if i == 3 else _item(i)

    with pytest.raises(ConvMemError) as info:
        store.import_messages(items(), batch_size=2)
    assert info.value.code == "VALIDATION_ERROR" and "role" in info.value.message
    history = store.read_messages(session_id="bulk")["history"]
    # group [0, 1] stays imported; group [2, 3] is not written at all; nothing after it is read
    assert len(history) == 5 + 2
    assert read == [0, 1, 2, 3]


def test_import_message_batch_answers_per_item(store):
    from convmem.api.bulk import PRESENT

    first = store.import_message_batch([_item(0, message_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")])
    assert first == [None]
    answers = store.import_message_batch(
        [_item(1), _item(2, role="robot"), _item(0, message_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")],
        existing="compare")
    assert answers[0] is None and answers[2] is PRESENT
    assert isinstance(answers[1], ConvMemError) and answers[1].code == "VALIDATION_ERROR"
    assert len(store.read_messages(session_id="bulk")["history"]) == 2  # the bad one skipped
    nothing = store.import_message_batch([_item(3), _item(4, content="")], all_or_nothing=True)
    assert nothing[0] is None and nothing[1].code == "VALIDATION_ERROR"
    assert len(store.read_messages(session_id="bulk")["history"]) == 2


def test_a_required_argument_given_as_none_is_named_through_a_shared_store(tmp_path):
    with SharedStore.open(tmp_path) as owner, SharedStore.open(tmp_path) as relay:
        for store in (owner, relay):
            with pytest.raises(ConvMemError) as info:
                store.write_message(session_id=None, role="user", content="x")  # type: ignore[arg-type]
            assert (info.value.code, info.value.message) == ("VALIDATION_ERROR", "session_id must be a string")
            with pytest.raises(ConvMemError) as info:
                store.search_messages(query=None)  # type: ignore[arg-type]
            assert info.value.code == "VALIDATION_ERROR" and info.value.message.startswith("query")

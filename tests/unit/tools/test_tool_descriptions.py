"""What the model reads in tools/list: every argument a description names is in that tool's
schema, the contract's vocabulary is listed from convmem/domain.py, and what the descriptions say
about matching is what search does."""
from __future__ import annotations

import re

import pytest

from convmem import validation as v
from convmem.domain import KINDS, RELATION_TYPES, ROLES, TIERS, VIEWS
from convmem.errors import ConvMemError
from convmem.server.app import INSTRUCTIONS
from convmem.tools.schemas import FILTER_KEYS, TOOL_SPECS, TOOLS_BY_NAME, ToolSpec, _object, _string
from convmem.validation import METADATA_FIELDS
from conftest import meta

# A word that looks like a parameter: lower-case snake_case with at least one underscore.
PARAMETER_LIKE = re.compile(r"(?<![A-Za-z0-9_])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![A-Za-z0-9_])")
TOOL_NAMES = frozenset(TOOLS_BY_NAME)
VOCABULARY = frozenset(ROLES + KINDS + TIERS + RELATION_TYPES + VIEWS)  # values, not names
# Snake_case words a description may use that are not arguments: metadata fields inside
# metadata_json, and fields of the tool's own output.
OUTPUT_FIELDS = {
    "write_message": {"message_id"},
    "update_message": set(),
    "read_messages": {"next_content_offset"},
    "search_messages": set(),
    "delete_message": set(),
    "rebuild_index": set(),
    "get_system_health": {"last_error"},
}


def texts_of(spec: ToolSpec) -> list[str]:
    return [spec.description] + [p.get("description", "") for p in spec.input_schema["properties"].values()]


def strays(spec: ToolSpec, outputs: set[str]) -> set[str]:
    """Parameter-like words in a tool's texts that are neither its arguments nor allowed."""
    allowed = spec.parameters | TOOL_NAMES | VOCABULARY | outputs
    if "metadata_json" in spec.parameters:
        allowed |= set(METADATA_FIELDS) | {"message_id"}  # (a relation's fields)
    found = {w for text in texts_of(spec) for w in PARAMETER_LIKE.findall(text)}
    return found - allowed


@pytest.mark.parametrize("spec", TOOL_SPECS, ids=lambda s: s.name)
def test_every_argument_a_description_names_is_in_the_schema(spec):
    assert strays(spec, OUTPUT_FIELDS[spec.name]) == set()


def test_the_check_catches_an_argument_the_schema_lacks():
    spec = ToolSpec("search_messages", "Search; pass snippet_bytes to cut results, see cursor_id.",
                    _object({"query": _string("Pass query_text here.")}), writes=False)
    assert strays(spec, set()) == {"snippet_bytes", "cursor_id", "query_text"}


def test_instructions_name_only_tools_arguments_and_metadata_fields():
    arguments = set().union(*(spec.parameters for spec in TOOL_SPECS))
    words = set(PARAMETER_LIKE.findall(INSTRUCTIONS))
    assert words - TOOL_NAMES - arguments - set(METADATA_FIELDS) - VOCABULARY == set()
    # the instructions introduce every tool by name
    assert TOOL_NAMES <= words


@pytest.mark.parametrize(("where", "values"), [
    (("write_message", "role"), ROLES),
    (("write_message", "metadata_json"), KINDS + TIERS + RELATION_TYPES),
    (("read_messages", "view"), VIEWS),
    (("read_messages", "relation_types_json"), RELATION_TYPES),
    (("search_messages", "filters_json"), KINDS + TIERS),
])
def test_descriptions_list_the_vocabulary(where, values):
    tool, argument = where
    text = TOOLS_BY_NAME[tool].input_schema["properties"][argument]["description"]
    listed = re.findall(r"[a-z_]+(?:\|[a-z_]+)+", text)
    # each list is written a|b|c, in the order of convmem/domain.py
    for group in (ROLES, KINDS, TIERS, RELATION_TYPES, VIEWS):
        if set(group) <= set(values):
            assert "|".join(group) in listed, (tool, argument, group)


@pytest.mark.parametrize("tool", ["write_message", "update_message"])
def test_metadata_description_names_every_metadata_field(tool):
    text = TOOLS_BY_NAME[tool].input_schema["properties"]["metadata_json"]["description"]
    assert [f for f in METADATA_FIELDS if f not in text] == []


def test_filters_description_lists_exactly_the_keys_validation_accepts():
    keys = [key for key, _ in FILTER_KEYS]
    text = TOOLS_BY_NAME["search_messages"].input_schema["properties"]["filters_json"]["description"]
    assert all(f"{key}:" in text for key in keys)
    valid = {"after": "0", "before": "1"}  # times; the other keys take arrays
    for key in keys:
        v.filters(f'{{"{key}": {valid.get(key, "[]")}}}')  # accepted
    with pytest.raises(ConvMemError) as info:
        v.filters('{"no_such_key": []}')
    allowed = info.value.message.split("allowed fields are ")[1]
    assert allowed.split(", ") == keys


def test_read_messages_description_says_what_each_view_needs():
    text = TOOLS_BY_NAME["read_messages"].description
    assert "view=history needs session_id" in text
    assert "view=content needs message_id" in text
    assert "view=context needs message_id" in text
    assert "view=sessions" in text


# -- what the descriptions claim about search, checked against search itself ------------------
def _ids(result):
    return [m["message_id"] for m in result["results"]]


def test_search_matches_any_query_word(store):
    a = store.write_message(session_id="s", role="user", content="alpha apples")["message"]["message_id"]
    b = store.write_message(session_id="s", role="user", content="beta bananas")["message"]["message_id"]
    assert set(_ids(store.search_messages(query="apples bananas"))) == {a, b}


def test_search_text_is_case_folded_but_tags_are_exact(store):
    m = store.write_message(session_id="s", role="user", content="Deploy Plan",
                            metadata_json=meta(tags=["Project"]))["message"]["message_id"]
    assert _ids(store.search_messages(query="deploy plan")) == [m]
    assert _ids(store.search_messages(query="deploy", filters_json='{"tags":["Project"]}')) == [m]
    assert _ids(store.search_messages(query="deploy", filters_json='{"tags":["project"]}')) == []


def test_min_importance_is_inclusive(store):
    low = store.write_message(session_id="s", role="user", content="note", metadata_json=meta(importance=59))
    at = store.write_message(session_id="s", role="user", content="note", metadata_json=meta(importance=60))
    found = _ids(store.search_messages(query="note", min_importance=60))
    assert found == [at["message"]["message_id"]]
    assert low["message"]["message_id"] not in found


def test_descriptions_state_the_limits_of_domain_py():
    from convmem.domain import (IMPORTANCE, MAX_RELATIONS, MAX_SESSION_BYTES, MAX_SOURCES,
                                MAX_SUMMARY_BYTES, MAX_TAG_BYTES, MAX_TAGS, MAX_TOOL_CALL_ID_BYTES)

    text = TOOLS_BY_NAME["write_message"].input_schema["properties"]["metadata_json"]["description"]
    for phrase in (f"tool_call_id (string, up to {MAX_TOOL_CALL_ID_BYTES} bytes)",
                   f"up to {MAX_TAGS} non-empty strings of up to {MAX_TAG_BYTES} bytes",
                   f"importance (integer {IMPORTANCE[0]}-{IMPORTANCE[1]}, default {IMPORTANCE[2]})",
                   f"up to {MAX_SUMMARY_BYTES} bytes", f"up to {MAX_RELATIONS} objects",
                   f"up to {MAX_SOURCES} ULIDs"):
        assert phrase in text, phrase
    assert f"1-{MAX_SESSION_BYTES} UTF-8 bytes" in TOOLS_BY_NAME["write_message"].input_schema[
        "properties"]["session_id"]["description"]

"""The validation fast paths give exactly what the full checks give: values and error messages."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from convmem import ConvMemError
from convmem import validation as v
from convmem.importers.jsonl import _shape_error
from convmem.catalog.columns import Column


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", value) or ("error", code: message)."""
    try:
        return "ok", call()
    except ConvMemError as exc:
        return "error", f"{exc.code}: {exc.message}"


class Str(str):
    pass


TRICKY_STRINGS = [
    "", "a", "x" * 255, "x" * 256, "x" * 257, "é" * 128, "é" * 129, "é" * 127 + "x",
    "é" * 127 + "xx", "😀" * 64, "😀" * 63 + "xxx", "😀" * 63 + "xxxxx", "a" * 300,
    "é" * 300, "\ud800", "a\udfffb", "é\ud800", "\x00", "日本語", Str("abc"), Str("é"),
    None, 1, 1.5, True, b"abc", ["a"], {"a": 1},
]


@pytest.mark.parametrize("min_bytes,max_bytes", [(1, 256), (0, 256), (1, 1), (0, 4)])
@pytest.mark.parametrize("value", TRICKY_STRINGS, ids=repr)
def test_string_matches_text(value, min_bytes, max_bytes):
    fast = outcome(lambda: v.string("session_id", value, min_bytes=min_bytes, max_bytes=max_bytes))
    full = outcome(lambda: v.text("session_id", value, min_bytes=min_bytes,
                                  max_bytes=max_bytes)[0])
    assert fast == full


def test_string_limits_count_utf8_bytes():
    assert v.string("content", "é" * 128, min_bytes=1, max_bytes=256) == "é" * 128
    with pytest.raises(ConvMemError, match="at most 256 UTF-8 bytes"):
        v.string("content", "é" * 128 + "x", min_bytes=1, max_bytes=256)
    with pytest.raises(ConvMemError, match="no lone surrogates"):
        v.string("content", "ok\ud800", min_bytes=1, max_bytes=256)


def reference_metadata_fields(value: Any, name: str) -> dict[str, Any]:
    """The full checks alone, field by field (what metadata_fields did before its fast paths)."""
    if not isinstance(value, dict):
        raise v.fail(f"{name} must be a JSON object")
    out = {}
    for key, val in value.items():
        if key not in v.METADATA_FIELDS:
            shown = key if len(key) <= 64 and key.isidentifier() else "(unnamed)"
            raise v.fail(f"{name}: unknown field {shown}; allowed fields are "
                         f"{', '.join(v.METADATA_FIELDS)}")
        out[key] = v._metadata_field(name, key, val)
    return out


ULID = "01HK3KNQ13MWEV5X6ZEPWCXZKN"
TRICKY_METADATA = [
    {}, {"memory_kind": "semantic", "memory_tier": "mid", "importance": 63},
    {"memory_kind": "Semantic"}, {"memory_kind": 1}, {"memory_kind": Str("episode")},
    {"memory_tier": "discard"}, {"memory_tier": ["long"]}, {"memory_tier": None},
    {"importance": 0}, {"importance": 100}, {"importance": 101}, {"importance": -1},
    {"importance": True}, {"importance": 50.0}, {"importance": "50"}, {"importance": None},
    {"tags": []}, {"tags": ["project"]}, {"tags": ["a", "b"] * 16}, {"tags": ["a"] * 33},
    {"tags": [""]}, {"tags": ["x" * 128]}, {"tags": ["x" * 129]}, {"tags": ["é" * 64]},
    {"tags": ["é" * 65]}, {"tags": ["ok", "\ud800"]}, {"tags": ["ok", 1]}, {"tags": ("a",)},
    {"tags": "project"}, {"tags": None}, {"tags": [Str("a")]},
    {"summary": ""}, {"summary": "short"}, {"summary": "x" * 4096}, {"summary": "x" * 4097},
    {"summary": "é" * 2048}, {"summary": "é" * 2049}, {"summary": "\udc80"}, {"summary": 3},
    {"tool_call_id": ""}, {"tool_call_id": "c" * 256}, {"tool_call_id": "c" * 257},
    {"tool_call_id": "日" * 86}, {"tool_call_id": "日" * 85 + "xx"}, {"tool_call_id": None},
    {"relations": [{"type": "supersedes", "message_id": ULID}]},
    {"relations": [{"type": "supersedes", "message_id": ULID.lower()}]},
    {"relations": [{"type": "nope", "message_id": ULID}]}, {"relations": [{"type": "related_to"}]},
    {"source_message_ids": [ULID, ULID]}, {"source_message_ids": ["8" + ULID[1:]]},
    {"source_message_ids": None}, {"importance": 10, "colour": "red"},
    {"colour": "red", "importance": 101}, {"importance": 101, "colour": "red"},
    {"not an identifier": 1}, {"x" * 65: 1},
    {"tags": ["ok"], "memory_kind": "nope", "importance": 101},
    {"memory_kind": "procedure", "tags": ["a", "b"], "summary": "s", "tool_call_id": "t",
     "importance": 7, "memory_tier": "long", "relations": [], "source_message_ids": []},
    [], "{}", None,
]


@pytest.mark.parametrize("value", TRICKY_METADATA, ids=repr)
@pytest.mark.parametrize("name", ["metadata", "metadata_json"])
def test_metadata_fields_match_full_checks(value, name):
    fast = outcome(lambda: v.metadata_fields(value, name))
    assert fast == outcome(lambda: reference_metadata_fields(value, name))
    if fast[0] == "ok":
        # A new message's metadata: the direct path equals laying the fields over the defaults.
        assert v.apply_metadata(None, fast[1]) == v.apply_metadata(v.Metadata(), fast[1])


def test_metadata_tags_are_copied():
    tags = ["a", "b"]
    got = v.metadata_fields({"tags": tags})["tags"]
    assert got == tags and got is not tags


@pytest.mark.parametrize("value", [None, 0, 1, 5, 100, 101, -1, True, False, 5.0, "5", 2**64])
def test_integer_fast_path(value):
    got = outcome(lambda: v.integer("limit", value, lo=1, hi=100, default=7))
    if value is None:
        assert got == ("ok", 7)
    elif type(value) is int and 1 <= value <= 100:
        assert got == ("ok", value)
    else:
        assert got[0] == "error" and "limit must be an integer" in got[1]


@pytest.mark.parametrize("value", ["user", "assistant", "system", "User", "", None, 0,
                                   Str("user"), ["user"]])
def test_role_matches_choice(value):
    assert outcome(lambda: v.role(value)) == outcome(
        lambda: v.ROLES.index(v.choice("role", value, v.ROLES)))


@pytest.mark.parametrize("value", [ULID, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "00000000000000000000000000",
                                   ULID.lower(), "8" + ULID[1:], ULID[:-1], ULID + "0",
                                   ULID[:-1] + "I", ULID[:-1] + "Ｚ", ULID[:-1] + "٣", None, 5])
def test_ulid_parse(value):
    got = outcome(lambda: v.ulid("message_id", value))
    if isinstance(value, str) and v._ULID_RE.fullmatch(value):
        digits = [v._CROCKFORD.index(c) for c in value]
        assert got == ("ok", sum(d << (5 * (25 - i)) for i, d in enumerate(digits)).to_bytes(16, "big"))
        assert v.ulid_str(got[1]) == value
    else:
        assert got[0] == "error" and "message_id must be" in got[1]


def test_column_extend_grows_as_appends_do():
    one, batch = Column("i8"), Column("i8")
    for chunk in (range(0, 100), range(100, 100), range(100, 1000), range(1000, 1301)):
        for x in chunk:
            one.append(x)
        batch.extend(list(chunk))
        assert batch.n == one.n and len(batch.data) == len(one.data)
        assert np.array_equal(batch.view(), one.view())
    wide = Column("u1", 2)
    wide.extend([(1, 2), (3, 4)])
    assert wide.view().tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("item,expected", [
    ({"session_id": 1, "role": 2, "content": 3}, None),
    ({"session_id": 1, "role": 2, "content": 3, "metadata": {}, "timestamp": 1}, None),
    ({"session_id": 1, "role": 2, "content": 3, "metadata": None}, "metadata must be a JSON object"),
    ({"session_id": 1, "role": 2, "content": 3, "metadata": []}, "metadata must be a JSON object"),
    ({"session_id": 1, "role": 2}, "missing field 'content'"),
    ({"role": 2, "content": 3, "zz": 1}, "unknown field 'zz'"),
    ({"session_id": 1, "role": 2, "content": 3, "x y": 1},
     "unknown field a field whose name cannot be shown"),
    ([], "expected a JSON object"),
    ("text", "expected a JSON object"),
])
def test_shape_error(item, expected):
    assert _shape_error(item) == expected

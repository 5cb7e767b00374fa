"""Argument validation for the seven tools.

Messages name the parameter and the constraint, never the value (the spec forbids echoing input).
Limits are in UTF-8 bytes where the spec says bytes. Booleans are not integers, floats are not
integers, and None means "not given".
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
import re
from typing import Any

import orjson

from ._core import codec
from .domain import (ALL_KINDS_MASK, IMPORTANCE, ALL_RELATION_TYPES_MASK, ALL_TIERS_MASK, KINDS,
                     MAX_FILTER_VALUES, MAX_JSON_ARG_BYTES, MAX_RELATION_TYPE_VALUES,
                     MAX_RELATIONS, MAX_SOURCES, MAX_SUMMARY_BYTES, MAX_TAG_BYTES, MAX_TAGS,
                     MAX_TIMESTAMP_MS, MAX_TOOL_CALL_ID_BYTES, RELATION_TYPES, ROLES,
                     TIERS)
from .errors import VALIDATION_ERROR, ConvMemError

ulid_str = codec.ulid_str  # the text form of ids (through the core switch: compiled or twin)

# The fields of an imported message (an import_messages dict, a JSON Lines line); revision and
# updated_at are written by export so that a round trip keeps them too.
IMPORT_REQUIRED_FIELDS = ("session_id", "role", "content")
IMPORT_FIELDS = frozenset(IMPORT_REQUIRED_FIELDS + ("metadata", "timestamp", "message_id",
                                                    "revision", "updated_at"))

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_TO_B32 = bytes.maketrans(_CROCKFORD.encode("ascii"), b"0123456789ABCDEFGHIJKLMNOPQRSTUV")
_ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
# name -> index, for the fast paths (an exact str found here is valid; anything else goes
# through `choice`, which makes the error)
_ROLE_INDEX = {r: i for i, r in enumerate(ROLES)}
_KIND_INDEX = {k: i for i, k in enumerate(KINDS)}
_TIER_INDEX = {t: i for i, t in enumerate(TIERS)}
ALL_ROLES_MASK = (1 << len(ROLES)) - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def fail(message: str) -> ConvMemError:
    return ConvMemError(VALIDATION_ERROR, message)


# -- scalars ------------------------------------------------------------------------------
def text(name: str, value: Any, *, min_bytes: int, max_bytes: int) -> tuple[str, bytes]:
    """A str of min..max UTF-8 bytes; returns it with its UTF-8 encoding."""
    if not isinstance(value, str):
        raise fail(f"{name} must be a string")
    if len(value) > max_bytes:  # each character is at least one byte
        raise fail(f"{name} must be at most {max_bytes} UTF-8 bytes")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise fail(f"{name} must be valid Unicode text (no lone surrogates)") from None
    if len(data) < min_bytes:
        raise fail(f"{name} must be at least {min_bytes} UTF-8 byte{'s' if min_bytes > 1 else ''}")
    if len(data) > max_bytes:
        raise fail(f"{name} must be at most {max_bytes} UTF-8 bytes")
    return value, data


def string(name: str, value: Any, *, min_bytes: int, max_bytes: int) -> str:
    """`text` without the encoding: the str when it is min..max UTF-8 bytes, else text's error.

    The common shapes are decided here (ASCII: its length is its byte count and it cannot hold a
    surrogate; other text: encoded once to count); anything else goes through `text`, which
    makes the error, so both give the same answer.
    """
    if type(value) is str:
        if value.isascii():
            n = len(value)
        elif len(value) <= max_bytes:
            try:
                n = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                n = -1
        else:
            n = -1
        if min_bytes <= n <= max_bytes:
            return value
    return text(name, value, min_bytes=min_bytes, max_bytes=max_bytes)[0]


def integer(name: str, value: Any, *, lo: int, hi: int | None, default: int | None) -> int | None:
    if type(value) is int and value >= lo and (hi is None or value <= hi):
        return value  # the common case, before the checks that make the errors
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"{name} must be an integer")
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise fail(f"{name} must be an integer {bound}")
    return value


def ranged(name: str, value: Any, bounds: tuple[int, int | None, int]) -> int:
    """`integer` with a domain range (lowest, highest or None, default)."""
    lo, hi, default = bounds
    return integer(name, value, lo=lo, hi=hi, default=default)  # type: ignore[return-value]


def choice(name: str, value: Any, options: tuple[str, ...], default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or value not in options:
        raise fail(f"{name} must be one of {', '.join(options)}")
    return value


def role(value: Any) -> int:
    """The index of a role in ROLES."""
    i = _ROLE_INDEX.get(value) if type(value) is str else None
    return ROLES.index(choice("role", value, ROLES)) if i is None else i


def ulid(name: str, value: Any) -> bytes:
    """A canonical (upper-case) 26-character ULID, returned as its 16 bytes."""
    if not isinstance(value, str):
        raise fail(f"{name} must be a string holding a 26-character ULID")
    if not _ULID_RE.fullmatch(value):
        raise fail(f"{name} must be a canonical 26-character ULID")
    # Crockford's digits mapped onto int()'s base-32 digits (0-9, A-V); the match above made it
    # ASCII, and bytes.translate is a table lookup (str.translate a dict probe a character).
    return int(value.encode("ascii").translate(_CROCKFORD_TO_B32), 32).to_bytes(16, "big")


def json_arg(name: str, value: Any) -> Any:
    """Parse a *_json argument (a string holding JSON)."""
    if not isinstance(value, str):
        raise fail(f"{name} must be a string holding JSON")
    if len(value) > MAX_JSON_ARG_BYTES:
        raise fail(f"{name} must be at most {MAX_JSON_ARG_BYTES} bytes")
    try:
        return orjson.loads(value)
    except (orjson.JSONDecodeError, UnicodeEncodeError, RecursionError):
        raise fail(f"{name} must be valid JSON") from None


# What each read_messages view cannot answer without, and where a caller gets it: the error of
# a view called without it says both (a missing argument is not just "must be a string").
VIEW_NEEDS = {
    "history": ("session_id", "or use view=sessions to list sessions"),
    "content": ("message_id", "a message's id, from search_messages or view=history"),
    "context": ("message_id", "a message's id, from search_messages or view=history"),
}


def view_argument(view: str, value: Any) -> None:
    """VALIDATION_ERROR when `view` needs an argument that was not given (None)."""
    needs = VIEW_NEEDS.get(view)
    if needs is not None and value is None:
        name, hint = needs
        raise fail(f"view={view} needs {name} ({hint})")


# -- metadata -------------------------------------------------------------------------------
@dataclass(slots=True)
class Metadata:
    tool_call_id: str | None = None
    tags: list[str] = field(default_factory=list)
    tier: int = 0
    kind: int = 0
    importance: int = 50
    summary: str | None = None
    relations: list[tuple[int, bytes]] = field(default_factory=list)
    sources: list[bytes] = field(default_factory=list)

    def copy(self) -> "Metadata":
        return Metadata(self.tool_call_id, list(self.tags), self.tier, self.kind,
                        self.importance, self.summary, list(self.relations), list(self.sources))


METADATA_FIELDS = ("tool_call_id", "tags", "memory_tier", "memory_kind", "importance", "summary",
                   "relations", "source_message_ids")


_FIELD_TYPES = {
    "tool_call_id": "a string",
    "tags": "an array of strings",
    "memory_tier": f"one of {', '.join(TIERS)}",
    "memory_kind": f"one of {', '.join(KINDS)}",
    "importance": "an integer between 0 and 100",
    "summary": "a string",
    "relations": "an array of relation objects",
    "source_message_ids": "an array of ULIDs",
}


def metadata_fields(value: Any, name: str = "metadata_json") -> dict[str, Any]:
    """Validate a metadata object; returns only the fields it sets, normalised.
    (`name`: the argument named in errors.)

    A field given as null is refused, naming the field and its type (it is never read as "the
    default": a client that means "no tags" says `[]`). An empty summary or tool_call_id unsets it.
    """
    if not isinstance(value, dict):
        raise fail(f"{name} must be a JSON object")
    out: dict[str, Any] = {}
    fast = _FAST_FIELDS.get
    for key, val in value.items():
        check = fast(key)
        if check is None:
            shown = key if isinstance(key, str) and len(key) <= 64 and key.isidentifier() else "(unnamed)"
            raise fail(f"{name}: unknown field {shown}; allowed fields are {', '.join(METADATA_FIELDS)}")
        if val is None:
            raise _null_field(name, key)
        # A fast check answers _NOT_FAST when it cannot decide; _metadata_field then does.
        got = check(val)
        out[key] = _metadata_field(name, key, val) if got is _NOT_FAST else got
    return out


_NOT_FAST = object()


def _fast_tool_call_id(val: Any) -> Any:
    if type(val) is str and val.isascii() and len(val) <= MAX_TOOL_CALL_ID_BYTES:
        return val
    return None if val is None else _NOT_FAST


def _fast_tags(val: Any) -> Any:
    if type(val) is list and len(val) <= MAX_TAGS:
        for t in val:
            if not (type(t) is str and t.isascii() and 0 < len(t) <= MAX_TAG_BYTES):
                return _NOT_FAST
        return val[:]  # a copy, as the slow path makes
    return None if val is None else _NOT_FAST


def _fast_tier(val: Any) -> Any:
    i = _TIER_INDEX.get(val) if type(val) is str else None
    return i if i is not None or val is None else _NOT_FAST


def _fast_kind(val: Any) -> Any:
    i = _KIND_INDEX.get(val) if type(val) is str else None
    return i if i is not None or val is None else _NOT_FAST


def _fast_importance(val: Any) -> Any:
    if type(val) is int and 0 <= val <= 100:
        return val
    return None if val is None else _NOT_FAST


def _fast_summary(val: Any) -> Any:
    if type(val) is str and val.isascii() and len(val) <= MAX_SUMMARY_BYTES:
        return val or None
    return None if val is None else _NOT_FAST


def _not_fast(val: Any) -> Any:  # relations, source_message_ids: rare enough
    return None if val is None else _NOT_FAST


_FAST_FIELDS = {"tool_call_id": _fast_tool_call_id, "tags": _fast_tags, "memory_tier": _fast_tier,
                "memory_kind": _fast_kind, "importance": _fast_importance,
                "summary": _fast_summary, "relations": _not_fast, "source_message_ids": _not_fast}
assert tuple(_FAST_FIELDS) == METADATA_FIELDS


def _metadata_field(name: str, key: str, val: Any) -> Any:
    """One field, checked in full (the reference for the fast checks above)."""
    where = f"{name}.{key}"
    if val is None:
        raise _null_field(name, key)
    if key == "tool_call_id":
        return text(where, val, min_bytes=0, max_bytes=MAX_TOOL_CALL_ID_BYTES)[0]
    if key == "tags":
        if not isinstance(val, list) or len(val) > MAX_TAGS:
            raise fail(f"{where} must be an array of at most {MAX_TAGS} strings")
        return [text(f"{where}[]", t, min_bytes=1, max_bytes=MAX_TAG_BYTES)[0] for t in val]
    if key == "memory_tier":
        return TIERS.index(choice(where, val, TIERS))
    if key == "memory_kind":
        return KINDS.index(choice(where, val, KINDS))
    if key == "importance":
        return integer(where, val, lo=IMPORTANCE[0], hi=IMPORTANCE[1], default=None)
    if key == "summary":
        s = text(where, val, min_bytes=0, max_bytes=MAX_SUMMARY_BYTES)[0]
        return s or None
    if key == "relations":
        if not isinstance(val, list) or len(val) > MAX_RELATIONS:
            raise fail(f"{where} must be an array of at most {MAX_RELATIONS} objects")
        rels = []
        for rel in val:
            if not isinstance(rel, dict) or set(rel) != {"type", "message_id"}:
                raise fail(f"{where}[] must be an object with exactly type and message_id")
            rtype = RELATION_TYPES.index(choice(f"{where}[].type", rel["type"], RELATION_TYPES))
            rels.append((rtype, ulid(f"{where}[].message_id", rel["message_id"])))
        return rels
    # source_message_ids
    if not isinstance(val, list) or len(val) > MAX_SOURCES:
        raise fail(f"{where} must be an array of at most {MAX_SOURCES} ULIDs")
    return [ulid(f"{where}[]", u) for u in val]


def metadata_argument(metadata: Any, metadata_json: Any) -> dict[str, Any] | None:
    """The metadata fields a write or update sets: from `metadata` (an object, in-process callers)
    or `metadata_json` (its JSON text, what MCP sends); None when neither is given. Giving both is
    an error rather than a merge or a silent winner, since either could be the caller's intent."""
    if metadata is not None and metadata_json is not None:
        raise fail("give metadata or metadata_json, not both")
    if metadata is not None:
        if isinstance(metadata, Mapping) and not isinstance(metadata, dict):
            metadata = dict(metadata)  # (a TypedDict is a dict; any other mapping is copied)
        return metadata_fields(metadata, "metadata")
    if metadata_json is not None:
        return metadata_fields(json_arg("metadata_json", metadata_json))
    return None


def _null_field(name: str, key: str) -> ConvMemError:
    return fail(f"{name}.{key} must be {_FIELD_TYPES[key]}, not null")


def apply_metadata(base: Metadata | None, fields: dict[str, Any]) -> Metadata:
    """`base` (None: the defaults) with `fields` (from metadata_fields) laid over it."""
    if base is None:  # (a new message: eight lookups instead of a loop over the fields)
        get = fields.get
        tags, tier, kind = get("tags"), get("memory_tier"), get("memory_kind")
        importance, relations, sources = get("importance"), get("relations"), get("source_message_ids")
        return Metadata(get("tool_call_id"), [] if tags is None else tags,
                        0 if tier is None else tier, 0 if kind is None else kind,
                        50 if importance is None else importance, get("summary"),
                        [] if relations is None else relations, [] if sources is None else sources)
    m = base.copy()
    for key, val in fields.items():
        if key == "tool_call_id":
            m.tool_call_id = val
        elif key == "tags":
            m.tags = val if val is not None else []
        elif key == "memory_tier":
            m.tier = val if val is not None else 0
        elif key == "memory_kind":
            m.kind = val if val is not None else 0
        elif key == "importance":
            m.importance = val if val is not None else 50
        elif key == "summary":
            m.summary = val
        elif key == "relations":
            m.relations = val if val is not None else []
        elif key == "source_message_ids":
            m.sources = val if val is not None else []
    return m


# -- search filters -------------------------------------------------------------------------
@dataclass
class Filters:
    kind_mask: int = ALL_KINDS_MASK
    tier_mask: int = ALL_TIERS_MASK
    tags: list[str] = field(default_factory=list)
    # created_at (the message's timestamp) in [after, before): None = unbounded
    after: int | None = None
    before: int | None = None
    role_mask: int = ALL_ROLES_MASK


FILTER_FIELDS = ("kinds", "tiers", "tags", "after", "before", "roles")


def instant(name: str, value: Any) -> int:
    """A point in time as epoch milliseconds: an integer 0..MAX_TIMESTAMP_MS, or an ISO-8601
    string with a date, a time and a timezone (`Z` or an offset). A string finer than a
    millisecond is rounded up: timestamps are whole milliseconds, so `created_at >= t` and
    `created_at < t` then select exactly the messages they select with the exact instant."""
    if type(value) is int:
        if not 0 <= value <= MAX_TIMESTAMP_MS:
            raise fail(f"{name} must be epoch milliseconds in 0..{MAX_TIMESTAMP_MS}")
        return value
    if not isinstance(value, str) or len(value) > 64:
        raise fail(f"{name} must be epoch milliseconds (integer) or an ISO-8601 string")
    # fromisoformat stops at a NUL (accepting "...Z\x00garbage") and takes a tab as a separator:
    # an ISO-8601 text is printable ASCII, nothing else is looked at.
    if not (value.isascii() and value.isprintable()):
        raise fail(f"{name} must be an ISO-8601 date and time with a timezone, "
                   "e.g. 2026-12-01T09:30:00Z")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise fail(f"{name} must be an ISO-8601 date and time with a timezone, "
                   "e.g. 2026-12-01T09:30:00Z") from None
    if when.tzinfo is None:  # (a date alone never has one)
        raise fail(f"{name} must include a time and a timezone (Z or an offset such as +09:00)")
    delta = when - _EPOCH
    us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    ms = -(-us // 1000)
    if ms < 0:
        raise fail(f"{name} must not be before 1970-01-01T00:00:00Z")
    return ms


def filters(value: Any) -> Filters:
    if value is None:
        return Filters()
    obj = json_arg("filters_json", value)
    if not isinstance(obj, dict):
        raise fail("filters_json must be a JSON object")
    out = Filters()
    for key, val in obj.items():
        if key not in FILTER_FIELDS:
            raise fail("filters_json: unknown field; allowed fields are "
                       + ", ".join(FILTER_FIELDS))
        if val is None:
            continue
        where = f"filters_json.{key}"
        if key in ("after", "before"):
            setattr(out, key, instant(where, val))
            continue
        if key == "roles":
            if not isinstance(val, list) or len(val) > MAX_FILTER_VALUES:
                raise fail(f"{where} must be an array of: {', '.join(ROLES)}")
            mask = 0
            for r in val:
                mask |= 1 << ROLES.index(choice(f"{where}[]", r, ROLES))
            out.role_mask = mask or ALL_ROLES_MASK  # an empty list does not constrain
            continue
        if key == "tags":
            if not isinstance(val, list) or len(val) > MAX_TAGS:
                raise fail(f"{where} must be an array of at most {MAX_TAGS} strings")
            out.tags = [text(f"{where}[]", t, min_bytes=1, max_bytes=MAX_TAG_BYTES)[0] for t in val]
            continue
        options = KINDS if key == "kinds" else TIERS
        if not isinstance(val, list) or len(val) > MAX_FILTER_VALUES:
            raise fail(f"{where} must be an array of: {', '.join(options)}")
        mask = 0
        for v in val:
            mask |= 1 << options.index(choice(f"{where}[]", v, options))
        if key == "kinds":
            out.kind_mask = mask or ALL_KINDS_MASK  # an empty list does not constrain
        else:
            out.tier_mask = mask or ALL_TIERS_MASK
    if out.after is not None and out.before is not None and out.after > out.before:
        raise fail("filters_json.after must not be later than filters_json.before")
    return out


def relation_types(value: Any) -> int:
    """A bit mask of relation types (all when not given or empty)."""
    if value is None:
        return ALL_RELATION_TYPES_MASK
    arr = json_arg("relation_types_json", value)
    if not isinstance(arr, list) or len(arr) > MAX_RELATION_TYPE_VALUES:
        raise fail(f"relation_types_json must be a JSON array of: {', '.join(RELATION_TYPES)}")
    mask = 0
    for v in arr:
        mask |= 1 << RELATION_TYPES.index(choice("relation_types_json[]", v, RELATION_TYPES))
    return mask or ALL_RELATION_TYPES_MASK

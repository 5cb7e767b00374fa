"""What every chat-history importer shares: derived message ids, times, the marks put on what is
not the user's or the assistant's words, content caps, the per-file report and the options.

A parser turns one source file into `Msg` items (plain import dicts with a derived message_id)
and counts everything it does not import in the file's `FileReport`; `sink.Sink` writes them.
The rules are in docs/IMPORT.md.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._core import codec
from ..domain import MAX_CONTENT_BYTES, MAX_TIMESTAMP_MS
from ..wording import counted

# -- marks ----------------------------------------------------------------------------------
# The user's and the assistant's words are kind "conversation" (the default); everything else
# that is kept is kind "episode" with tags naming what it is, so that a search with
# filters_json {"kinds": ["conversation"]} sees only the dialogue.
KIND_OTHER = "episode"
KIND_SUMMARY = "summary"
TAG_TOOL_CALL = "tool-call"
TAG_TOOL_RESULT = "tool-result"
TAG_TOOL_ERROR = "tool-error"
TAG_INJECTED = "injected"
TAG_REASONING = "reasoning"
TAG_ALTERNATE = "alternate"
TAG_SUBAGENT = "subagent"
TAG_COMPACT = "compact-summary"
TAG_CUT = "cut"
TAG_TIME_DERIVED = "time-derived"
ALTERNATES_SUFFIX = "#alternates"

TOOL_OUTPUT_MAX = 16 * 1024  # bytes of a tool call's input or a tool result kept (the rest cut)

# skip reasons (the report's keys)
EMPTY = "empty"
REASONING = "hidden reasoning (--reasoning imports it)"
DROPPED_TOOLS = "tool call or result (dropped by --drop tools)"
DROPPED_INJECTED = "injected context (dropped by --drop injected)"
NOT_CONVERSATION = "not conversation"


@dataclass
class Options:
    reasoning: bool = False  # import hidden reasoning (thinking blocks), tagged
    drop_tools: bool = False  # leave tool calls and results out (counted)
    drop_injected: bool = False  # leave injected context out (counted)
    tool_output_max: int = TOOL_OUTPUT_MAX


@dataclass
class FileReport:
    """What became of one input: every record is imported, present, or skipped for a reason."""

    path: str
    fmt: str = ""
    records: int = 0  # lines or array elements read
    imported: int = 0
    present: int = 0  # already in the store (same id, same content)
    updated: int = 0  # the source message grew or was replaced (an upsert)
    cut: int = 0  # tool output or over-long content cut to size
    skipped: Counter = field(default_factory=Counter)
    rejected: int = 0  # refused by the store (a real conflict, an invalid item)
    examples: list[str] = field(default_factory=list)  # the first few rejections, shown
    error: str | None = None  # the file could not be read (exit status 1)
    sessions: set = field(default_factory=set)

    MAX_EXAMPLES = 5

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] += n

    def unknown(self, what: str) -> None:
        self.skipped[f"unknown type {what!s:.60}"] += 1

    def reject(self, where: str, reason: str) -> None:
        self.rejected += 1
        if len(self.examples) < self.MAX_EXAMPLES:
            self.examples.append(f"{where}: {reason}")

    def line(self) -> str:
        parts = [counted(self.records, "record"), f"{self.imported} imported",
                 f"{self.present} already present"]
        if self.updated:
            parts.append(f"{self.updated} updated")
        if self.cut:
            parts.append(f"{self.cut} cut to size")
        if self.rejected:
            parts.append(f"{self.rejected} rejected")
        text = f"{self.path} [{self.fmt or '?'}]: " + ", ".join(parts)
        if self.skipped:
            text += "; skipped: " + ", ".join(f"{reason} x{n}" for reason, n
                                              in sorted(self.skipped.items()))
        return text


def merge_counts(into: FileReport, other: FileReport) -> None:
    into.records += other.records
    into.imported += other.imported
    into.present += other.present
    into.updated += other.updated
    into.cut += other.cut
    into.rejected += other.rejected
    into.skipped.update(other.skipped)


# -- ids and times --------------------------------------------------------------------------
def derive_id(ts_ms: int, *key: str) -> str:
    """A ULID whose time part is the message time and whose 80 random bits are a hash of the
    source key (source, conversation, message id): the same source message always gets the
    same id, so importing it again finds it present."""
    h = hashlib.blake2b("\x1f".join(key).encode("utf-8", "surrogatepass"), digest_size=10).digest()
    ts = min(max(ts_ms, 0), MAX_TIMESTAMP_MS)
    return codec.ulid_str(((ts << 80) | int.from_bytes(h, "big")).to_bytes(16, "big"))


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = 1000
_iso_cache: dict[str, int] = {}


def iso_ms(value: Any) -> int | None:
    """Milliseconds since the epoch of an ISO-8601 / RFC 3339 time (a time without an offset is
    UTC); None when `value` is not one."""
    if type(value) is not str or len(value) < 10:
        return None
    # The common shape "2026-03-02T08:00:00.000Z": the part before the seconds is cached.
    if len(value) == 24 and value[19] == "." and value[23] == "Z" and value[10] == "T":
        base = _iso_cache.get(value[:16])
        if base is not None:
            try:
                return base + int(value[17:19]) * 1000 + int(value[20:23])
            except ValueError:
                return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - _EPOCH
    ms = (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if len(value) == 24 and value[23] == "Z" and len(_iso_cache) < 100_000:
        _iso_cache[value[:16]] = ms - (dt.second * 1000 + dt.microsecond // 1000)
    return ms if 0 <= ms <= MAX_TIMESTAMP_MS else None


def seconds_ms(value: Any) -> int | None:
    """Milliseconds of epoch seconds (int or float, rounded to the nearest ms); None otherwise."""
    if type(value) not in (int, float) or value != value:
        return None
    ms = int(round(value * 1000))
    return ms if 0 <= ms <= MAX_TIMESTAMP_MS else None


def any_time_ms(value: Any) -> int | None:
    """An ISO-8601 string or epoch seconds (chat exports never write milliseconds)."""
    if type(value) is str:
        return iso_ms(value)
    return seconds_ms(value)


# -- content --------------------------------------------------------------------------------
def cut(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` UTF-8 bytes (on a character boundary) with a note of what
    was left out; (text, whether it was cut)."""
    if len(text) <= limit // 4:
        return text, False
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text, False
    note = f"\n[... cut: {len(data) - limit} more bytes]"
    head = data[: max(limit - len(note), 0)].decode("utf-8", "ignore")
    return head + note, True


def clean(text: str) -> str:
    """Text the store accepts: lone surrogates (from broken JSON escapes) replaced."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def make_item(session: str, role: str, content: str, ts: int, key: tuple[str, ...],
              report: FileReport, *, kind: str | None = None, tags: list[str] | None = None,
              tool_call_id: str | None = None, limit: int = MAX_CONTENT_BYTES,
              id_ts: int | None = None) -> dict[str, Any] | None:
    """The import dict of one message, or None (counted as empty) when it has no text."""
    if not content or content.isspace():
        report.skip(EMPTY)
        return None
    content = clean(content)
    content, was_cut = cut(content, min(limit, MAX_CONTENT_BYTES))
    meta: dict[str, Any] = {}
    if was_cut:
        report.cut += 1
        tags = (tags or []) + [TAG_CUT]
    if kind is not None:
        meta["memory_kind"] = kind
    if tags:
        meta["tags"] = tags
    if tool_call_id:
        meta["tool_call_id"] = clean(tool_call_id)[:256]
    item = {"message_id": derive_id(ts if id_ts is None else id_ts, *key), "session_id": session,
            "role": role, "content": content, "timestamp": ts}
    if meta:
        item["metadata"] = meta
    return item


def json_text(value: Any) -> str:
    """A tool input or result as text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    import orjson

    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def json_problem(raw: bytes, exc: ValueError, record: bool = True) -> str:
    """What is wrong with JSON text that orjson refused, and where, in bytes from its start:
    invalid UTF-8 first (orjson reports it as a surrogate at "char 0"), else the syntax error.
    A record (one line of a file) is placed by byte offset alone, so that its place inside the
    line is never taken for the file's line and column; a whole document gets those too."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"invalid UTF-8 at byte offset {bad.start}{' of the line' if record else ''}"
    pos = getattr(exc, "pos", None)
    reason = getattr(exc, "msg", None) or str(exc)
    if not isinstance(pos, int) or not 0 <= pos <= len(text):
        return f"invalid JSON ({reason})"
    offset = len(text[:pos].encode("utf-8", "surrogatepass"))  # (orjson's pos counts characters)
    if record:
        return f"invalid JSON at byte offset {offset} of the line: {reason}"
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"invalid JSON at line {line}, column {column} (byte offset {offset}): {reason}"

"""JSON Lines import and export.

One message per line: {"session_id", "role", "content", "metadata"?: object, "timestamp"?: int ms,
"message_id"?: ULID, "revision"?: int, "updated_at"?: int ms}. `export_jsonl` writes exactly what
`import_jsonl` reads, so an export imported into an empty store reproduces the ids, timestamps,
revisions and metadata.

Times may also be ISO-8601 strings; a number that can only be seconds (docs/IMPORT.md:
`SECONDS_RANGE`) is converted to milliseconds. A line without message_id gets one derived from
its line number and text, so importing a file again, or once it has grown, adds only the new
lines. A line whose message_id is stored with the same content is "already present", not a
conflict.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import hashlib

import orjson

from convmem._core import codec
from convmem.api.bulk import DELETED, PRESENT
from convmem.errors import CONFLICT, ConvMemError
from convmem.ids import now_ms
from convmem.importers.common import iso_ms, json_problem
from convmem.validation import IMPORT_FIELDS as KNOWN_FIELDS
from convmem.validation import IMPORT_REQUIRED_FIELDS as REQUIRED_FIELDS
from convmem.wording import counted

_REQUIRED = frozenset(REQUIRED_FIELDS)
_NO_METADATA: dict[str, Any] = {}  # (stands for an absent metadata field in the fast check)
BATCH_SIZE = 1000
BATCH_BYTES = 32 * 1024 * 1024  # also cut a batch early so 1 MiB messages do not pile up in memory
_SHOWABLE_FIELD = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
logger = logging.getLogger(__name__)
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Rejected:
    line: int
    reason: str  # never repeats the line's values


SHOWN_REJECTIONS = 20  # rejected lines listed in the summary; the rest are counted
# Integers in this range are read as epoch seconds: as milliseconds they would be in
# 1970-01-12 .. 1973-03-03, a time no conversation was recorded at; as seconds they are
# 2001-09-09 .. 5138. Below it an integer stays milliseconds (what the contract says).
SECONDS_RANGE = (1_000_000_000, 100_000_000_000)


@dataclass
class ImportSummary:
    imported: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    present: int = 0  # lines whose message is already stored, identical
    rejected_count: int = 0  # every rejected line (only the first ones are kept in `rejected`)

    def reject(self, line: int, reason: str) -> None:
        self.rejected_count += 1
        if len(self.rejected) < SHOWN_REJECTIONS:
            self.rejected.append(Rejected(line, reason))

    def lines(self) -> list[str]:
        """The human-readable summary: counts, then the first rejected input lines."""
        head = f"imported {counted(self.imported, 'message')}, rejected {counted(self.rejected_count, 'line')}"
        if self.present:
            head += f", {self.present} already present"
        out = [head]
        out += [f"line {r.line}: {r.reason}" for r in sorted(self.rejected, key=lambda r: r.line)]
        if self.rejected_count > len(self.rejected):
            more = self.rejected_count - len(self.rejected)
            out.append(f"... and {more} more rejected {'line' if more == 1 else 'lines'}")
        return out


def time_ms(value: Any) -> Any:
    """A line's timestamp as integer milliseconds: ISO-8601 strings parsed, seconds converted
    (SECONDS_RANGE; a float is seconds below its top); anything else is left for validation."""
    t = type(value)
    if t is int:
        return value * 1000 if SECONDS_RANGE[0] <= value < SECONDS_RANGE[1] else value
    if t is float and value == value and value >= 0:
        return int(round(value * 1000)) if value < SECONDS_RANGE[1] else int(round(value))
    if t is str:
        ms = iso_ms(value)
        return value if ms is None else ms
    return value


def derived_line_id(line: int, item: dict[str, Any]) -> str:
    """The id of a line without message_id: time part its timestamp (0 when it has none), then
    the line number (32 bits, so equal timestamps keep file order) and 48 bits of a hash of the
    session, role and content."""
    h = hashlib.blake2b(f"{item['session_id']}\x1f{item['role']}\x1f{item['content']}".encode(
        "utf-8", "surrogatepass"), digest_size=6).digest()
    ts = item.get("timestamp")
    ts = ts if type(ts) is int and 0 <= ts < 1 << 48 else 0
    rand = ((line & 0xFFFFFFFF) << 48) | int.from_bytes(h, "big")
    return codec.ulid_str(((ts << 80) | rand).to_bytes(16, "big"))


class ProgressBar:
    """A one-line progress bar on a terminal stream, redrawn at most ten times a second."""

    def __init__(self, stream: IO[str], total_bytes: int | None, width: int = 30) -> None:
        self._stream = stream
        self._total = total_bytes if total_bytes else None
        self._width = width
        self._last = 0.0

    def update(self, done_bytes: int, lines: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        if self._total:
            fraction = min(done_bytes / self._total, 1.0)
            filled = int(fraction * self._width)
            bar = "#" * filled + "-" * (self._width - filled)
            text = f"\rimporting [{bar}] {fraction:6.1%} {lines} lines"
        else:
            text = f"\rimporting {lines} lines, {done_bytes / 1048576:.1f} MiB"
        self._stream.write(text)
        self._stream.flush()

    def close(self) -> None:
        self._stream.write("\n")
        self._stream.flush()


def _shape_error(item: Any) -> str | None:
    """What is wrong with the shape of a decoded line; values are checked by the store."""
    if (type(item) is dict and KNOWN_FIELDS.issuperset(item) and item.keys() >= _REQUIRED
            and type(item.get("metadata", _NO_METADATA)) is dict):
        return None  # the common shape, decided without building lists (checked in full below)
    if not isinstance(item, dict):
        return "expected a JSON object"
    unknown = [k for k in item if k not in KNOWN_FIELDS]
    if unknown:
        shown = sorted(k for k in unknown if _SHOWABLE_FIELD.fullmatch(k))
        names = ", ".join(f"'{k}'" for k in shown[:5]) or "a field whose name cannot be shown"
        return f"unknown field {names}"
    missing = [k for k in REQUIRED_FIELDS if k not in item]
    if missing:
        return f"missing field '{missing[0]}'"
    if "metadata" in item and not isinstance(item["metadata"], dict):
        return "metadata must be a JSON object"
    return None


class _Batcher:
    def __init__(self, store: Any, summary: ImportSummary) -> None:
        self.store = store
        self.summary = summary
        self.items: list[dict[str, Any]] = []
        self.line_numbers: list[int] = []
        self.timeless: list[bool] = []  # lines that gave no timestamp (the import time is used)
        self.bytes = 0

    def add(self, line: int, item: dict[str, Any], size: int, timeless: bool = False) -> None:
        self.items.append(item)
        self.line_numbers.append(line)
        self.timeless.append(timeless)
        self.bytes += size
        if len(self.items) >= BATCH_SIZE or self.bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        try:
            results: list[Any] = self.store.import_message_batch(self.items, existing="compare")
        except ConvMemError as exc:  # the whole batch failed (e.g. IO_ERROR): report every line
            results = [exc] * len(self.items)
        summary = self.summary
        for item, line, timeless, res in zip(self.items, self.line_numbers, self.timeless,
                                             results, strict=True):
            if res is None:
                summary.imported += 1
            elif res is PRESENT or res is DELETED:
                summary.present += 1
            elif timeless and res.code == CONFLICT and _same_but_time(item, res):
                summary.present += 1  # the time was the import's, not the line's
            else:
                summary.reject(line, f"{res.code}: {res.message}")
        self.items, self.line_numbers, self.timeless, self.bytes = [], [], [], 0


def _same_but_time(item: dict[str, Any], err: Any) -> bool:
    old = getattr(err, "existing", None)
    if old is None:
        return False
    if (old["session_id"], old["role"], old["content"]) != (item["session_id"], item["role"],
                                                           item["content"]):
        return False
    meta = item.get("metadata") or {}
    return all(old["metadata"].get(k) == v for k, v in meta.items() if k in old["metadata"])


def import_jsonl(store: Any, lines: Iterable[bytes], progress: ProgressBar | None = None) -> ImportSummary:
    """Import every good line, in group-committed batches; bad lines are counted (the first
    ones listed), never fatal.

    Blank lines are skipped and not counted. Line numbers are 1-based.
    """
    summary = ImportSummary()
    batcher = _Batcher(store, summary)
    started = now_ms()
    done_bytes = 0
    number = 0
    for number, raw in enumerate(lines, start=1):
        done_bytes += len(raw)
        if progress is not None:
            progress.update(done_bytes, number)
        line_start = done_bytes - len(raw)  # (in the file: where this line's bytes begin)
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
            line_start += len(_BOM)
        if not raw or raw.isspace():  # (blank: as raw.strip() would be, without the copy)
            continue
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            summary.reject(number, f"{json_problem(raw, exc)} (line starts at file byte "
                                   f"offset {line_start})")
            continue
        problem = _shape_error(item)
        if problem is not None:
            summary.reject(number, problem)
            continue
        timeless = False
        if "timestamp" in item:
            item["timestamp"] = time_ms(item["timestamp"])
        if "updated_at" in item:
            item["updated_at"] = time_ms(item["updated_at"])
        if item.get("message_id") is None:
            timeless = item.get("timestamp") is None
            item["message_id"] = derived_line_id(number, item)
            if timeless:
                item["timestamp"] = started
        batcher.add(number, item, len(raw), timeless)
    batcher.flush()
    if summary.imported:
        # A snapshot now means the next open of a freshly imported store replays nothing.
        try:
            store.checkpoint()
        except ConvMemError as exc:
            logger.warning("snapshot after import failed: %s", exc.message)
    if progress is not None:
        progress.update(done_bytes, number, force=True)
        progress.close()
    summary.rejected.sort(key=lambda r: r.line)
    return summary


def export_jsonl(store: Any, out: IO[bytes], session_id: str | None = None) -> int:
    """Write the live messages as JSON Lines; returns how many were written."""
    count = 0
    for item in store.export_messages(session_id):
        out.write(orjson.dumps(item))
        out.write(b"\n")
        count += 1
    out.flush()
    return count

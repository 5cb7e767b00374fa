"""JSON Lines import and export.

One message per line: {"session_id", "role", "content", "metadata"?: object, "timestamp"?: int ms,
"message_id"?: ULID, "revision"?: int, "updated_at"?: int ms}. `export_jsonl` writes exactly what
`import_jsonl` reads, so an export imported into an empty store reproduces the ids, timestamps,
revisions and metadata.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from convmem.errors import ConvMemError
from convmem.validation import IMPORT_FIELDS as KNOWN_FIELDS
from convmem.validation import IMPORT_REQUIRED_FIELDS as REQUIRED_FIELDS

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


@dataclass
class ImportSummary:
    imported: int = 0
    rejected: list[Rejected] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The human-readable summary: counts, then one line per rejected input line."""
        out = [f"imported {self.imported} messages, rejected {len(self.rejected)} lines"]
        out += [f"line {r.line}: {r.reason}" for r in self.rejected]
        return out


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
        self.bytes = 0

    def add(self, line: int, item: dict[str, Any], size: int) -> None:
        self.items.append(item)
        self.line_numbers.append(line)
        self.bytes += size
        if len(self.items) >= BATCH_SIZE or self.bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        try:
            results: list[ConvMemError | None] = self.store.import_message_batch(self.items)
        except ConvMemError as exc:  # the whole batch failed (e.g. IO_ERROR): report every line
            results = [exc] * len(self.items)
        self.summary.imported += results.count(None)
        for line, error in zip(self.line_numbers, results, strict=True):
            if error is not None:
                self.summary.rejected.append(Rejected(line, f"{error.code}: {error.message}"))
        self.items, self.line_numbers, self.bytes = [], [], 0


def import_jsonl(store: Any, lines: Iterable[bytes], progress: ProgressBar | None = None) -> ImportSummary:
    """Import every good line, in group-committed batches; bad lines are listed, never fatal.

    Blank lines are skipped and not counted. Line numbers are 1-based.
    """
    summary = ImportSummary()
    batcher = _Batcher(store, summary)
    done_bytes = 0
    number = 0
    for number, raw in enumerate(lines, start=1):
        done_bytes += len(raw)
        if progress is not None:
            progress.update(done_bytes, number)
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        if not raw or raw.isspace():  # (blank: as raw.strip() would be, without the copy)
            continue
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            summary.rejected.append(Rejected(number, f"invalid JSON ({exc})"))
            continue
        problem = _shape_error(item)
        if problem is not None:
            summary.rejected.append(Rejected(number, problem))
            continue
        batcher.add(number, item, len(raw))
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

"""Importing sources: each file through its format's parser into one Sink, a report per file,
progress on stderr. `import_source` can start at a high-water mark (sync) and returns the new one.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from typing import IO, Any

import orjson

from .claude_code import ClaudeCodeParser
from .codex import CodexParser
from ..wording import counted
from .common import FileReport, Options
from .exports import chatgpt_conversations, claude_ai_conversations
from .gemini import gemini_file
from .sink import Sink
from .sources import Source, open_path, read_lines

log = logging.getLogger(__name__)
LINE_PARSERS = {"claude-code": ClaudeCodeParser, "codex": CodexParser}
HEAD_HASH_BYTES = 4096


class Progress:
    """The bar on a terminal; otherwise a line every `every` seconds; a final line always."""

    def __init__(self, stream: IO[str], total_bytes: int = 0, every: float = 5.0,
                 tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.total = total_bytes
        self.every = every
        self.start = time.monotonic()
        self.last = self.start
        self.messages = 0
        self.done_bytes = 0
        self.files = 0

    def advance(self, n: int) -> None:
        self.messages += n
        self.tick()

    def file_done(self, size: int) -> None:
        self.files += 1
        self.done_bytes += size
        self.tick()

    def tick(self) -> None:
        now = time.monotonic()
        rate = self.messages / max(now - self.start, 1e-9)
        if self.tty:
            if now - self.last < 0.1:
                return
            self.last = now
            frac = min(self.done_bytes / self.total, 1.0) if self.total else 0.0
            bar = "#" * int(frac * 30) + "-" * (30 - int(frac * 30))
            self.stream.write(f"\rimporting [{bar}] {frac:6.1%} {counted(self.messages, 'message')}, "
                              f"{counted(self.files, 'file')}, {rate:,.0f}/s")
            self.stream.flush()
        elif now - self.last >= self.every:
            self.last = now
            self.stream.write(f"importing: {counted(self.messages, 'message')}, {counted(self.files, 'file')}, "
                              f"{rate:,.0f} messages/s\n")
            self.stream.flush()

    def final(self, reports: list[FileReport]) -> str:
        secs = time.monotonic() - self.start
        imported = sum(r.imported for r in reports)
        present = sum(r.present for r in reports)
        skipped = sum(sum(r.skipped.values()) for r in reports)
        handled = imported + present + sum(r.updated for r in reports)
        text = (f"convmem import: {imported} imported, {present} already present, "
                f"{sum(r.updated for r in reports)} updated, {skipped} skipped, "
                f"{sum(r.rejected for r in reports)} rejected, from {counted(len(reports), 'file')} "
                f"in {secs:.2f} s ({handled / max(secs, 1e-9):,.0f} messages/s)")
        if self.tty:
            self.stream.write("\n")
        self.stream.write(text + "\n")
        self.stream.flush()
        return text


def head_hash(path: str, n: int = HEAD_HASH_BYTES) -> str:
    """A hash of a file's first `n` bytes of content (decompressed for .zst); a mark keeps the
    hash of min(4 KiB, its offset) bytes, which an appended file keeps."""
    with open_path(path) as f:
        return hashlib.blake2b(f.read(n), digest_size=8).hexdigest()


def import_source(store: Any, src: Source, opt: Options, sink: Sink, links: dict[str, Any],
                  mark: dict[str, Any] | None = None, final: bool = True,
                  progress: Progress | None = None) -> tuple[FileReport, dict[str, Any] | None]:
    """Import one source; with `mark` (a previous high-water mark of this file) start there.
    Returns the report and the new mark (for growable files), which is valid once `sink` is
    flushed."""
    report = FileReport(src.path, src.fmt)
    new_mark: dict[str, Any] | None = None
    try:
        if src.fmt in LINE_PARSERS:
            new_mark = _lines(store, src, opt, sink, links, report, mark, final)
        else:
            with src.open() as stream:
                emit = lambda items: [sink.add(i, report) for i in items]  # noqa: E731
                if src.fmt == "chatgpt":
                    chatgpt_conversations(stream, report, opt, links, emit)
                elif src.fmt == "claude-ai":
                    claude_ai_conversations(stream, report, opt, links, emit)
                elif src.fmt == "gemini":
                    gemini_file(stream, report, opt, src.path, emit)
                else:
                    report.error = f"unknown format {src.fmt}"
            if src.growable:
                st = os.stat(src.path)
                n = min(HEAD_HASH_BYTES, st.st_size)
                new_mark = {"offset": st.st_size, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                            "head": head_hash(src.path, n), "head_len": n, "ctx": {}}
    except OSError as exc:
        report.error = f"cannot read: {exc.strerror or exc}"
    except Exception as exc:  # a damaged archive or JSON that ijson cannot read
        report.error = f"cannot read: {type(exc).__name__}: {exc}"
        log.debug("reading %s failed", src.path, exc_info=True)
    if progress is not None:
        try:
            progress.file_done(0 if ".zip:" in src.path else os.path.getsize(src.path))
        except OSError:
            progress.file_done(0)
    return report, new_mark


def _lines(store: Any, src: Source, opt: Options, sink: Sink, links: dict[str, Any],
           report: FileReport, mark: dict[str, Any] | None, final: bool) -> dict[str, Any] | None:
    start, ctx = 0, {}
    if mark is not None and src.growable:
        start, ctx = int(mark.get("offset", 0)), dict(mark.get("ctx") or {})
        line_no = int(mark.get("line", 0))
    else:
        line_no = 0
    parser = LINE_PARSERS[src.fmt](report, opt, ctx, links, src.path)
    out: list[dict[str, Any]] = []
    loads, add, feed = orjson.loads, sink.add, parser.feed
    end = start
    with src.open() as stream:
        if start and not src.path.endswith(".zst"):
            stream.seek(start)
        elif start:  # a compressed stream is read up to the mark
            left = start
            while left > 0:
                chunk = stream.read(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)

        def oversized() -> None:
            report.skip("record too large")

        for raw, offset in read_lines(stream, oversized, final=final):
            line_no += 1
            end = start + offset
            if not raw or raw.isspace():
                continue
            report.records += 1
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError:
                report.skip("invalid JSON")
                continue
            feed(obj, str(line_no), out)
            if out:
                for item in out:
                    add(item, report, f"line {line_no}")
                out.clear()
        parser.finish(out, keep_open=not final)
        for item in out:
            add(item, report, f"line {line_no}")
    if not src.growable:
        return None
    st = os.stat(src.path)
    n = min(HEAD_HASH_BYTES, end)
    return {"offset": end, "line": line_no, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "head": head_hash(src.path, n), "head_len": n, "ctx": ctx}


def run_import(store: Any, sources: list[Source], opt: Options,
               progress: Progress | None = None) -> list[FileReport]:
    sink = Sink(store, progress)
    links: dict[str, Any] = {}
    reports = []
    for src in sorted(sources, key=lambda s: s.order):
        report, _ = import_source(store, src, opt, sink, links, progress=progress)
        reports.append(report)
    sink.flush()  # (the reports' counts are final once the last batch is written)
    if sink.written:
        try:
            store.checkpoint()
        except Exception as exc:  # noqa: BLE001 - the import itself is durable
            log.warning("snapshot after import failed: %s", exc)
    return reports


def default_progress() -> Progress:
    return Progress(sys.stderr)

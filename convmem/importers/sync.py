"""`convmem sync`: follow the hosts' transcript folders and import new lines as they are written.

Each round stats the files under the roots; a new or grown file is read from its high-water mark
(the offset after its last complete line, with the parser's small state) to its last complete
line. The marks are kept in the data directory in `sync-state.json`, written atomically
(io.write_file_atomically) after the round's messages are durable in the store, while this sync
holds `sync.lock` (one sync per data directory; the store itself is shared with every other
convmem process, convmem/owner): after a crash the marks are never ahead of the store (nothing
missed) and lines read again derive the same message ids, so they are "already present"
(nothing twice).

A file that shrank, or whose first 4 KiB changed, is read again from the start (the same ids
again: nothing twice). A `.jsonl.zst` keeps the mark of its plain name (Codex compresses idle
rollouts and writes them plain again on append).
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..errors import BUSY, ConvMemError
from ..store.io import IoCounters, open_file, write_file_atomically
from .common import FileReport, Options
from .runner import head_hash, import_source
from .sink import Sink
from .sources import Source, candidates, detect_file, open_path

log = logging.getLogger(__name__)
STATE_NAME = "sync-state.json"
LOCK_NAME = "sync.lock"  # held by the one sync of a data directory
STATE_VERSION = 1
HOSTS = ("claude-code", "codex", "gemini")


def default_roots(environ: Any = os.environ) -> dict[str, list[Path]]:
    home = Path.home()
    claude = Path(environ["CLAUDE_CONFIG_DIR"]) if environ.get("CLAUDE_CONFIG_DIR") else home / ".claude"
    codex = Path(environ["CODEX_HOME"]) if environ.get("CODEX_HOME") else home / ".codex"
    return {"claude-code": [claude / "projects"],
            "codex": [codex / "sessions", codex / "archived_sessions"],
            "gemini": [home / ".gemini" / "tmp"]}


@dataclass
class SyncState:
    path: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, data_dir: Path) -> "SyncState":
        path = data_dir / STATE_NAME
        try:
            doc = orjson.loads(path.read_bytes())
            if doc.get("version") == STATE_VERSION and isinstance(doc.get("files"), dict):
                return cls(path, doc["files"])
            log.warning("%s has an unknown version: starting over (re-read files are present)", path)
        except FileNotFoundError:
            pass
        except (OSError, orjson.JSONDecodeError, AttributeError) as exc:
            log.warning("%s is unreadable (%s): starting over", path, exc)
        return cls(path)

    def save(self) -> None:
        data = orjson.dumps({"version": STATE_VERSION, "files": self.files})
        write_file_atomically(self.path, [data], IoCounters())


class Syncer:
    def __init__(self, store: Any, data_dir: Path, roots: dict[str, list[Path]],
                 options: Options | None = None) -> None:
        self._lock_fd = _take_sync_lock(data_dir)
        self.store = store
        self.roots = roots
        self.opt = options or Options()
        self.state = SyncState.load(data_dir)
        self.links: dict[str, Any] = {}
        self.stop = threading.Event()

    def files(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for host, dirs in self.roots.items():
            for d in dirs:
                if d.is_dir():
                    out += candidates(d)
        out.sort(key=lambda t: (t[1], t[0]))
        return out

    def close(self) -> None:
        """Let another sync follow into this data directory."""
        fd = getattr(self, "_lock_fd", -1)  # (-1 too when __init__ did not get the lock)
        if fd >= 0:
            os.close(fd)
            self._lock_fd = -1

    def __del__(self) -> None:
        self.close()

    def round(self) -> list[FileReport]:
        """One pass over the roots; returns the reports of the files that had something new."""
        sink = Sink(self.store)
        pending: list[tuple[str, dict[str, Any]]] = []
        reports = []
        for path, order in self.files():
            key = path[:-4] if path.endswith(".zst") else path
            try:
                st = os.stat(path)
            except OSError:
                continue
            mark = self.state.files.get(key)
            if mark is not None and mark.get("size") == st.st_size and \
                    mark.get("mtime_ns") == st.st_mtime_ns and (mark.get("zst") == path.endswith(".zst")):
                continue  # unchanged
            fmt = mark.get("fmt") if mark else None
            if fmt is None:
                try:
                    fmt = detect_file(path)
                except OSError:
                    continue
                if fmt not in HOSTS:
                    # Not a transcript (or not yet: an empty new file): looked at again on change.
                    self.state.files[key] = {"fmt": None, "size": st.st_size,
                                             "mtime_ns": st.st_mtime_ns,
                                             "zst": path.endswith(".zst")}
                    pending.append((key, self.state.files[key]))
                    continue
            resume = self._resume_mark(path, key, mark, st.st_size)
            src = Source(path, lambda p=path: open_path(p), fmt, growable=True, order=order)
            report, new_mark = import_source(self.store, src, self.opt, sink, self.links,
                                             mark=resume, final=False)
            if report.error:
                log.error("sync: %s: %s", path, report.error)
                continue
            if new_mark is not None:
                new_mark.update(fmt=fmt, zst=path.endswith(".zst"), size=st.st_size,
                                mtime_ns=st.st_mtime_ns)
                pending.append((key, new_mark))
            reports.append(report)
        sink.flush()  # durable before the marks that say so
        if pending:
            for key, mark in pending:
                self.state.files[key] = mark
            self.state.save()
        return [r for r in reports if r.imported or r.updated or r.rejected]

    def _resume_mark(self, path: str, key: str, mark: dict[str, Any] | None,
                     size: int) -> dict[str, Any] | None:
        if not mark or mark.get("fmt") not in ("claude-code", "codex"):
            return None  # (Gemini sessions are folded whole: read again, present stays present)
        offset = int(mark.get("offset", 0))
        compressed = path.endswith(".zst")
        if (not compressed and size < offset) or mark.get("head") != _head(
                path, int(mark.get("head_len", 4096))):
            log.info("sync: %s shrank or changed at its start: reading it again", path)
            return None
        return mark

    def run(self, interval: float, on_round: Any = None) -> None:
        while not self.stop.is_set():
            reports = self.round()
            if on_round is not None:
                on_round(reports)
            self.stop.wait(interval)


def _head(path: str, n: int) -> str | None:
    try:
        return head_hash(path, n)
    except Exception:  # noqa: BLE001 - unreadable or a damaged .zst: read again from the start
        return None


def _take_sync_lock(data_dir: Path) -> int:
    """An exclusive flock on sync.lock (released when the process ends): two syncs of one data
    directory would race on its marks."""
    fd = open_file(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConvMemError(BUSY, f"another convmem sync is following into {data_dir}") from None
    return fd

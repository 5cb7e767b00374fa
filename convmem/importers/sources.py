"""Inputs: a file, a folder walked for transcripts, a .zip export, a .zst rollout; each file's
format detected from its content (`FORMATS`), and JSON Lines read line by line with the byte
offset after each complete line (the high-water mark of sync).
"""
from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

import orjson

FORMATS = ("convmem", "claude-code", "codex", "chatgpt", "claude-ai", "gemini")
MAX_RECORD = 64 * 1024 * 1024  # one line or array element; a larger one is skipped and counted
HEAD_BYTES = 256 * 1024

# Files of the hosts' folders that hold no conversation: ignored quietly (rule 2).
CHAT_FREE = frozenset({"journal.jsonl", "history.jsonl", "session_index.jsonl", "users.json",
                       "projects.json", "memories.json", "export_manifest.json",
                       "projects.json.index", "settings.json", "logs.json"})
_CONVERSATIONS = re.compile(r"conversations(-\d+)?\.json$")


@dataclass
class Source:
    path: str  # what the report shows (a zip member is "archive.zip:member")
    opener: Callable[[], IO[bytes]]
    fmt: str = ""
    growable: bool = False  # a plain file that may grow (sync keeps a mark on it)
    order: int = 0  # main transcripts before child (subagent) transcripts

    def open(self) -> IO[bytes]:
        return self.opener()


def open_path(path: str) -> IO[bytes]:
    if path.endswith(".zst"):
        import zstandard

        raw = open(path, "rb")  # noqa: SIM115 - closed with the reader
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True),
                                 buffer_size=1 << 20)
    return open(path, "rb", buffering=1 << 20)


def read_lines(stream: IO[bytes], on_oversized: Callable[[], None],
               final: bool = True) -> Iterator[tuple[bytes, int]]:
    """(line without its newline, offset after it) for each complete line. A last line without
    a newline is yielded only when `final` (a one-off import); sync leaves it for later."""
    offset = 0
    readline = stream.readline
    while True:
        line = readline(MAX_RECORD)
        if not line:
            return
        if line[-1:] != b"\n":
            if len(line) >= MAX_RECORD:  # an oversized record: skip to its end
                offset += len(line)
                while True:
                    more = readline(MAX_RECORD)
                    offset += len(more)
                    if not more or more[-1:] == b"\n":
                        break
                on_oversized()
                continue
            if final:
                yield line, offset + len(line)
            return
        offset += len(line)
        yield line, offset


# -- detection -------------------------------------------------------------------------------
_KEY = re.compile(rb'"(mapping|chat_messages|sender|projectHash|sessionId|messages)"\s*:')


def detect_head(head: bytes) -> str | None:
    """The format of a file from its first bytes."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return None
    if text[:1] == b"{":
        first, _, rest = text.partition(b"\n")
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):  # JSON Lines (or a one-line JSON document)
            lines = [obj]
            for raw in rest.split(b"\n")[:50]:
                try:
                    item = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(item, dict):
                    lines.append(item)
            return _detect_lines(lines)
    if text[:1] in (b"[", b"{"):
        keys = [m.group(1) for m in _KEY.finditer(text)]
        if b"mapping" in keys and (b"chat_messages" not in keys
                                   or keys.index(b"mapping") < keys.index(b"chat_messages")):
            return "chatgpt"
        if b"chat_messages" in keys or b"sender" in keys:
            return "claude-ai"
        if b"projectHash" in keys or (b"sessionId" in keys and b"messages" in keys):
            return "gemini"
        if text[:1] == b"[" and re.match(rb"\[\s*\]", text):
            return "chatgpt-or-claude-ai-empty"
    return None


_CLAUDE_TYPES = {"user", "assistant", "summary", "file-history-snapshot", "system", "progress",
                 "attachment", "ai-title", "queue-operation", "custom-title"}


def _detect_lines(lines: list[dict[str, Any]]) -> str | None:
    for obj in lines:
        if "session_id" in obj and "role" in obj and "content" in obj:
            return "convmem"
        if "sessionId" in obj and "projectHash" in obj:
            return "gemini"
        if "uuid" in obj and "sessionId" in obj:
            return "claude-code"
        if "type" in obj and "payload" in obj:
            return "codex"
    for obj in lines:  # no decisive record among the first: weaker signs
        if obj.get("type") in _CLAUDE_TYPES and ("leafUuid" in obj or "messageId" in obj):
            return "claude-code"
        if "$set" in obj or "$rewindTo" in obj:
            return "gemini"
        if obj.get("record_type") == "state" or (obj.get("type") == "message" and "role" in obj):
            return "codex"
    return None


def detect_file(path: str) -> str | None:
    if path.endswith(".zip"):
        return "zip"
    try:
        with open_path(path) as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        raise
    except Exception:  # a damaged .zst
        return None
    return detect_head(head)


# -- expanding inputs into sources -------------------------------------------------------------
def expand(path: str, forced: str | None, problems: list[tuple[str, str]]) -> list[Source]:
    """The sources of one command-line input; files that cannot be read go to `problems`."""
    p = Path(path)
    if p.is_dir():
        return _walk(p, forced, problems)
    if not p.exists():
        problems.append((path, "no such file or folder"))
        return []
    return _file(path, forced, problems, explicit=True)


def _file(path: str, forced: str | None, problems: list[tuple[str, str]], explicit: bool,
          order: int = 0) -> list[Source]:
    if path.endswith(".zip"):
        return _zip(path, forced, problems)
    try:
        fmt = forced or detect_file(path)
    except OSError as exc:
        problems.append((path, f"cannot read: {exc.strerror or exc}"))
        return []
    if fmt == "chatgpt-or-claude-ai-empty":
        fmt = "chatgpt"
    if fmt is None:
        if explicit:
            problems.append((path, "not a format convmem imports (try --format)"))
        else:
            problems.append((path, "skipped: not a chat history"))
        return []
    growable = not path.endswith(".zst") and fmt in ("claude-code", "codex", "gemini", "convmem")
    return [Source(path, lambda: open_path(path), fmt, growable, order)]


def _zip(path: str, forced: str | None, problems: list[tuple[str, str]]) -> list[Source]:
    try:
        with zipfile.ZipFile(path) as z:
            names = [i.filename for i in z.infolist() if not i.is_dir()]
            out = []
            for member in sorted(names):
                base = member.rsplit("/", 1)[-1]
                if base in CHAT_FREE or base.endswith(".index"):
                    continue  # chat-free members of an export: ignored quietly
                if not _CONVERSATIONS.search(base):
                    if base.endswith(".json"):
                        problems.append((f"{path}:{member}", "skipped: not a chat history"))
                    continue
                with z.open(member) as f:
                    head = f.read(HEAD_BYTES)
                fmt = forced or detect_head(head)
                if fmt == "chatgpt-or-claude-ai-empty":
                    fmt = "chatgpt"
                if fmt is None:
                    problems.append((f"{path}:{member}", "not a format convmem imports"))
                    continue
                out.append(Source(f"{path}:{member}", _zip_opener(path, member), fmt))
            if not out and not problems:
                problems.append((path, "no conversations*.json in the archive"))
            return out
    except (OSError, zipfile.BadZipFile) as exc:
        problems.append((path, f"cannot read the archive: {exc}"))
        return []


def _zip_opener(path: str, member: str) -> Callable[[], IO[bytes]]:
    def opener() -> IO[bytes]:
        z = zipfile.ZipFile(path)
        f = z.open(member)
        close = f.close

        def closing() -> None:
            close()
            z.close()

        f.close = closing  # type: ignore[method-assign]
        return f
    return opener


def candidates(root: Path) -> list[tuple[str, int]]:
    """Transcript-like files under `root` (sorted; children after their parents)."""
    out: list[tuple[str, int]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name in CHAT_FREE or name.endswith((".meta.json", ".index")) or name.startswith("."):
                continue
            if not name.endswith((".jsonl", ".jsonl.zst", ".json", ".zip")):
                continue
            full = os.path.join(dirpath, name)
            if name.endswith(".jsonl.zst") and os.path.exists(full[:-4]):
                continue  # a plain twin wins (Codex writes plain again on append)
            child = "subagents" in Path(dirpath).parts or (
                name.endswith(".jsonl") and os.path.basename(dirpath) != "chats"
                and os.path.basename(os.path.dirname(dirpath)) == "chats")
            out.append((full, 1 if child else 0))
    out.sort(key=lambda t: (t[1], t[0]))
    return out


def _walk(root: Path, forced: str | None, problems: list[tuple[str, str]]) -> list[Source]:
    out: list[Source] = []
    for full, order in candidates(root):
        out += _file(full, forced, problems, explicit=False, order=order)
    return out

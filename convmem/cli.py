"""Command line (serve itself is cli_serve.py): serve / import / sync / export / health / search / trash / restore, and --version.

Only this module and the transports write to stdout. Logs go to stderr through `logging`.
Exit codes: 0 success, 1 an application error (for import: a file that could not be read), 2 usage error.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import orjson

from convmem import __version__
from convmem.errors import ConvMemError
from convmem.wording import counted

logger = logging.getLogger("convmem.cli")

LOG_LEVELS = ("debug", "info", "warning", "error")
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
STORE_LOG = "messages.log"  # convmem.store.logfile.LOG_NAME (a test checks), without its imports


def core_kind() -> str | None:
    """"compiled" or "pure-python", by importing the core; None if it cannot be imported."""
    try:
        from convmem._core import CORE_KIND
    except ImportError as exc:
        logger.error("the convmem core cannot be imported: %s", exc)
        return None
    return str(CORE_KIND)


def version_line() -> tuple[str, bool]:
    """The --version text and whether the core loaded: the core kind, its build (a debug or -O0
    build measures nothing, so say it) and the directory the core was loaded from."""
    kind = core_kind()
    if kind is None:
        return f"convmem {__version__} (core: unavailable)\n", False
    from convmem._core import BUILD_TYPE, CORE_PATH, DEBUG_MODULES

    build = "" if BUILD_TYPE == "n/a" else f", build: {BUILD_TYPE}"
    if DEBUG_MODULES:
        build += f" ({', '.join(DEBUG_MODULES)})"
    return f"convmem {__version__} (core: {kind}{build}; {CORE_PATH})\n", True


def default_data_dir(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path:
    """$CONVMEM_DATA_DIR, else $XDG_DATA_HOME/convmem, else ~/.local/share/convmem."""
    if environ.get("CONVMEM_DATA_DIR"):
        return Path(environ["CONVMEM_DATA_DIR"]).expanduser()
    xdg = environ.get("XDG_DATA_HOME", "")
    # The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "convmem"
    return Path.home() / ".local" / "share" / "convmem"


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    sys.stderr.write(f"convmem: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def _open_store(data_dir: Path) -> Any:
    """The data directory's store: owned by this process, or relayed to the convmem process
    that owns it (every command works while agents run; see convmem/owner)."""
    from convmem.owner import SharedStore

    try:
        return SharedStore.open(data_dir)
    except ConvMemError as exc:
        if exc.code == "IO_ERROR" and data_dir.is_dir() and not os.access(data_dir, os.W_OK):
            _fail(f"IO_ERROR: cannot write {data_dir}: Permission denied")
        if exc.code == "BUSY":
            _fail(f"BUSY: {data_dir}: {exc.message}")
        where = "" if str(data_dir) in exc.message else f"cannot open {data_dir}: "
        _fail(f"{exc.code}: {where}{exc.message}")


def _require_store(data_dir: Path) -> None:
    """A command that reads: a directory without a store is a mistake (a mistyped path), not a
    new empty store."""
    if not data_dir.is_dir():
        _fail(f"NOT_FOUND: {data_dir} does not exist: no convmem store there")
    if not (data_dir / STORE_LOG).exists():
        _fail(f"NOT_FOUND: {data_dir} holds no convmem store")


def _write_json(payload: Any) -> None:
    out = sys.stdout.buffer
    out.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    out.write(b"\n")
    out.flush()


# --- commands ---------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from convmem.cli_serve import serve  # (its imports are the server's: only when serving)

    return serve(args)


def _import_options(args: argparse.Namespace) -> Any:
    from convmem.importers.common import Options

    drop = {d.strip() for d in (args.drop or "").split(",") if d.strip()}
    unknown = drop - {"tools", "injected"}
    if unknown:
        _fail(f"--drop takes tools and/or injected, not {', '.join(sorted(unknown))}", EXIT_USAGE)
    if args.tool_output_max < 256:
        _fail("--tool-output-max must be at least 256 bytes", EXIT_USAGE)
    return Options(reasoning=args.reasoning, drop_tools="tools" in drop,
                   drop_injected="injected" in drop, tool_output_max=args.tool_output_max)


def cmd_import(args: argparse.Namespace) -> int:
    """convmem JSON Lines from FILE or stdin, or chat histories (files, folders, .zip exports)
    in any format convmem reads: a report per file on stdout, progress on stderr."""
    from convmem.importers import ProgressBar, import_jsonl
    from convmem.importers.runner import Progress, run_import
    from convmem.importers.sources import expand

    options = _import_options(args)
    if args.files == ["-"]:
        if args.format not in (None, "convmem"):
            _fail("stdin is read as convmem JSON Lines only", EXIT_USAGE)
        store = _open_store(args.data_dir)
        try:
            progress = ProgressBar(sys.stderr, None) if sys.stderr.isatty() else None
            with store.deferring_snapshots():  # (close writes the snapshot)
                summary = import_jsonl(store, sys.stdin.buffer, progress)
        finally:
            store.close()
        sys.stdout.write("\n".join(summary.lines()) + "\n")
        sys.stdout.flush()
        return EXIT_OK  # (rejected lines are in the summary; stdin could be read)
    problems: list[tuple[str, str]] = []
    sources = []
    for path in args.files:
        sources += expand(path, args.format, problems)
    fatal = [p for p in problems if not p[1].startswith("skipped:")]
    if not sources:
        for path, why in problems:
            sys.stderr.write(f"convmem: {path}: {why}\n")
        _fail("nothing to import" if not fatal else f"cannot read {fatal[0][0]}: {fatal[0][1]}")
    store = _open_store(args.data_dir)
    out_lines: list[str] = []
    try:
        with store.deferring_snapshots():  # (close writes the snapshot)
            plain = [s for s in sources if s.fmt == "convmem"]
            chats = [s for s in sources if s.fmt != "convmem"]
            for src in plain:  # convmem's own format: its summary, as before
                with src.open() as stream:
                    tty = sys.stderr.isatty()
                    progress = ProgressBar(sys.stderr, os.fstat(stream.fileno()).st_size) if tty else None
                    summary = import_jsonl(store, stream, progress)
                lines = summary.lines()
                out_lines += lines if len(sources) == 1 else [f"{src.path}: {lines[0]}"] + lines[1:]
            reports = []
            if chats:
                total = 0
                for src in chats:
                    try:
                        total += os.path.getsize(src.path)
                    except OSError:
                        pass
                progress = Progress(sys.stderr, total)
                reports = run_import(store, chats, options, progress)
                for r in reports:
                    out_lines.append(r.line())
                    out_lines += [f"  {e}" for e in r.examples]
                    if r.error:
                        out_lines.append(f"  cannot read: {r.error}")
                progress.final(reports)
    finally:
        store.close()
    for path, why in problems:
        out_lines.append(f"{path}: {why}")
    sys.stdout.write("\n".join(out_lines) + "\n")
    sys.stdout.flush()
    # Exit status 1 only when a file could not be read: rejected lines and records are reported
    # above (counted per file), not failures of the import.
    unreadable = fatal or any(r.error for r in reports)
    return EXIT_ERROR if unreadable else EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    """Follow the hosts' transcript folders; import new lines as they are written."""
    from convmem.importers.sync import HOSTS, Syncer, default_roots

    options = _import_options(args)
    roots = default_roots()
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    bad = [h for h in hosts if h not in HOSTS]
    if bad:
        _fail(f"--hosts takes {', '.join(HOSTS)}", EXIT_USAGE)
    for host, given in (("claude-code", args.claude_dir), ("codex", args.codex_dir),
                        ("gemini", args.gemini_dir)):
        if given:
            roots[host] = [Path(d).expanduser() for d in given]
    roots = {h: roots[h] for h in hosts}
    store = _open_store(args.data_dir)  # shared with the other convmem processes
    try:
        syncer = Syncer(store, args.data_dir, roots, options)
    except ConvMemError as exc:
        store.close()
        _fail(f"{exc.code}: {exc.message}")

    def stop(signum: int, frame: Any) -> None:
        syncer.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    where = "; ".join(f"{h}: {', '.join(str(d) for d in ds)}" for h, ds in roots.items())
    sys.stderr.write(f"convmem sync: following {where} into {args.data_dir}\n")
    sys.stderr.flush()
    totals = {"imported": 0, "updated": 0}

    def on_round(reports: list[Any]) -> None:
        for r in reports:
            totals["imported"] += r.imported
            totals["updated"] += r.updated
            sys.stderr.write(f"convmem sync: {r.line()}\n")
        sys.stderr.flush()

    try:
        if args.once:
            on_round(syncer.round())
        else:
            syncer.run(args.interval, on_round)
    finally:
        store.close()
    sys.stderr.write(f"convmem sync: stopped; {totals['imported']} imported, "
                     f"{totals['updated']} updated\n")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from convmem.importers import export_jsonl

    store = _read_store(args)
    try:
        count = export_jsonl(store, sys.stdout.buffer, args.session_id)
    except ConvMemError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        store.close()
    logger.info("exported %d messages", count)
    return EXIT_OK


def _want_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def _colour() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _when(ms: Any) -> str:
    import time

    if not isinstance(ms, int):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


def _snippet(text: str, query: str | None, width: int = 160) -> str:
    """One line of `text` around the first query term found, the terms highlighted on a terminal."""
    import re

    flat = " ".join(text.split())
    terms = [t for t in re.findall(r"\w+", query or "") if len(t) > 1]
    pattern = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE) if terms else None
    start = 0
    if pattern is not None:
        m = pattern.search(flat)
        if m is not None and m.start() > width // 3:
            start = m.start() - width // 3
    cut = flat[start:start + width]
    cut = ("…" if start else "") + cut + ("…" if start + width < len(flat) else "")
    if pattern is not None and _colour():
        cut = pattern.sub(lambda m: f"\x1b[1;33m{m.group(0)}\x1b[0m", cut)
    return cut


def _print_message(m: dict[str, Any], query: str | None = None, full: bool = False) -> None:
    meta = m.get("metadata") or {}
    head = f"{_when(m.get('timestamp'))}  {m.get('session_id')}  {m.get('role')}  {m.get('message_id')}"
    extra = [f"{meta.get('memory_kind', '')}/{meta.get('memory_tier', '')}"]
    if meta.get("importance") is not None:
        extra.append(f"importance {meta['importance']}")
    if meta.get("tags"):
        extra.append("tags " + ",".join(meta["tags"]))
    if "score" in m:
        extra.append(f"score {m['score']:.3g}" if isinstance(m["score"], float) else f"score {m['score']}")
    bold = "\x1b[1m" if _colour() else ""
    reset = "\x1b[0m" if _colour() else ""
    lines = [f"{bold}{head}{reset}  ({'; '.join(extra)})"]
    content = m.get("content", "")
    lines.append(content if full else "  " + _snippet(content, query))
    sys.stdout.write("\n".join(lines) + "\n")


def _run_tool(store: Any, name: str, **kwargs: Any) -> dict[str, Any]:
    try:
        return getattr(store, name)(**kwargs)
    except ConvMemError as exc:
        store.close()
        _fail(f"{exc.code}: {exc.message}")


def _paged(store: Any, key: str, most: int | None, **kwargs: Any) -> list[dict[str, Any]]:
    """Up to `most` (None: all) items of a paged read_messages view, following nextCursor."""
    items: list[dict[str, Any]] = []
    cursor = None
    while most is None or len(items) < most:
        limit = 1000 if most is None else min(1000, most - len(items))
        page = _run_tool(store, "read_messages", limit=limit, cursor=cursor, **kwargs)
        items += page[key]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return items


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [x.strip() for x in value.split(",") if x.strip()]


def _read_store(args: argparse.Namespace) -> Any:
    """The store for a command that only reads: a directory that holds no store is an error; a
    directory this process may not write (read-only media, a backup) is read without writing
    anything (no owner to share with: the socket could not be made there)."""
    _require_store(args.data_dir)
    if not os.access(args.data_dir, os.W_OK):
        from convmem.api import MemoryStore

        try:
            return MemoryStore.open(args.data_dir, read_only=True)
        except ConvMemError as exc:
            _fail(f"{exc.code}: {exc.message}")
    return _open_store(args.data_dir)


def cmd_health(args: argparse.Namespace) -> int:
    store = _read_store(args)
    try:
        health = store.get_system_health()
    finally:
        store.close()
    if _want_json(args):
        _write_json(health)
    else:
        mem = health.get("memory_estimate", {}).get("total_bytes", 0)
        sys.stdout.write(
            f"status {health['status']}: {counted(health['active_messages'], 'message')} in "
            f"{counted(health['session_count'], 'session')} ({health['deleted_messages']} deleted), "
            f"log {health['log_size']} bytes, "
            f"snapshot {health['snapshot_size']} bytes, memory ~{mem // (1 << 20)} MiB\n")
        if health.get("last_error"):
            sys.stdout.write(f"last error: {health['last_error']}\n")
    return EXIT_ERROR if health.get("status") == "DEGRADED" else EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    filters = {k: v for k, v in (("kinds", _split(args.kinds)), ("tiers", _split(args.tiers)),
                                 ("tags", _split(args.tags))) if v}
    store = _read_store(args)
    try:
        result = _run_tool(store, "search_messages", query=args.query, limit=args.limit,
                           session_id=args.session_id, min_importance=args.min_importance,
                           filters_json=orjson.dumps(filters).decode() if filters else None)
    finally:
        store.close()
    if _want_json(args):
        _write_json(result)
        return EXIT_OK
    results = result.get("results", [])
    if not results:
        sys.stdout.write("no match\n")
    for m in results:
        _print_message(m, args.query)
    return EXIT_OK


def cmd_sessions(args: argparse.Namespace) -> int:
    store = _read_store(args)
    try:
        sessions = _paged(store, "sessions", args.limit, view="sessions")
    finally:
        store.close()
    if _want_json(args):
        _write_json({"sessions": sessions})
        return EXIT_OK
    for s in sessions:
        summary = s.get("representative_summary") or ""
        summary = summary.get("content", "") if isinstance(summary, dict) else str(summary)
        sys.stdout.write(f"{_when(s.get('started_at'))} .. {_when(s.get('last_message_at'))}  "
                         f"{s['session_id']}  {counted(s['message_count'], 'message')}\n")
        if summary:
            sys.stdout.write(f"  {_snippet(summary, None)}\n")
    if not sessions:
        sys.stdout.write("no sessions\n")
    return EXIT_OK


def _looks_like_ulid(text: str) -> bool:
    import re

    return re.fullmatch(r"[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}", text) is not None


def cmd_show(args: argparse.Namespace) -> int:
    """A message (by id) with its whole content, or a session's messages (by session id)."""
    store = _read_store(args)
    try:
        if _looks_like_ulid(args.id):
            try:
                found = store.read_messages(view="context", message_id=args.id, before=0, after=0)
            except ConvMemError as exc:
                if exc.code != "NOT_FOUND":
                    store.close()
                    _fail(f"{exc.code}: {exc.message}")
                found = None
            if found is not None:
                message = found["message"]
                parts, offset = [], 0
                while True:  # the whole content, past the context view's cut
                    page = _run_tool(store, "read_messages", view="content", message_id=args.id,
                                     content_offset=offset)["content_range"]
                    parts.append(page["content"])
                    offset = page["next_content_offset"]
                    if page["complete"]:
                        break
                message["content"] = "".join(parts)
                if _want_json(args):
                    _write_json(found)
                else:
                    _print_message(message, full=True)
                return EXIT_OK
        history = _paged(store, "history", None, view="history", session_id=args.id)
    finally:
        store.close()
    if not history:
        _fail(f"NOT_FOUND: no message or session {args.id!r}")
    if _want_json(args):
        _write_json({"session_id": args.id, "history": history})
    else:
        for m in history:
            _print_message(m, full=True)
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    _require_store(args.data_dir)
    store = _open_store(args.data_dir)
    try:
        result = _run_tool(store, "delete_message", message_id=args.message_id)
    finally:
        store.close()
    found = result.get("status") == "OK"
    if _want_json(args):
        _write_json(result)
    elif found:
        sys.stdout.write(f"deleted {args.message_id}\n")
    else:
        sys.stderr.write(f"convmem: NOT_FOUND: no live message {args.message_id}\n")
    return EXIT_OK if found else EXIT_ERROR


def cmd_trash(args: argparse.Namespace) -> int:
    """The deleted messages `convmem restore` can bring back (until `convmem rebuild`)."""
    store = _read_store(args)
    deleted: list[dict[str, Any]] = []
    cursor = None
    try:
        while args.limit is None or len(deleted) < args.limit:
            limit = 1000 if args.limit is None else min(1000, args.limit - len(deleted))
            page = _run_tool(store, "list_deleted", limit=limit, cursor=cursor, session_id=args.session_id)
            deleted += page["deleted"]
            cursor = page.get("nextCursor")
            if not cursor:
                break
    finally:
        store.close()
    if _want_json(args):
        _write_json({"deleted": deleted, "total_deleted": page["total_deleted"]})
        return EXIT_OK
    for e in deleted:
        sys.stdout.write(f"{_when(e['timestamp'])}  {e['session_id']}  {e['role']}  {e['message_id']}  "
                         f"(deleted #{e['deleted_seq']}; {e['content_bytes']} bytes)\n")
        sys.stdout.write(f"  {_snippet(e.get('summary') or e['snippet'], None)}\n")
    if not deleted:
        sys.stdout.write("no deleted messages\n")
    elif len(deleted) < page["total_deleted"]:
        sys.stdout.write(f"({page['total_deleted'] - len(deleted)} more)\n")
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    _require_store(args.data_dir)
    result = _once(_open_store(args.data_dir), "restore_message", message_id=args.message_id)
    if _want_json(args):
        _write_json(result)
    else:
        sys.stdout.write(f"restored {args.message_id} (revision {result['message']['revision']})\n")
    return EXIT_OK


def cmd_rebuild(args: argparse.Namespace) -> int:
    _require_store(args.data_dir)
    result = _once(_open_store(args.data_dir), "rebuild_index")
    if _want_json(args):
        _write_json(result)
    else:
        sys.stdout.write("rebuilt: " + ", ".join(f"{k} {v}" for k, v in result.items() if k != "status") + "\n")
    return EXIT_OK


def _once(store: Any, name: str, **kwargs: Any) -> dict[str, Any]:
    """One call on a store that is closed after it (a failure is the command's one-line error)."""
    try:
        return _run_tool(store, name, **kwargs)
    finally:
        store.close()


def cmd_verify(args: argparse.Namespace) -> int:
    report = _once(_read_store(args), "verify")
    if _want_json(args):
        _write_json(report)
    else:
        sys.stdout.write(f"log: {report['log_records']} records, {report['log_bytes']} bytes, "
                         f"{len(report['log_damage'])} damaged stretches\n")
        for d in report["log_damage"]:
            sys.stdout.write(f"  damaged at byte offset {d['offset']}: {d['reason']} "
                             f"({d['bytes']} bytes)\n")
        sys.stdout.write(f"snapshot: {report['snapshot']}\n")
        sys.stdout.write("ok\n" if report["ok"] else "DAMAGED\n")
    return EXIT_OK if report["ok"] else EXIT_ERROR


def cmd_backup(args: argparse.Namespace) -> int:
    result = _once(_read_store(args), "backup", dest=str(Path(args.dest).expanduser().absolute()))
    if _want_json(args):
        _write_json(result)
    else:
        sys.stdout.write(f"backup of {args.data_dir} written to {result['path']} "
                         f"({result['log_bytes']} bytes of log)\n")
    return EXIT_OK


# --- parser -----------------------------------------------------------------------------------


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, not {port}")
    return port


def build_parser() -> argparse.ArgumentParser:
    data_help = ("memory directory (default: $CONVMEM_DATA_DIR, else $XDG_DATA_HOME/convmem, else "
                 "~/.local/share/convmem)")
    # The same options before the command (convmem --data-dir D health) and after it; a value
    # given after the command wins (SUPPRESS: an absent option does not overwrite the first).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS, help=data_help)
    common.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help="stderr log level (default: warning)")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of text")

    parser = argparse.ArgumentParser(prog="convmem", description="Conversation memory for LLM agents over MCP.")
    parser.add_argument("--version", action="store_true", help="print the version and which core is loaded")
    parser.add_argument("--data-dir", type=Path, default=None, help=data_help)
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="warning", help="stderr log level (default: warning)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", parents=[common], help="serve the MCP tools (stdio by default)")
    serve.add_argument("--transport", choices=("stdio", "http", "sse"), default="stdio",
                       help="stdio (default), http (Streamable HTTP at /mcp) or sse (the legacy HTTP+SSE: "
                            "GET /sse, POST /messages)")
    serve.add_argument("--toolsets", default=None, metavar="core,recall,admin|all",
                       help="tool groups beyond the contract's seven tools (default: the seven, exactly)")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=3001, help="HTTP port, 0 picks a free one (default: 3001)")
    serve.add_argument("--tokens-file", default=None, help="bearer tokens, one 'read TOKEN' or 'write TOKEN' per line")
    serve.set_defaults(func=cmd_serve)

    shaping = argparse.ArgumentParser(add_help=False)
    shaping.add_argument("--reasoning", action="store_true",
                         help="also import hidden reasoning (thinking), tagged reasoning")
    shaping.add_argument("--drop", default="", metavar="tools,injected",
                         help="leave tool calls/results and/or injected context out (counted)")
    shaping.add_argument("--tool-output-max", type=int, default=16384, metavar="BYTES",
                         help="cut tool input and output beyond this size (default: 16384)")

    imp = sub.add_parser("import", parents=[common, shaping],
                         help="import chat histories (files, folders, .zip exports) or convmem JSON Lines (- for stdin)")
    imp.add_argument("files", metavar="PATH", nargs="+")
    imp.add_argument("--format", default=None,
                     choices=("convmem", "claude-code", "codex", "chatgpt", "claude-ai", "gemini"),
                     help="force a format instead of detecting it from the content")
    imp.set_defaults(func=cmd_import)

    syn = sub.add_parser("sync", parents=[common, shaping],
                         help="follow Claude Code, Codex and Gemini CLI transcripts and import new lines")
    syn.add_argument("--hosts", default="claude-code,codex,gemini", help="hosts to follow")
    syn.add_argument("--claude-dir", action="append", default=None, metavar="DIR",
                     help="Claude Code projects folder (default: $CLAUDE_CONFIG_DIR or ~/.claude, /projects)")
    syn.add_argument("--codex-dir", action="append", default=None, metavar="DIR",
                     help="Codex sessions folder (default: $CODEX_HOME or ~/.codex, /sessions and /archived_sessions)")
    syn.add_argument("--gemini-dir", action="append", default=None, metavar="DIR",
                     help="Gemini CLI folder (default: ~/.gemini/tmp)")
    syn.add_argument("--interval", type=float, default=2.0, help="seconds between passes (default: 2)")
    syn.add_argument("--once", action="store_true", help="one pass, then exit")
    syn.set_defaults(func=cmd_sync)

    exp = sub.add_parser("export", parents=[common], help="write the live messages as JSON Lines to stdout")
    exp.add_argument("--session-id", "--session", default=None)
    exp.set_defaults(func=cmd_export)

    health = sub.add_parser("health", parents=[common, as_json],
                            help="the store's health (exit 1 when DEGRADED)")
    health.set_defaults(func=cmd_health)

    search = sub.add_parser("search", parents=[common, as_json], help="search the memory")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=None, help="results (default 20)")
    search.add_argument("--session", "--session-id", dest="session_id", default=None, help="only this session")
    search.add_argument("--kinds", default=None, help="comma-separated memory kinds")
    search.add_argument("--tiers", default=None, help="comma-separated memory tiers")
    search.add_argument("--tags", default=None, help="comma-separated tags (all must be present)")
    search.add_argument("--min-importance", type=int, default=None, metavar="N")
    search.set_defaults(func=cmd_search)

    sessions = sub.add_parser("sessions", parents=[common, as_json], help="list the sessions")
    sessions.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    sessions.set_defaults(func=cmd_sessions)

    show = sub.add_parser("show", parents=[common, as_json], help="a message (whole) or a session's messages")
    show.add_argument("id", metavar="MESSAGE_ID|SESSION_ID")
    show.set_defaults(func=cmd_show)

    delete = sub.add_parser("delete", parents=[common, as_json], help="delete a message")
    delete.add_argument("message_id", metavar="MESSAGE_ID")
    delete.set_defaults(func=cmd_delete)

    trash = sub.add_parser("trash", parents=[common, as_json],
                           help="list deleted messages that can be restored (until the next rebuild)")
    trash.add_argument("--session", "--session-id", dest="session_id", default=None, help="only this session")
    trash.add_argument("--limit", type=int, default=None, help="at most this many (default: all)")
    trash.set_defaults(func=cmd_trash)

    restore = sub.add_parser("restore", parents=[common, as_json], help="restore a deleted message")
    restore.add_argument("message_id", metavar="MESSAGE_ID")
    restore.set_defaults(func=cmd_restore)

    rebuild = sub.add_parser("rebuild", parents=[common, as_json], help="rebuild the index and compact the log")
    rebuild.set_defaults(func=cmd_rebuild)

    verify = sub.add_parser("verify", parents=[common, as_json],
                            help="check every record and the snapshot; exit 1 on any damage")
    verify.set_defaults(func=cmd_verify)

    backup = sub.add_parser("backup", parents=[common, as_json],
                            help="write a consistent copy of the live store to DEST")
    backup.add_argument("dest", help="a new or empty directory")
    backup.set_defaults(func=cmd_backup)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        line, loaded = version_line()
        sys.stdout.write(line)
        return EXIT_OK if loaded else EXIT_ERROR
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Absolute, so the banner and the host configuration it prints name the real place.
    args.data_dir = (args.data_dir or default_data_dir()).expanduser().absolute()
    if args.data_dir.exists() and not args.data_dir.is_dir():
        _fail(f"{args.data_dir} is not a directory: the data directory (--data-dir) is a "
              "directory of its own, created if missing", EXIT_USAGE)
    logger.info("data directory: %s", args.data_dir)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `convmem export | head`); say nothing more on that pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR

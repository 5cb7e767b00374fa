"""Command line: serve / import / sync / export / health / search, and --version.

Only this module and the transports write to stdout. Logs go to stderr through `logging`.
Exit codes: 0 success, 1 an application error (or import with rejected lines), 2 usage error.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import orjson

from convmem import __version__
from convmem.errors import ConvMemError

logger = logging.getLogger("convmem.cli")

LOG_LEVELS = ("debug", "info", "warning", "error")
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def core_kind() -> str | None:
    """"compiled" or "pure-python", by importing the core; None if it cannot be imported."""
    try:
        from convmem._core import CORE_KIND
    except ImportError as exc:
        logger.error("the convmem core cannot be imported: %s", exc)
        return None
    return str(CORE_KIND)


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
        if exc.code == "BUSY":
            _fail(f"BUSY: {data_dir}: {exc.message}")
        where = "" if str(data_dir) in exc.message else f"cannot open {data_dir}: "
        _fail(f"{exc.code}: {where}{exc.message}")


def _write_json(payload: Any) -> None:
    out = sys.stdout.buffer
    out.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    out.write(b"\n")
    out.flush()


def _host_config_snippet(data_dir: Path) -> str:
    entry = {"mcpServers": {"convmem": {"command": "convmem", "args": ["serve", "--data-dir", str(data_dir)]}}}
    return orjson.dumps(entry).decode()


# --- commands ---------------------------------------------------------------------------------


def _import_in_background(module: str) -> threading.Thread:
    """Start importing `module` in a thread. A failure is left for the caller's own import to
    raise (Python does not keep a module whose import failed)."""

    def run() -> None:
        try:
            importlib.import_module(module)
        except Exception:  # re-raised by the caller's own import
            logger.debug("background import of %s failed", module, exc_info=True)

    thread = threading.Thread(target=run, name="convmem-import", daemon=True)
    thread.start()
    return thread


def cmd_serve(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    tokens = None
    if args.transport == "http":
        from convmem.server import InsecureBindError, TokensFileError, check_bind, load_tokens

        try:
            tokens = load_tokens(args.tokens_file) if args.tokens_file else None
            check_bind(args.host, tokens)
        except (TokensFileError, InsecureBindError) as exc:
            _fail(str(exc), EXIT_USAGE)
    elif args.tokens_file:
        _fail("--tokens-file applies to --transport http only", EXIT_USAGE)

    if args.transport == "stdio" and not sys.stdin.isatty():
        relayed = _relay_stdio(data_dir)
        if relayed is not None:
            return relayed
    # Importing the MCP SDK takes ~0.5 s and opening a large store a second or more, mostly in
    # code that releases the GIL (file reads, numpy), so doing both at once shortens the cold start.
    importer = _import_in_background("convmem.server")
    try:
        store = _open_store(data_dir)
    finally:
        importer.join()
    interrupted = False
    try:
        if args.transport == "http":
            from convmem.server import serve_http

            def announce(url: str) -> None:
                scopes = "bearer tokens required" if tokens else "no tokens, loopback only"
                text = f"convmem: serving {data_dir} over Streamable HTTP at {url} ({scopes})\n"
                if not tokens:
                    text += (
                        "convmem: WARNING: loopback is not a user boundary: every local user and process "
                        "that can connect to this port can read and change this memory. Use --tokens-file "
                        "on a shared machine (an owner-only Unix socket is planned).\n"
                    )
                sys.stderr.write(text)
                sys.stderr.flush()

            try:
                serve_http(store, __version__, args.host, args.port, tokens, args.log_level, announce)
            except OSError as exc:  # mostly: the port is taken or the address is not ours
                _fail(f"cannot serve HTTP on {args.host} port {args.port}: {exc.strerror or exc}")
        else:
            interrupted = _serve_stdio(store, __version__, data_dir)
    finally:
        store.close()
    if interrupted:
        # The SDK's stdin reader thread is blocked in read() and cannot be cancelled; the
        # interpreter would wait for it until the host closes the pipe. The store is closed.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(EXIT_OK)
    return EXIT_OK


def _relay_stdio(data_dir: Path) -> int | None:
    """With another convmem process owning the store, relay this host's stdio to it as bytes
    (convmem/owner/relay.py: no MCP SDK, no store in this process); None when no process serves
    the store (this one then opens it)."""
    from convmem.owner.relay import Relay, connect_stream

    sock = connect_stream(data_dir)
    if sock is None:
        return None
    relay = Relay(data_dir, sock, __version__)

    terminated: list[int] = []

    def on_sigterm(signum: int, frame: Any) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return relay.run()
    except KeyboardInterrupt:  # SIGTERM: a host stopping it (0); Ctrl-C: 130
        relay.close()
        return EXIT_OK if terminated else 130


def _serve_stdio(store: Any, version: str, data_dir: Path) -> bool:
    """Serve until stdin closes (returns False) or SIGTERM/SIGINT (returns True)."""
    import anyio

    from convmem.server import serve_stdio

    if sys.stdin.isatty():
        sys.stderr.write(
            f"convmem: serving the memory in {data_dir} over MCP stdio.\n"
            "This command is meant to be started by an MCP host, which talks JSON-RPC on its stdin/stdout.\n"
            f"Host configuration: {_host_config_snippet(data_dir)}\n"
            "Press Ctrl-D to stop.\n"
        )
        sys.stderr.flush()

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # unwinds the event loop so the store is closed cleanly

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        anyio.run(serve_stdio, store, version)
    except KeyboardInterrupt:
        logger.info("interrupted, shutting down")
        return True
    return False


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
            summary = import_jsonl(store, sys.stdin.buffer, progress)
        finally:
            store.close()
        sys.stdout.write("\n".join(summary.lines()) + "\n")
        sys.stdout.flush()
        return EXIT_ERROR if summary.rejected_count else EXIT_OK
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
    rejected = 0
    try:
        plain = [s for s in sources if s.fmt == "convmem"]
        chats = [s for s in sources if s.fmt != "convmem"]
        for src in plain:  # convmem's own format: its summary, as before
            with src.open() as stream:
                tty = sys.stderr.isatty()
                progress = ProgressBar(sys.stderr, os.fstat(stream.fileno()).st_size) if tty else None
                summary = import_jsonl(store, stream, progress)
            rejected += summary.rejected_count
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
    unreadable = fatal or any(r.error for r in reports)
    return EXIT_ERROR if unreadable or rejected else EXIT_OK


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

    store = _open_store(args.data_dir)
    try:
        count = export_jsonl(store, sys.stdout.buffer, args.session_id)
    except ConvMemError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        store.close()
    logger.info("exported %d messages", count)
    return EXIT_OK


def cmd_health(args: argparse.Namespace) -> int:
    store = _open_store(args.data_dir)
    try:
        _write_json(store.get_system_health())
    finally:
        store.close()
    return EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    store = _open_store(args.data_dir)
    try:
        result = store.search_messages(query=args.query, limit=args.limit, session_id=args.session_id)
    except ConvMemError as exc:
        _fail(f"{exc.code}: {exc.message}")
    finally:
        store.close()
    _write_json(result)
    return EXIT_OK


# --- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="memory directory (default: $CONVMEM_DATA_DIR, else $XDG_DATA_HOME/convmem, else ~/.local/share/convmem)",
    )
    common.add_argument("--log-level", choices=LOG_LEVELS, default="warning", help="stderr log level (default: warning)")

    parser = argparse.ArgumentParser(prog="convmem", description="Conversation memory for LLM agents over MCP.")
    parser.add_argument("--version", action="store_true", help="print the version and which core is loaded")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", parents=[common], help="serve the MCP tools (stdio by default)")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=3001, help="HTTP port, 0 picks a free one (default: 3001)")
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
    exp.add_argument("--session-id", default=None)
    exp.set_defaults(func=cmd_export)

    health = sub.add_parser("health", parents=[common], help="print the store's health JSON")
    health.set_defaults(func=cmd_health)

    search = sub.add_parser("search", parents=[common], help="search and print the results JSON")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=None)
    search.add_argument("--session-id", default=None)
    search.set_defaults(func=cmd_search)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        kind = core_kind()
        sys.stdout.write(f"convmem {__version__} (core: {kind or 'unavailable'})\n")
        return EXIT_OK if kind else EXIT_ERROR
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
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `convmem export | head`); say nothing more on that pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR

"""Command line: serve / import / export / health / search, and --version.

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


def cmd_import(args: argparse.Namespace) -> int:
    from convmem.importers import ProgressBar, import_jsonl

    if args.file == "-":
        stream, total = sys.stdin.buffer, None
    else:
        try:
            stream = open(args.file, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            _fail(f"cannot read {args.file}: {exc.strerror}")
        total = os.fstat(stream.fileno()).st_size if os.path.isfile(args.file) else None
    store = _open_store(args.data_dir)
    try:
        progress = ProgressBar(sys.stderr, total) if sys.stderr.isatty() else None
        summary = import_jsonl(store, stream, progress)
    finally:
        store.close()
        if stream is not sys.stdin.buffer:
            stream.close()
    sys.stdout.write("\n".join(summary.lines()) + "\n")
    sys.stdout.flush()
    return EXIT_ERROR if summary.rejected else EXIT_OK


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

    imp = sub.add_parser("import", parents=[common], help="import messages from JSON Lines (FILE or - for stdin)")
    imp.add_argument("file", metavar="FILE")
    imp.set_defaults(func=cmd_import)

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

"""`convmem serve`: the MCP server on a data directory, over stdio (relayed to the process that
owns the store when another one does), Streamable HTTP or HTTP+SSE, with the exit statuses and the
terminal banner. The rest of the command line is cli.py."""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import orjson

from convmem import __version__
from convmem.cli import EXIT_OK, EXIT_USAGE, _fail, _open_store

logger = logging.getLogger("convmem.cli")


def _command_line() -> tuple[str, list[str]]:
    """How a host should start this very convmem: the absolute path of the running `convmem`
    script (a host's PATH rarely has the virtualenv's bin), else this Python with -m convmem."""
    script = Path(sys.argv[0]).absolute() if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "convmem" and os.access(script, os.X_OK):
        return str(script), []
    return sys.executable, ["-m", "convmem"]


def _host_config_snippet(data_dir: Path) -> str:
    command, prefix = _command_line()
    entry = {"mcpServers": {"convmem": {"command": command, "args": [*prefix, "serve", "--data-dir", str(data_dir)]}}}
    return orjson.dumps(entry).decode()




def _import_in_background(*modules: str) -> threading.Thread:
    """Start importing `modules` in a thread. A failure is left for the caller's own import to
    raise (Python does not keep a module whose import failed)."""

    def run() -> None:
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception:  # re-raised by the caller's own import
                logger.debug("background import of %s failed", module, exc_info=True)

    thread = threading.Thread(target=run, name="convmem-import", daemon=True)
    thread.start()
    return thread


def serve(args: argparse.Namespace) -> int:
    from convmem.tools import ToolCatalog, ToolsetError, parse_toolsets

    data_dir: Path = args.data_dir
    try:
        toolsets = parse_toolsets(args.toolsets)
    except ToolsetError as exc:
        _fail(str(exc), EXIT_USAGE)
    catalog = ToolCatalog.of(toolsets)
    tokens = None
    if args.transport in ("http", "sse"):
        from convmem.server import InsecureBindError, TokensFileError, check_bind, load_tokens

        try:
            tokens = load_tokens(args.tokens_file) if args.tokens_file else None
            check_bind(args.host, tokens)
        except (TokensFileError, InsecureBindError) as exc:
            _fail(str(exc), EXIT_USAGE)
    elif args.tokens_file:
        _fail("--tokens-file applies to --transport http and sse only", EXIT_USAGE)

    if args.transport == "stdio" and not sys.stdin.isatty():
        relayed = _relay_stdio(data_dir, toolsets)
        if relayed is not None:
            return relayed
    # The server's modules load while the store opens (mostly code that releases the GIL: file
    # reads, numpy). Over stdio that is the SDK-free server (server/fast.py: importing the MCP SDK
    # alone takes ~0.45 s, longer than opening a million messages); the SDK is imported only if
    # the session needs it, or from the start with CONVMEM_STDIO_SDK=1.
    module = args.transport
    if args.transport == "stdio" and not _sdk_stdio():
        module = "fast"
    # asyncio (~25 ms) is anyio.run's backend: imported there too rather than after the open.
    importer = _import_in_background(f"convmem.server.{module}", "asyncio")
    try:
        store = _open_store(data_dir)
    finally:
        importer.join()
    interrupted = 0
    try:
        if args.transport in ("http", "sse"):
            from convmem.server import serve_http, serve_sse

            def announce(url: str) -> None:
                scopes = "bearer tokens required" if tokens else "no tokens, loopback only"
                kind = "Streamable HTTP" if args.transport == "http" else "HTTP+SSE (legacy)"
                text = f"convmem: serving {data_dir} over {kind} at {url} ({scopes})\n"
                if not tokens:
                    text += (
                        "convmem: WARNING: loopback is not a user boundary: every local user and process "
                        "that can connect to this port can read and change this memory. Use --tokens-file "
                        "on a shared machine (an owner-only Unix socket is planned).\n"
                    )
                sys.stderr.write(text)
                sys.stderr.flush()

            try:
                serve = serve_http if args.transport == "http" else serve_sse
                stopped_by = serve(store, __version__, args.host, args.port, tokens, args.log_level,
                                   announce, catalog)
            except OSError as exc:  # mostly: the port is taken or the address is not ours
                _fail(f"cannot serve HTTP on {args.host} port {args.port}: {exc.strerror or exc}")
            return _signal_status(stopped_by)
        interrupted = _serve_stdio(store, __version__, data_dir, catalog)
    finally:
        _close_store(store, interrupted)
    if interrupted:
        # A stdin reader thread may be blocked in read() (a terminal) and cannot be cancelled;
        # the interpreter would wait for it until Enter. The store is closed: leave now.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(_signal_status(interrupted))
    return EXIT_OK


SHUTDOWN_GRACE_SECONDS = 10.0


def _close_store(store: Any, interrupted: int) -> None:
    """Close the store; after Ctrl-C or SIGTERM within SHUTDOWN_GRACE_SECONDS, else leave
    without it (os._exit): a stopped server must not linger, and nothing is lost by leaving
    (every acknowledged write is in the log already, which the next open replays; close adds a
    snapshot and releases the lock, which the exit releases too)."""
    timer = None
    if interrupted:
        def leave() -> None:
            logger.warning("the store did not close within %.0f s of the signal: leaving without "
                           "it (acknowledged writes are in the log)", SHUTDOWN_GRACE_SECONDS)
            logging.shutdown()
            os._exit(_signal_status(interrupted))

        timer = threading.Timer(SHUTDOWN_GRACE_SECONDS, leave)
        timer.daemon = True
        timer.start()
    try:
        store.close()
    finally:
        if timer is not None:
            timer.cancel()


def _sdk_stdio() -> bool:
    """Whether stdio sessions run on the MCP SDK's server from their first message
    (CONVMEM_STDIO_SDK=1; see convmem/server/fast.py, which reads it for relayed sessions)."""
    return os.environ.get("CONVMEM_STDIO_SDK") == "1"


def _signal_status(sig: int | None) -> int:
    """A server's exit status, the same for both transports: 0 when stopped by SIGTERM (a host
    or a service manager ending it) or by end of input, 130 after Ctrl-C (SIGINT)."""
    return 130 if sig == signal.SIGINT else EXIT_OK


def _relay_stdio(data_dir: Path, toolsets: tuple[str, ...]) -> int | None:
    """With another convmem process owning the store, relay this host's stdio to it as bytes
    (convmem/owner/relay.py: no MCP SDK, no store in this process); None when no process serves
    the store (this one then opens it)."""
    from convmem.owner.relay import Relay, connect_stream

    sock = connect_stream(data_dir, toolsets)
    if sock is None:
        return None
    relay = Relay(data_dir, sock, __version__, toolsets=toolsets)

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


def _serve_stdio(store: Any, version: str, data_dir: Path, catalog: Any) -> int:
    """Serve until stdin closes (returns 0) or SIGTERM/SIGINT (returns the signal's number)."""
    import anyio

    if _sdk_stdio():
        from convmem.server import serve_stdio as serve_session
    else:  # (not a name of convmem.server.stdio: importing that module imports the SDK)
        from convmem.server import serve_stdio_fast as serve_session

    got: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        got.append(signum)
        raise KeyboardInterrupt  # unwinds the wait below so the store is closed cleanly

    # The handlers before the banner, the signals unblocked (a mask is inherited across exec),
    # and everything from the banner on inside the try: a Ctrl-C right after the banner, even
    # one inside Thread.start, ends here like any other.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    # The session runs in a thread: the main thread only waits, so Ctrl-C (or SIGTERM) stops the
    # server at once even while a terminal read blocks the session's reader.
    failure: list[BaseException] = []

    def run() -> None:
        try:
            anyio.run(serve_session, store, version, catalog)
        except BaseException as exc:  # re-raised in the main thread
            failure.append(exc)

    try:
        if sys.stdin.isatty():
            sys.stderr.write(
                f"convmem: serving the memory in {data_dir} over MCP stdio.\n"
                "This command is meant to be started by an MCP host, which talks JSON-RPC on its stdin/stdout.\n"
                f"Host configuration: {_host_config_snippet(data_dir)}\n"
                "Press Ctrl-C or Ctrl-D to stop.\n"
            )
            sys.stderr.flush()
        session = threading.Thread(target=run, name="convmem-stdio", daemon=True)
        session.start()
        while session.is_alive():
            session.join(0.25)
    except KeyboardInterrupt:
        logger.info("interrupted, shutting down")
        return got[-1] if got else signal.SIGINT
    if failure:
        raise failure[0]
    return 0

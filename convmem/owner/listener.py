"""The owner's side: while a convmem process owns a store (holds its lock), it serves the store to
the other convmem processes on the same data directory through the directory's socket.

One thread accepts; each attached process gets a thread that runs its requests one at a time
against the MemoryStore (which serialises them with the store's other callers by its own lock).
Peers of another uid are refused by their credentials; the number of attached processes is
bounded. `stop()` stops accepting, lets the requests in flight finish and answers them, and
closes every connection, so that the attached processes can take over the store.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import INTERNAL_ERROR, VALIDATION_ERROR, ConvMemError
from ..tools.toolsets import ALL_TOOL_NAMES, TOOLSET_NAMES, ToolCatalog
from . import protocol

log = logging.getLogger("convmem")

MAX_PEERS = 256
EXPORT_PAGE = 2000  # messages per export_next answer (each well under the frame limit)


class OwnerListener:
    def __init__(self, store: Any, directory: Path) -> None:
        self.store = store
        self.directory = directory
        self._server: socket.socket | None = None
        self._peers: dict[socket.socket, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._accepter: threading.Thread | None = None

    def start(self) -> None:
        """Listen on the directory's socket (the caller holds the store's lock, so a socket file
        left there is a dead owner's: it is replaced)."""
        path = self.directory / protocol.SOCKET_NAME
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old_umask = os.umask(0o177)  # the socket file is created 0600
        try:
            with protocol.socket_address(self.directory) as address:
                server.bind(address)
        except OSError:
            server.close()
            raise
        finally:
            os.umask(old_umask)
        server.listen(64)
        self._server = server
        self._accepter = threading.Thread(target=self._accept, name="convmem-owner", daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        server = self._server
        assert server is not None
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed by stop()
            if self._stopping:
                conn.close()
                return
            try:
                if protocol.peer_uid(conn) != os.geteuid():
                    log.warning("refused a connection to the store's socket from another user")
                    conn.close()
                    continue
            except OSError:
                conn.close()
                continue
            with self._lock:
                if len(self._peers) >= MAX_PEERS:
                    log.warning("refused a connection: %d processes are attached already", MAX_PEERS)
                    conn.close()
                    continue
                thread = threading.Thread(target=self._serve, args=(conn,),
                                          name="convmem-owner-peer", daemon=True)
                self._peers[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        exports: dict[int, Iterator[dict[str, Any]]] = {}  # this peer's exports in progress
        try:
            while True:
                try:
                    request = protocol.receive(conn)
                except (protocol.ProtocolError, OSError):
                    return
                if request is None:
                    return
                if request.get("op") == "mcp_stream":
                    catalog = _stream_catalog(request.get("args"))
                    try:
                        if catalog is None:
                            protocol.send(conn, {"id": request.get("id"), "error": {
                                "code": VALIDATION_ERROR, "message": "unknown toolsets"}})
                            return
                        protocol.send(conn, {"id": request.get("id"), "ok": True})
                    except (protocol.ProtocolError, OSError):
                        return
                    self._stream(conn, catalog)
                    return
                answer = self._run(request, exports)
                try:
                    protocol.send(conn, answer)
                except (protocol.ProtocolError, OSError):
                    return
        finally:
            with self._lock:
                self._peers.pop(conn, None)
            conn.close()

    def _stream(self, conn: socket.socket, catalog: ToolCatalog) -> None:
        """An MCP session for a relay (convmem/owner/relay.py) on this connection, in this thread's
        own event loop, until the relay shuts its side (or stop() does) and all is answered."""
        import anyio

        from .. import __version__
        from ..server.fast import serve_stream_fast as serve_stream  # (the SDK only if the session needs it)

        conn.setblocking(False)
        try:
            anyio.run(serve_stream, self.store, __version__, conn.fileno(), catalog)
        except Exception:
            log.debug("a relayed MCP session ended with an error", exc_info=True)

    def _run(self, request: dict[str, Any], exports: dict[int, Iterator[dict[str, Any]]]) -> dict[str, Any]:
        rid = request.get("id")
        op = request.get("op")
        args = request.get("args") or {}
        try:
            if not isinstance(args, dict):
                raise ConvMemError(VALIDATION_ERROR, "args must be an object")
            return {"id": rid, "ok": self._dispatch(op, args, exports)}
        except ConvMemError as exc:
            return {"id": rid, "error": {"code": exc.code, "message": exc.message}}
        except Exception:
            log.exception("a relayed call failed unexpectedly")
            return {"id": rid, "error": {"code": INTERNAL_ERROR, "message": "internal error"}}

    def _dispatch(self, op: Any, args: dict[str, Any],
                  exports: dict[int, Iterator[dict[str, Any]]]) -> Any:
        store = self.store
        if op in ALL_TOOL_NAMES:
            return getattr(store, op)(**args)
        if op == "hello":
            return {"pid": os.getpid()}
        if op == "import_message_batch":
            answers = store.import_message_batch(
                args["items"], all_or_nothing=bool(args.get("all_or_nothing")),
                existing=args.get("existing", "conflict"))
            return protocol.encode_import_answers(answers)
        if op == "checkpoint":
            store.checkpoint()
            return None
        if op == "verify":
            return store.verify()
        if op == "backup":
            return store.backup(str(args["dest"]))
        if op == "export_start":
            if len(exports) >= 4:
                raise ConvMemError(VALIDATION_ERROR, "too many exports in progress")
            key = max(exports, default=0) + 1
            exports[key] = store.export_messages(args.get("session_id"))
            return key
        if op == "export_next":
            it = exports.get(args.get("export"))
            if it is None:
                raise ConvMemError(VALIDATION_ERROR, "no such export")
            page = []
            for item in it:
                page.append(item)
                if len(page) >= EXPORT_PAGE:
                    break
            if len(page) < EXPORT_PAGE:
                exports.pop(args.get("export"), None)
            return page
        raise ConvMemError(VALIDATION_ERROR, "unknown operation")

    def stop(self, before_close: Callable[[], None] | None = None) -> None:
        """Stop serving: no new connection; each attached process gets the answer of the request
        it has in flight, then its connection is closed (it then takes the store over)."""
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            try:
                (self.directory / protocol.SOCKET_NAME).unlink()
            except OSError:
                pass
            try:
                server.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            server.close()
        if self._accepter is not None:
            self._accepter.join(timeout=5)
        with self._lock:
            peers = list(self._peers.items())
        for conn, _ in peers:
            try:
                conn.shutdown(socket.SHUT_RD)  # a request being run still gets its answer
            except OSError:
                pass
        for _, thread in peers:
            thread.join(timeout=30)


def _stream_catalog(args: Any) -> ToolCatalog | None:
    """The tools an attached process's MCP session offers: its own --toolsets (args
    {"toolsets": [...]}, none for the contract), or None when it names one this owner lacks."""
    names = args.get("toolsets", []) if isinstance(args, dict) else []
    if not isinstance(names, list) or not all(isinstance(n, str) and n in TOOLSET_NAMES for n in names):
        return None
    return ToolCatalog.of(n for n in TOOLSET_NAMES if n in names)

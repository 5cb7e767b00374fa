"""The byte relay: `convmem serve` over stdio when another convmem process owns the store.

The relay does not run an MCP server: it asks the owner for an MCP stream on the directory's
socket (op `mcp_stream`; the owner then runs an MCP session for this connection with the same
server and transport code as its own stdio, bounded the same way) and passes the host's JSON-RPC
lines to it, and the answers back, whole lines only. It imports no MCP SDK, no numpy and no
compiled core, so a host gets its first answer a few tens of milliseconds after spawning it.

It reads each line only enough to know what is in flight (a request's id, its method and, for
tools/call, the tool's name), which is what a takeover needs. When the owner ends or is killed:

- a write tool call in flight (its bytes reached the socket, no answer came) gets a tool error,
  BUSY "may or may not have been applied" (it is never sent twice);
- any other request in flight (a read tool, tools/list, ping, ...) is sent again;
- a request not sent yet is sent to the new owner;
- the relay reconnects to whichever process now owns the store, or becomes the owner itself (it
  then imports the store and runs the session in this process over a socket pair);
- the host's `initialize` request and `notifications/initialized` are replayed to the new session
  first (the replayed initialize's answer is dropped), so the host notices nothing beyond the one
  call in flight.

Bounds: at most MAX_PENDING requests are unanswered (stdin is not read meanwhile; the owner's
session allows MAX_IN_FLIGHT of them at a time), a request line may be at most MAX_LINE_BYTES
long (a longer one is discarded up to its newline and answered with a JSON-RPC error, as the
stdio transport does), an answer line at most MAX_ANSWER_BYTES.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import select
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import orjson

from ..errors import BUSY, ConvMemError
from ..tools.toolsets import ALL_READ_TOOL_NAMES, ToolCatalog
from . import protocol

log = logging.getLogger("convmem")

MAX_LINE_BYTES = 16 * 1024 * 1024  # convmem.server.limits.MAX_REQUEST_BODY (a test checks)
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # an answer is at most the 8 MiB budget, JSON-escaped
MAX_PENDING = 64
CONNECT_SECONDS = 30.0
_CHUNK = 1 << 16
_KEPT_PREFIX = 4096
_RESPONSE = re.compile(rb'\{"jsonrpc":"2\.0","id":(-?[0-9]+|"(?:[^"\\]|\\.)*"),"(?:result|error)"')
_ID_IN_PREFIX = re.compile(rb'"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.)*")\s*[,}]')
IN_FLIGHT_WRITE = ("the process that owned the store ended during this call, which may or may not "
                   "have been applied; the store is served again: read before retrying")


def connect_stream(directory: Path, toolsets: tuple[str, ...] = ()) -> socket.socket | None:
    """A connection to the directory's owner switched to an MCP stream, or None when no process
    serves the store (or it is an older convmem without streams)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(CONNECT_SECONDS)
        with protocol.socket_address(directory) as address:
            sock.connect(address)
        protocol.send(sock, {"id": 1, "op": "mcp_stream", "args": {"toolsets": list(toolsets)}})
        answer = protocol.receive(sock)
        if answer is None or answer.get("ok") is not True:
            raise ConnectionError("the owner does not serve MCP streams")
        sock.settimeout(None)
    except (OSError, protocol.ProtocolError):
        sock.close()
        return None
    return sock


def _key(value: Any) -> tuple[bool, Any]:
    return (type(value) is str, value)


def _tool_error_line(request_id: Any, code: str, message: str) -> bytes:
    text = orjson.dumps({"status": "ERROR", "error": {"code": code, "message": message}}).decode()
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id,
                         "result": {"content": [{"text": text, "type": "text"}], "isError": True}}) + b"\n"


def _rpc_error_line(request_id: Any, code: int, message: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id,
                         "error": {"code": code, "message": message}}) + b"\n"


class _Pending:
    __slots__ = ("request_id", "line", "write", "queued")

    def __init__(self, request_id: Any, line: bytes, write: bool) -> None:
        self.request_id = request_id
        self.line = line
        self.write = write
        self.queued = True  # not (wholly or partly) sent to the current owner yet


class Relay:
    """Relays one host's stdio (fds `in_fd`, `out_fd`) to the owner's MCP stream `sock`."""

    def __init__(self, directory: Path, sock: socket.socket, version: str,
                 in_fd: int = 0, out_fd: int = 1, toolsets: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.version = version
        self.toolsets = toolsets  # this host's --toolsets: the owner serves it these tools
        self.in_fd, self.out_fd = in_fd, out_fd
        self.sock: socket.socket | None = None
        self._use(sock)
        self.pending: dict[tuple[bool, Any], _Pending] = {}
        self.queue: deque[tuple[bytes, tuple[bool, Any] | None]] = deque()
        self.head_sent = 0  # bytes of the queue's first line already sent
        self.stdin_buf = bytearray()
        self.discarding: bytes | None = None
        self.sock_buf = bytearray()
        self.init_line: bytes | None = None
        self.init_key: tuple[bool, Any] | None = None
        self.initialized_line: bytes | None = None
        self.drop: set[tuple[bool, Any]] = set()
        self.replays = 0
        self.stdin_eof = False
        self.shut = False
        self.owner: Any = None  # the SharedStore, once this process took the store over
        self._session: threading.Thread | None = None

    def _use(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.shut = False

    # -- host -> owner -------------------------------------------------------------------
    def _take_stdin(self, chunk: bytes) -> None:
        if not chunk:
            self.stdin_eof = True
            if self.discarding is not None:
                self._refuse(self.discarding)
                self.discarding = None
            elif self.stdin_buf.strip():
                self._line(bytes(self.stdin_buf) + b"\n")
            self.stdin_buf.clear()
            return
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if self.discarding is None:
                    self.stdin_buf += chunk[start:]
                    if len(self.stdin_buf) > MAX_LINE_BYTES:
                        self.discarding = bytes(self.stdin_buf[:_KEPT_PREFIX])
                        self.stdin_buf.clear()
                return
            piece = chunk[start:nl + 1]
            start = nl + 1
            if self.discarding is not None:
                self._refuse(self.discarding)
                self.discarding = None
                continue
            if self.stdin_buf:
                self.stdin_buf += piece
                piece = bytes(self.stdin_buf)
                self.stdin_buf.clear()
            if len(piece) > MAX_LINE_BYTES + 1:
                self._refuse(piece[:_KEPT_PREFIX])
            else:
                self._line(piece)

    def _refuse(self, prefix: bytes) -> None:
        match = _ID_IN_PREFIX.search(prefix)
        request_id = orjson.loads(match.group(1)) if match else None
        log.warning("refused a stdin line longer than %d bytes (request id %r); discarded up to "
                    "its newline", MAX_LINE_BYTES, request_id)
        self._out(_rpc_error_line(request_id, -32600, f"request too large: a message line may be "
                                                      f"at most {MAX_LINE_BYTES} bytes"))

    def _line(self, line: bytes) -> None:
        key = None
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            message = None  # passed on as it is: the owner's session answers or drops it
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            method = message["method"]
            if "id" in message:
                rid = message["id"]
                key = _key(rid)
                write = False
                if method == "tools/call":
                    params = message.get("params")
                    name = params.get("name") if isinstance(params, dict) else None
                    write = name not in ALL_READ_TOOL_NAMES
                elif method == "initialize":
                    self.init_line, self.init_key = line, key
                self.pending[key] = _Pending(rid, line, write)
            elif method == "notifications/initialized":
                self.initialized_line = line
            elif method == "notifications/cancelled":
                params = message.get("params")
                if isinstance(params, dict) and "requestId" in params:
                    self.pending.pop(_key(params["requestId"]), None)
        self.queue.append((line, key))

    def _send_some(self) -> bool:
        """Send queued lines until the socket is full; False when the owner is gone."""
        assert self.sock is not None
        while self.queue:
            line, key = self.queue[0]
            try:
                n = self.sock.send(memoryview(line)[self.head_sent:])
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            except OSError:
                return False
            if key is not None and key in self.pending:
                self.pending[key].queued = False  # (partly) sent: the owner may run it
            self.head_sent += n
            if self.head_sent == len(line):
                self.queue.popleft()
                self.head_sent = 0
        return True

    # -- owner -> host -------------------------------------------------------------------
    def _take_answers(self, chunk: bytes) -> bool:
        buf = self.sock_buf
        buf += chunk
        end = buf.rfind(b"\n")
        if end < 0:
            return len(buf) <= MAX_ANSWER_BYTES
        out = []
        start = 0
        while start <= end:
            nl = buf.find(b"\n", start)
            line = bytes(buf[start:nl + 1])
            start = nl + 1
            key = self._answered(line)
            if key is not None:
                if key in self.drop:
                    self.drop.discard(key)
                    continue
                self.pending.pop(key, None)
            out.append(line)
        del buf[:end + 1]
        if out:
            self._out(b"".join(out))
        return True

    @staticmethod
    def _answered(line: bytes) -> tuple[bool, Any] | None:
        """The key of the request a response line answers (None for anything else)."""
        match = _RESPONSE.match(line)
        if match is not None:
            text = match.group(1)
            return _key(orjson.loads(text) if text[:1] == b'"' else int(text))
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if isinstance(message, dict) and "method" not in message and "id" in message:
            return _key(message["id"])
        return None

    def _out(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.out_fd, view):]
            except InterruptedError:
                continue
            except BlockingIOError:
                select.select([], [self.out_fd], [])

    # -- takeover ------------------------------------------------------------------------
    def _takeover(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.sock_buf.clear()
        self.drop.clear()
        if self.queue and self.head_sent:  # partly sent: counts as sent
            self.queue.popleft()
            self.head_sent = 0
        reruns: list[tuple[bytes, tuple[bool, Any] | None]] = []
        for key, p in list(self.pending.items()):
            if p.queued:
                continue
            if p.write:
                del self.pending[key]
                self._out(_tool_error_line(p.request_id, BUSY, IN_FLIGHT_WRITE))
            else:
                p.queued = True
                reruns.append((p.line, key))
        replay: list[tuple[bytes, tuple[bool, Any] | None]] = []
        if self.init_line is not None and self.init_key not in self.pending:
            # The host's session was initialized: the new session must be too, silently.
            self.replays += 1
            rid = f"convmem-relay-initialize-{self.replays}"
            message = orjson.loads(self.init_line)
            message["id"] = rid
            self.drop.add(_key(rid))
            replay.append((orjson.dumps(message) + b"\n", None))
            if self.initialized_line is not None:
                replay.append((self.initialized_line, None))
        self.queue.extendleft(reversed(replay + reruns))
        log.info("the store's owner ended; reattaching (%d call(s) resent)", len(reruns))
        self._use(self._attach())

    def _attach(self) -> socket.socket:
        deadline = time.monotonic() + 60.0
        while True:
            sock = connect_stream(self.directory, self.toolsets)
            if sock is not None:
                return sock
            from .shared import SharedStore  # the store and the SDK: only now

            store = SharedStore.open(self.directory)
            if not store.is_owner:
                store.close()  # another process won the race: connect to it
                if time.monotonic() > deadline:
                    raise ConvMemError(BUSY, "the store's owner keeps ending")
                continue
            self.owner = store
            return self._local_session(store)

    def _local_session(self, store: Any) -> socket.socket:
        import anyio

        from ..server.fast import serve_stream_fast as serve_stream  # (the SDK only if the session needs it)

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.setblocking(False)

        def run() -> None:
            try:
                anyio.run(serve_stream, store.local_store, self.version, theirs.fileno(),
                          ToolCatalog.of(self.toolsets))
            except Exception:
                log.exception("the MCP session ended unexpectedly")
            finally:
                theirs.close()

        self._session = threading.Thread(target=run, name="convmem-session", daemon=True)
        self._session.start()
        return mine

    def _fail_all(self, exc: ConvMemError) -> None:
        for p in self.pending.values():
            if p.line.find(b'"tools/call"') >= 0:
                self._out(_tool_error_line(p.request_id, exc.code, exc.message))
            else:
                self._out(_rpc_error_line(p.request_id, -32603, f"{exc.code}: {exc.message}"))
        self.pending.clear()

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        """Relay until the host closes stdin and every request is answered (0), stdout is gone
        (1) or the store cannot be served any more (1)."""
        try:
            return self._loop()
        except BrokenPipeError:
            return 1
        finally:
            self.close()

    def _loop(self) -> int:
        poller = select.poll()
        polled_in = False
        polled_sock: int | None = None
        while True:
            assert self.sock is not None
            if self.stdin_eof and not self.queue and not self.shut:
                try:
                    self.sock.shutdown(socket.SHUT_WR)  # the owner's session ends once all is answered
                except OSError:
                    pass
                self.shut = True
            want_in = not self.stdin_eof and not self.queue and len(self.pending) < MAX_PENDING
            if want_in and not polled_in:
                poller.register(self.in_fd, select.POLLIN)
            elif polled_in and not want_in:
                poller.unregister(self.in_fd)
            polled_in = want_in
            fd = self.sock.fileno()
            if polled_sock is not None and polled_sock != fd:
                try:
                    poller.unregister(polled_sock)
                except KeyError:
                    pass
            poller.register(fd, select.POLLIN | (select.POLLOUT if self.queue else 0))
            polled_sock = fd
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            lost = False
            for efd, ev in events:
                if efd == self.in_fd:
                    try:
                        chunk = os.read(self.in_fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    except OSError as exc:
                        if exc.errno not in (errno.EIO, errno.ECONNRESET):
                            raise
                        chunk = b""
                    self._take_stdin(chunk)
                elif efd == fd:
                    if ev & select.POLLIN or ev & (select.POLLHUP | select.POLLERR):
                        try:
                            data = self.sock.recv(_CHUNK)
                        except BlockingIOError:
                            data = None
                        except OSError:
                            data = b""
                        if data == b"":
                            if self.stdin_eof and not self.pending and not self.queue:
                                return 0
                            lost = True
                        elif data is not None and not self._take_answers(data):
                            log.error("the owner sent an answer line over %d bytes", MAX_ANSWER_BYTES)
                            lost = True
                    if not lost and ev & select.POLLOUT and self.queue and not self._send_some():
                        lost = True
            if self.queue and not lost and not self._send_some():
                lost = True
            if lost:
                try:
                    poller.unregister(fd)
                except KeyError:
                    pass
                polled_sock = None
                try:
                    self._takeover()
                except ConvMemError as exc:
                    log.error("cannot serve the store any more: %s: %s", exc.code, exc.message)
                    self._fail_all(exc)
                    return 1

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self._session is not None:
            self._session.join(timeout=10)
        if self.owner is not None:
            self.owner.close()
            self.owner = None

"""JSON-RPC lines over stdio (or a stream socket) without the MCP SDK: framing, bounds and I/O.

Both stdio servers build on this module: the SDK-free one (fast.py), which answers the start of a
session before the SDK could even be imported, and the SDK's (stdio.py), which parses each line
into the SDK's models. Nothing here imports `mcp` or pydantic.

When stdin and stdout are pipes or sockets (what MCP hosts give a server they spawn), the event
loop reads and writes them itself through non-blocking descriptors (`PipeLineSource`,
`PipeLineSink`); anything else (a terminal, a regular file) is read and written in worker
threads (`ThreadLineSource`, `ThreadLineSink`), as the SDK's `stdio_server` does.

Bounds (see `StdioFlow` and `LineSource`): at most MAX_IN_FLIGHT requests are unanswered at a
time, nothing more is read while an answer waits for room in stdout, a line may be at most
MAX_LINE_BYTES long, and the end of input ends the session only once every request read has been
answered.
"""
from __future__ import annotations

import abc
import errno
import json
import logging
import os
import re
import stat
import sys
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.to_thread
import orjson

from .limits import MAX_REQUEST_BODY

if sys.platform != "win32":
    import fcntl

logger = logging.getLogger("convmem.server.stdio")

_READ_CHUNK = 1 << 16
_SHUTDOWN_DRAIN_SECONDS = 5.0  # how long answers already written may take to leave at exit
# The longest line read: the HTTP body limit, which admits every valid request of the contract.
MAX_LINE_BYTES = MAX_REQUEST_BODY
# Requests read and not yet answered. The store serialises tool calls, so more concurrency buys
# nothing; each unanswered request may hold an answer of up to the 8 MiB response budget.
MAX_IN_FLIGHT = 16
_OVERLONG_PREFIX = 4096  # bytes kept of an overlong line, to find its request id
# JSON-RPC 2.0 error codes (the SDK's mcp.types.PARSE_ERROR and INVALID_REQUEST).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
# Said once on stderr when a person types at a server whose stdin is a terminal.
TERMINAL_HINT = (
    "convmem: that line is not JSON-RPC. This server expects an MCP host to send it JSON-RPC "
    "messages, one per line; typed text is answered with a parse error and otherwise ignored. "
    "See `convmem --help` for commands a person can use (search, sessions, show). "
    "Press Ctrl-D or Ctrl-C to stop.\n"
)


def request_key(request_id: Any) -> Any:
    """The id under which a request is tracked: a string that spells an integer is that integer
    ("7" and 7 are one request), as the SDK's `coerce_request_id` has it."""
    if isinstance(request_id, str):
        try:
            return int(request_id)
        except ValueError:
            pass
    return request_id


def error_line(request_id: int | str | None, code: int, message: str) -> bytes:
    """A JSON-RPC error without `data`, as the SDK's JSONRPCError model writes it (key order
    jsonrpc, id, error; code, message), and a newline."""
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    try:
        return orjson.dumps(error) + b"\n"
    except (TypeError, orjson.JSONEncodeError):  # an id beyond 64 bits, a lone surrogate
        return json.dumps(error, separators=(",", ":")).encode() + b"\n"


class _ClosingStream(abc.ABC):
    """The async context-manager protocol of an anyio stream, over the subclass's `aclose`."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class StdioFlow:
    """What the read and the write side of one stdio connection share: which requests have been
    read and not answered yet, and whether output is blocked or lost.

    The read side hands out another line only while fewer than `max_in_flight` requests are
    unanswered and no answer is waiting for room in stdout, so a client that stops reading stops
    the server reading (its requests wait in the pipe, not in memory). At the end of input it
    reports end of stream only once every request handed out is answered, or stdout is gone:
    the SDK cancels whatever is in flight when its read stream ends.
    """

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.max_in_flight = max_in_flight
        self._unanswered: Counter[Any] = Counter()
        self._count = 0
        self._blocked = 0  # sends waiting for stdout to take more
        self.broken = False  # stdout is gone: nothing more can be answered
        self._event = anyio.Event()

    def _changed(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    def request_read(self, key: Any) -> None:
        """A request (tracked by `request_key` of its id) was handed to the server."""
        self._unanswered[key] += 1
        self._count += 1

    def settle(self, key: Any) -> None:
        """The request is answered, or its client cancelled it (then nothing answers it)."""
        if self._unanswered[key] > 0:
            self._unanswered[key] -= 1
            self._count -= 1
            if not self._unanswered[key]:
                del self._unanswered[key]
            self._changed()

    def write_blocked(self, blocked: bool) -> None:
        self._blocked += 1 if blocked else -1
        if not blocked:
            self._changed()

    def lost_output(self) -> None:
        self.broken = True
        self._changed()

    @property
    def unanswered(self) -> int:
        return self._count

    async def wait_for_room(self) -> None:
        while not self.broken and (self._blocked or self._count >= self.max_in_flight):
            await self._event.wait()

    async def wait_answered(self) -> None:
        while not self.broken and self._count:
            await self._event.wait()


_TOP_LEVEL_KEY = re.compile(rb'\s*"((?:[^"\\]|\\.)*)"\s*:\s*', re.DOTALL)
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(rb'[^,}\]\s]+')
_ID_VALUE = re.compile(rb'(-?(?:0|[1-9][0-9]*)|"(?:[^"\\]|\\.)*")\s*[,}]', re.DOTALL)


def _skip_value(buf: bytes, i: int) -> int:
    """The index after the JSON value starting at `buf[i]`; ValueError if it is cut off."""
    if i >= len(buf):
        raise ValueError("cut")
    first = buf[i : i + 1]
    if first == b'"':
        match = _STRING.match(buf, i)
        if match is None:
            raise ValueError("cut")
        return match.end()
    if first not in (b"{", b"["):
        match = _SCALAR.match(buf, i)
        if match is None:
            raise ValueError("bad")
        return match.end()
    depth = 0
    j = i
    while j < len(buf):
        ch = buf[j : j + 1]
        if ch == b'"':
            match = _STRING.match(buf, j)
            if match is None:
                raise ValueError("cut")
            j = match.end()
            continue
        if ch in (b"{", b"["):
            depth += 1
        elif ch in (b"}", b"]"):
            depth -= 1
            if not depth:
                return j + 1
        j += 1
    raise ValueError("cut")


def request_id_from_prefix(prefix: bytes) -> int | str | None:
    """The top-level `"id"` (an integer or a string) of a JSON object of which only `prefix` is
    known, if it comes before the cut; else None. Used to address the error for an overlong line:
    clients write `jsonrpc`, `id` and `method` before `params`."""
    i = len(prefix) - len(prefix.lstrip())
    if prefix[i : i + 1] != b"{":
        return None
    i += 1
    try:
        while True:
            key = _TOP_LEVEL_KEY.match(prefix, i)
            if key is None:
                return None
            i = key.end()
            if key.group(1) == b"id":
                value = _ID_VALUE.match(prefix, i)
                if value is None:
                    return None
                parsed = json.loads(value.group(1))
                return parsed if isinstance(parsed, int | str) else None
            i = _skip_value(prefix, i)
            while prefix[i : i + 1].isspace():
                i += 1
            if prefix[i : i + 1] != b",":
                return None
            i += 1
    except (ValueError, RecursionError):
        return None



class _Overlong:
    """A line longer than the cap: only its start is kept, to find the request id."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix


Reply = Callable[[bytes, Any], Awaitable[None]]  # (a whole line, the key it answers or None)


class LineSource(_ClosingStream):
    """JSON-RPC lines, one at a time, from chunks that the subclass's `_read_chunk` returns.

    Reads only when the consumer asks for a line and none is buffered, so a client that sends
    faster than the server dispatches waits in the pipe, as with the SDK's transport. With a
    `flow`, also waits while the connection's output is blocked or too many requests are
    unanswered, and holds back the end of input until they are answered (see `StdioFlow`).
    The last line is delivered at end of input even without its newline, as a text file's
    readline does. Lines end at "\\n" (a "\\r" before it is JSON whitespace); unlike the SDK's
    text-mode reader, a lone "\\r" does not end a line, which only matters to a client that ends
    messages with it.

    A line longer than `max_line` bytes is not buffered: its first bytes are kept, the rest is
    discarded up to the next newline, and `reply` (the connection's `LineSink.send_line`) gets a
    JSON-RPC error for it, addressed to the request's id if the kept bytes name one.

    With `terminal` (stdin is a terminal: a person typing), the first line that is not JSON-RPC
    also gets TERMINAL_HINT on stderr, once (see `answer_unreadable`).
    """

    def __init__(
        self,
        flow: StdioFlow | None = None,
        reply: Reply | None = None,
        max_line: int = MAX_LINE_BYTES,
        terminal: bool = False,
    ) -> None:
        self.flow = flow
        self._reply = reply
        self._max_line = max_line
        self._terminal = terminal
        self._hinted = False
        self._lines: deque[bytes | _Overlong] = deque()
        self._partial = bytearray()
        self._discarding: bytes | None = None  # the kept start of an overlong line being skipped
        self._eof = False
        self._closed = False

    @abc.abstractmethod
    async def _read_chunk(self) -> bytes:
        """The next bytes of input, b"" at its end."""

    def _overflow(self) -> None:
        self._discarding = bytes(self._partial[:_OVERLONG_PREFIX])
        self._partial.clear()

    def _fill(self, chunk: bytes) -> None:
        if not chunk:
            self._eof = True
            if self._discarding is not None:
                self._lines.append(_Overlong(self._discarding))
                self._discarding = None
            elif self._partial:
                self._lines.append(bytes(self._partial))
                self._partial.clear()
            return
        if self._discarding is not None:
            end = chunk.find(b"\n")
            if end < 0:
                return
            self._lines.append(_Overlong(self._discarding))
            self._discarding = None
            chunk = chunk[end + 1 :]
            if not chunk:
                return
        if b"\n" not in chunk:
            self._partial += chunk
            if len(self._partial) > self._max_line:
                self._overflow()
            return
        lines: list[bytes] = chunk.split(b"\n")
        tail = lines.pop()
        if self._partial:
            self._partial += lines.pop(0)
            # (a line cut across chunks may pass the cap only with its last chunk)
            whole = bytes(self._partial)
            self._lines.append(_Overlong(whole[:_OVERLONG_PREFIX]) if len(whole) > self._max_line else whole)
            self._partial.clear()
        self._lines.extend(_Overlong(x[:_OVERLONG_PREFIX]) if len(x) > self._max_line else x for x in lines)
        self._partial += tail
        if len(self._partial) > self._max_line:
            self._overflow()

    async def _send_reply(self, line: bytes) -> None:
        if self._reply is None:
            return
        try:
            await self._reply(line, None)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    async def answer_unreadable(self, raw: bytes, exc: Exception) -> None:
        """JSON-RPC's answer to a line that is not a message: -32700 when it is not JSON (or
        nests too deep to read), -32600 when it is JSON but not JSON-RPC; addressed to its id
        when one can be read from it, as HTTP answers such a body."""
        try:
            if isinstance(exc, UnicodeDecodeError):
                raise exc
            json.loads(raw)
            code, what = INVALID_REQUEST, "not a JSON-RPC message"
        except UnicodeDecodeError:
            code, what = PARSE_ERROR, "not valid UTF-8 (JSON text must be)"
        except (ValueError, RecursionError):
            code, what = PARSE_ERROR, "not valid JSON"
        request_id = request_id_from_prefix(raw[:_OVERLONG_PREFIX])
        if self._terminal:
            if not self._hinted:
                self._hinted = True
                sys.stderr.write(TERMINAL_HINT)
                sys.stderr.flush()
            logger.debug("answered a stdin line that is %s (request id %r)", what, request_id)
        else:
            logger.warning("answered a stdin line that is %s (request id %r)", what, request_id)
        await self._send_reply(error_line(request_id, code, f"the line is {what}"))

    async def _refuse(self, overlong: _Overlong) -> None:
        request_id = request_id_from_prefix(overlong.prefix)
        logger.warning(
            "refused a stdin line longer than %d bytes (request id %r); discarded up to its newline",
            self._max_line,
            request_id,
        )
        message = f"request too large: a message line may be at most {self._max_line} bytes"
        await self._send_reply(error_line(request_id, INVALID_REQUEST, message))

    async def next_line(self) -> bytes:
        """The next line (without its newline); overlong lines are answered here and skipped.
        Raises anyio.EndOfStream at the end of input (once every request read is answered)."""
        while True:
            if self.flow is not None:
                await self.flow.wait_for_room()
            while not self._lines:
                if self._closed:
                    raise anyio.ClosedResourceError
                if self._eof:
                    if self.flow is not None:
                        await self.flow.wait_answered()
                    raise anyio.EndOfStream
                try:
                    chunk = await self._read_chunk()
                except OSError as exc:
                    # A broken stdin (EIO after the host vanished, ...) ends the session like EOF.
                    if exc.errno not in (errno.EIO, errno.ECONNRESET):
                        raise
                    chunk = b""
                self._fill(chunk)
            raw = self._lines.popleft()
            if isinstance(raw, _Overlong):
                await self._refuse(raw)
                continue
            return raw

    def push_back(self, raw: bytes) -> None:
        """Make `raw` the next line `next_line` returns (a line read and not consumed)."""
        self._lines.appendleft(raw)

    async def aclose(self) -> None:
        self._closed = True


class PipeLineSource(LineSource):
    """`LineSource` over a non-blocking descriptor, read by the event loop itself."""

    def __init__(self, fd: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._fd = fd

    async def _read_chunk(self) -> bytes:
        while True:
            try:
                return os.read(self._fd, _READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
            except InterruptedError:
                continue


class ThreadLineSource(LineSource):
    """`LineSource` over a blocking descriptor (a terminal, a regular file), read in a worker
    thread as the SDK's transport does."""

    def __init__(self, fd: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._fd = fd

    async def _read_chunk(self) -> bytes:
        # Abandoned on cancellation: a read from a terminal may never return.
        return await anyio.to_thread.run_sync(os.read, self._fd, _READ_CHUNK, abandon_on_cancel=True)


class LineSink(_ClosingStream):
    """JSON-RPC lines to a descriptor, whole lines only, one at a time; see the subclasses."""

    def __init__(self, fd: int, flow: StdioFlow | None = None) -> None:
        self._fd = fd
        self.flow = flow
        self._lock = anyio.Lock(fast_acquire=True)  # one message at a time, whole lines only
        self._broken = False
        self._closed = False

    @abc.abstractmethod
    async def _write_line(self, data: memoryview) -> None: ...

    async def send_line(self, line: bytes, answered: Any = None) -> None:
        """Write `line` (ending in a newline); `answered` is the `request_key` of the request it
        answers, if any, which the flow then counts as answered. A lost reader makes this and
        every later call raise anyio.BrokenResourceError."""
        if self._closed:
            raise anyio.ClosedResourceError
        data = memoryview(line)
        async with self._lock:
            if self._broken:
                raise anyio.BrokenResourceError
            try:
                await self._write_line(data)
            except OSError as exc:
                self._broken = True
                if self.flow is not None:
                    self.flow.lost_output()
                raise anyio.BrokenResourceError from exc
            if self.flow is not None and answered is not None:
                self.flow.settle(answered)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # A send cut short by cancellation may still hold the lock; wait for it to finish its line.
        with anyio.move_on_after(_SHUTDOWN_DRAIN_SECONDS, shield=True):
            async with self._lock:
                pass


class PipeLineSink(LineSink):
    """Lines to a non-blocking descriptor, written by the event loop.

    `send_line` returns once the whole line is in the kernel's pipe buffer (like the SDK's write
    plus flush); a client that stops reading therefore holds up the writers, not the event loop,
    and (through the flow) stops the reading of further requests. A lost reader (EPIPE) makes this
    and every later send raise `anyio.BrokenResourceError`, which the SDK's dispatcher treats as a
    closed connection.
    """

    async def _write_line(self, data: memoryview) -> None:
        # Once part of the line is out, the rest must follow: a cancelled send would leave
        # half a message in the stream for the next one to be glued to.
        with anyio.CancelScope() as scope:
            while data:
                try:
                    written = os.write(self._fd, data)
                except BlockingIOError:
                    if self.flow is not None:
                        self.flow.write_blocked(True)
                    try:
                        await anyio.wait_writable(self._fd)
                    finally:
                        if self.flow is not None:
                            self.flow.write_blocked(False)
                    continue
                except InterruptedError:
                    continue
                data = data[written:]
                scope.shield = True


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        try:
            data = data[os.write(fd, data) :]
        except InterruptedError:
            continue


class ThreadLineSink(LineSink):
    """Lines to a blocking descriptor (a terminal, a regular file), written in a worker thread;
    a cancelled send still finishes its line (the thread is not abandoned)."""

    async def _write_line(self, data: memoryview) -> None:
        if self.flow is not None:
            self.flow.write_blocked(True)
        try:
            await anyio.to_thread.run_sync(_write_all, self._fd, data)
        finally:
            if self.flow is not None:
                self.flow.write_blocked(False)


def _identity(fd: int) -> tuple[int, int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mode


def loop_pipes_usable() -> bool:
    """Whether stdin and stdout are two distinct pipes or sockets that the event loop can drive.

    A terminal, a regular file or /dev/null cannot be polled (or is shared with the shell, whose
    descriptor flags must not change); stdout shared with stdin or with stderr would mix streams.
    """
    if os.name != "posix":
        return False
    ids = [_identity(fd) for fd in (0, 1, 2)]
    if ids[0] is None or ids[1] is None:
        return False
    if not all(stat.S_ISFIFO(i[2]) or stat.S_ISSOCK(i[2]) for i in ids[:2]):
        return False
    return ids[0][:2] != ids[1][:2] and (ids[2] is None or ids[1][:2] != ids[2][:2])


class _ClaimedStdio:
    """Private duplicates of fds 0 and 1 (non-blocking if `nonblocking`); meanwhile fd 0 reads
    /dev/null and fd 1 writes to stderr, so that nothing else in the process can read requests
    or corrupt the answers. Everything is put back on exit (descriptors and their blocking flags)."""

    def __init__(self, nonblocking: bool = True) -> None:
        self.nonblocking = nonblocking

    def __enter__(self) -> tuple[int, int]:
        sys.stdout.flush()
        self.in_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        self.out_fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        self.blocking = (os.get_blocking(self.in_fd), os.get_blocking(self.out_fd))
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.dup2(2, 1)
        if self.nonblocking:
            os.set_blocking(self.in_fd, False)
            os.set_blocking(self.out_fd, False)
        return self.in_fd, self.out_fd

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()  # stray prints go to stderr, not after the last answer
        if self.nonblocking:
            os.set_blocking(self.in_fd, self.blocking[0])
            os.set_blocking(self.out_fd, self.blocking[1])
        os.dup2(self.in_fd, 0)
        os.dup2(self.out_fd, 1)
        os.close(self.in_fd)
        os.close(self.out_fd)



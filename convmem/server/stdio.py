"""MCP over stdio: the process's stdin/stdout carry JSON-RPC lines, nothing else.

When stdin and stdout are pipes or sockets (what MCP hosts give a server they spawn), the event
loop reads and writes them itself through non-blocking descriptors. The SDK's `stdio_server`
instead hands every line read, every write and every flush to a worker thread: three thread
round trips per request, about a quarter of a millisecond of a search's round trip on this kind
of machine. Anything else on stdin or stdout (a terminal, a regular file) uses the SDK's
transport. Both write exactly the same bytes (see `encode_message`) and parse lines the same way
(see `parse_line`).
"""
from __future__ import annotations

import abc
import errno
import json
import os
import stat
import sys
from collections import deque
from types import TracebackType
from typing import Any, Self

import anyio
import mcp.types as types
import orjson
import pydantic
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .app import build_server

if sys.platform != "win32":
    import fcntl

_READ_CHUNK = 1 << 16
_PLAIN_RESULT_KEYS = {"content", "isError"}
_PLAIN_BLOCK_KEYS = {"text", "type"}
_SHUTDOWN_DRAIN_SECONDS = 5.0  # how long answers already written may take to leave at exit


def _recover_lone_surrogates(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """Turn a line the SDK refused as invalid JSON back into a message if only strictness failed.

    The SDK's parser rejects `"\\ud800"` (a lone surrogate escape, which RFC 8259 permits) and
    then drops the line without an answer, so the caller would wait forever. Python's json module
    accepts it; the tool layer then answers VALIDATION_ERROR like for any other bad string.
    """
    if not isinstance(item, pydantic.ValidationError):
        return item
    errors = item.errors()
    if len(errors) != 1 or errors[0]["type"] != "json_invalid" or not isinstance(errors[0].get("input"), str):
        return item
    try:
        message = types.jsonrpc_message_adapter.validate_python(json.loads(errors[0]["input"]), by_name=False)
    except (ValueError, RecursionError, pydantic.ValidationError):
        return item  # not JSON-RPC after all: the SDK logs and drops it
    return SessionMessage(message)


def parse_line(line: bytes) -> SessionMessage | Exception:
    """One stdin line as the SDK's stdio transport reads it (UTF-8 with replacement, then the
    JSON-RPC model), with lone surrogates recovered. A line that is not a message comes back as the
    exception, which the SDK logs and drops."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line.decode("utf-8", "replace"), by_name=False)
    except Exception as exc:  # the SDK's transport passes any parse failure on the same way
        return _recover_lone_surrogates(exc)
    return SessionMessage(message)


def _is_plain_tool_result(result: object) -> bool:
    """`{"content": [{"text": str, "type": "text"}], "isError": bool}`, the shape of every tool
    result convmem sends, and nothing else."""
    if type(result) is not dict or result.keys() != _PLAIN_RESULT_KEYS or type(result["isError"]) is not bool:
        return False
    content = result["content"]
    if type(content) is not list or len(content) != 1:
        return False
    block = content[0]
    return type(block) is dict and block.keys() == _PLAIN_BLOCK_KEYS and type(block["text"]) is str and block["type"] == "text"


def encode_message(item: SessionMessage) -> bytes:
    """The bytes the SDK's stdio transport writes for one message: the model's JSON
    (`model_dump_json(by_alias=True, exclude_unset=True)`) and a newline.

    A response carrying a plain tool result is encoded by orjson instead, three times faster on a
    20 KB result: for dicts, lists, strings, booleans and 64-bit integers orjson writes exactly
    pydantic's bytes (same key order, same escapes; a test checks every code point). An id beyond
    64 bits or a string orjson refuses falls back to pydantic.
    """
    message = item.message
    if type(message) is types.JSONRPCResponse and _is_plain_tool_result(message.result):
        try:
            return orjson.dumps({"jsonrpc": message.jsonrpc, "id": message.id, "result": message.result}) + b"\n"
        except (TypeError, orjson.JSONEncodeError):
            pass
    return message.__pydantic_serializer__.to_json(message, by_alias=True, exclude_unset=True) + b"\n"


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


class _ReadStreamProtocol(_ClosingStream):
    """The async-iterator protocol of an anyio receive stream, over the subclass's `receive`."""

    @abc.abstractmethod
    async def receive(self) -> SessionMessage | Exception: ...

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _LenientReadStream(_ReadStreamProtocol):
    """The SDK's stdio read stream with `_recover_lone_surrogates` applied to each item."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return _recover_lone_surrogates(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()


class PipeReadStream(_ReadStreamProtocol):
    """JSON-RPC messages from a non-blocking descriptor, one per line, read by the event loop.

    Reads only when the consumer asks for a message and none is buffered, so a client that sends
    faster than the server dispatches waits in the pipe, as with the SDK's transport. The last line
    is delivered at end of input even without its newline, as a text file's readline does. Lines
    end at "\n" (a "\r" before it is JSON whitespace); unlike the SDK's text-mode reader, a lone
    "\r" does not end a line, which only matters to a client that ends messages with it.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lines: deque[bytes] = deque()
        self._partial = bytearray()
        self._eof = False
        self._closed = False

    def _fill(self, chunk: bytes) -> None:
        if not chunk:
            self._eof = True
            if self._partial:
                self._lines.append(bytes(self._partial))
                self._partial.clear()
            return
        if b"\n" not in chunk:
            self._partial += chunk
            return
        lines = chunk.split(b"\n")
        if self._partial:
            self._partial += lines[0]
            lines[0] = bytes(self._partial)
            self._partial.clear()
        self._partial += lines.pop()
        self._lines.extend(lines)

    async def receive(self) -> SessionMessage | Exception:
        while not self._lines:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._eof:
                raise anyio.EndOfStream
            try:
                self._fill(os.read(self._fd, _READ_CHUNK))
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
            except InterruptedError:
                continue
            except OSError as exc:
                # A broken stdin (EIO after the host vanished, ...) ends the session like EOF.
                if exc.errno not in (errno.EIO, errno.ECONNRESET):
                    raise
                self._fill(b"")
        return parse_line(self._lines.popleft())

    async def aclose(self) -> None:
        self._closed = True


class PipeWriteStream(_ClosingStream):
    """JSON-RPC messages to a non-blocking descriptor, one line each, written by the event loop.

    `send` returns once the whole line is in the kernel's pipe buffer (like the SDK's write plus
    flush); a client that stops reading therefore holds up the writers, not the event loop.
    A lost reader (EPIPE) makes this and every later send raise `anyio.BrokenResourceError`,
    which the SDK's dispatcher treats as a closed connection.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock(fast_acquire=True)  # one message at a time, whole lines only
        self._broken = False
        self._closed = False

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        data = memoryview(encode_message(item))
        async with self._lock:
            # Once part of the line is out, the rest must follow: a cancelled send would leave
            # half a message in the stream for the next one to be glued to.
            with anyio.CancelScope() as scope:
                while data:
                    if self._broken:
                        raise anyio.BrokenResourceError
                    try:
                        written = os.write(self._fd, data)
                    except BlockingIOError:
                        await anyio.wait_writable(self._fd)
                        continue
                    except InterruptedError:
                        continue
                    except OSError as exc:
                        self._broken = True
                        raise anyio.BrokenResourceError from exc
                    data = data[written:]
                    scope.shield = True

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # A send cut short by cancellation may still hold the lock; wait for it to finish its line.
        with anyio.move_on_after(_SHUTDOWN_DRAIN_SECONDS, shield=True):
            async with self._lock:
                pass


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
    """Private non-blocking duplicates of fds 0 and 1; meanwhile fd 0 reads /dev/null and fd 1 writes
    to stderr, so that nothing else in the process can read requests or corrupt the answers.
    Everything is put back on exit (descriptors and their blocking flags)."""

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
        os.set_blocking(self.in_fd, False)
        os.set_blocking(self.out_fd, False)
        return self.in_fd, self.out_fd

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()  # stray prints go to stderr, not after the last answer
        os.set_blocking(self.in_fd, self.blocking[0])
        os.set_blocking(self.out_fd, self.blocking[1])
        os.dup2(self.in_fd, 0)
        os.dup2(self.out_fd, 1)
        os.close(self.in_fd)
        os.close(self.out_fd)


async def serve_stdio(store: Any, version: str) -> None:
    """Serve until stdin closes. While serving, fd 1 points at stderr, so stray output from any
    library cannot corrupt the JSON-RPC stream."""
    server = build_server(store, version)
    options = server.create_initialization_options()
    if loop_pipes_usable():
        with _ClaimedStdio() as (in_fd, out_fd):
            await server.run(PipeReadStream(in_fd), PipeWriteStream(out_fd), options)
        return
    async with stdio_server() as (read_stream, write_stream):
        await server.run(_LenientReadStream(read_stream), write_stream, options)

"""The beginning of a stdio session without the MCP SDK: spawn to first answer.

A host spawns `convmem serve` for every session and waits for the answers to `initialize` and to
its first tools/call; importing the MCP SDK alone takes ~0.45 s here (pydantic building the SDK's
models), more than opening a store of a million messages. This server answers the messages a
session is made of by itself and writes, for each, the bytes the SDK's server writes (a
differential test runs the same scripted sessions against both, tests/e2e/test_stdio_fast_path.py):

- `initialize` (once, first): the protocol version the client asks for if the SDK negotiates it
  by handshake, else the newest such; the SDK's capabilities, serverInfo and instructions;
- `notifications/initialized`, `ping`, `tools/list`;
- `tools/call` of the session's tools (calls.ToolCalls, as the SDK's server runs them: the same
  outcomes, the same threads), answered once done, several at a time;
- `notifications/cancelled` of a call in flight: the call is not run if it has not started, and
  nothing answers it (the SDK's rules; which calls of a pipelined batch have started when the
  cancel is read depends on each server's scheduling);
- lines that are not valid UTF-8 or too long, answered by lines.py for both servers alike.

Only messages of exactly the shapes the SDK is known to accept and to answer so count (see
`_plain_initialize`, `_plain_call`, ...): anything else, even what the SDK might answer the same
way (a request before `initialize`, another method, params of another shape, a batch, a line
orjson cannot read or might read otherwise than the SDK: an integer beyond 64 bits), is left to
the SDK. At the first such line this server stops reading, lets
its calls in flight finish and answer, imports the SDK and hands the connection over
(stdio.serve_handed_over): the SDK's server gets the client's `initialize` and
`notifications/initialized` replayed (the replayed answer is dropped), then that line and
everything after, so the client cannot tell. Handing over rather than serving everything keeps
the SDK the one authority on what it alone knows (each protocol version's params schemas and
error texts, the 2026-07-28 era without a handshake), instead of a copy that would drift from it;
the sessions hosts open never need it.

CONVMEM_STDIO_SDK=1 makes `convmem serve` use the SDK's server from the start (cli_serve.py);
CONVMEM_STDIO_TRACE=1 says on stderr which server answered each request and whether the SDK
was imported at that point.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

import anyio
import orjson
from anyio.abc import TaskGroup

from convmem.tools import CONTRACT, ToolCatalog

from .calls import HANDSHAKE_VERSIONS, INSTRUCTIONS, SERVER_NAME, ToolCalls, plain_result, tool_wire
from .lines import (
    LineSink,
    LineSource,
    PipeLineSink,
    PipeLineSource,
    StdioFlow,
    ThreadLineSink,
    ThreadLineSource,
    _ClaimedStdio,
    loop_pipes_usable,
    request_key,
)

_MESSAGE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_INITIALIZE_KEYS = frozenset({"protocolVersion", "capabilities", "clientInfo"})
_CLIENT_INFO_KEYS = frozenset({"name", "version", "title"})
_CALL_KEYS = frozenset({"name", "arguments", "_meta"})
_META_KEYS = frozenset({"progressToken"})
_CANCEL_KEYS = frozenset({"requestId", "reason"})
_INT64_FLOOR = 2.0**63  # orjson reads integers in [-2**63, 2**64) as integers


def sdk_forced() -> bool:
    """CONVMEM_STDIO_SDK=1: sessions run on the MCP SDK's server from their first message (a
    hidden switch: the differential test compares both servers, and an operator can rule ours out)."""
    return os.environ.get("CONVMEM_STDIO_SDK") == "1"


def trace_enabled() -> bool:
    return os.environ.get("CONVMEM_STDIO_TRACE") == "1"


def _trace(text: str) -> None:
    sys.stderr.write(f"convmem stdio trace: {text}; mcp imported: {'mcp' in sys.modules}\n")
    sys.stderr.flush()


def _is_id(value: object) -> bool:
    """A JSON-RPC request id as the SDK reads one: an integer (not a boolean) or a string."""
    return type(value) is int or type(value) is str


def _exact_numbers(value: object) -> bool:
    """Whether orjson read every number of `value` as the SDK reads it: orjson turns an integer
    beyond 64 bits into a float (the SDK keeps the integer), so any float that large might have
    been one. (Iterative: orjson nests up to 1024 levels, deeper than Python's recursion limit.)"""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())  # type: ignore[attr-defined]
        elif kind is list:
            stack.extend(item)  # type: ignore[arg-type]
        elif kind is float and not -_INT64_FLOOR < item < _INT64_FLOOR:  # type: ignore[operator]
            return False
    return True


def _plain_capabilities(capabilities: object) -> bool:
    """Client capabilities of the usual shape: each an object of `listChanged` booleans and of
    empty objects (`{"roots": {"listChanged": true}, "sampling": {}, "elicitation": {"form": {}}}`)."""
    if type(capabilities) is not dict:
        return False
    for entry in capabilities.values():
        if type(entry) is not dict:
            return False
        for name, value in entry.items():
            if not (type(value) is bool if name == "listChanged" else type(value) is dict and not value):
                return False
    return True


def _plain_initialize(params: Mapping[str, Any] | None) -> bool:
    if params is None or not params.keys() <= _INITIALIZE_KEYS or type(params.get("protocolVersion")) is not str:
        return False
    info = params.get("clientInfo")
    return (
        _plain_capabilities(params.get("capabilities"))
        and type(info) is dict
        and info.keys() <= _CLIENT_INFO_KEYS
        and type(info.get("name")) is str
        and type(info.get("version")) is str
        and all(type(value) is str for value in info.values())
    )


def _plain_call(params: Mapping[str, Any] | None) -> bool:
    if params is None or not params.keys() <= _CALL_KEYS or type(params.get("name")) is not str:
        return False
    arguments = params.get("arguments")
    if arguments is not None and type(arguments) is not dict:
        return False
    if "_meta" in params:
        meta = params["_meta"]
        if type(meta) is not dict or not meta.keys() <= _META_KEYS:
            return False
        if "progressToken" in meta and not _is_id(meta["progressToken"]):
            return False
    return True


def _plain_cancel(params: Mapping[str, Any] | None) -> bool:
    return (
        params is not None
        and params.keys() <= _CANCEL_KEYS
        and _is_id(params.get("requestId"))
        and type(params.get("reason", "")) is str
    )


def response_line(request_id: int | str, result: dict[str, Any]) -> bytes:
    """A JSON-RPC response as the SDK's stdio transport writes it (stdio.encode_message: orjson
    writes pydantic's bytes for these values). A result orjson refuses (a lone surrogate in a
    text) is left to the SDK's encoder, the one authority on its bytes."""
    try:
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + b"\n"
    except (TypeError, orjson.JSONEncodeError):
        from .stdio import encode_response

        return encode_response(request_id, result)


class FastSession:
    """One stdio session on `source` and `sink` until the end of input or the first line left to
    the SDK (see the module docstring)."""

    def __init__(self, store: Any, version: str, catalog: ToolCatalog, source: LineSource, sink: LineSink) -> None:
        self._calls = ToolCalls(store, catalog)
        self._source = source
        self._sink = sink
        self._flow = source.flow
        self._version = version
        self._tools = {"tools": [tool_wire(spec) for spec in catalog.specs]}
        self._trace = trace_enabled()
        self._in_flight: dict[Any, anyio.CancelScope] = {}  # tool calls by request_key of their id
        self._tasks: TaskGroup | None = None
        self.initialize_id: int | str | None = None  # set once `initialize` is answered
        self.replay: list[bytes] = []  # the client's initialize and initialized lines, for the SDK

    async def run(self) -> bytes | None:
        """Serve; returns None at the end of input (or when stdout is gone), else the line the
        SDK is to read next, once every call this session started has answered."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                while True:
                    try:
                        raw = await self._source.next_line()
                    except anyio.EndOfStream:
                        return None
                    if not await self._take(raw):
                        return raw
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                tasks.cancel_scope.cancel()  # the client is gone: nothing can be answered
                return None
        return None  # (cancelled: stdout was lost while a call answered)

    async def _answer(self, request_id: int | str, result: dict[str, Any], what: str) -> None:
        await self._sink.send_line(response_line(request_id, result))
        if self._trace:
            _trace(f"answered {what} (id {request_id!r}) without the SDK")

    async def _take(self, raw: bytes) -> bool:
        """Answer or note one line; False when it is the SDK's to read."""
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            await self._source.answer_unreadable(raw, exc)
            return True
        if not raw.strip():
            return True  # (the SDK's transport drops an empty line without an answer)
        try:
            message = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return False
        if type(message) is not dict or not message.keys() <= _MESSAGE_KEYS or message.get("jsonrpc") != "2.0":
            return False
        if not _exact_numbers(message):
            return False
        method = message.get("method")
        params = message.get("params")
        if type(method) is not str or ("params" in message and type(params) is not dict):
            return False
        if "id" not in message:
            return self._notification(raw, method, params)
        request_id = message["id"]
        if not _is_id(request_id) or request_key(request_id) in self._in_flight:
            return False
        if self.initialize_id is None:
            if method != "initialize" or not _plain_initialize(params):
                return False
            return await self._initialize(raw, request_id, params["protocolVersion"])
        if method == "ping" and not params:
            await self._answer(request_id, {}, method)
            return True
        if method == "tools/list" and not params:
            await self._answer(request_id, self._tools, method)
            return True
        if method == "tools/call" and _plain_call(params):
            self._start_call(request_id, params["name"], params.get("arguments"))
            return True
        return False

    async def _initialize(self, raw: bytes, request_id: int | str, requested: str) -> bool:
        # The SDK's negotiation (runner._negotiate_initialize): the client's version if it is one
        # of the handshake era's, else the newest of those.
        negotiated = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        result = {
            "capabilities": {"tools": {"listChanged": False}},
            "instructions": INSTRUCTIONS,
            "protocolVersion": negotiated,
            "serverInfo": {"name": SERVER_NAME, "version": self._version},
        }
        self.initialize_id = request_id
        self.replay.append(raw)
        await self._answer(request_id, result, "initialize")
        return True

    def _notification(self, raw: bytes, method: str, params: Mapping[str, Any] | None) -> bool:
        if self.initialize_id is None:
            return False
        if method == "notifications/initialized" and not params:
            if len(self.replay) == 1:
                self.replay.append(raw)
            return True
        if method == "notifications/cancelled" and _plain_cancel(params):
            assert params is not None
            key = request_key(params["requestId"])
            scope = self._in_flight.get(key)
            if scope is not None and not scope.cancel_called:
                scope.cancel()
                if self._flow is not None:
                    self._flow.settle(key)  # nothing will answer it
            return True
        return False

    def _start_call(self, request_id: int | str, name: str, arguments: dict[str, Any] | None) -> None:
        key = request_key(request_id)
        scope = anyio.CancelScope()  # cancelled by notifications/cancelled, even before it starts
        self._in_flight[key] = scope
        if self._flow is not None:
            self._flow.request_read(key)
        assert self._tasks is not None
        self._tasks.start_soon(self._call, scope, request_id, key, name, arguments)

    async def _call(self, scope: anyio.CancelScope, request_id: int | str, key: Any, name: str,
                    arguments: dict[str, Any] | None) -> None:
        try:
            with scope:
                outcome = await self._calls.run(name, arguments)
            if scope.cancel_called:
                return  # its client cancelled it: the SDK answers nothing either
            await self._sink.send_line(response_line(request_id, plain_result(outcome)), key)
            if self._trace:
                _trace(f"answered tools/call {name} (id {request_id!r}) without the SDK")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            assert self._tasks is not None
            self._tasks.cancel_scope.cancel()
        finally:
            del self._in_flight[key]


async def _serve(store: Any, version: str, catalog: ToolCatalog, source: LineSource, sink: LineSink) -> None:
    session = FastSession(store, version, catalog, source, sink)
    line = await session.run()
    if line is None:
        await source.aclose()
        await sink.aclose()
        return
    source.push_back(line)
    if trace_enabled():
        _trace(f"handing over to the MCP SDK at the line {line[:200]!r}")
    stdio = importlib.import_module(".stdio", __package__)
    await stdio.serve_handed_over(store, version, catalog, source, sink, session.replay, session.initialize_id)


async def serve_stdio_fast(store: Any, version: str, catalog: ToolCatalog = CONTRACT) -> None:
    """Serve stdio until stdin closes and every request read is answered: without the SDK while
    the client sends what FastSession answers, through the SDK from the first line it does not.
    While serving, fd 1 points at stderr (lines._ClaimedStdio)."""
    on_loop = loop_pipes_usable()
    source_type, sink_type = (PipeLineSource, PipeLineSink) if on_loop else (ThreadLineSource, ThreadLineSink)
    with _ClaimedStdio(nonblocking=on_loop) as (in_fd, out_fd):
        flow = StdioFlow()
        sink = sink_type(out_fd, flow=flow)
        source = source_type(in_fd, flow=flow, reply=sink.send_line, terminal=os.isatty(in_fd))
        await _serve(store, version, catalog, source, sink)


async def serve_stream_fast(store: Any, version: str, fd: int, catalog: ToolCatalog = CONTRACT) -> None:
    """One session over a stream socket `fd` (non-blocking), as `serve_stdio_fast` serves stdio:
    what the store's owner runs for each relay attached to it (convmem/owner/relay.py), so that a
    relay's first answer does not wait for the owner to import the SDK (~0.45 s). The same
    bounds as stdio; the session ends once the peer has shut its side and every request is
    answered. `catalog` is the attached process's own (its --toolsets), not the owner's."""
    if sdk_forced():
        stdio = importlib.import_module(".stdio", __package__)
        await stdio.serve_stream(store, version, fd, catalog)
        return
    flow = StdioFlow()
    sink = PipeLineSink(fd, flow=flow)
    source = PipeLineSource(fd, flow=flow, reply=sink.send_line)
    await _serve(store, version, catalog, source, sink)

"""MCP over stdio through the MCP SDK: the process's stdin/stdout carry JSON-RPC lines, nothing else.

The lines are framed, bounded and written by lines.py (no SDK there); this module parses each line
into the SDK's models (`parse_line`) and writes the SDK transport's exact bytes (`encode_message`),
so that the SDK's low-level server can run over them. `convmem serve` starts a stdio session on the
SDK-free server (fast.py) and hands the connection over to `serve_handed_over` when the client
sends something that server does not answer itself; with CONVMEM_STDIO_SDK=1 it runs
`serve_stdio` from the start, and the store's owner `serve_stream` for each relay attached to it
(else fast.serve_stream_fast).

When stdin and stdout are pipes or sockets (what MCP hosts give a server they spawn), the event
loop reads and writes them itself through non-blocking descriptors. The SDK's `stdio_server`
instead hands every line read, every write and every flush to a worker thread: three thread
round trips per request, about a quarter of a millisecond of a search's round trip on this kind
of machine.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, Self

import anyio
import mcp.types as types
import orjson
import pydantic
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage

from convmem.tools import CONTRACT, ToolCatalog

from .app import build_server
from .lines import (
    MAX_IN_FLIGHT,
    MAX_LINE_BYTES,
    TERMINAL_HINT,
    LineSink,
    LineSource,
    PipeLineSink,
    PipeLineSource,
    StdioFlow,
    ThreadLineSink,
    ThreadLineSource,
    _ClaimedStdio,
    _ClosingStream,
    loop_pipes_usable,
    request_id_from_prefix,
)

__all__ = [
    "MAX_IN_FLIGHT", "MAX_LINE_BYTES", "TERMINAL_HINT", "LineReadStream", "PipeReadStream", "PipeWriteStream",
    "SessionWriteStream", "StdioFlow", "ThreadReadStream", "ThreadWriteStream", "encode_message", "encode_response",
    "loop_pipes_usable", "parse_line", "request_id_from_prefix", "serve_handed_over", "serve_stdio", "serve_stream",
]

_PLAIN_RESULT_KEYS = {"content", "isError"}
_PLAIN_BLOCK_KEYS = {"text", "type"}


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
    """One stdin line as the SDK's stdio transport reads it (UTF-8, then the JSON-RPC model), with
    lone surrogates recovered. A line that is not a message comes back as the exception, which the
    SDK logs and drops (LineReadStream answers it instead).

    Unlike the SDK (which decodes with replacement), invalid UTF-8 is refused: JSON text is UTF-8
    (RFC 8259), Streamable HTTP and SSE refuse such a body with -32700, and replacing would store
    U+FFFD in place of what the client sent, a write the client never asked for."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
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


def encode_response(request_id: int | str, result: dict[str, Any]) -> bytes:
    """`encode_message` of a JSON-RPC response carrying `result`: what the SDK-free server falls
    back to for a result orjson cannot write (then only pydantic knows the SDK's bytes)."""
    return encode_message(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)))


def note_received(flow: StdioFlow | None, item: SessionMessage) -> None:
    """Count a request handed to the SDK in the flow; a cancelled request is settled at once,
    since the SDK answers nothing for a request its client cancelled."""
    if flow is None:
        return
    message = item.message
    if type(message) is types.JSONRPCRequest:
        flow.request_read(coerce_request_id(message.id))
    elif type(message) is types.JSONRPCNotification and message.method == "notifications/cancelled":
        rid = cancelled_request_id_from_params(message.params)
        if rid is not None:
            flow.settle(coerce_request_id(rid))


def answered_key(item: SessionMessage) -> Any:
    """The tracked id of the request `item` answers, None if it answers none."""
    message = item.message
    if (type(message) is types.JSONRPCResponse or type(message) is types.JSONRPCError) and message.id is not None:
        return coerce_request_id(message.id)
    return None


class LineReadStream(_ClosingStream):
    """The SDK's messages from a `LineSource`: each line parsed by `parse_line`. A line that is
    not a message is answered (lines.LineSource.answer_unreadable) and skipped, where the SDK
    would log it and drop it, leaving its client waiting forever."""

    def __init__(self, source: LineSource, replay: Sequence[SessionMessage] = ()) -> None:
        self.source = source
        self._replay = list(replay)  # handed out first, outside the flow (see serve_handed_over)

    async def receive(self) -> SessionMessage | Exception:
        if self._replay:
            return self._replay.pop(0)
        while True:
            raw = await self.source.next_line()
            item = parse_line(raw)
            if isinstance(item, Exception):
                if raw.strip():
                    await self.source.answer_unreadable(raw, item)
                continue
            note_received(self.source.flow, item)
            return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.source.aclose()


class PipeReadStream(LineReadStream):
    """`LineReadStream` over a non-blocking descriptor, read by the event loop itself."""

    def __init__(self, fd: int, **kwargs: Any) -> None:
        super().__init__(PipeLineSource(fd, **kwargs))


class ThreadReadStream(LineReadStream):
    """`LineReadStream` over a blocking descriptor (a terminal, a regular file), read in a worker
    thread as the SDK's transport does."""

    def __init__(self, fd: int, **kwargs: Any) -> None:
        super().__init__(ThreadLineSource(fd, **kwargs))


class SessionWriteStream(_ClosingStream):
    """The SDK's messages to a `LineSink`, in `encode_message`'s bytes. With `drop_answer_to`, the
    first answer to that request id is not written (the replayed `initialize` of a handed-over
    session: its client has had that answer already)."""

    def __init__(self, sink: LineSink, drop_answer_to: Any = None) -> None:
        self.sink = sink
        self._drop = drop_answer_to

    async def send(self, item: SessionMessage, /) -> None:
        key = answered_key(item)
        if self._drop is not None and key is not None and key == self._drop:
            self._drop = None
            return
        await self.sink.send_line(encode_message(item), key)

    async def send_line(self, line: bytes, answered: Any = None) -> None:
        await self.sink.send_line(line, answered)

    async def aclose(self) -> None:
        await self.sink.aclose()


class PipeWriteStream(SessionWriteStream):
    """Messages to a non-blocking descriptor, written by the event loop (lines.PipeLineSink)."""

    def __init__(self, fd: int, flow: StdioFlow | None = None) -> None:
        super().__init__(PipeLineSink(fd, flow))


class ThreadWriteStream(SessionWriteStream):
    """Messages to a blocking descriptor, written in a worker thread (lines.ThreadLineSink)."""

    def __init__(self, fd: int, flow: StdioFlow | None = None) -> None:
        super().__init__(ThreadLineSink(fd, flow))


async def serve_stdio(store: Any, version: str, catalog: ToolCatalog = CONTRACT) -> None:
    """Serve through the SDK until stdin closes and every request read is answered. While
    serving, fd 1 points at stderr, so stray output from any library cannot corrupt the
    JSON-RPC stream."""
    server = build_server(store, version, catalog)
    options = server.create_initialization_options()
    on_loop = loop_pipes_usable()
    reader, writer = (PipeReadStream, PipeWriteStream) if on_loop else (ThreadReadStream, ThreadWriteStream)
    with _ClaimedStdio(nonblocking=on_loop) as (in_fd, out_fd):
        flow = StdioFlow()
        write_stream = writer(out_fd, flow=flow)
        read_stream = reader(in_fd, flow=flow, reply=write_stream.send_line, terminal=os.isatty(in_fd))
        await server.run(read_stream, write_stream, options)


async def serve_handed_over(
    store: Any, version: str, catalog: ToolCatalog, source: LineSource, sink: LineSink,
    replay: Sequence[bytes], initialize_id: Any,
) -> None:
    """Continue a session that the SDK-free server (fast.py) began, on the same line source and
    sink (the line it could not answer pushed back first): the SDK's server first gets `replay`
    (the client's `initialize` request and `notifications/initialized`, as they were read), and
    the answer to the replayed `initialize` (id `initialize_id`) is dropped, so that the SDK's
    session is in the state the client brought it to and the client sees nothing of the change."""
    server = build_server(store, version, catalog)
    messages = []
    for raw in replay:
        item = parse_line(raw)
        if isinstance(item, Exception):  # (fast.py replays only lines the SDK reads as messages)
            raise item
        messages.append(item)
    key = None if initialize_id is None else coerce_request_id(initialize_id)
    write_stream = SessionWriteStream(sink, drop_answer_to=key)
    await server.run(LineReadStream(source, messages), write_stream, server.create_initialization_options())


async def serve_stream(store: Any, version: str, fd: int, catalog: ToolCatalog = CONTRACT) -> None:
    """One MCP session over a stream socket `fd` (non-blocking): what the store's owner runs for
    each relay attached to it (convmem/owner/relay.py). The same server, line streams and bounds
    as stdio; the session ends once the peer has shut its side and every request is answered.
    `catalog` is the attached process's own (its --toolsets), not the owner's."""
    server = build_server(store, version, catalog)
    options = server.create_initialization_options()
    flow = StdioFlow()
    write_stream = PipeWriteStream(fd, flow=flow)
    read_stream = PipeReadStream(fd, flow=flow, reply=write_stream.send_line)
    await server.run(read_stream, write_stream, options)

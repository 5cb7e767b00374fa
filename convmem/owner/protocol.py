"""The local protocol between a store's owner process and the convmem processes attached to it.

A Unix domain socket, `convmem.sock` inside the data directory (mode 0600, in a 0700 directory;
the owner also checks each peer's uid with SO_PEERCRED). Each message is a frame: a 4-byte
big-endian length, then that many bytes of JSON (orjson). A request is
`{"id": n, "op": name, "args": {...}}`; its answer `{"id": n, "ok": value}` or
`{"id": n, "error": {"code": ..., "message": ...}}`. Frames are bounded (MAX_FRAME) on both sides,
so no peer can make the other buffer without limit.

A request must reach the owner with exactly the arguments it was given, bad ones included, so that
the owner's validation answers it as a local store would: orjson refuses lone surrogates and
integers beyond 64 bits and writes NaN and infinities as null (which would read as "not given").
Such a message is written by the json module instead (`\\ud800` escapes, exact integers, `NaN`)
after one space, which tells the reader to read it with the json module too (orjson would read a
big integer as a float).
"""
from __future__ import annotations

import json
import math
import os
import socket
import struct
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

SOCKET_NAME = "convmem.sock"
# An answer is at most ~8 MiB (the response budget) and a request at most what HTTP accepts
# (16 MiB: a 1 MiB content can be 6 MiB once JSON-escaped); import batches are split below it.
MAX_FRAME = 24 * 1024 * 1024
_LEN = struct.Struct(">I")
_SUN_PATH_MAX = 100  # sockaddr_un.sun_path is 108 bytes on Linux; keep a margin


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def _has_non_finite(value: Any) -> bool:
    if type(value) is float:
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(v) for v in value)
    return False


def encode(message: dict[str, Any]) -> bytes:
    """The frame's JSON: orjson's, unless orjson would change or refuse a value (see above)."""
    try:
        body = orjson.dumps(message)
    except TypeError:  # a lone surrogate, an integer beyond 64 bits
        body = None
    if body is not None and not (b"null" in body and _has_non_finite(message)):
        return body
    try:
        return b" " + json.dumps(message, separators=(",", ":")).encode("ascii")
    except (TypeError, ValueError) as exc:  # (an integer of more digits than Python prints)
        raise ProtocolError(f"a message cannot be encoded: {exc}") from None


def decode(body: bytes) -> Any:
    try:
        return json.loads(body) if body[:1] == b" " else orjson.loads(body)
    except (ValueError, RecursionError) as exc:  # (orjson.JSONDecodeError is a ValueError)
        raise ProtocolError("a frame is not JSON") from exc


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    body = encode(message)
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"a frame of {len(body)} bytes is over the limit of {MAX_FRAME}")
    sock.sendall(_LEN.pack(len(body)) + body)


def receive(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame, or None when the peer closed the connection between frames."""
    head = _read_exactly(sock, _LEN.size, eof_ok=True)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ProtocolError(f"a frame of {n} bytes is over the limit of {MAX_FRAME}")
    body = _read_exactly(sock, n, eof_ok=False)
    message = decode(body)
    if not isinstance(message, dict):
        raise ProtocolError("a frame is not a JSON object")
    return message


def _read_exactly(sock: socket.socket, n: int, eof_ok: bool) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            if eof_ok and got == 0:
                return None
            raise ConnectionError("the peer closed the connection inside a frame")
        got += k
    return bytes(buf)


@contextmanager
def socket_address(directory: Path) -> Iterator[str]:
    """The address of the directory's socket. A long data directory path does not fit in
    sun_path: it is then reached through /proc/self/fd of an open descriptor of the directory
    (valid while the context is open)."""
    path = str(directory / SOCKET_NAME)
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        yield path
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_NAME}"
    finally:
        os.close(fd)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


# -- import_message_batch's answers as frames ----------------------------------------------------
def encode_import_answers(answers: list[Any]) -> list[Any]:
    """None (imported), bulk.PRESENT / bulk.DELETED, or a ConvMemError (with `.existing` when a
    compared message differs), as JSON."""
    from ..api import bulk
    from ..errors import ConvMemError

    out: list[Any] = []
    for a in answers:
        if a is None:
            out.append(None)
        elif a is bulk.PRESENT or a is bulk.DELETED:
            out.append({"answer": a.name})
        elif isinstance(a, ConvMemError):
            out.append({"code": a.code, "message": a.message, "existing": getattr(a, "existing", None)})
        else:
            raise TypeError(f"unexpected import answer {a!r}")
    return out


def decode_import_answers(values: list[Any]) -> list[Any]:
    from ..api import bulk
    from ..errors import ConvMemError

    out: list[Any] = []
    for v in values:
        if v is None:
            out.append(None)
        elif "answer" in v:
            out.append(bulk.PRESENT if v["answer"] == "PRESENT" else bulk.DELETED)
        else:
            err = ConvMemError(v["code"], v["message"])
            if v.get("existing") is not None:
                err.existing = v["existing"]  # type: ignore[attr-defined]
            out.append(err)
    return out

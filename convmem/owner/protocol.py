"""The local protocol between a store's owner process and the convmem processes attached to it.

A Unix domain socket, `convmem.sock` inside the data directory (mode 0600, in a 0700 directory;
the owner also checks each peer's uid with SO_PEERCRED). Each message is a frame: a 4-byte
big-endian length, then that many bytes of JSON (orjson). A request is
`{"id": n, "op": name, "args": {...}}`; its answer `{"id": n, "ok": value}` or
`{"id": n, "error": {"code": ..., "message": ...}}`. Frames are bounded (MAX_FRAME) on both sides,
so no peer can make the other buffer without limit.
"""
from __future__ import annotations

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


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    body = orjson.dumps(message)
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
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("a frame is not JSON") from exc
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

"""SharedStore: one memory for every convmem process on a data directory.

The first process that opens a data directory owns the store (it holds the LOCK and has the
MemoryStore) and serves it to the others through the directory's socket (listener.py). Every
later process attaches to that socket and relays its calls there. There is no daemon: the owner
is one of the processes a user started, and when it ends (its host closed it, it was killed),
the attached processes take over: the first to get the lock reopens the store from disk (the
usual recovery) and serves the rest, who reconnect. Once every process is gone, nothing holds
the store. docs/SERVER.md, "One store, many processes", says why this design.

A call in flight when the owner ends: a read is run again on the new owner (it changes
nothing); a write gets BUSY saying it may or may not have been applied (it is never sent twice:
the caller reads before retrying). SharedStore has MemoryStore's tool methods, bulk import,
export and checkpoint, so the servers and the CLI use it unchanged.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import BUSY, VALIDATION_ERROR, ConvMemError
from ..store.lock import SHARED_NOTE, holder
from ..tools.toolsets import ALL_READ_TOOL_NAMES, ALL_TOOL_NAMES
from . import protocol
from ..typed import (DeleteAnswer, HealthAnswer, ImportItem, ImportOutcome, MetadataInput,
                     Order, ReadAnswer, RebuildAnswer, Role, SearchAnswer, UpdateAnswer, View,
                     WriteAnswer)
from .listener import EXPORT_PAGE, OwnerListener

if TYPE_CHECKING:
    from ..api import MemoryStore  # (at run time only when needed: numpy and the core)

log = logging.getLogger("convmem")

ATTACH_SECONDS = 60.0  # how long to wait for an owner that is opening (recovering) the store
READ_OPS = ALL_READ_TOOL_NAMES | {"hello"}
IMPORT_BATCH_BYTES = 8 * 1024 * 1024  # a relayed import batch stays well under the frame limit


class SharedStore:
    """The store of a data directory, owned here or by another convmem process."""

    def __init__(self, directory: Path, *, attach_seconds: float = ATTACH_SECONDS) -> None:
        self.directory = Path(directory)
        self._attach_seconds = attach_seconds
        self._lock = threading.RLock()  # one relayed request at a time on the connection
        self._ids = itertools.count(1)
        self._local: MemoryStore | None = None  # while this process owns the store
        self._listener: OwnerListener | None = None
        self._sock: socket.socket | None = None
        self._closed = False
        self._attach()

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *,
             attach_seconds: float = ATTACH_SECONDS) -> "SharedStore":
        return cls(Path(directory), attach_seconds=attach_seconds)

    # -- ownership -----------------------------------------------------------------------
    @property
    def is_owner(self) -> bool:
        return self._local is not None

    @property
    def local_store(self) -> MemoryStore | None:
        """The MemoryStore while this process owns the store, else None."""
        return self._local

    def _attach(self) -> None:
        """Connect to the owner, or become it: whichever comes first."""
        from ..api import MemoryStore, heap  # (numpy and the core: only when needed)

        deadline = time.monotonic() + self._attach_seconds
        pause = 0.005
        while True:
            sock = self._connect()
            if sock is not None:
                self._sock = sock
                log.info("%s is owned by another convmem process; calls are relayed to it",
                         self.directory)
                return
            try:
                # This process holds the store from here: the blocks of its arrays freed go back
                # to the kernel (api/heap.py).
                heap.map_large_blocks_apart()
                store = MemoryStore.open(self.directory, lock_note=SHARED_NOTE)
            except ConvMemError as exc:
                if exc.code != BUSY:
                    raise
                pid, note = holder(self.directory)
                if note != SHARED_NOTE and pid is not None:
                    # A program that opened the store directly: it will never serve it.
                    raise ConvMemError(BUSY, f"the data directory is in use by process {pid}, "
                                             f"which does not share it") from None
                # A convmem process holds it and is opening the store (recovery): wait for its
                # socket.
                if time.monotonic() > deadline:
                    # (exc.message names the pid already: said once, not twice)
                    raise ConvMemError(BUSY, f"{exc.message}, which has not served it to other "
                                             f"processes within {self._attach_seconds:g} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
                continue
            listener = OwnerListener(store, self.directory)
            try:
                listener.start()
            except OSError as exc:
                store.close()
                raise ConvMemError(BUSY, f"cannot serve the store to other processes: "
                                         f"{exc.strerror or exc}") from exc
            self._local, self._listener = store, listener
            log.info("this process (pid %d) owns %s", os.getpid(), self.directory)
            return

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with protocol.socket_address(self.directory) as address:
                sock.connect(address)
            protocol.send(sock, {"id": 0, "op": "hello", "args": {}})
            answer = protocol.receive(sock)
            if answer is None or "ok" not in answer:
                raise ConnectionError("no answer to hello")
        except (OSError, protocol.ProtocolError):
            sock.close()
            return None
        return sock

    def _drop_connection(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    # -- calls ---------------------------------------------------------------------------
    def _call(self, op: str, args: dict[str, Any]) -> Any:
        with self._lock:
            if self._closed:
                raise ConvMemError("INTERNAL_ERROR", "the store is closed")
            for attempt in range(3):
                if self._local is not None:
                    return self._run_local(op, args)
                if self._sock is None or not _alive(self._sock):
                    self._drop_connection()
                    self._attach()
                    continue
                try:
                    return self._relay(op, args)
                except _NotSent:
                    # The owner had gone before the request reached it: nothing was run.
                    self._drop_connection()
                    self._attach()
                except _NoAnswer:
                    self._drop_connection()
                    self._attach()
                    if op not in READ_OPS or attempt == 2:
                        raise ConvMemError(BUSY, "the process that owned the store ended during "
                                                 "this call, which may or may not have been "
                                                 "applied; the store is served again: read "
                                                 "before retrying") from None
                    # a read changes nothing: it runs again on the new owner
            raise ConvMemError(BUSY, "the store's owner keeps ending; try again")

    def _run_local(self, op: str, args: dict[str, Any]) -> Any:
        store = self._local
        assert store is not None
        if op == "import_message_batch":
            return store.import_message_batch(args["items"], all_or_nothing=args.get("all_or_nothing", False),
                                              existing=args.get("existing", "conflict"))
        return getattr(store, op)(**args)

    def _relay(self, op: str, args: dict[str, Any]) -> Any:
        assert self._sock is not None
        rid = next(self._ids)
        try:
            protocol.send(self._sock, {"id": rid, "op": op, "args": args})
        except OSError as exc:
            raise _NotSent from exc
        except protocol.ProtocolError as exc:
            # Nothing was sent: arguments over the frame limit (far over every field's own) or
            # not encodable at all. A local store would have refused them too.
            raise ConvMemError(VALIDATION_ERROR, f"{op}: the arguments cannot be sent to the "
                                                 f"store's owner ({exc})") from None
        try:
            answer = protocol.receive(self._sock)
        except (OSError, protocol.ProtocolError) as exc:
            raise _NoAnswer from exc
        if answer is None or answer.get("id") != rid:
            raise _NoAnswer
        if "error" in answer:
            err = answer["error"]
            raise ConvMemError(err["code"], err["message"])
        return answer.get("ok")

    # -- MemoryStore's methods -----------------------------------------------------------
    # The same signatures as MemoryStore's (a test compares them); the arguments given travel
    # to wherever the store is, which validates them.
    def write_message(self, *, session_id: str, role: Role, content: str,
                      metadata_json: str | None = None,
                      metadata: MetadataInput | None = None) -> WriteAnswer:
        return self._call("write_message", _given(locals()))

    def update_message(self, *, message_id: str, content: str | None = None,
                       metadata_json: str | None = None, expected_revision: int | None = None,
                       metadata: MetadataInput | None = None) -> UpdateAnswer:
        return self._call("update_message", _given(locals()))

    def read_messages(self, *, view: View | None = None, limit: int | None = None,
                      cursor: str | None = None, session_id: str | None = None,
                      message_id: str | None = None, content_offset: int | None = None,
                      content_limit: int | None = None, expected_revision: int | None = None,
                      before: int | None = None, after: int | None = None,
                      relation_depth: int | None = None,
                      relation_types_json: str | None = None, order: Order | None = None,
                      snippet_bytes: int | None = None) -> ReadAnswer:
        return self._call("read_messages", _given(locals()))

    def search_messages(self, *, query: str, session_id: str | None = None,
                        filters_json: str | None = None, min_importance: int | None = None,
                        context_size: int | None = None, limit: int | None = None,
                        snippet_bytes: int | None = None,
                        cursor: str | None = None) -> SearchAnswer:
        return self._call("search_messages", _given(locals()))

    def delete_message(self, *, message_id: str, session_id: str | None = None) -> DeleteAnswer:
        return self._call("delete_message", _given(locals()))

    def rebuild_index(self) -> RebuildAnswer:
        return self._call("rebuild_index", {})

    def get_system_health(self) -> HealthAnswer:
        return self._call("get_system_health", {})

    def __getattr__(self, name: str) -> Any:
        """The tools of the optional toolsets (tools/toolsets.py), relayed like the seven."""
        if name in ALL_TOOL_NAMES:
            return lambda **kwargs: self._call(name, kwargs)
        raise AttributeError(name)

    def checkpoint(self) -> None:
        self._call("checkpoint", {})

    @contextlib.contextmanager
    def deferring_snapshots(self) -> Iterator[None]:
        """MemoryStore.deferring_snapshots while this process owns the store; an attached one
        leaves the snapshots to the owner's cadence."""
        local = self._local
        if local is None:
            yield
            return
        with local.deferring_snapshots():
            yield

    def verify(self) -> dict[str, Any]:
        return self._call("verify", {})

    def backup(self, dest: str | os.PathLike[str]) -> dict[str, Any]:
        return self._call("backup", {"dest": os.fspath(Path(dest).absolute())})

    def import_message_batch(self, items: Sequence[ImportItem], *, all_or_nothing: bool = False,
                             existing: Literal["conflict", "compare"] = "conflict",
                             ) -> list[ImportOutcome]:
        """MemoryStore.import_message_batch, here or at the owner (in parts of bounded size)."""
        if self.is_owner:
            return self._call("import_message_batch", {"items": items, "all_or_nothing": all_or_nothing,
                                                       "existing": existing})
        out: list[ImportOutcome] = []
        for part in _by_size(items, IMPORT_BATCH_BYTES) if not all_or_nothing else [items]:
            answers = self._call("import_message_batch", {"items": part, "all_or_nothing": all_or_nothing,
                                                          "existing": existing})
            out += protocol.decode_import_answers(answers)
        return out

    def import_messages(self, items: Iterable[ImportItem], *, batch_size: int = 1000) -> int:
        """MemoryStore.import_messages, here or at the owner."""
        from ..api import bulk  # (numpy and the core: not on the relay's fast path)

        return bulk.import_all(self, items, batch_size)

    def export_messages(self, session_id: str | None = None) -> Iterator[ImportItem]:
        if self._local is not None:
            yield from self._local.export_messages(session_id)
            return
        key = self._call("export_start", {"session_id": session_id})
        while True:
            page = self._call("export_next", {"export": key})
            yield from page
            if len(page) < EXPORT_PAGE:
                return

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._listener is not None:
                self._listener.stop()
                self._listener = None
            if self._local is not None:
                self._local.close()
                self._local = None
            self._drop_connection()

    def __enter__(self) -> "SharedStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NotSent(Exception):
    """The connection failed before the whole request was sent: the owner ran nothing."""


class _NoAnswer(Exception):
    """The request was sent, but no answer came: the owner may or may not have run it."""


def _alive(sock: socket.socket) -> bool:
    """Whether the owner's end is still open (an owner that stopped has closed it: EOF)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _given(args: dict[str, Any]) -> dict[str, Any]:
    """A method's keyword arguments (its locals() but self), None values included: a required
    argument given as None must reach the store, which refuses it by name (VALIDATION_ERROR);
    dropped, it would make the store's call itself fail."""
    return {name: value for name, value in args.items() if name != "self"}


def _by_size(items: Sequence[Any], limit: int) -> Iterator[list[Any]]:
    """Consecutive parts of `items` of at most `limit` bytes of content each (at least one item)."""
    part: list[Any] = []
    size = 0
    for item in items:
        n = 6 * len(str(item.get("content", ""))) + 1024 if isinstance(item, dict) else 1024
        if part and size + n > limit:
            yield part
            part, size = [], 0
        part.append(item)
        size += n
    if part:
        yield part

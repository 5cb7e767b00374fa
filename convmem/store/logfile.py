"""The append-only log: a 48-byte header, then framed records (docs/FORMAT.md).

An append is written, then fdatasync'ed: at once (`append`), or on the flusher thread of
`convmem._core.syncer` while the caller does its in-memory work (`begin_append`, then
`finish_append` or `abort_append`). The log's size, the end its readers see, moves only when the
flush has succeeded; a failed append is cut back off the file so that nothing partial or unflushed
stays behind.
"""
from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path

from .._core import codec, pysyncer, syncer
from ..errors import CORRUPT_STORE, IO_ERROR, ConvMemError
from .io import IoCounters, fsync_dir, open_file, pwrite_all, write_all

LOG_NAME = "messages.log"
log = logging.getLogger("convmem")
_FDATASYNC = os.fdatasync  # see _flusher


class LogFile:
    def __init__(self, path: Path, fd: int, log_id: bytes, base_sequence: int, size: int,
                 io: IoCounters) -> None:
        self.path = path
        self.fd = fd
        self.log_id = log_id
        self.base_sequence = base_sequence
        self.size = size  # the end of the flushed records
        self.io = io
        # Set when the log was renamed into place (rebuild_index) and the directory fsync that
        # makes the rename durable failed: no append is acknowledged until it succeeds.
        self.dir_sync_pending = False
        # Set when a failed append could not be cut back off the file (a double fault): its
        # record may be whole and valid there, and would come back at the next open. No append
        # is accepted until the cut succeeds (each tries it again first), and close tries too.
        self.cut_back_pending = False
        self._syncer = syncer.Syncer()  # its thread starts with the first begin_append
        self._in_flight: tuple[int, int, pysyncer.Syncer | syncer.Syncer] | None = None

    # -- opening -------------------------------------------------------------------------
    read_only = False  # (set by open(read_only=True): no append, truncate only in memory)

    @classmethod
    def open(cls, path: Path, io: IoCounters, read_only: bool = False) -> "LogFile":
        """Open the log, creating it with a fresh header when missing or empty; a log that
        cannot be opened or read is IO_ERROR naming it."""
        try:
            fd = open_file(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT)
        except FileNotFoundError as exc:
            raise ConvMemError(IO_ERROR, f"{path.parent} holds no store") from exc
        except OSError as exc:
            raise ConvMemError(IO_ERROR, f"cannot open {path}: {exc.strerror or exc}") from exc
        try:
            size = os.fstat(fd).st_size
            if size == 0 and read_only:
                raise ConvMemError(IO_ERROR, f"{path.parent} holds no store (its log is empty)")
            if size == 0:
                log_id = os.urandom(16)
                write_all(fd, codec.encode_log_header(log_id, 0), io)
                os.fsync(fd)
                io.flush_calls += 1
                fsync_dir(path.parent, io)
                return cls(path, fd, log_id, 0, codec.LOG_HEADER_SIZE, io)
            head = os.pread(fd, codec.LOG_HEADER_SIZE, 0)
            try:
                log_id, base = codec.decode_log_header(head)
            except codec.CorruptRecord as exc:
                version = int.from_bytes(head[8:12], "little") if len(head) >= 12 else None
                if head[:8] == codec.LOG_MAGIC and version != codec.FORMAT_VERSION:
                    raise ConvMemError(
                        CORRUPT_STORE, f"{path} is a log of format_version {version}; this "
                        f"convmem reads format_version {codec.FORMAT_VERSION}") from exc
                raise ConvMemError(
                    CORRUPT_STORE, f"log header is damaged at byte offset 0: {exc.reason}"
                ) from exc
            logfile = cls(path, fd, log_id, base, size, io)
            logfile.read_only = read_only
            return logfile
        except OSError as exc:
            os.close(fd)
            raise ConvMemError(IO_ERROR, f"cannot read {path}: {exc.strerror or exc}") from exc
        except BaseException:
            os.close(fd)
            raise

    def map(self) -> mmap.mmap | None:
        """A read-only map of the whole file for scanning (None for an empty body)."""
        if self.size <= codec.LOG_HEADER_SIZE:
            return None
        return mmap.mmap(self.fd, self.size, access=mmap.ACCESS_READ)

    # -- writing -------------------------------------------------------------------------
    def append(self, data: bytes | bytearray) -> int:
        """Append and fdatasync; returns the offset where `data` starts."""
        self._settle()
        offset = self.size
        try:
            pwrite_all(self.fd, data, offset, self.io)
            os.fdatasync(self.fd)
            self.io.flush_calls += 1
        except OSError as exc:
            self._cut_back(offset)
            raise ConvMemError(IO_ERROR, f"log append failed: {exc.strerror or exc}") from exc
        self.size = offset + len(data)
        return offset

    def begin_append(self, data: bytes | bytearray) -> int:
        """Write `data` at the end and start its fdatasync on the flusher thread; returns its
        offset. The append counts only once finish_append() has returned; until then exactly one
        of finish_append() and abort_append() must follow, and nothing else may write."""
        if self._in_flight is not None:
            raise RuntimeError("an append is already in flight")
        self._settle()
        offset = self.size
        flusher = self._flusher()
        try:
            pwrite_all(self.fd, data, offset, self.io)
            flusher.start(self.fd, offset, len(data))
        except OSError as exc:
            self._cut_back(offset)
            raise ConvMemError(IO_ERROR, f"log append failed: {exc.strerror or exc}") from exc
        self._in_flight = (offset, offset + len(data), flusher)
        return offset

    def finish_append(self) -> None:
        """Wait for the started append's flush: on success the record is durable and part of the
        log; on failure it is cut back off and IO_ERROR is raised."""
        offset, end, flusher = self._take_in_flight()
        try:
            flusher.wait()
        except OSError as exc:
            self._cut_back(offset)
            raise ConvMemError(IO_ERROR, f"log append failed: {exc.strerror or exc}") from exc
        self.io.flush_calls += 1
        self.size = end

    def abort_append(self) -> None:
        """Withdraw the started append (the caller's work for it failed): wait for its flush,
        then cut the record back off the file."""
        offset, _, flusher = self._take_in_flight()
        try:
            flusher.wait()
            self.io.flush_calls += 1
        except OSError:
            pass
        self._cut_back(offset)

    def _settle(self) -> None:
        """What an earlier fault left to do before anything more is appended."""
        if self.read_only:
            raise ConvMemError(IO_ERROR, "the store is open read-only")
        if self.cut_back_pending:
            self._cut_back(self.size)
            if self.cut_back_pending:
                raise ConvMemError(IO_ERROR, "the log still ends with a failed write that could "
                                             "not be cut off; no write is accepted until it is")
        if not self.dir_sync_pending:
            return
        try:
            fsync_dir(self.path.parent, self.io)
        except OSError as exc:
            raise ConvMemError(IO_ERROR, "the log's directory entry is not durable yet "
                                         f"(directory fsync failed: {exc.strerror or exc})") from exc
        self.dir_sync_pending = False
        # Set when a failed append could not be cut back off the file (a double fault): its
        # record may be whole and valid there, and would come back at the next open. No append
        # is accepted until the cut succeeds (each tries it again first), and close tries too.
        self.cut_back_pending = False

    def _take_in_flight(self) -> tuple[int, int, pysyncer.Syncer | syncer.Syncer]:
        if self._in_flight is None:
            raise RuntimeError("no append is in flight")
        started, self._in_flight = self._in_flight, None
        return started

    def _flusher(self) -> pysyncer.Syncer | syncer.Syncer:
        # The compiled flusher calls fdatasync(2) itself. Fault-injection tests replace
        # os.fdatasync to make flushes fail; a replaced one is honoured by flushing through it.
        if os.fdatasync is _FDATASYNC:
            return self._syncer
        return pysyncer.Syncer()

    def _cut_back(self, size: int) -> None:
        """Remove whatever part of a failed append reached the file (durably)."""
        try:
            if os.fstat(self.fd).st_size != size:
                os.ftruncate(self.fd, size)
                self.io.truncate_calls += 1
                os.fdatasync(self.fd)
                self.io.flush_calls += 1
        except OSError as exc:
            if not self.cut_back_pending:
                log.error("log: a failed write could not be cut off the end of %s (%s); no "
                          "write is accepted until it is", self.path, exc.strerror or exc)
            self.cut_back_pending = True
            return
        self.cut_back_pending = False

    def truncate(self, size: int) -> None:
        """Cut the file to `size` durably (torn-tail repair); in a read-only store only the
        end the readers see moves (the tail stays in the file, never served)."""
        if self.read_only:
            self.size = size
            return
        try:
            os.ftruncate(self.fd, size)
            self.io.truncate_calls += 1
            os.fsync(self.fd)
            self.io.flush_calls += 1
        except OSError as exc:
            raise ConvMemError(IO_ERROR, f"log truncate failed: {exc.strerror or exc}") from exc
        self.size = size

    # -- reading -------------------------------------------------------------------------
    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise ConvMemError(CORRUPT_STORE, f"log record at byte offset {offset} is cut short")
        return data

    def close(self) -> None:
        if self._in_flight is not None:  # (not reached: callers finish what they begin)
            self.abort_append()
        if self.cut_back_pending and self.fd >= 0:
            self._cut_back(self.size)
            if self.cut_back_pending:
                log.error("log: %s still ends with a write that failed; it may be read back "
                          "at the next open", self.path)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

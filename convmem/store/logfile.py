"""The append-only log: a 48-byte header, then framed records (docs/FORMAT.md).

Every append is written and fdatasync'ed before it returns; a failed append is cut back off the
file so that nothing partial stays behind.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

from .._core import codec
from ..errors import CORRUPT_STORE, IO_ERROR, ConvMemError
from .io import IoCounters, fsync_dir, write_all

LOG_NAME = "messages.log"


class LogFile:
    def __init__(self, path: Path, fd: int, log_id: bytes, base_sequence: int, size: int,
                 io: IoCounters) -> None:
        self.path = path
        self.fd = fd
        self.log_id = log_id
        self.base_sequence = base_sequence
        self.size = size
        self.io = io

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, io: IoCounters) -> "LogFile":
        """Open the log, creating it with a fresh header when missing or empty."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
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
                raise ConvMemError(
                    CORRUPT_STORE, f"log header is damaged at byte offset 0: {exc.reason}"
                ) from exc
            return cls(path, fd, log_id, base, size, io)
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
        offset = self.size
        try:
            os.lseek(self.fd, offset, os.SEEK_SET)
            write_all(self.fd, data, self.io)
            os.fdatasync(self.fd)
            self.io.flush_calls += 1
        except OSError as exc:
            self._cut_back(offset)
            raise ConvMemError(IO_ERROR, f"log append failed: {exc.strerror or exc}") from exc
        self.size = offset + len(data)
        return offset

    def _cut_back(self, size: int) -> None:
        """Remove whatever part of a failed append reached the file."""
        try:
            if os.fstat(self.fd).st_size != size:
                os.ftruncate(self.fd, size)
                self.io.truncate_calls += 1
                os.fdatasync(self.fd)
                self.io.flush_calls += 1
        except OSError:
            # The next open finds a torn tail and truncates it: still nothing partial served.
            pass

    def truncate(self, size: int) -> None:
        """Cut the file to `size` durably (torn-tail repair)."""
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
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

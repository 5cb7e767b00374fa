"""One process owns a data directory: an exclusive flock on `LOCK`, which names the holder's pid."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import BUSY, IO_ERROR, ConvMemError
from .io import open_file

LOCK_NAME = "LOCK"


SHARED_NOTE = "shared"  # the holder serves the store on the directory's socket (convmem/owner)


class DirLock:
    """Holds `LOCK` in a data directory until `release()`; a second holder gets BUSY at once.

    The file says who holds it: the pid, and `note` (SHARED_NOTE when the holder serves the
    store to other processes, so that they know whether waiting for its socket makes sense)."""

    def __init__(self, directory: Path, note: str = "") -> None:
        self.path = directory / LOCK_NAME
        try:
            fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise ConvMemError(IO_ERROR, f"cannot open {self.path}: {exc.strerror or exc}") from exc
        _lock_or_busy(fd, fcntl.LOCK_EX, self.path)
        # The pid is informational (the flock is the lock): rewrite it in place, best effort
        # (a full disk or a failing write must not stop the owner from opening).
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{note}\n".encode(), 0)
        except OSError:
            pass
        self._fd: int | None = fd

    @classmethod
    def shared(cls, directory: Path) -> "DirLock":
        """A reader's lock for a read-only store: a shared flock on an existing LOCK opened
        read-only (BUSY while an owner holds it), none when there is no LOCK (a copy)."""
        self = cls.__new__(cls)
        self.path = directory / LOCK_NAME
        self._fd = None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return self
        except OSError as exc:
            raise ConvMemError(IO_ERROR, f"cannot open {self.path}: {exc.strerror or exc}") from exc
        _lock_or_busy(fd, fcntl.LOCK_SH, self.path)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _lock_or_busy(fd: int, mode: int, path: Path) -> None:
    """flock(fd, mode) without waiting; BUSY naming the holder, or IO_ERROR (fd closed on both)."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        who = f"process {holder}" if holder else "another process"
        raise ConvMemError(BUSY, f"the data directory is in use by {who}") from None
    except OSError as exc:
        os.close(fd)
        raise ConvMemError(IO_ERROR, f"cannot lock {path}: {exc.strerror or exc}") from exc


def _read_pid(fd: int) -> int | None:
    pid, _ = _read_holder(fd)
    return pid


def _read_holder(fd: int) -> tuple[int | None, str]:
    try:
        lines = os.pread(fd, 64, 0).decode("ascii", "replace").split("\n")
    except OSError:
        return None, ""
    pid = int(lines[0]) if lines[0].strip().isdigit() else None
    return pid, lines[1].strip() if len(lines) > 1 else ""


def holder(directory: Path) -> tuple[int | None, str]:
    """(pid, note) of the lock's holder as its file says (None, "" when unknown)."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None, ""
    try:
        return _read_holder(fd)
    finally:
        os.close(fd)

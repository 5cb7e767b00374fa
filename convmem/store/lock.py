"""One process owns a data directory: an exclusive flock on `LOCK`, which names the holder's pid."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import BUSY, IO_ERROR, ConvMemError
from .io import open_file

LOCK_NAME = "LOCK"


class DirLock:
    """Holds `LOCK` in a data directory until `release()`; a second holder gets BUSY at once."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        try:
            fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise ConvMemError(IO_ERROR, f"cannot open {self.path}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise ConvMemError(BUSY, f"data directory is in use by {who}") from None
        except OSError as exc:
            os.close(fd)
            raise ConvMemError(IO_ERROR, f"cannot lock {self.path}: {exc.strerror or exc}") from exc
        # The pid is informational (the flock is the lock): rewrite it in place, best effort
        # (a full disk or a failing write must not stop the owner from opening).
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None

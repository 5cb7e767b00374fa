"""The key that signs read cursors: 32 random bytes in `cursor.key`, made once per data directory
so that cursors stay valid across restarts."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import IO_ERROR, ConvMemError
from .io import IoCounters, write_file_atomically

CURSOR_KEY_NAME = "cursor.key"
KEY_BYTES = 32


def load_cursor_key(directory: Path, io: IoCounters, create: bool = True) -> bytes:
    """The directory's key; a new one (written atomically, made durable) when missing or not
    KEY_BYTES long. Without `create` (a read-only store) a missing key is made for this process
    only: its cursors then last as long as it does."""
    path = directory / CURSOR_KEY_NAME
    try:
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConvMemError(IO_ERROR, f"cannot read {path}: {exc.strerror or exc}") from exc
    key = os.urandom(KEY_BYTES)
    if not create:
        return key
    try:
        write_file_atomically(path, [key], io)
    except OSError as exc:
        raise ConvMemError(IO_ERROR, f"cannot write {path}: {exc.strerror or exc}") from exc
    return key

"""Logical I/O counters and the few file-system primitives that must be done exactly right."""
from __future__ import annotations

import os
from dataclasses import dataclass, asdict
from pathlib import Path


@dataclass
class IoCounters:
    """What the store asked of the file system since it was opened (health's `io`)."""

    write_bytes: int = 0
    write_calls: int = 0
    flush_calls: int = 0
    truncate_calls: int = 0
    replace_calls: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def write_all(fd: int, data: bytes | memoryview, io: IoCounters) -> None:
    """os.write until every byte is written; each system call is counted."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        io.write_calls += 1
        io.write_bytes += n
        view = view[n:]


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int, io: IoCounters) -> None:
    """os.pwrite at `offset` until every byte is written; each system call is counted."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        io.write_calls += 1
        io.write_bytes += n
        offset += n
        view = view[n:]


def fsync_dir(directory: Path, io: IoCounters) -> None:
    """Make a rename or a new file's directory entry durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
        io.flush_calls += 1
    finally:
        os.close(fd)


def write_file_atomically(path: Path, chunks, io: IoCounters, mode: int = 0o644) -> int:
    """Write chunks to `path.tmp`, fsync, rename over `path`, fsync the directory.

    A crash leaves either the old file or the new one. Returns the new file's size.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    size = 0
    try:
        for chunk in chunks:
            write_all(fd, chunk, io)
            size += len(chunk)
        os.fsync(fd)
        io.flush_calls += 1
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    io.replace_calls += 1
    fsync_dir(path.parent, io)
    return size


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass

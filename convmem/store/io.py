"""Logical I/O counters and the few file-system primitives that must be done exactly right.

Every file of a store is private to its owner (FILE_MODE) and is opened without following a
symbolic link (O_NOFOLLOW), so that a link planted in the data directory cannot redirect a write;
temporary files are created exclusively (O_EXCL) after any leftover of that name is removed.
"""
from __future__ import annotations

import logging
import mmap
import os
import stat
from dataclasses import dataclass, asdict
from pathlib import Path

from ..errors import IO_ERROR, ConvMemError

log = logging.getLogger("convmem")

DIR_MODE = 0o700
FILE_MODE = 0o600
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


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


def open_file(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """os.open of a store file: never through a symbolic link, not inherited by children."""
    return os.open(path, flags | NOFOLLOW | CLOEXEC, mode)


def create_exclusively(path: Path, flags: int = os.O_WRONLY) -> int:
    """A new, empty private file at `path` (whatever was there, a planted link included, is
    removed first; O_EXCL then refuses anything that appears meanwhile)."""
    _unlink_quietly(path)
    return open_file(path, flags | os.O_CREAT | os.O_EXCL)


def drop_pages(mm: mmap.mmap, lo: int, hi: int) -> None:
    """Drop the pages over mm[lo:hi] from the process (MADV_DONTNEED; the first page from its
    start). For read-only maps of a file only: touched again, a page is read back from the page
    cache. On a private map it would throw away the changes. Only the memory figure is at stake:
    where the call is refused, nothing happens."""
    start = lo - lo % mmap.PAGESIZE
    if hi <= start or not hasattr(mmap, "MADV_DONTNEED"):
        return
    try:
        mm.madvise(mmap.MADV_DONTNEED, start, hi - start)
    except (OSError, ValueError):
        pass


def write_file_atomically(path: Path, chunks, io: IoCounters) -> int:
    """Write chunks to `path.tmp`, fsync, rename over `path`, fsync the directory.

    A crash leaves either the old file or the new one. Returns the new file's size.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = create_exclusively(tmp)
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


def prepare_data_dir(directory: Path) -> None:
    """Create the data directory private to its owner, or check an existing one: refused when
    another user owns it or anyone else may write to it (they could replace its files); a warning
    when others may read it. Store files readable by others (an older convmem made them 0644)
    are made private."""
    try:
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        st = os.stat(directory)
    except OSError as exc:
        raise ConvMemError(IO_ERROR, f"cannot create the data directory {directory}: "
                                     f"{exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise ConvMemError(IO_ERROR, f"the data directory {directory} is not a directory")
    if st.st_uid != os.geteuid():
        raise ConvMemError(IO_ERROR, f"the data directory {directory} belongs to another user "
                                     f"(uid {st.st_uid}); refusing to use it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConvMemError(IO_ERROR, f"the data directory {directory} is writable by other users "
                                     f"(mode {stat.S_IMODE(st.st_mode):o}); refusing to use it "
                                     f"(chmod 700 it)")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the data directory %s can be read by other users (mode %o): the "
                    "conversations it holds are private; chmod 700 it", directory,
                    stat.S_IMODE(st.st_mode))
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            # fchmod on a descriptor opened without following a link: a link planted since the
            # scandir cannot redirect the chmod (os.chmod(follow_symlinks=False) needs lchmod).
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | os.O_CLOEXEC)
            try:
                if os.fstat(fd).st_mode & 0o077:
                    os.fchmod(fd, FILE_MODE)
                    log.warning("made %s private to its owner (mode 600)", entry.path)
            finally:
                os.close(fd)
        except OSError as exc:  # e.g. read-only media: the store opens read-only and says so
            log.warning("could not make %s private to its owner: %s", entry.path, exc)

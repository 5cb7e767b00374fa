"""rebuild_index's files: the compacted log (live versions only, in creation order), its snapshot,
and the switch that puts both in place, under one error contract (docs/FORMAT.md section 7).

The contract: `write_compacted_log` and the snapshot write touch only the two new files; any
failure removes them and leaves the store as it was (OLD). `switch` then renames the new log over
the old one. Until that rename is known to have happened the store is OLD (a failure removes the
new files); once it has, the store is NEW whatever fails after it: the caller must adopt the new
log at once, because the name a restart opens now holds it. A failure after the rename (the
directory fsync, the snapshot's rename) is reported in `Switched.error`; a restart is still
right (a snapshot whose log_id does not match the log is rebuilt from the log), and the store
keeps writes from being acknowledged until the directory entry is durable (LogFile.dir_sync_pending).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._core import codec
from ..errors import IO_ERROR, ConvMemError
from .io import IoCounters, create_exclusively, fsync_dir, write_all
from .logfile import LOG_NAME, LogFile
from .records import read_payload_at
from .snapshot import SNAPSHOT_NAME, SnapshotError, read_snapshot, write_snapshot
from .spill import SpillFile, SpilledDataChanged

log = logging.getLogger("convmem")

COMPACT_NAME = "messages.log.compact"  # rebuild_index's new log before it is renamed
NEXT_SNAPSHOT_NAME = SNAPSHOT_NAME + ".next"  # and its snapshot
_FLUSH_EVERY = 1 << 20  # bytes of frames gathered per write
_SPAN_CHUNK = 65536  # records' spans turned into Python ints at a time


@dataclass
class CompactedLog:
    """The new log, written and fsynced under COMPACT_NAME, still open (fd)."""

    path: Path
    fd: int
    log_id: bytes
    base_sequence: int
    size: int
    offsets: np.ndarray  # of each record, in the order the versions were given
    lengths: np.ndarray
    last_record_offset: int
    update_records: int  # versions with revision > 1: they stay update records

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        remove_quietly(self.path)


def write_compacted_log(directory: Path, old: LogFile, span_offsets: np.ndarray,
                        span_lengths: np.ndarray, last_seq: int, io: IoCounters) -> CompactedLog:
    """Copy the records at (span_offsets[i], span_lengths[i]) in the old log, each checked, into
    a new log whose sequence numbers end at `last_seq`. IO_ERROR or CORRUPT_STORE leave no new
    file. The spans are read _SPAN_CHUNK at a time as Python ints (all of them at once were
    ~110 bytes a message of tuples and ints: 1.1 GB at 10M messages)."""
    path = directory / COMPACT_NAME
    n = len(span_offsets)
    base = last_seq - n
    log_id = os.urandom(16)
    fd = -1
    try:
        fd = create_exclusively(path, os.O_RDWR)
        header = codec.encode_log_header(log_id, base)
        write_all(fd, header, io)
        pos = len(header)
        offsets = np.zeros(n, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.uint32)
        pending: list[bytes] = []
        pending_size = 0
        last_off = -1
        updated = 0
        for i, off, length in _spans(span_offsets, span_lengths):
            data, poff, plen = read_payload_at(old, off, length)
            if codec.message_revision(data, poff, plen) > 1:
                updated += 1
            frame = codec.encode_record(codec.REC_MESSAGE, base + i + 1, data[poff:poff + plen])
            offsets[i] = pos
            lengths[i] = len(frame)
            last_off = pos
            pos += len(frame)
            pending.append(frame)
            pending_size += len(frame)
            if pending_size >= _FLUSH_EVERY:
                write_all(fd, b"".join(pending), io)
                pending, pending_size = [], 0
        if pending:
            write_all(fd, b"".join(pending), io)
        os.fsync(fd)
        io.flush_calls += 1
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        remove_quietly(path)
        if isinstance(exc, OSError):
            raise ConvMemError(IO_ERROR, "rebuild_index failed; the store is unchanged") from exc
        raise
    return CompactedLog(path, fd, log_id, base, pos, offsets, lengths, last_off, updated)


def _spans(offsets: np.ndarray, lengths: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(i, offset, length) of each span, made into Python ints a chunk at a time."""
    for lo in range(0, len(offsets), _SPAN_CHUNK):
        hi = lo + _SPAN_CHUNK
        yield from zip(range(lo, lo + len(offsets[lo:hi])), offsets[lo:hi].tolist(),
                       lengths[lo:hi].tolist())


@dataclass
class Rebuilt:
    """rebuild_index's new files, written and fsynced under their own names, not yet in place."""

    new: CompactedLog
    snapshot_tmp: Path
    meta: dict[str, Any]  # the new snapshot's, for the state adopted after the switch
    arrays: dict[str, np.ndarray]
    messages: int


def write_rebuild(directory: Path, old: LogFile, catalog: Any,
                  log_meta: Callable[[bytes], dict[str, Any]], io: IoCounters) -> Rebuilt:
    """The compacted log of `catalog`'s live versions and its snapshot, under COMPACT_NAME and
    NEXT_SNAPSHOT_NAME (`log_meta(log_id)`: the meta that ties a snapshot to its log). IO_ERROR
    or CORRUPT_STORE leave no new file: the store is unchanged."""
    live_slots = catalog.live_slots()
    live_docs = catalog.slot_doc.data[live_slots]
    span_offsets = catalog.doc_offset.data[live_docs]
    span_lengths = catalog.doc_len.data[live_docs]
    n = len(live_docs)
    new_index, old_to_new = catalog.index.compacted()
    snapshot_tmp = directory / NEXT_SNAPSHOT_NAME
    new = write_compacted_log(directory, old, span_offsets, span_lengths, catalog.last_seq, io)
    spill = SpillFile(directory, io)  # (the new index's large postings: store/spill.py)
    try:
        # The new records by new doc number (index.compacted renumbers the docs).
        new_docs = old_to_new[live_docs.astype(np.int64)]
        doc_offset = np.zeros(n, dtype=np.int64)
        doc_len = np.zeros(n, dtype=np.uint32)
        doc_offset[new_docs] = new.offsets
        doc_len[new_docs] = new.lengths
        meta, arrays = catalog.compacted_state(live_slots, old_to_new, new_index, doc_offset,
                                               doc_len, spill.take, spill.min_bytes)
        spill.drop_pages()
        meta.update(log_meta(new.log_id), covered_end=new.size, last_seq=catalog.last_seq,
                    last_record_offset=new.last_record_offset, update_records=new.update_records,
                    deleted_messages=0, live_bytes=int(doc_len.sum()))
        # The new snapshot waits under its own name; the switch renames both.
        write_snapshot(snapshot_tmp, meta, arrays, io)
    except BaseException as exc:
        new.discard()
        remove_quietly(snapshot_tmp)
        if isinstance(exc, (OSError, SpilledDataChanged)):
            raise ConvMemError(IO_ERROR, "rebuild_index failed; the store is unchanged") from exc
        raise
    finally:
        spill.close()  # (the mappings it made stay while the new state holds them)
    return Rebuilt(new, snapshot_tmp, meta, arrays, n)


@dataclass
class Switched:
    """The outcome of a switch that put the new log in place (the store is NEW)."""

    log: LogFile
    error: str  # "" or what failed after the rename (the store is NEW all the same)
    dir_synced: bool  # whether the log's rename is known durable


def switch(directory: Path, new: CompactedLog, snapshot_tmp: Path, io: IoCounters) -> Switched:
    """Rename the new log over the old one, then its snapshot (see the module docstring).

    Raises IO_ERROR, with both new files removed, when the store is still OLD; returns Switched
    once it is NEW.
    """
    log_path = directory / LOG_NAME
    try:
        os.replace(new.path, log_path)
        io.replace_calls += 1
    except OSError as exc:
        if not _holds(log_path, new.fd):
            new.discard()
            remove_quietly(snapshot_tmp)
            raise ConvMemError(IO_ERROR, "rebuild_index failed; the store is unchanged") from exc
        # The rename happened although it reported an error: the store is NEW.
    errors: list[str] = []
    dir_synced = True
    try:
        fsync_dir(directory, io)
    except OSError as exc:
        dir_synced = False
        errors.append(f"directory fsync after the log's rename failed: {exc.strerror or exc}")
    try:
        os.replace(snapshot_tmp, directory / SNAPSHOT_NAME)
        io.replace_calls += 1
        if dir_synced:
            fsync_dir(directory, io)
    except OSError as exc:
        remove_quietly(snapshot_tmp)
        errors.append(f"the new snapshot could not be put in place: {exc.strerror or exc}")
    logfile = LogFile(log_path, new.fd, new.log_id, new.base_sequence, new.size, io)
    logfile.dir_sync_pending = not dir_synced
    new.fd = -1
    return Switched(logfile, "; ".join(errors), dir_synced)


def mapped_state(directory: Path, rebuilt: Rebuilt, growable: Callable[[str], bool] | None = None,
                 ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The state a store adopts after a switch that put the new snapshot in place: that file,
    mapped as an open maps it, rather than the arrays it was written from. Those are anonymous
    memory the size of the whole state, held until the process ends (at 1M messages the
    process stayed at 566 MB of it against 21 MB after an open); the file's pages are the page
    cache's (`growable`: read_snapshot's). Every section is checksummed as it is read back, and
    its pages leave the process once checked (`drop_checked`: at 10M messages 4.8 GB stayed).
    Should the file not read back (I/O error, damage), the arrays are used, as before."""
    try:
        meta, arrays = read_snapshot(directory / SNAPSHOT_NAME, growable=growable,
                                     drop_checked=True)
        if meta.get("log_id") == rebuilt.meta.get("log_id"):
            return meta, arrays
        why = "it belongs to another log"
    except (OSError, SnapshotError, ValueError, TypeError) as exc:
        why = str(exc)
    log.warning("rebuild_index: the new snapshot did not read back (%s); its state stays in "
                "memory", why)
    return rebuilt.meta, rebuilt.arrays


def _holds(path: Path, fd: int) -> bool:
    """Whether `path` names the file open as `fd`."""
    try:
        st, own = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        pass

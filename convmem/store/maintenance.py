"""`convmem verify` and `convmem backup`: check every byte of a store, and copy a live one.

verify reads the whole log (every record's frame and checksum), every snapshot section's checksum,
and decodes every posting list of the snapshot's index, and says what it found; it changes
nothing. backup writes a store that opens by itself: the log up to a moment, a snapshot of the
state at that moment, and the cursor key, each written atomically and made durable.
"""
from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .._core import codec, index as core_index
from ..errors import IO_ERROR, ConvMemError
from .cursor_key import CURSOR_KEY_NAME
from .io import IoCounters, prepare_data_dir, write_file_atomically
from .logfile import LOG_NAME, LogFile
from .recovery import Records, find_damage
from .snapshot import SNAPSHOT_NAME, SnapshotError, read_snapshot, write_snapshot

_COPY_CHUNK = 1 << 20


def verify(directory: Path, logfile: LogFile) -> dict[str, Any]:
    """What a full check of the files finds: `ok` is False on any damage."""
    records = 0
    damage: list[dict[str, Any]] = []
    end = os.fstat(logfile.fd).st_size  # the whole file (a read-only store may have a tail)
    mm = mmap.mmap(logfile.fd, end, access=mmap.ACCESS_READ) if end > codec.LOG_HEADER_SIZE else None
    if mm is not None:
        try:
            def count(found: Records) -> None:
                nonlocal records
                records += len(found[0])

            damage = [{"offset": lo, "bytes": hi - lo, "reason": why}
                      for lo, hi, why in find_damage(mm, end, count)]
        finally:
            mm.close()
    snapshot = _verify_snapshot(directory / SNAPSHOT_NAME, logfile)
    return {"ok": not damage and not snapshot.startswith("damaged"), "log_bytes": end,
            "log_records": records, "log_damage": damage, "snapshot": snapshot}


def _verify_snapshot(path: Path, logfile: LogFile) -> str:
    try:
        meta, arrays = read_snapshot(path)  # every section's checksum, none deferred
    except FileNotFoundError:
        return "absent (the next open replays the log)"
    except (SnapshotError, ValueError, TypeError) as exc:
        return f"damaged: {exc}"
    if meta.get("log_id") != logfile.log_id.hex():
        return "stale: written for another log (the next open rebuilds it from the log)"
    ix = {k[3:]: a for k, a in arrays.items() if k.startswith("ix.") and not k.startswith("ix.bm_")}
    try:
        # Without the stored block maxima, adopting the index decodes and checks every list.
        core_index.SearchIndex.from_arrays(ix)
    except (ValueError, KeyError, TypeError) as exc:
        return f"damaged: the search index: {exc}"
    return "ok"


def backup(dest: Path, logfile: LogFile, log_end: int, meta: dict[str, Any],
           arrays: dict[str, np.ndarray], cursor_key: Path) -> dict[str, Any]:
    """Write a store to `dest` (new or empty) holding the log up to `log_end` and the snapshot
    (`meta`, `arrays`) of the state at that point. `logfile` is read through a descriptor of its
    own, so a rebuild_index meanwhile does not disturb the copy."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ConvMemError(IO_ERROR, f"backup destination {dest} is not empty")
    prepare_data_dir(dest)
    io = IoCounters()
    fd = os.dup(logfile.fd)
    try:
        def chunks():
            pos = 0
            while pos < log_end:
                data = os.pread(fd, min(_COPY_CHUNK, log_end - pos), pos)
                if not data:
                    raise ConvMemError(IO_ERROR, "the log ended before the backup's point")
                pos += len(data)
                yield data

        try:
            write_file_atomically(dest / LOG_NAME, chunks(), io)
            write_snapshot(dest / SNAPSHOT_NAME, meta, arrays, io)
            if cursor_key.exists():
                write_file_atomically(dest / CURSOR_KEY_NAME, [cursor_key.read_bytes()], io)
        except OSError as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise ConvMemError(IO_ERROR, f"backup to {dest} failed: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return {"status": "OK", "path": str(dest), "log_bytes": log_end,
            "bytes_written": io.write_bytes}

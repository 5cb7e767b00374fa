"""MemoryStore's snapshots: when one is due (the cadence and the back-off after a failure), and
the job that writes one from frozen sections, here or on a thread of its own.

A snapshot bounds the replay at the next open; it is never needed for correctness, so a failed
one is reported in health (last_error) and retried later, never raised out of a committed write.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import INTERNAL_ERROR, IO_ERROR, ConvMemError
from ..store.background import background_thread
from ..store.io import IoCounters
from ..store import spill as spill_mod
from ..store.snapshot import SnapshotError, read_snapshot, write_snapshot
from ..store.spill import SpillFile

log = logging.getLogger("convmem")

SNAPSHOT_EVERY_RECORDS = 50_000
SNAPSHOT_RETRY_SECONDS = 30.0  # after a failed periodic snapshot (a full disk), at the earliest
SNAPSHOT_FAILED = "IO_ERROR: snapshot write failed"  # how last_error starts after a failure


class Cadence:
    """When the next periodic snapshot is due: every max(SNAPSHOT_EVERY_RECORDS, docs / 4)
    records (its cost grows with the store, so the interval does too: replay after a crash stays
    under a quarter of the store); after a failure, only once as many records again have come
    and SNAPSHOT_RETRY_SECONDS have passed (each attempt writes the whole state)."""

    __slots__ = ("retry",)

    def __init__(self) -> None:
        self.retry: tuple[int, float] | None = None  # (unsaved records, time) at the failure

    def due(self, unsaved: int, n_docs: int) -> bool:
        every = max(SNAPSHOT_EVERY_RECORDS, n_docs // 4)
        if unsaved < every:
            return False
        if self.retry is None:
            return True
        records, at = self.retry
        return unsaved >= records + every and time.monotonic() - at >= SNAPSHOT_RETRY_SECONDS

    def failed(self, records: int) -> None:
        self.retry = (records, time.monotonic())

    def succeeded(self) -> None:
        self.retry = None


def failure(exc: BaseException) -> tuple[str, ConvMemError]:
    """(health's last_error, the error to raise) for a snapshot that failed with `exc`: IO_ERROR
    for the file system, INTERNAL_ERROR for the rest (a merge past the index's limits, memory)."""
    if isinstance(exc, OSError):
        return (f"{SNAPSHOT_FAILED}: {exc.strerror or exc}",
                ConvMemError(IO_ERROR, "snapshot write failed"))
    return (f"{SNAPSHOT_FAILED}: {type(exc).__name__}: {exc}",
            ConvMemError(INTERNAL_ERROR, f"snapshot failed: {exc}"))


def foreground_state(catalog: Any, spill: SpillFile | None) -> tuple[dict[str, Any],
                                                                       dict[str, np.ndarray]]:
    """Catalog.snapshot_state for a snapshot written here; with `spill`, the merged index's
    large posting data moved to its file first, and the pages the character lists read of it
    dropped after (store/spill.py). The spill is closed if this fails (else by the job)."""
    if spill is None:
        return catalog.snapshot_state()
    try:
        state = catalog.snapshot_state(spill.take, spill.min_bytes)
    except BaseException:
        spill.close()
        raise
    spill.drop_pages()
    return state


def adopt_snapshot_postings(path: Path, index: Any) -> None:
    """The index's spilled posting data read from the snapshot just written at `path` instead,
    which holds the same bytes: the spill file's blocks go back to the file system now, not when
    the index next merges its segment (a server that imported millions of messages would hold
    them unseen until then)."""
    try:
        _, arrays = read_snapshot(path, verify=False)
    except (OSError, SnapshotError) as exc:
        log.warning("the spilled posting data stays in its file: cannot map the snapshot (%s)",
                    exc)
        return
    data = {name.removeprefix("ix.post_data_"): arr for name, arr in arrays.items()
            if name.startswith("ix.post_data_")}
    index.adopt_postings(data, spill_mod.spilled)


class SnapshotJob:
    """One snapshot's write (checksums, file, fsync, rename) from frozen sections; run here or
    on a thread of its own, which touches nothing of the store's."""

    def __init__(self, path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray],
                 index_sections: Callable[[], dict[str, np.ndarray]] | None, io: IoCounters,
                 catalog: Any, records: int, log_id: bytes, spill: SpillFile | None = None,
                 ) -> None:
        self.path, self.meta, self.arrays, self.io = path, meta, arrays, io
        self.spill = spill  # (closed once the sections are written: store/spill.py)
        self.index_sections = index_sections  # (Catalog.freeze_state: merged here)
        self.catalog, self.records, self.log_id = catalog, records, log_id
        self.error: Exception | None = None
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        try:
            if self.index_sections is not None:
                self.arrays.update(self.index_sections())
            write_snapshot(self.path, self.meta, self.arrays, self.io)
        except Exception as exc:  # (reported by MemoryStore._snapshot_done, under the mutex)
            self.error = exc
        finally:
            self.arrays = {}  # (the sections' memory goes as soon as they are written)
            self.index_sections = None
            if self.spill is not None:
                self.spill.close()  # (its mappings stay, in the index)
                self.spill = None

    def start(self) -> None:
        self._thread = background_thread(self.run, "convmem-snapshot")
        self._thread.start()

    def finished(self) -> bool:
        return self._thread is None or not self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
